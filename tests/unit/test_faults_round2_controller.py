"""Issue 26, round 2, controller findings: 16 (one secret holder reporting thousands of host names made as
many leveller_reports_total series), 6 (a host claimed another host's flow for its own job), 8 (Status of
every flow: over the message bound, and built under the lock every report waits for)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from leveller.controller.metrics import MAX_HOST_SERIES, OTHER_HOSTS
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import MAX_STATUS_FLOWS, Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import FlowKey, flow_key
from leveller.model.messages import FlowReport, JobReport, Report


def _controller(flow_claims: bool = False, stale_after_s: float | None = None) -> Controller:
    return Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0,
                      stale_after_s=stale_after_s, flow_claims=flow_claims)


def test_thousands_of_invented_hosts_make_a_bounded_number_of_series() -> None:
    ctl, now = _controller(), time.time()
    for i in range(3000):
        ctl.report(Report(f"h{i}", (JobReport("j", 1, now - 10),), (), "00112233aabbccdd", 1), now)
    text = generate_latest(ctl.metrics.registry).decode()
    series = [line for line in text.splitlines() if line.startswith("leveller_reports_total{")]
    assert len(series) == MAX_HOST_SERIES + 1, len(series)
    assert f'leveller_reports_total{{host="{OTHER_HOSTS}"}} {3000 - MAX_HOST_SERIES}.0' in series
    assert 'leveller_reports_total{host="h0"} 1.0' in series  # the first hosts keep their own series


# --- 6: a host claims another host's flow ------------------------------------------------------------------

def _claims_report(host: str, job: str, flows: tuple[FlowKey, ...], now: float, seq: int = 1) -> Report:
    return Report(host, (JobReport(job, 5, now - 10, 1.0),), tuple(FlowReport(k, job, 1000) for k in flows),
                  "00112233aabbccdd", seq)


def test_a_host_cannot_claim_another_hosts_flow() -> None:
    ctl, now = _controller(flow_claims=True), time.time()
    h1_flow = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
    h2_flow = flow_key("10.0.0.2", "10.0.0.3", 40001, 48000)
    ctl.report(_claims_report("h1", "a", (h1_flow,), now), now)
    ctl.step(now)
    ctl.report(_claims_report("h2", "b", (h2_flow, h1_flow), now), now)  # h1's 5-tuple as its job b's
    ctl.step(now + 0.1)
    reply = ctl.report(_claims_report("h2", "b", (h2_flow, h1_flow), now + 0.1, 2), now + 0.1)
    assert [f.key for f in reply.flows] == [h2_flow]  # no level for h1's flow
    snap = ctl.decision.flows if ctl.decision is not None else None
    assert snap is not None and snap.job_names[snap.job[snap.row(h1_flow)]] == "a"  # still h1's job's flow
    text = generate_latest(ctl.metrics.registry).decode()
    assert 'leveller_requests_rejected_total{reason="flow_claim"} 2.0' in text  # each report's claim counted
    h1 = ctl.report(_claims_report("h1", "a", (h1_flow,), now + 0.2, 2), now + 0.2)
    assert [(f.key, f.job) for f in h1.flows] == [(h1_flow, "a")]


def test_an_address_is_free_again_once_its_host_went_stale() -> None:
    ctl, now = _controller(flow_claims=True), time.time()
    key = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
    ctl.report(_claims_report("h1", "a", (key,), now), now)
    later = now + 10 * ctl.tau_s  # h1 is stale (3 x tau) and a step forgot it
    ctl.step(later)
    ctl.report(_claims_report("h1-new", "a", (key,), later), later)  # e.g. the host renamed
    assert ctl.flows.refused == [] and key in ctl.flows.host("h1-new").flows


# --- 8: Status does not scale and stalls reports -------------------------------------------------------------

class _WatchedFlows(tuple):  # type: ignore[type-arg]
    """A report's flows that fail the test when read while the controller's lock is held (once armed)."""

    armed = False
    lock: Any = None

    def __iter__(self) -> Iterator[Any]:
        if _WatchedFlows.armed:
            assert not _WatchedFlows.lock.locked(), "Status read the flows under the controller's lock"
        return super().__iter__()


def _many_flows(n: int, host_octet: int = 1) -> tuple[FlowReport, ...]:
    return tuple(FlowReport(flow_key(f"10.0.{host_octet}.1", f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}",
                                     1024 + i % 60000, 4791, "udp"), "big", 1) for i in range(n))


def test_status_is_bounded_and_reads_flows_outside_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, now = _controller(), time.time()
    flows = _WatchedFlows(_many_flows(30_000))
    ctl.report(Report("h1", (JobReport("big", 5, now - 10, 1.0),), flows, "00112233aabbccdd", 1), now)
    ctl.step(now)
    monkeypatch.setattr(_WatchedFlows, "armed", True)
    monkeypatch.setattr(_WatchedFlows, "lock", ctl._lock)
    status = ctl.status(now)
    assert len(status["flows"]) == MAX_STATUS_FLOWS and status["flows_total"] == 30_000
    assert status["flows_truncated"] is True
    assert [f["flow"] for f in status["flows"]] == [k.label() for k in sorted(f.key for f in flows)][:MAX_STATUS_FLOWS]
    assert all(f["level"] is not None and f["host"] == "h1" for f in status["flows"])
    small = ctl.status(now, flows_limit=100_000)
    assert len(small["flows"]) == 30_000 and small["flows_truncated"] is False


def test_status_of_100000_flows_over_grpc_while_a_host_reports() -> None:
    """The live shape of the finding: Status over gRPC at the defaults answers (4 MiB: RESOURCE_EXHAUSTED
    from 38,696 flows on) while another host's reports go on."""
    from leveller.rpc.transport import ControllerClient, serve

    secret = b"status-test-secret-0123"
    ctl, now = _controller(stale_after_s=600), time.time()  # h1 reports once: live throughout
    ctl.report(Report("h1", (JobReport("big", 5, now - 10, 1.0),), _many_flows(100_000), "00112233aabbccdd", 1),
               now)
    ctl.step(now)
    server, port = serve(ctl, "127.0.0.1:0", secret, on_reject=ctl.reject)
    statuses: list[dict[str, Any]] = []
    try:
        with ControllerClient(f"127.0.0.1:{port}", secret, timeout_s=60) as admin, \
                ControllerClient(f"127.0.0.1:{port}", secret, timeout_s=10) as h2:
            reader = threading.Thread(target=lambda: statuses.extend(admin.status() for _ in range(3)))
            reader.start()
            latencies = []
            key = _many_flows(1, 2)[0].key
            while reader.is_alive() or not latencies:
                t0 = time.perf_counter()
                h2.report(Report("h2", (JobReport("small", 1, now - 10, 1.0),), (FlowReport(key, "small", 1),)))
                latencies.append(time.perf_counter() - t0)
            reader.join()
    finally:
        server.stop(grace=None)
    assert len(statuses) == 3
    assert all(s["flows_total"] in (100_000, 100_001) and len(s["flows"]) == MAX_STATUS_FLOWS for s in statuses), \
        [(s["flows_total"], len(s["flows"]), s["agents"]) for s in statuses]
    assert max(latencies) < 1.0, latencies  # below the agents' failover timeout (1 s with several controllers)
