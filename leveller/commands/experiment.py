"""Experiments on the emulated cluster that run the whole live system; `--json` for machine-readable output.

  leveller experiment soak     the live system for a long run; memory and open files of every service
  leveller experiment tenants  the paper's testbed experiments: 2-4 tenants on a leaf-spine (Fig. 10), --fig9
  leveller experiment chaos    the live pair while OVS, the SDN app, the controller and an agent are killed
"""

from __future__ import annotations

import argparse

# name -> (module, help); each module has configure(parser) like a command.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "soak": ("leveller.commands.experiment_soak", "long live run; RSS and open fds of every service, growth"),
    "tenants": ("leveller.commands.experiment_tenants", "2-4 tenants on the leaf-spine under every policy (Fig. 10)"),
    "chaos": ("leveller.commands.experiment_chaos", "live pair under killed and restarted parts; recovery, "
              "stale marks, min R vs undisturbed"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.cli import add_commands

    add_commands(parser.add_subparsers(dest="experiment", metavar="EXPERIMENT"), EXPERIMENTS)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
