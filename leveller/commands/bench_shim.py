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

examples:
  leveller bench shim
  leveller bench shim --changes 500 --mode linked --json
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
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
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
