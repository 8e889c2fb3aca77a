"""`leveller experiment tenants`, short: two tenants on the leaf-spine (12 host namespaces, five OVS
bridges driven by the SDN app, an agent per used host), each job profiled alone, then `fair` and
`leveller` for 10 s each. The JSON contract of docs/api.md, the details file and the plot, and that
nothing of the run is left afterwards, also when it is interrupted with Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.support import argvs_mentioning, demo_leftovers, stop_gracefully, wait_until

pytestmark = pytest.mark.privileged


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveller.cli", "experiment", "tenants", *args]


def test_short_run_prints_the_contract_and_leaves_nothing(tmp_path: Path) -> None:
    name = "tn" + uuid.uuid4().hex[:8]
    proc = subprocess.run(_cli("--tenants", "2", "--policies", "fair,leveller", "--repeats", "1", "--seed", "4",
                               "--duration", "10", "--alone", "5", "--name", name, "--out", str(tmp_path), "--json"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("{"), proc.stderr[-5000:]
    doc = json.loads(proc.stdout)
    print(doc)
    assert set(doc) == {"2"} and set(doc["2"]) == {"fair", "leveller"}
    for pol in ("fair", "leveller"):
        run = doc["2"][pol]
        assert set(run) == {"min", "avg", "top_job_changes", "retrans_segs", "timeouts", "model", "model_min"}
        (lo,), (avg,) = run["min"], run["avg"]
        assert 0.05 < lo <= avg < 1.3  # both jobs iterated, at a plausible pace against their ideal times
        assert run["timeouts"][0] >= 0 and run["retrans_segs"][0] >= 0  # counted by the kernel (nstat)
        (model,) = run["model"]
        assert set(model) == {"t1", "t2"} and all(0.05 < r <= 1.01 for r in model.values())
        assert run["model_min"] == [min(model.values())]
    assert doc["2"]["fair"]["top_job_changes"] == [0]
    assert "job catalog" in proc.stderr and "scale" in proc.stderr  # the scaling is printed
    details = json.loads((tmp_path / "tenants.json").read_text())
    assert details["results"] == doc
    rep = details["repeats"][0]
    assert set(rep["jobs"]) == {"t1", "t2"} and all(0.3 < v < 3.0 for v in rep["ideal_s"].values())
    assert all(min(r["iterations"].values()) >= 3 for r in rep["runs"].values())
    for run in rep["runs"].values():  # every leaf-spine link both ways, from the switch's port counters
        busy = run["link_busy"]
        assert len(busy) == 12 and all(0.0 <= v <= 1.02 for v in busy.values()), busy
        assert max(busy.values()) > 0.05, busy  # the tenants' rings cross the spines
    assert (tmp_path / "tenants.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "tenants-model.png").read_bytes()[:4] == b"\x89PNG"
    assert details["settings"]["switching"]["name"] == "all"
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}


def test_ctrl_c_tears_everything_down(tmp_path: Path) -> None:
    name = "tn" + uuid.uuid4().hex[:8]
    out = tmp_path / "run.log"
    with out.open("wb") as log:
        proc = subprocess.Popen(_cli("--tenants", "3", "--policies", "crux", "--repeats", "1", "--duration", "60",
                                     "--alone", "5", "--name", name, "--out", str(tmp_path), "--json"),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        work = f"/run/leveller/{name}.work"
        def running() -> int:
            return sum("leveller.jobs.worker" in a for a in argvs_mentioning(work))

        wait_until(lambda: running() >= 2, 120, lambda: f"a job to run: {out.read_text()[-2000:]}", step_s=0.2)
        time.sleep(1)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 130, out.read_text()[-2000:]
    finally:
        stop_gracefully(proc)  # the test failed early: still let the run tear down, then kill it
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}
    assert not (tmp_path / "tenants.json").exists()  # no report for an interrupted run
