"""Recovery after a disturbance: cumulative vs windowed vs decayed R, in a simulator or on the testbed.

The paper's pair (C:M = 1:1 and 1:2, 0.25 s per unit: ideal iterations 0.5 s and
0.75 s) shares a 100 Mbit/s link under leveller with K = 2. From --at for --for
seconds an unmanaged flow starves job 1 (on a link only job 1 uses: its host's
uplink), then everything runs as before. Each kind of R the controller can rank
by is run in turn: the paper's cumulative R, R over the last --rate-window
seconds, R decayed with half-life --rate-half-life. Printed per kind:

  steady min R   min over jobs of R over the steady stretch before the disturbance
  recovery       seconds from the disturbance's end until min R over the last
                 --measure seconds is back within --band (5%) of the steady min R
                 and stays there --hold seconds ("-": not within the run)
  dip min R      the lowest min R over --measure seconds after the disturbance
  final min R    R over the last 30 s of the run

--where network (default): the network simulator on the dumbbell; link: the
single-link simulator; testbed: the live system (OVS + SDN app, controller,
agents, eBPF marking, the job emulator) with an iperf3 UDP flood from h1 as the
unmanaged flow; needs root, about --run x 3 + 30 s. Simulators re-rank at every
iteration end (--tau 0); the testbed's controller every 0.1 s.

examples:
  leveller experiment recovery                           network simulator, 30 s starvation at 60 s
  leveller experiment recovery --where link --json
  leveller experiment recovery --where testbed --at 40 --for 30 --run 240
  leveller experiment recovery --rate-window 30 --rate-half-life 5 --run 400
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from leveller.errors import UserError

WHERE = ("network", "link", "testbed")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--where", choices=WHERE, default="network",
                        help="network simulator (default), single-link simulator, or the live testbed (root)")
    parser.add_argument("--at", type=float, default=None, metavar="S",
                        help="the disturbance starts S seconds into the run (default 60; testbed 40)")
    parser.add_argument("--for", dest="seconds", type=float, default=30.0, metavar="S",
                        help="and lasts S seconds (default 30)")
    parser.add_argument("--run", type=float, default=None, metavar="S",
                        help="length of each run (default 300; testbed 240)")
    parser.add_argument("--warmup", type=float, default=15.0, metavar="S",
                        help="the steady stretch starts here (default 15)")
    parser.add_argument("--starve", choices=("1", "2"), default="1", help="which job starves (default 1)")
    parser.add_argument("--rate-window", type=float, default=20.0, metavar="S",
                        help="the windowed R's window (default 20)")
    parser.add_argument("--rate-half-life", type=float, default=10.0, metavar="S",
                        help="the decayed R's half-life (default 10)")
    parser.add_argument("--measure", type=float, default=10.0, metavar="S",
                        help="min R is measured over the last S seconds (default 10)")
    parser.add_argument("--hold", type=float, default=10.0, metavar="S",
                        help="recovered = inside the band for S seconds (default 10)")
    parser.add_argument("--band", type=float, default=0.05, metavar="F",
                        help="relative band around the steady min R (default 0.05)")
    parser.add_argument("--out", metavar="DIR",
                        help="also write DIR/recovery.json and DIR/recovery.png (R over time per kind of R); "
                        "on the testbed, each run's job logs and controller decisions too")
    parser.add_argument("--name", default="recovery", help="testbed name (--where testbed; default recovery)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    testbed = args.where == "testbed"
    args.at = args.at if args.at is not None else (40.0 if testbed else 60.0)
    args.run = args.run if args.run is not None else (240.0 if testbed else 300.0)
    for option, value, lo, hi in (("--for", args.seconds, 1, 3600), ("--rate-window", args.rate_window, 1, 3600),
                                  ("--rate-half-life", args.rate_half_life, 0.5, 3600),
                                  ("--measure", args.measure, 1, 600), ("--hold", args.hold, 0.5, 600),
                                  ("--band", args.band, 0.001, 0.5), ("--warmup", args.warmup, 0, 3600)):
        if not (math.isfinite(value) and lo <= value <= hi):
            raise UserError(f"{option} {value:g}: allowed is {lo:g}..{hi:g}")
    if not args.warmup + args.measure <= args.at:
        raise UserError(f"--at {args.at:g}: must leave --warmup ({args.warmup:g}) + --measure ({args.measure:g}) "
                        "seconds of steady run before the disturbance")
    if not args.at + args.seconds + args.hold + 30 <= args.run <= (600 if testbed else 86400):
        raise UserError(f"--run {args.run:g}: must be at least --at + --for + --hold + 30 s "
                        f"({args.at + args.seconds + args.hold + 30:g})" + (" and at most 600 on the testbed"
                                                                              if testbed else ""))
    if testbed and os.geteuid() != 0:
        raise UserError("--where testbed needs root (network namespaces, Open vSwitch, eBPF)")


def run(args: argparse.Namespace) -> int:
    from fractions import Fraction

    from leveller.bench.recovery import Disturbance, RateMode, SimSetup, network_recovery, simulate_recovery

    _check(args)
    modes = [RateMode(), RateMode(window_s=args.rate_window), RateMode(half_life_s=args.rate_half_life)]
    kw = dict(measure_s=args.measure, hold_s=args.hold, band=args.band)
    out: dict[str, Any] = {"where": args.where, "disturbance": {"job": args.starve, "at_s": args.at,
                                                                "seconds": args.seconds}, "run_s": args.run}
    if args.where == "testbed":
        from leveller.demo.recovery import LiveRecoverySetup, live_recovery, summary

        if args.starve != "1":
            raise UserError("--starve: on the testbed the unmanaged flow leaves job 1's host (h1)")
        setup = LiveRecoverySetup(at_s=args.at, seconds=args.seconds, run_s=args.run, warmup_s=args.warmup,
                                  measure_s=args.measure, hold_s=args.hold, band=args.band)
        with _progress(args.json) as (note, step):
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
    if args.json:
        print(json.dumps(out))
        return 0
    _table(out)
    return 0


class _progress:
    """Notes and a per-step bar on a terminal (stderr); silent otherwise or with --json."""

    def __init__(self, quiet: bool) -> None:
        import sys

        self.enabled = not quiet and sys.stderr.isatty()
        self.progress: Any = None
        self.task: Any = None

    def __enter__(self) -> tuple[Any, Any]:
        from rich.console import Console

        console = Console(stderr=True)
        if not self.enabled:
            return (lambda _: None), (lambda _a, _b: None)
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description:>20}"), BarColumn(), TimeElapsedColumn(),
                                 console=console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=1.0)

        def step(what: str, done: float) -> None:
            self.progress.update(self.task, description=what, completed=done)

        return (lambda text: self.progress.console.print(text)), step

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()


def _table(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    d = out["disturbance"]
    table = Table(title=f"{out['where']}: job {d['job']} starved {d['seconds']:g} s from t = {d['at_s']:g} s, "
                        f"runs of {out['run_s']:g} s")
    for col in ("R ranked by", "steady min R", "recovery s", "dip min R", "final min R"):
        table.add_column(col, justify="right")
    for m in out["modes"]:
        table.add_row(m["mode"], f"{m['steady_min']:.3f}", "-" if m["recovery_s"] is None else f"{m['recovery_s']:.1f}",
                      f"{m['dip_min']:.3f}", f"{m['final_min']:.3f}")
    Console().print(table)
    if "plot" in out:
        Console().print(f"R over time: {out['plot']}")
