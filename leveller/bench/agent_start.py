"""How long a starting agent takes to mark its first packet, with each way of loading its eBPF program.

Real parts: a veth pair between two fresh namespaces; two paced iperf3 UDP flows from the sender's
namespace (jobs "probe", the lowest R, and "other"); a `leveller controller` process (K = 2, tau
0.1 s) on loopback; a capture in the receiver's namespace stamped by the kernel (SO_TIMESTAMPNS).
Each sample starts a `leveller agent` process with ``--loader L`` on the sender's veth and measures,
from just before the process is started:

- ``loaded_s``: to the agent's log line saying its datapath is loaded (Python's start, the imports,
  then libbpf loading the CO-RE object or bcc compiling the C, from the line's own time stamp),
- ``first_mark_s``: to the first probe packet carrying the job's DSCP at the receiver.

The agent is stopped (SIGINT: it removes its filter) and the wire seen unmarked again before the
next sample. Samples of the loaders alternate, the order rotating each round; medians are reported.
Everything is removed on exit, also on Ctrl-C.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.procs import stop_process

PROBE_PORT, OTHER_PORT = 5201, 5202
SECRET = "bench-agent-start-0123456789abcdef"
DSCP_TOP = 8  # level 1 of the default K = 2 map
LOADED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) leveller\.agent\.datapath INFO eBPF datapath loaded "
                    r"with (\w+)", re.M)
MAX_SAMPLES = 50

Progress = Callable[[str], None]


@dataclass
class StartResult:
    loaders: tuple[str, ...]
    first_mark_s: dict[str, list[float]] = field(default_factory=dict)
    loaded_s: dict[str, list[float]] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """{"samples", "loaders": {L: {"first_mark_s": {median, min, max}, "loaded_s": {...}, "runs": {...}}},
        "elapsed_s"}."""
        def summary(xs: list[float]) -> dict[str, float]:
            return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}

        return {"samples": min(len(v) for v in self.first_mark_s.values()),
                "loaders": {name: {"first_mark_s": summary(self.first_mark_s[name]),
                                   "loaded_s": summary(self.loaded_s[name]),
                                   "runs": {"first_mark_s": [round(x, 3) for x in self.first_mark_s[name]],
                                            "loaded_s": [round(x, 3) for x in self.loaded_s[name]]}}
                            for name in self.loaders},
                "elapsed_s": round(self.elapsed_s, 1)}


def log_time(line_stamp: str) -> float:
    """The wall-clock time of a logging asctime stamp (local time, milliseconds)."""
    return datetime.datetime.strptime(line_stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def loaded_at(output: str) -> tuple[float, str] | None:
    """(time, loader) of the agent's "eBPF datapath loaded with L" log line, if written yet."""
    m = LOADED.search(output)
    return (log_time(m.group(1)), m.group(2)) if m else None


