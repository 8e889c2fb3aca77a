"""What a ``leveller`` command line runs with, parsed by the real parsers."""

from __future__ import annotations

import argparse

from leveller.cli import build_parser
from leveller.config import apply


def parsed(argv: list[str]) -> argparse.Namespace:
    """What `leveller ARGV` runs with, the config file applied (as leveller.cli.main does)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[argv[0]]
    return apply(args, sub, argv[1:], argv[0]) if args.config else args
