"""Incremental water-filling (fluid.Refill): filling again only the parts an event touches gives the
rates a full fill gives, and does not fill the untouched parts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.sim.network.fluid import Incidence, Refill, max_min_rates


@st.composite
def histories(draw):
    """A small network (some flows cross no link, some list a link twice) and a run of events, each
    a new level and active mask for every flow (most flows keep theirs)."""
    n_links = draw(st.integers(1, 8))
    cap = np.array(draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links)))
    n_flows = draw(st.integers(1, 14))
    paths = [draw(st.lists(st.integers(0, n_links - 1), min_size=0, max_size=4)) for _ in range(n_flows)]
    floor = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    top = draw(st.sampled_from([None, 3]))
    level = np.array(draw(st.lists(st.integers(0, 3), min_size=n_flows, max_size=n_flows)))
    active = np.array(draw(st.lists(st.booleans(), min_size=n_flows, max_size=n_flows)))
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        level, active = level.copy(), active.copy()
        for f in draw(st.lists(st.integers(0, n_flows - 1), min_size=1, max_size=3)):
            if draw(st.booleans()):
                active[f] = not active[f]
            else:
                level[f] = draw(st.integers(0, 3))
        steps.append((level, active))
    return paths, cap, floor, top, steps


@settings(max_examples=300)
@given(histories())
def test_incremental_fill_equals_full_fill_after_every_event(case) -> None:
    paths, cap, floor, top, steps = case
    inc = Incidence.from_paths(paths, len(cap))
    refill = Refill(inc, cap, floor, top)
    for level, active in steps:
        got = refill(level, active).copy()
        full = max_min_rates(inc, cap, level, active, floor, top)
        assert np.array_equal(np.isinf(got), np.isinf(full))
        fin = np.isfinite(full)
        assert got[fin] == pytest.approx(full[fin], rel=1e-7, abs=1e-9)


def test_only_the_touched_part_is_filled_again() -> None:
    # flows 0, 1 share link 0; flows 2, 3 share link 2; the two parts share no link
    paths = [[0, 1], [0], [2], [2, 3]]
    cap = np.array([10.0, 4.0, 6.0, 1.0])
    inc = Incidence.from_paths(paths, len(cap))
    refill = Refill(inc, cap)
    level = np.zeros(4, dtype=np.int64)
    assert refill(level, np.ones(4, dtype=bool)).tolist() == pytest.approx([4.0, 6.0, 5.0, 1.0])
    assert refill.filled == 4
    level[1] = 1  # flow 1 above flow 0 on link 0: it takes the link, flow 0 gets nothing left
    assert refill(level, np.ones(4, dtype=bool)).tolist() == pytest.approx([0.0, 10.0, 5.0, 1.0])
    assert refill.filled == 6  # flows 0 and 1 only
    active = np.array([True, True, True, False])
    assert refill(level, active).tolist() == pytest.approx([0.0, 10.0, 6.0, 0.0])
    assert refill.filled == 7  # flow 2 only (flow 3 stopped)
    assert refill(level, active) is refill.rates and refill.filled == 7  # nothing changed: no fill


def test_a_flow_that_stops_frees_its_links_for_a_part_it_connected() -> None:
    # flow 1 links flow 0 (link 0) and flow 2 (link 1); when it stops, both parts are filled again
    paths = [[0], [0, 1], [1]]
    cap = np.array([6.0, 6.0])
    inc = Incidence.from_paths(paths, len(cap))
    refill = Refill(inc, cap)
    level = np.zeros(3, dtype=np.int64)
    assert refill(level, np.ones(3, dtype=bool)).tolist() == pytest.approx([3.0, 3.0, 3.0])
    assert refill(level, np.array([True, False, True])).tolist() == pytest.approx([6.0, 0.0, 6.0])
