"""Registrations per second the agent's registration socket sustains (docs/api.md, "Registration socket").

Client processes (in a cgroup made for the run, removed after) connect, register a job, read the
answer and close, as fast as they can; the server's rate limit is set out of the way, so the figure
is what the agent itself can take: SO_PEERCRED, the /proc reads, the cgroup's uid check, the job
table's update, the end at the close. Needs root (it makes a cgroup). The load average is printed
with the figure: on a shared machine, compare runs at similar load.

examples:
  leveller bench registrations
  leveller bench registrations --registrations 5000 --clients 2 --json
"""

from __future__ import annotations

import argparse
import json
import os

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registrations", type=int, default=2000, metavar="N",
                        help="registrations in all (default 2,000)")
    parser.add_argument("--clients", type=int, default=2, metavar="K", help="client processes (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not 1 <= args.clients <= 64:
        raise UserError(f"--clients {args.clients}: allowed is 1..64")
    if not args.clients <= args.registrations <= 10_000_000:
        raise UserError(f"--registrations {args.registrations}: allowed is --clients..10,000,000")
    if os.geteuid() != 0:
        raise UserError("bench registrations needs root (it makes a cgroup for its clients)")
    from leveller.bench.registrations import run

    result = run(args.registrations, args.clients)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['registrations']:,} registrations from {result['clients']} clients in "
              f"{result['seconds']:.2f} s: {result['per_s']:,.0f} per second (accepted {result['accepted']:,}; "
              f"load {result['load']})")
    return 0 if result["accepted"] == result["registrations"] else 1
