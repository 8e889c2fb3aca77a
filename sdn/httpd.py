"""The HTTP server of the SDN app's API: eventlet's WSGI protocol with limits a public port needs.

eventlet's own ``wsgi.server`` bounds single socket reads only, so a client that
opens connections and sends nothing (or one byte at a time) holds a green thread
each, and past the pool size nobody is served. Here:

- a new connection's request line and headers must arrive within ``header_timeout_s``
  (short: a client that is not sending them is holding a slot), later requests of a
  connection that has shown it is a client (its bearer token, or without a token one
  complete request) within ``timeout_s`` (keep-alive); else the connection is closed;
- with a ``token``, ``Authorization: Bearer TOKEN`` is checked as soon as the headers
  are in: a request without it is answered 401 and closed before any of its body is
  read (issue 41: the bearer check used to wrap the app, so a body up to the limit was
  read into memory first);
- the body must arrive within ``timeout_s`` after the headers, else 408;
- a body larger than ``max_body_bytes`` is answered 413 without being read, a
  Content-Length that is not a plain byte count 400 naming it;
- at most ``max_connections`` connections are open: a new one evicts a connection that
  has not shown it is a client yet (connected, or still sending its first headers, or
  refused and closing; the oldest first), else the connection idle the longest (waiting
  for a request), so idle and half-open connections never lock out a real request such
  as GET /health, nor hold the slots of clients that authenticated; only when every
  connection is a client's, busy with a request, is the new one answered 503. Out of file
  descriptors, accepting pauses briefly after evicting a connection instead of stopping
  the server;
- every refusal is counted by reason (:class:`ApiStats`, served as GET /metrics);
- errors never carry a traceback to the client (it is logged).
Everything runs in eventlet green threads of one OS thread; the API hands heavy
work to OS threads itself (sdn.api ``offload``).
"""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import eventlet
from eventlet import greenio, wsgi

from sdn.token import bearer_ok

LOG = logging.getLogger("leveller.sdn.http")
_DIGITS = re.compile(r"[0-9]+")
ERROR_KEY = "leveller.http_error"  # (status line, message) set by the protocol, answered without the app
LINGER_S = 1.0


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    max_body_bytes: int = 4 << 20
    max_connections: int = 512
    header_timeout_s: float = 2.0  # a new connection's first request line and headers

    def __post_init__(self) -> None:
        if (not self.timeout_s > 0 or not self.header_timeout_s > 0 or self.max_body_bytes < 1
                or self.max_connections < 2):
            raise ValueError(f"invalid HTTP limits {self}")


REASONS = ("unauthenticated", "header_timeout", "body_timeout", "too_large", "bad_request", "evicted", "busy")


@dataclass
class ApiStats:
    """What the API server refused, by reason (REASONS: 401 without the token, headers too slow, body
    too slow, too large, malformed, a connection closed to make room for a new one, 503 with every
    connection busy), and the connections open now."""

    refused: Counter[str] = field(default_factory=Counter)
    open: int = 0

    def refuse(self, reason: str) -> None:
        self.refused[reason] += 1

    def prometheus(self) -> bytes:
        """The figures in Prometheus' text format (GET /metrics)."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector

        stats = self

        class Figures(Collector):
            def collect(self) -> Iterable[Any]:
                refused = CounterMetricFamily("leveller_sdn_api_refused", "API connections or requests refused, "
                                              "by reason (" + ", ".join(REASONS) + ")", labels=["reason"])
                for reason in REASONS:
                    refused.add_metric([reason], stats.refused[reason])
                yield refused
                yield GaugeMetricFamily("leveller_sdn_api_connections", "API connections open now", stats.open)

        registry = CollectorRegistry()
        registry.register(Figures())
        return generate_latest(registry)


@dataclass(eq=False)
class _Conn:
    """Our state of one connection, kept as element 3 of eventlet's [address, socket, state]."""

    trusted: bool = False  # a request passed the token check (no token: one complete request)
    in_headers: bool = True  # waiting for or reading a request line and headers
    closing: bool = False  # refused: lingering before the close
    evicted: bool = False  # closed to make room: whatever it sent is not a request



