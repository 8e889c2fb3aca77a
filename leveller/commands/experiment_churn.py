"""Churn: jobs that come and go on the live leaf-spine, registered by themselves, under every policy.

Jobs of the catalog (the network simulator's H200-derived models, their compute : communication
kept on the emulated links as in the tenants experiment) arrive as a Poisson process (--mean-arrival
seconds apart on average, --seed) for --duration seconds, each on 2-3 hosts of the `leafspine`
testbed (3 leaves x 2 spines, 4 hosts per leaf, 12.5 Mbit/s links) across two leaves, for a number of
iterations uniform around --iterations, and leave when done. Their workers register with their
hosts' agents over the agents' registration socket: no agent flag names any job. The SDN app starts
once; the controller and an agent per host start once per policy, before the first job, and are
never restarted while jobs come and go; every policy runs on the same arrivals.

Reported per policy: min, p10 and mean R of the jobs that finished (R against the ideal time the
controller profiled for the job, the smallest over the policy runs); per job the seconds from its
start to its first level (target: its profiling, 5 iterations at its ideal time, plus 2 tau) and
from its end to its last mark gone (target: within the lease); the jobs never ranked (target: 0);
beside them, the fluid model's min R of the same arrivals under the same policy (the network simulator,
LEVELLER with the controller's profiling windows: leveller.experiments.churn.model), to tell a policy's
margin from the testbed's noise.
Checks: every job ranked, every first level in time, no mark past the lease, LEVELLER's min R at least
every other policy's; they decide the exit status. In --out: churn.json with every job's timings
and levels, churn.png (the jobs over time, coloured by their level). Needs root. Ctrl-C tears
everything down.

examples:
  leveller experiment churn                                   10 minutes per policy, all four
  leveller experiment churn --duration 120 --mean-arrival 10 --iterations 30 --policies fair,leveller
  leveller experiment churn --duration 600 --json
"""

from __future__ import annotations

import argparse
import json
import sys

from leveller.errors import UserError

POLICIES = ("fair", "crux", "cassini", "leveller")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=600.0, metavar="S",
                        help="seconds jobs arrive (and each policy runs) (default 600)")
    parser.add_argument("--mean-arrival", type=float, default=20.0, metavar="S",
                        help="mean seconds between two arrivals (Poisson process) (default 20)")
    parser.add_argument("--iterations", type=int, default=60, metavar="N",
                        help="mean length of a job in iterations, each drawn in [N/2, 3N/2] (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arrivals (default 0)")
    parser.add_argument("--policies", default=",".join(POLICIES), metavar="P,...",
                        help=f"comma-separated subset of {','.join(POLICIES)} (default: all)")
    parser.add_argument("--levels", type=int, default=4, metavar="K", help="switch priority levels (default 4)")
    parser.add_argument("--tau", type=float, default=0.2, metavar="S", help="controller decision period (default 0.2)")
    parser.add_argument("--lease", type=float, default=2.0, metavar="S", help="the levels' lease (default 2)")
    parser.add_argument("--link-mbps", type=float, default=None, metavar="MBPS",
                        help="rate of every link, Mbit/s (default 12.5: what the one ovs-vswitchd thread forwards "
                             "for ten jobs at once without becoming the bottleneck); jobs keep their iteration "
                             "times, so the bytes they send scale with it")
    from leveller.commands.experiment import add_live_options

    add_live_options(parser, "churn", "directory for churn.json and churn.png (default out/churn)", "skip churn.png")
    parser.set_defaults(func=handle)


def check(args: argparse.Namespace) -> list[str]:
    from leveller.experiments.shared.options import check_live, policy_list

    if not 20 <= args.duration <= 86400:
        raise UserError(f"--duration={args.duration:g}: allowed is 20..86400 seconds")
    if not 1 <= args.mean_arrival <= args.duration:
        raise UserError(f"--mean-arrival={args.mean_arrival:g}: allowed is 1 s up to --duration")
    if not 2 <= args.iterations <= 100_000:
        raise UserError(f"--iterations={args.iterations}: allowed is 2..100,000")
    if not 2 <= args.levels <= 8:
        raise UserError(f"--levels={args.levels}: allowed is 2..8 (the testbed's queues)")
    if not 0.05 <= args.tau <= 5 or not args.tau < args.lease <= 60:
        raise UserError(f"--tau={args.tau:g}, --lease={args.lease:g}: allowed is 0.05 <= tau <= 5 and "
                        "tau < lease <= 60 seconds")
    if args.link_mbps is not None and not 1 <= args.link_mbps <= 100:
        raise UserError(f"--link-mbps={args.link_mbps:g}: allowed is 1..100 Mbit/s")
    policies = policy_list(args.policies, POLICIES)
    check_live(args, "experiment churn")
    return policies


def handle(args: argparse.Namespace) -> int:
    policies = check(args)
    from leveller.commands import output_dir
    from leveller.commands.experiment import live_progress
    from leveller.experiments.churn.model import model_summary
    from leveller.experiments.churn.plan import ChurnSettings
    from leveller.experiments.churn.report import summarize
    from leveller.experiments.churn.run import run_churn

    settings = ChurnSettings(duration_s=args.duration, mean_arrival_s=args.mean_arrival,
                             mean_iterations=args.iterations, seed=args.seed, levels=args.levels, tau_s=args.tau,
                             lease_s=args.lease,
                             **({} if args.link_mbps is None else {"link_mbps": args.link_mbps}))
    out = output_dir(args.out)
    done = {p: 0.0 for p in policies}
    with live_progress() as (progress, note):
        def step(policy: str, fraction: float) -> None:
            done[policy] = min(1.0, fraction)
            progress(sum(done.values()) / len(policies))

        arrivals, records = run_churn(settings, policies, args.name, note=note, progress=step)
    note("the fluid model of the same arrivals (churn.model)")
    doc = summarize(arrivals, records, settings, model_summary(arrivals, settings, policies))
    (out / "churn.json").write_text(json.dumps(doc, indent=1))
    if args.plot:
        from leveller.experiments.churn.plot import plot_churn

        plot_churn(out / "churn.png", doc)
        doc["plot"] = str(out / "churn.png")
    if args.json:
        print(json.dumps({k: v for k, v in doc.items()}))
    else:
        _print(doc, out)
    return 0 if all(doc["checks"].values()) else 1


def _print(doc: dict, out: object) -> None:
    from rich.console import Console
    from rich.table import Table

    from leveller.experiments.churn.report import table_rows

    s = doc["settings"]
    table = Table(title=f"churn: {len(doc['arrivals'])} jobs over {s['duration_s']:g} s (mean arrival "
                        f"{s['mean_arrival_s']:g} s, ~{s['mean_iterations']} iterations, seed {s['seed']})")
    model = ("model min R (finished)",) if "model" in doc else ()
    for col in ("policy", "finished", "min R", "p10 R", "mean R", *model, "never ranked", "first level max s",
                "marks gone max s"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for row in table_rows(doc):
        table.add_row(*row)
    console = Console(file=sys.stdout)
    console.print(table)
    for name, ok in doc["checks"].items():
        console.print(f"{'pass' if ok else '[red]FAIL[/]'}  {name}")
    console.print(f"details: {out}/churn.json" + (f", plot {doc['plot']}" if "plot" in doc else ""))
