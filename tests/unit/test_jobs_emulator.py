"""The job emulator on loopback: real worker processes, real TCP, iterations at the expected pace."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.jobs.launcher import JobRun
from leveller.jobs.spec import RunConfig, WorkerPlace
from tests.helpers.net import free_port_block

LOOP = WorkerPlace("127.0.0.1")


def test_push_pace_is_compute_plus_communication(tmp_path: Path) -> None:
    # 0.2 s compute + 0.2 s of bytes at a kernel-paced 100 Mbit/s -> ~0.4 s per iteration.
    log = tmp_path / "j.log"
    spec = RunConfig("pace", (LOOP, LOOP), compute_s=0.2, comm_s=0.2, rate_bps=100e6,
                     port=free_port_block(2), duration_s=6.0, pace=True)
    times: list[float] = []
    def on_line(rank: int, line: str) -> None:
        if rank == 0:
            times.append(float(line.rsplit("t=", 1)[1]))

    with JobRun(spec, log=str(log), on_line=on_line) as job:
        results = job.wait()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    n = results[0].iterations
    assert n >= 6 and abs(results[1].iterations - n) <= 1
    mean = (times[-1] - times[0]) / (len(times) - 1)
    assert 0.3 <= mean <= 0.8, mean  # compute alone would be 0.2, no pacing ~0.2
    assert results[0].received == results[1].sent == results[1].iterations * spec.bytes_per_iteration
    assert results[0].sent == 0
    log_lines = log.read_text().splitlines()
    assert sum("rank=0" in line for line in log_lines) == n + 1  # iter=0 .. iter=n


def test_ring_every_worker_sends_and_receives_each_iteration() -> None:
    spec = RunConfig("ring", (LOOP, LOOP, LOOP), compute_s=0.05, comm_s=0.01, rate_bps=1e9, pattern="ring",
                     port=free_port_block(3), iterations=4)
    with JobRun(spec) as job:
        results = job.wait()
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert [r.iterations for r in results] == [4, 4, 4]
    assert all(r.sent == r.received == 4 * spec.bytes_per_iteration for r in results)


def test_worker_failure_is_reported_not_hung() -> None:
    # Worker 1 listens on an address that cannot be bound here: it fails, the launcher stops worker 0.
    spec = RunConfig("bad", (LOOP, WorkerPlace("192.0.2.1")), compute_s=0.1, comm_s=0.1, rate_bps=1e6,
                     port=free_port_block(2), duration_s=60.0)
    with JobRun(spec) as job:
        results = job.wait()
    assert results[1].returncode not in (0, None)
    assert "OSError" in results[1].stderr or "Errno" in results[1].stderr


def test_slack_overlaps_the_exchange_with_the_compute_and_announces_the_wait(tmp_path: Path) -> None:
    # 0.4 s compute, 0.2 s of paced bytes starting 0.3 s before the compute ends: ~0.4 s per
    # iteration instead of ~0.6 s, and every iteration announces that it can wait 0.1 s.
    import re

    from leveller.jobs.control import COMM_PATTERN

    log = tmp_path / "j.log"
    spec = RunConfig("ovl", (LOOP, LOOP), compute_s=0.4, comm_s=0.2, rate_bps=100e6, port=free_port_block(2),
                     iterations=8, pace=True, slack_s=0.3)
    with JobRun(spec, log=str(log)) as job:
        results = job.wait()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    lines = log.read_text().splitlines()
    ends = [float(m["t"]) for line in lines if (m := re.search(r"rank=1 iter=(\d+) t=(?P<t>[0-9.]+)", line))]
    mean = (ends[-1] - ends[0]) / (len(ends) - 1)
    assert 0.38 <= mean <= 0.52, mean  # without the overlap: >= 0.6
    comm = [m for line in lines if (m := COMM_PATTERN.search(line)) and "rank=1" in line]
    assert len(comm) == 8 and all(float(m["wait"]) == 0.1 for m in comm)


def test_a_shift_file_delays_one_iteration_start_to_the_plans_phase(tmp_path: Path) -> None:
    import re
    import time

    from leveller.jobs.control import ShiftOrder, shift_path, write_shift

    log, shift = tmp_path / "j.log", shift_path(tmp_path, "sh")
    start_at = time.time() + 2.0
    write_shift(shift, ShiftOrder("sh", 7, start_at, 100.0))
    spec = RunConfig("sh", (LOOP, LOOP), compute_s=0.1, comm_s=0.01, rate_bps=1e9, port=free_port_block(2),
                     iterations=3, shift_file=str(shift))
    with JobRun(spec, log=str(log)) as job:
        results = job.wait()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    text = log.read_text()
    assert len(re.findall(r"leveller-shift job=sh rank=\d plan=7 ", text)) == 2  # each rank, once
    first_end = min(float(m) for m in re.findall(r"iter=1 t=([0-9.]+)", text))
    assert start_at + 0.1 <= first_end <= start_at + 0.6  # the first iteration started on the phase


def test_compute_time_changes_mid_run(tmp_path: Path) -> None:
    # 0.05 s compute for the first 1.5 s, then 0.3 s: iterations get ~0.25 s longer
    spec = RunConfig("drift", (LOOP, LOOP), compute_s=0.05, comm_s=0.01, rate_bps=1e9, port=free_port_block(2),
                     duration_s=4.0, compute_changes=((1.5, 0.3),))
    times: list[float] = []
    def on_line(rank: int, line: str) -> None:
        if rank == 0:
            times.append(float(line.rsplit("t=", 1)[1]))

    with JobRun(spec, on_line=on_line) as job:
        results = job.wait()
        start = job.started_at
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    gaps = [(b, b - a) for a, b in zip(times, times[1:])]
    before = [g for t, g in gaps if t < start + 1.4]
    after = [g for t, g in gaps if t > start + 2.0]
    assert before and after
    assert max(before) < 0.2 and min(after) > 0.25, (before, after)


def test_compute_changes_are_validated() -> None:
    from leveller.errors import UserError
    from leveller.jobs.spec import parse_compute_change

    assert parse_compute_change("30:0.5") == (30.0, 0.5)
    with pytest.raises(UserError, match="--compute-change"):
        parse_compute_change("30")
    for bad in (((0.0, 1.0),), ((5.0, 1.0), (4.0, 1.0)), ((5.0, -1.0),)):
        with pytest.raises(UserError, match="--compute-change"):
            RunConfig("j", (LOOP, LOOP), 0.1, 0.1, 1e9, duration_s=10, compute_changes=bad)
