"""gRPC server and client for the controller service (generic handlers, raw bytes).

Service ``leveller.v1.Controller`` (leveller/rpc/leveller.proto), unary methods:
  Report: Report -> LevelsReply   (an agent's jobs and flows; the levels for its flows)
  Status: {"v": 1} -> status dict (what `leveller status` shows)
  Watch:  leveller.rpc.push
Each method takes JSON (our agents and `leveller status`, leveller.rpc.schema) or protobuf (any
gRPC client, leveller.rpc.protowire), told apart by the body's first byte; the server also runs
server reflection and grpc.health.v1, so grpcurl works without our code.
Requests are authenticated before they are decoded; rejected requests get
UNAUTHENTICATED or INVALID_ARGUMENT with the field in the message, and the
handler is not called (so nothing changes). Each client numbers its reports
under a random run id; a report not newer than the last one accepted from its
host (a replay) is refused UNAUTHENTICATED (leveller.rpc.replay). Oversize messages are refused by
gRPC itself (RESOURCE_EXHAUSTED) through max message length options. At 1,000 agents the server
remembers, per host, the text of its validated flow entries and the encoding of its levels
(schema.ReportDecoder, schema.ReplyEncoder): same results and errors, a fraction of the work.

Roles. With the shared secret there is one: every holder may report for any host and read the
status. Under mutual TLS (leveller.rpc.tls) the certificate decides: a host's certificate may
Report, ReportStream and Watch for the host it names and nothing else (not Status); the admin
certificate may read Status and nothing else (a report for host "admin" or "controller" is
refused); PERMISSION_DENIED otherwise, counted as leveller_requests_rejected_total{reason="identity"}.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import grpc

from leveller.codec import SchemaError, decode, encode, encode_in_chunks
from leveller.controller.leadership import NotLeader
from leveller.model.errors import CallFailed
from leveller.model.limits import MAX_MESSAGE_BYTES
from leveller.rpc import auth, protowire
from leveller.rpc import leveller_pb2 as pb
from leveller.rpc.loopserver import LoopServer, Refused, method, stream_method
from leveller.rpc.push import watch_methods
from leveller.rpc.replay import ReplayError, ReplayGuard, new_run_id
from leveller.rpc.schema import (
    VERSION,
    LevelsReply,
    ReplyEncoder,
    Report,
    ReportDecoder,
    reply_from_wire,
    report_to_wire,
)
from leveller.rpc.tls import TlsConfig, channel, server_credentials
from leveller.rpc.wire import REPORT, REPORT_STREAM, SERVICE, STATUS, check_admin_peer, check_peer, client_options
from leveller.rpc.wire import server_options as _options

__all__ = ["REPORT", "REPORT_STREAM", "SERVICE", "STATUS", "ControllerClient", "ControllerHandler", "ExtraMethods",
           "ReportStream", "RpcFailure", "client_options", "serve"]

Clock = Callable[[], float]
Metadata = tuple[tuple[str, str], ...]
# the caller's methods of the service beyond Report, ReportStream and Status, made once the server exists
ExtraMethods = Callable[[LoopServer], Mapping[str, "grpc.RpcMethodHandler[bytes, bytes]"]]


class ControllerHandler(Protocol):
    """What the RPC layer needs from the controller (raise SchemaError to reject with no change)."""

    def report(self, report: Report, now: float) -> LevelsReply: ...

    def status(self, now: float) -> dict[str, Any]: ...


class RpcFailure(CallFailed):
    """A call that failed: ``code`` is the grpc.StatusCode (None for a bad reply signature/schema)."""

    def __init__(self, code: grpc.StatusCode | None, details: str) -> None:
        super().__init__(f"{code.name if code else 'BAD_REPLY'}: {details}")
        self.code = code
        self.details = details


def _let_others_run() -> None:
    time.sleep(0)  # releases the interpreter lock: a waiting thread (a report) runs


def _reply_method(method: str) -> str:
    return method + "#reply"


class _Service:
    """The calls' work, synchronous: a refused call raises Refused (leveller.rpc.loopserver)."""

    def __init__(self, handler: ControllerHandler, secret: bytes | None, clock: Clock, max_bytes: int,
                 on_reject: Callable[[str], None] | None, tls: bool = False) -> None:
        self.handler, self.secret, self.clock, self.max_bytes = handler, secret, clock, max_bytes
        self.tls = tls  # mutual TLS: a report's host must be named in the peer's certificate
        self.on_reject = on_reject or (lambda reason: None)
        self.replay = ReplayGuard()
        self.decode_report = ReportDecoder(max_bytes)  # remembers each host's flow entries (schema.ReportDecoder)
        self.encode_reply = ReplyEncoder()  # and the encoding of its levels

    def _call(self, method: str, body: bytes, md: Mapping[str, str | bytes],
              work: Callable[[bytes, float, float], dict[str, Any] | bytes]) -> tuple[bytes, Metadata]:
        """(reply, its trailing metadata) of a call whose invocation metadata is ``md``. Touches no gRPC
        context, so it may run in the blocking pool; the caller sets the metadata on the loop."""
        now = self.clock()
        try:
            sent_at = auth.verify(self.secret, method, body, md, now)
        except auth.AuthError as exc:
            self.on_reject("auth")
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        try:
            out = work(body, now, sent_at)
            out = out if isinstance(out, bytes) else encode(out)
        except SchemaError as exc:
            self.on_reject("invalid")
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        except ReplayError as exc:
            self.on_reject("replay")
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        except NotLeader as exc:  # a standby (--etcd): "not the leader; the leader is X", which agents follow
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return out, auth.metadata(self.secret, _reply_method(method), now, out)

    def report(self, body: bytes, context: grpc.ServicerContext) -> bytes:
        """Report, on the event loop (the TLS peer check reads the context)."""
        out, trailing = self._report(REPORT, body, dict(context.invocation_metadata()), context)
        context.set_trailing_metadata(trailing)
        return out

    def report_message(self, message: bytes, context: grpc.ServicerContext) -> bytes:
        """One message of ReportStream (a SignedMessage), on the event loop: the report in its body, signed
        in the message itself, answered by a SignedMessage of the reply."""
        try:
            env = pb.SignedMessage.FromString(message)
        except Exception:  # protobuf's DecodeError (any malformed message): nothing is decoded further
            self.on_reject("invalid")
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "(message): not a leveller.v1.SignedMessage") from None
        md = {auth.TIME_KEY: env.time, auth.SIGNATURE_KEY: env.mac} if env.time or env.mac else {}
        out, trailing = self._report(REPORT_STREAM, env.body, md, context)
        signed = dict(trailing)
        return pb.SignedMessage(body=out, time=signed.get(auth.TIME_KEY, ""),
                                mac=signed.get(auth.SIGNATURE_KEY, "")).SerializeToString()

    def _report(self, method: str, body: bytes, md: Mapping[str, str | bytes],
                context: grpc.ServicerContext) -> tuple[bytes, Metadata]:
        json = protowire.is_json(body)  # our agents: JSON; any other gRPC client: protobuf

        def work(body: bytes, now: float, sent_at: float) -> bytes:
            report = self.decode_report(body) if json else protowire.report_from_proto(body)
            if self.tls:
                check_peer(context, report.host, self.on_reject)
            # a report refused by the handler afterwards still used up its number: harmless, the next is higher
            self.replay.admit(report.host, report.run, report.seq, sent_at, now)
            reply = self.handler.report(report, now)
            return self.encode_reply(report.host, reply) if json else protowire.reply_to_proto(reply)
        return self._call(method, body, md, work)

    def status(self, body: bytes, md: Mapping[str, str | bytes]) -> tuple[bytes, Metadata]:
        """Status: (reply, trailing metadata), without the gRPC context (it runs in the blocking pool:
        the status of 100,000 flows takes a while to build and encode)."""
        def work(body: bytes, now: float, sent_at: float) -> dict[str, Any] | bytes:
            if not protowire.is_json(body):
                protowire.check_status_request(body)
                return protowire.status_to_proto(self.handler.status(now))
            if decode(body, self.max_bytes) != {"v": VERSION}:
                raise SchemaError("(body)", f"a status request is {{\"v\": {VERSION}}}")
            # the flows a few hundred at a time, handing the interpreter lock to the reports in between
            return encode_in_chunks(self.handler.status(now), "flows", _let_others_run)
        return self._call(STATUS, body, md, work)


