"""The protobuf service (leveller/rpc/leveller.proto): generated code current, same checks as JSON,
health and reflection on, JSON agents unchanged on the same paths. Real gRPC server on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import flow_key
from leveller.model.messages import FlowReport, JobReport, Report
from leveller.rpc import auth
from leveller.rpc import leveller_pb2 as pb
from leveller.rpc.protowire import reply_from_proto, report_to_proto
from leveller.rpc.transport import REPORT, STATUS, ControllerClient, serve

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"proto-secret-0123456789"
KEY = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000, "tcp")


def test_checked_in_code_is_what_grpcio_tools_generates(tmp_path: Path) -> None:
    subprocess.run(["sh", str(ROOT / "scripts/gen-proto.sh"), str(tmp_path)], check=True,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    for name in ("leveller_pb2.py", "leveller_pb2.pyi"):
        fresh = (tmp_path / "leveller/rpc" / name).read_text()
        assert fresh == (ROOT / "leveller/rpc" / name).read_text(), f"{name} is stale: run scripts/gen-proto.sh"


@pytest.fixture
def address(served: tuple[Controller, str]) -> str:
    return served[1]


@pytest.fixture
def served() -> Iterator[tuple[Controller, str]]:
    ctl = Controller(SingleLinkPaths("s1>s2"), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=30.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    try:
        yield ctl, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def call(address: str, method: str, body: bytes) -> tuple[grpc.StatusCode, bytes | str]:
    """A raw call signed as the proto file's comment says; (code, reply bytes or error details)."""
    with grpc.insecure_channel(address) as ch:
        try:
            out = ch.unary_unary(method)(body, timeout=5, metadata=auth.metadata(SECRET, method, time.time(), body))
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, out


def report(host: str = "h1", seq: int = 1, sport: int = 40000) -> Report:
    key = KEY._replace(sport=sport)
    return Report(host, (JobReport("j1", 5, time.time() - 10, 1.0, ((5, time.time() - 1),)),),
                  (FlowReport(key, "j1", 1000),), "00112233aabbccdd", seq, ((0, 8, 900),))


def test_protobuf_report_gets_protobuf_levels_and_status(served: tuple[Controller, str]) -> None:
    ctl, address = served
    assert call(address, REPORT, report_to_proto(report()))[0] == grpc.StatusCode.OK
    ctl.step(time.time())
    code, out = call(address, REPORT, report_to_proto(report(seq=2)))
    assert code == grpc.StatusCode.OK, out
    assert isinstance(out, bytes)
    reply = reply_from_proto(out, ["j1"])
    assert [(f.key, f.job) for f in reply.flows] == [(KEY, "j1")] and reply.dscp_by_level and reply.mode == "enforce"
    code, out = call(address, STATUS, b"")  # an empty StatusRequest
    assert code == grpc.StatusCode.OK, out
    status = pb.StatusReply.FromString(out)
    assert [a.host for a in status.agents] == ["h1"] and [j.job for j in status.jobs] == ["j1"]
    assert status.jobs[0].iterations == 5 and status.policy == "leveller" and status.levels == 2
    assert status.flows[0].flow == KEY.label() and status.flows[0].bytes == 1000
    assert status.flows[0].HasField("level") and list(status.flows[0].links) == ["s1>s2"] and status.order == ["j1"]
    with ControllerClient(address, SECRET) as client:  # JSON on the same path still works
        assert client.status()["agents"][0]["host"] == "h1"


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda m: m.flows[0].__setattr__("dport", 70000), "flows[0].dport"),
    (lambda m: m.flows[0].__setattr__("src", "10.0.0.256"), "flows[0]"),
    (lambda m: m.flows[0].__setattr__("job", "nope"), "flows[0].job"),
    (lambda m: m.jobs[0].__setattr__("ideal_time", float("nan")), "jobs[0].ideal_time"),
    (lambda m: m.jobs[0].recent[0].__setattr__("iteration", 9), "jobs[0].recent[0][0]"),
    (lambda m: m.flows_dscp[0].__setattr__("dscp", 64), "flows_dscp[0][1]"),
    (lambda m: m.__setattr__("host", ""), "host"),
    (lambda m: m.__setattr__("run", "XYZ"), "run"),
])
def test_bad_protobuf_field_is_invalid_argument_naming_it(address: str, mutate, field: str) -> None:
    msg = pb.ReportRequest.FromString(report_to_proto(report()))
    mutate(msg)
    code, details = call(address, REPORT, msg.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and str(details).startswith(f"{field}:"), (code, details)
    code, out = call(address, STATUS, b"")
    assert code == grpc.StatusCode.OK and not pb.StatusReply.FromString(out).agents


def test_garbage_and_unsigned_protobuf_are_refused(address: str) -> None:
    code, details = call(address, REPORT, b"\x0a\xff")  # a truncated string field
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "leveller.v1.ReportRequest" in str(details)
    with grpc.insecure_channel(address) as ch, pytest.raises(grpc.RpcError) as err:
        ch.unary_unary(STATUS)(b"", timeout=5)  # no HMAC: auth is unchanged for protobuf clients
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_serves_without_the_secret(address: str) -> None:
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "leveller.v1.Controller"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_protobuf_watch(served: tuple[Controller, str]) -> None:
    ctl, address = served
    assert call(address, REPORT, report_to_proto(report()))[0] == grpc.StatusCode.OK
    ctl.step(time.time())
    watch = "/leveller.v1.Controller/Watch"
    code, out = call(address, watch, pb.WatchRequest(host="h1", epoch=0, wait_s=1).SerializeToString())
    assert code == grpc.StatusCode.OK, out
    assert [f.key for f in reply_from_proto(out, ["j1"]).flows] == [KEY]
    code, details = call(address, watch, pb.WatchRequest(host="h1", epoch=0, wait_s=99).SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and str(details).startswith("wait_s:"), details


@pytest.mark.parametrize("leader_epoch", [0, 1, 42, 2**40])
def test_protobuf_levels_carry_the_leader_epoch(leader_epoch: int) -> None:
    """A protobuf agent fences by the epoch like a JSON one: LevelsReply carries it both ways."""
    from leveller.model.messages import LevelsReply
    from leveller.rpc.protowire import reply_to_proto

    reply = LevelsReply(epoch=7, lease_s=2.0, dscp_by_level=(0, 8), flows=(), leader_epoch=leader_epoch)
    assert pb.LevelsReply.FromString(reply_to_proto(reply)).leader_epoch == leader_epoch
    assert reply_from_proto(reply_to_proto(reply)).leader_epoch == leader_epoch
