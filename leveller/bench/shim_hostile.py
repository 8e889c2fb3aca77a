"""`leveller bench shim --hostile N`: does a user's fake shim cost the agent's other jobs their levels?

One host agent, run as `leveller agent --rdma` runs it (its report loop every --interval and the
controller's pushes, over real gRPC to a real controller on loopback deciding every --tau with a
--lease), levels two jobs on one link:

- ``rdma``: the verbs program under the real shim (LD_PRELOAD=libleveller_shim.so) over the FAKE
  verbs provider (no RDMA NIC here): two QPs whose traffic class the shim sets and whose lease the
  shim's own timer ends;
- ``tcp``: one TCP flow, read from and marked into a FAKE datapath (a recorder of the marks and
  leases the eBPF map would get: the real one needs root and is measured elsewhere).

``rdma`` has the lower R, so the controller gives its QPs the top level. Each run has two phases of
``duration`` seconds each: ``alone`` (the baseline) and ``hostile``, where N processes of the job's
user (leveller.bench.fake_hostile_shim) serve the shim's socket protocol too, claim QPs of ``rdma``,
answer ``list`` and ``set_tc`` at once and never answer ``lease`` (``--hostile-mode silent``: never
anything). Figures per phase: how late the agent's reports came (a tick is late by the time past
its --interval), the share of time the agent spent inside its enforcer's ``apply``, the seconds the
TCP flow's marks had lapsed (no valid lease), the good shim's lease expiries and the share of
samples (every 0.1 s) its QPs carried the top class. The check: in the hostile phase no tick is
late by more than tau and no level of the other jobs lapsed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.bench.shim import BuildError, StreamRun, build_all
from leveller.model.flow import FlowKey, flow_key

SECRET = b"bench-shim-hostile-secret-0123456"
TCP_FLOW = flow_key("10.0.0.1", "10.0.0.2", 40000, 48000)
TCP_PORT_RULE = "tcp=48000"
WARMUP_S = 20.0  # at most this long for the first levels to reach the good shim's QPs
SAMPLE_S = 0.1


class FakeTcpFlows:
    """FAKE datapath flow source: the ``tcp`` job's one flow, its byte counter growing."""

    def __init__(self) -> None:
        self._bytes = 0

    def read_flows(self) -> Mapping[FlowKey, Any]:
        from leveller.agent.reports import FlowSample

        self._bytes += 1_000_000
        return {TCP_FLOW: FlowSample(self._bytes)}


