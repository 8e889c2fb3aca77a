"""Cycle quantities of the paper's bound (section 3.2), checked on the digest's table."""

from __future__ import annotations

from fractions import Fraction

import pytest

from leveller.core.bound import cycle_bound, fraction_lcm


def test_figure3_pair_cycle_quantities() -> None:
    b = cycle_bound([(1, 1), (1, 2)])
    assert b.lcm == 6  # LCM of 2 and 3
    assert b.iterations == (3, 2)  # N1 = 6/2, N2 = 6/3
    assert b.comm_total == 7 and b.work_min == 2 and b.work_max == 3
    assert b.guaranteed == Fraction(6, 9)
    assert b.optimum_ceiling == Fraction(6, 7)  # the digest's optimum 6/7 ~ 0.857 is tight here


def test_trio_cycle_quantities() -> None:
    b = cycle_bound([(1, 2), (1, 2), (2, 1)])
    assert (b.lcm, b.iterations, b.comm_total, b.work_min) == (3, (1, 1, 1), 5, 1)
    assert b.guaranteed == Fraction(1, 2)


def test_fraction_lcm() -> None:
    assert fraction_lcm([Fraction(3, 2), Fraction(5, 4)]) == Fraction(15, 2)
    with pytest.raises(ValueError):
        fraction_lcm([Fraction(0)])


def test_cycle_total_communication_is_exact() -> None:
    """Jobs (1, 1) and (2, 2): LCM 4, counts 2 and 1, C_total = 2 x 1 + 1 x 2 = 4 (a Fraction)."""
    b = cycle_bound([(Fraction(1), Fraction(1)), (Fraction(2), Fraction(2))])
    assert b.comm_total == 4 and isinstance(b.comm_total, Fraction)
