"""`leveller experiment soak`, short: the live system (OVS + SDN app, controller, four agents with
eBPF markers, the trio of jobs) for 30 s, every service sampled from /proc; the JSON contract, and
that nothing of the run is left afterwards, also when it is interrupted with Ctrl-C mid-run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from leveller.experiments.shared.procstat import role_of
from tests.integration.support import demo_leftovers, stop_gracefully, wait_until

pytestmark = pytest.mark.privileged

SERVICES = {"controller", "sdn", "agent-h1", "agent-h2", "agent-h3", "agent-h4"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveller.cli", "experiment", "soak", *args]


def test_short_soak_reports_every_service_and_leaves_nothing(tmp_path: Path) -> None:
    name = "sk" + uuid.uuid4().hex[:8]
    proc = subprocess.run(_cli("--duration", "30", "--interval", "1", "--name", name, "--out", str(tmp_path),
                               "--json"), capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), proc.stderr[-5000:]
    doc = json.loads(proc.stdout)
    print(json.dumps({k: v for k, v in doc.items() if k != "processes"}),
          {r: (p.get("rss_mib"), p.get("fds"), p["verdict"]) for r, p in doc["processes"].items()})
    assert proc.returncode == (0 if doc["verdict"] == "stable" and doc["cleanup"]["clean"] else 1)
    assert set(doc["processes"]) == SERVICES
    assert 28 <= doc["duration_s"] <= 40 and doc["interval_s"] == 1.0 and doc["samples"] >= 25
    for role, p in doc["processes"].items():
        assert p["verdict"] in ("ok", "growing"), (role, p)  # none died during the run
        assert p["samples"] >= 25
        assert 10 < p["rss_mib"]["first"] < 2000 and p["fds"]["first"] >= 3
        assert set(p["rss_mib"]) == {"first", "last", "max", "growth", "growth_pct", "slope_per_h"}
        assert set(p["fds"]) == {"first", "last", "max", "growth", "slope_per_h"}
    assert doc["verdict"] == "stable" or doc["verdict"].startswith("growing: ")
    # the live system really worked: jobs iterated under the controller's re-ranking
    assert all(j["iterations"] >= 15 for j in doc["jobs"].values()) and doc["decisions"] >= 100
    assert doc["cleanup"] == {"clean": True, "namespaces": [], "processes": [], "files": []}
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}
    saved = json.loads((tmp_path / "soak.json").read_text())
    assert set(saved["series"]) == SERVICES
    assert len(saved["series"]["controller"]) == doc["processes"]["controller"]["samples"]
    # a series per service, in the colour cycle's order (lines of equal values overlap: the legend's
    # sample of each line, about 35 pixels, is what every series is sure to show)
    from tests.helpers.pictures import colour_pixels, cycle_colours

    drawn = colour_pixels(tmp_path / "soak.png", dict(zip(sorted(SERVICES), cycle_colours(len(SERVICES)))),
                          tolerance=0.1)
    assert all(n > 20 for n in drawn.values()), drawn


def test_ctrl_c_mid_run_tears_everything_down(tmp_path: Path) -> None:
    name = "sk" + uuid.uuid4().hex[:8]
    out = tmp_path / "soak.log"
    with out.open("wb") as log:
        proc = subprocess.Popen(_cli("--duration", "120", "--interval", "1", "--name", name, "--out",
                                     str(tmp_path), "--json"), stdout=log, stderr=subprocess.STDOUT)
    try:
        work = f"/run/leveller/{name}.work"

        def jobs_running() -> bool:  # all six workers of the trio run (agents and controller are up by then)
            argvs = [_argv(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()]
            agents = sum(1 for a in argvs if (role_of(a) or "").startswith("agent-") and work in " ".join(a))
            workers = sum(1 for a in argvs if "leveller.jobs.worker" in a and work in " ".join(a))
            return agents == 4 and workers >= 6

        t0 = time.monotonic()
        wait_until(jobs_running, 90, lambda: f"the soak's jobs to run: {out.read_text()[-2000:]}", step_s=0.2)
        print(f"jobs running after {time.monotonic() - t0:.1f} s")
        time.sleep(2)  # a few samples in
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 130, out.read_text()[-2000:]
    finally:
        stop_gracefully(proc)  # the test failed early: still let the soak tear down, then kill it
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}
    assert not (tmp_path / "soak.json").exists()  # no report for an interrupted run


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
