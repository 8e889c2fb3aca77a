"""Fuzz the eBPF marker (bpf/flow_marker.c) with BPF_PROG_TEST_RUN and check every frame.

The real program, loaded as the agent loads it (attached to no interface; --loader),
holds a realistic DSCP map: 160 IPv4 and 160 IPv6 flows of one cluster host (TCP
collectives, RoCEv2 UDP) plus 16 invalid raw marks. Frames built with scapy run
through it: IPv4/IPv6 x TCP/UDP/ICMP/other protocols, IPv4 options, IPv4 and IPv6
fragments, IPv6 extension headers, VLAN and QinQ tags, non-IP frames, TCP GSO
packets; valid frames cut at every offset; valid frames with random byte changes.
Flows are mapped ones, near misses of mapped ones (reply direction, other
protocol, port or address off by one, IPv4-mapped IPv6) and unrelated ones.
Every fifth chunk of frames runs with the lease ended.

Checked for every frame, from its bytes alone (leveller/bench/fuzz_oracle.py):
the verdict is TC_ACT_OK and the length unchanged; a frame of an unmapped flow,
one the program must not parse, or any frame while the lease has ended comes back
byte-identical; a mapped flow's frame differs only in the DSCP bits (which carry
the flow's DSCP), ECN is kept, an IPv4 checksum equals the one recomputed from
scratch. After each chunk of 2,048 frames: every flow's counters grew by exactly
its counted frames (GSO segments) and bytes (frame length - 14), nothing else.

Exit status 1 when any invariant broke (the first examples are printed, or listed
in the JSON under "examples"). Needs root. About 8 s per 100,000 frames here
(1,000,000 in 75-85 s, 12,000-14,000 frames/s, 0.4 us per frame in the program).

examples:
  leveller bench fuzz-marker --packets 20000
  leveller bench fuzz-marker --packets 1000000 --seed 7 --json
  leveller bench fuzz-marker --packets 100000 --loader bcc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from leveller.errors import UserError

MAX_PACKETS = 100_000_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--packets", type=int, default=1_000_000, metavar="N",
                        help="frames to run through the program (default 1,000,000; frames the kernel refuses "
                        "before the program, too short for a test run, are not counted)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the flow set and the frames (default 0); the same seed gives the same frames")
    parser.add_argument("--loader", choices=("auto", "libbpf", "bcc"), default="auto",
                        help="load the CO-RE object with libbpf, or compile the C with bcc (default auto: as the "
                        "agent chooses, see `leveller agent --help`)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not 1 <= args.packets <= MAX_PACKETS:
        raise UserError(f"--packets={args.packets}: allowed is an integer in 1..{MAX_PACKETS:,}")
    if args.seed < 0:
        raise UserError(f"--seed={args.seed}: allowed is an integer >= 0")
    if os.geteuid() != 0:
        raise UserError("bench fuzz-marker needs root (it loads a BPF program)")
    from leveller.bench.fuzz_marker import run_fuzz
    from leveller.commands.progress import Bar

    with Bar(["fuzzing the marker", "bar", "count", "{task.fields[violations]} violations", "remaining"],
             args.packets, "fuzz", violations=0) as bar:
        result = run_fuzz(args.packets, args.seed, (lambda done, bad: bar.update(completed=done, violations=bad))
                          if bar.shown else None, loader=args.loader)
    doc = result.to_json()
    if args.json:
        print(json.dumps(doc))
    else:
        _print(doc)
    return 1 if doc["violations"] else 0


def _print(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(file=sys.stdout)
    table = Table(title=f"{doc['packets']:,} frames through bpf/flow_marker.c (seed {doc['seed']}, loaded with "
                        f"{doc['loader']})")
    for col in ("kind", "frames", "rewritten", "counted", "refused by kernel", "violations"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, t in doc["by_kind"].items():
        style = "red" if t["violations"] else None
        table.add_row(kind, f"{t['packets']:,}", f"{t['marked']:,}", f"{t['counted']:,}", f"{t['refused']:,}",
                      str(t["violations"]), style=style)
    out.print(table)
    ended = doc["by_lease"]["ended"]
    out.print(f"lease ended: {ended['packets']:,} frames, {ended['marked']:,} rewritten; "
              f"flows mapped: {doc['flows']['mapped_ipv4']} IPv4 + {doc['flows']['mapped_ipv6']} IPv6, "
              f"{doc['flows']['invalid_marks']} invalid marks")
    broken = {k: v for k, v in doc["by_check"].items() if v}
    out.print(f"{doc['packets_per_s']:,.0f} frames/s ({doc['kernel_ns_per_packet']:.0f} ns per frame in the "
              f"program), {doc['elapsed_s']:.1f} s; violations: {doc['violations']}"
              + (f" ({', '.join(f'{k} {v}' for k, v in broken.items())})" if broken else ""))
    for ex in doc["examples"]:
        out.print(f"  [red]{', '.join(ex['checks'])}[/] ({ex['kind']}, lease {ex['lease']}): "
                  + ", ".join(f"{k}={v}" for k, v in ex.items() if k not in ("checks", "kind", "lease")))
