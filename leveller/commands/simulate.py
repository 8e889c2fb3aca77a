"""Fluid simulators: one link (`simulate link`) or a whole network (`simulate network`).

  leveller simulate link --preset fig3 --policy leveller
  leveller simulate link --job 1:1 --job 1:2 --policy crux --json
  leveller simulate link --preset fig1-trio --policy leveller --tau 4 --timeline trio.png
  leveller simulate link --preset fig3 --rate-half-life 10 --starve 1:60:30 --cycles 100

Each job alternates compute (C) and communication (M, time at the full link
rate) on one shared link; G = GPUs (used by crux's intensity G*C/M). R is
measured from a common start over N (--cycles) times the longest ideal
iteration C+M, transient included. Policies: fair (sending jobs split the
link equally), crux (static strict priority by G*C/M, ties by --job order),
leveller (strict priority to the lowest R, re-ranked at every iteration end
when --tau is 0, else every tau; equal R keeps --job order; at t = 0 every
R is 0, so --job order decides the first ranking).

What leveller ranks by: the paper's cumulative R by default; --rate-window S uses R
over the last S time units, --rate-half-life S exponentially decayed iterations and
time (leveller.core.rate, as `leveller controller` does). The reported rates stay the
paper's cumulative R over the whole run. --starve J:START:LEN stops job J's
communication for LEN time units from START (an unmanaged flow on a link only J uses);
the others have the link to themselves meanwhile. `leveller experiment recovery`
measures what each kind of R does after such a disturbance.

Event budget: a run is refused up front when its events could exceed --max-events
(default 1,000,000, a few tens of seconds here). The bound counted is 2 phase ends per
ideal iteration of every job over the horizon, plus one re-ranking per tau. Lower
--cycles, a longer --tau or less disparate job times fit a run into the budget; raise
--max-events to allow longer runs. On a terminal, progress is shown on stderr.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.model.limits import PAPER_POLICIES as POLICIES  # the link simulator runs the paper's three
from leveller.sim.link_options import DEFAULT_MAX_EVENTS, PRESET_NAMES


def run_with_progress(simulate: Callable[..., Any], bound: int) -> Any:
    """Run ``simulate(on_progress=...)`` with a progress bar on stderr when it is a terminal."""
    from leveller.commands.progress import Bar

    with Bar(["simulating (up to {task.fields[bound]:,} events)", "bar", "percent", "elapsed"], bound=bound) as bar:
        return simulate(on_progress=(lambda done: bar.update(completed=done)) if bar.shown else None)


def run_link(args: argparse.Namespace) -> int:
    from leveller.core.policies import make_policy
    from leveller.sim import link_options as lo
    from leveller.sim.link import simulate_link

    for option in ("--cycles", "--levels", "--max-events"):
        lo.check_positive(option, getattr(args, option[2:].replace("-", "_")))
    tau = lo.parse_tau(args.tau)
    jobs = lo.jobs_of(args.job, args.preset)
    from leveller.options import rate_options, switching_rule

    window, half_life = rate_options(args)
    switching = switching_rule(args)
    floor = lo.parse_floor(args.floor, args.levels or len(jobs))
    starve = [lo.parse_starve(text, len(jobs)) for text in args.starve]
    policy = make_policy(args.policy, tau)
    bound = lo.check_budget(jobs, args.cycles, policy.tau, args.max_events, len(starve))
    until = Fraction(args.timeline_until)
    result = run_with_progress(
        lambda on_progress: simulate_link(jobs, policy, cycles=args.cycles, levels=args.levels,
                                          record_until=until if args.timeline else Fraction(0),
                                          on_progress=on_progress, rate_window=window, rate_half_life=half_life,
                                          starve=starve, switching=switching, floor=floor), bound)
    if args.timeline:
        from leveller.sim.timeline import plot_timelines

        title = args.policy + (f", tau={tau}" if args.policy == "leveller" and tau else "")
        plot_timelines([(title, result)], Path(args.timeline), until)
    if args.json:
        print(json.dumps(lo.result_json(result, tau, args.cycles, window, half_life, switching, floor, args.timeline)))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"single link, policy {args.policy}, R over {float(result.horizon):g} time units")
    for col in ("job", "C", "M", "G", "iterations", "R"):
        table.add_column(col, justify="right")
    for i, (job, n, r) in enumerate(zip(result.jobs, result.iterations, result.rates)):
        table.add_row(str(i + 1), f"{float(job.compute):g}", f"{float(job.comm):g}", str(job.gpus), str(n),
                      f"{float(r):.3f}")
    console = Console()
    console.print(table)
    console.print(f"min R {float(result.min):.3f}   avg R {float(result.avg):.3f}")
    if args.timeline:
        console.print(f"timeline written to {args.timeline}")
    return 0


def no_simulator(args: argparse.Namespace) -> int:
    raise UserError("choose a simulator: `leveller simulate link ...` or `leveller simulate network ...` (see --help)")


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.commands.options import add_rate_options, add_switching_options

    parser.set_defaults(func=no_simulator)
    sub = parser.add_subparsers(dest="simulator", metavar="SIMULATOR")
    link = sub.add_parser("link", help="jobs sharing one link (exact fluid model)",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    link.add_argument("--job", action="append", metavar="C:M[:G]",
                      help="a job: compute time C, communication time M, GPUs G (default 1); repeat per job")
    link.add_argument("--preset", choices=PRESET_NAMES,
                      help="fig3 = the paper's pair (1:1, 1:2); fig1-trio = (1:2, 1:2, 2:1)")
    link.add_argument("--policy", choices=POLICIES, default="leveller", help="scheduling policy (default leveller)")
    link.add_argument("--tau", default="0", metavar="T",
                      help="leveller re-ranking period; 0 = at every iteration end (default 0)")
    link.add_argument("--cycles", type=int, default=1500, metavar="N",
                      help="measure R over N x the longest ideal iteration (default 1500)")
    link.add_argument("--levels", type=int, default=None, metavar="K",
                      help="switch priority levels (default: one per job)")
    link.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS, metavar="N",
                      help=f"refuse a run that could take more than N events (default {DEFAULT_MAX_EVENTS:,}; "
                      "see 'Event budget' above)")
    add_rate_options(link, "time units")
    add_switching_options(link, "time units", floor=0.0)
    link.add_argument("--starve", action="append", default=[], metavar="J:START:LEN",
                      help="job J (1-based) cannot communicate for LEN time units from START, as if an "
                      "unmanaged flow held a link only J uses (e.g. --starve 1:60:30); repeatable")
    link.add_argument("--timeline", metavar="FILE.png", help="also draw the first time units as a PNG timeline")
    link.add_argument("--timeline-until", type=int, default=15, metavar="T",
                      help="time span shown by --timeline (default 15)")
    link.add_argument("--json", action="store_true", help="print one JSON object")
    link.set_defaults(func=run_link)

    from leveller.commands.simulate_network import configure as configure_network

    configure_network(sub)
    from leveller.commands.simulate_sweep import configure as configure_sweep

    configure_sweep(sub)
