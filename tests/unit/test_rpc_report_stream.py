"""ReportStream on a real gRPC server on loopback: every message signed and checked on its own, answered
in order; a refused message ends the stream with a unary call's status; the client falls back to unary
Report against a controller without the stream method and drops a stream that does not answer in time."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from leveller.codec import decode, encode
from leveller.rpc import auth
from leveller.rpc import leveller_pb2 as pb
from leveller.rpc.protowire import reply_from_proto, report_to_proto
from leveller.rpc.schema import FlowLevel, reply_to_wire, report_from_wire, report_to_wire
from leveller.rpc.transport import REPORT, REPORT_STREAM, SERVICE, ControllerClient, RpcFailure
from tests.helpers.rpc import KEY, SECRET, RecordingHandler, report, serving
from tests.helpers.wait import wait_until


@pytest.fixture
def server() -> Iterator[tuple[RecordingHandler, str]]:
    with serving() as served:
        yield served


def signed(body: bytes, secret: bytes | None = SECRET, method: str = REPORT_STREAM,
           at: float | None = None) -> bytes:
    md = dict(auth.metadata(secret, method, time.time() if at is None else at, body))
    return pb.SignedMessage(body=body, time=md.get(auth.TIME_KEY, ""),
                            mac=md.get(auth.SIGNATURE_KEY, "")).SerializeToString()


def exchange(address: str, messages: list[bytes]) -> tuple[list[pb.SignedMessage], grpc.StatusCode, str]:
    """Send ``messages`` on one raw ReportStream, one after the other's reply: (replies, final code, details)."""
    replies: list[pb.SignedMessage] = []
    with grpc.insecure_channel(address) as ch:
        call = ch.stream_stream(REPORT_STREAM)(iter(messages), timeout=10)
        try:
            for raw in call:
                replies.append(pb.SignedMessage.FromString(raw))
        except grpc.RpcError as exc:
            return replies, exc.code(), exc.details() or ""
    return replies, grpc.StatusCode.OK, ""


def body(seq: int, host: str = "h1", iterations: int = 3) -> bytes:
    return encode(report_to_wire(report(host=host, iterations=iterations, seq=seq)))