class FakeDatapathRecorder:
    """FAKE eBPF datapath: records when marks were written and for how long they were valid."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, float, bool]] = []  # (monotonic, "apply"/"clear", valid_for, tcp in)
        self._lock = threading.Lock()

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        with self._lock:
            self.events.append((time.monotonic(), "apply", valid_for_s, TCP_FLOW in marks))

    def clear(self) -> None:
        with self._lock:
            self.events.append((time.monotonic(), "clear", 0.0, False))

    def lapsed_s(self, start: float, end: float) -> tuple[float, int]:
        """(seconds of [start, end] the TCP flow had no valid mark, number of such gaps). A mark is valid
        from an apply that has it until the lease given with it, a later apply without it, or a clear."""
        with self._lock:
            events = list(self.events)
        valid_until, prev = float("-inf"), float("-inf")
        lapsed, gaps, gap_end = 0.0, 0, None
        for t, kind, valid_for, has in [*events, (end, "end", 0.0, False)]:
            hi = min(t, end)
            lo = max(prev, start, valid_until)
            if hi > lo:  # [lo, hi] without a valid mark
                lapsed += hi - lo
                gaps += gap_end != lo
                gap_end = hi
            if t >= end:
                break
            if kind == "clear":
                valid_until = min(valid_until, t)
            else:
                valid_until = t + valid_for if has else t
            prev = t
        return lapsed, gaps


class TimedEnforcer:
    """The agent's enforcer, with the time spent inside each ``apply`` and ``clear`` recorded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spans: list[tuple[float, float]] = []  # (start, duration), monotonic
        self._lock = threading.Lock()

    def _timed(self, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        try:
            fn()
        finally:
            with self._lock:
                self.spans.append((t0, time.monotonic() - t0))

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self._timed(lambda: self.inner.apply(marks, valid_for_s))

    def clear(self) -> None:
        self._timed(self.inner.clear)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def busy_s(self, start: float, end: float) -> tuple[float, float]:
        """(seconds of [start, end] spent in apply/clear, the longest single call)."""
        with self._lock:
            spans = list(self.spans)
        total, longest = 0.0, 0.0
        for t0, d in spans:
            lo, hi = max(start, t0), min(end, t0 + d)
            if hi > lo:
                total += hi - lo
                longest = max(longest, d)
        return total, longest


@dataclass
class PhaseResult:
    name: str
    hostile: int
    ticks: int = 0
    late_s: list[float] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def _good_state(sock: Path) -> tuple[dict[int, int | None], int]:
    """The good shim's QP classes and its lease expiries so far (a raw list request)."""
    from leveller.agent.shim_control import ShimClient

    reply = ShimClient(sock, timeout=2.0).request({"op": "list"})
    return {q["qp"]: q["tc"] for q in reply["qps"]}, int(reply.get("lease_expiries", 0))


def _start_hostile(workdir: Path, n: int, mode: str, job: str) -> list[tuple[subprocess.Popen[str], Path]]:
    procs = []
    for i in range(n):
        sock = workdir / f"hostile-{i}.sock"
        proc = subprocess.Popen([sys.executable, "-m", "leveller.bench.fake_hostile_shim", "--socket", str(sock),
                                 "--mode", mode, "--job", job], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            proc.kill()
            raise BuildError(f"the hostile shim {i} did not start (exit {proc.wait()})")
        procs.append((proc, sock))
    return procs


def run_phase(name: str, build: Path, workdir: Path, stream: StreamRun, hostile: int, hostile_mode: str,
              duration_s: float, interval_s: float, tau_s: float, lease_s: float,
              progress: Callable[[str], None]) -> PhaseResult:
    """One phase: a fresh controller and agent for ``duration_s`` after the first levels arrived."""
    from leveller.agent.enforce_shim import add_shim
    from leveller.agent.rate_tracker import LogTailer, RateTracker
    from leveller.agent.reports import Classifier, parse_port_rule
    from leveller.agent.service import Agent, StepResult
    from leveller.controller.paths import SingleLinkPaths
    from leveller.controller.service import Controller
    from leveller.core.policies import make_policy
    from leveller.core.qos import default_level_map
    from leveller.jobs.logline import format_line
    from leveller.rpc.push import LevelsWatcher
    from leveller.rpc.transport import ControllerClient, serve

    level_map = default_level_map(2)
    top_tc = level_map.dscp[1] << 2
    phase_dir = workdir / name
    phase_dir.mkdir()
    t0 = time.time() - 100
    logs = {}
    for job, iterations in (("rdma", 10), ("tcp", 50)):  # rdma: the lower R, the top level
        logs[job] = phase_dir / f"{job}.log"
        logs[job].write_text(format_line(job, 0, t0) + "\n" + format_line(job, iterations, time.time()) + "\n")
    bad = _start_hostile(phase_dir, hostile, hostile_mode, "rdma")
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), level_map, tau_s=tau_s, lease_s=lease_s)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    stop = threading.Event()
    ctl_thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    ctl_thread.start()
    datapath = FakeDatapathRecorder()
    sockets = [stream.sock, *(sock for _, sock in bad)]
    flows, split, shim = add_shim(FakeTcpFlows(), datapath, Classifier(ports=(parse_port_rule(TCP_PORT_RULE),)),
                                   sockets=lambda: sockets)
    enforcer = TimedEnforcer(split)
    client = ControllerClient(f"127.0.0.1:{port}", SECRET)
    agent = Agent("h1", [(LogTailer(str(p)), RateTracker()) for p in logs.values()], client, enforcer,
                  flows=flows, classifier=shim,
                  ideal_times={"rdma": 1.0, "tcp": 1.0})
    steps: list[float] = []  # wall clock of each report (its flows read)

    def on_step(r: StepResult) -> None:
        steps.append(r.t)

    watcher = LevelsWatcher(f"127.0.0.1:{port}", SECRET, "h1", agent.apply_pushed, lambda: agent.known_jobs)
    agent_stop = threading.Event()
    agent_thread = threading.Thread(target=agent.run, args=(interval_s, agent_stop, on_step),
                                    kwargs={"poll_s": 0.02}, daemon=True)
    result = PhaseResult(name, hostile)
    try:
        watcher.start()
        agent_thread.start()
        progress(f"{name}: waiting for the first levels")
        deadline = time.monotonic() + WARMUP_S
        while set(_good_state(stream.sock)[0].values()) != {top_tc}:
            if time.monotonic() > deadline:
                raise BuildError(f"{name}: the good shim's QPs never got class {top_tc} within {WARMUP_S:g} s")
            time.sleep(SAMPLE_S)
        start, wall_start = time.monotonic(), time.time()
        _, expiries0 = _good_state(stream.sock)
        samples = held = 0
        while time.monotonic() - start < duration_s:
            tcs, _ = _good_state(stream.sock)
            samples += 1
            held += set(tcs.values()) == {top_tc}
            left = duration_s - (time.monotonic() - start)
            if samples % max(1, int(5 / SAMPLE_S)) == 0:
                progress(f"{name}: {left:.0f} s left")
            time.sleep(max(0.0, min(SAMPLE_S, left)))
        end, wall_end = time.monotonic(), time.time()
        _, expiries1 = _good_state(stream.sock)
    finally:
        agent_stop.set()
        agent_thread.join(30)
        split.close()
        watcher.close()
        client.close()
        stop.set()
        ctl_thread.join(10)
        server.stop(grace=None)
        for proc, _ in bad:
            proc.kill()
            proc.wait()
    in_window = [t for t in steps if wall_start <= t <= wall_end]
    late = [max(0.0, b - a - interval_s) for a, b in zip(in_window, in_window[1:])]
    if in_window:  # the time from the last report to the end of the window is a tick too (a stalled agent)
        late.append(max(0.0, wall_end - in_window[-1] - interval_s))
    busy, longest = enforcer.busy_s(start, end)
    lapsed, gaps = datapath.lapsed_s(start, end)
    result.ticks, result.late_s = len(in_window), late
    result.figures = {
        "reports": len(in_window),
        "late_s": {"max": round(max(late, default=0.0), 3),
                   "p99": round(sorted(late)[int(0.99 * (len(late) - 1))] if late else 0.0, 3),
                   "over_tau": sum(1 for x in late if x > tau_s)},
        "apply_busy_share": round(busy / (end - start), 4),
        "apply_longest_s": round(longest, 3),
        "tcp_marks_lapsed_s": round(lapsed, 3), "tcp_marks_gaps": gaps,
        "rdma_lease_expiries": expiries1 - expiries0,
        "rdma_top_class_share": round(held / samples, 4) if samples else 0.0,
    }
    result.figures["shim_backoffs"] = dict(shim.backoff.counts)  # by exchange: list, lease, set_tc, clear
    result.figures["hostile_left_alone_s"] = max((shim.backoff.delay_s(s) for _, s in bad), default=0.0)
    return result


