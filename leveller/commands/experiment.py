"""Experiments on the emulated cluster that run the whole live system; `--json` for machine-readable output.

  leveller experiment soak     the live system for a long run; memory and open files of every service
"""

from __future__ import annotations

import argparse

# name -> (module, help); each module has configure(parser) like a command.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "soak": ("leveller.commands.experiment_soak", "long live run; RSS and open fds of every service, growth"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.cli import add_commands

    add_commands(parser.add_subparsers(dest="experiment", metavar="EXPERIMENT"), EXPERIMENTS)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
