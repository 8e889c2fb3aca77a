"""Controller registry: merging agents' reports, profiling one job at a time (side by side where their
links do not meet), refusing bad reports."""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.codec import SchemaError
from leveller.controller.registry import Registry
from leveller.model.flow import flow_key
from leveller.rpc.schema import FlowReport, JobReport, Report

F = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)


def rep(host: str, *jobs: JobReport, flows: tuple[FlowReport, ...] = ()) -> Report:
    return Report(host, jobs, flows)


def test_job_merged_across_hosts() -> None:
    reg = Registry(stale_after_s=5)
    reg.accept(rep("h1", JobReport("a", 10, 100.0, 0.5)), now=110.0)
    reg.accept(rep("h3", JobReport("a", 11, 99.0, 0.5)), now=110.0)
    [a] = reg.job_inputs(110.0)
    assert (a.iterations, a.start_time, a.ideal_time, a.profiling) == (11, 99.0, 0.5, False)


def test_stale_agents_are_ignored() -> None:
    reg = Registry(stale_after_s=5)
    reg.accept(rep("h1", JobReport("a", 1, 100.0, 0.5), flows=(FlowReport(F, "a", 10),)), now=100.0)
    assert reg.flows(104.0) == {F: ("a", "h1", 10)}
    assert reg.job_inputs(106.0) == [] and reg.flows(106.0) == {}


def test_refused_report_changes_nothing() -> None:
    reg = Registry(stale_after_s=5)
    with pytest.raises(SchemaError) as info:
        reg.accept(rep("h1", JobReport("a", 1, 100.0), JobReport("b", 1, 10_000.0)), now=100.0)
    assert info.value.field == "jobs[1].start_time"
    assert reg.agents == {} and reg.jobs == {}


def test_profiles_one_job_at_a_time_earliest_first() -> None:
    reg = Registry(stale_after_s=100, profile_samples=3)
    reg.accept(rep("h1", JobReport("a", 0, 100.0)), now=100.0)
    reg.accept(rep("h2", JobReport("b", 0, 100.5)), now=100.5)
    reg.update_profiling(101.0)
    assert [(j.name, j.profiling) for j in reg.job_inputs(101.0)] == [("a", True), ("b", False)]
    # a's iterations end every 0.5 s after the window opened at 101.0 (first one is partial)
    recent = ((1, 101.2), (2, 101.7), (3, 102.2), (4, 102.7))
    reg.accept(rep("h1", JobReport("a", 4, 100.0, None, recent)), now=102.8)
    reg.update_profiling(102.8)
    a, b = reg.job_inputs(102.8)
    assert a.ideal_time == pytest.approx(0.5) and not a.profiling
    assert b.profiling  # b's turn now


def test_reported_ideal_time_skips_profiling() -> None:
    reg = Registry(stale_after_s=100)
    reg.accept(rep("h1", JobReport("a", 0, 100.0, 0.75)), now=100.0)
    reg.update_profiling(100.0)
    [a] = reg.job_inputs(100.0)
    assert a.ideal_time == 0.75 and not a.profiling


def test_reprofiling_reopens_a_window_later() -> None:
    reg = Registry(stale_after_s=1000, reprofile_interval_s=10.0, profile_samples=1)
    reg.accept(rep("h1", JobReport("a", 0, 100.0)), now=100.0)
    reg.update_profiling(100.0)
    reg.accept(rep("h1", JobReport("a", 1, 100.0, None, ((1, 100.5),))), now=100.6)
    state = reg.jobs["a"]
    assert state.profiler.ideal == pytest.approx(0.5) and not state.profiler.profiling
    assert state.next_reprofile is not None and 105.6 <= state.next_reprofile < 115.6
    reg.update_profiling(state.next_reprofile)
    assert state.profiler.profiling and state.profiler.ideal == pytest.approx(0.5)  # old estimate kept


def test_recent_iteration_end_far_in_the_future_is_refused() -> None:
    reg = Registry(stale_after_s=5)
    with pytest.raises(SchemaError) as info:
        reg.accept(rep("h1", JobReport("a", 2, 100.0, None, ((1, 101.0), (2, 1e12)))), now=110.0)
    assert info.value.field == "jobs[0].recent[1][1]"
    assert reg.agents == {} and reg.jobs == {}


def test_what_the_live_agents_say_follows_every_report_and_expiry_at_one_now() -> None:
    """A step reads the live agents' view several times at one ``now``; it is computed once, but a report
    or an expiry in between must show (the view is cached by now and by the reports' version)."""
    reg = Registry(stale_after_s=5)
    reg.accept(rep("h2", JobReport("a", 10, 100.0, None, weight=2.0)), now=110.0)
    assert reg.job_inputs(110.0)[0].iterations == 10 and reg.job_inputs(110.0)[0].weight == 2.0
    reg.accept(rep("h1", JobReport("a", 12, 101.0, 0.5, weight=3.0)), now=110.0)  # h1 sorts first: its weight
    [a] = reg.job_inputs(110.0)
    assert (a.iterations, a.start_time, a.ideal_time, a.weight) == (12, 100.0, 0.5, 3.0)
    assert [s.report.host for s in reg.live(110.0)] == ["h1", "h2"]
    reg.accept(rep("h1", JobReport("b", 1, 105.0, 0.5)), now=112.0)  # h1 moves to job b
    assert reg.expire(115.5) == ["h2"]  # h2 last heard at 110
    assert [j.name for j in reg.job_inputs(115.5)] == ["b"] and [s.report.host for s in reg.live(115.5)] == ["h1"]


