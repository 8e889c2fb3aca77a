"""Job sets from the paper's worked examples (single link, times in link units)."""

from __future__ import annotations

from fractions import Fraction

from leveller.sim.link import LinkJob

PRESETS: dict[str, tuple[LinkJob, ...]] = {
    # Paper Figures 3-4 (digest Figure 1): Job 1 computes 1, sends 1; Job 2 computes 1, sends 2.
    "fig3": (LinkJob(Fraction(1), Fraction(1)), LinkJob(Fraction(1), Fraction(2))),
    # Paper Figure 1: ideal iteration 3 each; two jobs compute 1 / send 2, one computes 2 / sends 1.
    "fig1-trio": (LinkJob(Fraction(1), Fraction(2)), LinkJob(Fraction(1), Fraction(2)),
                  LinkJob(Fraction(2), Fraction(1))),
}
