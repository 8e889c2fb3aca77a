"""`leveller bench shim`: a short real run (the C shim over the FAKE verbs provider) and its checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from leveller.bench.shim import _stats


def bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "shim", *argv], capture_output=True,
                          text=True, timeout=300)


def test_a_short_run_measures_every_change_and_delivers_every_message() -> None:
    res = bench("--changes", "6", "--window", "4", "--size", "256", "--mode", "linked", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["mode"], out["changes_per_qp"], out["window"], out["size"]) == ("linked", 6, 4, 256)
    for role in ("sender", "receiver"):
        p, d = out["pause_us"][role], out["drain_us"][role]
        assert p["n"] == d["n"] == 6  # one pause per change, per QP
        assert 0 < p["median"] <= p["p99"] <= p["max"]
        assert 0 <= d["median"] <= p["max"]  # the drain is part of the pause
    assert out["messages"] > 0 and out["messages_intact"] is True
    assert out["provider"].startswith("fake")


@pytest.mark.parametrize("argv,needle", [
    (["--changes", "0"], "--changes=0: allowed is 1..100000"),
    (["--window", "2000"], "--window=2000: allowed is 1..1024"),
    (["--size", "4"], "--size=4: allowed is 8..1048576"),
    (["--hostile", "300"], "--hostile=300: allowed is 1..256"),
    (["--hostile", "1", "--duration", "1"], "--duration=1: allowed is 2..3600"),
    (["--hostile", "1", "--tau", "0"], "--tau=0: allowed is 0.1..10"),
    (["--hostile", "1", "--lease", "0.5"], "--lease=0.5: allowed is more than --tau (1)"),
])
def test_out_of_range_arguments_are_refused_before_anything_is_built(argv: list[str], needle: str) -> None:
    res = bench(*argv)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


def test_stats_median_p99_and_max() -> None:
    assert _stats([float(v) for v in range(100, 0, -1)]) == {"median": 50.5, "p99": 99.0, "max": 100.0, "n": 100}
    assert _stats([7.0]) == {"median": 7.0, "p99": 7.0, "max": 7.0, "n": 1}
    assert _stats([3.0, 1.0, 2.0])["p99"] == 3.0


def test_the_table_shows_both_queue_pairs_and_the_delivery_check() -> None:
    res = bench("--changes", "3", "--window", "2", "--size", "64")
    assert res.returncode == 0, res.stderr
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") >= 6}
    assert set(rows) >= {"sender", "receiver"}
    assert "3 changes per QP (dlopen, fake" in res.stdout.replace("\n", " ")
    assert "delivered once and in order: True" in res.stdout
