"""Chaos: the leveller pair on the emulated cluster while its parts are killed and restarted on a schedule.

Builds the demo's cluster (OVS driven by the SDN app, a controller, an agent
with its eBPF marker on every host of a job) and runs the paper's pair (C:M =
1:1 and 1:2 on one bottleneck) under `leveller` twice for --duration seconds:
undisturbed (the baseline), then while --schedule kills parts with SIGKILL and
starts them again. A schedule is TARGET@AT+DOWN,... (seconds after the jobs
start; DOWN seconds dead); targets:
  ovs          ovs-vswitchd (restarted on its database; the SDN app reinstalls its rules)
  sdn          the SDN app (restarted on the same API port)
  controller   the controller (same command line and port)
  agent        the agent of the first job's sender (h1); agent:HOST for another (killed
               while its packets carry a mark, waiting up to 3 s for one)
Faults may not overlap and each leaves 5 s to recover before the next one.

Reported: min R of both runs and their ratio; per fault, the time from the
restart until the controller decided again, every job finished an iteration
and marked packets were back (on the agent's own host for an agent fault);
stale marks: packets seen on h4's eth0 with a rewritten DSCP later than one
lease after the last decision, or from a killed agent's host later than one
lease after the kill; and what the teardown left (namespaces, processes, run
directories, marker BPF programs). The RDMA shim is not part of the run (TCP
jobs), so no queue pair is checked; the report says so.
Writes chaos.json and chaos.png (R over time under faults and undisturbed,
faults shaded; the marks each sender's packets carried) to --out. Needs
root; everything is torn down at the end, also on Ctrl-C or an error.

Exit status 1 when a fault was not recovered from, a mark outlived its lease,
a fault could not be injected, or the teardown left something.

examples:
  leveller experiment chaos                                 the default schedule, 90 s per run
  leveller experiment chaos --duration 40 --schedule controller@10+3,agent@25+3 --json
  leveller experiment chaos --schedule ovs@10+5,ovs@30+1 --no-baseline --out /tmp/chaos
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from leveller.errors import UserError

MIN_DURATION_S, MAX_DURATION_S = 20.0, 3600.0


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.demo.chaos_check import DEFAULT_SCHEDULE

    parser.add_argument("--duration", type=float, default=90.0, metavar="S",
                        help="seconds each run's jobs run (default 90)")
    parser.add_argument("--schedule", default=DEFAULT_SCHEDULE, metavar="TARGET@AT+DOWN,...",
                        help=f"faults (see above; default {DEFAULT_SCHEDULE})")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the undisturbed run (no min R ratio)")
    parser.add_argument("--out", default="out/chaos", metavar="DIR",
                        help="directory for chaos.json and chaos.png (default out/chaos)")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip chaos.png")
    parser.add_argument("--name", default="chaos", help="testbed name, namespaces lvtb-NAME-* (default chaos)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (and nothing else) on stdout")
    parser.set_defaults(func=handle)


def _check(args: argparse.Namespace) -> None:
    from leveller.demo.chaos import EXAMPLE
    from leveller.demo.chaos_check import parse_schedule
    from leveller.demo.scenario import RECEIVER, plan
    from leveller.testbed.state import check_name

    if not MIN_DURATION_S <= args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration={args.duration:g}: allowed is {MIN_DURATION_S:g}..{MAX_DURATION_S:g} seconds")
    jobs = plan(EXAMPLE)
    parse_schedule(args.schedule, args.duration, sorted({j.sender for j in jobs} | {RECEIVER}), jobs[0].sender)
    check_name(args.name)
    if os.geteuid() != 0:
        raise UserError("experiment chaos needs root (namespaces, OVS, eBPF)")


def handle(args: argparse.Namespace) -> int:
    _check(args)
    from leveller.commands import output_dir
    from leveller.commands.experiment import live_progress
    from leveller.demo.chaos import run_chaos

    out = output_dir(args.out)
    with live_progress(width=40, log_notes=True) as (progress, note):
        report = run_chaos(args.duration, args.schedule, args.name, args.baseline, progress=progress, note=note,
                           plot=out / "chaos.png" if args.plot else None)
    (out / "chaos.json").write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report))
    else:
        _print(report, out)
    return 0 if report["verdict"] == "ok" else 1


def _print(report: dict[str, Any], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout)
    table = Table(title=f"chaos: the pair under leveller, {report['duration_s']:g} s, schedule {report['schedule']}")
    for col in ("fault", "at s", "down s", "recovered s", "decision s", "iterations s", "marks s"):
        table.add_column(col, justify="left" if col == "fault" else "right")

    def fmt(v: Any) -> str:
        return "never" if v is None else f"{v:.2f}"

    for f in report["faults"]:
        iters = [v for k, v in f.items() if k.startswith("iteration ")]
        table.add_row(f["fault"], f"{f['at_s']:.1f}", f"{f['down_s']:.1f}", fmt(f["recovered_s"]),
                      fmt(f["decision_s"]), fmt(None if None in iters else max(iters, default=None)),
                      fmt(f["marks_s"]), style=None if f["recovered_s"] is not None else "red")
    console.print(table)
    console.print("recovered: seconds from the restart until the controller decided, every job finished an "
                  "iteration and marked packets were back (the last of the three)")
    chaos, base = report["chaos"], report["baseline"]
    line = f"min R under faults {chaos['min']:.3f} ({', '.join(f'{j} {r:.3f}' for j, r in chaos['rates'].items())})"
    if base:
        line += f"; undisturbed {base['min']:.3f}: ratio {report['min_r_ratio']:.3f}"
    console.print(line)
    stale = report["stale_marks"]
    console.print(f"stale marks: {'none' if not stale else len(stale)} in {report['packets']} job packets seen on "
                  f"h4 (lease {report['settings']['lease_s']:g} s)")
    for v in stale[:5]:
        console.print(f"  [red]{v['host']} DSCP {v['dscp']} at {v['t']:.2f} s[/]: {v['why']}")
    console.print(f"RDMA queue pairs: not checked ({report['qp']['why']})")
    for e in report["fault_errors"]:
        console.print(f"[red]fault not injected[/]: {e}")
    clean = report["cleanup"]
    console.print("teardown: nothing left (namespaces, processes, /run/leveller, BPF programs)" if clean["clean"] else
                  f"[red]teardown left[/]: {json.dumps({k: v for k, v in clean.items() if k != 'clean'})}")
    console.print(f"verdict: [bold]{report['verdict']}[/]; report in {out / 'chaos.json'}"
                  + (f", plot in {report['plot']}" if report.get("plot") else ""))