def serve(handler: ControllerHandler, address: str, secret: bytes | None, clock: Clock = time.time,
          max_message_bytes: int = MAX_MESSAGE_BYTES, threads: int = 16,
          on_reject: Callable[[str], None] | None = None, tls: TlsConfig | None = None,
          replay: ReplayGuard | None = None, extra: ExtraMethods | None = None) -> tuple[LoopServer, int]:
    """Start the service on ``address`` (``host:port``, port 0 = any); returns (server, bound port).

    The server is grpc.aio on a thread of its own (leveller.rpc.loopserver): reports are answered on its
    event loop; Status and Watch run in a pool of ``threads``. ``on_reject(reason)`` is called for each
    refused request ("auth", "invalid" or "identity"). ``extra(server)`` gives the caller's further
    methods (name -> handler); without it, a handler with ``wait_levels`` also serves Watch
    (leveller.rpc.push.watch_methods) to up to ``threads - 4`` agents. With ``tls``, mutual TLS (leveller.rpc.tls);
    ``secret`` may then be None. A handler with ``use_report_thread`` (the Controller) is given
    ``LoopServer.call``: its decision steps run their Python pieces on the loop, between reports."""
    if secret is None and tls is None:
        raise ValueError("a shared secret or mutual TLS is required")
    svc = _Service(handler, secret, clock, max_message_bytes, on_reject, tls=tls is not None)
    if replay is not None:  # the caller's replay memory (leveller.controller.ha keeps it in etcd)
        svc.replay = replay
    server = LoopServer(_options(max_message_bytes), blocking_threads=threads)
    try:
        async def report(body: bytes, context: Any) -> bytes:
            return svc.report(body, context)

        async def status(body: bytes, context: Any) -> bytes:
            if tls is not None:  # roles: the admin reads the status, hosts report
                check_admin_peer(context, svc.on_reject)
            out, trailing = await server.in_pool(svc.status, body, dict(context.invocation_metadata()))
            context.set_trailing_metadata(trailing)  # on the loop: the context is the loop's
            return out

        methods: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
            "Report": method(report), "ReportStream": stream_method(svc.report_message), "Status": method(status)}
        if extra is None:
            extra = watch_methods(handler, secret, clock, max_message_bytes, on_reject, threads, tls is not None)
        methods.update(extra(server))
        server.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
        server.run(_add_health_and_reflection(server.server))
        port = (server.server.add_insecure_port(address) if tls is None
                else server.server.add_secure_port(address, server_credentials(tls)))
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        server.start()
    except BaseException:
        server.stop(grace=None)
        raise
    use_report_thread = getattr(handler, "use_report_thread", None)
    if use_report_thread is not None:  # the controller's steps run their Python pieces on the loop
        use_report_thread(server.call)
    return server, port


