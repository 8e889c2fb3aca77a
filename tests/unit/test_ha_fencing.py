"""Epoch fencing on the agent (leveller.agent.fencing): any interleaving of several leaders' decisions,
by report replies and by pushes, leaves the agent on the newest epoch, and once it applied an epoch it
never applies an older one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.agent.fencing import EpochFence
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.codec import encode
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, LevelsReply, Report, encode_reply, reply_from_wire, reply_to_wire

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
DSCP = (8, 16, 24, 32)  # level i -> DSCP; leader k decides level k % 4, so the mark names the leader


class History:
    """An enforcer that keeps every apply (the DSCP written for flow A, or None)."""

    def __init__(self) -> None:
        self.applied: list[int | None] = []

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self.applied.append(marks.get(A))

    def clear(self) -> None:
        self.applied.append(None)


class Scripted:
    """Answers each report with the next scripted reply."""

    def __init__(self) -> None:
        self.next: LevelsReply | None = None

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        assert self.next is not None
        return self.next


class OneFlow:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {A: FlowSample(1000)}


def reply(leader: int, decision: int) -> LevelsReply:
    return LevelsReply(decision, 3.0, DSCP, (FlowLevel(A, "a", leader % 4),), 0.0, leader_epoch=leader)


def make_agent() -> tuple[Agent, Scripted, History, list[float]]:
    now = [100.0]
    client, enforcer = Scripted(), History()
    agent = Agent("h1", [], client, enforcer, flows=OneFlow(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)),
                  clock=lambda: now[0], monotonic=lambda: now[0])
    return agent, client, enforcer, now


# a message: (leader epoch 1-4, decision counter 1-5, delivered by push or by a report reply)
messages = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 5), st.booleans()), min_size=1, max_size=30)


@settings(max_examples=300)
@given(messages)
def test_any_interleaving_leaves_the_agent_on_the_newest_epoch(script: list[tuple[int, int, bool]]) -> None:
    agent, client, enforcer, now = make_agent()
    for leader, decision, pushed in script:
        now[0] += 0.01
        if pushed:
            agent.apply_pushed(reply(leader, decision))
        else:
            client.next = reply(leader, decision)
            assert agent.step().ok
    newest = max(leader for leader, _, _ in script)
    assert agent.fence.newest == newest
    assert agent.leader_epoch == newest  # its levels are in hand
    assert agent.marks == {A: DSCP[newest % 4]}
    # the epochs applied, in order, never go back (each apply names its leader by its DSCP)
    leaders = [{1: 1, 2: 2, 3: 3, 0: 4}[DSCP.index(d)] for d in enforcer.applied if d is not None]
    assert leaders == sorted(leaders)
    applied = [e for _, e in agent.fence.applied]
    assert applied == sorted(applied) and applied[-1] == newest


@settings(max_examples=200)
@given(messages)
def test_two_leaders_never_both_obeyed_after_the_newer_is_seen(script: list[tuple[int, int, bool]]) -> None:
    """Leaders 1 and 2 only: after the first reply of leader 2 reached the agent, nothing of leader 1 is
    ever written again."""
    agent, client, enforcer, now = make_agent()
    seen_new = None
    for leader, decision, pushed in script:
        leader = 1 + leader % 2
        now[0] += 0.01
        before = len(enforcer.applied)
        if pushed:
            agent.apply_pushed(reply(leader, decision))
        else:
            client.next = reply(leader, decision)
            agent.step()
        if leader == 2 and seen_new is None:
            seen_new = before
    if seen_new is not None:
        assert DSCP[1] not in enforcer.applied[seen_new:]
        assert agent.leader_epoch == 2


def test_a_deposed_leaders_reply_keeps_the_levels_in_hand_and_counts() -> None:
    agent, client, enforcer, now = make_agent()
    client.next = reply(5, 1)
    agent.step()
    client.next = reply(4, 9)  # a later decision of an older leader
    r = agent.step()
    assert r.ok and r.leader_epoch == 5 and agent.marks == {A: DSCP[5 % 4]}
    assert agent.fence.refused == 1


def test_a_lone_controller_is_refused_once_an_elected_one_was_heard() -> None:
    fence = EpochFence()
    assert fence.admit(0) and fence.admit(0)  # no election anywhere: as before
    assert fence.admit(3)
    assert not fence.admit(0) and not fence.admit(2) and fence.admit(3) and fence.admit(7)
    with pytest.raises(ValueError, match="leader epoch"):
        fence.admit(-1)


def test_the_applied_log_keeps_changes_only() -> None:
    fence = EpochFence()
    for t, e in ((1.0, 2), (2.0, 2), (3.0, 5), (4.0, 5)):
        fence.note_applied(t, e)
    assert list(fence.applied) == [(1.0, 2), (3.0, 5)]


def test_the_leader_epoch_travels_on_the_wire_only_when_elected() -> None:
    plain = LevelsReply(3, 2.0, (0, 46), (FlowLevel(A, "a", 1),), 0.1)
    assert "leader_epoch" not in reply_to_wire(plain)  # a lone controller's replies stay as they were
    elected = LevelsReply(3, 2.0, (0, 46), (FlowLevel(A, "a", 1),), 0.1, leader_epoch=42)
    assert reply_to_wire(elected)["leader_epoch"] == 42
    assert reply_from_wire(reply_to_wire(elected)).leader_epoch == 42
    assert encode_reply(elected) == encode(reply_to_wire(elected))  # the fast encoder writes it too
    assert reply_from_wire(reply_to_wire(plain)).leader_epoch == 0
    bad = {**reply_to_wire(elected), "leader_epoch": -1}
    with pytest.raises(ValueError, match="leader_epoch"):
        reply_from_wire(bad)


def test_every_change_of_the_applied_epoch_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import re

    from leveller.agent.fencing import APPLIED_FORMAT

    fence = EpochFence()
    with caplog.at_level(logging.INFO, logger="leveller.agent.fencing"):
        for t, e in ((1.5, 2), (2.0, 2), (3.25, 5), (4.0, 5)):
            fence.note_applied(t, e)
    pattern = re.compile(APPLIED_FORMAT.replace("%d", r"(\d+)").replace("%.6f", r"([0-9.]+)"))
    found = [pattern.fullmatch(r.getMessage()) for r in caplog.records]
    assert [(float(m[2]), int(m[1])) for m in found if m] == [(1.5, 2), (3.25, 5)] and len(found) == 2


# ---- etcd restored or replaced: epochs start again lower ----------------------------------------------

def aged(leader: int, decision: int, age: float, lease: float = 3.0) -> LevelsReply:
    return LevelsReply(decision, lease, DSCP, (FlowLevel(A, "a", leader % 4),), age, leader_epoch=leader)


def test_after_an_etcd_restore_a_lower_epoch_decided_later_is_followed_at_its_first_report() -> None:
    """Leader epoch 50 heard at 100 s; etcd restored from an older snapshot, the new leader (epoch 7)
    decides at 112 s and answers the report at 112.2 s: applied at once, and from then on the fence is
    at 7 (6 refused, 8 applied)."""
    from leveller.agent.metrics import AgentMetrics

    agent, client, enforcer, now = make_agent()
    agent.metrics = AgentMetrics()
    client.next = aged(50, 1, 0.0)
    assert agent.step().leader_epoch == 50
    now[0] = 112.2
    client.next = aged(7, 1, 0.2)
    r = agent.step()
    assert r.ok and r.leader_epoch == 7 and agent.marks == {A: DSCP[7 % 4]}
    assert agent.fence.resets == 1 and agent.fence.newest == 7
    assert agent.metrics.registry.get_sample_value("leveller_agent_fence_resets_total") == 1
    client.next = aged(6, 9, 0.0)
    assert agent.step().leader_epoch == 7 and agent.fence.refused == 1
    client.next = aged(8, 1, 0.0)
    assert agent.step().leader_epoch == 8


def test_a_restore_soon_after_the_newest_epoch_is_followed_half_a_lease_after_it() -> None:
    agent, client, enforcer, now = make_agent()
    client.next = aged(50, 1, 0.0)
    agent.step()
    for t, applied in ((100.5, False), (101.4, False), (101.6, True)):  # lease 3 s: after 1.5 s
        now[0] = t
        client.next = aged(7, 1, 0.0)
        assert (agent.step().leader_epoch == 7) is applied, t


def test_no_reset_by_a_push_by_a_lone_controller_or_a_decision_made_early() -> None:
    agent, client, enforcer, now = make_agent()
    client.next = aged(50, 1, 0.0)
    agent.step()
    now[0] = 200.0
    agent.apply_pushed(aged(7, 1, 0.0))  # a push's arrival says nothing about when it was decided
    client.next = aged(0, 1, 0.0)  # a lone controller (no --etcd)
    agent.step()
    client.next = aged(7, 1, 100.0)  # decided at 100 s, when 50 was first heard: a deposed leader's
    agent.step()
    assert agent.fence.newest == 50 and agent.fence.resets == 0 and DSCP[7 % 4] not in enforcer.applied


# one etcd history: leader k (epochs in election order) leads over [k, k + 1) s and decides only then;
# each message: (leader 0-4, when in its term 0-1, delivered how long after (0-3 s), by push or report)
history = st.lists(st.tuples(st.integers(0, 4), st.floats(0, 0.999), st.floats(0, 3), st.booleans()),
                   min_size=1, max_size=25)


@settings(max_examples=300)
@given(history)
def test_within_one_etcd_history_no_late_reply_resets_the_fence(script: list[tuple[int, float, float, bool]]) -> None:
    """Replies arrive in any order and late (a report's reply left when the request did: its decision age
    is honest; a push may arrive any time later): a lower epoch is never applied after a higher one."""
    agent, client, enforcer, now = make_agent()
    epochs = (3, 9, 10, 40, 41)
    events = sorted((k + 0.0 + at + delay, k, k + at, pushed) for k, at, delay, pushed in script)
    for arrives, k, decided, pushed in events:
        now[0] = 100.0 + arrives
        if pushed:
            agent.apply_pushed(aged(epochs[k], 1, arrives - decided))
        else:
            client.next = aged(epochs[k], 1, arrives - decided)
            agent.step()
    applied = [e for _, e in agent.fence.applied]
    assert applied == sorted(applied) and agent.fence.resets == 0
