"""Job sets from the paper's worked examples (single link, times in link units)."""

from __future__ import annotations

from fractions import Fraction

from leveller.model.shape import JobShape

PRESETS: dict[str, tuple[JobShape[Fraction], ...]] = {
    # Paper Figures 3-4 (digest Figure 1): Job 1 computes 1, sends 1; Job 2 computes 1, sends 2.
    "fig3": (JobShape(Fraction(1), Fraction(1)), JobShape(Fraction(1), Fraction(2))),
    # Paper Figure 1: ideal iteration 3 each; two jobs compute 1 / send 2, one computes 2 / sends 1.
    "fig1-trio": (JobShape(Fraction(1), Fraction(2)), JobShape(Fraction(1), Fraction(2)),
                  JobShape(Fraction(2), Fraction(1))),
}
