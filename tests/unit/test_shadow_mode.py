"""Shadow mode (`leveller controller --mode shadow`): the controller decides and reports as usual, the
agents write nothing; bytes per would-be level from the flow counters; the mode travels in each reply."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from leveller.agent.reports import FlowSample
from leveller.agent.service import Agent
from leveller.codec import SchemaError, decode, encode
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.controller.shadow import ShadowLedger
from leveller.core.paths import FlowKey
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.rpc.schema import (
    FlowLevel,
    FlowReport,
    JobReport,
    LevelsReply,
    Report,
    encode_reply,
    reply_from_wire,
    reply_to_wire,
)
from leveller.rpc.transport import ControllerClient, serve
from tests.helpers.agents import FA, FB, SECRET, A, fake_client_agent, reporting_agent
from tests.helpers.fakes import RecordingEnforcer

STEP_BYTES = 1000


class GrowingFlow:
    """One flow whose eBPF counter grows by STEP_BYTES per read."""

    def __init__(self, key: FlowKey) -> None:
        self.key, self.n = key, 0

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        self.n += STEP_BYTES
        return {self.key: FlowSample(self.n)}


def _agent(tmp_path: Path, host: str, job: str, port: int, key: FlowKey, iters: int, ideal: float,
           address: str) -> tuple[Agent, RecordingEnforcer]:
    return reporting_agent(tmp_path, host, job, port, key, iters, ideal, address, flows=GrowingFlow(key))


def test_shadow_controller_decides_agents_mark_nothing_bytes_per_would_be_level(tmp_path: Path) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=1.0,
                     mode="shadow")
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    address = f"127.0.0.1:{port}"
    try:
        # as in test_controller_service: b (R 0.6) is ranked first, a (R 0.9) last
        a, ea = _agent(tmp_path, "h1", "a", 47000, FA, 18, 0.5, address)
        b, eb = _agent(tmp_path, "h2", "b", 48000, FB, 6, 1.0, address)
        assert a.step().ok and b.step().ok  # first reports: bytes before us are not counted
        ctl.step(time.time())
        for _ in range(3):
            ra, rb = a.step(), b.step()
        assert ra.mode == rb.mode == "shadow"
        assert ea.valid_for == eb.valid_for == [] and ea.clears == eb.clears == 0  # nothing written at all
        assert ra.marks == rb.marks == {}
        assert b.would_be == {FB: ("b", 1)} and a.would_be == {FA: ("a", 0)}
        with ControllerClient(address, SECRET) as client:
            status = client.status()
        assert status["mode"] == "shadow"
        assert {f["job"]: f["level"] for f in status["flows"]} == {"a": 0, "b": 1}
        assert status["shadow_bytes"] == {"a": {"0": 3 * STEP_BYTES}, "b": {"1": 3 * STEP_BYTES}}
        text = generate_latest(ctl.metrics.registry).decode()
        assert "leveller_shadow_mode 1.0" in text
        assert float(re.search(r'leveller_shadow_bytes_total\{job="b",level="1"\} (\S+)', text)  # type: ignore
                     .group(1)) == 3 * STEP_BYTES
    finally:
        server.stop(grace=None)


def test_enforce_mode_replies_and_metrics_are_unchanged() -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5)
    assert ctl.mode == "enforce" and ctl.status(time.time())["shadow_bytes"] is None
    assert "leveller_shadow_mode 0.0" in generate_latest(ctl.metrics.registry).decode()
    reply = LevelsReply(3, 1.0, (0, 8), (FlowLevel(A, "a", 1),), 0.1)
    assert "mode" not in reply_to_wire(reply)  # agents of before shadow mode read it as ever
    with pytest.raises(ValueError):
        Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, mode="dry")


def test_mode_on_the_wire() -> None:
    reply = LevelsReply(3, 1.0, (0, 8), (FlowLevel(A, "a", 1),), 0.1, (), "shadow")
    assert encode_reply(reply) == encode(reply_to_wire(reply))
    assert reply_from_wire(decode(encode_reply(reply), 1 << 20)) == reply
    bad = {**reply_to_wire(reply), "mode": "dry-run"}
    with pytest.raises(SchemaError, match="mode"):
        reply_from_wire(bad)


class ModeClient:
    """Answers level 1 for every flow, in the mode set on it (a controller restarted in another mode)."""

    def __init__(self) -> None:
        self.mode = "shadow"

    def report(self, report: Report, known_jobs: object = None) -> LevelsReply:
        return LevelsReply(1, 3.0, (0, 46), tuple(FlowLevel(f.key, f.job, 1) for f in report.flows), 0.0, (),
                           self.mode)


def test_the_same_agent_follows_the_mode_of_each_reply(tmp_path: Path) -> None:
    agent, _, enforcer, now, _ = fake_client_agent(tmp_path)
    agent.client = client = ModeClient()
    assert agent.step().ok and enforcer.valid_for == [] and agent.would_be == {A: ("a", 1)}
    client.mode = "enforce"
    assert agent.step().marks == {A: 46} and enforcer.marks == {A: 46}  # no restart: the next reply marks
    client.mode = "shadow"
    r = agent.step()
    assert r.marks == {} and enforcer.marks == {} and enforcer.clears == 1  # back to shadow: unmarked
    assert agent.lease.expires_at is None


def _report(host: str, flows: dict[FlowKey, int], job: str = "a") -> Report:
    return Report(host, (JobReport(job, 1, 0.0, 1.0),), tuple(FlowReport(k, job, n) for k, n in flows.items()))


@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=12))
def test_ledger_counts_each_increase_once_and_restarts_from_zero(counters: list[int]) -> None:
    ledger = ShadowLedger()
    before = None
    for n in counters:
        r = _report("h1", {A: n})
        ledger.observe(before, r, {A: 1})
        before = r
    expected = sum(b - a if b >= a else b for a, b in zip(counters, counters[1:]))
    assert ledger.by_job() == ({"a": {"1": expected}} if expected else {})


def test_ledger_levels_follow_the_decision_and_undecided_flows() -> None:
    ledger = ShadowLedger()
    r1, r2, r3 = _report("h1", {A: 100}), _report("h1", {A: 300}), _report("h1", {A: 600})
    ledger.observe(None, r1, {A: 1})  # first report: nothing
    ledger.observe(r1, r2, {})  # not in the decision yet
    ledger.observe(r2, r3, {A: 0})
    assert ledger.by_job() == {"a": {"none": 200, "0": 300}}


def test_status_command_flags_shadow_mode_and_prints_bytes_per_would_be_level(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from leveller.cli import main

    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, mode="shadow")
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    try:
        b, _ = _agent(tmp_path, "h2", "b", 48000, FB, 6, 1.0, f"127.0.0.1:{port}")
        b.step()
        ctl.step(time.time())
        b.step()
        monkeypatch.setenv("LEVELLER_SECRET", SECRET.decode())
        monkeypatch.setenv("COLUMNS", "200")
        assert main(["status", "--controller", f"127.0.0.1:{port}"]) == 0
    finally:
        server.stop(grace=None)
    out = capsys.readouterr().out
    assert "SHADOW MODE" in out and "would-be level" in out
    assert re.search(r"│ b\s+│\s+1,000\s+│\s+0\s+│\s+0\s+│", out), out  # level 1: 1,000 bytes; level 0, undecided: 0
