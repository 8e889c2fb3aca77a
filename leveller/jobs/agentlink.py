"""A job's link to its host agent's registration socket (the client side of docs/api.md).

The hook (leveller.jobs.hook), the job emulator's workers (`leveller job`) and the RDMA shim register
the job when it starts and send each iteration end. The link never slows or fails the job: it
connects and sends from a daemon thread, drops what it cannot send, and when the agent is not there
(yet, or any more) tries again every RETRY_S; on a new connection it registers again with the count
so far (``done``), so a job whose agent was down is reported, and profiled, once it is back. It renews
its registration every third of the lease while the job is quiet. A refusal (the agent says why) is
written to stderr once and not retried.

The socket: $LEVELLER_AGENT_SOCK, else /run/leveller/agent.sock if it exists; LEVELLER_AGENT_SOCK=""
(empty) turns the link off.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

DEFAULT_SOCKET = "/run/leveller/agent.sock"
RETRY_S = 1.0
LEASE_S = 15.0


def socket_path(env: Mapping[str, str]) -> str | None:
    """The agent socket a job should use (None: none)."""
    path = env.get("LEVELLER_AGENT_SOCK")
    if path is not None:
        return path or None
    return DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None


class AgentLink:
    """Registers one rank of a job and forwards its iteration ends (thread-safe)."""

    def __init__(self, path: str, job: str, rank: int = 0, *, log: str | None = None,
                 ideal_time: float | None = None, weight: float | None = None, slack: float | None = None,
                 lease_s: float = LEASE_S, retry_s: float = RETRY_S) -> None:
        self.path, self.job, self.rank, self.log = path, job, rank, log
        self.extra = {k: v for k, v in (("ideal_time", ideal_time), ("weight", weight), ("slack", slack))
                      if v is not None}
        self.lease_s, self.retry_s = lease_s, retry_s
        self.registered: dict[str, Any] | None = None  # the agent's answer to the last registration
        self.refused: dict[str, Any] | None = None
        self.registrations = 0
        self._done = 0  # iterations so far
        self._sent = -1  # the count the agent has
        self._sock: socket.socket | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="leveller-agent-link", daemon=True)
        self._thread.start()

    def iteration(self, n: int, t: float | None = None) -> None:
        """``n`` iterations are done (at unix time ``t``, default now): tell the agent."""
        with self._cond:
            self._done = max(self._done, n)
            self._t = time.time() if t is None else t
            self._cond.notify()

    def close(self, end: bool = True) -> None:
        """Say the job ended (with ``end``) and stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=2)
        sock = self._sock
        if sock is not None:
            if end:
                try:
                    sock.sendall(b'{"op": "end"}\n')
                except OSError:
                    pass
            sock.close()

    def wait_registered(self, timeout: float) -> bool:
        """True once the agent accepted a registration (tests, `leveller job`)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.registered is None and self.refused is None and time.monotonic() < deadline:
                self._cond.wait(0.05)
            return self.registered is not None

    # -- the thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed or self.refused is not None:
                    return
            sock = self._connect()
            if sock is None:
                with self._cond:
                    self._cond.wait(self.retry_s)
                continue
            self._serve(sock)

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect(self.path)
            with self._cond:
                done = self._done
            msg: dict[str, Any] = {"op": "register", "job": self.job, "rank": self.rank, "lease_s": self.lease_s,
                                   **self.extra}
            if self.log:
                msg["log"] = self.log
            else:
                msg["done"] = done
            sock.sendall(json.dumps(msg).encode() + b"\n")
            reply = json.loads(_read_line(sock))
        except (OSError, ValueError):
            sock.close()
            return None
        with self._cond:
            if not reply.get("ok"):
                self.refused = reply
                self._cond.notify_all()
                print(f"leveller: the host agent refused job {self.job!r} rank {self.rank}: "
                      f"{reply.get('error')} ({reply.get('reason')})", file=sys.stderr)
                sock.close()
                return None
            self.registered, self._sent, self._sock = reply, done, sock
            self.registrations += 1
            self._cond.notify_all()
        return sock

    def _serve(self, sock: socket.socket) -> None:
        """Send iteration ends and renewals until the connection breaks or the link is closed."""
        renew_every = self.lease_s / 3
        last = time.monotonic()
        sock.settimeout(2)
        while True:
            with self._cond:
                if self._closed:
                    return
                if self._done == self._sent:
                    self._cond.wait(max(0.0, renew_every - (time.monotonic() - last)))
                if self._closed:
                    return
                n, t = self._done, getattr(self, "_t", time.time())
                changed = n != self._sent
            try:
                if changed and not self.log:
                    sock.sendall(json.dumps({"op": "iter", "n": n, "t": t}).encode() + b"\n")
                    with self._cond:
                        self._sent = n
                    last = time.monotonic()
                elif time.monotonic() - last >= renew_every:
                    sock.sendall(b'{"op": "renew"}\n')
                    last = time.monotonic()
                elif self.log and changed:
                    with self._cond:
                        self._sent = n
            except OSError:
                break
        with self._cond:
            self._sock = None
            self.registered = None
        sock.close()


def _read_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise OSError("closed")
        buf += chunk
        if len(buf) > 65536:
            raise OSError("reply too long")
    return buf
