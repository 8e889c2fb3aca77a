"""Job emulator input validation: bad input is refused with the field named."""

from __future__ import annotations

import pytest

from leveller.errors import UserError
from leveller.jobs.launcher import worker_argv
from leveller.jobs.spec import RunConfig, WorkerPlace, parse_rate, parse_worker


def spec(**kw: object) -> RunConfig:
    base: dict[str, object] = dict(name="j1", workers=(WorkerPlace("10.0.0.1", "h1"), WorkerPlace("10.0.0.3", "h3")),
                                   compute_s=0.25, comm_s=0.5, rate_bps=100e6, duration_s=10.0)
    base.update(kw)
    return RunConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("text,bps", [("100M", 100e6), ("1G", 1e9), ("2.5e9", 2.5e9), ("100Mbit", 100e6),
                                      ("10k", 1e4), ("1gbps", 1e9)])
def test_parse_rate(text: str, bps: float) -> None:
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["", "fast", "-1M", "0", "1X", "nan"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(UserError, match="--rate"):
        parse_rate(text)


def test_parse_worker() -> None:
    assert parse_worker("10.0.0.1@h1") == WorkerPlace("10.0.0.1", "h1")
    assert parse_worker("127.0.0.1") == WorkerPlace("127.0.0.1", None)
    with pytest.raises(UserError, match="not an IP address"):
        parse_worker("h1")
    with pytest.raises(UserError, match="namespace"):
        parse_worker("10.0.0.1@bad ns")


def test_bytes_per_iteration_is_comm_time_times_rate() -> None:
    assert spec(comm_s=0.5, rate_bps=100e6).bytes_per_iteration == 6_250_000


@pytest.mark.parametrize("kw,field", [
    (dict(name="a b"), "job name"),
    (dict(compute_s=-1.0), "--compute"),
    (dict(comm_s=float("nan")), "--comm"),
    (dict(workers=(WorkerPlace("127.0.0.1"),)), "at least 2 workers"),
    (dict(workers=()), "--worker"),
    (dict(pattern="mesh"), "--pattern"),
    (dict(port=80), "--port"),
    (dict(duration_s=None), "bounded"),
    (dict(iterations=0), "--iterations"),
    (dict(duration_s=float("inf")), "--duration"),
])
def test_spec_rejects(kw: dict[str, object], field: str) -> None:
    with pytest.raises(UserError, match=field):
        spec(**kw)


def test_worker_argv_enters_namespace_and_lists_all_endpoints() -> None:
    argv = worker_argv(spec(port=5000), 1, deadline=123.0, log="/tmp/x.log", prefix=["nice"], python="py")
    assert argv[:5] == ["ip", "netns", "exec", "h3", "nice"]
    assert argv[5:8] == ["py", "-m", "leveller.jobs.worker"]
    eps = [argv[i + 1] for i, a in enumerate(argv) if a == "--endpoint"]
    assert eps == ["10.0.0.1:5000", "10.0.0.3:5001"]
    assert argv[argv.index("--rank") + 1] == "1"
    assert argv[argv.index("--bytes") + 1] == "6250000"
