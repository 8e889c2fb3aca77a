"""Options several commands share (parsed here once, with errors that name the option)."""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import TYPE_CHECKING

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name

if TYPE_CHECKING:
    from leveller.core.switching import SwitchRule


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


def switching_rule(args: argparse.Namespace) -> SwitchRule:
    """The SwitchRule of --switch-delta / --switch-dwell; UserError naming the option otherwise."""
    import math

    from leveller.core.switching import SwitchRule

    for option, value, top in (("--switch-delta", args.switch_delta, 1.0),
                               ("--switch-dwell", args.switch_dwell, 86400.0)):
        if not (math.isfinite(value) and 0 <= value <= top):
            raise UserError(f"{option} {value:g}: allowed is 0..{top:g} (0 = the paper's rule)")
    return SwitchRule(float(args.switch_delta), float(args.switch_dwell))


def _duration(option: str, text: str | None) -> Fraction | None:
    if text is None:
        return None
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        value = Fraction(-1)
    if not 0 < value <= 10**9:
        raise UserError(f"{option} {text!r}: expected a number > 0 (e.g. {option} 20)")
    return value


def rate_options(args: argparse.Namespace) -> tuple[Fraction | None, Fraction | None]:
    """(window, half-life) from --rate-window / --rate-half-life; at most one of them."""
    window = _duration("--rate-window", args.rate_window)
    half_life = _duration("--rate-half-life", args.rate_half_life)
    if window is not None and half_life is not None:
        raise UserError("give --rate-window or --rate-half-life, not both")
    return window, half_life


def parse_weights(items: list[str], option: str = "--job-weight") -> dict[str, float]:
    """``JOB=W`` items into job -> weight, checked with the controller's own rule (leveller.rpc.schema)."""
    from leveller.codec import SchemaError
    from leveller.model.limits import MAX_WEIGHT, MIN_WEIGHT
    from leveller.rpc.schema import check_weight

    out: dict[str, float] = {}
    for item in items:
        job, _, value = item.partition("=")
        try:
            weight = check_weight(float(value), option)
        except (ValueError, SchemaError):
            raise UserError(f"{option} {item!r}: expected JOB=W with a weight W in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] "
                            f"(1 = the paper's ranking, e.g. {option} big=4)") from None
        try:
            name = check_job_name(job)
        except UserError as exc:
            raise UserError(f"{option} {item!r}: {exc}") from None
        if name in out:
            raise UserError(f"{option} {item!r}: job {name!r} has a weight already ({out[name]:g})")
        out[name] = weight
    return out
