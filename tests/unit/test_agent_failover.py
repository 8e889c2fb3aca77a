"""The agent moving to another controller (fake clock): the levels in hand are kept while the new
controller's decisions predate its knowledge of this host, taken as soon as one is made after, and
never kept past their own lease."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from leveller.agent.metrics import AgentMetrics
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, LevelsReply, Report
from leveller.rpc.transport import RpcFailure
from tests.helpers.fakes import RecordingEnforcer

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
LEASE = 3.0


class TwoControllers:
    """Like FailoverClient: ``active`` names who answered. Each controller's decision covers this host's
    flow only if it was made after the controller first heard from the host (``knows_since``)."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.active = "a:1"
        self.up = {"a:1": True, "b:1": True}
        self.decided_at = {"a:1": 100.0, "b:1": 100.0}  # when each made its current decision
        self.knows_since: dict[str, float] = {"a:1": 0.0}
        self.level = {"a:1": 1, "b:1": 1}

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        order = [self.active] + [c for c in self.up if c != self.active]
        for c in order:
            if self.up[c]:
                self.active = c
                self.knows_since.setdefault(c, self.now[0])
                covered = self.decided_at[c] > self.knows_since[c]
                flows = tuple(FlowLevel(f.key, f.job, self.level[c]) for f in report.flows) if covered else ()
                return LevelsReply(7, LEASE, (0, 46), flows, self.now[0] - self.decided_at[c])
        raise RpcFailure(None, "no controller answered")


class StaticFlows:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {A: FlowSample(1000)}


def make(tmp_path: Path) -> tuple[Agent, TwoControllers, RecordingEnforcer, list[float], AgentMetrics]:
    log = tmp_path / "a.log"
    log.write_text(format_line("a", 0, 90.0) + "\n")
    now = [101.0]
    client, enforcer, metrics = TwoControllers(now), RecordingEnforcer(), AgentMetrics()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, enforcer, flows=StaticFlows(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)), clock=lambda: now[0],
                  monotonic=lambda: now[0], metrics=metrics)
    return agent, client, enforcer, now, metrics


def _metric(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_levels_are_kept_until_the_standby_decides_with_our_flows(tmp_path: Path) -> None:
    agent, ctl, enforcer, now, metrics = make(tmp_path)
    r = agent.step()  # a's decision of 100.0: valid until 103.0
    assert r.ok and r.controller == "a:1" and enforcer.marks == {A: 46} and enforcer.valid_for == [2.0]
    assert _metric(metrics, "leveller_agent_controller", address="a:1") == 1

    ctl.up["a:1"] = False  # a dies; b has been deciding all along, but without this host
    now[0], ctl.decided_at["b:1"] = 101.5, 101.4
    r = agent.step()
    assert r.ok and r.controller == "b:1" and r.waiting
    assert enforcer.marks == {A: 46} and enforcer.clears == 0  # not replaced by b's empty decision
    assert len(enforcer.valid_for) == 1  # nor renewed: they still end at 103.0
    assert _metric(metrics, "leveller_agent_failovers_total") == 1
    assert _metric(metrics, "leveller_agent_controller", address="b:1") == 1
    assert _metric(metrics, "leveller_agent_controller", address="a:1") == 0

    now[0] = 101.6  # b's next decision (101.55) already has the report that reached it at 101.5
    ctl.decided_at["b:1"], ctl.level["b:1"] = 101.55, 0
    r = agent.step()
    assert r.ok and not r.waiting and enforcer.marks == {A: 0}  # b's levels, whatever they are
    assert enforcer.valid_for[-1] == 101.55 + LEASE - 101.6


def test_levels_kept_for_a_standby_still_end_with_their_lease(tmp_path: Path) -> None:
    agent, ctl, enforcer, now, _ = make(tmp_path)
    agent.step()  # valid until 103.0
    ctl.up["a:1"] = False
    for t in (101.5, 102.5, 102.9):  # b answers, but its decision loop is stuck before it knew us
        now[0], ctl.decided_at["b:1"] = t, 101.0
        r = agent.step()
        assert r.waiting and enforcer.marks == {A: 46}
    now[0] = 103.0
    r = agent.step()
    assert r.cleared and enforcer.marks == {} and enforcer.clears == 1  # the lease of a's decision ran out
    now[0] = 103.2  # nothing to keep any more: b's answers are taken as they are
    r = agent.step()
    assert not r.waiting and enforcer.marks == {}


def test_without_levels_in_hand_the_new_controller_is_followed_at_once(tmp_path: Path) -> None:
    agent, ctl, enforcer, now, _ = make(tmp_path)
    ctl.up["a:1"] = False
    ctl.knows_since["b:1"], ctl.decided_at["b:1"] = 100.0, 100.5  # b knows us (e.g. we reported there before)
    r = agent.step()
    assert r.controller == "b:1" and not r.waiting and enforcer.marks == {A: 46}


def test_a_push_from_the_standby_before_it_knows_us_does_not_drop_our_levels(tmp_path: Path) -> None:
    agent, ctl, enforcer, now, _ = make(tmp_path)
    agent.step()
    ctl.up["a:1"] = False
    now[0], ctl.decided_at["b:1"] = 101.5, 101.4
    assert agent.step().waiting
    now[0] = 101.52  # the watcher, moved to b, gets b's current decision (made before b knew us)
    agent.apply_pushed(LevelsReply(3, LEASE, (0, 46), (), 0.12))
    assert enforcer.marks == {A: 46}
    now[0] = 101.7  # b's next decision, pushed: it has our flow
    agent.apply_pushed(LevelsReply(4, LEASE, (0, 46), (FlowLevel(A, "a", 0),), 0.05))
    assert enforcer.marks == {A: 0}


def test_a_standby_whose_decisions_are_stale_does_not_end_levels_that_are_still_valid(tmp_path: Path) -> None:
    agent, ctl, enforcer, now, _ = make(tmp_path)
    agent.step()  # a's levels, valid until 103.0
    ctl.up["a:1"] = False
    now[0], ctl.decided_at["b:1"] = 101.5, 97.0  # b's loop has been stuck for 4.5 s (older than its lease)
    r = agent.step()
    assert r.waiting and not r.stale and enforcer.marks == {A: 46} and enforcer.clears == 0
    now[0] = 103.0  # a's lease ends: now b's stale answer is all there is
    r = agent.step()
    assert r.stale and r.cleared and enforcer.marks == {} and enforcer.clears == 1
