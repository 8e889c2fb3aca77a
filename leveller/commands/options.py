"""Options several commands share: the flags; their values are parsed by leveller.options."""

from __future__ import annotations

import argparse

from leveller.options import parse_weights, rate_options, switching_rule

__all__ = ["add_rate_options", "add_switching_options", "parse_weights", "rate_options", "switching_rule"]


def add_rate_options(parser: argparse.ArgumentParser, unit: str, subject: str = "leveller ranks") -> None:
    """--rate-window / --rate-half-life: what R the leveller policy ranks by (leveller.core.rate)."""
    parser.add_argument("--rate-window", metavar="S",
                        help=f"{subject} by R over the last S {unit} instead of since each job's start "
                        "(e.g. --rate-window 20)")
    parser.add_argument("--rate-half-life", metavar="S",
                        help=f"{subject} by R from iterations and time decayed with half-life S {unit} "
                        "(e.g. --rate-half-life 10)")


def add_switching_options(parser: argparse.ArgumentParser, unit: str, delta: float = 0.0, dwell: float = 0.0,
                          floor: float | None = None) -> None:
    """--switch-delta / --switch-dwell (leveller.core.switching), and --floor when ``floor`` is given: when
    the order of jobs may change, and the share a queue below the top keeps."""
    parser.add_argument("--switch-delta", type=float, default=delta, metavar="D",
                        help="hysteresis: a job moves ahead of one it was behind only when its R is lower by more "
                        f"than D (default {delta:g}; 0 = the paper), e.g. --switch-delta 0.02")
    parser.add_argument("--switch-dwell", type=float, default=dwell, metavar="S",
                        help=f"dwell: a job that moved ahead keeps its place for at least S {unit}, so the top of "
                        f"a contention group changes at most once per S (default {dwell:g}; 0 = the paper), "
                        "e.g. --switch-dwell 2")
    if floor is not None:
        parser.add_argument("--floor", type=float, default=floor, metavar="F",
                            help="share of a link every priority queue below the top keeps while it has traffic "
                            f"(default {floor:g}; 0 = the paper's pure strict priority), e.g. --floor 0.05")
