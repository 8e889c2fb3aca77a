"""Soak: the whole live system for a long run, memory and open files of every service sampled.

Runs the demo's cluster (OVS driven by the SDN app, a controller, an agent per
host with its eBPF marker) with the paper's trio of emulated jobs (C:M = 1:2,
1:2, 2:1) under `leveller` for --duration seconds. Every --interval seconds the
controller, each agent and the SDN app are read from /proc: resident memory
(VmRSS), open file descriptors, CPU time. Reported per process: RSS and fd count
in the first and last window after a warm-up (10% of the run, at most 60 s),
their growth, the least-squares slope per hour, CPU share, and a verdict:
"ok", "growing" (RSS up by more than max(4 MiB, 5%) or fds by more than 2), or
"exited" (it died during the run); the run is "stable" when all are ok.
Writes soak.json (with every sample) and soak.png (RSS and fds over time) to
--out. Needs root; everything is torn down at the end, also on Ctrl-C or an
error, and the report lists anything of the run that was left ("cleanup").

Exit status 1 when the verdict is not "stable" or something was left behind.

examples:
  leveller experiment soak                          10 minutes, a sample every 5 s
  leveller experiment soak --duration 3600 --json   an hour, JSON on stdout
  leveller experiment soak --duration 60 --interval 2 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from leveller.errors import UserError

MIN_DURATION_S, MAX_DURATION_S = 20.0, 7 * 86400.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=600.0, metavar="S",
                        help="seconds the jobs run, and the services are sampled (default 600)")
    parser.add_argument("--interval", type=float, default=5.0, metavar="S",
                        help="seconds between two samples of every service (default 5)")
    from leveller.commands.experiment import add_live_options

    add_live_options(parser, "soak", "directory for soak.json and soak.png (default out/soak)", "skip soak.png")
    parser.set_defaults(func=handle)


def _check(args: argparse.Namespace) -> None:
    if not MIN_DURATION_S <= args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration={args.duration:g}: allowed is {MIN_DURATION_S:g}..{MAX_DURATION_S:g} seconds")
    if not 0.5 <= args.interval <= args.duration / 8:
        raise UserError(f"--interval={args.interval:g}: allowed is 0.5 s up to --duration / 8 "
                        f"({args.duration / 8:g} s), so that both windows hold samples")
    from leveller.experiments.shared.options import check_live

    check_live(args, "experiment soak")


def handle(args: argparse.Namespace) -> int:
    _check(args)
    from leveller.commands import output_dir
    from leveller.commands.experiment import live_progress
    from leveller.experiments.soak.run import plot_soak, run_soak

    out = output_dir(args.out)
    with live_progress() as (progress, note):
        report, series = run_soak(args.duration, args.interval, args.name, progress=progress, note=note)
    (out / "soak.json").write_text(json.dumps({**report, "series": series,
                                               "series_columns": ["t_s", "rss_kib", "fds", "cpu_s"]}, indent=1))
    if args.plot:
        plot_soak(out / "soak.png", series, report)
        report["plot"] = str(out / "soak.png")
    if args.json:
        print(json.dumps(report))
    else:
        _print(report, out)
    return 0 if report["verdict"] == "stable" and report["cleanup"]["clean"] else 1


def _print(report: dict[str, Any], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout)
    table = Table(title=f"soak: {report['duration_s'] / 60:.1f} min of the live system, a sample every "
                        f"{report['interval_s']:g} s")
    for col in ("process", "RSS MiB", "growth", "MiB/h", "fds", "CPU", "verdict"):
        table.add_column(col, justify="left" if col in ("process", "verdict") else "right")
    for role, p in report["processes"].items():
        if "rss_mib" not in p:
            table.add_row(role, "", "", "", "", "", p["verdict"], style="red")
            continue
        m, f = p["rss_mib"], p["fds"]
        table.add_row(role, f"{m['first']:.1f} -> {m['last']:.1f}", f"{m['growth']:+.2f}", f"{m['slope_per_h']:+.1f}",
                      f"{f['first']} -> {f['last']}", f"{p['cpu_pct']:.0f}%", p["verdict"],
                      style=None if p["verdict"] == "ok" else "red")
    console.print(table)
    console.print("RSS: mean of the first -> last window after the warm-up; MiB/h: least-squares slope; "
                  "fds: highest in each window")
    jobs = ", ".join(f"{j} {v['iterations']} iterations, R {v['rate']:.3f}" for j, v in report["jobs"].items())
    console.print(f"jobs: {jobs}; {report['decisions']} controller decisions")
    clean = report["cleanup"]
    console.print("teardown: nothing left" if clean["clean"] else
                  f"[red]teardown left[/]: {json.dumps({k: v for k, v in clean.items() if k != 'clean'})}")
    console.print(f"verdict: [bold]{report['verdict']}[/]; samples and plot in {out}")