def test_reports_on_one_stream_are_answered_in_order_each_reply_signed(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    replies, code, _ = exchange(address, [signed(body(seq, iterations=seq)) for seq in (1, 2, 3)])
    assert code == grpc.StatusCode.OK and len(replies) == 3
    for n, reply in enumerate(replies, 1):
        auth.verify(SECRET, REPORT_STREAM + "#reply", reply.body,
                    {auth.TIME_KEY: reply.time, auth.SIGNATURE_KEY: reply.mac}, time.time())
        assert decode(reply.body)["epoch"] == n  # the handler's n-th answer
    assert [r.jobs[0].iterations for r in handler.reports] == [1, 2, 3]
    with pytest.raises(auth.AuthError):  # a reply's signature is for the stream's reply, not a unary one
        auth.verify(SECRET, REPORT + "#reply", replies[0].body,
                    {auth.TIME_KEY: replies[0].time, auth.SIGNATURE_KEY: replies[0].mac}, time.time())


# each message is signed when the test runs (signed at collection, it would be stale 300 s into a long session)
REFUSED: list[tuple[Callable[[], bytes], grpc.StatusCode, str]] = [
    (lambda: signed(body(1), b"wrong-secret-0123456789"), grpc.StatusCode.UNAUTHENTICATED, "signature does not match"),
    (lambda: signed(body(1), None), grpc.StatusCode.UNAUTHENTICATED, "missing x-leveller-mac"),
    (lambda: signed(body(1), method=REPORT), grpc.StatusCode.UNAUTHENTICATED, "signature does not match"),  # unary's
    (lambda: signed(body(1), at=time.time() - 3600), grpc.StatusCode.UNAUTHENTICATED, "from this host's clock"),
    (lambda: b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "not a leveller.v1.SignedMessage"),
    (lambda: signed(body(1).replace(b'"dport":47000', b'"dport":70000')), grpc.StatusCode.INVALID_ARGUMENT,
     "flows[0].dport"),
    (lambda: signed(body(1, host="bad")), grpc.StatusCode.INVALID_ARGUMENT, "'bad' is refused"),
]


@pytest.mark.parametrize("message, code, text", REFUSED)
def test_a_refused_message_ends_the_stream_with_its_status_and_changes_nothing(
        server: tuple[RecordingHandler, str], message: Callable[[], bytes], code: grpc.StatusCode, text: str) -> None:
    handler, address = server
    replies, got, details = exchange(address, [signed(body(1)), message(), signed(body(3))])
    assert (len(replies), got) == (1, code) and text in details
    assert len(handler.reports) == 1  # the first report only: the refused one and the one after changed nothing


def test_a_replayed_message_is_refused_on_the_stream(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    first = signed(body(1))
    replies, code, details = exchange(address, [first, first])
    assert (len(replies), code) == (1, grpc.StatusCode.UNAUTHENTICATED) and "not newer" in details
    _, code, _ = exchange(address, [first])  # on another stream too
    assert code == grpc.StatusCode.UNAUTHENTICATED and len(handler.reports) == 1


def test_a_protobuf_report_on_the_stream_gets_a_protobuf_reply(server: tuple[RecordingHandler, str]) -> None:
    _, address = server
    replies, code, _ = exchange(address, [signed(report_to_proto(report()))])
    assert code == grpc.StatusCode.OK
    assert reply_from_proto(replies[0].body).flows == (FlowLevel(KEY, "j1", 1),)


def test_the_client_reports_on_one_stream(server: tuple[RecordingHandler, str]) -> None:
    handler, address = server
    with ControllerClient(address, SECRET) as client:
        for _ in range(3):
            assert client.report(report(), known_jobs={"j1"}).flows == (FlowLevel(KEY, "j1", 1),)
        assert client._stream is not None and client._stream._call is not None  # the path taken
    assert [r.seq for r in handler.reports] == [1, 2, 3]


def _unary_only_server(handler: RecordingHandler) -> tuple[grpc.Server, str]:
    """An older controller: Report only, as a unary method with the same signing."""
    from concurrent import futures

    def report_call(body: bytes, context: grpc.ServicerContext) -> bytes:
        auth.verify(SECRET, REPORT, body, dict(context.invocation_metadata()), time.time())
        out = encode(reply_to_wire(handler.report(report_from_wire(decode(body)), time.time())))
        context.set_trailing_metadata(auth.metadata(SECRET, REPORT + "#reply", time.time(), out))
        return out

    srv = grpc.server(futures.ThreadPoolExecutor(2))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Report": grpc.unary_unary_rpc_method_handler(report_call)}),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    return srv, f"127.0.0.1:{port}"


def test_a_controller_without_the_stream_gets_unary_reports() -> None:
    handler = RecordingHandler()
    srv, address = _unary_only_server(handler)
    try:
        with ControllerClient(address, SECRET) as client:
            for _ in range(2):
                assert client.report(report(), known_jobs={"j1"}).flows == (FlowLevel(KEY, "j1", 1),)
            assert client._stream is None  # told UNIMPLEMENTED once, unary since
    finally:
        srv.stop(None)
    assert [r.seq for r in handler.reports] == [1, 2]


@contextlib.contextmanager
def stream_server(stream_call: Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[bytes]]) -> Iterator[str]:
    """A server whose ReportStream is ``stream_call`` (nothing else): its address."""
    from concurrent import futures

    srv = grpc.server(futures.ThreadPoolExecutor(4))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"ReportStream": grpc.stream_stream_rpc_method_handler(stream_call)}),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        srv.stop(None)


