"""The controller's decision path at scale: flows interned once, reports applied as differences,
paths asked once per flow in one batch, stale agents' flows dropped, compaction safe for replies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

import leveller.controller.flowtable as flowtable
import leveller.controller.metrics as metrics
from leveller.controller.flowtable import UNKNOWN_PATH, FlowTable
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, FlowReport, JobReport, Report

NOW = 1000.0


def key(i: int, dst: str = "10.0.1.1") -> FlowKey:
    return flow_key("10.0.0.1", dst, 1000 + i, 4791, "udp")


class RecordingPaths:
    """A path provider that records what it was asked (every flow on one link per destination)."""

    def __init__(self) -> None:
        self.calls: list[list[FlowKey]] = []
        self.fail = False

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, tuple[str, ...] | None]:
        self.calls.append(list(flows))
        if self.fail:
            raise ConnectionError("path provider down")
        return {f: ((f"to-{f.dst}",) if f.dst != "10.9.9.9" else None) for f in flows}


def report(host: str, flows: dict[FlowKey, str], iterations: dict[str, int]) -> Report:
    jobs = tuple(JobReport(j, n, NOW - 100.0, 1.0) for j, n in iterations.items())
    return Report(host, jobs, tuple(FlowReport(k, j, 1) for k, j in flows.items()))


def controller(paths: RecordingPaths, stale_after_s: float = 30.0) -> Controller:
    return Controller(paths, make_policy("leveller"), default_level_map(2), tau_s=1.0, stale_after_s=stale_after_s)


def test_a_report_changes_only_its_difference() -> None:
    t = FlowTable(capacity=2)
    t.update_host("h1", [(key(0), "a"), (key(1), "a")])
    t.update_host("h2", [(key(1), "a"), (key(2), "b")])  # key(1) reported by both hosts
    assert t.live().tolist() == [0, 1, 2] and t.refs[:3].tolist() == [1, 2, 1]
    held = t.update_host("h1", [(key(1), "a"), (key(3), "b")])
    assert [t.keys[i] for i in t.live().tolist()] == [key(1), key(2), key(3)]
    assert held.keys == [key(1), key(3)] and held.jobs == ["a", "b"] and held.ids.tolist() == [1, 3]
    assert t.jobs.names[t.job[3]] == "b"
    t.drop_host("h2")
    assert [t.keys[i] for i in t.live().tolist()] == [key(1), key(3)]
    assert t.update_host("h1", [(key(3), "b"), (key(1), "a")]) is held  # same flows, other order: no work


def test_paths_are_asked_once_per_new_flow_in_one_batch() -> None:
    paths = RecordingPaths()
    ctl = controller(paths)
    ctl.report(report("h1", {key(0): "a", key(1): "b"}, {"a": 50, "b": 90}), NOW)
    ctl.report(report("h2", {key(2, "10.9.9.9"): "b"}, {"b": 90}), NOW)
    d1 = ctl.step(NOW)
    assert len(paths.calls) == 1 and sorted(paths.calls[0]) == sorted([key(0), key(1), key(2, "10.9.9.9")])
    assert dict(d1.levels) == {key(0): 1, key(1): 0, key(2, "10.9.9.9"): 1}  # unknown path: own pseudo-link
    assert d1.links[key(2, "10.9.9.9")] == (UNKNOWN_PATH,) and d1.links[key(0)] == ("to-10.0.1.1",)
    ctl.step(NOW + 1)
    assert len(paths.calls) == 1  # nothing new: no question
    ctl.report(report("h1", {key(0): "a", key(1): "b", key(5): "b"}, {"a": 50, "b": 90}), NOW + 1)
    ctl.step(NOW + 2)
    assert paths.calls[1:] == [[key(5)]]


def test_a_failed_path_query_is_retried_and_keeps_the_old_levels() -> None:
    paths = RecordingPaths()
    ctl = controller(paths)
    ctl.report(report("h1", {key(0): "a"}, {"a": 50}), NOW)
    first = ctl.step(NOW)
    ctl.report(report("h1", {key(0): "a", key(1): "b"}, {"a": 50, "b": 90}), NOW)
    paths.fail = True
    with pytest.raises(ConnectionError):
        ctl.step(NOW + 1)
    assert ctl.decision is first and "path provider down" in (ctl.last_error or "")
    paths.fail = False
    d = ctl.step(NOW + 2)
    assert paths.calls[-1] == [key(1)] and dict(d.levels) == {key(0): 1, key(1): 0}


def test_flows_of_a_stale_agent_leave_the_decision_and_come_back_with_it() -> None:
    ctl = controller(RecordingPaths(), stale_after_s=5.0)
    ctl.report(report("h1", {key(0): "a"}, {"a": 50}), NOW)
    ctl.report(report("h2", {key(1): "b"}, {"b": 90}), NOW + 4)
    assert set(ctl.step(NOW + 4).levels) == {key(0), key(1)}
    assert set(ctl.step(NOW + 6).levels) == {key(1)}  # h1 silent for 6 s > 5 s
    ctl.report(report("h1", {key(0): "a"}, {"a": 50}), NOW + 7)
    assert set(ctl.step(NOW + 7).levels) == {key(0), key(1)}


def test_replies_stay_right_across_a_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flowtable, "COMPACT_SLACK", 0)
    ctl = controller(RecordingPaths())
    ctl.report(report("h1", {key(i): "a" for i in range(6)}, {"a": 50}), NOW)
    ctl.report(report("h2", {key(9): "b"}, {"b": 90}), NOW)
    decision = ctl.step(NOW)
    # h1's flows leave but h1 still reports one; the table compacts: every id changes
    ctl.report(report("h1", {key(5): "a"}, {"a": 50}), NOW + 0.5)
    assert ctl.flows.compact() and ctl.flows.ids[key(5)] == 0
    reply = ctl.report(report("h1", {key(5): "a"}, {"a": 50}), NOW + 0.6)
    assert ctl.decision is decision  # the decision made before the compaction answers
    assert reply.flows == (FlowLevel(key(5), "a", 1),)
    assert ctl.report(report("h2", {key(9): "b"}, {"b": 90}), NOW + 0.6).flows == (FlowLevel(key(9), "b", 0),)
    assert dict(ctl.step(NOW + 1).levels) == {key(5): 1, key(9): 0}


def test_a_reply_leaves_out_flows_the_decision_has_not_seen() -> None:
    ctl = controller(RecordingPaths())
    ctl.report(report("h1", {key(0): "a"}, {"a": 50}), NOW)
    ctl.step(NOW)
    reply = ctl.report(report("h1", {key(0): "a", key(1): "a"}, {"a": 50}), NOW + 0.5)
    assert reply.flows == (FlowLevel(key(0), "a", 1),)


def test_flow_metrics_count_per_job_and_level_and_cap_per_flow_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_FLOW_SERIES", 2)
    ctl = controller(RecordingPaths())
    ctl.report(report("h1", {key(0): "a", key(1): "b", key(2): "b"}, {"a": 50, "b": 90}), NOW)
    ctl.step(NOW)
    text = generate_latest(ctl.metrics.registry).decode()
    assert 'leveller_flows{job="a",level="1"} 1.0' in text and 'leveller_flows{job="b",level="0"} 2.0' in text
    assert "leveller_flow_level{" not in text  # 3 flows > 2: no series per flow


def test_a_decision_over_no_flows_answers_reports_with_no_levels() -> None:
    ctl = controller(RecordingPaths())
    ctl.report(report("h1", {}, {"a": 50}), NOW)
    ctl.step(NOW)
    assert ctl.report(report("h1", {key(0): "a"}, {"a": 50}), NOW + 0.5).flows == ()


def test_a_hosts_reply_is_reused_only_while_its_levels_stay_the_same() -> None:
    ctl = controller(RecordingPaths())
    flows = {key(0): "a", key(1): "b"}  # one link: a and b contend
    ctl.report(report("h1", flows, {"a": 50, "b": 90}), NOW)
    ctl.step(NOW)
    first = ctl.report(report("h1", flows, {"a": 50, "b": 90}), NOW + 0.5).flows
    assert first == (FlowLevel(key(0), "a", 1), FlowLevel(key(1), "b", 0))  # a: lower R, higher level
    ctl.step(NOW + 1)  # a new decision with the same levels: the same entries
    assert ctl.report(report("h1", flows, {"a": 50, "b": 90}), NOW + 1.5).flows is first
    ctl.report(report("h1", flows, {"a": 150, "b": 90}), NOW + 2)
    ctl.step(NOW + 2)  # a overtakes b: the levels swap and the reply must say so
    assert ctl.report(report("h1", flows, {"a": 150, "b": 90}), NOW + 2.5).flows == \
        (FlowLevel(key(0), "a", 0), FlowLevel(key(1), "b", 1))
    ctl.report(report("h1", {key(0): "a", key(2): "b"}, {"a": 150, "b": 90}), NOW + 3)  # key(2): not decided yet
    assert ctl.report(report("h1", {key(0): "a", key(2): "b"}, {"a": 150, "b": 90}), NOW + 3.1).flows == \
        (FlowLevel(key(0), "a", 0),)


def test_kept_flow_classes_follow_every_change_of_the_flows() -> None:
    """The controller keeps a decision's flow classes while the flow table's version stays: a report with
    new counts only keeps them, a new flow, a job change or a host gone must not decide with the old ones."""
    ctl = controller(RecordingPaths(), stale_after_s=5.0)
    a, b = key(0, "10.0.1.1"), key(1, "10.0.1.1")  # one link: a (R 0.1) and b (R 0.9) contend
    ctl.report(report("h1", {a: "slow"}, {"slow": 10}), NOW)
    ctl.report(report("h2", {b: "fast"}, {"fast": 90}), NOW)
    assert dict(ctl.step(NOW).levels) == {a: 1, b: 0}
    classes = ctl._classes
    ctl.report(report("h1", {a: "slow"}, {"slow": 10}), NOW)  # same flows, new counts: same classes
    ctl.step(NOW)
    assert ctl._classes is classes
    c = key(2, "10.0.1.1")  # a new flow of the fast job on the same link: its class
    ctl.report(report("h2", {b: "fast", c: "fast"}, {"fast": 90}), NOW)
    assert dict(ctl.step(NOW).levels) == {a: 1, b: 0, c: 0}
    ctl.report(report("h2", {b: "fast", c: "slow"}, {"fast": 90, "slow": 10}), NOW)  # c changes job
    assert dict(ctl.step(NOW).levels) == {a: 1, b: 0, c: 1}
    ctl.report(report("h1", {a: "slow"}, {"slow": 10}), NOW + 4)
    assert dict(ctl.step(NOW + 6).levels) == {a: 1}  # h2 gone: b and c with it, a alone on the link


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["h1", "h2"]),
                          st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b"])), max_size=6,
                                   unique_by=lambda kj: kj[0]),
                          st.booleans()), max_size=12))
def test_a_report_is_applied_as_the_flows_it_names_whatever_objects_carry_them(
        reports: list[tuple[str, list[tuple[int, str]], bool]]) -> None:
    """The table against a plain model (host -> {key: job}): flows live while a host reports them, a flow
    new to a host takes the job named, the version and the held flows change exactly when a host's do. Keys come
    as the very objects of the last report (the decoder's fast path), as equal new ones, or reordered."""
    t = FlowTable(capacity=2)
    objects = {i: key(i) for i in range(6)}  # the objects a decoder keeps handing out
    model: dict[str, dict[FlowKey, str]] = {}
    for host, flows, fresh in reports:
        pairs = [(key(i) if fresh else objects[i], job) for i, job in flows]
        rows = [FlowReport(k, j, 7) for k, j in pairs]  # as Controller.report passes them
        before, version = t.host(host), t.version
        held = t.update_host(host, rows)
        was = model.get(host, {})
        changed = host not in model or was != dict(pairs)
        model[host] = dict(pairs)
        assert (t.version != version) == changed
        assert (held is before) == (before is not None and not changed)
        assert held.flows == dict(pairs) == dict(zip(held.keys, held.jobs))  # in the held order if only reordered
        assert held.ids.tolist() == [t.ids[k] for k in held.keys]
        for k, job in pairs:
            if was.get(k) != job:  # new to this host or moved to another job: the job it names now
                assert t.jobs.names[t.job[t.ids[k]]] == job
        live = {k for fl in model.values() for k in fl}
        assert {t.keys[i] for i in t.live().tolist()} == live
        for k in live:
            assert t.refs[t.ids[k]] == sum(k in fl for fl in model.values())
