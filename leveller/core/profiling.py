"""Ideal iteration time, measured while a job runs alone at unique top priority.

A new job first runs in a profiling window where it has the highest priority
everywhere, so its iteration time equals its ideal time plus noise. The
estimate is the median of the measured iteration durations: robust to the odd
slow iteration (checkpoint, data-loader hiccup) in a way a mean is not.
Re-profiling opens a new window; the previous estimate stays valid until the
new window has enough samples. It happens on a (jittered) schedule or when the
iteration time alone has drifted (:func:`drifted`: e.g. a phase of training
with a different compute time). Pure: timestamps are arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from leveller.core.rate import Number


def estimate_ideal_time(durations: Sequence[Number]) -> Number:
    """Median of per-iteration durations (robust to outliers). ValueError if empty or <= 0."""
    if not durations:
        raise ValueError("no iteration durations measured; need at least one")
    bad = [d for d in durations if not d > 0]
    if bad:
        raise ValueError(f"iteration durations must be > 0, got {bad[0]!r}")
    return median(durations)  # type: ignore[type-var]  # the stub wants one number type; int, float and Fraction mix fine


def next_reprofile_time(last: Number, mean_interval: Number, u: float) -> Number:
    """Semi-stochastic re-profiling: ``last + mean_interval * (0.5 + u)`` for a caller-drawn u in [0, 1).

    The caller supplies ``u`` (so this stays pure and testable); jittering the
    interval keeps jobs from all re-profiling at once.
    """
    if not mean_interval > 0:
        raise ValueError(f"mean_interval must be > 0, got {mean_interval!r}")
    if not 0 <= u < 1:
        raise ValueError(f"u must be in [0, 1), got {u!r}")
    return last + mean_interval * (0.5 + u)


def drifted(any_priority: Sequence[Number], at_top: Sequence[Number], ideal: Number, tolerance: float,
            samples: int = 5) -> str | None:
    """Whether a job's iteration time alone has moved away from ``ideal``, and which way.

    ``any_priority``: recent iteration durations whatever the job's priority; no
    iteration can beat the time alone, so a median of the last ``samples`` below
    ideal / (1 + tolerance) means the job got faster ("faster"). ``at_top``:
    durations of iterations run entirely at the unique top priority (the job
    first in the order: its time alone plus noise); a median of the last
    ``samples`` above ideal * (1 + tolerance) means it got slower ("slower").
    None while there are too few samples or the medians stay inside. Medians,
    so a few odd iterations (a checkpoint) trigger nothing.
    """
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance!r}")
    if not ideal > 0:
        raise ValueError(f"ideal must be > 0, got {ideal!r}")
    fast = len(any_priority) >= samples and median(any_priority[-samples:]) * (1 + tolerance) < ideal  # type: ignore[type-var]  # the stub wants one number type; int, float and Fraction mix fine
    if fast:
        return "faster"
    slow = len(at_top) >= samples and median(at_top[-samples:]) > ideal * (1 + tolerance)  # type: ignore[type-var]  # the stub wants one number type; int, float and Fraction mix fine
    if slow:
        return "slower"
    return None


@dataclass
class IdealTimeProfiler:
    """Per-job profiling state: feed iteration-end timestamps, read the ideal time.

    ``samples`` iteration durations are collected per window (the first
    iteration after the window opens is measured from the window start).
    ``ideal`` holds the latest completed estimate, or None before the first.
    """

    samples: int = 5
    ideal: Number | None = None
    _window_start: Number | None = field(default=None, repr=False)
    _last_end: Number | None = field(default=None, repr=False)
    _durations: list[Number] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples!r}")

    @property
    def profiling(self) -> bool:
        """True while a window is open (the job must then hold unique top priority)."""
        return self._window_start is not None

    def start_window(self, now: Number) -> None:
        """Open a (re-)profiling window at ``now``; the current estimate stays until it closes."""
        self._window_start = now
        self._last_end = now
        self._durations = []

    def iteration_end(self, now: Number) -> Number | None:
        """Record an iteration finishing at ``now``; return the new estimate when the window closes."""
        if self._window_start is None or self._last_end is None:
            return None
        if now < self._last_end:
            raise ValueError(f"iteration end {now!r} is before the previous one ({self._last_end!r})")
        if now > self._last_end:
            self._durations.append(now - self._last_end)
        self._last_end = now
        if len(self._durations) < self.samples:
            return None
        self.ideal = estimate_ideal_time(self._durations)
        self._window_start = None
        self._last_end = None
        self._durations = []
        return self.ideal
