"""Recovery after a disturbance on the live testbed: cumulative vs windowed vs decayed R.

The demo's cluster (h1, h2, h3 -> h4 on one switch, 100 Mbit/s, K = 2) and the
paper's pair: j1 (C:M = 1:1) sends from h1, j2 (1:2) from h2, both to h4, so
they meet on the switch port towards h4. The controller runs leveller with
each kind of R in turn (`--rate-window`, `--rate-half-life`). At ``at_s``
into each run an unmanaged flow (iperf3 UDP a little above the link rate,
reported by no agent, never marked) leaves h1 for h3 for ``seconds``. h1's
egress has its own strict priority for that traffic (an HTB class above
everything else but a 1 % trickle, e.g. a host's storage traffic), so j1
starves (about one iteration in 30 s instead of about 50) while j2 and
the switch port towards h4 are untouched; outside the flood h1's egress shapes
like every host's (same rate, same 20 ms of queue), and it gets its usual
shaper back after the run.
R is measured from the jobs' logs (leveller.bench.recovery: steady min R,
recovery time into the 5 % band, dip, final min R); the controller's
decisions say who held the top level when.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.bench.recovery import Disturbance, RateMode, RecoveryFigures, recovery_figures
from leveller.errors import UserError
from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.options import check_ranges
from leveller.experiments.shared.policy_run import LiveSettings, RunOutput, profile_alone, run_policy
from leveller.experiments.shared.star import LINK_MBPS
from leveller.procs import run, stop_process

FLOOD_PORT = 5299
# what the rest of h1's traffic keeps during the flood: a trickle that keeps j1's TCP ACK-clocked (no
# retransmission timer backing off for tens of seconds, which would stall j1 long after the flood), too
# little for more than about one iteration in 30 s
STARVED_SHARE = 0.01
FLOOD_FROM, FLOOD_TO = "h1", "h3"  # j1's sender, and a host no job uses
STARVED_JOB = "j1"
Note = Callable[[str], None]


@dataclass(frozen=True)
class LiveRecoverySetup:
    at_s: float = 40.0  # the flood starts this long after the jobs
    seconds: float = 30.0  # and lasts this long
    run_s: float = 240.0  # length of each run
    warmup_s: float = 15.0  # steady min R is measured from here to the flood
    tau_s: float = 0.1
    alone_s: float = 10.0  # profiling run per job shape
    measure_s: float = 10.0
    hold_s: float = 10.0
    band: float = 0.05


@dataclass
class Flood:
    """iperf3 UDP from h1 to h3 at twice the link rate, ``at_s`` after entering, for ``seconds``."""

    cluster: DemoCluster
    at_s: float
    seconds: float
    started: float | None = None
    stopped: float | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _priority_egress(self) -> None:
        """h1's egress: HTB with the flood's class (UDP to FLOOD_PORT) strictly above the rest; the rest
        queues like the usual shaper (bfifo of its size)."""
        rate = f"{LINK_MBPS:g}mbit"
        limit = str(max(64_000, int(LINK_MBPS * 1e6 / 8 * 0.002)) + int(LINK_MBPS * 1e6 / 8 * 0.02))
        tc = ["tc"]
        # the testbed's own HTB root (its priority queues) cannot be changed into this one: removed first
        run(self.cluster.testbed.exec_argv(FLOOD_FROM, [*tc, "qdisc", "del", "dev", "eth0", "root"]), check=False)
        # children of one parent class: only siblings under a parent lend each other bandwidth
        for argv in (["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "2"],
                     ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", rate,
                      "ceil", rate],
                     ["class", "add", "dev", "eth0", "parent", "1:10", "classid", "1:1", "htb", "rate", rate,
                      "ceil", rate, "prio", "0"],
                     ["class", "add", "dev", "eth0", "parent", "1:10", "classid", "1:2", "htb", "rate",
                      f"{LINK_MBPS * STARVED_SHARE:g}mbit", "ceil", rate, "prio", "1"],
                     ["qdisc", "add", "dev", "eth0", "parent", "1:2", "bfifo", "limit", limit],
                     ["filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                      "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", str(FLOOD_PORT), "0xffff",
                      "flowid", "1:1"]):
            run(self.cluster.testbed.exec_argv(FLOOD_FROM, tc + argv))

    def _usual_egress(self) -> None:
        """h1's egress as the testbed built it (its strict-priority queues); best effort, as teardown."""
        from leveller.testbed.cluster import host_egress, tc_batch

        tb = self.cluster.testbed
        try:  # the flood's HTB root cannot be changed into the testbed's: removed first
            run(tb.exec_argv(FLOOD_FROM, ["tc", "qdisc", "del", "dev", "eth0", "root"]), check=False)
            tc_batch(tb.netns(FLOOD_FROM), host_egress(LINK_MBPS, tb.topology.levels, tb.state.queue_floor))
        except (RuntimeError, OSError, subprocess.SubprocessError):
            pass

    @contextlib.contextmanager
    def running(self) -> Iterator[Flood]:
        tb = self.cluster.testbed
        try:
            self._priority_egress()
        except BaseException:
            self._usual_egress()
            raise
        server = subprocess.Popen(tb.exec_argv(FLOOD_TO, ["iperf3", "-s", "-1", "-p", str(FLOOD_PORT)]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._procs.append(server)
        t0 = time.time()
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._usual_egress()
            self._stop.set()
            self._thread.join(timeout=self.at_s + self.seconds + 10)
            for p in self._procs:
                stop_process(p)

    def _run(self, t0: float) -> None:
        if self._stop.wait(max(0.0, t0 + self.at_s - time.time())):
            return
        tb = self.cluster.testbed
        argv = ["iperf3", "-c", self.cluster.ip(FLOOD_TO), "-p", str(FLOOD_PORT), "-u", "-b",
                f"{1.2 * LINK_MBPS:g}M", "-l", "1400", "-t", f"{self.seconds:g}", "--connect-timeout", "3000"]
        self.started = time.time()
        client = subprocess.Popen(tb.exec_argv(FLOOD_FROM, argv), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        self._procs.append(client)
        while client.poll() is None and not self._stop.wait(0.1):
            pass
        if client.poll() is None:
            client.terminate()
        client.wait()
        self.stopped = time.time()


@dataclass
class LiveRecoveryRun:
    mode: RateMode
    figures: RecoveryFigures
    output: RunOutput
    flood: tuple[float, float]  # (start, end) in seconds from the jobs' start

    def top_share(self, job: str, a: float, b: float) -> float:
        """Share of the controller's decisions in [a, b] s (from the jobs' start) with ``job`` first."""
        t0 = self.output.t_start
        orders = [d["order"] for d in self.output.decisions
                  if d.get("order") and a <= d.get("t", 0) - t0 <= b]
        return sum(1 for o in orders if o[0] == job) / len(orders) if orders else float("nan")


def controller_args(mode: RateMode) -> list[str]:
    if mode.window_s is not None:
        return ["--rate-window", f"{mode.window_s:g}"]
    if mode.half_life_s is not None:
        return ["--rate-half-life", f"{mode.half_life_s:g}"]
    return []


def live_recovery(modes: Sequence[RateMode], setup: LiveRecoverySetup, name: str = "recovery",
                  note: Note = lambda _: None, step: Callable[[str, float], None] = lambda _a, _b: None,
                  keep: Path | None = None) -> tuple[list[LiveRecoveryRun], dict[str, float]]:
    """Profile the pair's shapes alone, then one run per mode with the flood; figures per run.
    ``keep``: copy each run's files (job logs, controller decisions, agents' output) there."""
    settings = LiveSettings(seconds=setup.run_s, tau_s=setup.tau_s, alone_s=setup.alone_s)
    jobs = [j.live(settings.unit_s) for j in plan("pair")]
    runs: list[LiveRecoveryRun] = []
    with DemoCluster(name, progress=note) as cluster:
        ideal: dict[str, float] = {}
        for job in jobs:
            ideal[job.name] = profile_alone(cluster, job, settings, functools.partial(step, f"profiling {job.name}"))
        for mode in modes:
            flood = Flood(cluster, setup.at_s, setup.seconds)
            tag = f"recovery-{len(runs)}"
            out = run_policy(cluster, tag, "leveller", jobs, ideal, settings,
                             functools.partial(step, mode.name), background=flood.running,
                             controller_args=controller_args(mode))
            if keep is not None:
                shutil.copytree(cluster.work_dir / tag, keep / f"{tag}-{mode.name.replace(' ', '-')}",
                                dirs_exist_ok=True)
            if flood.started is None or flood.stopped is None:
                raise RuntimeError("the unmanaged flow never ran (iperf3 in the testbed's namespaces)")
            d = Disturbance(STARVED_JOB, flood.started - out.t_start, flood.stopped - flood.started)
            ends = {j.name: [t - out.t_start for t in out.logs[j.name].end_times()] for j in jobs}
            starts = {j.name: (out.logs[j.name].start or out.t_start) - out.t_start for j in jobs}
            figures = recovery_figures(mode, ends, starts, ideal, d, out.t_end - out.t_start, setup.warmup_s,
                                       setup.measure_s, setup.hold_s, setup.band)
            runs.append(LiveRecoveryRun(mode, figures, out, (d.start_s, d.end_s)))
            note(f"{mode.name}: steady min R {figures.steady_min:.3f}, recovery "
                 f"{'-' if figures.recovery_s is None else f'{figures.recovery_s:.1f} s'}")
    return runs, ideal


def summary(runs: Sequence[LiveRecoveryRun]) -> list[dict[str, Any]]:
    """Figures per run, j1's iterations while flooded (after its first second), and the share of
    decisions in the 20 s after the flood that put j1 first."""
    out = []
    for r in runs:
        a, b = r.flood
        ends = [t - r.output.t_start for t in r.output.logs[STARVED_JOB].end_times()]
        out.append(r.figures.to_dict() | {"flood_s": [round(a, 2), round(b, 2)],
                                          "starved_iterations": sum(1 for t in ends if a + 1 < t <= b),
                                          "j1_first_after": r.top_share(STARVED_JOB, b, b + 20)})
    return out


def check_options(args: Any) -> None:
    """`leveller experiment recovery`'s options (``args``; --at and --run get their defaults per --where);
    UserError names the option."""
    testbed = args.where == "testbed"
    args.at = args.at if args.at is not None else (40.0 if testbed else 60.0)
    args.run = args.run if args.run is not None else (240.0 if testbed else 300.0)
    check_ranges(("--for", args.seconds, 1, 3600, ""), ("--rate-window", args.rate_window, 1, 3600, ""),
                 ("--rate-half-life", args.rate_half_life, 0.5, 3600, ""), ("--measure", args.measure, 1, 600, ""),
                 ("--hold", args.hold, 0.5, 600, ""), ("--band", args.band, 0.001, 0.5, ""),
                 ("--warmup", args.warmup, 0, 3600, ""))
    if not args.warmup + args.measure <= args.at:
        raise UserError(f"--at {args.at:g}: must leave --warmup ({args.warmup:g}) + --measure ({args.measure:g}) "
                        "seconds of steady run before the disturbance")
    if not args.at + args.seconds + args.hold + 30 <= args.run <= (600 if testbed else 86400):
        raise UserError(f"--run {args.run:g}: must be at least --at + --for + --hold + 30 s "
                        f"({args.at + args.seconds + args.hold + 30:g})" + (" and at most 600 on the testbed"
                                                                              if testbed else ""))
    if testbed and os.geteuid() != 0:
        raise UserError("--where testbed needs root (network namespaces, Open vSwitch, eBPF)")


def run_experiment(args: Any, note: Note = lambda _: None,
                   step: Callable[[str, float], None] = lambda _a, _b: None) -> dict[str, Any]:
    """`leveller experiment recovery` with checked options ``args``: its JSON object (also DIR/recovery.json
    with --out, with the plot DIR/recovery.png)."""
    from fractions import Fraction

    from leveller.bench.recovery import SimSetup, network_recovery, simulate_recovery

    modes = [RateMode(), RateMode(window_s=args.rate_window), RateMode(half_life_s=args.rate_half_life)]
    kw = dict(measure_s=args.measure, hold_s=args.hold, band=args.band)
    out: dict[str, Any] = {"where": args.where, "disturbance": {"job": args.starve, "at_s": args.at,
                                                                "seconds": args.seconds}, "run_s": args.run}
    if args.where == "testbed":
        if args.starve != "1":
            raise UserError("--starve: on the testbed the unmanaged flow leaves job 1's host (h1)")
        setup = LiveRecoverySetup(at_s=args.at, seconds=args.seconds, run_s=args.run, warmup_s=args.warmup,
                                  measure_s=args.measure, hold_s=args.hold, band=args.band)
        runs, ideal = live_recovery(modes, setup, name=args.name, note=note, step=step,
                                    keep=Path(args.out) if args.out else None)
        out["ideal_s"] = ideal
        out["modes"] = summary(runs)
        figures = [r.figures for r in runs]
    else:
        d = Disturbance(args.starve, args.at, args.seconds)
        if args.where == "link":
            half = Fraction(1, 4)
            figures = simulate_recovery(SimSetup(((half, half), (half, 2 * half)), d, args.run, args.warmup),
                                        modes, **kw)
        else:
            figures = network_recovery(modes, d, args.run, args.warmup, **kw)
        out["modes"] = [f.to_dict() for f in figures]
    if args.out:
        from leveller.bench.recovery import plot_recovery

        outdir = Path(args.out)
        outdir.mkdir(parents=True, exist_ok=True)
        (outdir / "recovery.json").write_text(json.dumps(out, indent=1))
        dist = out["disturbance"]
        plot_recovery(outdir / "recovery.png", figures, args.measure,
                      f"{args.where}: job {dist['job']} starved {dist['seconds']:g} s from {dist['at_s']:g} s")
        out["plot"] = str(outdir / "recovery.png")
    return out
