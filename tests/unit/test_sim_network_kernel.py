"""The compiled water-filling (fluid_kernel, numba) against the numpy code it replaces (the oracle): the
same bits for the fill, the levels with and without the floor, the incremental refill after every
event and whole simulations. Skipped where numba is not importable (test_sim_network_backend.py
covers that case)."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.sim.network import fluid
from leveller.sim.network.fluid import Incidence, Refill
from tests.helpers.sim_backend import backend

numba_kernel = pytest.importorskip("leveller.sim.network.fluid_kernel", reason="numba is not importable",
                                   exc_type=ImportError)


def compiled_and_oracle(*args) -> tuple[Refill, Refill]:  # type: ignore[no-untyped-def]
    """A Refill built with the compiled kernel and one built with numpy (the oracle), on the same args."""
    with backend("numba"):
        compiled = Refill(*args)
    with backend("numpy"):
        oracle = Refill(*args)
    return compiled, oracle


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def draw_steps(draw, level, active, top: int, most_steps: int, most_changes: int):  # type: ignore[no-untyped-def]
    """Events of a group: each step toggles some flows on or off or moves them to a level in 0..top."""
    steps = []
    for _ in range(draw(st.integers(1, most_steps))):
        level, active = level.copy(), active.copy()
        for f in draw(st.lists(st.integers(0, len(level) - 1), max_size=most_changes)):
            if draw(st.booleans()):
                active[f] = not active[f]
            else:
                level[f] = draw(st.integers(0, top))
        steps.append((level, active))
    return steps


@st.composite
def networks(draw, max_links: int = 12, max_flows: int = 16):  # type: ignore[no-untyped-def]
    """Flows over links, capacities on a coarse grid (ties between bottlenecks) or random, some links
    exhausted, some flows crossing no link or listing a link twice."""
    n_links = draw(st.integers(1, max_links))
    values = st.sampled_from([0.0, 1.0, 2.0, 3.0, 6.0]) if draw(st.booleans()) else st.floats(0.0, 100.0)
    cap = np.array(draw(st.lists(values, min_size=n_links, max_size=n_links)))
    n_flows = draw(st.integers(1, max_flows))
    paths = [draw(st.lists(st.integers(0, n_links - 1), max_size=5)) for _ in range(n_flows)]
    return Incidence.from_paths(paths, n_links), cap


@settings(max_examples=400)
@given(networks(), st.data())
def test_fill_is_the_numpy_fill_to_the_last_bit(net, data) -> None:  # type: ignore[no-untyped-def]
    inc, residual = net
    unfrozen = np.array(data.draw(st.lists(st.booleans(), min_size=inc.n_flows, max_size=inc.n_flows)), dtype=bool)
    got = (residual.copy(), unfrozen.copy(), np.full(inc.n_flows, -1.0))
    want = (residual.copy(), unfrozen.copy(), np.full(inc.n_flows, -1.0))
    numba_kernel.fill(inc.e_flow, inc.e_link, *got)
    fluid._fill_numpy(inc.e_flow, inc.e_link, inc.n_flows, *want)
    for a, b in zip(got, want):
        assert bits(a) == bits(b)


@settings(max_examples=600)
@given(networks(), st.data(), st.sampled_from([0.0, 0.0, 0.05, 0.3]), st.sampled_from([None, 0, 2, 7]))
def test_levels_and_floor_are_the_numpy_rates_to_the_last_bit(net, data, floor, top) -> None:  # type: ignore[no-untyped-def]
    inc, cap = net
    n = inc.n_flows
    level = np.array(data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)), dtype=np.int64)
    active = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    got, want = np.full(n, -1.0), np.full(n, -1.0)
    numba_kernel.rates_of(inc.e_flow, inc.e_link, cap, level, active, floor, -1 if top is None else top, got)
    fluid._rates_numpy(inc.e_flow, inc.e_link, n, inc.n_links, cap, level, active, floor, top, want)
    assert bits(got) == bits(want)


@st.composite
def histories(draw):  # type: ignore[no-untyped-def]
    """A network and a run of events, each flipping a few flows on or off or moving them to another level."""
    inc, cap = draw(networks())
    n = inc.n_flows
    floor = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    top = draw(st.sampled_from([None, 3]))
    level = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    active = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    steps = []
    for _ in range(draw(st.integers(1, 10))):
        level, active = level.copy(), active.copy()
        for f in draw(st.lists(st.integers(0, n - 1), max_size=4)):  # empty: an event that changes nothing
            if draw(st.booleans()):
                active[f] = not active[f]
            else:
                level[f] = draw(st.integers(0, 3))
        steps.append((level, active))
    return inc, cap, floor, top, steps


@settings(max_examples=600)
@given(histories())
def test_incremental_refill_is_the_numpy_refill_after_every_event(case) -> None:  # type: ignore[no-untyped-def]
    inc, cap, floor, top, steps = case
    compiled, oracle = compiled_and_oracle(inc, cap, floor, top)
    assert compiled.kernel is not None and oracle.kernel is None
    for level, active in steps:
        want = oracle(level, active)
        got = compiled(level, active)
        assert bits(got) == bits(want)
        assert compiled.filled == oracle.filled  # the same parts filled again


@st.composite
def wide_histories(draw):  # type: ignore[no-untyped-def]
    """Larger networks than :func:`histories`, eight levels, no floor (the per-level fill of a part,
    ``fluid_kernel.part_levels``): many rounds per level, parts of many flows; capacities on a grid
    (equal shares on many links at once), random, or mostly zero. Not -0.0 (numpy's ``fmin.reduce`` may
    return -0.0 or 0.0 for a tie of the two, the compiled fill the first one) nor infinite (the numpy fill
    can loop for ever on the NaN residuals it leaves): see the test below for those."""
    n_links = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["grid", "random", "odd"]))
    if kind == "grid":
        values = st.sampled_from([0.0, 1.0, 2.0, 3.0, 6.0, 12.0])
    elif kind == "random":
        values = st.floats(0.0, 100.0)
    else:
        values = st.sampled_from([0.0, 0.0, 0.0, 1.0, 5.0])
    cap = np.array(draw(st.lists(values, min_size=n_links, max_size=n_links)))
    n = draw(st.integers(1, 60))
    paths = [draw(st.lists(st.integers(0, n_links - 1), max_size=6)) for _ in range(n)]
    inc = Incidence.from_paths(paths, n_links)
    level = np.array(draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)), dtype=np.int64)
    active = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return inc, cap, draw_steps(draw, level, active, top=7, most_steps=8, most_changes=6)


@settings(max_examples=400)
@given(wide_histories())
def test_per_level_refill_of_large_parts_is_the_numpy_refill(case) -> None:  # type: ignore[no-untyped-def]
    inc, cap, steps = case
    compiled, oracle = compiled_and_oracle(inc, cap)
    for level, active in steps:
        want = oracle(level, active).copy()
        got = compiled(level, active)
        assert bits(got) == bits(want)


def test_per_level_fill_leaves_odd_capacities_to_the_general_fill() -> None:
    # an infinite, a negative and a -0.0 capacity: part_levels declines (refill then runs rates_of)
    inc = Incidence.from_paths([[0, 1], [1, 2], [2]], 3)
    with backend("numba"):
        refill = Refill(inc, np.ones(3))
    inside = np.ones(3, dtype=bool)
    level = np.array([2, 1, 0], dtype=np.int64)
    for odd in (np.inf, -1.0, -0.0):
        cap = np.array([1.0, odd, 3.0])
        rates = np.full(3, -1.0)
        assert not numba_kernel.part_levels(refill.flow_ptr, refill.e_link, refill.link_ptr, refill.link_flow,
                                            cap, level, inside, rates)
        assert (rates == -1.0).all()  # nothing written
    assert numba_kernel.part_levels(refill.flow_ptr, refill.e_link, refill.link_ptr, refill.link_flow,
                                    np.array([1.0, 2.0, 3.0]), level, inside, rates)
    assert rates.tolist() == [1.0, 1.0, 2.0]
    cap = np.array([1.0, -1.0, 3.0])  # refill's fallback to rates_of, against the numpy oracle
    compiled, oracle = compiled_and_oracle(inc, cap)
    assert bits(compiled(level, inside)) == bits(oracle(level, inside))


def test_part_search_finds_the_connected_flows() -> None:
    # flows 0-1 share link 0, 1-2 share link 1 (a chain), 3 alone on link 2, 4 inactive on links 1 and 2
    inc = Incidence.from_paths([[0], [0, 1], [1], [2], [1, 2]], 3)
    with backend("numba"):
        refill = Refill(inc, np.ones(3))
    changed = np.array([True, False, False, False, False])
    active = np.array([True, True, True, True, False])
    got = numba_kernel.part(refill.flow_ptr, refill.e_link, refill.link_ptr, refill.link_flow, changed, active)
    assert got.tolist() == [True, True, True, False, False]  # flow 4 is off: it links nothing


def run_case(policy: str, name: str) -> dict:
    """The contended recipe (scattered, one GPU per host per job) with short jobs: thousands of events."""
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import load_network
    from leveller.sim.network.trace import synthetic

    with backend(name):
        net = load_network("fabric:gpus=128,nics_per_host=1,gbps=100,oversub=2")
        jobs, placer = synthetic("contended:jobs=16,seed=1,min_s=30,max_s=90,max_hosts=8", net)
        return Simulation(net, jobs, make_net_policy(policy, 0.0), 4, 200.0, placer=placer,
                          congestion=True).run().summary()


@pytest.mark.parametrize("policy", ["fair", "leveller", "cassini", "crux"])
def test_a_simulation_gives_the_numpy_results_to_the_last_bit(policy: str) -> None:
    got, want = run_case(policy, "numba"), run_case(policy, "numpy")
    assert got["events"] == want["events"] and got["events"] > 500
    assert got["jobs"] == want["jobs"]  # every job's R, iterations, finish and start, compared with ==
    assert (got["min"], got["avg"], got["congested_share"]) == (want["min"], want["avg"], want["congested_share"])


@st.composite
def near_ties(draw):  # type: ignore[no-untyped-def]
    """Shares within a few TIE of each other on many links (the bottleneck test's threshold decides which
    links freeze together): capacities 1 + k x 1e-10 and 1 + k x 1e-9, one to four flows a link."""
    n_links = draw(st.integers(2, 30))
    step = draw(st.sampled_from([1e-10, 3e-10, 1e-9, 2e-9]))
    cap = np.array([1.0 + draw(st.integers(0, 4)) * step for _ in range(n_links)]) * draw(st.sampled_from([1.0, 3.0]))
    n = draw(st.integers(1, 50))
    paths = [draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4)) for _ in range(n)]
    level = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    active = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return Incidence.from_paths(paths, n_links), cap, draw_steps(draw, level, active, top=3, most_steps=6,
                                                                  most_changes=5)


@settings(max_examples=400)
@given(near_ties())
def test_per_level_refill_with_near_tied_shares_is_the_numpy_refill(case) -> None:  # type: ignore[no-untyped-def]
    # part_levels lists a round's bottleneck candidates in the pass that takes the minimum: near ties
    # (shares apart by less than TIE, some by more) must freeze the same links as numpy's full test
    inc, cap, steps = case
    compiled, oracle = compiled_and_oracle(inc, cap)
    for level, active in steps:
        want = oracle(level, active).copy()
        got = compiled(level, active)
        assert bits(got) == bits(want)
