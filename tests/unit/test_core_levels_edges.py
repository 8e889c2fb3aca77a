"""leveller.core.levels, past what test_core_levels.py pins: the pruner takes ids in any numeric array and
checks its link ids, refuses an order naming a job twice, flows of jobs outside the order and K below 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from leveller.core.levels import Flow, assign_levels, prune
from tests.helpers.levels_oracle import oracle_levels


def random_incidence(seed: int, n_flows: int, n_links: int, n_jobs: int) -> tuple[list[int], list[int], list[int]]:
    """Ranks of n_flows flows of n_jobs jobs, each crossing 1-4 of n_links links."""
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, n_jobs, n_flows).tolist()
    inc_flow: list[int] = []
    inc_link: list[int] = []
    for f in range(n_flows):
        for lk in rng.choice(n_links, rng.integers(1, 5), replace=False).tolist():
            inc_flow.append(f)
            inc_link.append(lk)
    return rank, inc_flow, inc_link


@pytest.mark.parametrize("n_flows", [60, 400])  # below and above SMALL_INCIDENCE pairs
def test_prune_takes_ids_in_any_numeric_array(n_flows: int) -> None:
    """Ranks and ids decoded as floats (e.g. JSON numbers) or int32 give the oracle's levels."""
    n_links = n_flows // 4
    rank, inc_flow, inc_link = random_incidence(n_flows, n_flows, n_links, 12)
    flows = {f"f{i:04d}": Flow(f"J{rank[i]:02d}", tuple(lk for fl, lk in zip(inc_flow, inc_link) if fl == i))
             for i in range(n_flows)}
    order = [f"J{j:02d}" for j in range(12)]
    want = [oracle_levels(order, flows, 4)[f"f{i:04d}"] for i in range(n_flows)]
    assert list(assign_levels(order, flows, 4).values()) == want
    for dtype in (np.float64, np.int32, np.int64):
        got = prune(np.array(rank, dtype=dtype), np.array(inc_flow, dtype=dtype), np.array(inc_link, dtype=dtype),
                    n_links, 4)
        assert got.tolist() == want, dtype


@pytest.mark.parametrize("pairs", [1, 600])
def test_prune_refuses_a_link_id_equal_to_the_number_of_links(pairs: int) -> None:
    inc_flow = np.zeros(pairs, dtype=np.int64)
    inc_link = np.zeros(pairs, dtype=np.int64)
    inc_link[-1] = 3
    with pytest.raises(ValueError, match="out of range"):
        prune(np.zeros(1, dtype=np.int64), inc_flow, inc_link, 3, 2)
    assert prune(np.zeros(1, dtype=np.int64), inc_flow, inc_link, 4, 2).tolist() == [1]


# Two jobs on one link: with a correct order "b" first, b's flow is on top.
FLOWS = {"fa": Flow("a", ("l1",)), "fb": Flow("b", ("l1",))}


def test_pruner_refuses_an_order_that_names_a_job_twice() -> None:
    # ["b", "a", "b"]: a rank table built from it would let the second "b" overwrite the first and put
    # "a" on top, the opposite of what the caller asked.
    with pytest.raises(ValueError, match="duplicates"):
        assign_levels(["b", "a", "b"], FLOWS, 2)
    assert assign_levels(["b", "a"], FLOWS, 2) == {"fb": 1, "fa": 0}


def test_pruner_refuses_flows_of_jobs_outside_the_order_and_k_below_one() -> None:
    with pytest.raises(ValueError, match=r"missing from the order: \['a'\]"):
        assign_levels(["b"], FLOWS, 2)
    with pytest.raises(ValueError, match="K must be >= 1"):
        assign_levels(["b", "a"], FLOWS, 0)
    assert assign_levels(["b", "a"], FLOWS, 1) == {"fa": 0, "fb": 0}
