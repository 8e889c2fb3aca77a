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
from typing import Any

WHERE = ("network", "link", "testbed")  # also leveller.experiments.recovery.run.WHERE


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


def run(args: argparse.Namespace) -> int:
    from leveller.commands.progress import Bar
    from leveller.experiments.recovery.run import check_options, run_experiment

    check_options(args)
    with Bar(["{task.description:>20}", "bar", "elapsed"], description="starting",
             show=None if args.where == "testbed" and not args.json else False) as bar:
        out = run_experiment(args, note=bar.print if bar.shown else (lambda _: None),
                             step=lambda what, done: bar.update(description=what, completed=done))
    if args.json:
        print(json.dumps(out))
        return 0
    _table(out)
    return 0


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
