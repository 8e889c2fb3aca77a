"""Inputs for the pruner (leveller.core.levels.prune) at scale."""

from __future__ import annotations

import numpy as np


def random_incidence(seed: int, flows: int = 3000, links: int = 400, jobs: int = 12) -> tuple:
    """(rank per flow, incidence flow ids, incidence link ids, number of links): ``flows`` flows of ``jobs``
    jobs in a random order, each on 1-4 random links of ``links``."""
    rng = np.random.default_rng(seed)
    job = rng.integers(0, jobs, flows)
    order = rng.permutation(jobs)
    rank = order[job]
    per_flow = rng.integers(1, 5, flows)
    inc_flow = np.repeat(np.arange(flows), per_flow)
    inc_link = rng.integers(0, links, len(inc_flow))
    return rank, inc_flow, inc_link, links
