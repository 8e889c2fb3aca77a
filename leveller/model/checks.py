"""The shared field checks: each returns the checked value or raises FieldError naming the field.

The wire schema (leveller.rpc.schema) applies them to every message, the agent
to every log line it reads (so it never builds a report the controller would
refuse), the controller's registry to what it stores.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from leveller.model.errors import FieldError, UserError
from leveller.model.limits import (
    MAX_FUTURE_S,
    MAX_IDEAL_S,
    MAX_ITERATIONS,
    MAX_RECENT,
    MAX_WEIGHT,
    MIN_WEIGHT,
    NAME_PATTERN,
    NAME_RULE,
)
from leveller.model.messages import JobReport


def check_object(value: Any, field: str, required: Iterable[str], optional: Iterable[str] = ()) -> dict[str, Any]:
    """A dict with every ``required`` key and no key outside ``required`` and ``optional``."""
    if not isinstance(value, dict):
        raise FieldError(field, f"expected an object, got {type(value).__name__}")
    required = tuple(required)
    allowed = set(required) | set(optional)
    for key in value:
        if key not in allowed:
            where = f"{field}.{key}" if field else key
            raise FieldError(where, f"unknown field; allowed: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in value:
            raise FieldError(f"{field}.{key}" if field else key, "missing")
    return value


def check_list(value: Any, field: str, max_len: int) -> list[Any]:
    """A list of at most ``max_len`` entries."""
    if not isinstance(value, list):
        raise FieldError(field, f"expected a list, got {type(value).__name__}")
    if len(value) > max_len:
        raise FieldError(field, f"{len(value)} entries; at most {max_len} are allowed")
    return value


def check_int(value: Any, field: str, lo: int, hi: int) -> int:
    """An integer (not a bool) in ``lo..hi``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FieldError(field, f"{value!r} is invalid; an integer in {lo}..{hi}")
    return value


def check_number(value: Any, field: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> float:
    """A finite number (not a bool) >= ``lo`` (> with ``lo_open``) and <= ``hi``, as a float."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value > lo if lo_open else value >= lo) and value <= hi:
        return float(value)
    bound = (f"> {lo}" if lo_open else f">= {lo}") + (f" and <= {hi:g}" if math.isfinite(hi) else "")
    raise FieldError(field, f"{value!r} is invalid; a finite number {bound}")


def check_name(value: Any, field: str) -> str:
    """A host or job name: 1-64 ASCII letters, digits, ``_ . : -``."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise FieldError(field, f"{value!r} is invalid; {NAME_RULE}")
    return value


def check_job_name(name: Any) -> str:
    """``name`` if it is a valid job name (the controller's rule), else UserError naming it (for the CLI)."""
    try:
        return check_name(name, "job name")
    except FieldError as exc:
        raise UserError(str(exc)) from None


def check_iterations(value: Any, field: str) -> int:
    """A count of finished iterations."""
    return check_int(value, field, 0, MAX_ITERATIONS)


def check_time(value: Any, field: str, not_before: float = 0.0) -> float:
    """A unix time: finite, after 1970 (> 0), and not before ``not_before`` when that is given."""
    if not_before > 0:
        return check_number(value, field, not_before)
    return check_number(value, field, 0, lo_open=True)


def check_ideal_time(value: Any, field: str) -> float:
    """An ideal iteration time: > 0 and at most MAX_IDEAL_S (one day), so R stays finite and meaningful."""
    return check_number(value, field, 0, MAX_IDEAL_S, lo_open=True)


def check_weight(value: Any, field: str) -> float:
    """An operator weight: a finite number in [MIN_WEIGHT, MAX_WEIGHT] (1 = the paper's ranking)."""
    return check_number(value, field, MIN_WEIGHT, MAX_WEIGHT)


def check_not_future(value: float, field: str, now: float) -> float:
    """A time at most MAX_FUTURE_S after ``now`` (the checking host's clock)."""
    if value > now + MAX_FUTURE_S:
        raise FieldError(field, f"{value} is more than {MAX_FUTURE_S:.0f} s in the future (this host's time "
                         f"{now:.3f})")
    return value


def check_job(job: JobReport, field: str) -> JobReport:
    """Every field of one job's report (``field`` is its path, e.g. ``jobs[2]``): the rules the controller
    applies to what it receives and the agent to what it sends. Returns the job with ``recent`` as tuples."""
    return job_report(job.job, job.iterations, job.start_time, job.ideal_time, job.recent, job.weight, field)


def job_report(name: Any, iterations: Any, start_time: Any, ideal_time: Any, items: Any, weight: Any,
               field: str) -> JobReport:
    """The JobReport of these values, checked as ``check_job`` says (the wire builds jobs through this)."""
    check_name(name, f"{field}.job")
    iterations = check_iterations(iterations, f"{field}.iterations")
    start = check_time(start_time, f"{field}.start_time")
    ideal = None if ideal_time is None else check_ideal_time(ideal_time, f"{field}.ideal_time")
    if not isinstance(items, (list, tuple)):
        raise FieldError(f"{field}.recent", f"expected a list, got {type(items).__name__}")
    if len(items) > MAX_RECENT:
        raise FieldError(f"{field}.recent", f"{len(items)} entries; at most {MAX_RECENT} are allowed")
    recent = []
    for k, pair in enumerate(items):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise FieldError(f"{field}.recent[{k}]", f"{pair!r} is invalid; [iteration, unix time]")
        recent.append((check_int(pair[0], f"{field}.recent[{k}][0]", 1, iterations),
                       check_time(pair[1], f"{field}.recent[{k}][1]", start)))
    weight = None if weight is None else check_weight(weight, f"{field}.weight")
    return JobReport(name, iterations, start, ideal, tuple(recent), weight)