def _wait(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(samples: int = 5, loaders: Sequence[str] = ("libbpf", "bcc"),
        progress: Progress | None = None) -> StartResult:
    """Measure ``samples`` agent starts per loader (see the module docstring)."""
    from leveller.agent.bpfload import check_loader
    from leveller.bench.levels_latency import WireWatch, check_tools
    from leveller.jobs.logline import format_line
    from leveller.testbed.vethpair import VethPair

    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise UserError(f"--samples={samples!r}: allowed is an integer in 1..{MAX_SAMPLES}")
    if not loaders or len(set(loaders)) != len(loaders):
        raise UserError(f"--loaders {','.join(loaders)}: name each of libbpf, bcc at most once")
    for name in loaders:
        if check_loader(name, "--loaders") == "auto":
            raise UserError("--loaders auto: name the loaders to compare (libbpf, bcc)")
    check_tools()
    say = progress or (lambda _msg: None)
    result = StartResult(tuple(loaders), {n: [] for n in loaders}, {n: [] for n in loaders})
    started = time.monotonic()
    env = dict(os.environ, LEVELLER_SECRET=SECRET)
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="leveller-bench-start-") as tmp_dir, VethPair(prefix="lvs") as pair, \
            WireWatch(pair.ns_b, pair.if_b, str(pair.ip_a), PROBE_PORT) as wire:
        tmp = Path(tmp_dir)
        try:
            say("starting the controller and two iperf3 flows")
            port = _free_port()
            with open(tmp / "controller.out", "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "leveller.cli", "controller", "--listen", f"127.0.0.1:{port}",
                     "--tau", "0.1", "--levels", "2", "--lease", "600"], stdout=out, stderr=subprocess.STDOUT,
                    env=env))
            _wait(lambda: _listening(port), 30, "the controller to listen")
            seconds = str(int(60 + samples * len(loaders) * 20))
            for iperf_port in (PROBE_PORT, OTHER_PORT):
                procs.append(subprocess.Popen(pair.exec_in(pair.ns_b, ["iperf3", "-s", "-1", "-p", str(iperf_port)]),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for iperf_port in (PROBE_PORT, OTHER_PORT):
                _wait(functools.partial(_ns_listening, pair, iperf_port), 10, f"iperf3 server on port {iperf_port}")
                procs.append(subprocess.Popen(pair.exec_in(pair.ns_a, [
                    "iperf3", "-c", str(pair.ip_b), "-p", str(iperf_port), "-u", "-b", "10M", "-l", "1000",
                    "--pacing-timer", "200", "-t", seconds]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            log = tmp / "jobs.log"
            begun = time.time() - 100.0  # probe: no iteration yet, the lowest R: it gets the top level
            log.write_text(format_line("probe", 0, begun) + "\n" + format_line("other", 1, begun) + "\n")
            _wait(lambda: wire.packets > 100, 10, "probe packets at the receiver")
            argv = [sys.executable, "-m", "leveller.cli", "agent", "--controller", f"127.0.0.1:{port}",
                    "--host", "bench", "--log", str(log), "--from-start", "--interval", "0.2",
                    "--job-ports", f"probe={PROBE_PORT}", "--job-ports", f"other={OTHER_PORT}",
                    "--ideal-time", "probe=1", "--ideal-time", "other=1", "--dev", pair.if_a, "--netns", pair.ns_a]
            for rnd in range(samples):
                order = list(loaders[rnd % len(loaders):]) + list(loaders[:rnd % len(loaders)])
                for name in order:
                    say(f"round {rnd + 1}/{samples}: agent with --loader {name}")
                    mark_s, load_s = _one_start(argv + ["--loader", name], name, tmp / f"agent-{rnd}-{name}.out",
                                                wire, env)
                    result.first_mark_s[name].append(mark_s)
                    result.loaded_s[name].append(load_s)
        finally:
            for p in procs:
                stop_process(p)
    result.elapsed_s = time.monotonic() - started
    return result


def _ns_listening(pair: Any, port: int) -> bool:
    out = subprocess.run(pair.exec_in(pair.ns_b, ["ss", "-Hltn", f"sport = :{port}"]), capture_output=True,
                         text=True)
    return bool(out.stdout.strip())


def _one_start(argv: list[str], loader: str, out_path: Path, wire: Any, env: dict[str, str]) -> tuple[float, float]:
    """(first mark, datapath loaded) in seconds after the agent process was started."""
    with open(out_path, "wb") as out:
        t0 = time.time()
        agent = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        seen = wire.first_after(t0, DSCP_TOP, timeout_s=60)
        text = out_path.read_text(errors="replace")
        if seen is None:
            raise RuntimeError(f"the agent (--loader {loader}) marked nothing within 60 s: {text[-2000:]}")
        loaded = _wait(lambda: loaded_at(out_path.read_text(errors="replace")), 5, "the agent's datapath log line")
        if loaded[1] != loader:
            raise RuntimeError(f"--loader {loader}: the agent says it loaded with {loaded[1]}")
    finally:
        stopping = time.time()
        stop_process(agent, grace=20, sig=signal.SIGINT)  # SIGINT: it clears its marks and removes its filter
    if agent.returncode != 0:
        raise RuntimeError(f"the agent exited with {agent.returncode}: {out_path.read_text()[-2000:]}")
    if wire.first_after(stopping, 0, timeout_s=10) is None:  # unmarked again: the next agent starts from nothing
        raise RuntimeError("the probe's packets still carry a DSCP after the agent stopped")
    return seen - t0, loaded[0] - t0