def run(hostile: int, hostile_mode: str = "no-lease", duration_s: float = 60.0, interval_s: float = 1.0,
        tau_s: float = 1.0, lease_s: float = 3.0, baseline: bool = True,
        progress: Callable[[str], None] = lambda _msg: None) -> dict[str, Any]:
    """Both phases (or the hostile one only); the JSON-able result with its check."""
    with tempfile.TemporaryDirectory(prefix="leveller-bench-shim-hostile-") as tmp:
        workdir = Path(tmp)
        progress("building the shim and the fake verbs provider")
        build = build_all(workdir / "build")
        stream = StreamRun(build, workdir, mode="linked", job="rdma", extra_args=["--max-seconds", "3600"])
        phases: dict[str, Any] = {}
        try:
            for name, n in ((("alone", 0),) if baseline else ()) + (("hostile", hostile),):
                phases[name] = run_phase(name, build, workdir, stream, n, hostile_mode, duration_s, interval_s,
                                         tau_s, lease_s, progress).figures
            summary = stream.stop()
        finally:
            stream.kill()
    bad = phases["hostile"]
    checks = {"no_tick_late_by_more_than_tau": bad["late_s"]["over_tau"] == 0,
              "tcp_marks_never_lapsed": bad["tcp_marks_gaps"] == 0,
              "rdma_lease_never_expired": bad["rdma_lease_expiries"] == 0,
              "rdma_messages_intact": bool(summary["errors"] == 0 and summary["in_order"]
                                           and summary["received"] == summary["posted"])}
    return {"hostile": hostile, "hostile_mode": hostile_mode, "duration_s": duration_s, "interval_s": interval_s,
            "tau_s": tau_s, "lease_s": lease_s, "phases": phases, "checks": checks, "ok": all(checks.values()),
            "provider": "fake (tests/shim/fake_verbs.c)", "pid": os.getpid()}


def print_result(result: dict[str, Any], console: Any) -> None:
    """The result of :func:`run` as a table of both phases and its checks (pass/FAIL), on a rich console."""
    from rich.table import Table

    table = Table(title=f"host agent with {result['hostile']} hostile shim(s) ({result['hostile_mode']}), "
                        f"{result['duration_s']:g} s per phase, tau {result['tau_s']:g} s, "
                        f"lease {result['lease_s']:g} s")
    rows = [("reports", lambda p: str(p["reports"])),
            ("reports late, max s", lambda p: f"{p['late_s']['max']:.3f}"),
            ("reports late by more than tau", lambda p: str(p["late_s"]["over_tau"])),
            ("time inside apply", lambda p: f"{100 * p['apply_busy_share']:.1f} %"),
            ("longest apply, s", lambda p: f"{p['apply_longest_s']:.3f}"),
            ("TCP job: marks lapsed, s", lambda p: f"{p['tcp_marks_lapsed_s']:.2f}"),
            ("RDMA job: shim lease expiries", lambda p: str(p["rdma_lease_expiries"])),
            ("RDMA job: QPs at their level", lambda p: f"{100 * p['rdma_top_class_share']:.1f} %"),
            ("shims left alone (by exchange)", lambda p: ", ".join(f"{k} {v}" for k, v in
                                                                  sorted(p["shim_backoffs"].items())) or "-")]
    phases = result["phases"]
    table.add_column("")
    for name in phases:
        table.add_column(name, justify="right")
    for label, cell in rows:
        table.add_row(label, *(cell(p) for p in phases.values()))
    console.print(table)
    for check, ok in result["checks"].items():
        console.print(f"{'pass' if ok else 'FAIL'}  {check.replace('_', ' ')}")
