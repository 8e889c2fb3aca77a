"""Cycle quantities of one link and the paper's bounds on the fair rate (section 3.2).

With LCM the least common multiple of the ideal iteration times and
N_j = LCM / T_ideal_j iterations per cycle, max-min fairness of R becomes
minimising the makespan of one cycle. ``C_total`` is all communication time
of a cycle on the link, ``W_j`` the total compute of job j in a cycle. Any
schedule needs at least max(C_total, W_max); lowest-R-first needs at most
C_total + W_min, so its rates are at least LCM / (C_total + W_min) >= R*/2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import gcd, lcm


@dataclass(frozen=True)
class CycleBound:
    lcm: Fraction  # LCM of the ideal iteration times
    iterations: tuple[int, ...]  # N_j = LCM / T_ideal_j
    comm_total: Fraction  # C_total
    work_min: Fraction  # W_min
    work_max: Fraction  # W_max

    @property
    def guaranteed(self) -> Fraction:
        """Rate lowest-R-first reaches at least: LCM / (C_total + W_min)."""
        return self.lcm / (self.comm_total + self.work_min)

    @property
    def optimum_ceiling(self) -> Fraction:
        """No schedule beats this for all jobs: LCM / max(C_total, W_max) (capped at 1)."""
        return min(Fraction(1), self.lcm / max(self.comm_total, self.work_max))


def fraction_lcm(values: Sequence[Fraction]) -> Fraction:
    """Least common multiple of positive rationals: lcm(numerators) / gcd(denominators)."""
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"need positive values, got {list(values)}")
    fr = [Fraction(v) for v in values]
    return Fraction(lcm(*(f.numerator for f in fr)), gcd(*(f.denominator for f in fr)))


def cycle_bound(jobs: Sequence[tuple[Fraction, Fraction]]) -> CycleBound:
    """Cycle quantities for jobs given as (compute, communication) per iteration, exact."""
    if not jobs:
        raise ValueError("need at least one job")
    ideal = [Fraction(c) + Fraction(m) for c, m in jobs]
    period = fraction_lcm(ideal)
    counts = tuple(int(period / t) for t in ideal)
    comm_total = sum((n * Fraction(m) for n, (_, m) in zip(counts, jobs)), Fraction(0))
    work = [n * Fraction(c) for n, (c, _) in zip(counts, jobs)]
    return CycleBound(period, counts, comm_total, min(work), max(work))
