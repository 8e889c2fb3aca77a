"""Prompt delivery of new levels: the agent long-polls the controller (``Watch``).

With reports alone an agent learns a decision at its next report, i.e. up to
a report interval late. Here an agent keeps one ``Watch`` call open: it says
which decision epoch it has seen, the controller answers as soon as a newer
decision exists (or after ``wait_s`` without one) with the levels of the
flows in that host's last report. Same authentication as every other call
(HMAC of the body in metadata, reply signed in trailing metadata), same
validation of the reply. Each open call holds a server thread, so the number
of concurrent watchers is capped; a refused watcher falls back to reports.

    Watch request  {"v": 1, "host": str, "epoch": int, "wait_s": float}
    Watch reply    LevelsReply (see leveller.rpc.schema)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

import grpc

from leveller.codec import SchemaError, decode, encode
from leveller.model.limits import MAX_MESSAGE_BYTES
from leveller.model.messages import LevelsReply
from leveller.rpc import auth, protowire
from leveller.rpc.loopserver import LoopServer, Refused, method
from leveller.rpc.schema import VERSION, encode_reply, reply_from_wire
from leveller.rpc.tls import channel
from leveller.rpc.wire import MAX_WAIT_S, WATCH, check_peer, client_options, watch_request_from_wire

__all__ = ["MAX_WAIT_S", "WATCH", "LevelsWatcher", "PushSource", "WatchHandler", "watch_method", "watch_methods",
           "watch_request_from_wire"]


class WatchHandler(Protocol):
    """What the Watch method needs from the controller (leveller.controller.service.Controller)."""

    def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> LevelsReply | None:
        """Levels of ``host``'s flows once the epoch differs from ``seen_epoch`` (None: host unknown)."""
        ...


class PushSource(WatchHandler, Protocol):
    """A handler that can also tell of new decisions, so no thread waits per Watch call (the
    controller): ``epoch`` now, a listener called after each decision, the levels of a host now."""

    epoch: int

    def on_decision(self, listener: Callable[[], None]) -> None: ...

    def levels_for(self, host: str) -> LevelsReply | None: ...


class _Wakeups:
    """Watch calls waiting on the server's event loop for a decision newer than theirs.

    The deciding thread calls ``notify``, which only queues ``_wake`` on the loop; the waiters are
    futures of that loop. A decision between a waiter's epoch check and its future's registration is
    not missed: both run on the loop, and ``_wake`` runs after the waiter has registered."""

    def __init__(self, server: LoopServer) -> None:
        self.server = server
        self._waiting: set[asyncio.Future[None]] = set()

    def notify(self) -> None:
        self.server.call_soon(self._wake)

    def _wake(self) -> None:
        for fut in self._waiting:
            if not fut.done():
                fut.set_result(None)
        self._waiting.clear()

    async def levels_after(self, source: PushSource, host: str, seen_epoch: int, wait_s: float) -> LevelsReply | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while source.epoch == seen_epoch:
            left = deadline - loop.time()
            if left <= 0:
                break
            fut: asyncio.Future[None] = loop.create_future()
            self._waiting.add(fut)
            try:
                await asyncio.wait((fut,), timeout=left)
            finally:
                self._waiting.discard(fut)
        return source.levels_for(host)


def watch_method(handler: WatchHandler, secret: bytes | None, server: LoopServer,
                 clock: Callable[[], float] = time.time, max_bytes: int = MAX_MESSAGE_BYTES,
                 on_reject: Callable[[str], None] | None = None, max_watchers: int = 2,
                 tls: bool = False) -> grpc.RpcMethodHandler:
    """The gRPC handler of Watch (register it under SERVICE next to Report and Status). The checks and
    the encoding run on ``server``'s event loop; the wait too when the handler is a PushSource (the
    controller: it wakes the waiting calls after each decision), else in ``server``'s blocking pool."""
    slots = threading.BoundedSemaphore(max_watchers)
    wakeups: _Wakeups | None = None
    if all(hasattr(handler, name) for name in ("on_decision", "levels_for", "epoch")):
        wakeups = _Wakeups(server)
        cast(PushSource, handler).on_decision(wakeups.notify)
    reject = on_reject or (lambda reason: None)

    def request(body: bytes, context: grpc.ServicerContext) -> tuple[bool, str, int, float]:
        try:
            auth.verify(secret, WATCH, body, dict(context.invocation_metadata()), clock())
        except auth.AuthError as exc:
            reject("auth")
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        json = protowire.is_json(body)  # our agents: JSON; any other gRPC client: protobuf
        try:
            host, epoch, wait_s = (watch_request_from_wire(decode(body, max_bytes)) if json
                                   else protowire.watch_request_from_proto(body))
        except SchemaError as exc:
            reject("invalid")
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        if tls:
            check_peer(context, host, reject)
        return json, host, epoch, wait_s

    async def watch(body: bytes, context: grpc.ServicerContext) -> bytes:
        json, host, epoch, wait_s = request(body, context)
        if not slots.acquire(blocking=False):
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{max_watchers} agents already watch; report-driven levels only")
        try:
            reply = (await wakeups.levels_after(cast(PushSource, handler), host, epoch, wait_s) if wakeups
                     else await server.in_pool(handler.wait_levels, host, epoch, wait_s))
        finally:
            slots.release()
        if reply is None:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, f"host {host!r} has not reported yet")
        out = encode_reply(reply) if json else protowire.reply_to_proto(reply)
        context.set_trailing_metadata(auth.metadata(secret, WATCH + "#reply", clock(), out))
        return out

    return method(watch)


