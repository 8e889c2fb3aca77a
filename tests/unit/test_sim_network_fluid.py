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


@settings(max_examples=200)
@given(networks())
def test_no_link_above_capacity(net) -> None:
    paths, cap, levels, active = net
    inc, r = rates_of(paths, cap, levels, active)
    assert np.all(link_load(inc, r) <= cap * (1 + REL))
    assert np.all(r[~active] == 0)


@settings(max_examples=200)
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


@settings(max_examples=200)
@given(networks())
def test_higher_levels_never_slowed_by_lower_ones(net) -> None:
    paths, cap, levels, active = net
    _, full = rates_of(paths, cap, levels, active)
    for lv in set(levels[active].tolist()):
        keep = active & (levels >= lv)
        _, alone = rates_of(paths, cap, levels, keep)
        assert full[keep] == pytest.approx(alone[keep], rel=1e-9, abs=1e-12)


# --- the water-filling rounds against the implementation they replaced ---------------------

TIE = 1e-9


def reference_fill(e_flow, e_link, n_flows, residual, unfrozen, rates):  # type: ignore[no-untyped-def]
    """fluid._fill as of issue 27's first speed-up: the shares of the used links recounted every round."""
    n_links = len(residual)
    live = unfrozen[e_flow]
    ef, el = e_flow[live], e_link[live]
    while len(el):
        counts = np.bincount(el, minlength=n_links)
        used = counts.nonzero()[0]
        share = residual[used] / counts[used]
        x = max(float(share.min()), 0.0)
        bottleneck = np.zeros(n_links, dtype=bool)
        bottleneck[used[share <= x * (1 + TIE) + 1e-300]] = True
        newly = ef[bottleneck[el]]
        rates[newly] = x
        unfrozen[newly] = False
        keep = unfrozen[ef]
        residual -= np.bincount(el[~keep], minlength=n_links) * x
        np.maximum(residual, 0.0, out=residual)
        ef, el = ef[keep], el[keep]
    if unfrozen.any():
        rates[unfrozen] = np.inf
        unfrozen[:] = False


@st.composite
def fill_cases(draw):  # type: ignore[no-untyped-def]
    """Flows over links with capacities on a coarse grid (ties between bottlenecks) or random, some
    links already exhausted, some flows frozen or crossing no link."""
    n_links = draw(st.integers(1, 10))
    values = st.sampled_from([0.0, 1.0, 2.0, 3.0, 6.0]) if draw(st.booleans()) else st.floats(0.0, 100.0)
    residual = np.array(draw(st.lists(values, min_size=n_links, max_size=n_links)))
    n_flows = draw(st.integers(1, 14))
    paths = [sorted(draw(st.sets(st.integers(0, n_links - 1), max_size=min(4, n_links)))) for _ in range(n_flows)]
    unfrozen = np.array(draw(st.lists(st.booleans(), min_size=n_flows, max_size=n_flows)))
    return Incidence.from_paths(paths, n_links), residual, unfrozen


@settings(max_examples=300)
@given(fill_cases())
def test_fill_is_bit_for_bit_the_reference(case) -> None:  # type: ignore[no-untyped-def]
    """Same rates, residual capacities and frozen flags, to the last bit (the simulation's event times
    depend on them)."""
    from leveller.sim.network.fluid import _fill_numpy as _fill

    inc, residual, unfrozen = case
    got = (residual.copy(), unfrozen.copy(), np.full(inc.n_flows, -1.0))
    want = (residual.copy(), unfrozen.copy(), np.full(inc.n_flows, -1.0))
    _fill(inc.e_flow, inc.e_link, inc.n_flows, *got)
    reference_fill(inc.e_flow, inc.e_link, inc.n_flows, *want)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
