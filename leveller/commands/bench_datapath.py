"""eBPF DSCP marking vs iptables on a veth pair between two fresh namespaces.

Measures, with iperf3 (one TCP stream, sender namespace -> receiver namespace):
  none      no marker on the sender's veth
  ebpf      our tc egress program (bpf/flow_marker.c) holding N flow -> DSCP entries, loaded with
            --loader: the CO-RE object through libbpf, or the C compiled by bcc (default auto: as
            the agent chooses)
  iptables  N mangle rules `-s A -d B -p tcp --sport X --dport Y -j DSCP` (the paper's method)
The measured flow is one of the N and gets re-marked by both markers. Modes are
interleaved (rotating order) and medians reported. Then the time to change the
DSCP of 1, 1,000 and 10,000 flows that hold a slot: stores into the mmap'd mark array vs one
`iptables-restore --noflush` transaction (replace-rule lines or a chain rewrite,
whichever is faster). Needs root; removes everything it created, also on Ctrl-C.
Takes about 1.5-2 minutes with the defaults.

examples:
  leveller bench datapath
  leveller bench datapath --flows 1000 --rounds 3 --json
  leveller bench datapath --loader bcc
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flows", type=int, default=10000, metavar="N",
                        help="flow entries in the eBPF map and iptables rules in the chain (default 10000)")
    parser.add_argument("--rounds", type=int, default=6, metavar="R",
                        help="interleaved throughput runs per mode; medians are reported (default 6)")
    parser.add_argument("--seconds", type=float, default=3.0, metavar="S",
                        help="length of each iperf3 run in seconds (default 3)")
    parser.add_argument("--loader", choices=("auto", "libbpf", "bcc"), default="auto",
                        help="how our program is loaded (default auto: libbpf when the CO-RE object is built, "
                        "else bcc)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not 1 <= args.rounds <= 20:
        raise UserError(f"--rounds={args.rounds}: allowed is 1..20")
    if not 1.0 <= args.seconds <= 30.0:
        raise UserError(f"--seconds={args.seconds}: allowed is 1..30")
    if os.geteuid() != 0:
        raise UserError("bench datapath needs root (network namespaces, BPF, iptables)")
    from rich.console import Console

    from leveller.bench import datapath

    err = Console(stderr=True)
    if args.json:
        result = datapath.run(args.flows, args.rounds, args.seconds, loader=args.loader)
        print(json.dumps(result.to_json()))
        return 0
    with err.status("starting") as status:
        result = datapath.run(args.flows, args.rounds, args.seconds, progress=status.update, loader=args.loader)
    _print_tables(result.to_json())
    return 0


def _print_tables(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(file=sys.stdout)
    tp = res["throughput_gbps"]
    t1 = Table(title=f"iperf3 throughput, veth pair, {res['flows']} flow entries, loaded with {res['loader']} "
                     f"(median of {len(res['throughput_runs_gbps']['none'])} x {res['seconds_per_run']:g} s)")
    for col in ("marker", "Gbit/s", "x none", "runs"):
        t1.add_column(col, justify="right" if col != "marker" else "left")
    for mode in ("none", "ebpf", "iptables"):
        runs = ", ".join(f"{x:.2f}" for x in res["throughput_runs_gbps"][mode])
        t1.add_row(mode, f"{tp[mode]:.2f}", f"{tp[mode] / tp['none']:.2f}", runs)
    out.print(t1)
    t2 = Table(title="time to change the DSCP of k flows (median, ms)")
    t2.add_column("method")
    sizes = list(res["update_ms"]["ebpf"])
    for size in sizes:
        t2.add_column(f"k={size}", justify="right")
    rows = [("ebpf (mark array stores)", res["update_ms"]["ebpf"]),
            ("iptables-restore, -R per rule", res["iptables_update_methods_ms"]["replace_rules"]),
            ("iptables-restore, chain rewrite", res["iptables_update_methods_ms"]["rewrite_chain"])]
    for name, vals in rows:
        t2.add_row(name, *(f"{vals[s]:.2f}" for s in sizes))
    out.print(t2)
    out.print(f"eBPF / none = {tp['ebpf'] / tp['none']:.2f}, eBPF / iptables = {tp['ebpf'] / tp['iptables']:.1f}; "
              f"took {res['elapsed_s']:.0f} s")
