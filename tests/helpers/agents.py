"""Agents over a job log: on a fake clock with a fake controller client, or reporting to a real
controller over gRPC on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, LevelsReply, Report
from leveller.rpc.transport import ControllerClient, RpcFailure
from tests.helpers.fakes import RecordingEnforcer

# --- an agent on a fake clock, its controller a fake client ------------------------------------------------

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)


class FakeClient:
    """Answers level 1 for every reported flow while ``up``; fails like an unreachable server otherwise."""

    def __init__(self) -> None:
        self.up = True
        self.reports: list[Report] = []
        self.epoch = 1
        self.age = 0.0  # how old the controller's decision is when it answers

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        if not self.up:
            raise RpcFailure(None, "controller down")
        self.reports.append(report)
        return LevelsReply(self.epoch, 3.0, (0, 46), tuple(FlowLevel(f.key, f.job, 1) for f in report.flows),
                           self.age)


class StaticFlows:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {A: FlowSample(1000)}


def fake_client_agent(tmp_path: Path) -> tuple[Agent, FakeClient, RecordingEnforcer, list[float], Path]:
    """Agent h1 with job a (flow A, port 47000) on a clock at 101 s (``now[0]``, settable), its log and
    its fake client: (agent, client, enforcer, now, log)."""
    log = tmp_path / "a.log"
    log.write_text(format_line("a", 0, 100.0) + "\n")
    now = [101.0]
    client, enforcer = FakeClient(), RecordingEnforcer()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, enforcer, flows=StaticFlows(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)), clock=lambda: now[0],
                  monotonic=lambda: now[0])
    return agent, client, enforcer, now, log


# --- agents reporting to a real controller over gRPC on loopback -------------------------------------------

SECRET = b"controller-test-secret"
FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)  # job a's flow from h1
FB = flow_key("10.0.0.2", "10.0.0.3", 40001, 48000)  # job b's flow from h2
FB_H1 = flow_key("10.0.0.1", "10.0.0.3", 40001, 48000)  # job b's flow when h1 runs both jobs


class OneFlow:
    def __init__(self, key: FlowKey) -> None:
        self.key = key

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {self.key: FlowSample(4096)}


class TwoFlows:
    """Flows FA (job a) and FB_H1 (job b) on one host."""

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {FA: FlowSample(1000), FB_H1: FlowSample(1000)}


def reporting_agent(tmp_path: Path, host: str, job: str, port: int, key: FlowKey, iters: int, ideal: float,
                    address: str, flows: object = None) -> tuple[Agent, RecordingEnforcer]:
    """Agent ``host`` running ``job`` (``iters`` iterations in its first 9 of 10 s, flow ``key`` on ``port``),
    reporting to ``address`` with SECRET: (agent, enforcer)."""
    log = tmp_path / f"{job}.log"
    t0 = time.time() - 10
    log.write_text(format_line(job, 0, t0) + "\n" + format_line(job, iters, t0 + 9) + "\n")
    enf = RecordingEnforcer()
    return Agent(host, [(LogTailer(str(log)), RateTracker())], ControllerClient(address, SECRET, timeout_s=2),
                 enf, flows=flows or OneFlow(key), classifier=Classifier(ports=(parse_port_rule(f"{job}={port}"),)),
                 ideal_times={job: ideal}), enf


def two_job_agent(tmp_path: Path, address: str) -> tuple[Agent, RecordingEnforcer, Path]:
    """Agent h1 running jobs a (FA, port 47000) and b (FB_H1, port 48000), both at iteration 0 since 100 s
    and ideal time 1 s, reporting to ``address`` with SECRET: (agent, enforcer, the jobs' log)."""
    log = tmp_path / "jobs.log"
    t0 = time.time() - 100
    log.write_text("".join(format_line(j, 0, t0) + "\n" for j in ("a", "b")))
    enf = RecordingEnforcer()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], ControllerClient(address, SECRET, timeout_s=5),
                  enf, flows=TwoFlows(), ideal_times={"a": 1.0, "b": 1.0},
                  classifier=Classifier(ports=(parse_port_rule("a=47000"), parse_port_rule("b=48000"))))
    return agent, enf, log
