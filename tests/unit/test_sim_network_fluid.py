"""Rate model of the network simulator: strict priority by level, max-min within a level."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.sim.network.fluid import Incidence, link_load, max_min_rates

REL = 1e-7


def rates_of(paths, cap, levels=None, active=None):
    inc = Incidence.from_paths(paths, len(cap))
    levels = np.zeros(len(paths), dtype=int) if levels is None else np.asarray(levels)
    active = np.ones(len(paths), dtype=bool) if active is None else np.asarray(active)
    return inc, max_min_rates(inc, np.asarray(cap, dtype=float), levels, active)


def test_two_flows_share_a_link_equally() -> None:
    _, r = rates_of([[0], [0]], [10.0])
    assert r.tolist() == pytest.approx([5.0, 5.0])


def test_classic_max_min_example() -> None:
    # Link 0 (cap 10) carries a, b; link 1 (cap 4) carries b, c. Max-min: b = c = 2, a = 8.
    _, r = rates_of([[0], [0, 1], [1]], [10.0, 4.0])
    assert r.tolist() == pytest.approx([8.0, 2.0, 2.0])


def test_strict_priority_takes_the_link() -> None:
    _, r = rates_of([[0], [0]], [10.0], levels=[1, 0])
    assert r.tolist() == pytest.approx([10.0, 0.0])


def test_lower_level_uses_what_is_left() -> None:
    # High flow limited to 3 by link 1; the low flow gets the remaining 7 on link 0.
    _, r = rates_of([[0, 1], [0]], [10.0, 3.0], levels=[1, 0])
    assert r.tolist() == pytest.approx([3.0, 7.0])


def test_inactive_flows_get_nothing_and_take_nothing() -> None:
    _, r = rates_of([[0], [0]], [10.0], active=[True, False])
    assert r.tolist() == pytest.approx([10.0, 0.0])


def test_a_link_listed_twice_in_a_path_counts_once() -> None:
    inc, r = rates_of([[0, 0, 1], [0]], [10.0, 8.0])
    assert r.tolist() == pytest.approx([5.0, 5.0])
    assert link_load(inc, r).tolist() == pytest.approx([10.0, 5.0])


@st.composite
def networks(draw):
    n_links = draw(st.integers(1, 8))
    cap = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
    n_flows = draw(st.integers(1, 12))
    paths = [sorted(draw(st.sets(st.integers(0, n_links - 1), min_size=1, max_size=min(4, n_links))))
             for _ in range(n_flows)]
    levels = draw(st.lists(st.integers(0, 3), min_size=n_flows, max_size=n_flows))
    active = draw(st.lists(st.booleans(), min_size=n_flows, max_size=n_flows))
    return paths, np.array(cap), np.array(levels), np.array(active)


@settings(max_examples=200, deadline=None)
@given(networks())
def test_no_link_above_capacity(net) -> None:
    paths, cap, levels, active = net
    inc, r = rates_of(paths, cap, levels, active)
    assert np.all(link_load(inc, r) <= cap * (1 + REL))
    assert np.all(r[~active] == 0)


@settings(max_examples=200, deadline=None)
@given(networks())
def test_within_a_level_every_flow_has_a_bottleneck(net) -> None:
    """Max-min per level: each active flow crosses a link that is full (counting this level and
    the levels above) and on which no flow of its level gets more than it."""
    paths, cap, levels, active = net
    _, r = rates_of(paths, cap, levels, active)
    for f in np.flatnonzero(active):
        lv = levels[f]
        found = False
        for link in paths[f]:
            on = [g for g in range(len(paths)) if active[g] and link in paths[g]]
            used = sum(r[g] for g in on if levels[g] >= lv)
            same = [r[g] for g in on if levels[g] == lv]
            if used >= cap[link] * (1 - 1e-6) and r[f] >= max(same) * (1 - 1e-6):
                found = True
        assert found, f"flow {f} (level {lv}, rate {r[f]}) has no bottleneck link"


@settings(max_examples=200, deadline=None)
@given(networks())
def test_higher_levels_never_slowed_by_lower_ones(net) -> None:
    paths, cap, levels, active = net
    _, full = rates_of(paths, cap, levels, active)
    for lv in set(levels[active].tolist()):
        keep = active & (levels >= lv)
        _, alone = rates_of(paths, cap, levels, keep)
        assert full[keep] == pytest.approx(alone[keep], rel=1e-9, abs=1e-12)
