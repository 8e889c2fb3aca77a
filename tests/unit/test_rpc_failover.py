"""Failover between controllers (leveller.rpc.failover) over real gRPC on loopback: the first controller
that answers gets the reports, a dead or hung one is left for the next, the list cycles, a refused report
is not sent elsewhere, and replay protection holds across controllers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from leveller.codec import SchemaError, encode
from leveller.errors import UserError
from leveller.model.flow import flow_key
from leveller.rpc import auth
from leveller.rpc.failover import FailoverClient, parse_addresses
from leveller.rpc.schema import FlowLevel, FlowReport, JobReport, LevelsReply, Report, report_to_wire
from leveller.rpc.transport import REPORT, RpcFailure, serve
from tests.helpers.wait import wait_until

SECRET = b"failover-secret-0123456789"
KEY = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000, "tcp")


class Recording:
    """Records accepted reports; host 'bad' is refused; ``hang_s`` delays every answer."""

    def __init__(self, name: str) -> None:
        self.name, self.reports, self.hang_s = name, [], 0.0  # type: ignore[var-annotated]

    def report(self, report: Report, now: float) -> LevelsReply:
        if self.hang_s:
            time.sleep(self.hang_s)
        if report.host == "bad":
            raise SchemaError("host", "'bad' is refused")
        self.reports.append(report)
        return LevelsReply(len(self.reports), 2.0, (0, 8), tuple(FlowLevel(f.key, f.job, 1) for f in report.flows))

    def status(self, now: float) -> dict[str, Any]:
        return {"name": self.name}


class Server:
    """A controller service on a fixed loopback port that can be stopped and started again."""

    def __init__(self, name: str, port: int = 0) -> None:
        self.handler = Recording(name)
        self.srv, self.port = serve(self.handler, f"127.0.0.1:{port}", SECRET)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.srv.stop(grace=None).wait()


@pytest.fixture
def pair() -> Iterator[tuple[Server, Server]]:
    a, b = Server("a"), Server("b")
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def report(host: str = "h1", iterations: int = 3) -> Report:
    return Report(host, (JobReport("j1", iterations, time.time() - 10, 1.0),), (FlowReport(KEY, "j1", 1000),))


def test_addresses_are_parsed_in_order_and_bad_ones_named() -> None:
    assert parse_addresses("127.0.0.1:50051") == ("127.0.0.1:50051",)
    assert parse_addresses("a.example:1, b-2:65535,[::1]:7") == ("a.example:1", "b-2:65535", "[::1]:7")
    for bad, needle in [("", "''"), ("a:1,", "''"), ("a", "'a'"), ("a:0", "'a:0'"), ("a:65536", "'a:65536'"),
                        ("a:x", "'a:x'"), ("::1:5", "'::1:5'"), ("[zz]:5", "'[zz]:5'"), ("a:1,a:1", "twice"),
                        ("a b:1", "'a b:1'"), (",".join(f"h{i}:1" for i in range(17)), "1 to 16")]:
        with pytest.raises(UserError, match="--controller") as info:
            parse_addresses(bad)
        assert needle in str(info.value), (bad, str(info.value))


def test_reports_go_to_the_first_and_move_to_the_next_when_it_dies(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with FailoverClient([a.address, b.address], SECRET) as client:
        for n in range(3):
            client.report(report(iterations=n), known_jobs={"j1"})
        assert client.active == a.address and len(a.handler.reports) == 3 and not b.handler.reports
        a.stop()
        reply = client.report(report(iterations=3), known_jobs={"j1"})
        assert reply.flows == (FlowLevel(KEY, "j1", 1),)
        assert client.active == b.address and client.failovers == 1 and a.address in client.last_errors
        client.report(report(iterations=4), known_jobs={"j1"})
        assert len(b.handler.reports) == 2 and client.failovers == 1  # it stays with b
        # one run, one counter: b continues the numbering a saw (4 went with the attempt on the dead a)
        assert {r.run for r in a.handler.reports + b.handler.reports} == {client.run}
        assert [r.seq for r in a.handler.reports + b.handler.reports] == [1, 2, 3, 5, 6]
        assert client.status() == {"name": "b", "controller": b.address}


def test_a_hung_controller_is_left_after_the_timeout(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with FailoverClient([a.address, b.address], SECRET, timeout_s=0.3) as client:
        client.report(report())
        a.handler.hang_s = 3.0
        t0 = time.monotonic()
        client.report(report())
        took = time.monotonic() - t0
        assert client.active == b.address and len(b.handler.reports) == 1
        assert took < 2.0, took  # the timeout, not the hang, decided when to move on


def test_the_list_cycles_and_every_error_is_named_when_none_answers(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with FailoverClient([a.address, b.address], SECRET, timeout_s=1.0) as client:
        client.report(report())
        a.stop()
        client.report(report())
        assert client.active == b.address
        b.stop()
        with pytest.raises(RpcFailure) as info:
            client.report(report())
        assert a.address in str(info.value) and b.address in str(info.value)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        revived = Server("a again", a.port)  # a comes back on its address: the next report finds it
        try:
            def reported() -> bool:
                try:
                    client.report(report())
                except RpcFailure:
                    return False
                return True

            wait_until(reported, 10, "the revived controller was never tried again", interval=0.1)
            assert client.active == a.address and len(revived.handler.reports) == 1
            assert client.failovers == 2
        finally:
            revived.stop()


def test_a_refused_report_is_not_sent_to_another_controller(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with FailoverClient([a.address, b.address], SECRET) as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report(host="bad"))
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert client.active == a.address and not b.handler.reports and client.failovers == 0


def _replay(address: str, run: str, seq: int) -> tuple[Any, str]:
    """A report of ``run`` numbered ``seq``, signed with the shared secret (as a captured copy would be)."""
    from dataclasses import replace

    body = encode(report_to_wire(replace(report(iterations=1), run=run, seq=seq)))
    with grpc.insecure_channel(address) as ch:
        try:
            ch.unary_unary(REPORT).with_call(body, timeout=5, metadata=auth.metadata(SECRET, REPORT, time.time(), body))
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_replay_protection_holds_across_controllers(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with FailoverClient([a.address, b.address], SECRET) as client:
        for _ in range(3):
            client.report(report())  # seq 1..3 to a
        a.stop()
        client.report(report())  # seq 5 (4 went to the dead a): the first b sees of this run
        # a copy of report 2 (sent to a) replayed to b: b has seen a later report of the run
        code, details = _replay(b.address, client.run, 2)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "not newer" in details, details
        assert len(b.handler.reports) == 1
        client.report(report())  # the agent's own next report is accepted
        assert [r.seq for r in b.handler.reports] == [5, 6]


def test_concurrent_reports_leave_in_number_order(pair: tuple[Server, Server]) -> None:
    """The push thread and the report loop may share a client: numbers never cross on the wire."""
    a, _ = pair
    with FailoverClient([a.address], SECRET) as client:
        threads = [threading.Thread(target=lambda: [client.report(report()) for _ in range(10)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(a.handler.reports) == 40  # none refused as a replay


def test_the_push_watcher_follows_the_agent_to_the_standby(tmp_path) -> None:
    """Real controllers, a real agent loop step by step: after the failover, b's new decisions reach the
    agent by push (no report in between), from epoch 0 of b's own count."""
    from leveller.agent.rate_tracker import LogTailer, RateTracker
    from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
    from leveller.agent.service import Agent
    from leveller.controller.paths import SingleLinkPaths
    from leveller.controller.service import Controller
    from leveller.core.policies import make_policy
    from leveller.core.qos import default_level_map
    from leveller.jobs.logline import format_line
    from leveller.rpc.push import LevelsWatcher
    from tests.helpers.fakes import RecordingEnforcer

    class OneFlow:
        def read_flows(self):
            return {KEY: FlowSample(1000)}

    ctls, servers = [], []
    for _ in range(2):
        ctl = Controller(SingleLinkPaths(), make_policy("fair"), default_level_map(2), tau_s=1.0, lease_s=30)
        ctls.append(ctl)
        servers.append(serve(ctl, "127.0.0.1:0", SECRET))
    addresses = [f"127.0.0.1:{port}" for _, port in servers]
    log = tmp_path / "j1.log"
    log.write_text(format_line("j1", 0, time.time() - 10) + "\n")
    enf = RecordingEnforcer()
    try:
        with FailoverClient(addresses, SECRET) as client:
            agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, enf, flows=OneFlow(),
                          ideal_times={"j1": 1.0}, classifier=Classifier(ports=(parse_port_rule("j1=47000"),)))
            with LevelsWatcher(lambda: client.active, SECRET, "h1", agent.apply_pushed, lambda: agent.known_jobs,
                               wait_s=20, retry_s=0.05) as watcher:
                agent.step()
                ctls[0].step(time.time())
                # fair: level 0 (DSCP 0) for every flow, pushed by a
                wait_until(lambda: enf.marks == {KEY: 0}, 10, "a's decision was never pushed")
                for _ in range(5):
                    ctls[1].step(time.time())  # b decides all along, without this host
                servers[0][0].stop(grace=None).wait()
                assert agent.step().waiting and client.active == addresses[1] and enf.marks == {KEY: 0}
                applied = len(enf.valid_for)
                ctls[1].policy = make_policy("leveller")  # b now ranks j1 alone: top level, DSCP 8
                ctls[1].step(time.time())
                wait_until(lambda: enf.marks == {KEY: 8}, 10,
                           lambda: f"b's decision was never pushed ({watcher.last_error})")
                assert len(enf.valid_for) > applied and watcher.address == addresses[1]
                assert watcher.epoch == ctls[1].epoch  # b's own count
    finally:
        for srv, _ in servers:
            srv.stop(grace=None)
