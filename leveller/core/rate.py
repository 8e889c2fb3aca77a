"""Normalized progress rate R_j(t) = N_j(t) * T_ideal_j / (t - t0_j), cumulative, windowed or decayed.

R is the inverse of a job's slowdown: 1 means the job progresses as if it ran
alone with the full network, 0.5 means it runs at half its ideal speed.

The paper's R is cumulative: it remembers everything since the job started, so
a job starved for a while stays behind (and is favoured) until the deficit is
repaid, and a new job "looks fast until enough iterations accumulate". Two
options forget the past: R over the last S seconds (``window``), and R from
exponentially decayed iterations and time (``half_life``). Every caller (the
simulators, the controller) gets R from :func:`progress_rate`, the one place
these definitions live. Pure arithmetic: ``int``, ``float`` and
``fractions.Fraction`` alike; a Fraction comes back when all inputs are exact
(the decayed R is always a float).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TypeVar

Number = int | float | Fraction
Sample = tuple[Number, Number]  # (time, iterations done by then)
S = TypeVar("S", bound=Sample)  # a Sample of narrower number types, kept as it is
DECAY_HORIZON = 10  # half-lives of history a decayed R needs (older weight: < 0.1 %)


def progress_rate(iterations: Number, ideal_time: Number, start: Number, now: Number,
                  history: Sequence[Sample] = (), window: Number | None = None,
                  half_life: Number | None = None) -> Number:
    """R of a job at ``now`` that finished ``iterations`` since ``start``.

    Default: the paper's cumulative R = iterations * ideal_time / (now - start);
    ``history`` is not read. ``history`` holds earlier samples (time, iterations
    done by then), oldest first, times in [start, now]: the first is the base of
    everything after it (a caller starts a job's history with (start, 0) and may
    drop old samples from the front; empty = only (start, 0)). ``iterations``
    may be fractional (a caller rescales counts when the ideal time changes).

    ``window`` = S: R over the last S seconds, (N(now) - N(b)) * T / (now - b)
    with b the latest sample at or before now - S (the first sample when there
    is none: a job younger than S). Counts are exact; the window is >= S long.

    ``half_life`` = h: iterations and time weighted by 2^-(age / h), i.e.
    T * sum_k dN_k * w_k / integral of w over [b, now], where dN_k is the
    progress between consecutive samples, w_k the mean weight over their
    interval (so a steady rate gives exactly that rate) and b the first sample.

    At ``now`` equal to the base time the formula is 0/0; we return 0 there, the
    value R has for every later ``now`` while no iteration is complete, so a job
    that has just started ranks as the least advanced one (highest need).
    ValueError for negative iterations, a non-positive ideal time, window or
    half-life, both a window and a half-life, ``now`` before ``start``, or a
    history out of order.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations!r}")
    if not ideal_time > 0:
        raise ValueError(f"ideal_time must be > 0, got {ideal_time!r}")
    if now - start < 0:
        raise ValueError(f"now ({now!r}) is before the job's start ({start!r})")
    if window is not None and half_life is not None:
        raise ValueError("give a window or a half-life, not both")
    if window is None and half_life is None:
        return _ratio(iterations * ideal_time if _exact(iterations, ideal_time) else
                      float(iterations) * float(ideal_time), now - start, ideal_time)
    points = _points(history, start, now, iterations)
    if window is not None:
        if not window > 0:
            raise ValueError(f"window must be > 0 seconds, got {window!r}")
        base = points[0]
        for p in points:
            if p[0] <= now - window:
                base = p
            else:
                break
        done = iterations - base[1]
        return _ratio(done * ideal_time if _exact(done, ideal_time) else float(done) * float(ideal_time),
                      now - base[0], ideal_time)
    assert half_life is not None
    if not half_life > 0:
        raise ValueError(f"half_life must be > 0 seconds, got {half_life!r}")
    return _decayed(points, float(now), float(half_life)) * float(ideal_time)


def history_horizon(window: Number | None = None, half_life: Number | None = None) -> Number | None:
    """How far back a windowed / decayed R reads its history (None: cumulative, no history needed)."""
    if window is not None:
        return window
    if half_life is not None:
        return DECAY_HORIZON * half_life
    return None


def trim_history(history: Sequence[S], now: Number, horizon: Number | None) -> list[S]:
    """The samples :func:`progress_rate` still needs at ``now``: the latest one at or before
    ``now - horizon`` (the base) and every later one; none at all for the cumulative R."""
    if horizon is None:
        return []
    keep = 0
    for i, (t, _) in enumerate(history):
        if t <= now - horizon:
            keep = i
        else:
            break
    return list(history[keep:])


def _exact(*values: Number) -> bool:
    for v in values:  # a loop, not all() over a generator: this runs for every R of every ranking
        if not isinstance(v, (int, Fraction)):
            return False
    return True


def _ratio(work: Number, elapsed: Number, ideal_time: Number) -> Number:
    if elapsed == 0:
        return Fraction(0) if _exact(ideal_time) else 0.0
    if isinstance(work, (int, Fraction)) and isinstance(elapsed, (int, Fraction)):
        return Fraction(work) / elapsed
    return float(work) / float(elapsed)


def _points(history: Sequence[Sample], start: Number, now: Number, iterations: Number) -> list[Sample]:
    points: list[Sample] = list(history) if history else [(start, 0)]
    for (t0, n0), (t1, n1) in zip(points, points[1:]):
        if t1 < t0 or n1 < n0:
            raise ValueError(f"history must grow in time and iterations; ({t0!r}, {n0!r}) then ({t1!r}, {n1!r})")
    if points[0][0] < start or points[-1][0] > now or points[-1][1] > iterations:
        raise ValueError(f"history {points[0]!r}..{points[-1]!r} must lie within [start={start!r}, now={now!r}] "
                         f"with at most {iterations!r} iterations")
    points.append((now, iterations))
    return points


def _decayed(points: list[Sample], now: float, h: float) -> float:
    """Decayed iterations per decayed second over ``points`` (see progress_rate)."""
    lam = math.log(2) / h

    def weight_integral(a: float, b: float) -> float:  # integral of 2^-((now - t)/h) over [a, b]
        return (math.exp(-lam * (now - b)) - math.exp(-lam * (now - a))) / lam

    done = 0.0
    for (t0, n0), (t1, n1) in zip(points, points[1:]):
        t0f, t1f = float(t0), float(t1)
        if n1 != n0 and t1f > t0f:
            done += float(n1 - n0) * weight_integral(t0f, t1f) / (t1f - t0f)
        elif n1 != n0:  # progress at one instant: its own weight
            done += float(n1 - n0) * math.exp(-lam * (now - t1f))
    total = weight_integral(float(points[0][0]), now)
    return done / total if total > 0 else 0.0
