"""Soak analysis (leveller/experiments/soak/report.py) on constructed sample series, /proc reading on
this very process, and telling the services apart by command line."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.experiments.shared.procstat import ProcSample, read_proc, role_of
from leveller.experiments.soak.report import FD_TOLERANCE, process_growth, run_verdict

INTERVAL = 5.0


def series(rss_mib: list[float], fds: list[int] | None = None, t0: float = 1000.0) -> list[ProcSample]:
    fds = fds or [10] * len(rss_mib)
    return [ProcSample(t0 + INTERVAL * i, int(m * 1024), f, 0.5 * i) for i, (m, f) in enumerate(zip(rss_mib, fds))]


def grow(s: list[ProcSample]) -> dict:
    return process_growth(s, s[0].t, s[-1].t, INTERVAL)


def test_flat_process_is_ok() -> None:
    r = grow(series([100.0] * 120))
    assert r["verdict"] == "ok" and r["rss_mib"]["growth"] == 0 and r["rss_mib"]["slope_per_h"] == 0
    assert r["fds"]["growth"] == 0 and r["samples"] == 120
    assert r["cpu_pct"] == pytest.approx(10.0)  # 0.5 CPU-s per 5 s


def test_warmup_growth_is_not_a_leak() -> None:
    # +30 MiB in the first 30 s (imports, caches), flat for the rest of 10 minutes
    r = grow(series([70.0 + 5 * i for i in range(6)] + [100.0] * 114))
    assert r["verdict"] == "ok", r


def test_steady_leak_is_growing_with_its_slope() -> None:
    # 12 MiB per hour: 1 MiB per 5 min; over 10 min 2 MiB is under the tolerance ...
    r = grow(series([100.0 + 12.0 * (INTERVAL * i) / 3600 for i in range(120)]))
    assert r["rss_mib"]["slope_per_h"] == pytest.approx(12.0, rel=0.01)
    assert r["verdict"] == "ok"
    # ... a 60 MiB/h leak (10 MiB in 10 min) is not
    r = grow(series([100.0 + 60.0 * (INTERVAL * i) / 3600 for i in range(120)]))
    assert r["rss_mib"]["slope_per_h"] == pytest.approx(60.0, rel=0.01)
    assert r["verdict"] == "growing" and r["rss_mib"]["growth"] > 7


def test_fd_leak_is_growing() -> None:
    fds = [10 + i // 10 for i in range(120)]  # one more fd every 50 s
    r = grow(series([100.0] * 120, fds))
    assert r["fds"]["growth"] > FD_TOLERANCE and r["verdict"] == "growing"
    assert r["fds"]["slope_per_h"] == pytest.approx(72.0, rel=0.05)
    # one short-lived extra connection is no leak
    fds = [10] * 120
    fds[60] = 14
    assert grow(series([100.0] * 120, fds))["verdict"] == "ok"


def test_a_process_that_died_is_exited() -> None:
    s = series([100.0] * 60)
    assert process_growth(s, s[0].t, s[0].t + 119 * INTERVAL, INTERVAL)["verdict"] == "exited"
    assert process_growth([], 0.0, 600.0, INTERVAL)["verdict"] == "exited"


@settings(max_examples=50)
@given(base=st.floats(20, 2000), slope=st.floats(-100, 100), n=st.integers(40, 400))
def test_slope_is_recovered_from_a_line(base: float, slope: float, n: int) -> None:
    s = series([base + slope * INTERVAL * i / 3600 for i in range(n)])
    assert grow(s)["rss_mib"]["slope_per_h"] == pytest.approx(slope, abs=0.05)


def test_run_verdict() -> None:
    assert run_verdict({"a": {"verdict": "ok"}, "b": {"verdict": "ok"}}) == "stable"
    assert run_verdict({"a": {"verdict": "growing"}, "b": {"verdict": "ok"}}) == "growing: a"
    assert run_verdict({"a": {"verdict": "growing"}, "c": {"verdict": "exited"}}) == "exited: c"


def test_read_proc_sees_this_process_open_a_file_and_grow() -> None:
    before = read_proc(os.getpid(), 0.0)
    assert before is not None and before.rss_kib > 1000 and before.fds >= 3
    with tempfile.TemporaryFile() as _f:
        block = bytearray(64 * 1024 * 1024)  # touched: 64 MiB resident
        block[::4096] = b"\x01" * len(block[::4096])
        during = read_proc(os.getpid(), 1.0)
        assert during is not None
        assert during.fds == before.fds + 1
        assert during.rss_kib - before.rss_kib > 60 * 1024
        del block
    assert read_proc(2**22 + 12345, 0.0) is None  # no such process


@pytest.mark.parametrize("argv,role", [
    (["/x/python", "-m", "leveller.cli", "controller", "--listen", "127.0.0.1:1"], "controller"),
    (["/x/python", "-m", "leveller.cli", "agent", "--controller", "a:1", "--host", "h3", "--dev", "eth0"],
     "agent-h3"),
    (["/x/python", "-m", "leveller.cli", "sdn", "--testbed", "soak"], "sdn"),
    (["/x/python", "-m", "leveller.jobs.worker", "--job", "j1"], None),
    (["/x/python", "-m", "leveller.cli", "agent", "--host"], None),
    ([], None),
])
def test_services_are_told_apart_by_command_line(argv: list[str], role: str | None) -> None:
    assert role_of(argv) == role