async def _add_health_and_reflection(server: grpc.aio.Server) -> None:
    """grpc.health.v1 (SERVING for "" and SERVICE) and server reflection, so grpcurl and clients that know
    nothing of our code find the service. Both are open (no HMAC; under mutual TLS the handshake still
    needs a client certificate): they reveal the schema and liveness only, not jobs or levels."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    checker = health.aio.HealthServicer()
    for name in ("", SERVICE):
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)


class ReportStream:
    """The client's end of one ReportStream call: a message out, its reply back, one at a time.

    The call has no deadline (it lives as long as the agent); each exchange waits at most ``timeout_s``
    for its reply, read by a thread of the stream's own. A call that fails, ends or times out is cancelled
    and dropped (a late reply can never answer the next report); the next exchange opens a new one."""

    _END = object()

    def __init__(self, open_call: Callable[[Iterator[bytes]], Any]) -> None:
        self._open = open_call
        self._call: Any = None
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._replies: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def exchange(self, message: bytes, timeout_s: float) -> bytes:
        """The reply to ``message``; grpc.RpcError as a unary call raises it (DEADLINE_EXCEEDED after
        ``timeout_s``)."""
        if self._call is None:
            self._start()
        self._requests.put(message)
        try:
            reply = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise _StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no reply on the report stream in {timeout_s:g} s") \
                from None
        if isinstance(reply, bytes):
            return reply
        self.close()
        if isinstance(reply, grpc.RpcError):
            raise reply
        raise _StreamError(grpc.StatusCode.UNAVAILABLE, "the controller ended the report stream")

    def _start(self) -> None:
        # this call's own queues: a dropped call's late reply lands in its old queue, never in the next one
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = self._open(iter(requests.get, self._END))

        def read() -> None:
            try:
                for reply in call:
                    replies.put(reply)
                replies.put(self._END)
            except grpc.RpcError as exc:
                replies.put(exc)

        threading.Thread(target=read, name="report-stream", daemon=True).start()
        self._call, self._requests, self._replies = call, requests, replies

    def close(self) -> None:
        if self._call is not None:
            self._requests.put(self._END)
            self._call.cancel()
            self._call = None


class _StreamError(grpc.RpcError):
    """A ReportStream failure noticed on this side (no reply in time, the stream ended)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class ControllerClient:
    """Client of the controller service; every reply's signature is checked before it is decoded.

    Reports go on one ReportStream call (a unary Report each to a controller that does not know the
    stream method). Reports are numbered under ``run`` by ``seq`` (replay protection,
    leveller.rpc.replay); clients of several controllers share both (leveller.rpc.failover)."""

    def __init__(self, address: str, secret: bytes | None, timeout_s: float = 5.0, clock: Clock = time.time,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, run: str | None = None,
                 seq: Iterator[int] | None = None, tls: TlsConfig | None = None) -> None:
        self.address, self.secret, self.timeout_s, self.clock = address, secret, timeout_s, clock
        self.max_bytes = max_message_bytes
        self.run = run or new_run_id()
        self._seq = seq or itertools.count(1)
        self._channel = channel(address, tls, client_options(max_message_bytes))
        self._report: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(REPORT)
        self._status: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(STATUS)
        stream: grpc.StreamStreamMultiCallable[bytes, bytes] = self._channel.stream_stream(REPORT_STREAM)
        self._stream: ReportStream | None = ReportStream(stream)
        self._lock = threading.Lock()  # one report at a time on the stream

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._channel.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _streamed(self, body: bytes) -> dict[str, Any] | None:
        """The decoded reply to a report sent on the stream; None if the controller has no ReportStream
        (then this client uses unary calls from now on)."""
        assert self._stream is not None
        now = self.clock()
        md = dict(auth.metadata(self.secret, REPORT_STREAM, now, body))
        message = pb.SignedMessage(body=body, time=md.get(auth.TIME_KEY, ""), mac=md.get(auth.SIGNATURE_KEY, ""))
        try:
            raw = self._stream.exchange(message.SerializeToString(), self.timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._stream = None
                return None
            raise RpcFailure(exc.code(), exc.details() or "") from None
        try:
            env = pb.SignedMessage.FromString(raw)
            signed = {auth.TIME_KEY: env.time, auth.SIGNATURE_KEY: env.mac} if env.time or env.mac else {}
            auth.verify(self.secret, _reply_method(REPORT_STREAM), env.body, signed, self.clock())
            return decode(env.body, self.max_bytes)
        except Exception as exc:  # a bad signature, a bad reply, a message that is no SignedMessage
            self._stream.close()
            raise RpcFailure(None, f"reply from {self.address} refused: {exc}") from None

    def _call(self, stub: Any, method: str, message: dict[str, Any], body: bytes | None = None) -> dict[str, Any]:
        body = encode(message) if body is None else body
        now = self.clock()
        try:
            out, call = stub.with_call(body, timeout=self.timeout_s,
                                       metadata=auth.metadata(self.secret, method, now, body))
        except grpc.RpcError as exc:
            raise RpcFailure(exc.code(), exc.details() or "") from None
        try:
            auth.verify(self.secret, _reply_method(method), out, dict(call.trailing_metadata() or ()), self.clock())
            return decode(out, self.max_bytes)
        except (auth.AuthError, SchemaError) as exc:
            raise RpcFailure(None, f"reply from {self.address} refused: {exc}") from None

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        """Send a report; returns the validated levels (refusing levels for jobs not in ``known_jobs``)."""
        with self._lock:
            numbered = dataclasses.replace(report, run=self.run, seq=next(self._seq))
            body = encode(report_to_wire(numbered))
            msg = self._streamed(body) if self._stream is not None else None
            if msg is None:
                msg = self._call(self._report, REPORT, report_to_wire(numbered), body)
        try:
            return reply_from_wire(msg, known_jobs)
        except SchemaError as exc:
            raise RpcFailure(None, f"reply from {self.address} refused: {exc}") from None

    def status(self) -> dict[str, Any]:
        return self._call(self._status, STATUS, {"v": VERSION})
