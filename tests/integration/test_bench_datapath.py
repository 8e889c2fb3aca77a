"""`leveller bench datapath` runs end to end, prints the JSON contract and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.privileged


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("lvb-")}


@pytest.mark.timeout(120)
def test_bench_json_contract_and_cleanup() -> None:
    before = _namespaces()
    r = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "datapath", "--flows", "300",
                        "--rounds", "1", "--seconds", "1", "--json"], capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["flows"] == 300
    assert set(res["throughput_gbps"]) == {"none", "ebpf", "iptables"}
    assert all(v > 0 for v in res["throughput_gbps"].values())
    for method in ("ebpf", "iptables"):
        assert set(res["update_ms"][method]) == {"1", "300"}  # sizes capped at --flows
        assert all(v > 0 for v in res["update_ms"][method].values())
    # the namespaces it made are gone (their iptables rules and tc filters went with them)
    assert _namespaces() - before == set()


def test_bad_flows_is_a_user_error() -> None:
    r = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "datapath", "--flows", "0", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--flows=0" in r.stderr
