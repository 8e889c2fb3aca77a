"""Values of the options several commands share, parsed once, with errors that name the option.

The argparse side (the flags and their help) is leveller.commands.options; these take the parsed
values (an argparse namespace or a configuration dataclass with the same attribute names).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name

if TYPE_CHECKING:
    from leveller.core.switching import SwitchRule


def switching_rule(args: Any) -> SwitchRule:
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


def rate_options(args: Any) -> tuple[Fraction | None, Fraction | None]:
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
