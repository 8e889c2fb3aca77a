"""Scheduling policies behind one small interface.

A policy looks at a snapshot of the jobs (:class:`JobView`) and returns a
priority order of job names, highest priority first, or ``None`` for "no
priority" (every flow in one class). The order then feeds
:func:`leveller.core.levels.assign_levels`. The single-link simulator, the
network simulator and the live controller call the same objects.

``tau`` tells the caller when to ask again: ``None`` = static (ask when the
job set changes), ``0`` = at every iteration end of any job, ``T > 0`` = every
T time units from the start.

Tie-break (all policies): equal scores keep the order of ``jobs`` as given
(stable sort), so the caller's job order decides and results are deterministic.
Jobs with ``profiling=True`` come first, in the given order: a job whose ideal
time is being measured holds the top priority.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from leveller.core.rate import Number
from leveller.model.limits import POLICIES as POLICY_NAMES


@dataclass(frozen=True)
class JobView:
    """What a policy may know about one job at one instant."""

    name: str
    rate: Number | None = None  # current R (see rate.progress_rate); None while unknown
    gpus: int = 1
    compute: Number | None = None  # compute time per iteration (profiled)
    comm: Number | None = None  # communication time per iteration at full link rate (profiled)
    profiling: bool = False  # ideal time being measured: needs unique top priority
    weight: Number = 1  # operator weight: leveller ranks by rate / weight (1 = the paper)

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"job {self.name!r}: weight must be > 0, got {self.weight!r}")


class Policy(Protocol):
    """Interface every policy implements."""

    @property
    def name(self) -> str: ...

    @property
    def tau(self) -> Number | None:
        """Seconds of the period a policy decides on, None where it does not matter."""
        ...

    def order(self, jobs: Sequence[JobView]) -> list[str] | None:
        """Job names, highest priority first, or None for no priority."""
        ...


def _check_unique(jobs: Sequence[JobView]) -> None:
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique, got {names}")


def _profiling_first(jobs: Sequence[JobView]) -> tuple[list[JobView], list[JobView]]:
    return [j for j in jobs if j.profiling], [j for j in jobs if not j.profiling]


@dataclass(frozen=True)
class LevellerPolicy:
    """Strict priority to the lowest progress rate R (max-min fairness of R).

    With operator weights, jobs rank by R / weight: a job of weight 2 keeps
    priority until its R is twice the others' (weight 1 everywhere = the paper)."""

    tau: Number = 0
    name: str = "leveller"
    by_rate: bool = True  # orders by R: the switching rule (leveller.core.switching) applies to it

    def __post_init__(self) -> None:
        if self.tau < 0:
            raise ValueError(f"tau must be >= 0, got {self.tau!r}")

    def order(self, jobs: Sequence[JobView]) -> list[str]:
        _check_unique(jobs)
        first, rest = _profiling_first(jobs)
        missing = [j.name for j in rest if j.rate is None]
        if missing:
            raise ValueError(f"leveller policy needs a rate R for every job; missing for {missing}")
        return [j.name for j in first] + [j.name for j in sorted(rest, key=weighted_rate)]


def weighted_rate(job: JobView) -> Number:
    """What leveller ranks by: R / weight (exact for int and Fraction inputs)."""
    assert job.rate is not None
    if job.weight == 1:
        return job.rate
    if isinstance(job.rate, (int, Fraction)) and isinstance(job.weight, (int, Fraction)):
        return Fraction(job.rate) / job.weight
    return job.rate / job.weight


def gpu_intensity(job: JobView) -> Number | None:
    """Crux's GPU intensity G * C / M (k = 1), or None if C or M is not known yet."""
    if job.compute is None or job.comm is None:
        return None
    if not job.comm > 0:
        raise ValueError(f"job {job.name!r}: communication time must be > 0, got {job.comm!r}")
    return job.gpus * job.compute / job.comm


@dataclass(frozen=True)
class CruxPolicy:
    """Static strict priority by decreasing GPU intensity G*C/M (Crux with k = 1).

    Jobs whose intensity is unknown (no profile yet) rank after all known ones.
    """

    tau: Number | None = None
    name: str = "crux"

    def order(self, jobs: Sequence[JobView]) -> list[str]:
        _check_unique(jobs)
        first, rest = _profiling_first(jobs)
        known = [j for j in rest if gpu_intensity(j) is not None]
        unknown = [j for j in rest if gpu_intensity(j) is None]
        ranked = sorted(known, key=lambda j: -gpu_intensity(j))  # type: ignore[operator]
        return [j.name for j in first + ranked + unknown]


@dataclass(frozen=True)
class FairPolicy:
    """No priority: flows that share a link split it equally (DCQCN-like flow fairness)."""

    tau: Number | None = None
    name: str = "fair"

    def order(self, jobs: Sequence[JobView]) -> None:
        _check_unique(jobs)
        return None


@dataclass(frozen=True)
class CassiniPolicy:
    """CASSINI (NSDI 2024): no priorities; jobs that share links are interleaved in time instead.

    ``order`` gives no priority (every flow in one class, as under ``fair``); the caller computes
    one time shift per job with leveller.core.cassini whenever the jobs on the links change
    (``time_shifts``), and each job delays an iteration start by it.
    """

    tau: Number | None = None
    name: str = "cassini"
    time_shifts: bool = True

    def order(self, jobs: Sequence[JobView]) -> None:
        _check_unique(jobs)
        return None


def make_policy(name: str, tau: Number = 0) -> Policy:
    """Build a policy by name ('fair', 'crux', 'leveller', 'cassini'); ``tau`` applies to leveller."""
    if name == "leveller":
        return LevellerPolicy(tau=tau)
    if name == "crux":
        return CruxPolicy()
    if name == "fair":
        return FairPolicy()
    if name == "cassini":
        return CassiniPolicy()
    raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICY_NAMES)}")
