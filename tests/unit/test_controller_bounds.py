"""The controller's state and numbers stay bounded whatever agents send.

- Agents and jobs not heard from for --stale-after are forgotten: after a flood of
  reports from distinct host and job names, the registry, the per-host metrics and
  status hold only the steady agents (issue 10, medium 4).
- Ideal times are bounded on the wire and R is capped, so one job with an absurd ideal
  time cannot make status unencodable for everybody (issue 10, medium 6).
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from leveller.codec import SchemaError, decode, encode
from leveller.controller.decide import MAX_RATE, JobInput, job_rate
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.errors import UserError
from leveller.model.flow import flow_key
from leveller.model.limits import MAX_IDEAL_S
from leveller.model.shape import parse_job_shape
from leveller.rpc.schema import FlowReport, JobReport, Report, report_from_wire, report_to_wire


def controller() -> Controller:
    return Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0,
                      stale_after_s=3.0)


def report(host: str, job: str, port: int, iterations: int = 10, start: float = 900.0,
           ideal: float | None = 0.5) -> Report:
    flow = flow_key("10.0.0.1", "10.0.0.9", port, 47000)
    return Report(host, (JobReport(job, iterations, start, ideal),), (FlowReport(flow, job, 1000),))


def test_a_flood_of_names_is_forgotten_after_stale_after() -> None:
    ctl = controller()
    for i in range(3000):  # one report each from 3000 distinct hosts with distinct jobs
        ctl.report(report(f"flood{i}", f"fj{i}", 1024 + i), now=1000.0 + i * 1e-4)
    assert len(ctl.registry.agents) == 3000
    steady = [report(f"steady{i}", f"sj{i}", 40000 + i) for i in range(3)]
    for now in (1002.0, 1003.0, 1004.0):  # the steady agents keep reporting; the flood stops
        for r in steady:
            ctl.report(r, now)
    ctl.step(1004.0)
    status = ctl.status(1004.0)
    assert sorted(ctl.registry.agents) == ["steady0", "steady1", "steady2"]
    assert sorted(ctl.registry.jobs) == ["sj0", "sj1", "sj2"]
    assert [a["host"] for a in status["agents"]] == ["steady0", "steady1", "steady2"]
    assert len(status["jobs"]) == 3 and len(status["flows"]) == 3
    metrics = generate_latest(ctl.metrics.registry).decode()
    assert metrics.count("leveller_reports_total{") == 3  # no counter left behind per forgotten host


def test_a_job_that_one_agent_stops_reporting_is_forgotten() -> None:
    ctl = controller()
    ctl.report(report("h1", "old", 40000), now=1000.0)
    for now in (1001.0, 1002.0, 1003.5):
        ctl.report(report("h1", "new", 40001), now)
    ctl.step(1003.5)
    assert list(ctl.registry.jobs) == ["new"]


def test_ideal_time_above_a_day_is_refused_by_name() -> None:
    msg = report_to_wire(report("h1", "big", 40000, ideal=1e308))
    msg.update(run="0123456789abcdef", seq=1)
    with pytest.raises(SchemaError) as info:
        report_from_wire(msg)
    assert info.value.field == "jobs[0].ideal_time" and "86400" in str(info.value)


def test_extreme_but_valid_inputs_give_a_finite_rate_and_an_encodable_status() -> None:
    ctl = controller()
    # the most iterations and the longest ideal time allowed, a job that started a microsecond ago
    ctl.report(report("h1", "huge", 40000, iterations=2**53, start=1000.0 - 1e-6, ideal=MAX_IDEAL_S), now=1000.0)
    ctl.report(report("h2", "normal", 40001), now=1000.0)
    decision = ctl.step(1000.0)
    assert decision.rates["huge"] == MAX_RATE and decision.order == ["normal", "huge"]
    text = encode(ctl.status(1000.0))  # refuses NaN/Infinity
    rates = {j["job"]: j["rate"] for j in decode(text)["jobs"]}
    assert rates["huge"] == MAX_RATE and 0 < rates["normal"] < MAX_RATE
    assert "Infinity" not in json.dumps(decode(text))


def test_rate_cap_also_covers_a_non_finite_product() -> None:
    assert job_rate(JobInput("x", 10, 0.0, float("inf")), now=1.0) == MAX_RATE


@pytest.mark.parametrize("text", ["j=1e308:1", "j=1:1e308", "j=1:0.5:10000000", "j=1:inf", "j=nan:1"])
def test_job_shape_is_bounded(text: str) -> None:
    with pytest.raises(UserError, match="86400"):
        parse_job_shape(text)


@pytest.mark.parametrize("value", ["1e308", "86401", "inf", "0"])
def test_agent_refuses_an_unbounded_ideal_time_before_starting(value: str, tmp_path, capsys) -> None:
    from leveller.cli import main

    log = tmp_path / "j.log"
    log.write_text("")
    rc = main(["agent", "--controller", "127.0.0.1:1", "--log", f"big={log}", "--ideal-time", f"big={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and "--ideal-time" in err and "86400" in err, err
