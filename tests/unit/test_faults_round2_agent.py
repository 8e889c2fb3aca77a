"""Issue 26, round 2, agent findings: 17 (a job restarted in a truncated or replaced log keeps its old
iteration count) and the lock-name collision of the agent's lock files (`a-b`/`c` and `a`/`b-c`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from tests.fakes import RecordingEnforcer

T0 = 1_700_000_000.0


def _agent(log: Path) -> tuple[Agent, RateTracker]:
    tailer, tracker = LogTailer(str(log)), RateTracker()
    return Agent("h1", [(tailer, tracker)], None, RecordingEnforcer()), tracker  # type: ignore[arg-type]


def _lines(*items: tuple[int, float]) -> str:
    return "".join(format_line("gpt", n, t) + "\n" for n, t in items)


def _restart_truncated(log: Path) -> None:
    with log.open("r+") as f:  # same inode, size down (the job's launcher opened it with O_TRUNC)
        f.truncate(0)


def _restart_replaced(log: Path) -> None:
    log.unlink()  # another inode under the same path


@pytest.mark.parametrize("restart", [_restart_truncated, _restart_replaced], ids=["truncated", "replaced"])
def test_a_job_restarted_in_its_log_starts_a_new_run(tmp_path: Path, restart: object) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    agent, tracker = _agent(log)
    with log.open("a") as f:
        f.write(_lines(*((n, T0 + n) for n in range(10))))
    agent.poll_logs(T0 + 10)
    assert tracker.jobs["gpt"].iterations == 9 and tracker.jobs["gpt"].start_time == T0
    restart(log)  # type: ignore[operator]
    agent.poll_logs(T0 + 11)
    with log.open("a") as f:
        f.write(_lines((0, T0 + 100), (1, T0 + 101)))
    agent.poll_logs(T0 + 102)
    agent.poll_logs(T0 + 102)  # a replaced log is found at the poll after the old one's end
    p = tracker.jobs["gpt"]
    assert (p.iterations, p.start_time) == (1, T0 + 100), (p.iterations, p.start_time)
    assert [n for n, _ in p.recent] == [1]


def test_a_job_that_goes_on_counting_after_logrotate_keeps_its_run(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    agent, tracker = _agent(log)
    with log.open("a") as f:
        f.write(_lines(*((n, T0 + n) for n in range(10))))
    agent.poll_logs(T0 + 10)
    os.rename(log, tmp_path / "job.log.1")  # logrotate: the job reopens a new file and goes on counting
    agent.poll_logs(T0 + 11)
    log.write_text(_lines((10, T0 + 12), (11, T0 + 13)))
    agent.poll_logs(T0 + 14)
    agent.poll_logs(T0 + 14)
    p = tracker.jobs["gpt"]
    assert (p.iterations, p.start_time) == (11, T0)


def test_a_restart_is_counted_once_per_truncation(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(_lines((0, T0)))
    tailer = LogTailer(str(log), from_start=True)
    assert tailer.poll() and tailer.restarts == 0
    _restart_truncated(log)
    tailer.poll()
    tailer.poll()
    assert tailer.restarts == 1


# --- leftover: lock names -------------------------------------------------------------------------------

@pytest.mark.parametrize(("one", "other"), [(("c", "a-b"), ("b-c", "a")), (("eth0", "host"), ("eth0", None)),
                                            (("x-y", "n"), ("y", "n-x"))])
def test_two_interfaces_never_share_a_lock_file(tmp_path: Path, one: tuple[str, str | None],
                                                 other: tuple[str, str | None]) -> None:
    from leveller.agent.claim import lock_path
    from leveller.locking import exclusive

    a, b = lock_path(*one, tmp_path), lock_path(*other, tmp_path)
    assert a != b and a.parent == b.parent == tmp_path
    with exclusive(a, lambda pid: f"busy {pid}"), exclusive(b, lambda pid: f"busy {pid}"):
        pass  # both agents run: neither is refused as "another agent runs there"
