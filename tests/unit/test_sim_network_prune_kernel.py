"""The compiled pruning (prune_kernel, numba) against leveller.core.levels.prune, the live controller's:
the same levels for every input, the same refusals, and the simulator's choice between them. Skipped
where numba is not importable (the simulator then uses prune itself)."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.levels import prune
from leveller.sim.network.policies import pruner
from tests.helpers.levels import random_incidence
from tests.helpers.sim_backend import backend

prune_kernel = pytest.importorskip("leveller.sim.network.prune_kernel", reason="numba is not importable",
                                   exc_type=ImportError)


@st.composite
def incidences(draw):  # type: ignore[no-untyped-def]
    """Ranks with ties (jobs of many flows), flows on no link, pairs listed twice, links no flow uses,
    and sizes on both sides of prune's plain-Python threshold."""
    n_flows = draw(st.integers(0, 60))
    n_jobs = draw(st.integers(1, 8))
    order = draw(st.permutations(range(n_jobs)))
    job = draw(st.lists(st.integers(0, n_jobs - 1), min_size=n_flows, max_size=n_flows))
    rank = np.array([order[j] for j in job], dtype=np.int64)
    n_links = draw(st.integers(1, 20))
    pairs = draw(st.lists(st.tuples(st.integers(0, max(n_flows - 1, 0)), st.integers(0, n_links - 1)),
                          max_size=0 if n_flows == 0 else 700))
    inc_flow = np.array([f for f, _ in pairs], dtype=np.int64)
    inc_link = np.array([lk for _, lk in pairs], dtype=np.int64)
    return rank, inc_flow, inc_link, n_links


@settings(max_examples=500)
@given(incidences(), st.integers(1, 9))
def test_the_compiled_pruning_gives_prunes_levels(case, k: int) -> None:  # type: ignore[no-untyped-def]
    rank, inc_flow, inc_link, n_links = case
    got = prune_kernel.prune(rank, inc_flow, inc_link, n_links, k)
    want = prune(rank, inc_flow, inc_link, n_links, k)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pruning_gives_prunes_levels_at_cluster_size(seed: int) -> None:
    rank, inc_flow, inc_link, n_links = random_incidence(seed, flows=3000, links=400, jobs=40)
    for k in (2, 4, 8):
        got = prune_kernel.prune(rank, inc_flow, inc_link, n_links, k)
        assert got.tolist() == prune(rank, inc_flow, inc_link, n_links, k).tolist()
        assert len(set(got.tolist())) == k  # enough jobs for every level to be used


@pytest.mark.parametrize("args, message", [
    ((np.zeros(2), np.array([0]), np.array([0]), 1, 0), "K must be >= 1, got 0"),
    ((np.zeros(2), np.array([0, 1]), np.array([0]), 1, 2), "differ in length: 2 flows, 1 links"),
    ((np.zeros(2), np.array([2]), np.array([0]), 1, 2), "out of range"),
    ((np.zeros(2), np.array([0]), np.array([1]), 1, 2), "out of range"),
    ((np.zeros(2), np.array([-1]), np.array([0]), 1, 2), "out of range"),
])
def test_the_compiled_pruning_refuses_what_prune_refuses(args, message: str) -> None:  # type: ignore[no-untyped-def]
    for fn in (prune, prune_kernel.prune):
        with pytest.raises(ValueError, match=message):
            fn(*args)


def test_the_simulator_prunes_with_the_backend_of_its_water_filling() -> None:
    with backend("numba"):
        assert pruner() is prune_kernel.prune
    with backend("numpy"):
        assert pruner() is prune
