"""`leveller bench controller --json`: the contract other tools read, and nothing left behind.

A small run (a few hundred flows, 20 agents, 1.5 s window after a 6 s warm-up: on a loaded 2-core machine
the default warm-up of 3 tau let the first decision run into the window, which the benchmark refuses):
no timing thresholds, speed targets are the benchmark's to print.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.privileged


def _marked(mark: str) -> list[int]:
    """Processes whose environment carries ``mark`` (the benchmark and everything it started)."""
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark.encode() in env.read_bytes():
                pids.append(int(env.parent.name))
        except OSError:
            continue
    return pids


def _our_programs() -> set[int]:
    """Ids of the loaded BPF programs named leveller_egress. By id, not a count: a program of an earlier
    test's agent may still be being freed by the kernel when this test starts, and be gone at its end."""
    out = subprocess.run(["bpftool", "prog", "show", "name", "leveller_egress"], capture_output=True, text=True)
    return {int(m[1]) for m in re.finditer(r"^(\d+): .*\bname leveller_egress\b", out.stdout, re.M)}


@pytest.mark.timeout(240)
def test_bench_controller_json_contract_and_cleanup() -> None:
    mark = f"LEVELLER_TEST_MARK={uuid.uuid4().hex}"
    programs = _our_programs()
    r = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "controller", "--flows", "300,900",
                        "--agents", "20", "--flows-per-agent", "10", "--tau", "0.5", "--duration", "1.5",
                        "--warmup", "6",
                        "--processes", "2", "--json"], capture_output=True, text=True, timeout=230,
                       env=dict(os.environ, LEVELLER_TEST_MARK=mark.split("=")[1]))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert set(res) == {"levels", "agents", "map_update_ms"}
    assert set(res["levels"]) == {"300", "900"}
    for fig in res["levels"].values():
        assert set(fig) == {"decide_ms", "rss_mb", "jobs"}
        assert fig["decide_ms"] > 0 and fig["rss_mb"] > 10 and fig["jobs"] == 37
    a = res["agents"]
    assert set(a) == {"count", "flows_per_agent", "tau_s", "report_ms", "step_ms", "missed_steps"}
    assert (a["count"], a["flows_per_agent"], a["tau_s"]) == (20, 10, 0.5)
    assert set(a["report_ms"]) == {"p50", "p99"} and 0 < a["report_ms"]["p50"] <= a["report_ms"]["p99"]
    assert set(a["step_ms"]) == {"p50", "max"} and 0 < a["step_ms"]["p50"] <= a["step_ms"]["max"]
    assert isinstance(a["missed_steps"], int) and a["missed_steps"] >= 0
    assert set(res["map_update_ms"]) == {"10000"} and res["map_update_ms"]["10000"] > 0
    assert _marked(mark.split("=")[1]) == []  # no emulated agent or decision process outlived it
    assert _our_programs() - programs == set()  # the BPF program it loaded is gone


def test_bad_arguments_are_user_errors() -> None:
    for args, word in ((["--agents", "0"], "--agents=0"), (["--flows", "0"], "--flows"),
                       (["--tau", "0.001"], "--tau=0.001")):
        r = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "controller", *args, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and word in r.stderr, r.stderr
