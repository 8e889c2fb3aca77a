"""Report building: flows attributed to jobs by cgroup or port; progress merged across logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.agent.rate_tracker import JobProgress, RateTracker
from leveller.agent.reports import (
    CgroupRule,
    Classifier,
    FlowSample,
    build_report,
    merge_progress,
    parse_cgroup_rule,
    parse_port_rule,
)
from leveller.errors import UserError
from leveller.jobs.logline import format_line
from leveller.model.flow import flow_key

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)   # to job a's port
B = flow_key("10.0.0.1", "10.0.0.3", 40001, 48001)   # to job b's port
C = flow_key("10.0.0.1", "10.0.0.9", 40002, 9999)    # unrelated


def test_port_and_cgroup_rules() -> None:
    cls = Classifier(cgroups=(CgroupRule("viacg", 77),),
                     ports=(parse_port_rule("a=47000-47001"), parse_port_rule("b=48001")))
    assert cls.job_of(A, FlowSample(1)) == "a"
    assert cls.job_of(B, FlowSample(1)) == "b"
    assert cls.job_of(C, FlowSample(1)) is None
    assert cls.job_of(C, FlowSample(1, cgroup_id=77)) == "viacg"
    assert cls.job_of(A, FlowSample(1, cgroup_id=77)) == "viacg"  # cgroup wins


@pytest.mark.parametrize("text", ["a=", "a=5-1", "a=0-10", "a=1-70000", "bad name=1"])
def test_bad_port_rules(text: str) -> None:
    with pytest.raises(UserError):
        parse_port_rule(text)


def test_cgroup_rule_uses_directory_inode(tmp_path: Path) -> None:
    assert parse_cgroup_rule(f"j={tmp_path}").cgroup_id == tmp_path.stat().st_ino
    with pytest.raises(UserError, match="cannot stat"):
        parse_cgroup_rule(f"j={tmp_path / 'missing'}")


def test_build_report_keeps_only_scored_jobs_and_their_flows() -> None:
    tr = RateTracker()
    tr.feed_all([format_line("a", 0, 100.0), format_line("a", 4, 104.0)], now=105.0)
    progress = dict(tr.jobs)
    progress["nostart"] = JobProgress("nostart", iterations=3)  # start unknown: not reported
    cls = Classifier(ports=(parse_port_rule("a=47000"), parse_port_rule("b=48001")))
    report = build_report("h1", progress, {A: FlowSample(500), B: FlowSample(600), C: FlowSample(7)}, cls,
                          ideal_times={"a": 0.5}, now=105.0)
    assert [(j.job, j.iterations, j.start_time, j.ideal_time) for j in report.jobs] == [("a", 4, 100.0, 0.5)]
    assert report.jobs[0].recent == ((4, 104.0),)
    assert [(f.key, f.job, f.bytes) for f in report.flows] == [(A, "a", 500)]  # b has no progress here


def test_merge_progress_across_logs() -> None:
    t1, t2 = RateTracker(), RateTracker()
    t1.feed_all([format_line("a", 0, 100.0), format_line("a", 1, 101.0)], now=0)
    t2.feed_all([format_line("a", 0, 99.5), format_line("a", 1, 101.1), format_line("a", 2, 102.0)], now=0)
    m = merge_progress([t1.jobs, t2.jobs])["a"]
    assert (m.iterations, m.start_time, m.last_time) == (2, 99.5, 102.0)
    assert list(m.recent) == [(1, 101.0), (2, 102.0)]
