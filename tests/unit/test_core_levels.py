"""K-level compression by contention-graph pruning (paper section 3.3, Figures 6-7)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leveller.core.levels as levels_module
from leveller.core.levels import Flow, FlowSet, assign_levels, prune
from leveller.core.policies import LevellerPolicy
from tests.helpers.levels_oracle import contention_graph, oracle_levels


def fig6_flows() -> dict[str, Flow]:
    # The digest's Figure 3 (paper Figure 6): jobs J1 < J2 < J3 < J4 by R, J2 owns f21 and f22,
    # four switch links; J1's flow meets f21 and f3, J2's f22 meets f4 only, so every link
    # carries one future level-1 and one level-0 flow.
    return {
        "f1": Flow("J1", ("S1", "S2")),
        "f21": Flow("J2", ("S1",)),
        "f22": Flow("J2", ("S3", "S4")),
        "f3": Flow("J3", ("S2",)),
        "f4": Flow("J4", ("S3", "S4")),
    }


ORDER = ["J1", "J2", "J3", "J4"]


def test_figure6_two_levels() -> None:
    assert assign_levels(ORDER, fig6_flows(), 2) == {"f1": 1, "f22": 1, "f21": 0, "f3": 0, "f4": 0}


def test_figure6_job_flows_on_different_levels_and_one_of_each_per_link() -> None:
    flows = fig6_flows()
    lv = assign_levels(ORDER, flows, 2)
    assert lv["f21"] != lv["f22"]
    for link in ("S1", "S2", "S3", "S4"):
        assert sorted(lv[f] for f, fl in flows.items() if link in fl.links) == [0, 1]


def test_three_levels_split_the_rest_after_pruning() -> None:
    # After f1 and f22 leave, f21, f3 and f4 no longer share a link: each tops its own part.
    assert assign_levels(ORDER, fig6_flows(), 3) == {"f1": 2, "f22": 2, "f21": 1, "f3": 1, "f4": 1}


def test_one_level_puts_everything_on_zero() -> None:
    assert set(assign_levels(ORDER, fig6_flows(), 1).values()) == {0}


def test_disconnected_parts_are_set_independently() -> None:
    flows = {"a": Flow("A", ("L1",)), "b": Flow("B", ("L1",)), "c": Flow("C", ("L2",)),
             "d": Flow("D", ("L2",))}
    # C ranks third globally but is the top job of its own part.
    assert assign_levels(["A", "B", "C", "D"], flows, 2) == {"a": 1, "b": 0, "c": 1, "d": 0}


def test_ties_follow_the_order_given() -> None:
    flows = {"x": Flow("X", ("L",)), "y": Flow("Y", ("L",))}
    assert assign_levels(["Y", "X"], flows, 2) == {"x": 0, "y": 1}
    assert assign_levels(["X", "Y"], flows, 2) == {"x": 1, "y": 0}


def test_more_levels_than_jobs_leaves_low_levels_unused() -> None:
    flows = {"x": Flow("X", ("L",)), "y": Flow("Y", ("L",)), "z": Flow("Z", ("L",))}
    assert assign_levels(["Z", "X", "Y"], flows, 8) == {"z": 7, "x": 6, "y": 5}
    assert assign_levels(["Z", "X", "Y"], flows, 2) == {"z": 1, "x": 0, "y": 0}


def test_same_job_flows_on_shared_link_do_not_contend() -> None:
    flows = {"p1": Flow("P", ("L",)), "p2": Flow("P", ("L",)), "q": Flow("Q", ("M",))}
    assert contention_graph(flows).number_of_edges() == 0
    assert assign_levels(["Q", "P"], flows, 2) == {"p1": 1, "p2": 1, "q": 1}


def test_no_order_means_one_shared_level() -> None:
    assert set(assign_levels(None, fig6_flows(), 4).values()) == {0}


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="K must be >= 1"):
        assign_levels(ORDER, fig6_flows(), 0)
    with pytest.raises(ValueError, match="missing from the order"):
        assign_levels(["J1"], fig6_flows(), 2)


@st.composite
def flow_sets(draw):
    njobs = draw(st.integers(1, 5))
    nflows = draw(st.integers(1, 8))
    flows = {}
    for i in range(nflows):
        links = draw(st.lists(st.sampled_from(["L1", "L2", "L3", "L4"]), min_size=1, max_size=3, unique=True))
        flows[f"f{i}"] = Flow(f"J{draw(st.integers(0, njobs - 1))}", tuple(links))
    order = draw(st.permutations([f"J{j}" for j in range(njobs)]))
    return order, flows, draw(st.integers(1, 6))


@settings(max_examples=150)
@given(flow_sets())
def test_levels_respect_the_order_on_every_contended_link(case) -> None:
    order, flows, k = case
    lv = assign_levels(order, flows, k)
    assert set(lv) == set(flows) and all(0 <= v < k for v in lv.values())
    rank = {j: i for i, j in enumerate(order)}
    graph = contention_graph(flows)
    for a, b in graph.edges:
        hi, lo = (a, b) if rank[flows[a].job] < rank[flows[b].job] else (b, a)
        # a better-ranked job never sits below a contending worse-ranked one,
        # and they share a level only at the bottom.
        assert lv[hi] >= lv[lo]
        assert lv[hi] > lv[lo] or lv[hi] == 0


# ---- equality with the pairwise-graph oracle (tests/helpers/levels_oracle.py) ------------------------------

@st.composite
def contention_cases(draw):
    """Orders, flows and K covering ties in rank (one job, many flows), K = 1, disconnected parts
    (more links than flows) and a job whose flows sit in different parts."""
    njobs = draw(st.integers(1, 6))
    nlinks = draw(st.integers(1, 12))
    links = [f"L{i}" for i in range(nlinks)]
    nflows = draw(st.integers(0, 24))
    flows = {}
    for i in range(nflows):
        on = draw(st.lists(st.sampled_from(links), min_size=1, max_size=4, unique=True))
        flows[f"f{i}"] = Flow(f"J{draw(st.integers(0, njobs - 1))}", tuple(on))
    order = draw(st.permutations([f"J{j}" for j in range(njobs)]))
    return order, flows, draw(st.sampled_from([1, 1, 2, 3, 8]) | st.integers(1, 8))


@settings(max_examples=400)
@given(contention_cases())
def test_pruning_equals_the_pairwise_graph_oracle(case) -> None:
    order, flows, k = case
    assert assign_levels(order, flows, k) == oracle_levels(order, flows, k)


@settings(max_examples=150)
@given(contention_cases())
def test_numpy_and_small_input_paths_agree_with_the_oracle(case) -> None:
    order, flows, k = case
    names = list(flows)
    rank_of = {j: i for i, j in enumerate(order)}
    link_ids: dict[str, int] = {}
    inc = [(i, link_ids.setdefault(lk, len(link_ids))) for i, n in enumerate(names) for lk in flows[n].links]
    rank = np.array([rank_of[flows[n].job] for n in names], dtype=np.int64)
    f = np.array([a for a, _ in inc], dtype=np.int64)
    lk = np.array([b for _, b in inc], dtype=np.int64)
    want = oracle_levels(order, flows, k)
    for small in (10**9, -1):  # every input through the plain-Python path, then through numpy/scipy
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(levels_module, "SMALL_INCIDENCE", small)
            got = levels_module.prune(rank, f, lk, len(link_ids), k)
        assert dict(zip(names, got.tolist())) == want


def test_a_job_split_across_parts_takes_the_top_of_one_part_only() -> None:
    # J2 is best overall but its f2b contends only with J1 on L2, whose other part is ruled by J0.
    flows = {"f0": Flow("J0", ("L1",)), "f2a": Flow("J2", ("L1",)), "f2b": Flow("J2", ("L2",)),
             "f1": Flow("J1", ("L2",)), "g": Flow("J3", ("L3",))}
    order = ["J0", "J2", "J1", "J3"]
    want = {"f0": 2, "f2a": 1, "f2b": 2, "f1": 1, "g": 2}
    assert oracle_levels(order, flows, 3) == want
    assert assign_levels(order, flows, 3) == want


def test_prune_refuses_inconsistent_arrays() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        levels_module.prune(np.zeros(2), np.array([0, 1]), np.array([0]), 1, 2)
    with pytest.raises(ValueError, match="out of range"):
        levels_module.prune(np.zeros(2), np.array([0, 2]), np.array([0, 0]), 1, 2)
    with pytest.raises(ValueError, match="out of range"):
        levels_module.prune(np.zeros(2), np.array([0, 1]), np.array([0, 3]), 1, 2)
    with pytest.raises(ValueError, match="K must be >= 1"):
        levels_module.prune(np.zeros(1), np.array([0]), np.array([0]), 1, 0)


def test_a_flow_listing_a_link_twice_is_one_crossing() -> None:
    flows = {"a": Flow("A", ("L", "L")), "b": Flow("B", ("L",))}
    assert assign_levels(["B", "A"], flows, 2) == oracle_levels(["B", "A"], flows, 2) == {"a": 0, "b": 1}


@pytest.mark.parametrize("n", [400, 3000])
def test_generated_cluster_levels_equal_the_oracle(n: int) -> None:
    """The rail-optimised 1,024-GPU cluster of the benchmark (a small cut: the oracle is quadratic)."""
    from leveller.bench.workload import generate, levels_input
    from leveller.core.levels import decide_levels
    from leveller.core.levels_input import parse_input

    data = levels_input(generate(n, seed=3))
    inp = parse_input(data)
    flows = {name: Flow(spec["job"], tuple(spec["links"])) for name, spec in data["flows"].items()}
    order = LevellerPolicy().order(inp.jobs)
    want = oracle_levels(order, flows, 8)
    assert dict(zip(inp.names, decide_levels(inp, 8))) == want
    assert len(set(want.values())) >= 3  # the cut is contended enough to use several levels


@settings(max_examples=150)
@given(contention_cases(), st.lists(st.sampled_from([0.25, 0.5, 0.5, 0.75]), min_size=6, max_size=6))
def test_levels_file_with_tied_rates_equals_the_oracle(case, rates) -> None:
    """Through `leveller levels`' own parsing: equal R keeps the file's job order (the oracle gets the
    policy's order, computed independently of the pruning)."""
    from leveller.core.levels import decide_levels
    from leveller.core.levels_input import parse_input

    order, flows, k = case
    jobs = sorted(order, key=lambda j: -int(j[1:]))  # file order differs from the names' order
    data = {"jobs": {j: {"rate": rates[int(j[1:])]} for j in jobs},
            "flows": {n: {"job": f.job, "links": list(f.links)} for n, f in flows.items()}}
    by_rate = [j for _, _, j in sorted((rates[int(j[1:])], pos, j) for pos, j in enumerate(jobs))]
    inp = parse_input(data)
    assert dict(zip(inp.names, decide_levels(inp, k))) == oracle_levels(by_rate, flows, k)


# ---- every refusal says what is wrong, in full ------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: levels_module.prune(np.zeros(1), np.array([0]), np.array([0]), 1, 0),
     "number of levels K must be >= 1, got 0"),
    (lambda: levels_module.prune(np.zeros(2), np.array([0, 1]), np.array([0]), 1, 2),
     "incidence arrays differ in length: 2 flows, 1 links"),
    (lambda: levels_module.prune(np.zeros(2), np.array([0, -1]), np.array([0, 0]), 1, 2),
     "incidence refers to a flow or link id out of range"),
    (lambda: assign_levels(ORDER, fig6_flows(), 0), "number of levels K must be >= 1, got 0"),
    (lambda: assign_levels(["J1", "J2", "J1"], fig6_flows(), 2), "job order has duplicates: ['J1', 'J2', 'J1']"),
    (lambda: assign_levels(["J1", "J3"], fig6_flows(), 2), "flows name jobs missing from the order: ['J2', 'J4']"),
])
def test_refusals_name_the_value_and_the_rule(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as exc:
        call()
    assert str(exc.value) == message


# ---- the pruner's inputs: ids in any numeric array, link ids checked, orders and K refused ------------
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


def _input_error(data: object, max_flows: int | None = None) -> str:
    """The message of the UserError parse_input raises on ``data``."""
    from leveller.core.levels_input import parse_input
    from leveller.model.errors import UserError

    with pytest.raises(UserError) as info:
        parse_input(data) if max_flows is None else parse_input(data, max_flows)
    return str(info.value)


def test_parse_input_errors_name_the_field_and_the_value() -> None:
    """Each structural error says which field is wrong and what it got, not a traceback."""
    flows = {"f": {"job": "a", "links": ["l1"]}}
    assert _input_error([1]) == "top level must be an object with keys 'jobs' and 'flows', got list"
    assert _input_error({"jobs": {}, "flows": {}}) == "'jobs' must be a non-empty object {\"<job>\": {\"rate\": R}}"
    assert _input_error({"jobs": {"a": {"rate": 1}}, "flows": []}) == \
        "'flows' must be an object {\"<flow>\": {\"job\": \"<job>\", \"links\": [...]}}"
    # a job that is not an object has no rate (an AttributeError would be a traceback)
    assert _input_error({"jobs": {"a": 5}, "flows": flows}) == \
        "jobs.a.rate must be a number >= 0 (progress rate R), got None"
    assert _input_error({"jobs": {"a": {"rate": 1}}, "flows": {"f": 5}}) == \
        "flows.f must be an object with 'job' and 'links', got 5"
    # an unhashable job name is a wrong job, not a TypeError
    assert _input_error({"jobs": {"a": {"rate": 1}}, "flows": {"f": {"job": ["a"], "links": ["l1"]}}}) == \
        "flows.f.job: ['a'] is not a job in 'jobs' (known: a)"
    assert _input_error({"jobs": {"a": {"rate": 1}}, "flows": {"f": {"job": "a", "links": []}}}) == \
        "flows.f.links must be a non-empty list of link names (strings), got []"


@pytest.mark.parametrize("links", [["l1", ""], ["l1", 5]])
def test_parse_input_refuses_an_empty_or_non_string_link_naming_the_flow(links: list[object]) -> None:
    flows = {"ok": {"job": "a", "links": ["l1"]}, "f": {"job": "a", "links": links}}
    data = {"jobs": {"a": {"rate": 1}}, "flows": flows}
    assert _input_error(data) == f"flows.f.links must be a non-empty list of link names (strings), got {links!r}"


def test_parse_input_lists_at_most_20_known_jobs() -> None:
    """The unknown-job error lists the jobs of the file, cut at 20 with ", ..." after them."""
    for n, tail in ((20, ""), (21, ", ...")):
        jobs = {f"j{i}": {"rate": 1} for i in range(n)}
        known = ", ".join(f"j{i}" for i in range(20)) + tail
        assert _input_error({"jobs": jobs, "flows": {"f": {"job": "x", "links": ["l1"]}}}) == \
            f"flows.f.job: 'x' is not a job in 'jobs' (known: {known})"


def test_parse_input_accepts_exactly_max_flows_and_a_rate_of_0() -> None:
    from leveller.core.levels_input import parse_input

    flows = {"f": {"job": "a", "links": ["l1"]}, "g": {"job": "a", "links": ["l1"]}}
    data = {"jobs": {"a": {"rate": 0}}, "flows": flows}
    inp = parse_input(data, max_flows=2)
    assert inp.names == ["f", "g"] and [j.rate for j in inp.jobs] == [0]
    assert _input_error(data, max_flows=1) == "'flows' has 2 flows; at most 1 are decided in one run"


@settings(max_examples=300)
@given(contention_cases(), st.booleans())
def test_a_flow_set_decides_as_the_flow_table_it_was_built_from(case, twice) -> None:  # type: ignore[no-untyped-def]
    order, flows, k = case
    flow_set = FlowSet(flows)
    assert dict(flow_set) == flows and len(flow_set) == len(flows)
    if twice:  # a set decides under many orders: nothing of one order is left for the next
        flow_set.levels(list(reversed(order)), k)
    assert flow_set.levels(order, k) == oracle_levels(order, flows, k)
    assert assign_levels(order, flow_set, k) == oracle_levels(order, flows, k)
    assert flow_set.levels(None, k) == dict.fromkeys(flows, 0)


def test_a_flow_set_refuses_an_order_as_assign_levels_does() -> None:
    flow_set = FlowSet(fig6_flows())
    with pytest.raises(ValueError, match=r"duplicates: \['J1', 'J1'"):
        flow_set.levels(["J1", "J1", "J2", "J3", "J4"], 2)
    with pytest.raises(ValueError, match=r"missing from the order: \['J3', 'J4'\]"):
        flow_set.levels(["J1", "J2"], 2)
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        flow_set.levels(ORDER, 0)


def test_a_flow_set_takes_another_pruner_with_the_same_arguments() -> None:
    seen = []

    def pruner(rank, inc_flow, inc_link, n_links, k):  # type: ignore[no-untyped-def]
        seen.append((rank.tolist(), n_links, k))
        return prune(rank, inc_flow, inc_link, n_links, k)

    assert FlowSet(fig6_flows()).levels(ORDER, 2, pruner) == {"f1": 1, "f22": 1, "f21": 0, "f3": 0, "f4": 0}
    assert seen == [([0, 1, 1, 2, 3], 4, 2)]  # flows in table order, the four links, K
