"""The ACKs of a job flow (the reverse 5-tuple, leaving the receiving host): reported by that host's agent
for the job and leveled by the controller like the data, whatever their few bytes."""

from __future__ import annotations

import time
from collections.abc import Sequence

from leveller.agent.rate_tracker import JobProgress
from leveller.agent.reports import Classifier, FlowSample, build_report, parse_port_rule
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import FlowKey, flow_key
from leveller.model.messages import Report

NOW = 1_700_000_000.0
CLASSIFIER = Classifier(ports=(parse_port_rule("a=47000-47001"), parse_port_rule("b=48000-48001")))
A_DATA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47001)  # a's rank 0 on h1 sends to its rank 1 on h3
B_DATA = flow_key("10.0.0.2", "10.0.0.3", 40001, 48001)
B_BACK = flow_key("10.0.0.3", "10.0.0.1", 41000, 48000)  # b's data from h3 to h1: where a's ACKs go too
PURE_ACK = 66  # bytes of one ACK as the datapath counts it (IPv4 + TCP with timestamps)


def progress() -> dict[str, JobProgress]:
    # a: 6 iterations of 1 s in 10 s (R 0.6, ranks first); b: 18 of 0.5 s (R 0.9)
    return {"a": JobProgress("a", 6, NOW - 10, NOW), "b": JobProgress("b", 18, NOW - 10, NOW)}


def report(host: str, flows: dict[FlowKey, FlowSample], jobs: Sequence[str] = ("a", "b")) -> Report:
    p = {j: v for j, v in progress().items() if j in jobs}
    return build_report(host, p, flows, CLASSIFIER, {"a": 1.0, "b": 0.5}, NOW)


class Star:
    """Every host hangs off one switch: a flow crosses its source's uplink and its destination's downlink."""

    def links(self, flows: Sequence[FlowKey]) -> dict[FlowKey, tuple[str, ...]]:
        return {f: (f"{f.src}-up", f"{f.dst}-down") for f in flows}


def test_an_ack_only_reverse_flow_is_reported_for_its_job() -> None:
    ack = A_DATA.reversed()
    r = report("h3", {ack: FlowSample(3 * PURE_ACK)})
    assert [(f.key, f.job, f.bytes) for f in r.flows] == [(ack, "a", 3 * PURE_ACK)]  # no minimum of bytes


def test_acks_are_left_out_only_where_the_host_has_no_progress_for_the_job() -> None:
    # the report's schema wants every flow's job among the report's jobs: the receiving host must follow
    # the job's log (as every host of a job does in the demo); otherwise its ACKs stay unmarked
    r = report("h3", {A_DATA.reversed(): FlowSample(PURE_ACK)}, jobs=("b",))
    assert r.flows == ()


def test_the_acks_of_the_top_job_get_its_level() -> None:
    ctl = Controller(Star(), make_policy("leveller"), default_level_map(4), tau_s=0.5)
    a_ack, b_ack = A_DATA.reversed(), B_DATA.reversed()
    reports = [report("h1", {A_DATA: FlowSample(50_000_000)}), report("h2", {B_DATA: FlowSample(50_000_000)}),
               report("h3", {a_ack: FlowSample(120_000), b_ack: FlowSample(118_000),
                             B_BACK: FlowSample(40_000_000)})]
    for r in reports:
        ctl.report(r, time.time())
    assert ctl.step(time.time()).order == ["a", "b"]
    levels = {f.key: f.level for r in reports for f in ctl.report(r, time.time()).flows}
    assert levels[A_DATA] == levels[a_ack] == 3  # the top job's ACKs ride its level, above b's data
    assert levels[B_DATA] == levels[b_ack] == levels[B_BACK] == 2
