"""leveller.controller.service with agents over real gRPC on loopback: levels by lowest R, status, metrics, lease
fallback, flow claims, a bounded Status."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import MAX_STATUS_FLOWS, Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import FlowKey, flow_key
from leveller.model.messages import FlowReport, JobReport, Report
from leveller.rpc.transport import ControllerClient, RpcFailure, serve
from tests.helpers.agents import FA, FB, SECRET, reporting_agent
from tests.helpers.wait import wait_until


def test_levels_status_metrics_and_lease_fallback(tmp_path: Path) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=1.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET, on_reject=ctl.reject)
    address = f"127.0.0.1:{port}"
    try:
        # a: 18 iterations x 0.5 s in 10 s -> R 0.9; b: 6 x 1.0 s in 10 s -> R 0.6 (lowest: top level)
        a, ea = reporting_agent(tmp_path, "h1", "a", 47000, FA, 18, 0.5, address)
        b, eb = reporting_agent(tmp_path, "h2", "b", 48000, FB, 6, 1.0, address)
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

    def cleared() -> bool:
        b.step()
        return eb.clears > 0

    wait_until(cleared, 10, "the agent to clear its marks once the lease ran out", interval=0.1)
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


# --- flow claims (issue 26, finding 6: a host claimed another host's flow for its own job) ------------------------

def _controller(flow_claims: bool = False, stale_after_s: float | None = None) -> Controller:
    return Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0,
                      stale_after_s=stale_after_s, flow_claims=flow_claims)


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


# --- Status (issue 26, finding 8: over the message bound, and built under the lock every report waits for) -------

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
            durations: list[float] = []

            def read() -> None:
                for _ in range(3):
                    t0 = time.perf_counter()
                    statuses.append(admin.status())
                    durations.append(time.perf_counter() - t0)

            reader = threading.Thread(target=read)
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
    # Reports go on while Status calls are answered (about 80 per call here): counted per call, not timed
    # (the latency itself: tests/integration/test_status_under_load.py), so a loaded machine slows both alike.
    assert len(latencies) >= 10 * len(durations), (len(latencies), durations)
