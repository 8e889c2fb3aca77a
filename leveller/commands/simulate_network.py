"""Flow-level fluid simulation of training jobs on a whole network.

  leveller simulate network --topology dumbbell --jobs examples/jobs/dumbbell-pair.json \\
      --policy fair,crux,leveller --levels 2 --duration 3000     # the paper's pair
  leveller simulate network --topology fabric:gpus=1024 --trace synthetic:jobs=200,seed=1 \\
      --policy fair,crux,cassini,leveller --levels 2 --duration 3600 --plot out/
  leveller simulate network --topology lingjun --trace synthetic:jobs=100,placement=scattered \\
      --policy all --duration 1800
  leveller simulate network --topology dumbbell --jobs examples/jobs/dumbbell-pair.json \\
      --levels 2 --duration 600 --rate-half-life 10 --disturb h1>s1:60:30

Topology T: dumbbell[:opt=v,...], leafspine[:...] (testbed presets), a testbed
TOML file (rates in Mbit/s), fabric:gpus=1024,gpus_per_host=8,hosts_per_leaf=8,
spines=8,gbps=400 (rail-style leaf-spine, one NIC per GPU), lingjun[:host_gbps=200,
oversub=2] (Alibaba Lingjun 2023: host -> ToR -> PSW -> DSW; the rates are assumed).

Jobs FILE (JSON): {"jobs": [{"name", "hosts": [...], "compute": s, "bytes": B,
"arrival": s, "iterations": n or null, "slack": s}]}: each iteration computes for
`compute` s, then ring-all-reduces `bytes` per rank over `hosts` in order (rank i
sends 2(n-1)/n x bytes to rank i+1), starting `slack` s before compute ends.

Trace synthetic:jobs=200,seed=1,load=0.8,placement=contiguous|scattered,min_hosts=1,
max_hosts=16,min_s=120,max_s=1200,overlap=1: Poisson arrivals of models from real
H200 profiles (leveller/sim/network/catalog_data.py), placed at arrival on free hosts.

Trace contended:jobs=N,seed=S (other keys as synthetic:, defaults models=paper,collective=mix,
per_host=1,placement=scattered,load=0.5,min_hosts=2,max_hosts=16,min_s=300,max_s=1800): paper-scale
GPT models (1.3B-13B, DDP and FSDP; leveller/sim/network/catalog_paper.py, measured on an H200), one
GPU per host per job. Both take gpu=h200|a100 (times scaled by peak BF16 TFLOP/s, 989.4 / 312 for the
A100). synthetic: also takes models=h200|paper, collective=ddp|fsdp|mix,
per_host=all|1 and arrivals=lingjun|philly|helios,file=PATH (replay of a trace file's submit times,
durations and GPU counts; leveller/sim/network/tracefiles.py). Topology paper-testbed: 12 hosts of one
GPU and one 100 Gbit/s NIC, 3 leaves, 2 spines, 50 Gbit/s between switches; fabric: also takes
nics_per_host (1 = one NIC per host shared by its GPUs) and oversub (leaf uplinks = downlinks / oversub).
The JSON's congested_share: the share of measured jobs that sent over a link shared with another
sending job at > 90% utilisation (leveller.sim.network.engine.CONGESTED).

Policies: fair (one class, max-min per flow), leveller (lowest R first, K-level
pruning, re-ranked every --tau s, 0 = at every iteration end; overlap rule),
crux (GPU intensity priorities, least-congested paths, Max K-Cut compression),
cassini (time shifts of iteration starts, no priorities); `all` = the four.
Rates: strict priority by level, max-min water-filling within a level.
R = iterations x ideal iteration time (alone) / (end - start).

What leveller ranks by: the paper's cumulative R, or with --rate-window S the R over
the last S seconds, with --rate-half-life S iterations and time decayed with half-life
S (leveller.core.rate, as `leveller controller` does); the reported R stays cumulative.
--floor F: every level below the top keeps F of each link it has demand on (the switches' queue
floor, as `leveller switch-config --floor` and the emulated testbed configure it), the rest goes
by strict priority; default 0, the paper's pure strict priority.
--disturb LINK:START:SECONDS: an unmanaged flow at the top priority holds the directed
link LINK (named a>b, e.g. h1>s1) from START for SECONDS; jobs crossing it stall.
`leveller experiment recovery` measures what each kind of R does after that.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from leveller.errors import UserError
from leveller.model.limits import MAX_LEVELS
from leveller.sim.network_options import parse_disturb, parse_policies, parse_seconds, prepare


def run_network(args: argparse.Namespace) -> int:
    from leveller.commands.progress import Bar
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy

    policies = parse_policies(args.policy)
    if not 1 <= args.levels <= MAX_LEVELS:
        raise UserError(f"--levels = {args.levels} is invalid; an integer 1..{MAX_LEVELS}")
    tau = parse_seconds("--tau", args.tau, allow_zero=True)
    duration = parse_seconds("--duration", args.duration, allow_zero=False)
    if args.seed is not None and args.seed < 0:
        raise UserError(f"--seed = {args.seed} is invalid; an integer >= 0")
    from leveller.core.qos import check_floor

    floor = check_floor(args.floor, args.levels, "--floor")
    from leveller.options import rate_options, switching_rule

    window, half_life = rate_options(args)
    switching = switching_rule(args)
    net, jobs, placer = prepare(args)
    disturbances = [parse_disturb(text, net) for text in args.disturb]
    if duration is None and any(j.iterations is None for j in jobs):
        endless = next(j.name for j in jobs if j.iterations is None)
        raise UserError(f"job {endless!r} runs to the end (iterations null): give --duration S")
    sample = duration / 200 if duration and args.plot else None
    results = []
    for name in policies:
        policy = make_net_policy(name, tau or 0.0, None if window is None else float(window),
                                 None if half_life is None else float(half_life), switching)
        with Bar([f"{name:>8}", "bar", "{task.completed:.0f} / {task.total:.0f} s simulated", "elapsed"],
                 duration or 1.0, name, show=None if not args.no_progress else False) as bar:
            def tick(t: float) -> None:
                if math.isfinite(t):
                    bar.update(completed=min(t, duration) if duration else 0)

            sim = Simulation(net, jobs, policy, args.levels, duration, placer=placer, sample_every=sample,
                             progress=tick if bar.shown else None, disturbances=disturbances, floor=floor,
                             congestion=True)
            results.append(sim.run())
    if args.plot:
        from leveller.sim.network.plots import plot_all

        plot_all(results, Path(args.plot))
    if args.json:
        out = [r.summary() for r in results]
        print(json.dumps(out[0] if len(out) == 1 else out))
        return 0
    from rich.console import Console

    from leveller.sim.network_report import network_output

    console = Console()
    for renderable in network_output(results, net.note, args):
        console.print(renderable)
    return 0


def configure(link_parent: argparse._SubParsersAction) -> None:
    """Add the ``network`` simulator to ``leveller simulate``'s sub-commands."""
    p = link_parent.add_parser("network", help="jobs on a whole network (flow-level fluid model)",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", required=True, metavar="T", help="preset, TOML file, fabric:... or lingjun")
    p.add_argument("--jobs", metavar="FILE", help="jobs file (JSON, see above)")
    p.add_argument("--trace", metavar="synthetic:K=V,...", help="synthetic trace (see above)")
    p.add_argument("--policy", default="leveller", metavar="P[,P...]",
                   help="fair, crux, cassini, leveller, a comma list, or all (default leveller)")
    p.add_argument("--levels", type=int, default=MAX_LEVELS, metavar="K",
                   help=f"switch priority levels (default {MAX_LEVELS})")
    p.add_argument("--tau", default="0", metavar="S",
                   help="leveller re-ranking period in s; 0 = at every iteration end (default 0)")
    p.add_argument("--duration", metavar="S", help="simulated seconds (default: until every job finished)")
    from leveller.commands.options import add_rate_options, add_switching_options

    add_rate_options(p, "seconds")
    add_switching_options(p, "seconds", floor=0.0)  # --floor as `simulate link`'s
    p.add_argument("--disturb", action="append", default=[], metavar="LINK:START:SECONDS",
                   help="an unmanaged top-priority flow holds directed link LINK for SECONDS from START "
                   "(e.g. --disturb h1>s1:60:30); repeatable")
    p.add_argument("--seed", type=int, metavar="N", help="seed of the synthetic trace (overrides its seed=)")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots: CDF of R, R over time, link utilisation")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on the terminal")
    p.add_argument("--json", action="store_true", help="print one JSON object (a list for several policies)")
    p.set_defaults(func=run_network)
