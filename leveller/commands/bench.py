"""Benchmarks that print figures; `--json` for machine-readable output.

  leveller bench datapath   eBPF DSCP marking vs iptables on a veth pair
  leveller bench shim       RDMA QP resurrection pause (fake verbs provider)
  leveller bench levels     controller decision -> DSCP seen on a packet, distribution
"""

from __future__ import annotations

import argparse
import importlib

# name -> (module, help); each module has configure(parser) like a command.
BENCHES: dict[str, tuple[str, str]] = {
    "datapath": ("leveller.commands.bench_datapath", "eBPF marking vs iptables: throughput and update time"),
    "shim": ("leveller.commands.bench_shim", "RDMA shim: queue-pair resurrection pause"),
    "levels": ("leveller.commands.bench_levels", "latency from a controller level change to DSCP on the wire"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCH")
    for name, (module_name, help_text) in BENCHES.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p)