def test_a_stream_that_does_not_answer_in_time_is_dropped_and_the_next_report_opens_another() -> None:
    opened: list[int] = []
    hold = threading.Event()

    def stream_call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        opened.append(1)
        for raw in requests:
            if len(opened) == 1:
                hold.wait(5)  # the first stream never answers in time
                return
            env = pb.SignedMessage.FromString(raw)
            out = encode({"v": 1, "epoch": 7, "lease_s": 2.0, "decision_age_s": 0.0, "dscp_by_level": [0, 8],
                          "flows": []})
            assert env.body  # a report
            md = dict(auth.metadata(SECRET, REPORT_STREAM + "#reply", time.time(), out))
            yield pb.SignedMessage(body=out, time=md[auth.TIME_KEY], mac=md[auth.SIGNATURE_KEY]).SerializeToString()

    with stream_server(stream_call) as address, ControllerClient(address, SECRET, timeout_s=0.5) as client:
        t0 = time.monotonic()
        with pytest.raises(RpcFailure) as info:
            client.report(report(), known_jobs={"j1"})
        assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - t0 < 3
        hold.set()
        assert client.report(report(), known_jobs={"j1"}).epoch == 7  # on a new stream
    assert len(opened) == 2


def test_a_reply_with_a_bad_signature_is_refused_and_the_stream_dropped() -> None:
    def stream_call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        for _ in requests:
            yield pb.SignedMessage(body=b'{"v":1}', time=f"{time.time():.6f}", mac="00" * 32).SerializeToString()

    with stream_server(stream_call) as address, ControllerClient(address, SECRET, timeout_s=2) as client:
        with pytest.raises(RpcFailure) as info:
            client.report(report(), known_jobs={"j1"})
        assert info.value.code is None and "signature does not match" in str(info.value)
        assert client._stream is not None and client._stream._call is None  # dropped


def test_a_late_reply_of_a_dropped_stream_never_answers_the_next_report() -> None:
    """The reply queue belongs to its call: what a cancelled call still delivers goes nowhere."""
    from leveller.rpc.transport import ReportStream

    calls: list[queue.SimpleQueue[bytes]] = []

    class FakeCall:
        def __init__(self, requests: Iterator[bytes]) -> None:
            self.replies: queue.SimpleQueue[bytes] = queue.SimpleQueue()
            calls.append(self.replies)
            self.requests = requests

        def __iter__(self) -> Iterator[bytes]:
            while True:
                reply = self.replies.get()
                if reply == b"end":
                    return
                yield reply

        def cancel(self) -> None:
            self.replies.put(b"end")

    stream = ReportStream(FakeCall)
    with pytest.raises(grpc.RpcError):
        stream.exchange(b"one", 0.2)  # no reply: dropped
    calls[0].put(b"late reply to one")
    threading.Thread(target=lambda: wait_until(lambda: calls[1:], 2, "the second call")[0].put(b"reply to two"),
                     daemon=True).start()  # once exchange opened the new call
    assert stream.exchange(b"two", 2.0) == b"reply to two"


def test_stopping_the_server_under_open_streams_leaves_no_call_half_ended() -> None:
    """A controller stopped while agents keep their streams open ends every call before its loop closes.

    The stop cancels the streams; ending each takes the loop a few more turns. A loop closed before
    them left tasks pending, and their collection printed ``Task was destroyed but it is pending!`` and
    a GeneratorExit traceback later, into whatever ran then (a CI run: the next test's stderr)."""
    import asyncio

    from leveller.rpc.transport import serve

    for _ in range(10):  # before the fix, 1-8 of 8 calls were left in some of 5 rounds
        srv, port = serve(RecordingHandler(), "127.0.0.1:0", SECRET)
        clients = [ControllerClient(f"127.0.0.1:{port}", SECRET) for _ in range(8)]
        try:
            for n, client in enumerate(clients):
                assert client.report(report(host=f"h{n}"), known_jobs={"j1"}).flows  # the stream is open
            srv.stop(grace=None)
            left = [t for t in asyncio.all_tasks(srv._loop) if not t.done()]
            assert not left, [t.get_name() for t in left]
        finally:
            srv.stop(grace=None)
            for client in clients:
                client.close()
