"""K-level compression by contention-graph pruning (paper section 3.3, Figures 6-7)."""

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from leveller.core.levels import Flow, assign_levels, contention_graph


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
def flow_sets(draw):  # type: ignore[no-untyped-def]
    njobs = draw(st.integers(1, 5))
    nflows = draw(st.integers(1, 8))
    flows = {}
    for i in range(nflows):
        links = draw(st.lists(st.sampled_from(["L1", "L2", "L3", "L4"]), min_size=1, max_size=3, unique=True))
        flows[f"f{i}"] = Flow(f"J{draw(st.integers(0, njobs - 1))}", tuple(links))
    order = draw(st.permutations([f"J{j}" for j in range(njobs)]))
    return order, flows, draw(st.integers(1, 6))


@settings(max_examples=150, deadline=None)
@given(flow_sets())
def test_levels_respect_the_order_on_every_contended_link(case) -> None:  # type: ignore[no-untyped-def]
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
