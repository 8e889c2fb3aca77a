"""A job's shape, ``C:M[:G[:S]]``: the one parser and the one rule, for every command that takes one.

C = compute seconds per iteration, M = communication seconds per iteration at
full rate, G = GPUs, S = slack (the communication starts S seconds before the
compute ends; CASSINI places it). The rule: C > 0 and M > 0 (finite), G an
integer 1..MAX_GPUS, 0 <= S <= C. Values are exact fractions, so the link
simulator keeps its exact arithmetic; the controller takes floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

from leveller.model.checks import check_job_name
from leveller.model.errors import UserError

MAX_GPUS = 1_000_000
MAX_SHAPE_S = 86400.0  # compute / communication seconds per iteration the controller takes (one day)
SHAPE_RULE = "compute time C > 0, communication time M > 0, GPUs G an integer 1..{gpus}, slack 0 <= S <= C"


Seconds = TypeVar("Seconds", float, Fraction)


@dataclass(frozen=True)
class JobShape(Generic[Seconds]):
    """A job's shape, the one type for it: compute C and communication M seconds per iteration at
    full rate, G GPUs (what Crux ranks by) and slack S (the communication starts S seconds before
    the compute ends; CASSINI places it). ``JobShape[Fraction]`` keeps the link simulator's
    arithmetic exact (what ``parse_shape_text`` returns); the controller takes ``JobShape[float]``.
    ValueError on a shape outside the rule (C > 0, M > 0, G >= 1, 0 <= S <= C)."""

    compute: Seconds
    comm: Seconds
    gpus: int = 1
    slack: Seconds | int = 0

    def __post_init__(self) -> None:
        if not self.compute > 0:
            raise ValueError(f"compute time C must be > 0, got {self.compute}")
        if not self.comm > 0:
            raise ValueError(f"communication time M must be > 0, got {self.comm}")
        if self.gpus < 1:
            raise ValueError(f"GPUs G must be >= 1, got {self.gpus}")
        if not 0 <= self.slack <= self.compute:
            raise ValueError(f"slack S must be in 0..C ({self.compute}), got {self.slack}")

    @property
    def ideal(self) -> Seconds:
        """The iteration time alone on the network: C + M (the slack's overlap is not counted)."""
        return self.compute + self.comm


def parse_shape_text(text: str, option: str, slack: bool = True, max_seconds: float = math.inf,
                     shown: str | None = None) -> JobShape[Fraction]:
    """Parse ``C:M[:G[:S]]`` (``:S`` only with ``slack``); UserError naming ``option`` and ``shown`` (default
    ``text``), the part and the rule.
    ``max_seconds`` bounds C and M (the controller: MAX_SHAPE_S; the simulators bound their work by an
    event budget instead)."""
    fmt = "C:M[:G[:S]]" if slack else "C:M[:G]"
    rule = SHAPE_RULE.format(gpus=MAX_GPUS) if slack else SHAPE_RULE.format(gpus=MAX_GPUS).rsplit(",", 1)[0]
    if math.isfinite(max_seconds):
        rule += f", C and M at most {max_seconds:g} s"
    parts = text.split(":")
    where = f"{option} {(text if shown is None else shown)!r}"
    if not 2 <= len(parts) <= (4 if slack else 3):
        raise UserError(f"{where}: expected {fmt}; {rule}")
    values = []
    for label, raw in zip(("compute time C", "communication time M"), parts[:2]):
        value = _fraction(raw)
        if value is None or not 0 < value <= max_seconds:
            raise UserError(f"{where}: {label} must be a number > 0"
                            + (f" and <= {max_seconds:g}" if math.isfinite(max_seconds) else "")
                            + f", got {raw!r}; {rule}")
        values.append(value)
    gpus = 1
    if len(parts) >= 3:
        raw = parts[2]
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_GPUS):
            raise UserError(f"{where}: GPUs G must be an integer >= 1 and <= {MAX_GPUS}, got {raw!r}; {rule}")
        gpus = int(raw)
    lag = Fraction(0)
    if len(parts) == 4:
        value = _fraction(parts[3])
        if value is None or not 0 <= value <= values[0]:
            raise UserError(f"{where}: slack S must be a number in 0..C, got {parts[3]!r}; {rule}")
        lag = value
    return JobShape(values[0], values[1], gpus, lag)


def parse_job_shape(text: str) -> tuple[str, JobShape[float]]:
    """``JOB=C:M[:G[:S]]`` as given to the controller's ``--job-shape`` (C and M at most MAX_SHAPE_S)."""
    job, _, spec = text.partition("=")
    exact = parse_shape_text(spec, "--job-shape", max_seconds=MAX_SHAPE_S, shown=text)
    return check_job_name(job), JobShape(float(exact.compute), float(exact.comm), exact.gpus, float(exact.slack))


def _fraction(raw: str) -> Fraction | None:
    try:
        return Fraction(raw.strip()) if raw.strip() == raw else None
    except (ValueError, ZeroDivisionError):
        return None
