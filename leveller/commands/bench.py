"""Benchmarks that print figures; `--json` for machine-readable output.

  leveller bench datapath   eBPF DSCP marking vs iptables on a veth pair
  leveller bench shim       RDMA QP resurrection pause (fake verbs provider)
  leveller bench levels     controller decision -> DSCP seen on a packet, distribution
  leveller bench fuzz-marker  scapy-built frames through the eBPF marker, every invariant checked
  leveller bench network-sim  network simulator events per second at several fabric sizes
  leveller bench controller   decision time, 1,000 agents, map updates at cluster scale
  leveller bench agent-start  agent start to its first marked packet, per eBPF loader (libbpf, bcc)
  leveller bench registrations  registrations per second of the agent's registration socket
"""

from __future__ import annotations

import argparse

# name -> (module, help); each module has configure(parser) like a command.
BENCHES: dict[str, tuple[str, str]] = {
    "datapath": ("leveller.commands.bench_datapath", "eBPF marking vs iptables: throughput and update time"),
    "shim": ("leveller.commands.bench_shim", "RDMA shim: queue-pair resurrection pause"),
    "levels": ("leveller.commands.bench_levels", "latency from a controller level change to DSCP on the wire"),
    "fuzz-marker": ("leveller.commands.bench_fuzz_marker", "fuzzed frames through the eBPF marker, invariants checked"),
    "network-sim": ("leveller.commands.bench_network",
                    "network simulator: events per second at 128 / 1,024 / 4,096 GPUs"),
    "controller": ("leveller.commands.bench_controller", "controller and enforcement at cluster scale"),
    "agent-start": ("leveller.commands.bench_agent_start",
                    "agent start to its first marked packet, with each eBPF loader (libbpf, bcc)"),
    "registrations": ("leveller.commands.bench_registrations",
                      "registrations per second the agent's registration socket sustains"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.commands import add_commands

    add_commands(parser.add_subparsers(dest="bench", metavar="BENCH"), BENCHES)
    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)