def test_a_replaced_report_is_freed_by_its_replacement_not_kept_by_the_cached_view() -> None:
    # a view held every live agent's report: a step freed 1,000 reports of 100 flows at once (20-25 ms
    # with the report thread held) when it replaced the view
    reg = Registry(stale_after_s=5)
    old = rep("h1", JobReport("a", 1, 100.0, 0.5), flows=(FlowReport(F, "a", 10),))
    reg.accept(old, now=100.0)
    assert [a.report for a in reg.live(100.0)] == [old]  # the view at 100.0 is cached
    new = rep("h1", JobReport("a", 2, 100.0, 0.5), flows=(FlowReport(F, "a", 20),))
    reg.accept(new, now=100.0)
    assert sys.getrefcount(old) == 2  # this test's name and getrefcount's argument: nothing else
    assert [a.report for a in reg.live(100.0)] == [new] and reg.view(100.0).hosts == ("h1",)


def _three_waiting(links: dict[str, frozenset[int]] | None) -> list[tuple[str, bool]]:
    reg = Registry(stale_after_s=100, profile_samples=3)
    for i, name in enumerate("abc"):
        reg.accept(rep(f"h{i}", JobReport(name, 0, 100.0 + i)), now=100.0 + i)
    reg.update_profiling(103.0, None if links is None else (lambda: links))
    return [(j.name, j.profiling) for j in reg.job_inputs(103.0)]


def test_jobs_on_links_apart_are_profiled_side_by_side() -> None:
    apart = {"a": frozenset({0, 1}), "b": frozenset({2}), "c": frozenset({3, 4})}
    assert _three_waiting(apart) == [("a", True), ("b", True), ("c", True)]


def test_a_job_sharing_a_link_with_one_being_profiled_waits_its_turn() -> None:
    # b shares link 1 with a (the earliest, profiled first); c shares nothing with a but link 5 with b,
    # which is not being profiled: c goes beside a
    links = {"a": frozenset({0, 1}), "b": frozenset({1, 5}), "c": frozenset({5, 6})}
    assert _three_waiting(links) == [("a", True), ("b", False), ("c", True)]
    # a chain: c meets the second job opened beside a, so only b opens
    chain = {"a": frozenset({0}), "b": frozenset({1}), "c": frozenset({1, 2})}
    assert _three_waiting(chain) == [("a", True), ("b", True), ("c", False)]


def test_unknown_links_mean_one_window_at_a_time() -> None:
    assert _three_waiting(None) == [("a", True), ("b", False), ("c", False)]  # no path information
    # b's flows are not routed yet: it waits; c is apart from a
    assert _three_waiting({"a": frozenset({0}), "c": frozenset({3})}) == [("a", True), ("b", False), ("c", True)]
    # the job being profiled has no known links: nobody beside it
    assert _three_waiting({"b": frozenset({1}), "c": frozenset({3})}) == [("a", True), ("b", False), ("c", False)]


def test_the_links_are_asked_for_only_when_a_job_waits_beside_one_being_profiled() -> None:
    reg = Registry(stale_after_s=100, profile_samples=3)
    reg.accept(rep("h1", JobReport("a", 0, 100.0)), now=100.0)
    asked: list[int] = []

    def links() -> dict[str, frozenset[int]]:
        asked.append(1)
        return {"a": frozenset({0})}

    reg.update_profiling(100.5, links)
    assert asked == [] and reg.jobs["a"].profiler.profiling  # a alone: nothing to compare


@settings(max_examples=200, deadline=None)
@given(st.lists(st.frozensets(st.integers(0, 6), max_size=3), min_size=1, max_size=7), st.integers(0, 2 ** 32 - 1))
def test_side_by_side_windows_never_share_a_link(sets: list[frozenset[int]], seed: int) -> None:
    """Whatever the jobs' links and the order their windows end in, the jobs being profiled at once (when
    more than one) cross pairwise disjoint, known links, and some job is profiled while one waits."""
    rnd = random.Random(seed)
    names = [f"j{i}" for i in range(len(sets))]
    links = {n: s for n, s in zip(names, sets) if s}
    reg = Registry(stale_after_s=1e6, profile_samples=1)
    now = 100.0
    for i, name in enumerate(names):
        reg.accept(rep(f"h{i}", JobReport(name, 0, now)), now=now)
    done = dict.fromkeys(names, 0)
    for _ in range(3 * len(names)):
        now += 1.0
        reg.update_profiling(now, lambda: links)
        on = [n for n in names if reg.jobs[n].profiler.profiling]
        waiting = [n for n in names if reg.jobs[n].profiler.ideal is None and n not in on]
        assert on or not waiting
        if len(on) > 1:
            assert all(links.get(n) for n in on), on
            for x in on:
                for y in on:
                    assert x == y or links[x].isdisjoint(links[y]), (x, y, links)
        if on:  # one of them finishes its window: two iteration ends after it opened
            name = rnd.choice(on)
            done[name] += 2
            i = names.index(name)
            reg.accept(rep(f"h{i}", JobReport(name, done[name], 100.0, None,
                                              ((done[name] - 1, now + 0.2), (done[name], now + 0.7)))), now=now + 0.8)
    assert all(reg.jobs[n].profiler.ideal is not None for n in names)
