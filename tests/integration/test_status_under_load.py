"""Issue 26, finding 8, live: Status of 100,000 flows while a host reports (report p99 unchanged within 2x).

A real `leveller controller` process holds 100,000 flows (two hosts' reports of 50,000 each). A third host
with one flow reports every 10 ms; its report latency is measured in windows without Status calls and in
windows while a second process calls Status back to back, alternated (quiet, busy, quiet, busy, ...) so
that the machine's other load weighs on both alike. The p99 with Status must stay within 2x of the p99
without, plus ``ALLOWANCE_S``.

The control (parameter ``status_under_lock``) runs the same measurement against a controller whose Status
holds the lock over its whole build, the defect of the finding, and requires the bound to fail: the check
can tell. Needs no privileges: one controller process on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveller.model.flow import flow_key
from leveller.model.messages import FlowReport, JobReport, Report
from leveller.rpc.transport import ControllerClient, RpcFailure

from .support import Proc, free_port, wait_until

SECRET = "status-under-load-secret-0123456789"
HOSTS, FLOWS_PER_HOST = 2, 50_000  # 100,000 flows (one report holds at most MAX_FLOWS = 65,536)
PERIOD_S = 0.01  # the small host's report pace
ROUNDS, WINDOW_S = 3, 4.0  # 3 quiet and 3 busy windows of 4 s: about 300 reports each side, p99 = 4th largest
# A Status that holds the controller's lock while it builds its reply (the defect: 1.37 s median report
# latency at 38,696 flows) stalls every report arriving meanwhile for up to the whole build, which takes
# 0.3-3 s at 100,000 flows (this machine idle or loaded); called back to back it holds the lock most of the
# time, so the busy p99 is about a whole build. 20 ms absorbs scheduling noise on a loaded 2-core machine
# (the Status process, the controller's loop and pool threads sharing one interpreter) yet stays an order
# of magnitude below that.
ALLOWANCE_S = 0.020

# Status back to back while the file `go` exists; `idle` exists while it waits. One JSON line per call.
STATUS_LOOP = """
import json, os, sys, time
from leveller.rpc.transport import ControllerClient
address, secret, d = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
with ControllerClient(address, secret, timeout_s=120) as client:
    while True:
        if not os.path.exists(d + "/go"):
            open(d + "/idle", "w").close()
            time.sleep(0.01)
            continue
        t0 = time.time()
        s = client.status()
        with open(d + "/calls.jsonl", "a") as f:
            f.write(json.dumps({"start": t0, "end": time.time(), "total": s["flows_total"],
                                "listed": len(s["flows"])}) + "\\n")
"""

# The finding's defect, for the control: Status holds the controller's lock from start to end (the lock
# made reentrant so that the original Status can take it again inside).
LOCKED_STATUS = """
import sys, threading
threading.Lock = threading.RLock
from leveller.controller.service import Controller
original = Controller.status
def status(self, now, flows_limit=None, **kw):
    with self._lock:
        return original(self, now, **({} if flows_limit is None else {"flows_limit": flows_limit}), **kw)
Controller.status = status
from leveller.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module", params=["as_built", "status_under_lock"])
def controller(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """(address) of a live controller holding 100,000 flows (two hosts' reports, live for 10 min); the
    "status_under_lock" one has the finding's defect put back."""
    tmp = tmp_path_factory.mktemp(request.param)
    address = f"127.0.0.1:{free_port()}"
    head = ["-m", "leveller.cli"] if request.param == "as_built" else ["-c", LOCKED_STATUS]
    argv = [sys.executable, *head, "controller", "--listen", address, "--stale-after", "600"]
    with Proc(tmp / "controller.out", argv, env={"LEVELLER_SECRET": SECRET}) as proc:
        wait_until(lambda: _status_or_none(address) is not None, 120, lambda: f"controller up: {proc.output()}")
        now = time.time()
        for h in range(HOSTS):
            flows = tuple(FlowReport(flow_key(f"10.0.{h}.1", f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}",
                                              1024 + i % 60000, 4791, "udp"), f"big{h}", 1)
                          for i in range(FLOWS_PER_HOST))
            with ControllerClient(address, SECRET.encode(), timeout_s=120) as client:
                client.report(Report(f"big{h}", (JobReport(f"big{h}", 5, now - 10, 1.0),), flows))
        status = _status_or_none(address)
        assert status is not None and status["flows_total"] == HOSTS * FLOWS_PER_HOST, status and status["agents"]
        yield address
        assert proc.alive(), proc.output()


