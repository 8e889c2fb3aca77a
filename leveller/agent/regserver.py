"""The agent's registration socket: jobs on this host announce themselves (docs/api.md, "Registration socket").

A Unix stream socket (default path none; the units use /run/leveller/agent.sock, mode 0666 in a
directory of root's that only root may write: any local process may connect, and what it may do is
decided by what the kernel says about it). Messages are JSON objects, one per line, at most
MAX_LINE bytes. A client registers a job (``register``), then sends iteration ends (``iter``),
renewals (``renew``) and finally ``end``; closing the connection ends its registration too.

Nothing a client writes about itself is taken: its pid and uid come from SO_PEERCRED, its cgroup
from /proc/PID/cgroup (leveller.agent.peers), its start time from /proc/PID/stat; a scheduler source
(leveller.agent.slurm) names the job of a process of a scheduler's job. A registration is refused,
with one JSON line saying why and a count in ``leveller_agent_rejected_total{field="registration",
reason=...}``, when the client: sends nothing within HELLO_S (silent), sends something that is not
a valid message (garbage), registers faster than the host's rate allows (rate), opens more
connections than allowed (connections), would exceed the host's jobs or registrations (jobs,
registrations), uses a job name another uid registered (name_taken), runs in a cgroup holding
another uid's processes (foreign_cgroup) or in the root cgroup (root_cgroup), shares a cgroup with
another job (cgroup_taken), names a log it may not read (log), or sends iteration ends faster than
its allowance (flood: the excess is dropped, the registration stays). The agent and its other jobs
go on in every case: one thread serves every connection, never blocks on a client, and bounds
what each may hold.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leveller.agent import peers
from leveller.agent.jobsources import FdTailer, MessageTailer, OneJobTracker
from leveller.agent.jobtable import Entry, JobTable, Refused
from leveller.errors import UserError
from leveller.jobs.hook import process_start_time
from leveller.model.checks import check_int, check_iterations, check_name, check_number, check_object
from leveller.model.errors import FieldError
from leveller.model.limits import MAX_IDEAL_S, MAX_WEIGHT, MIN_WEIGHT

LOG = logging.getLogger("leveller.agent")
DEFAULT_SOCKET = "/run/leveller/agent.sock"
MAX_LINE = 4096  # bytes of one message, newline included
HELLO_S = 2.0  # a connection must register within this
DEFAULT_LEASE_S = 15.0  # a registration lives this long without a message
MAX_LEASE_S = 600.0
DEFAULT_RATE = 200.0  # registrations per second the host accepts (burst: one second's worth)
DEFAULT_ITER_RATE = 100.0  # iteration ends per second per registration (burst: two seconds' worth)
REGISTER_FIELDS = ("job", "rank", "log", "done", "ideal_time", "weight", "slack", "lease_s", "v")


class TokenBucket:
    """``rate`` per second with ``burst`` in hand: take() is False when empty."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


@dataclass
class Limits:
    """What one host accepts (flags of `leveller agent`)."""

    registrations_per_s: float = DEFAULT_RATE
    iterations_per_s: float = DEFAULT_ITER_RATE
    max_connections: int = 4096
    hello_s: float = HELLO_S
    default_lease_s: float = DEFAULT_LEASE_S


@dataclass
class Conn:
    sock: socket.socket
    peer: peers.Peer
    opened: float
    buf: bytearray = field(default_factory=bytearray)
    entry: Entry | None = None
    messages: MessageTailer | None = None
    bucket: TokenBucket | None = None
    flooded: int = 0  # iteration ends dropped since the last refusal sent


