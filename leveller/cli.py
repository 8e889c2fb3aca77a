"""`leveller` command-line entry point: a thin dispatcher over leveller.commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from leveller import __version__
from leveller.commands import add_commands
from leveller.errors import UserError

# name -> (module, one-line help). Order is the order shown by --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("leveller.commands.demo", "run the main demonstration (see README)"),
    "simulate": ("leveller.commands.simulate", "run a fluid simulator (one link or a whole network)"),
    "levels": ("leveller.commands.levels", "compress job ranks into K switch levels for given flows"),
    "bench": ("leveller.commands.bench", "print performance figures (datapath, shim, ...)"),
    "experiment": ("leveller.commands.experiment", "run experiments on the live emulated cluster (soak, ...)"),
    "testbed": ("leveller.commands.testbed", "build / tear down the emulated cluster"),
    "sdn": ("leveller.commands.sdn", "run the os-ken OpenFlow app"),
    "controller": ("leveller.commands.controller", "run the central controller (ranks jobs every tau)"),
    "agent": ("leveller.commands.agent", "run the host agent (rate tracker, flow table, DSCP marking)"),
    "status": ("leveller.commands.status", "show jobs, R, levels and flows from a running controller"),
    "job": ("leveller.commands.job", "run the training-job emulator"),
    "config": ("leveller.commands.config", "check a --config TOML file of controller, agent or sdn"),
    "certs": ("leveller.commands.certs", "make a lab CA and certificates for mutual TLS"),
    "switch-config": ("leveller.commands.switch_config",
                      "print switch QoS configuration (SONiC, EOS, OVS) for K levels"),
}


def build_parser() -> argparse.ArgumentParser:
    """Build the full parser (ImportError when a command's module is missing)."""
    parser = argparse.ArgumentParser(
        prog="leveller",
        description="LEVELLER: strict switch priority to the training job with the lowest "
        "normalized progress rate R = iterations x ideal iteration time / elapsed.",
    )
    parser.add_argument("--version", action="version", version=f"leveller {__version__}")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND"), COMMANDS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen command; user errors exit 2 with one line."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "config", None):  # --config FILE.toml: the file's values where no flag is given
            from leveller import config

            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            args = config.apply(args, sub.choices[args.command], argv[argv.index(args.command) + 1:], args.command)
        return int(func(args) or 0)
    except UserError as exc:
        print(f"leveller {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
