"""Real gRPC server and client on loopback: authentication, validation, size limits, no state change."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from leveller.codec import encode
from leveller.rpc import auth
from leveller.rpc.schema import FlowLevel, report_to_wire
from leveller.rpc.transport import REPORT, ControllerClient, RpcFailure
from tests.helpers.rpc import KEY, SECRET, RecordingHandler, report, serving


@pytest.fixture
def server() -> Iterator[tuple[RecordingHandler, str]]:
    with serving() as served:
        yield served


def raw_call(address: str, body: bytes, metadata: tuple[tuple[str, str], ...]) -> grpc.StatusCode:
    return raw_call_details(address, body, metadata)[0]


def raw_call_details(address: str, body: bytes, metadata: tuple[tuple[str, str], ...]) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(address) as ch:
        try:
            ch.unary_unary(REPORT).with_call(body, timeout=5, metadata=metadata)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_report_gets_levels(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    with ControllerClient(address, SECRET) as client:
        reply = client.report(report(), known_jobs={"j1"})
        assert client.status() == {"reports": 1}
    assert reply.flows == (FlowLevel(KEY, "j1", 1),)
    assert reply.lease_s == 2.0 and reply.dscp_by_level == (0, 8)
    assert handler.reports[0].jobs[0].iterations == 3


def test_wrong_secret_is_unauthenticated_and_changes_nothing(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    with ControllerClient(address, b"wrong-secret-0123456789") as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report())
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "signature" in info.value.details
    assert handler.reports == []
    assert raw_call(address, encode(report_to_wire(report())), ()) == grpc.StatusCode.UNAUTHENTICATED
    assert handler.reports == []


def signed(body: bytes) -> tuple[tuple[str, str], ...]:
    return auth.metadata(SECRET, REPORT, time.time(), body)


@pytest.mark.parametrize("old,new,needle", [
    (b'"iterations":3', b'"iterations":-1', "jobs[0].iterations"),
    (b'"ideal_time":1.0', b'"ideal_time":NaN', "NaN"),
    (b'"dport":47000', b'"dport":"47000"', "flows[0].dport"),
])
def test_invalid_report_names_the_field(server: tuple[RecordingHandler, str], old: bytes, new: bytes,
                                        needle: str) -> None:
    handler, address = server
    body = encode(report_to_wire(report()))
    assert old in body
    body = body.replace(old, new)
    with grpc.insecure_channel(address) as ch:
        with pytest.raises(grpc.RpcError) as info:
            ch.unary_unary(REPORT).with_call(body, timeout=5, metadata=signed(body))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()
    assert handler.reports == []


def test_semantic_rejection_by_handler(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    with ControllerClient(address, SECRET) as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report("bad"))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and "host" in info.value.details
    assert handler.reports == []


def test_oversize_message_is_refused(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    body = encode({"v": 1, "host": "h1", "jobs": [], "flows": [], "pad": "x" * 100_000})
    assert raw_call(address, body, signed(body)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert handler.reports == []


def test_client_refuses_levels_for_unknown_job(server: tuple[RecordingHandler, str]) -> None:
    _, address = server
    with ControllerClient(address, SECRET) as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report(), known_jobs={"other"})
    assert info.value.code is None and "flows[0].job" in info.value.details


def test_unreachable_controller_is_unavailable() -> None:
    with ControllerClient("127.0.0.1:1", SECRET, timeout_s=2) as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report())
    assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_replayed_report_is_refused_and_a_restarted_agent_is_accepted(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    first = encode(report_to_wire(report(iterations=500, run="aaaaaaaaaaaaaaaa", seq=1)))
    first_md = signed(first)
    second = encode(report_to_wire(report(iterations=600, run="aaaaaaaaaaaaaaaa", seq=2)))
    second_md = signed(second)
    assert raw_call(address, first, first_md) == grpc.StatusCode.OK
    assert raw_call(address, second, second_md) == grpc.StatusCode.OK
    code, details = raw_call_details(address, first, first_md)  # captured and replayed: same bytes, same MAC
    assert code == grpc.StatusCode.UNAUTHENTICATED and "not newer" in details, details
    assert [r.jobs[0].iterations for r in handler.reports] == [500, 600]

    with ControllerClient(address, SECRET) as restarted:  # a new agent process: new run id, numbering from 1
        restarted.report(report(iterations=700))
        code, details = raw_call_details(address, second, second_md)  # the old run's newest report, replayed
        assert code == grpc.StatusCode.UNAUTHENTICATED and "earlier run" in details, details
        restarted.report(report(iterations=701))
    assert [r.jobs[0].iterations for r in handler.reports] == [500, 600, 700, 701]
    assert len({r.run for r in handler.reports[2:]}) == 1 and handler.reports[2].run != "aaaaaaaaaaaaaaaa"
    assert [r.seq for r in handler.reports[2:]] == [1, 2]
