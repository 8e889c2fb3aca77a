"""RDMA shim: queue-pair resurrection pause (hold -> release), per QP.

Runs the verbs test program (tests/shim/verbs_stream.c) under
LD_PRELOAD=shim/build/libleveller_shim.so against the FAKE verbs provider
(tests/shim/fake_verbs.c; there is no RDMA NIC here). QP A streams messages
to QP B; the traffic class of A (the sender, with sends in flight to drain)
and of B (the receiver, with receives to re-post) is changed --changes times
each through the shim's control socket. Reports the pause the application
sees (posts held from hold to release) and the drain part of it: median,
p99, max. Then checks that every message arrived exactly once and in order.

The fake's modify_qp costs nanoseconds; on a real NIC each of the five
ibv_modify_qp calls is a firmware command, so real pauses are longer.

With --hostile N it measures instead what a job's user can cost the agent's other
jobs by serving the shim's socket itself (leveller.bench.shim_hostile): a host agent
levels an RDMA job (the real shim over the fake provider) and a TCP job (a FAKE
datapath recorder) for --duration seconds alone, then as long again with N such
processes that answer `list` and `set_tc` at once and never `lease` (--hostile-mode
silent: nothing). It prints how late the reports came, the share of time inside the
agent's apply, the seconds the other jobs' levels lapsed and how often the bad shims
were left alone; it passes (exit 0) when no report was late by more than tau and no
level lapsed.

examples:
  leveller bench shim
  leveller bench shim --changes 500 --mode linked --json
  leveller bench shim --hostile 1 --duration 60
  leveller bench shim --hostile 4 --hostile-mode silent --duration 30 --json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--changes", type=int, default=300, metavar="N",
                        help="traffic-class changes per QP (default 300)")
    parser.add_argument("--mode", choices=("dlopen", "linked"), default="dlopen",
                        help="how the program reaches libibverbs: dlopen + dlvsym like NCCL (default) or linked")
    parser.add_argument("--window", type=int, default=16, metavar="W",
                        help="sends in flight while streaming (default 16)")
    parser.add_argument("--size", type=int, default=4096, metavar="B", help="message size in bytes (default 4096)")
    hostile = parser.add_argument_group("a user's hostile shim (--hostile N)")
    hostile.add_argument("--hostile", type=int, default=0, metavar="N",
                         help="measure the agent with N processes serving the shim's socket but never answering "
                         "`lease` instead of the resurrection pause (0: off, the default)")
    hostile.add_argument("--hostile-mode", choices=("no-lease", "silent"), default="no-lease",
                         help="no-lease: `list` and `set_tc` answered at once, `lease` never (default); silent: "
                         "nothing answered")
    hostile.add_argument("--duration", type=float, default=60.0, metavar="S",
                         help="seconds of each phase, alone and hostile (default 60)")
    hostile.add_argument("--tau", type=float, default=1.0, metavar="S",
                         help="controller decision period and agent report interval (default 1)")
    hostile.add_argument("--lease", type=float, default=3.0, metavar="S",
                         help="how long levels stay valid without a new decision (default 3)")
    hostile.add_argument("--no-baseline", action="store_true",
                         help="run the hostile phase only (no phase without the hostile shims)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.hostile:
        return _hostile(args)
    if not 1 <= args.changes <= 100000:
        raise UserError(f"--changes={args.changes}: allowed is 1..100000")
    if not 1 <= args.window <= 1024:
        raise UserError(f"--window={args.window}: allowed is 1..1024")
    if not 8 <= args.size <= 1 << 20:
        raise UserError(f"--size={args.size}: allowed is 8..1048576")
    from leveller.bench.shim import BuildError, run

    try:
        if args.json:
            result = run(args.changes, args.mode, args.window, args.size)
        else:
            from rich.console import Console

            with Console(stderr=True).status("starting") as status:
                result = run(args.changes, args.mode, args.window, args.size, progress=status.update)
    except BuildError as exc:
        raise UserError(str(exc)) from exc
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0 if result["messages_intact"] else 1


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"QP resurrection, {result['changes_per_qp']} changes per QP "
                        f"({result['mode']}, {result['provider']})")
    for col in ("QP", "pause median µs", "pause p99 µs", "pause max µs", "drain median µs", "drain p99 µs"):
        table.add_column(col, justify="right")
    for role in ("sender", "receiver"):
        p, d = result["pause_us"][role], result["drain_us"][role]
        table.add_row(role, f"{p['median']:.1f}", f"{p['p99']:.1f}", f"{p['max']:.1f}", f"{d['median']:.1f}",
                      f"{d['p99']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"{result['messages']} messages, every one delivered once and in order: "
                  f"{result['messages_intact']}; longest receive gap {result['max_gap_ms']:.2f} ms")


def _hostile(args: argparse.Namespace) -> int:
    if not 1 <= args.hostile <= 256:
        raise UserError(f"--hostile={args.hostile}: allowed is 1..256 processes")
    if not 2 <= args.duration <= 3600:
        raise UserError(f"--duration={args.duration:g}: allowed is 2..3600 seconds")
    if not 0.1 <= args.tau <= 10:
        raise UserError(f"--tau={args.tau:g}: allowed is 0.1..10 seconds")
    if not args.tau < args.lease <= 60:
        raise UserError(f"--lease={args.lease:g}: allowed is more than --tau ({args.tau:g}) and at most 60 seconds")
    from leveller.bench.shim import BuildError
    from leveller.bench.shim_hostile import run as run_hostile

    kwargs: dict[str, Any] = {"hostile_mode": args.hostile_mode, "duration_s": args.duration, "interval_s": args.tau,
                              "tau_s": args.tau, "lease_s": args.lease, "baseline": not args.no_baseline}
    try:
        if args.json:
            result = run_hostile(args.hostile, **kwargs)
        else:
            from rich.console import Console

            with Console(stderr=True).status("starting") as status:
                result = run_hostile(args.hostile, progress=status.update, **kwargs)
    except BuildError as exc:
        raise UserError(str(exc)) from exc
    if args.json:
        print(json.dumps(result))
    else:
        from rich.console import Console

        from leveller.bench.shim_hostile import print_result

        print_result(result, Console())
    return 0 if result["ok"] else 1

