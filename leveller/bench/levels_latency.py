"""Latency from a controller decision to the new DSCP on a packet on the wire.

Real parts end to end: a veth pair between two fresh namespaces; in the
sender namespace two iperf3 UDP flows (job "probe" to port 5201, job "other"
to 5202); a `leveller agent` process with the eBPF datapath on the sender's
veth; a controller built as `leveller controller` builds it
(leveller.controller.app, real leveller policy, K=2, the paper's switching
rule) serving gRPC on loopback. Each sample bumps one job's
iterations in the agent's log so the lowest-R job changes, waits until the
controller has that report, waits a random fraction of the report interval
(so samples are not phase-locked to reports), timestamps the decision
(Controller.step) and finds the first probe packet with the new DSCP in an
AF_PACKET capture in the receiver namespace, stamped by the kernel
(SO_TIMESTAMPNS). Latency = packet timestamp - decision start (both
CLOCK_REALTIME on this host). The packet spacing (~0.2 ms) bounds the
resolution.

With push, each sample is also cut into stages, from wall-clock stamps on
the same host: ``decide`` (Controller.step), ``wake`` (step done -> the Watch
handler has the reply: thread wake-up and reply built), ``send`` (-> the
reply out of gRPC in the agent: encoding, signing, gRPC both ends, loopback),
``decode`` (signature check and field checks in the agent), ``apply`` (the
agent's lock, change detection, the BPF map write) and ``wire`` (map written
-> first packet with the new DSCP at the receiver: the next probe packet, one
every ~0.2 ms, paced every 0.2 ms). The agent stamps its side with
``--trace-pushes``. When the reply is built before the step returned (the
step's last bookkeeping ran after it had woken the Watch handler), ``wake``
is 0 and ``send`` starts at the reply. Next to them, the bench measures a bare
gRPC long-poll reply between two processes (leveller.bench.grpc_floor): the
floor under ``wake`` + ``send``.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.procs import stop_process
from leveller.testbed.capture import ETH_P_IP, SO_TIMESTAMPNS, frames, kernel_stamp

PROBE_PORT = 5201
OTHER_PORT = 5202
PROBE_RATE = "40M"  # with 1000-byte datagrams: ~5,000 packets/s, one every ~0.2 ms
PACKET_BYTES = 1000
PACING_US = 200  # iperf3 sends its packets every 0.2 ms instead of in bursts every 1 ms (its default)
TARGET_MS = 5.0
HIST_EDGES_MS = (0.5, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)
SECRET = "bench-levels-" + "0123456789abcdef"

Progress = Callable[[str], None]
STAGES = ("decide", "wake", "send", "decode", "apply", "wire")


@dataclass
class LatencyResult:
    mode: str  # "push" or "poll"
    report_interval_s: float
    samples_ms: list[float] = field(default_factory=list)
    missed: int = 0  # decisions whose DSCP never showed within the deadline
    elapsed_s: float = 0.0
    stages_ms: dict[str, list[float]] = field(default_factory=dict)  # push: each sample cut into STAGES
    grpc_floor_ms: list[float] = field(default_factory=list)  # push: a bare gRPC long-poll reply

    def stats(self) -> dict[str, float]:
        xs = sorted(self.samples_ms)
        if not xs:
            return {}
        return {"min": xs[0], "median": percentile(xs, 50), "p90": percentile(xs, 90),
                "p99": percentile(xs, 99), "max": xs[-1], "mean": sum(xs) / len(xs)}

    def histogram(self) -> list[dict[str, Any]]:
        return histogram(self.samples_ms)

    def to_json(self) -> dict[str, Any]:
        st = self.stats()
        return {"mode": self.mode, "report_interval_s": self.report_interval_s, "samples": len(self.samples_ms),
                "missed": self.missed, "latency_ms": {k: round(v, 3) for k, v in st.items()},
                "target_ms": TARGET_MS, "median_under_target": bool(st) and st["median"] < TARGET_MS,
                "histogram": self.histogram(), "samples_ms": [round(x, 3) for x in self.samples_ms],
                "stages_ms": {name: {"median": round(percentile(sorted(xs), 50), 3),
                                     "p90": round(percentile(sorted(xs), 90), 3)}
                              for name, xs in self.stages_ms.items() if xs},
                "staged": min((len(xs) for xs in self.stages_ms.values()), default=0),
                "grpc_floor_ms": ({"median": round(percentile(sorted(self.grpc_floor_ms), 50), 3),
                                   "p90": round(percentile(sorted(self.grpc_floor_ms), 90), 3)}
                                  if self.grpc_floor_ms else None),
                "elapsed_s": round(self.elapsed_s, 1)}


def percentile(sorted_xs: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_xs:
        raise ValueError("no samples")
    rank = max(1, -(-len(sorted_xs) * q // 100))
    return sorted_xs[int(rank) - 1]


def histogram(samples_ms: list[float]) -> list[dict[str, Any]]:
    """Counts per bin [lo, hi) over HIST_EDGES_MS (last bin open)."""
    edges = (0.0, *HIST_EDGES_MS, float("inf"))
    return [{"lo_ms": lo, "hi_ms": hi if hi != float("inf") else None,
             "count": sum(1 for x in samples_ms if lo <= x < hi)} for lo, hi in zip(edges, edges[1:])]


def check_tools() -> None:
    missing = [t for t in ("ip", "iperf3") if shutil.which(t) is None]
    if missing:
        raise UserError(f"missing programs: {', '.join(missing)} (Debian packages iproute2, iperf3)")
    if os.geteuid() != 0:
        raise UserError("bench levels needs root (network namespaces, BPF)")


class WireWatch:
    """AF_PACKET capture on the receiver: kernel-stamped DSCP changes of packets src -> *:dport.

    The capture loop (thousands of packets a second) runs in a forked child process and sends only
    the changes of DSCP through a pipe: in this process it would compete for the interpreter lock
    with the controller whose latency is being measured."""

    def __init__(self, ns: str, ifname: str, src: str, dport: int, proto: int = socket.IPPROTO_UDP) -> None:
        from leveller.testbed.vethpair import VethPair

        self.src, self.dport, self.proto = socket.inet_aton(src), dport, proto
        self.sock = VethPair.socket(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.settimeout(0.2)
        self.changes: list[tuple[float, int]] = []  # (kernel time, new DSCP), in arrival order
        self.packets = 0
        self.last_dscp: int | None = None
        self._cond = threading.Condition()
        self._recv, self._send = multiprocessing.get_context("fork").Pipe(duplex=False)
        self._proc = multiprocessing.get_context("fork").Process(target=self._capture, name="wirewatch",
                                                                 daemon=True)
        self._thread = threading.Thread(target=self._collect, name="wirewatch", daemon=True)

    def __enter__(self) -> WireWatch:
        self._proc.start()  # fork: before any gRPC thread exists in this process
        self._send.close()
        self.sock.close()  # the child holds the capture socket now
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._thread.join(timeout=2)
        self._recv.close()

    def _capture(self) -> None:
        """Child: read packets, send (kernel time, DSCP) at every change and the count now and then."""
        self._recv.close()
        packets, last = 0, None
        for fields, anc in frames(self.sock):
            if fields[0] != self.proto or fields[1] != self.src or fields[3] != self.dport:
                continue
            packets += 1
            dscp = fields[4]
            if dscp != last:
                last = dscp
                self._send.send((packets, kernel_stamp(anc), dscp))
            elif packets % 256 == 0:
                self._send.send((packets, None, None))

    def _collect(self) -> None:
        """Parent: fold the child's messages into ``changes`` / ``packets``; wakes first_after."""
        while True:
            try:
                packets, stamp, dscp = self._recv.recv()
            except (EOFError, OSError):
                return
            with self._cond:
                self.packets = packets
                if stamp is not None:
                    self.last_dscp = dscp
                    self.changes.append((stamp, dscp))
                self._cond.notify_all()

    def first_after(self, t0: float, dscp: int, timeout_s: float) -> float | None:
        """Kernel time of the first packet at/after t0 whose DSCP changed to ``dscp`` (None on timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for stamp, d in reversed(self.changes):
                    if stamp < t0:
                        break
                    if d == dscp:
                        hits = [s for s, dd in self.changes if s >= t0 and dd == dscp]
                        return hits[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)


class _TimedWatch:
    """The controller as the RPC layer sees it, noting when the Watch handler got each epoch's reply."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        self.built: dict[int, float] = {}  # epoch -> wall time its first pushed reply was built

    def report(self, report: Any, now: float) -> Any:
        return self.ctl.report(report, now)

    def status(self, now: float) -> dict[str, Any]:
        return dict(self.ctl.status(now))

    def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> Any:
        return self._stamped(self.ctl.wait_levels(host, seen_epoch, timeout_s))

    # the controller's push source (leveller.rpc.push.PushSource), as the real server uses it
    @property
    def epoch(self) -> int:
        return int(self.ctl.epoch)

    def on_decision(self, listener: Callable[[], None]) -> None:
        self.ctl.on_decision(listener)

    def levels_for(self, host: str) -> Any:
        return self._stamped(self.ctl.levels_for(host))

    def _stamped(self, reply: Any) -> Any:
        if reply is not None:
            self.built.setdefault(reply.epoch, time.time())
        return reply


