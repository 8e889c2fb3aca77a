"""The controller and the enforcement at cluster scale, with the generated 1,024-GPU cluster.

Three parts (see leveller/bench/controller_scale.py for the method):
  levels      one full controller decision (rank + topology paths + prune) at each
              --flows count, K = 8: median decide_ms, peak RSS, jobs
  agents      a real controller on gRPC and --agents emulated agents (a few
              processes, one channel each) reporting --flows-per-agent flows every
              --tau for --duration s after a warm-up: report latency, step time,
              missed steps (a step ending after the next tick)
  map_update  10,000 DSCP changes through the agent's enforcer into the real BPF map
Needs root (BPF). Takes about 1 minute with the defaults; nothing outlives it.

--json prints {"levels": {"<flows>": {"decide_ms", "rss_mb", "jobs"}}, "agents":
{"count", "flows_per_agent", "tau_s", "report_ms": {"p50", "p99"}, "step_ms":
{"p50", "max"}, "missed_steps"}, "map_update_ms": {"10000"}}.

examples:
  leveller bench controller
  leveller bench controller --json
  leveller bench controller --agents 200 --duration 10 --flows 10000
  leveller bench controller --write-levels cluster.json --flows 100000   # input for `leveller levels`
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from leveller.errors import UserError

MAX_FLOWS = 1_000_000
MAX_AGENTS = 5000


def _flow_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(not 1 <= c <= MAX_FLOWS for c in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated flow counts in 1..{MAX_FLOWS}")
    return counts


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flows", type=_flow_counts, default=[10000, 100000], metavar="N[,N...]",
                        help="flow counts of the levels part (default 10000,100000)")
    parser.add_argument("--agents", type=int, default=1000, metavar="A", help="emulated agents (default 1000)")
    parser.add_argument("--flows-per-agent", type=int, default=100, metavar="F",
                        help="flows each agent reports (default 100)")
    parser.add_argument("--tau", type=float, default=1.0, metavar="S",
                        help="report and decision period in seconds (default 1)")
    parser.add_argument("--duration", type=float, default=30.0, metavar="S",
                        help="measured window of the agents part in seconds, after the warm-up (default 30)")
    parser.add_argument("--warmup", type=float, metavar="S",
                        help="seconds before the window (default 3 x tau + 0.1 ms per flow: the start's backlog "
                             "must be answered first; a window that still holds it is refused)")
    parser.add_argument("--processes", type=int, default=2, metavar="P",
                        help="processes the emulated agents are spread over (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated cluster (default 1)")
    parser.add_argument("--write-levels", metavar="FILE",
                        help="only write the generated cluster with the first --flows count as a "
                        "`leveller levels --input` FILE, then exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.write_levels:
        return _write_levels(args.write_levels, args.flows[0], args.seed)
    if not 1 <= args.agents <= MAX_AGENTS:
        raise UserError(f"--agents={args.agents}: allowed is 1..{MAX_AGENTS}")
    if not 1 <= args.flows_per_agent <= 1000 or args.agents * args.flows_per_agent > MAX_FLOWS:
        raise UserError(f"--flows-per-agent={args.flows_per_agent}: allowed is 1..1000 with at most "
                        f"{MAX_FLOWS} flows in all")
    if not 0.05 <= args.tau <= 60:
        raise UserError(f"--tau={args.tau}: allowed is 0.05..60 seconds")
    if not 0.5 <= args.duration <= 3600:
        raise UserError(f"--duration={args.duration}: allowed is 0.5..3600 seconds")
    if args.warmup is not None and not 0 <= args.warmup <= 600:
        raise UserError(f"--warmup={args.warmup}: allowed is 0..600 seconds")
    if not 1 <= args.processes <= 64:
        raise UserError(f"--processes={args.processes}: allowed is 1..64")
    if os.geteuid() != 0:
        raise UserError("bench controller needs root (the map_update part loads the BPF program)")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from rich.console import Console

    from leveller.bench.controller_scale import all_figures

    def _run(args: argparse.Namespace, say: Any) -> dict[str, Any]:
        return all_figures(args.flows, args.agents, args.flows_per_agent, args.tau, args.duration, args.processes,
                           args.seed, args.warmup, say)

    if args.json:
        res = _run(args, lambda _msg: None)
        print(json.dumps({k: res[k] for k in ("levels", "agents", "map_update_ms")}))
        return 0
    with Console(stderr=True).status("starting") as status:
        res = _run(args, status.update)
    _print(res)
    return 0

def _write_levels(path: str, flows: int, seed: int) -> int:
    from leveller.bench.workload import write_levels_input

    try:
        write_levels_input(path, flows, seed)
    except OSError as exc:
        raise UserError(f"--write-levels {path}: cannot write ({exc.strerror})") from None
    print(f"wrote {flows} flows of the generated 1,024-GPU cluster to {path}", file=sys.stderr)
    return 0


def _print(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(file=sys.stdout)
    t = Table(title="one controller decision (rank + topology paths + prune), K = 8")
    for col in ("flows", "jobs", "decide ms (median)", "first decision ms (routes every flow)", "peak RSS MB"):
        t.add_column(col, justify="right")
    for n, fig in res["detail"]["levels"].items():
        t.add_row(n, str(fig["jobs"]), f"{fig['decide_ms']:.1f}", f"{fig['first_ms']:.0f}", f"{fig['rss_mb']:.0f}")
    out.print(t)
    a = res["agents"]
    t = Table(title=f"{a['count']} agents x {a['flows_per_agent']} flows, tau {a['tau_s']:g} s "
                    f"({res['detail']['reports']} reports measured)")
    for col in ("report p50 ms", "report p99 ms", "failed reports", "step p50 ms", "step max ms", "missed steps"):
        t.add_column(col, justify="right")
    t.add_row(f"{a['report_ms']['p50']:.2f}", f"{a['report_ms']['p99']:.2f}", str(res["detail"]["report_errors"]),
              f"{a['step_ms']['p50']:.1f}", f"{a['step_ms']['max']:.1f}", str(a["missed_steps"]))
    out.print(t)
    d = res["detail"]
    if d["reports"]:
        out.print(f"controller process: {d['controller_cpu']:.2f} cores in the window, about "
                  f"{1e3 * d['controller_cpu'] * d['window_s'] / d['reports']:.2f} ms of CPU per report "
                  "(steps included); "
                  f"emulated agents: {d['agents_cpu_s']:.0f} CPU s in all, at nice {d['emulation_nice']} "
                  "(they yield the CPU to the controller)")
    if d.get("steal_s") is not None:
        out.print(f"stolen by the host in the window: {d['steal_s']:.1f} CPU s of {os.cpu_count() or 1} x "
                  f"{d['window_s']:g} (CPU time the host gave to others: it raises report latency)")
    warm = res["detail"]["warmup_steps_ms"]
    if warm:
        out.print(f"warm-up steps (not measured): {', '.join(f'{x:g}' for x in warm)} ms")
    out.print(f"10,000 DSCP changes into the BPF map: {res['map_update_ms']['10000']:.2f} ms (median)")
