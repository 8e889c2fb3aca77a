"""One malformed iteration line must not disable a host (issue 10, High 2).

Each line the issue lists used to enter the agent's job table and make every later report of the
host fail INVALID_ARGUMENT: the good jobs vanished from the controller and their marks went with the
lease. Here a real controller serves real gRPC on loopback; the agent's log holds a good job and one
bad line. The agent must skip and count the bad line (by field), keep reporting, and the good job must
be ranked and marked. No root needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from leveller.agent.metrics import AgentMetrics, Rejections
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.transport import ControllerClient, serve
from tests.helpers.fakes import RecordingEnforcer

SECRET = b"bad-lines-test-secret-0123"
GOOD = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
TOP_DSCP = default_level_map(2).dscp[1]


class GoodFlow:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {GOOD: FlowSample(4096)}


def bad_lines(now: float) -> list[tuple[str, str]]:
    """(log line, field the agent must name) for every line of the issue."""
    return [
        (f"leveller-iter job=jöb rank=0 iter=1 t={now:.3f}", "job"),  # non-ASCII
        (f"leveller-iter job={'x' * 65} rank=0 iter=1 t={now:.3f}", "job"),  # 65 characters
        (f"leveller-iter job=a/b rank=0 iter=1 t={now:.3f}", "job"),
        (f"leveller-iter job=big rank=0 iter=99999999999999999999 t={now:.3f}", "iter"),
        ("leveller-iter job=zero rank=0 iter=0 t=0", "t"),
        (f"leveller-iter job=future rank=0 iter=0 t={now + 10 * 365 * 86400:.3f}", "t"),
    ]


@pytest.fixture()
def controller() -> object:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=30.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET, on_reject=ctl.reject)
    ctl.address = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield ctl
    server.stop(grace=None)


@pytest.mark.parametrize("index", range(6), ids=["non-ascii", "65-chars", "slash", "huge-iter", "t=0",
                                                  "far-future-t"])
def test_a_bad_line_is_skipped_counted_and_the_good_job_keeps_its_level(
        tmp_path: Path, controller: Controller, index: int, caplog: pytest.LogCaptureFixture) -> None:
    now = time.time()
    line, field = bad_lines(now)[index]
    log = tmp_path / "jobs.log"
    # the bad line comes between the good job's lines: every report after it used to be refused
    log.write_text("\n".join([format_line("good", 0, now - 10), line, format_line("good", 5, now - 1)]) + "\n")
    metrics, enforcer = AgentMetrics(), RecordingEnforcer()
    agent = Agent("h1", [(LogTailer(str(log), from_start=True), RateTracker())],
                  ControllerClient(controller.address, SECRET), enforcer,  # type: ignore[attr-defined]
                  flows=GoodFlow(), classifier=Classifier(ports=(parse_port_rule("good=47000"),)),
                  ideal_times={"good": 1.0}, metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="leveller.agent"):
        first = agent.step()
    assert first.ok, first.error
    assert [j.job for j in first.report.jobs] == ["good"] and first.report.jobs[0].iterations == 5
    assert agent.rejected is not None and dict(agent.rejected.counts) == {field: 1}
    assert any(f"{field}:" in r.getMessage() for r in caplog.records), caplog.text  # logged, naming the field
    text = generate_latest(metrics.registry).decode()
    assert f'leveller_agent_rejected_total{{field="{field}",reason="invalid"}} 1.0' in text

    controller.step(time.time())
    second = agent.step()
    assert second.ok and enforcer.marks == {GOOD: TOP_DSCP}  # the good job is ranked and marked
    status = controller.status(time.time())
    assert [j["job"] for j in status["jobs"]] == ["good"]
    assert controller.metrics.rejected.labels("invalid")._value.get() == 0  # nothing was refused


def test_a_flood_of_bad_lines_is_logged_a_few_times_not_per_line(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    rejections = Rejections(clock=lambda: clock[0])
    tracker = RateTracker(on_reject=rejections)
    with caplog.at_level(logging.WARNING, logger="leveller.agent"):
        for i in range(1000):
            clock[0] = i * 0.01  # 10 s of bad lines
            tracker.feed(f"leveller-iter job=a/b rank=0 iter={i} t=1000.0", now=2000.0)
    assert tracker.rejected == {"job": 1000} and rejections.counts == {"job": 1000}
    assert "a/b" not in tracker.jobs and tracker.jobs == {}
    assert 1 <= len(caplog.records) <= 2  # the first at once, then one summary per 10 s


def test_more_jobs_than_a_report_may_carry_are_skipped_not_sent() -> None:
    tracker = RateTracker(max_jobs=3)
    for i in range(5):
        tracker.feed(format_line(f"j{i}", 0, 1000.0), now=1000.0)
    assert sorted(tracker.jobs) == ["j0", "j1", "j2"] and tracker.rejected == {"jobs": 2}