class _Expired(Exception):
    """A deadline of the protocol ran out (raised into the waiting green thread by eventlet.Timeout)."""


class _Protocol(wsgi.HttpProtocol):
    """eventlet's HTTP/1.1 protocol with a header deadline and a bounded, deadline-bound body read."""

    limits: Limits = Limits()
    token: bytes | None = None
    stats: ApiStats = ApiStats()
    _refused = False  # an error was answered before the body was read: linger before closing

    @property
    def _conn(self) -> _Conn:
        return self.conn_state[3] if len(self.conn_state) > 3 else _Conn()

    def finish(self) -> None:
        if self._refused:
            try:
                self.wfile.flush()
            except OSError:
                pass
            _linger(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        conn = self._conn
        conn.in_headers = True
        limit = self.limits.timeout_s if conn.trusted else self.limits.header_timeout_s
        self._headers_due = eventlet.Timeout(limit, _Expired)
        self.raw_requestline = b""
        try:
            super().handle_one_request()
        except _Expired:
            self.close_connection = 1  # request line or headers too slow: drop the connection
            if not conn.trusted or self.raw_requestline:  # (a client's idle keep-alive ending is no refusal)
                self.stats.refuse("header_timeout")
        finally:
            self._headers_due.cancel()
            conn.in_headers = False

    def parse_request(self) -> bool:
        """The stdlib's header parsing, then the bearer token (401), then Content-Length: ASCII digits
        (400 naming it) of a size this server accepts (413), all answered before any of the body is read."""
        conn = self._conn
        if conn.evicted or not super().parse_request():
            self.close_connection = 1
            return False
        if self.token is not None and not bearer_ok(self.headers.get("authorization", ""), self.token):
            self.stats.refuse("unauthenticated")
            return self._answer("401 Unauthorized", "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                                'WWW-Authenticate: Bearer realm="leveller-sdn"\r\n')
        conn.trusted, conn.in_headers = True, False
        length = self.headers.get("content-length")
        if length is None:
            return True
        if not _DIGITS.fullmatch(length):
            self.stats.refuse("bad_request")
            return self._answer("400 Bad Request", f"Content-Length = {length[:40]!r} is invalid; a number of bytes "
                                f"0..{self.limits.max_body_bytes}")
        if len(length) > 18 or int(length) > self.limits.max_body_bytes:
            self.stats.refuse("too_large")
            return self._answer("413 Content Too Large", f"Content-Length = {length[:40]} bytes; at most "
                                f"{self.limits.max_body_bytes} are accepted")
        return True

    def _answer(self, status: str, message: str, extra: str = "") -> bool:
        """Answer a request refused during parsing and close the connection (parse_request's False)."""
        data = json.dumps({"error": message}).encode()
        self.wfile.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                         f"{extra}Connection: close\r\n\r\n".encode() + data)
        self.wfile.flush()
        self.close_connection = self._refused = True
        self._conn.closing = True
        return False

    def get_environ(self) -> dict[str, Any]:
        """Called once the headers are in: stop their clock, then read the body here, bounded."""
        self._headers_due.cancel()
        env = super().get_environ()
        length = self.headers.get("content-length")
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if length is None and not chunked:
            return env
        try:
            with eventlet.Timeout(self.limits.timeout_s, _Expired):
                body = env["wsgi.input"].read(self.limits.max_body_bytes + 1)
        except _Expired:
            self.stats.refuse("body_timeout")
            return self._refuse(env, "408 Request Timeout", f"body not received within {self.limits.timeout_s:g} s")
        except (OSError, ValueError) as exc:  # client went away, or broken chunked encoding
            self.stats.refuse("bad_request")
            return self._refuse(env, "400 Bad Request", f"body could not be read: {exc}")
        if len(body) > self.limits.max_body_bytes:
            self.stats.refuse("too_large")
            return self._refuse(env, "413 Content Too Large",
                                f"body over {self.limits.max_body_bytes} bytes; at most that is accepted")
        env["wsgi.input"], env["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        return env

    def _refuse(self, env: dict[str, Any], status: str, message: str) -> dict[str, Any]:
        self.close_connection = self._refused = True  # the unread rest of the body is no next request
        env[ERROR_KEY] = (status, message)
        return env


def _guard(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Answer what the protocol refused; turn any exception of the app into a bare 500 (logged)."""

    def reply(start: Callable[..., Any], status: str, message: str) -> list[bytes]:
        data = json.dumps({"error": message}).encode()
        start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def guarded(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if ERROR_KEY in environ:
            return reply(start, *environ[ERROR_KEY])
        try:
            return list(app(environ, start))
        except Exception:
            LOG.exception("API request %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            return reply(start, "500 Internal Server Error", "internal error (logged by the SDN app)")

    return guarded


def _linger(conn: socket.socket, seconds: float = LINGER_S) -> None:
    """End our side, then read and drop what the client still sends for up to ``seconds``: closing
    with unread data makes the kernel reset the connection, and the client would see the reset
    instead of the error answer just written."""
    try:
        conn.shutdown(socket.SHUT_WR)
        with eventlet.Timeout(seconds, False):
            while conn.recv(65536):
                pass
    except OSError:
        pass


def _shed(client: socket.socket) -> None:
    """Answer 503 to a connection there is no room for."""
    try:
        client.settimeout(LINGER_S)
        body = b'{"error": "every API connection is busy; retry"}'
        client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        _linger(client)
    except OSError:
        pass
    finally:
        client.close()


def serve(sock: socket.socket, app: Callable[..., Iterable[bytes]], limits: Limits = Limits(),
          log: logging.Logger = LOG, token: bytes | None = None, stats: ApiStats | None = None) -> None:
    """Serve ``app`` on the listening ``sock`` (an eventlet green socket) forever; with ``token``, only
    requests carrying ``Authorization: Bearer <token>`` reach it. ``stats`` counts the refusals."""
    stats = stats if stats is not None else ApiStats()
    protocol = type("Protocol", (_Protocol,), {"limits": limits, "token": token, "stats": stats})
    server = wsgi.Server(sock, sock.getsockname(), _guard(app), log=log, protocol=protocol, keepalive=limits.timeout_s,
                         socket_timeout=limits.timeout_s, debug=False, log_output=False)
    pool = eventlet.GreenPool(limits.max_connections + 1)
    open_conns: dict[Any, list[Any]] = {}  # client address -> eventlet's [address, socket, state, _Conn], oldest first

    def closed(_: Any, conn: list[Any]) -> None:
        open_conns.pop(conn[0], None)
        stats.open = len(open_conns)
        conn[2] = wsgi.STATE_CLOSE
        greenio.shutdown_safe(conn[1])
        conn[1].close()

    def drop(conn: list[Any]) -> None:
        conn[2] = wsgi.STATE_CLOSE
        conn[3].evicted = True
        greenio.shutdown_safe(conn[1])  # its green thread reads EOF and ends
        open_conns.pop(conn[0], None)
        stats.refuse("evicted")

    def evict() -> bool:
        """Close one connection for a new one: one that has not shown it is a client yet (oldest first),
        else the one idle the longest; False if every connection is a client's, busy with a request."""
        for conn in open_conns.values():
            c = conn[3]
            if not c.trusted and (c.in_headers or c.closing or conn[2] == wsgi.STATE_IDLE):
                drop(conn)
                return True
        for conn in open_conns.values():
            if conn[2] == wsgi.STATE_IDLE:
                drop(conn)
                return True
        return False

    while True:
        try:
            client, address = sock.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                log.warning("accept: %s; closing a connection that is idle or not a client's yet", exc.strerror)
                evict()
                eventlet.sleep(0.05)
            continue  # ECONNABORTED and the like concern one client only
        if len(open_conns) >= limits.max_connections and not evict():
            stats.refuse("busy")
            eventlet.spawn(_shed, client)
            continue
        client.settimeout(limits.timeout_s)
        conn = [address, client, wsgi.STATE_IDLE, _Conn()]
        open_conns[address] = conn
        stats.open = len(open_conns)
        pool.spawn(server.process_request, conn).link(closed, conn)
