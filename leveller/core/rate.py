"""Normalized progress rate R_j(t) = N_j(t) * T_ideal_j / (t - t0_j).

R is the inverse of a job's slowdown: 1 means the job progresses as if it ran
alone with the full network, 0.5 means it runs at half its ideal speed.
Pure arithmetic: it works on ``int``, ``float`` and ``fractions.Fraction``
alike and returns a Fraction when all inputs are exact.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Union

Number = Union[int, float, Fraction]


def progress_rate(iterations: int, ideal_time: Number, start: Number, now: Number) -> Number:
    """Return R = iterations * ideal_time / (now - start).

    At ``now == start`` the formula is 0/0; we return 0 there, the value R has
    for every ``now > start`` while no iteration is complete, so a job that has
    just started ranks as the least advanced one (highest need). Raises
    ValueError for negative iterations, a non-positive ideal time, or ``now``
    before ``start``.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations!r}")
    if not ideal_time > 0:
        raise ValueError(f"ideal_time must be > 0, got {ideal_time!r}")
    elapsed = now - start
    if elapsed < 0:
        raise ValueError(f"now ({now!r}) is before the job's start ({start!r})")
    if elapsed == 0:
        return Fraction(0) if isinstance(ideal_time, (int, Fraction)) else 0.0
    if isinstance(elapsed, (int, Fraction)) and isinstance(ideal_time, (int, Fraction)):
        return Fraction(iterations) * ideal_time / elapsed
    return iterations * ideal_time / elapsed
