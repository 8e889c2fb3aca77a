"""`leveller bench levels --json`: the contract other tools read, causality, and cleanup.

Only a few samples and no timing thresholds (speed targets are the benchmark's to print):
every decision must reach the wire, after it, and nothing may be left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.privileged
def test_bench_levels_json_contract_and_cleanup() -> None:
    before = _netns()
    proc = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "levels", "--samples", "6", "--json"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["mode"] == "push" and res["samples"] == 6 and res["missed"] == 0, res
    assert len(res["samples_ms"]) == 6
    assert all(x > 0 for x in res["samples_ms"])  # the new DSCP shows only after the decision
    lat = res["latency_ms"]
    assert lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] == min(res["samples_ms"]) and lat["max"] == max(res["samples_ms"])
    assert sum(b["count"] for b in res["histogram"]) == 6
    assert isinstance(res["median_under_target"], bool) and res["target_ms"] == 5.0
    # every stage of a pushed decision was timed, each after the one before it (none negative)
    assert list(res["stages_ms"]) == ["decide", "wake", "send", "decode", "apply", "wire"], res["stages_ms"]
    assert all(0 <= v["median"] <= v["p90"] <= lat["max"] for v in res["stages_ms"].values()), res["stages_ms"]
    assert 1 <= res["staged"] <= 6
    assert 0 < res["grpc_floor_ms"]["median"] <= res["grpc_floor_ms"]["p90"]
    leftover = {ns for ns in _netns() - before if ns.startswith("lvb-")}
    assert not leftover, leftover
