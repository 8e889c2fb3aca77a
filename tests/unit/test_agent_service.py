"""Agent step logic with a fake clock: apply levels, keep them within the lease of the decision, clear
after it (controller unreachable, or answering with a decision older than its lease)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, parse_port_rule
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from leveller.rpc.schema import LevelsReply, Report
from tests.helpers.agents import A, FakeClient, StaticFlows, fake_client_agent
from tests.helpers.fakes import RecordingEnforcer


def test_levels_are_applied_as_dscp(tmp_path: Path) -> None:
    agent, client, enforcer, now, log = fake_client_agent(tmp_path)
    with open(log, "a") as f:
        f.write(format_line("a", 1, 100.5) + "\n")
    result = agent.step()
    assert result.ok and enforcer.marks == {A: 46}
    assert enforcer.valid_for == [3.0]  # the datapath is told the lease too
    assert client.reports[0].jobs[0].iterations == 1
    assert [f.key for f in client.reports[0].flows] == [A]


def test_lease_fallback_clears_after_lease_not_before(tmp_path: Path) -> None:
    agent, client, enforcer, now, _ = fake_client_agent(tmp_path)
    agent.step()  # lease until 104.0
    client.up = False
    now[0] = 103.9
    r = agent.step()
    assert not r.ok and not r.cleared and enforcer.marks == {A: 46}  # still within the lease
    now[0] = 104.0
    r = agent.step()
    assert r.cleared and enforcer.marks == {} and enforcer.clears == 1
    now[0] = 110.0
    assert not agent.step().cleared and enforcer.clears == 1  # cleared once
    client.up = True
    assert agent.step().ok and enforcer.marks == {A: 46}  # back when the controller is


def test_a_decision_older_than_the_lease_drops_the_marks_although_the_controller_answers(tmp_path: Path) -> None:
    agent, client, enforcer, now, _ = fake_client_agent(tmp_path)
    assert agent.step().ok and enforcer.marks == {A: 46}  # decision 1, fresh
    # the decision loop stalls: every answer carries the same, ageing decision
    now[0], client.age = 102.0, 1.0
    r = agent.step()
    assert r.ok and not r.stale and enforcer.marks == {A: 46}
    assert enforcer.valid_for[-1] == 2.0  # valid until 3 s after the decision, not 3 s after this answer
    now[0], client.age = 103.9, 2.9
    assert not agent.step().stale and enforcer.marks == {A: 46}
    now[0], client.age = 104.0, 3.0
    r = agent.step()
    assert r.ok and r.stale and r.cleared and enforcer.marks == {} and enforcer.clears == 1
    now[0], client.age = 110.0, 9.0
    r = agent.step()
    assert r.stale and not r.cleared and enforcer.clears == 1  # cleared once
    client.epoch, client.age = 2, 0.1  # the loop decides again
    assert not agent.step().stale and enforcer.marks == {A: 46}


def test_the_age_counts_from_when_the_report_left(tmp_path: Path) -> None:
    agent, client, enforcer, now, _ = fake_client_agent(tmp_path)

    class SlowClient(FakeClient):
        def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
            now[0] += 1.5  # the answer takes 1.5 s to come back
            return super().report(report, known_jobs)

    slow = SlowClient()
    slow.age = 1.0
    agent.client = slow
    r = agent.step()  # decided at least 1 s before the report left at 101: valid until 103 at the latest
    assert r.ok and enforcer.valid_for == [0.5]


def test_a_100_mb_log_neither_delays_the_report_nor_blows_memory(tmp_path: Path) -> None:
    """Low 12: one step with a 100 MB log behind it reads a bounded amount and reports the job."""
    import tracemalloc

    log = tmp_path / "big.log"
    block = "".join(format_line("a", i, 100.0 + i * 0.001) + "\n" for i in range(1, 10001)).encode()
    with open(log, "wb") as f:
        f.write((format_line("a", 0, 100.0) + "\n").encode())
        while f.tell() < 100 << 20:
            f.write(block)
        f.write((format_line("a", 20000, 150.0) + "\n").encode())
    client = FakeClient()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, RecordingEnforcer(), flows=StaticFlows(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)), clock=lambda: 200.0)
    tracemalloc.start()
    try:
        result = agent.step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB for one step"
    assert result.ok and [(j.job, j.iterations, j.start_time) for j in client.reports[0].jobs] == [("a", 20000, 100.0)]


def test_overlap_rule_demotes_the_job_inside_its_window_and_never_extends_the_lease(tmp_path: Path) -> None:
    from leveller.agent.overlap import OverlapWindows
    from leveller.jobs.control import format_comm_line

    agent, client, enforcer, now, log = fake_client_agent(tmp_path)
    agent.overlap = OverlapWindows()
    assert agent.step().ok and enforcer.marks == {A: 46}  # the controller's level 1 (lease until 104.0)
    now[0] = 101.5
    with open(log, "a") as f:
        f.write(format_comm_line("a", 1, 101.4, 0.5) + "\n")  # can wait until 101.9
    agent.poll_logs(now[0])
    assert enforcer.marks == {A: 0}  # the lowest level's DSCP while the communication can wait
    assert enforcer.valid_for[-1] == pytest.approx(2.5)  # what is left of the lease, not a new one
    now[0] = 101.8
    agent.poll_logs(now[0])
    assert enforcer.marks == {A: 0} and len(enforcer.valid_for) == 2  # nothing to write meanwhile
    now[0] = 101.9
    agent.poll_logs(now[0])
    assert enforcer.marks == {A: 46} and enforcer.valid_for[-1] == pytest.approx(2.1)  # restored
    # a window that opens after the lease ran out writes nothing
    now[0] = 104.5
    client.up = False
    assert agent.step().cleared and enforcer.marks == {}
    with open(log, "a") as f:
        f.write(format_comm_line("a", 1, 104.5, 0.5) + "\n")
    agent.poll_logs(now[0])
    assert enforcer.marks == {}


def test_without_the_overlap_rule_comm_lines_change_nothing(tmp_path: Path) -> None:
    from leveller.jobs.control import format_comm_line

    agent, client, enforcer, now, log = fake_client_agent(tmp_path)
    assert agent.step().ok and enforcer.marks == {A: 46}
    with open(log, "a") as f:
        f.write(format_comm_line("a", 1, 101.0, 0.5) + "\n")
    agent.poll_logs(now[0])
    assert enforcer.marks == {A: 46} and len(enforcer.valid_for) == 1
