"""Agent step logic with a fake clock: apply levels, keep them within the lease, clear after it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.core.paths import FlowKey, flow_key
from leveller.jobs.logline import format_line
from leveller.rpc.schema import FlowLevel, LevelsReply, Report
from leveller.rpc.transport import RpcFailure
from tests.fakes import RecordingEnforcer

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)


class FakeClient:
    """Answers level 1 for every reported flow while ``up``; fails like an unreachable server otherwise."""

    def __init__(self) -> None:
        self.up = True
        self.reports: list[Report] = []

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        if not self.up:
            raise RpcFailure(None, "controller down")
        self.reports.append(report)
        return LevelsReply(len(self.reports), 3.0, (0, 46), tuple(FlowLevel(f.key, f.job, 1) for f in report.flows))


class StaticFlows:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {A: FlowSample(1000)}


def make(tmp_path: Path) -> tuple[Agent, FakeClient, RecordingEnforcer, list[float], Path]:
    log = tmp_path / "a.log"
    log.write_text(format_line("a", 0, 100.0) + "\n")
    now = [101.0]
    client, enforcer = FakeClient(), RecordingEnforcer()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, enforcer, flows=StaticFlows(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)), clock=lambda: now[0])
    return agent, client, enforcer, now, log


def test_levels_are_applied_as_dscp(tmp_path: Path) -> None:
    agent, client, enforcer, now, log = make(tmp_path)
    with open(log, "a") as f:
        f.write(format_line("a", 1, 100.5) + "\n")
    result = agent.step()
    assert result.ok and enforcer.marks == {A: 46}
    assert client.reports[0].jobs[0].iterations == 1
    assert [f.key for f in client.reports[0].flows] == [A]


def test_lease_fallback_clears_after_lease_not_before(tmp_path: Path) -> None:
    agent, client, enforcer, now, _ = make(tmp_path)
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