class RegistrationServer:
    """Serves the registration socket at ``path`` in one daemon thread (a context manager)."""

    def __init__(self, path: str, table: JobTable, on_reject: Callable[..., None],
                 limits: Limits | None = None, pattern: str | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path, self.table, self.on_reject = path, table, on_reject
        self.limits = limits or Limits()
        self.pattern = pattern
        self.clock, self.monotonic = clock, monotonic
        self.rate = TokenBucket(self.limits.registrations_per_s, max(1.0, self.limits.registrations_per_s),
                                monotonic())
        self.conns: dict[int, Conn] = {}
        self.accepted = 0  # registrations accepted (for the benchmark)
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    # -- life ------------------------------------------------------------------------------------------
    def __enter__(self) -> RegistrationServer:
        self._listener = bind(self.path)
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._serve, name="leveller-registrations", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in list(self.conns):
            self._drop(self.conns[fd], None)
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                    os.unlink(self.path)
        self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the loop --------------------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.25):
                if key.data == "wake":
                    return
                if key.data is None:
                    self._accept()
                else:
                    self._readable(key.data)
            self._timeouts()

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the listener stays, the client is refused by the kernel
                LOG.warning("registration socket: accept failed: %s", exc)
                return
            sock.setblocking(False)
            try:
                peer = peers.peer_of(sock)
            except OSError:
                sock.close()
                continue
            conn = Conn(sock, peer, self.monotonic())
            if len(self.conns) >= self.limits.max_connections:
                self._refuse(conn, "connections", f"{len(self.conns)} connections open; at most "
                             f"{self.limits.max_connections}")
                sock.close()
                continue
            self.conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn, "closed")
            return
        conn.buf += data
        while True:
            nl = conn.buf.find(b"\n")
            if nl < 0:
                if len(conn.buf) >= MAX_LINE:
                    self._refuse(conn, "garbage", f"a message longer than {MAX_LINE} bytes (no newline)")
                    self._drop(conn, "garbage")
                return
            line, conn.buf = bytes(conn.buf[:nl]), conn.buf[nl + 1:]
            if len(line) >= MAX_LINE:
                self._refuse(conn, "garbage", f"a message longer than {MAX_LINE - 1} bytes ({len(line)})")
                self._drop(conn, "garbage")
                return
            if not self._message(conn, line):
                return

    def _timeouts(self) -> None:
        now = self.monotonic()
        for conn in list(self.conns.values()):
            if conn.entry is None and now - conn.opened > self.limits.hello_s:
                self._refuse(conn, "silent", f"nothing registered within {self.limits.hello_s:g} s of connecting")
                self._drop(conn, "silent")
            elif conn.entry is not None and conn.entry.id not in self.table.entries:
                self._send(conn, {"ok": False, "op": "ended", "reason": "ended",
                                  "error": "the registration ended (its lease ran out or its cgroup emptied)"})
                self._drop(conn, None)

    # -- messages --------------------------------------------------------------------------------------
    def _message(self, conn: Conn, line: bytes) -> bool:
        """Handle one line; False once the connection is dropped."""
        try:
            msg = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return self._garbage(conn, "not a JSON object")
        if not isinstance(msg, dict):
            return self._garbage(conn, "not a JSON object")
        op = msg.get("op")
        try:
            if op == "register":
                return self._register(conn, msg)
            if conn.entry is None:
                raise FieldError("op", f"{op!r} before register; the first message must be "
                                 "{\"op\": \"register\", ...}")
            if op == "iter":
                return self._iter(conn, msg)
            if op == "renew":
                check_object(msg, "", ("op",))
                self.table.renew(conn.entry.id)
                return True
            if op == "end":
                check_object(msg, "", ("op",))
                self._send(conn, {"ok": True, "op": "end"})
                self._drop(conn, "end")
                return False
            raise FieldError("op", f"{op!r} is invalid; one of register, iter, renew, end")
        except FieldError as exc:
            return self._garbage(conn, str(exc))

    def _garbage(self, conn: Conn, why: str) -> bool:
        self._refuse(conn, "garbage", why)
        self._drop(conn, "garbage")
        return False

    def _register(self, conn: Conn, msg: dict[str, Any]) -> bool:
        if conn.entry is not None:
            raise FieldError("op", "register: this connection has registered already")
        check_object(msg, "", ("op", "job"), REGISTER_FIELDS)
        job = check_name(msg["job"], "job")
        rank = check_int(msg.get("rank", 0), "rank", 0, 1 << 20)
        done = check_iterations(msg.get("done", 0), "done")
        ideal = check_number(msg["ideal_time"], "ideal_time", 0, MAX_IDEAL_S, lo_open=True) \
            if msg.get("ideal_time") is not None else None
        weight = check_number(msg["weight"], "weight", MIN_WEIGHT, MAX_WEIGHT) \
            if msg.get("weight") is not None else None
        slack = check_number(msg["slack"], "slack", 0, 3600) if msg.get("slack") is not None else None
        lease = check_number(msg["lease_s"], "lease_s", 1, MAX_LEASE_S) if msg.get("lease_s") is not None \
            else self.limits.default_lease_s
        log = msg.get("log")
        if log is not None and not isinstance(log, str):
            raise FieldError("log", f"{log!r} is invalid; an absolute path")
        if not self.rate.take(self.monotonic()):
            self._refuse(conn, "rate", f"more than {self.limits.registrations_per_s:g} registrations per second "
                         "on this host; try again in a second")
            self._drop(conn, "rate")
            return False
        try:
            entry = self._admit(conn, job, rank, done, ideal, weight, slack, lease, log)
        except Refused as exc:
            self._refuse(conn, exc.reason, str(exc))
            self._drop(conn, exc.reason)
            return False
        self.accepted += 1
        self._send(conn, {"ok": True, "op": "register", "id": entry.id, "job": entry.job, "rank": rank,
                          "cgroup": entry.cgroup, "lease_s": lease, "source": entry.source})
        return True

    def _admit(self, conn: Conn, job: str, rank: int, done: int, ideal: float | None, weight: float | None,
               slack: float | None, lease: float, log: str | None) -> Entry:
        """The entry of a checked registration (Refused says why not)."""
        pid, uid = conn.peer.pid, conn.peer.uid
        claimed = self.table.claim(pid)  # a scheduler's job: its name, its cgroup
        if claimed is not None:
            source, job, cgroup = claimed
        else:
            source = "socket"
            try:
                relative = peers.cgroup_of(pid)
                cgroup = peers.cgroup2_mount() + relative
            except OSError as exc:
                raise Refused("garbage", f"cannot find the cgroup of pid {pid}: {exc}") from None
            if relative in ("/", ""):
                raise Refused("root_cgroup", f"pid {pid} runs in the root cgroup, which every process of the host "
                              "shares; start the job in a cgroup of its own (systemd-run --scope, cgexec, a "
                              "scheduler's job)")
            if uid != 0:
                foreign = peers.foreign_processes(cgroup, uid)
                if foreign:
                    raise Refused("foreign_cgroup", f"cgroup {relative} holds processes of other users (pid "
                                  f"{foreign[0]}); uid {uid} may register only a cgroup of its own processes")
        tailer: FdTailer | MessageTailer
        label = f"socket:{job}:{rank}:{pid}"
        if log is not None:
            try:
                fd = peers.open_as(log, conn.peer)
            except FieldError as exc:
                raise Refused("log", str(exc)) from None
            tailer = FdTailer(fd, log)
        else:
            tailer = conn.messages = MessageTailer(job, rank, label)
            conn.messages.started(process_start_time(pid), done, self.clock())
            conn.bucket = TokenBucket(self.limits.iterations_per_s, 2 * self.limits.iterations_per_s,
                                      self.monotonic())
        tracker = OneJobTracker(job, self.pattern if log is not None else None)
        tracker.on_reject = self.on_reject  # its bad lines are counted like a --log's
        if isinstance(tailer, FdTailer):
            tailer.on_reject = self.on_reject
        try:
            entry = self.table.add(source, job, uid, cgroup, rank=rank, tailer=tailer, tracker=tracker, ideal=ideal,
                                   weight=weight, slack=slack, lease_s=lease)
        except Refused:
            tailer.close()
            conn.messages = None
            raise
        conn.entry = entry
        return entry

    def _iter(self, conn: Conn, msg: dict[str, Any]) -> bool:
        assert conn.entry is not None
        check_object(msg, "", ("op", "n"), ("t",))
        n = check_iterations(msg["n"], "n")
        now = self.clock()
        t = check_number(msg["t"], "t", 0) if msg.get("t") is not None else now
        if conn.messages is None:
            raise FieldError("op", "iter: this registration reads its iterations from its log")
        assert conn.bucket is not None
        self.table.renew(conn.entry.id)
        if not conn.bucket.take(self.monotonic()):
            conn.flooded += 1
            if conn.flooded == 1 or conn.flooded % 1000 == 0:
                self._refuse(conn, "flood", f"more than {self.limits.iterations_per_s:g} iteration ends per "
                             "second; the excess is dropped (a count is cumulative: send the latest)",
                             count=1)
            else:
                self.on_reject("registration", "flood", count=1, reason="flood")
            return True
        conn.flooded = 0
        conn.messages.put(n, min(t, now) if math.isfinite(t) else now)
        return True

    # -- replies ---------------------------------------------------------------------------------------
    def _refuse(self, conn: Conn, reason: str, message: str, count: int = 1) -> None:
        who = f"pid {conn.peer.pid} uid {conn.peer.uid}"
        self.on_reject("registration", f"{who} refused ({reason}): {message}", count=count, reason=reason)
        self._send(conn, {"ok": False, "reason": reason, "error": message})

    def _send(self, conn: Conn, reply: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # a client that does not read loses its reply, never the agent's time
            conn.sock.send(json.dumps(reply).encode() + b"\n", socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)

    def _drop(self, conn: Conn, why: str | None) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self.conns.pop(fd, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(conn.sock)
        conn.sock.close()
        if conn.entry is not None and why is not None:
            self.table.end(conn.entry.id, why)
        conn.entry = None


def bind(path: str) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0666, in a directory only its owner may write (made
    0755 if missing); a stale socket there is replaced, a live one (another agent) is a UserError."""
    directory = os.path.dirname(os.path.abspath(path)) or "/"
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        st = os.stat(directory)
    except OSError as exc:
        raise UserError(f"--socket {path}: cannot make its directory ({exc.strerror})") from None
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UserError(f"--socket {path}: {directory} may be written by others (mode {st.st_mode & 0o7777:o}); "
                        "give a directory only root may write")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise UserError(f"--socket {path}: exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: its agent is gone
        else:
            raise UserError(f"--socket {path}: another agent serves it")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o111)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise UserError(f"--socket {path}: cannot listen ({exc.strerror})") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o666)
    sock.listen(min(socket.SOMAXCONN, 4096))
    return sock

