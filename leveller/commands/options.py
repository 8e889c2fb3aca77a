"""Options several commands share (parsed here once, with errors that name the option)."""

from __future__ import annotations

import argparse
from fractions import Fraction

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name


def add_rate_options(parser: argparse.ArgumentParser, unit: str, subject: str = "leveller ranks") -> None:
    """--rate-window / --rate-half-life: what R the leveller policy ranks by (leveller.core.rate)."""
    parser.add_argument("--rate-window", metavar="S",
                        help=f"{subject} by R over the last S {unit} instead of since each job's start "
                        "(e.g. --rate-window 20)")
    parser.add_argument("--rate-half-life", metavar="S",
                        help=f"{subject} by R from iterations and time decayed with half-life S {unit} "
                        "(e.g. --rate-half-life 10)")


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