def watch_methods(handler: object, secret: bytes | None, clock: Callable[[], float] = time.time,
                  max_bytes: int = MAX_MESSAGE_BYTES, on_reject: Callable[[str], None] | None = None,
                  threads: int = 16, tls: bool = False
                  ) -> Callable[[LoopServer], dict[str, grpc.RpcMethodHandler[bytes, bytes]]]:
    """The ``extra`` methods of leveller.rpc.transport.serve for ``handler``: Watch, to up to
    ``threads - 4`` agents, when the handler has ``wait_levels`` (the controller), else none."""

    def make(server: LoopServer) -> dict[str, grpc.RpcMethodHandler[bytes, bytes]]:
        if not hasattr(handler, "wait_levels") or threads <= 4:
            return {}
        return {"Watch": watch_method(cast(WatchHandler, handler), secret, server, clock, max_bytes, on_reject,
                                      max_watchers=threads - 4, tls=tls)}

    return make


class LevelsWatcher:
    """Agent side: a thread that keeps a Watch open and hands every new reply to ``on_levels``.

    ``address`` is the controller's, or a function giving the one the agent reports to now
    (leveller.rpc.failover.FailoverClient.active): the watcher follows it, starting again from
    epoch 0 (epochs of different controllers are unrelated), and drops a reply that arrives after
    the agent moved on. ``known_jobs()`` gives the jobs of the agent's last report (levels for
    other jobs are refused). Failures back off ``retry_s`` (the report loop still delivers levels
    meanwhile).
    """

    def __init__(self, address: str | Callable[[], str], secret: bytes | None, host: str,
                 on_levels: Callable[[LevelsReply], None], known_jobs: Callable[[], Iterable[str]],
                 wait_s: float = 5.0, retry_s: float = 0.5, clock: Callable[[], float] = time.time,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, tls: Any = None) -> None:
        if not 0 < wait_s <= MAX_WAIT_S:
            raise ValueError(f"wait_s must be in (0, {MAX_WAIT_S}], got {wait_s!r}")
        self._target = address if callable(address) else (lambda: address)
        self.secret, self.host, self.on_levels = secret, host, on_levels
        self.known_jobs, self.wait_s, self.retry_s, self.clock = known_jobs, wait_s, retry_s, clock
        self.max_bytes = max_message_bytes
        self.tls = tls  # leveller.rpc.tls.TlsConfig or None
        self.epoch = 0
        self.last_error: str | None = None
        # clock() when the last Watch reply came out of gRPC, and when it was verified and decoded
        # (`leveller agent --trace-pushes`: where a pushed decision's milliseconds go)
        self.arrived_at = self.decoded_at = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards the channel against close() while it is replaced
        self.address = ""
        self._channel: grpc.Channel | None = None
        self._connect(self._target())
        self._thread = threading.Thread(target=self._loop, name=f"watch-{host}", daemon=True)

    def _connect(self, address: str) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            if self._channel is not None:
                self._channel.close()
            self.address, self.epoch = address, 0
            self._channel = channel(address, self.tls, client_options(self.max_bytes))
            self._call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(WATCH)

    def start(self) -> None:
        self._thread.start()

    def __enter__(self) -> LevelsWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            if self._channel is not None:
                self._channel.close()  # cancels the open call
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.wait_s + 1)

    def poll_once(self) -> LevelsReply:
        """One Watch call (blocks up to wait_s); raises grpc.RpcError, auth.AuthError or SchemaError."""
        body = encode({"v": VERSION, "host": self.host, "epoch": self.epoch, "wait_s": self.wait_s})
        out, call = self._call.with_call(body, timeout=self.wait_s + 5,
                                         metadata=auth.metadata(self.secret, WATCH, self.clock(), body))
        self.arrived_at = self.clock()
        auth.verify(self.secret, WATCH + "#reply", out, dict(call.trailing_metadata() or ()), self.clock())
        reply = reply_from_wire(decode(out, self.max_bytes), self.known_jobs())
        self.epoch = reply.epoch
        self.decoded_at = self.clock()
        return reply

    def _loop(self) -> None:
        while not self._stop.is_set():
            target = self._target()
            if target != self.address:
                self._connect(target)
            try:
                reply = self.poll_once()
            except (grpc.RpcError, auth.AuthError, SchemaError, ValueError) as exc:
                if self._stop.is_set():
                    return
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(self.retry_s)
                continue
            self.last_error = None
            if self._target() == target:  # from the controller the agent still reports to
                self.on_levels(reply)
