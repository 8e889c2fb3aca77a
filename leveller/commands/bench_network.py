"""Speed of the network simulator: events per second and CPU seconds at several fabric sizes.

  leveller bench network-sim --gpus 128,1024,4096 --policy fair,leveller --duration 600
  leveller bench network-sim --gpus 1024 --policy all --duration 3600 --json
  leveller bench network-sim --gpus 1024,4096 --trace contended --fabric nics_per_host=1,gbps=100,oversub=2 \
      --duration 3600        # issue 27's speed targets: <= 60 s per policy (1,024 GPUs), <= 5 min (4,096)

Each size is `fabric:gpus=N` (8 GPUs per host, 8 hosts per leaf, 8 spines, 400
Gbit/s; --fabric adds keys, e.g. nics_per_host=1,gbps=100,oversub=2) with one trace
scaled to it (--jobs x N / 1024 jobs, at least 10, seed --seed): `synthetic` (load
0.8, --placement) or `contended` (the contended preset, leveller.sim.network.trace).
Prints simulated seconds, events, wall and CPU seconds and events per wall second
per size and policy (with the congestion accounting `simulate network` does); CPU
seconds are this process's, so they hold on a busy machine, wall seconds only on an
idle one. Iterations of jobs alone on their links are advanced in closed form,
without events: the iteration count says how much work the events stand for.
The water-filling is numba's compiled loops when numba is importable, else numpy
(``water_filling`` in the JSON; LEVELLER_SIM_KERNEL=numpy forces the numpy code).
"""

from __future__ import annotations

import argparse
import json
import time

from leveller.errors import UserError


def run(args: argparse.Namespace) -> int:
    from leveller.commands.simulate_network import parse_policies
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.fluid import backend
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import load_network
    from leveller.sim.network.trace import synthetic

    try:
        sizes = [int(x) for x in args.gpus.split(",")]
    except ValueError:
        raise UserError(f"--gpus {args.gpus!r}: a comma list of GPU counts, e.g. 128,1024,4096") from None
    policies = parse_policies(args.policy)
    out: dict[str, dict[str, dict[str, float]]] = {}
    extra = f",{args.fabric}" if args.fabric else ""
    for gpus in sizes:
        net = load_network(f"fabric:gpus={gpus}{extra}")
        jobs_n = max(10, round(args.jobs * gpus / 1024))
        spec = f"contended:jobs={jobs_n},seed={args.seed}" if args.trace == "contended" else \
            f"synthetic:jobs={jobs_n},seed={args.seed},placement={args.placement}"
        jobs, placer = synthetic(spec, net)
        for name in policies:
            started, cpu = time.perf_counter(), time.process_time()
            result = Simulation(net, jobs, make_net_policy(name, args.tau), args.levels, args.duration,
                                placer=placer, congestion=True).run()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            iterations = sum(j.iterations for j in result.jobs)
            row = {"jobs": jobs_n, "sim_seconds": result.sim_seconds, "events": result.events,
                   "iterations": iterations, "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
                   "events_per_s": round(result.events / wall, 1), "min": result.summary()["min"],
                   "water_filling": backend()}
            out.setdefault(str(gpus), {})[name] = row
            if not args.json:
                low = "-" if row["min"] is None else f"{row['min']:.3f}"
                print(f"{gpus:>6} GPUs {name:>9}: {jobs_n} jobs, {iterations} iterations, {result.events} events "
                      f"in {wall:.1f} s wall, {cpu:.1f} s CPU = {result.events / wall:,.0f} events/s (min R {low})",
                      flush=True)
    if args.json:
        print(json.dumps(out))
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", default="128,1024,4096", help="fabric sizes (default 128,1024,4096)")
    parser.add_argument("--policy", default="fair,leveller", help="policies (default fair,leveller; all = four)")
    parser.add_argument("--jobs", type=int, default=200, help="jobs per 1,024 GPUs (default 200)")
    parser.add_argument("--duration", type=float, default=600.0, help="simulated seconds (default 600)")
    parser.add_argument("--trace", choices=("synthetic", "contended"), default="synthetic",
                        help="trace kind (default synthetic; contended: the contended preset)")
    parser.add_argument("--fabric", default="", metavar="K=V,...",
                        help="more fabric: keys, e.g. nics_per_host=1,gbps=100,oversub=2 (default none)")
    parser.add_argument("--seed", type=int, default=1, help="trace seed (default 1)")
    parser.add_argument("--placement", choices=("contiguous", "scattered"), default="contiguous",
                        help="placement of a synthetic trace (scattered: more jobs share spine links)")
    parser.add_argument("--levels", type=int, default=8, help="priority levels K (default 8)")
    parser.add_argument("--tau", type=float, default=0.0, help="leveller tau in s (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)
