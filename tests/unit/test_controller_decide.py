"""The per-tau decision with literal inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.controller.decide import JobInput, decide, job_links, job_rate
from leveller.core.policies import make_policy
from leveller.model.flow import flow_key

FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
FB = flow_key("10.0.0.2", "10.0.0.3", 40001, 48000)
FC = flow_key("10.0.0.5", "10.0.0.6", 40002, 49000)


def test_job_rate_is_iterations_times_ideal_over_elapsed() -> None:
    assert job_rate(JobInput("a", 10, 100.0, 0.5), now=110.0) == pytest.approx(0.5)
    assert job_rate(JobInput("a", 10, 100.0, None), now=110.0) is None


def test_lowest_rate_gets_the_top_level_on_a_shared_link() -> None:
    jobs = [JobInput("a", 18, 100.0, 0.5), JobInput("b", 6, 100.0, 1.0)]  # R: a 0.9, b 0.6
    d = decide(jobs, {FA: "a", FB: "b"}, {FA: ("s1>h3",), FB: ("s1>h3",)}, make_policy("leveller"), 2, 110.0)
    assert d.order == ["b", "a"]
    assert d.levels == {FB: 1, FA: 0}
    assert d.rates == {"a": pytest.approx(0.9), "b": pytest.approx(0.6)}


def test_flows_that_do_not_contend_both_get_the_top_level() -> None:
    jobs = [JobInput("a", 18, 100.0, 0.5), JobInput("b", 6, 100.0, 1.0)]
    d = decide(jobs, {FA: "a", FB: "b"}, {FA: ("h1>s1",), FB: ("h2>s2",)}, make_policy("leveller"), 2, 110.0)
    assert d.levels == {FA: 1, FB: 1}


def test_profiling_job_first_and_waiting_job_counts_as_zero() -> None:
    jobs = [JobInput("old", 1, 100.0, 1.0),           # R = 0.1
            JobInput("new", 50, 105.0, None, profiling=True),
            JobInput("next", 5, 105.0, None)]         # waits for profiling: R taken as 0
    d = decide(jobs, {FA: "old", FB: "new", FC: "next"}, {f: ("L",) for f in (FA, FB, FC)},
               make_policy("leveller"), 3, 110.0)
    assert d.order == ["new", "next", "old"]
    assert d.levels == {FB: 2, FC: 1, FA: 0}


def test_unknown_paths_contend_only_with_each_other() -> None:
    jobs = [JobInput("a", 18, 100.0, 0.5), JobInput("b", 6, 100.0, 1.0), JobInput("c", 1, 100.0, 1.0)]
    d = decide(jobs, {FA: "a", FB: "b", FC: "c"}, {FA: None, FB: None, FC: ("x>y",)},
               make_policy("leveller"), 2, 110.0)
    assert d.levels == {FB: 1, FA: 0, FC: 1}


def test_fair_policy_puts_everything_on_level_zero() -> None:
    jobs = [JobInput("a", 18, 100.0, 0.5), JobInput("b", 6, 100.0, 1.0)]
    d = decide(jobs, {FA: "a", FB: "b"}, {FA: ("L",), FB: ("L",)}, make_policy("fair"), 4, 110.0)
    assert d.order is None and d.levels == {FA: 0, FB: 0}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.lists(st.sampled_from("pqrstu"), max_size=4))),
                max_size=25))
def test_job_links_are_the_links_of_each_jobs_routed_flows(rows: list[tuple[int, list[str] | None]]) -> None:
    """job_links against a loop over the flows: every job -> the set of links its flows cross, a flow of
    unknown path crossing the one pseudo-link they all share (so such jobs are never apart); a job whose
    flows cross none is left out."""
    from leveller.controller.flowtable import UNKNOWN_PATH, FlowTable

    flows = {flow_key("10.0.0.1", "10.0.0.2", 1000 + i, 2000): f"j{job}" for i, (job, _) in enumerate(rows)}
    links = {k: (None if p is None else tuple(dict.fromkeys(p))) for k, (_, p) in zip(flows, rows)}
    table = FlowTable()
    table.update_host("h", flows.items())
    table.set_links(list(links.items()))
    ids = table.live()
    snapshot = table.snapshot(ids[table.routed[ids]])
    expected: dict[str, set[str]] = {}
    for key, job in flows.items():
        for link in links[key] or (UNKNOWN_PATH,):  # no path, or an empty one: the pseudo-link
            expected.setdefault(job, set()).add(link)
    got = {job: {snapshot.link_names[i] for i in ids_} for job, ids_ in job_links(snapshot).items()}
    assert got == expected
