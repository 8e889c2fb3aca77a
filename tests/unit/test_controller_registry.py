"""Controller registry: merging agents' reports, profiling one job at a time, refusing bad reports."""

from __future__ import annotations

import sys

import pytest

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
