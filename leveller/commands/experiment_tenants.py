"""Tenants: the paper's testbed experiments (Figures 9 and 10) on the emulated cluster.

Figure 10: N tenants (--tenants, default 2,3,4) share the `leafspine` testbed (3 leaves x 2
spines, 4 hosts per leaf: the paper's 12 GPUs with a NIC each; 25 Mbit/s links). Per tenant count
and repeat, a seeded draw places every tenant on 2-4 hosts across at least two leaves (its ring
all-reduce crosses the spines, where tenants meet) and gives it a model of the catalog derived
from real H200 profiles (compute time, gradient bytes, overlap slack; the compute : communication
ratio of a ring all-reduce at --ref-gbps, times scaled to the emulated links: printed at the
start). Every job is profiled alone in place (its ideal iteration time), then runs for --duration
under every policy (--policies) with the whole live system: controller, an agent per host, eBPF
marks, OVS strict-priority queues. `leveller` includes the agents' overlap rule; `cassini`
shifts iterations instead of giving priorities. R = iterations x ideal / elapsed per job; min and
average over the tenants of a run.

--fig9: three 2-host jobs on the `dumbbell`'s one bottleneck with 2 levels; prints the iterations
of every job in the common window and the minimum R per policy (the paper: 14/27/14 LEVELLER,
13/26/15 CASSINI, 12/23/17 Crux; minimum R 0.69, 0.63, 0.61).

Output: a table (or with --json the object {"<tenants>": {"<policy>": {"min": [R per repeat],
"avg": [R per repeat]}}}; with --fig9 {"fig9": {"<policy>": {"iterations", "rates", "min",
"avg"}}, ...}); in --out: tenants.json (or fig9.json) with every detail, and the plot
tenants.png (or fig9.png). Each repeat builds and removes its own cluster; with --lock FILE it
holds an flock on FILE for the repeat only, so others on a shared machine interleave. Needs root.
Ctrl-C tears everything down.

examples:
  leveller experiment tenants --repeats 3 --seed 1
  leveller experiment tenants --tenants 4 --policies crux,cassini,leveller --repeats 10 --json
  leveller experiment tenants --fig9 --duration 60
  leveller experiment tenants --plan --tenants 4 --repeats 2     the draws, without running
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenants", default="2,3,4", metavar="N,...",
                        help="tenant counts, comma-separated (default 2,3,4)")
    parser.add_argument("--policies", default=None, metavar="P,...",
                        help="comma-separated subset of fair,crux,cassini,leveller (default: all four; "
                        "with --fig9 crux,cassini,leveller)")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="placements per tenant count (default 3; the paper: at least 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the placements and models (default 0)")
    parser.add_argument("--levels", type=int, default=4, metavar="K",
                        help="switch priority levels on the leaf-spine (default 4; --fig9 always uses 2)")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of every policy run (default 60)")
    parser.add_argument("--alone", type=float, default=10.0, metavar="S",
                        help="seconds of every job's run alone, for its ideal time (default 10)")
    parser.add_argument("--ref-gbps", type=float, default=100.0, metavar="G",
                        help="network the catalog's communication times refer to, Gbit/s per rank (default 100)")
    parser.add_argument("--link-mbps", type=float, default=None, metavar="R",
                        help="rate of every emulated link, Mbit/s (default 25: what one ovs-vswitchd thread forwards "
                        "through three bridges without becoming the bottleneck)")
    from leveller.experiments.shared.switching import DEFAULT_MODE, MODES

    parser.add_argument("--switching", choices=tuple(MODES), default=DEFAULT_MODE,
                        help="LEVELLER's remedies for the TCP cost of changing priorities: hysteresis (the "
                        "controller's --switch-delta/--switch-dwell), floor (every queue below the top keeps a "
                        "share of its port; the network's, so every policy runs on it), phase (agents demote a "
                        "flow when its communication phase ended), all, or paper (none) (default "
                        f"{DEFAULT_MODE})")
    parser.add_argument("--fig9", action="store_true",
                        help="Figure 9 instead: three 2-host jobs on one bottleneck with 2 levels")
    from leveller.commands.experiment import add_live_options

    def lock_and_plan() -> None:
        parser.add_argument("--lock", metavar="FILE", help="hold an flock on FILE during each repeat (wait for "
                            "it), e.g. a shared machine's lock")
        parser.add_argument("--plan", action="store_true",
                            help="print the jobs and placements the run would use, and stop (no root needed)")

    add_live_options(parser, "tenants", "directory for the details (JSON) and the plot (default out/tenants)",
                     "skip the plot", between=lock_and_plan)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    from leveller.experiments.tenants import report as report
    from leveller.experiments.tenants.run import check_options

    counts, policies = check_options(args)  # every input checked before anything starts
    if args.plan:
        doc = report.plan(args, counts)
        if args.json:
            print(json.dumps(doc))
            return 0
        _print_scaling(Console(stderr=True), args)
        print("\n".join(report.plan_lines(doc)))
        return 0
    from leveller.commands import output_dir
    from leveller.experiments.shared.interrupts import unwind_on_signals

    out = output_dir(args.out)
    _print_scaling(Console(stderr=True), args)
    with unwind_on_signals():  # SIGTERM / Ctrl-C unwind the context managers: everything is torn down
        repeats = _run(args, counts, policies)
    if args.fig9:
        doc = report.write_fig9(args, out, repeats[0])
        shown = report.fig9_output(doc, repeats[0], out)
    else:
        doc, details = report.write_tenants(args, out, repeats)
        shown = report.tenants_output(args, doc, details, out)
    if not args.json:
        console = Console(file=sys.stdout)
        for renderable in shown:
            console.print(renderable)
    if args.json:
        print(json.dumps(doc))
    return 0


def _print_scaling(console: Any, args: argparse.Namespace) -> None:
    from leveller.experiments.tenants.report import SCALING_NOTE, scaling_table

    console.print(scaling_table(args))
    console.print(SCALING_NOTE)


def _run(args: argparse.Namespace, counts: list[int], policies: list[str]) -> list[Any]:
    from leveller.commands.progress import Bar
    from leveller.experiments.tenants.report import repeat_line
    from leveller.experiments.tenants.run import run_all, units

    total = sum(n * args.alone + len(policies) * args.duration for n, _ in units(args, counts))
    with Bar(["{task.description:<30}", "bar", "elapsed", "remaining"], total, "setting up") as bar:
        def note(message: str) -> None:
            if message.startswith("waiting for the lock"):
                bar.print(message)
            bar.note(message)

        def done(n: int, r: int, rep: Any) -> None:
            if not args.json:
                bar.print(repeat_line(args, n, r, rep))

        return run_all(args, counts, policies, lambda what, f: bar.part(
            what, f, args.alone if what.endswith(" alone") else args.duration), note, done)