def _status_or_none(address: str) -> dict[str, Any] | None:
    try:
        with ControllerClient(address, SECRET.encode(), timeout_s=60) as client:
            return client.status()
    except RpcFailure:
        return None


def _report_latencies(client: ControllerClient, report: Report, seconds: float) -> tuple[list[float], float, float]:
    """(latencies, start, end) of reports sent one every PERIOD_S (back to back when slower) for ``seconds``."""
    out: list[float] = []
    start = time.time()
    end = time.monotonic() + seconds
    while (t := time.monotonic()) < end:
        t0 = time.perf_counter()
        client.report(report)
        out.append(time.perf_counter() - t0)
        time.sleep(max(0.0, t + PERIOD_S - time.monotonic()))
    return out, start, time.time()


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def measure(address: str, tmp: Path) -> dict[str, Any]:
    """Alternate quiet and busy (Status back to back) windows; the small host's latencies of each, the
    Status calls and the share of the busy windows that a Status call covered."""
    key = flow_key("10.0.9.1", "10.0.9.2", 40000, 47000)
    report = Report("small", (JobReport("small", 1, time.time() - 10, 1.0),), (FlowReport(key, "small", 1),))
    loop = subprocess.Popen([sys.executable, "-c", STATUS_LOOP, address, SECRET, str(tmp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    quiet: list[float] = []
    busy: list[float] = []
    windows: list[tuple[float, float]] = []
    calls_file = tmp / "calls.jsonl"

    def calls() -> list[dict[str, Any]]:
        return [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []

    def loop_error() -> str:
        return loop.stderr.read().decode() if loop.poll() is not None and loop.stderr else "Status loop running"

    try:
        with ControllerClient(address, SECRET.encode(), timeout_s=30) as client:
            client.report(report)  # connect and open the stream outside the windows
            for _ in range(ROUNDS):
                wait_until(lambda: (tmp / "idle").exists(), 120, loop_error)  # no Status in flight
                quiet += _report_latencies(client, report, WINDOW_S)[0]
                (tmp / "idle").unlink()
                before = len(calls())
                (tmp / "go").touch()
                wait_until(lambda n=before: len(calls()) > n, 120, loop_error)  # Status at full swing
                lat, start, end = _report_latencies(client, report, WINDOW_S)
                busy += lat
                windows.append((start, end))
                (tmp / "go").unlink()
        assert loop.poll() is None, loop_error()
    finally:
        loop.kill()
        loop.wait(10)
    made = calls()
    covered = sum(max(0.0, min(c["end"], e) - max(c["start"], s)) for s, e in windows for c in made)
    return {"quiet": quiet, "busy": busy, "calls": made, "coverage": covered / sum(e - s for s, e in windows)}


def _figures(m: dict[str, Any]) -> str:
    q, b, d = sorted(m["quiet"]), sorted(m["busy"]), sorted(c["end"] - c["start"] for c in m["calls"])
    return (f"quiet: {len(q)} reports p50 {q[len(q) // 2] * 1e3:.1f} ms p99 {p99(q) * 1e3:.1f} ms max "
            f"{q[-1] * 1e3:.1f} ms; with Status: {len(b)} reports p50 {b[len(b) // 2] * 1e3:.1f} ms p99 "
            f"{p99(b) * 1e3:.1f} ms max {b[-1] * 1e3:.1f} ms; {len(d)} Status calls, median "
            f"{d[len(d) // 2] * 1e3:.0f} ms, covering {m['coverage']:.0%} of the busy windows")


def test_status_of_100000_flows_leaves_report_p99_within_2x(controller: str, tmp_path: Path,
                                                              request: pytest.FixtureRequest) -> None:
    m = measure(controller, tmp_path)
    figures = _figures(m)
    print(f"\n[{request.node.callspec.params['controller']}] {figures}")
    assert all(c["total"] == HOSTS * FLOWS_PER_HOST + 1 and c["listed"] > 0 for c in m["calls"]), m["calls"][:3]
    assert m["coverage"] >= 0.8, figures  # Status really ran throughout the busy windows
    within = p99(m["busy"]) <= 2 * p99(m["quiet"]) + ALLOWANCE_S
    if request.node.callspec.params["controller"] == "as_built":
        assert within, figures
    else:  # the control: the defect put back must fail the same bound
        assert not within, f"a Status holding the lock passed the check: {figures}"
