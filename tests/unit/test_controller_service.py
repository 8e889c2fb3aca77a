"""Controller + agents over real gRPC on loopback: levels by lowest R, status, metrics, lease fallback."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest
from prometheus_client import generate_latest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.transport import ControllerClient, RpcFailure, serve
from tests.fakes import RecordingEnforcer

SECRET = b"controller-test-secret"
FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
FB = flow_key("10.0.0.2", "10.0.0.3", 40001, 48000)


class OneFlow:
    def __init__(self, key: FlowKey) -> None:
        self.key = key

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {self.key: FlowSample(4096)}


def agent(tmp_path: Path, host: str, job: str, port: int, key: FlowKey, iters: int, ideal: float,
          address: str, flows: object = None) -> tuple[Agent, RecordingEnforcer]:
    log = tmp_path / f"{job}.log"
    t0 = time.time() - 10
    log.write_text(format_line(job, 0, t0) + "\n" + format_line(job, iters, t0 + 9) + "\n")
    enf = RecordingEnforcer()
    return Agent(host, [(LogTailer(str(log)), RateTracker())], ControllerClient(address, SECRET, timeout_s=2),
                 enf, flows=flows or OneFlow(key), classifier=Classifier(ports=(parse_port_rule(f"{job}={port}"),)),
                 ideal_times={job: ideal}), enf


def test_levels_status_metrics_and_lease_fallback(tmp_path: Path) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=1.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET, on_reject=ctl.reject)
    address = f"127.0.0.1:{port}"
    try:
        # a: 18 iterations x 0.5 s in 10 s -> R 0.9; b: 6 x 1.0 s in 10 s -> R 0.6 (lowest: top level)
        a, ea = agent(tmp_path, "h1", "a", 47000, FA, 18, 0.5, address)
        b, eb = agent(tmp_path, "h2", "b", 48000, FB, 6, 1.0, address)
        assert a.step().ok and b.step().ok
        assert ea.marks == {} and eb.marks == {}  # no decision yet
        decision = ctl.step(time.time())
        assert decision.order == ["b", "a"]
        assert a.step().ok and b.step().ok
        assert ea.marks == {FA: 0} and eb.marks == {FB: 8}  # default DSCP of levels 0 and 1

        with ControllerClient(address, SECRET) as client:
            status = client.status()
        assert [j["job"] for j in status["jobs"]] == ["a", "b"]
        assert status["jobs"][1]["rate"] < status["jobs"][0]["rate"]
        assert {f["job"]: f["level"] for f in status["flows"]} == {"a": 0, "b": 1}

        with ControllerClient(address, b"not-the-right-secret!") as bad, \
                pytest.raises(RpcFailure, match="UNAUTHENTICATED") as refused:
            bad.status()
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        text = generate_latest(ctl.metrics.registry).decode()
        rate_b = float(re.search(r'leveller_job_rate\{job="b"\} (\S+)', text).group(1))  # type: ignore[union-attr]
        assert 0.5 < rate_b < 0.65
        assert 'leveller_requests_rejected_total{reason="auth"} 1.0' in text
        assert 'leveller_flow_level{flow="tcp 10.0.0.2:40001>10.0.0.3:48000",job="b"} 1.0' in text
    finally:
        server.stop(grace=None)
    # Controller gone: marks stay within the 1 s lease, then are cleared.
    r = b.step()
    assert not r.ok and eb.marks == {FB: 8}
    deadline = time.time() + 10
    while eb.clears == 0 and time.time() < deadline:
        b.step()
        time.sleep(0.1)
    assert eb.clears == 1 and eb.marks == {}
    assert b.lease.expires_at is None


def test_replies_carry_the_age_of_the_decision_from_when_its_step_read_the_inputs() -> None:
    from leveller.rpc.schema import FlowReport, JobReport, Report

    mono = [10.0]
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=1.0,
                     monotonic=lambda: mono[0])
    report = Report("h1", (JobReport("a", 3, 1000.0, 1.0),), (FlowReport(FA, "a", 10),))
    assert ctl.report(report, 1010.0).decision_age_s == 0.0  # no decision yet (and no levels)
    ctl.step(1010.0)
    mono[0] = 12.5
    reply = ctl.report(report, 1012.5)
    assert reply.decision_age_s == 2.5 and [f.level for f in reply.flows] == [1]
    assert ctl.status(1012.5)["decision_age_s"] == 2.5


class ThreadRecordingPruner:
    """core.levels.prune that notes the thread it ran on, and says it offloads (as a PruneWorker
    sending its input to its process) when ``offload`` is set."""

    def __init__(self, offload: bool) -> None:
        self.offload, self.threads = offload, []

    def offloads(self, pairs: int) -> bool:
        return self.offload

    def __call__(self, *args: object) -> object:
        from leveller.core.levels import prune

        self.threads.append(threading.current_thread().name)
        return prune(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("offload", [False, True])
def test_a_served_controller_prunes_on_the_report_thread_and_waits_for_an_offloading_pruner_in_its_own(
        offload: bool) -> None:
    # one thread holding the interpreter: a step's pieces between reports, instead of trading the lock
    # with the report thread at every numpy call (a 25 ms step took 130-170 ms, reports waited behind it)
    from leveller.rpc.schema import FlowReport, JobReport, Report

    pruner = ThreadRecordingPruner(offload)
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, pruner=pruner)
    server, _port = serve(ctl, "127.0.0.1:0", SECRET)
    try:
        now = time.time()
        ctl.report(Report("h1", (JobReport("a", 3, now - 10, 1.0),), (FlowReport(FA, "a", 10),)), now)
        ctl.report(Report("h2", (JobReport("b", 9, now - 10, 1.0),), (FlowReport(FB, "b", 10),)), now)
        stepper = threading.Thread(target=ctl.step, args=(now,), name="stepper")
        stepper.start()
        stepper.join(10)
        assert ctl.decision is not None and dict(ctl.decision.levels) == {FA: 1, FB: 0}
        assert pruner.threads == ["stepper" if offload else "grpc-loop"]
    finally:
        server.stop(grace=None)
    ctl.step(now + 0.5)  # the loop gone: the pieces run in the step's thread
    assert pruner.threads[-1] == threading.current_thread().name
