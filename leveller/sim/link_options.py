"""The single-link simulator's inputs as `leveller simulate link` spells them (C:M[:G] jobs, tau, starvations,
the queue floor, the event budget), parsed with errors that name the option, and its JSON result."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from leveller.core.rate import Number
from leveller.errors import UserError

PRESET_NAMES = ("fig3", "fig1-trio")
DEFAULT_MAX_EVENTS = 1_000_000


def parse_job(text: str) -> Any:
    """Parse C:M[:G] into a JobShape (leveller.model.shape's rule); UserError naming the part."""
    from leveller.model.shape import parse_shape_text

    return parse_shape_text(text, "--job", slack=False)


def jobs_of(job_texts: list[str] | None, preset: str | None) -> list[Any]:
    """The job shapes of --job C:M[:G] (repeatable) or of --preset, one of them; UserError otherwise."""
    from leveller.sim.presets import PRESETS

    if job_texts and preset:
        raise UserError("give either --job (one or more) or --preset, not both")
    if job_texts:
        return [parse_job(text) for text in job_texts]
    if preset:
        return list(PRESETS[preset])
    raise UserError(f"no jobs: give --job C:M[:G] (repeatable) or --preset {{{','.join(PRESET_NAMES)}}}")


def parse_tau(text: str) -> Fraction:
    try:
        tau = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise UserError(f"--tau must be a number >= 0 (0 = re-rank at every iteration end), got {text!r}") from None
    if tau < 0:
        raise UserError(f"--tau must be a number >= 0 (0 = re-rank at every iteration end), got {text!r}")
    return tau


def parse_starve(text: str, jobs: int) -> Any:
    """``J:START:LEN`` (job number 1..jobs) into a leveller.sim.link.Starve."""
    from leveller.sim.link import Starve

    parts = text.split(":")
    try:
        job, start, length = int(parts[0]), Fraction(parts[1]), Fraction(parts[2])
        ok = len(parts) == 3 and 1 <= job <= jobs and start >= 0 and length > 0
    except (ValueError, IndexError, ZeroDivisionError):
        ok = False
    if not ok:
        raise UserError(f"--starve {text!r}: expected J:START:LEN with job J in 1..{jobs}, START >= 0 and "
                        "LEN > 0 time units (e.g. --starve 1:60:30)")
    return Starve(job - 1, start, start + length)


def parse_floor(value: float, levels: int) -> Fraction:
    """--floor as an exact fraction: 0 <= F and (K - 1) x F < 1, K the levels in use."""
    if not (math.isfinite(value) and value >= 0 and value * (levels - 1) < 1):
        raise UserError(f"--floor {value:g}: allowed is 0 <= F with (K - 1) x F < 1 for K = {levels} levels "
                        "(e.g. --floor 0.05; 0 = the paper's pure strict priority)")
    return Fraction(value).limit_denominator(10**6)


def check_positive(option: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise UserError(f"{option} must be an integer >= 1, got {value}")


def result_json(result: Any, tau: Fraction, cycles: int, window: Number | None = None,
                half_life: Number | None = None, switching: Any = None, floor: Fraction | None = None,
                timeline: str | None = None) -> dict[str, Any]:
    """`leveller simulate link --json`'s object (with the rate and switching options when given)."""
    out: dict[str, Any] = {
        "policy": result.policy,
        "rates": [float(r) for r in result.rates],
        "min": float(result.min),
        "avg": float(result.avg),
        "iterations": list(result.iterations),
        "jobs": [{"compute": float(j.compute), "comm": float(j.comm), "gpus": j.gpus} for j in result.jobs],
        "tau": float(tau),
        "cycles": cycles,
        "horizon": float(result.horizon),
        "events": result.events,
        "top_job_changes": result.top_job_changes,
    }
    if switching is None:
        return out
    out["rate_window"] = None if window is None else float(window)
    out["rate_half_life"] = None if half_life is None else float(half_life)
    out["switching"] = {"delta": switching.delta, "dwell": switching.dwell, "floor": float(floor or 0)}
    if timeline:
        out["timeline"] = str(timeline)
    return out


def check_budget(jobs: list[Any], cycles: int, tau: Number | None, max_events: int,
                 starvations: int = 0) -> int:
    """The run's event bound; UserError naming --max-events if it exceeds the budget."""
    from leveller.sim.link import event_bound

    bound = event_bound(jobs, cycles, tau, starvations)
    if bound > max_events:
        shown = f"{bound:,}" if bound < 10**15 else f"about 10^{len(str(bound)) - 1}"
        raise UserError(f"this run could take up to {shown} events, over the budget --max-events {max_events:,}; "
                        "lower --cycles, use a longer --tau or less disparate job times, or raise --max-events")
    return bound
