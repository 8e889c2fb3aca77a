"""leveller.model.limits: the largest report the schema accepts fits one gRPC message.

Issue 26, finding 19: every report the schema accepts fits one gRPC message, so MAX_FLOWS can be
reached (4 MiB held 38,696 flows at most: a host with more got RESOURCE_EXHAUSTED on every report, and with
it no levels at all)."""

from __future__ import annotations

import time
from typing import Any

from leveller.codec import encode
from leveller.model.flow import FlowKey
from leveller.model.limits import (
    MAX_COUNTER,
    MAX_DSCP_BYTES,
    MAX_FLOWS,
    MAX_ITERATIONS,
    MAX_JOBS,
    MAX_MESSAGE_BYTES,
    MAX_RECENT,
    MAX_WEIGHT,
)
from leveller.rpc.schema import FlowLevel, FlowReport, JobReport, LevelsReply, Report, report_to_wire
from leveller.rpc.transport import ControllerClient, serve

SECRET = b"test-secret-0123456789"
SRC, DST = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd"


def _job(i: int) -> str:
    return f"{'j' * 58}{i:06d}"  # 64 characters, the longest name


def _largest_report(jobs: int = MAX_JOBS, recent: int = MAX_RECENT, dscp: int = MAX_DSCP_BYTES) -> Report:
    now = time.time()
    job_reports = tuple(JobReport(_job(i), MAX_ITERATIONS, now - 86399.123456789, 86399.123456789,
                                  tuple((MAX_ITERATIONS - recent + k, now - 0.123456789) for k in range(recent)),
                                  MAX_WEIGHT - 0.123456789)
                        for i in range(jobs))
    flows = tuple(FlowReport(FlowKey(SRC, DST, 65535 - i // 65535, 1 + i % 65535, 17), _job(i % max(jobs, 1)),
                             MAX_COUNTER) for i in range(MAX_FLOWS))
    by_dscp = tuple((i // 4, 60 + i % 4, MAX_COUNTER) for i in range(dscp))
    return Report("h" * 64, job_reports, flows, "f" * 64, 2**53, by_dscp)


def test_a_report_at_every_limit_fits_one_message() -> None:
    size = len(encode(report_to_wire(_largest_report())))
    assert size <= MAX_MESSAGE_BYTES, f"{size} bytes > {MAX_MESSAGE_BYTES}"


class AllLevels:
    """Answers level 1 for every flow of a report (a reply as large as the report's flows)."""

    def report(self, report: Report, now: float) -> LevelsReply:
        return LevelsReply(1, 2.0, (0, 8), tuple(FlowLevel(f.key, f.job, 1) for f in report.flows))

    def status(self, now: float) -> dict[str, Any]:
        return {}


def test_a_report_of_max_flows_gets_its_levels_over_grpc() -> None:
    report = _largest_report(jobs=1, recent=0, dscp=0)
    report = Report(report.host, report.jobs, report.flows, report.run, 1)
    srv, port = serve(AllLevels(), "127.0.0.1:0", SECRET)  # the defaults the controller and agents run with
    try:
        with ControllerClient(f"127.0.0.1:{port}", SECRET, timeout_s=60) as client:
            reply = client.report(report, known_jobs={_job(0)})
    finally:
        srv.stop(grace=None)
    assert len(reply.flows) == MAX_FLOWS
