"""Time from `leveller agent` starting to its first marked packet, with each loader of its eBPF program.

On a veth pair between two fresh namespaces, with a `leveller controller` and two paced iperf3 UDP
flows (the job "probe" has the lowest R, so its packets get the top level's DSCP), each sample starts
an agent with --loader libbpf (the CO-RE object: no compiler at run time) or --loader bcc (the C
compiled at start) and measures from the process start:
  loaded_s      to its log line "eBPF datapath loaded with ..." (Python, imports, the load itself)
  first_mark_s  to the first probe packet with the job's DSCP at the receiver (kernel time stamp)
The agent is stopped (its filter removed) and the packets seen unmarked before the next sample;
loaders alternate, medians reported. Needs root; removes everything it created, also on Ctrl-C.
About 10 s per sample and loader.

examples:
  leveller bench agent-start
  leveller bench agent-start --samples 10 --json
  leveller bench agent-start --loaders libbpf
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=5, metavar="N",
                        help="agent starts per loader (default 5)")
    parser.add_argument("--loaders", default="libbpf,bcc", metavar="L,...",
                        help="loaders to compare, comma-separated (default libbpf,bcc)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise UserError("bench agent-start needs root (network namespaces, BPF)")
    from rich.console import Console

    from leveller.bench import agent_start

    loaders = tuple(name.strip() for name in args.loaders.split(",") if name.strip())
    if args.json:
        print(json.dumps(agent_start.run(args.samples, loaders).to_json()))
        return 0
    with Console(stderr=True).status("starting") as status:
        doc = agent_start.run(args.samples, loaders, progress=status.update).to_json()
    _print(doc)
    return 0


def _print(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"agent start to first marked packet, {doc['samples']} starts per loader (s)")
    for col in ("loader", "datapath loaded (median)", "first mark (median)", "first mark (min-max)"):
        table.add_column(col, justify="left" if col == "loader" else "right")
    for name, d in doc["loaders"].items():
        fm = d["first_mark_s"]
        table.add_row(name, f"{d['loaded_s']['median']:.2f}", f"{fm['median']:.2f}", f"{fm['min']:.2f}-{fm['max']:.2f}")
    out = Console(file=sys.stdout)
    out.print(table)
    out.print(f"took {doc['elapsed_s']:.0f} s")
