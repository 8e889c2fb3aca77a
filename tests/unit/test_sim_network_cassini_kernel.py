"""The compiled CASSINI search step (cassini_kernel, numba) against leveller.core.cassini's numpy code, the
oracle the live controller keeps: the same reference scores to the bit, the same best rotation and score
over ties and near ties, the same link searches, and the simulator's choice between them. Skipped where
numba is not importable (the simulator then searches with the numpy code)."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core import cassini
from leveller.sim.network import fluid
from leveller.sim.network.baselines import rotation_search
from tests.unit.test_core_cassini import random_link

cassini_kernel = pytest.importorskip("leveller.sim.network.cassini_kernel", reason="numba is not importable",
                                     exc_type=ImportError)


@st.composite
def rotation_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A base and a profile on a coarse grid of demands (many exact ties) or arbitrary ones, circles of
    a whole or a cut number of tiles, sizes on both sides of the pairwise sum's 8 and 128 terms."""
    q = draw(st.integers(1, 60))
    bins = q * draw(st.integers(1, 8)) + draw(st.integers(0, q - 1))
    values = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) if draw(st.booleans()) else st.floats(0.0, 1.0)
    scale = draw(st.sampled_from([1.0, 2.0, 0.3, 1.7]))
    base = np.array(draw(st.lists(values, min_size=bins, max_size=bins))) * scale
    prof = np.array(draw(st.lists(values, min_size=q, max_size=q)))
    if draw(st.booleans()):  # long runs of one demand, as an arc's interior
        prof = np.repeat(prof[:-(-q // 10)], 10)[:q]
    curve = np.tile(prof, -(-bins // q))[:bins]
    return base, curve, prof, np.arange(0, q, draw(st.integers(1, q)))


@settings(max_examples=300)
@given(rotation_cases())
def test_the_compiled_step_returns_the_numpy_step(case) -> None:  # type: ignore[no-untyped-def]
    base, curve, prof, candidates = case
    assert cassini_kernel.best_rotation(base, curve, prof, candidates) == \
        cassini._best_rotation(base, curve, prof, candidates)


@settings(max_examples=200)
@given(rotation_cases())
def test_the_compiled_reference_scores_are_numpys_to_the_bit(case) -> None:  # type: ignore[no-untyped-def]
    base, curve, _, candidates = case
    doubled = np.concatenate([curve, curve])
    every = np.arange(len(base))
    assert cassini_kernel.scores(base, doubled, every).tobytes() == cassini._scores(base, doubled, every).tobytes()
    assert cassini_kernel.scores(base, doubled, candidates).tobytes() == \
        cassini._scores(base, doubled, candidates).tobytes()


@pytest.mark.parametrize("bins", [1, 7, 8, 9, 127, 128, 129, 255, 256, 257, 1000, 8191, 8192, 8193, 30184, 70001])
def test_reference_scores_of_long_circles_keep_numpys_summation_order(bins: int) -> None:
    """Random terms of every size the pairwise sum splits differently: leaves, halves, numpy's 8,192 buffer."""
    rng = np.random.default_rng(bins)
    base = rng.uniform(0.0, 1.5, bins)
    doubled = np.tile(rng.uniform(0.0, 1.0, bins), 2)
    candidates = np.unique(rng.integers(0, bins, 5))
    assert cassini_kernel.scores(base, doubled, candidates).tobytes() == \
        cassini._scores(base, doubled, candidates).tobytes()


@settings(max_examples=300)
@given(rotation_cases(), st.booleans())
def test_leaves_summed_once_per_demand_value_are_the_reference_scores(case, whole) -> None:  # type: ignore[no-untyped-def]
    """The reference scores of every rotation through the path that sums a leaf over one demand value
    once (circles of a whole and a cut number of tiles, rotation 0, leaves across the circle's cut),
    against numpy's element-wise scores, to the bit."""
    base, curve, prof, _ = case
    bins, q = len(base), len(prof)
    if whole and bins % q:
        base, curve = base[:bins - bins % q], curve[:bins - bins % q]
        bins = len(base)
    every = np.arange(q)
    doubled = np.concatenate([curve[bins - q:], curve])
    los, ns, prog = cassini_kernel._plan(bins)
    exact = np.full(q, np.nan)
    cassini_kernel._memo_scores(base, doubled, prof, every, every, los, ns, prog, np.empty(64), exact)
    assert exact.tobytes() == cassini._scores(base, np.concatenate([curve, curve]), every).tobytes()


# terms whose sum depends on the order of the additions: 1 is lost beside 2**53 unless added first to
# another 1, 2**-60 beside 1; numpy's order is the only one that gives numpy's bits on most draws
ORDERED = st.sampled_from([0.0, 1.0, 2.0 ** 53, 3.0 * 2.0 ** 52, 2.0 ** -60, 0.1, 1e-3, 7.0])


@settings(max_examples=300)
@given(st.integers(1, 1500).flatmap(lambda n: st.tuples(st.lists(ORDERED, min_size=n, max_size=n),
                                                         st.lists(ORDERED, min_size=n, max_size=n),
                                                         st.lists(st.integers(0, n - 1), min_size=1, max_size=6))))
def test_reference_scores_add_their_terms_in_numpys_order(case) -> None:  # type: ignore[no-untyped-def]
    """The vector leaf (8 running sums in one vector, their fixed combination), the leaves' tree and the
    rest of a row one by one, against numpy on terms where a different order gives different bits."""
    base, curve, candidates = np.array(case[0]) + 1.0, np.array(case[1]), np.array(case[2])
    doubled = np.concatenate([curve, curve])
    assert cassini_kernel.scores(base, doubled, candidates).tobytes() == \
        cassini._scores(base, doubled, candidates).tobytes()


def test_the_order_of_the_running_sums_is_visible_to_the_reference_test() -> None:
    """The terms of the test above tell orders apart: a leaf of 16 terms whose running sums combined
    left to right give other bits than numpy's ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))."""
    terms = np.array([2.0 ** 52, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0] * 2)  # base + 0 - 1: exact
    lanes = terms[:8] + terms[8:]  # 2**53, 1, 1, 1, 0...: numpy adds two of the 1s first
    left_to_right = 0.0
    for v in lanes:
        left_to_right += v
    reference = cassini._scores(terms + 1.0, np.zeros(32), np.array([0]))[0]
    assert 1.0 - left_to_right / 16 != reference
    assert cassini_kernel.scores(terms + 1.0, np.zeros(32), np.array([0]))[0] == reference


def test_the_compiled_step_settles_near_ties_as_the_reference_does() -> None:
    """The two hand-made cases of tests/unit/test_core_cassini.py where the rough sums and the reference
    disagree on the order (a rough sum cannot decide them)."""
    base = np.array([1.0, 0.0, 0.0, 0.0, 1.0 + 1e-13, 0.0, 0.0, 0.0])
    base[1] = base[5] = 1.0 + 1e-13
    prof = np.array([1e-12, 0.0, 0.0, 0.0])
    assert cassini_kernel.best_rotation(base, np.tile(prof, 2), prof, np.arange(2)) == \
        cassini._best_rotation(base, np.tile(prof, 2), prof, np.arange(2))
    base = np.array([0.3, 0.3, 1.1, 0.3, 0.7, 0.9, 0.3, 0.3, 0.9, 0.9, 0.9, 0.9, 0.1, 0.7, 0.7, 0.7, 0.2, 1.1,
                     1.1, 1.1, 0.9, 0.7, 0.3, 0.3, 0.3, 0.3, 0.1, 1.1, 1.1, 1.1, 0.2])
    prof = np.array([0.3, 0.6, 0.3, 0.6, 0.3, 0.6, 0.6])
    curve = np.tile(prof, 5)[:31]
    assert cassini_kernel.best_rotation(base, curve, prof, np.arange(7)) == \
        cassini._best_rotation(base, curve, prof, np.arange(7)) == (cassini._best_rotation(base, curve, prof,
                                                                                           np.arange(7))[0], 4)


@settings(max_examples=100)
@given(random_link())
def test_link_searches_with_the_compiled_step_are_the_numpy_searches(case) -> None:  # type: ignore[no-untyped-def]
    jobs, quantum, cap, settings_ = case
    assert cassini.link_rotations(jobs, quantum, cap, **settings_, best_rotation=cassini_kernel.best_rotation) == \
        cassini.link_rotations(jobs, quantum, cap, **settings_)


def test_the_simulator_searches_with_the_backend_of_its_water_filling() -> None:
    try:
        fluid.set_backend("numba")
        assert rotation_search() is cassini_kernel.best_rotation
        fluid.set_backend("numpy")
        assert rotation_search() is None
    finally:
        fluid.set_backend(os.environ.get(fluid.ENV, "auto"))