def _pushes(path: Path) -> dict[int, dict[str, float]]:
    """epoch -> the agent's --trace-pushes stamps of the first push of that epoch."""
    import json

    out: dict[int, dict[str, float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line being written
                continue
            out.setdefault(int(entry["epoch"]), entry)
    return out


def stages(t0: float, stepped: float, built: float | None, push: dict[str, float] | None,
           seen: float) -> dict[str, float] | None:
    """One sample's milliseconds per stage (STAGES), or None if a stamp is missing or out of order (a
    level that came with a report reply first). A reply built before the step returned: wake is 0."""
    if built is None or push is None or push.get("arrived") is None:
        return None
    marks = (t0, stepped, max(built, stepped), push["arrived"], push["decoded"], push["applied"], seen)
    if any(b < a for a, b in zip(marks, marks[1:])):
        return None
    return {name: (b - a) * 1e3 for name, a, b in zip(STAGES, marks, marks[1:])}


def _stages_of(t0: float, stepped: float, epoch: int, seen: float, timed: _TimedWatch, trace: Path
               ) -> dict[str, float] | None:
    """stages() of a sample once the agent's trace line of ``epoch`` is written (it may lag the wire)."""
    deadline = time.monotonic() + 0.5
    while True:
        cut = stages(t0, stepped, timed.built.get(epoch), _pushes(trace).get(epoch), seen)
        if cut is not None or time.monotonic() > deadline:
            return cut
        time.sleep(0.01)


class _Log:
    """The agent's job log: one leveller-iter line per iteration bump."""

    def __init__(self, path: Path, start: float) -> None:
        from leveller.jobs.logline import format_line

        self.path, self.fmt = path, format_line
        self.iters = {"probe": 0, "other": 0}
        with path.open("w") as f:
            for job in self.iters:
                f.write(self.fmt(job, 0, start) + "\n")

    def bump(self, job: str, to: int) -> None:
        self.iters[job] = to
        with self.path.open("a") as f:
            f.write(self.fmt(job, to, time.time()) + "\n")


def _reported(ctl: Any, log: _Log, job: str) -> bool:
    """Whether the controller has seen the job's latest iteration in the log."""
    return _iterations(ctl, job) == log.iters[job]


def _wait(cond: Callable[[], Any], timeout_s: float, what: str, step_s: float = 0.005) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(step_s)
    raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")


def run(samples: int = 100, report_interval_s: float = 0.25, push: bool = True, seed: int = 1,
        progress: Progress | None = None) -> LatencyResult:
    """Measure ``samples`` decision -> wire latencies (see module doc)."""
    from leveller.controller.app import ControllerConfig, build_controller, check
    from leveller.controller.paths import SingleLinkPaths
    from leveller.core.qos import default_level_map
    from leveller.rpc.transport import serve
    from leveller.testbed.vethpair import VethPair

    check_tools()
    say = progress or (lambda msg: None)
    rng = random.Random(seed)
    result = LatencyResult("push" if push else "poll", report_interval_s)
    started = time.monotonic()
    level_map = default_level_map(2)
    procs: list[subprocess.Popen[bytes]] = []
    agent: subprocess.Popen[bytes] | None = None
    with tempfile.TemporaryDirectory(prefix="leveller-bench-levels-") as tmp, VethPair(prefix="lvb") as pair, \
            WireWatch(pair.ns_b, pair.if_b, str(pair.ip_a), PROBE_PORT) as wire:  # forks: before gRPC starts
        # as `leveller controller --levels 2 --lease 600 --switch-delta 0 --switch-dwell 0` builds it: every
        # sample's report must move the top job at once (the paper's switching rule)
        cfg = ControllerConfig(levels=2, tau=1.0, lease=600.0, switch_delta=0.0, switch_dwell=0.0)
        check(cfg)
        ctl = build_controller(cfg, SingleLinkPaths(), level_map)
        timed = _TimedWatch(ctl)
        server, port = serve(timed, "127.0.0.1:0", SECRET.encode())
        trace = Path(tmp) / "pushes.jsonl"
        try:
            say("starting iperf3 flows")
            seconds = str(int(30 + samples * (report_interval_s + 1.0) * 2))
            for iperf_port in (PROBE_PORT, OTHER_PORT):
                procs.append(subprocess.Popen(pair.exec_in(pair.ns_b, ["iperf3", "-s", "-1", "-p", str(iperf_port)]),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for iperf_port, rate in ((PROBE_PORT, PROBE_RATE), (OTHER_PORT, "1M")):
                _wait(functools.partial(_listening, pair.ns_b, iperf_port), 10, f"iperf3 server on port {iperf_port}",
                      0.05)
                procs.append(subprocess.Popen(pair.exec_in(pair.ns_a, [
                    "iperf3", "-c", str(pair.ip_b), "-p", str(iperf_port), "-u", "-b", rate, "-l", str(PACKET_BYTES),
                    "--pacing-timer", str(PACING_US), "-t", seconds]), stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
            log = _Log(Path(tmp) / "jobs.log", time.time() - 100.0)
            say("starting the agent (compiling the BPF program)")
            argv = [sys.executable, "-m", "leveller.cli", "agent", "--controller", f"127.0.0.1:{port}",
                    "--host", "bench", "--log", str(log.path), "--interval", str(report_interval_s),
                    "--job-ports", f"probe={PROBE_PORT}", "--job-ports", f"other={OTHER_PORT}",
                    "--ideal-time", "probe=1", "--ideal-time", "other=1",
                    "--dev", pair.if_a, "--netns", pair.ns_a] + (["--trace-pushes", str(trace)] if push else
                                                                 ["--no-push"])
            with open(Path(tmp) / "agent.out", "wb") as agent_out:
                agent = subprocess.Popen(argv, stdout=agent_out, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, LEVELLER_SECRET=SECRET))
            def flows_seen() -> bool:
                if agent.poll() is not None:
                    raise RuntimeError(f"the agent exited ({agent.returncode}): "
                                       f"{(Path(tmp) / 'agent.out').read_text()[-2000:]}")
                flows = ctl.status(time.time())["flows"]
                return {f["job"] for f in flows if f["flow"].startswith("udp")} == {"probe", "other"}
            _wait(flows_seen, 60, "the agent to report both UDP flows", 0.05)
            _wait(lambda: wire.packets > 100, 10, "probe packets at the receiver", 0.05)
            for i in range(samples):
                say(f"sample {i + 1}/{samples}")
                top, low = ("probe", "other") if i % 2 == 0 else ("other", "probe")
                log.bump(low, max(log.iters.values()) + 1)  # lower R for `top`: it gets level 1
                _wait(functools.partial(_reported, ctl, log, low), 10, f"the report of {low}")
                time.sleep(rng.uniform(0, report_interval_s))
                want = level_map.dscp[1] if top == "probe" else level_map.dscp[0]
                t0 = time.time()
                decision = ctl.step(t0)
                stepped, epoch = time.time(), ctl.epoch
                _check_decision(decision, top)
                seen = wire.first_after(t0, want, timeout_s=max(3.0, 3 * report_interval_s))
                if seen is None:
                    result.missed += 1
                    continue
                result.samples_ms.append((seen - t0) * 1e3)
                if push:
                    cut = _stages_of(t0, stepped, epoch, seen, timed, trace)
                    for name, ms in (cut or {}).items():
                        result.stages_ms.setdefault(name, []).append(ms)
        finally:
            if agent is not None:
                _stop(agent)
            for p in procs:
                _stop(p)
            server.stop(grace=None)
    if push:
        say("a bare gRPC long-poll reply, for reference")
        from leveller.bench.grpc_floor import measure

        result.grpc_floor_ms = measure(min(samples, 200))
    result.elapsed_s = time.monotonic() - started
    return result


def _iterations(ctl: Any, job: str) -> int | None:
    for j in ctl.status(time.time())["jobs"]:
        if j["job"] == job:
            return int(j["iterations"])
    return None


def _check_decision(decision: Any, top: str) -> None:
    if not decision.order or decision.order[0] != top:
        raise RuntimeError(f"the controller ranked {decision.order}, expected {top} first: benchmark invalid")


def _listening(ns: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Htln", f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, grace=10, sig=signal.SIGINT)
