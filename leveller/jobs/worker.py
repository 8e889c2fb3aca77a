"""One emulated worker process: compute (sleep), exchange bytes over TCP, log the iteration.

Run by the launcher as ``python -m leveller.jobs.worker ...`` (behind
``ip netns exec NS`` in the testbed). Patterns:

* push: ranks > 0 send B bytes to rank 0 and wait for a 1-byte ack; rank 0
  reads from all of them at once, then acks. Traffic flows towards rank 0.
* ring: every rank sends B bytes to rank+1 while reading B bytes from rank-1.

B = M x rate / 8. With ``--slack S`` the exchange starts S seconds before the
compute ends and runs alongside its rest (DDP's all-reduce during the backward
pass): the iteration ends when both are done, and a ``leveller-comm`` line
(leveller.jobs.control) tells the agent how long the exchange can wait
(``--wait``). With ``--shift-file`` the worker reads CASSINI shift orders there
before each iteration and delays the iteration's start once per plan.

The loop stops after ``--iterations`` or at the absolute
``--deadline`` (unix time, shared by all ranks); a peer closing its socket
after the deadline is a normal end, before it an error. With ``--pace BPS``
the kernel paces every sending socket (SO_MAX_PACING_RATE), so the rate holds
even without a shaped bottleneck (loopback tests). With ``--window BYTES`` every
connection's TCP window is clamped (TCP_WINDOW_CLAMP), bounding the bytes a flow
has in flight. With ``--compute-change UNIX_TIME:C`` iterations that start from
then on compute C seconds (a drifting job, for re-profiling): below a switch queue's size, a
flow starved by strict priority waits in the queue instead of losing packets (what a lossless
class gives). At the end the worker prints ``leveller-done job=J rank=R iterations=N sent=BYTES received=BYTES``.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from leveller.jobs.agentlink import AgentLink, socket_path
from leveller.jobs.control import ShiftFollower, format_comm_line
from leveller.jobs.logline import format_line

_CHUNK = 256 * 1024
_HELLO = struct.Struct("!4sI")
_MAGIC = b"LVLJ"
REGISTER_WAIT_S = 2.0  # the longest a worker waits for its agent's answer before it starts
_SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)


class PeerClosed(Exception):
    """The peer closed its connection."""


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one worker needs; endpoints[i] is where rank i listens."""

    job: str
    rank: int
    endpoints: tuple[tuple[str, int], ...]
    pattern: str
    compute_s: float
    nbytes: int
    iterations: int | None
    deadline: float | None
    connect_timeout_s: float = 30.0
    pace_bps: float | None = None
    window_bytes: int | None = None  # TCP_WINDOW_CLAMP on every connection: bytes in flight per flow
    slack_s: float = 0.0  # the exchange starts this long before the compute ends
    wait_s: float = 0.0  # how long the exchange can wait without stalling (declared in a comm line)
    shift_file: str | None = None  # CASSINI shift orders (leveller.jobs.control)
    compute_changes: tuple[tuple[float, float], ...] = ()  # (unix time, compute seconds from then on)

    def compute_at(self, now: float) -> float:
        """Compute seconds of an iteration starting at ``now``."""
        compute = self.compute_s
        for at, value in self.compute_changes:
            if now >= at:
                compute = value
        return compute


def _recv_exact(sock: socket.socket, n: int, buf: memoryview) -> int:
    total = n
    while n > 0:
        got = sock.recv_into(buf, min(n, len(buf)))
        if got == 0:
            raise PeerClosed()
        n -= got
    return total


def _send_zeros(sock: socket.socket, n: int, chunk: bytes) -> int:
    total = n
    while n > 0:
        step = min(n, len(chunk))
        sock.sendall(chunk[:step] if step < len(chunk) else chunk)
        n -= step
    return total


def _connect(addr: tuple[str, int], rank: int, until: float) -> socket.socket:
    while True:
        try:
            sock = socket.create_connection(addr, timeout=5)
            sock.sendall(_HELLO.pack(_MAGIC, rank))
            return sock
        except OSError:
            if time.time() > until:
                raise
            time.sleep(0.1)


def _accept(listener: socket.socket, count: int, until: float) -> dict[int, socket.socket]:
    peers: dict[int, socket.socket] = {}
    while len(peers) < count:
        listener.settimeout(max(0.1, until - time.time()))
        conn, _ = listener.accept()
        conn.settimeout(30)
        hdr = bytearray(_HELLO.size)
        _recv_exact(conn, _HELLO.size, memoryview(hdr))
        magic, rank = _HELLO.unpack(hdr)
        if magic != _MAGIC:
            conn.close()
            continue
        peers[rank] = conn
    return peers


class Worker:
    """Connected worker; :meth:`run` does the iterations."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self._buf = memoryview(bytearray(_CHUNK))
        self._zeros = bytes(_CHUNK)
        self.out: list[socket.socket] = []  # sockets we send on
        self.inp: list[socket.socket] = []  # sockets we receive on
        self._all: list[socket.socket] = []
        self.sent = 0
        self.received = 0

    def connect(self) -> None:
        cfg, w = self.cfg, len(self.cfg.endpoints)
        until = time.time() + cfg.connect_timeout_s
        listener = socket.socket(socket.AF_INET6 if ":" in cfg.endpoints[cfg.rank][0] else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(cfg.endpoints[cfg.rank])
        listener.listen(w)
        try:
            if cfg.pattern == "push":
                if cfg.rank == 0:
                    self.inp = list(_accept(listener, w - 1, until).values())
                    self.out = self.inp
                else:
                    self.out = [_connect(cfg.endpoints[0], cfg.rank, until)]
                    self.inp = self.out
            elif w > 1:
                self.out = [_connect(cfg.endpoints[(cfg.rank + 1) % w], cfg.rank, until)]
                self.inp = list(_accept(listener, 1, until).values())
        finally:
            listener.close()
        self._all = list({id(s): s for s in self.out + self.inp}.values())
        io_timeout = (cfg.deadline - time.time() + 30) if cfg.deadline else 600.0
        for s in self._all:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(max(io_timeout, 5.0))
        if cfg.window_bytes:
            for s in self._all:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, cfg.window_bytes)
        if cfg.pace_bps:
            for s in self.out:
                s.setsockopt(socket.SOL_SOCKET, _SO_MAX_PACING_RATE, int(cfg.pace_bps / 8))

    def close(self) -> None:
        for s in self._all:
            s.close()

    def _exchange_push(self) -> None:
        n = self.cfg.nbytes
        if self.cfg.rank != 0:
            self.sent += _send_zeros(self.out[0], n, self._zeros)
            _recv_exact(self.out[0], 1, self._buf)
            return
        remaining = {s: n for s in self.inp}
        with selectors.DefaultSelector() as sel:
            for s in self.inp:
                if n:
                    sel.register(s, selectors.EVENT_READ)
            while any(remaining.values()):
                for key, _ in sel.select(timeout=self.inp[0].gettimeout()):
                    s = cast(socket.socket, key.fileobj)  # only sockets are registered
                    got = s.recv_into(self._buf, min(remaining[s], len(self._buf)))
                    if got == 0:
                        raise PeerClosed()
                    remaining[s] -= got
                    self.received += got
                    if remaining[s] == 0:
                        sel.unregister(s)
        for s in self.inp:
            s.sendall(b"\x01")

    def _exchange_ring(self) -> None:
        if not self.out:
            return
        errors: list[BaseException] = []

        def send() -> None:
            try:
                self.sent += _send_zeros(self.out[0], self.cfg.nbytes, self._zeros)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        self.received += _recv_exact(self.inp[0], self.cfg.nbytes, self._buf)
        sender.join()
        if errors:
            raise errors[0]

    def run(self, emit: Callable[[str], None], clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> int:
        """Iterate until the iteration count or the deadline; returns the iterations done."""
        cfg = self.cfg
        exchange = self._exchange_push if cfg.pattern == "push" else self._exchange_ring
        follower = ShiftFollower(cfg.shift_file, cfg.job) if cfg.shift_file else None
        done = 0
        emit(format_line(cfg.job, 0, clock(), cfg.rank))
        while (cfg.iterations is None or done < cfg.iterations) and (cfg.deadline is None or clock() < cfg.deadline):
            if follower is not None:
                self._shift(follower, emit, clock, sleep)
            compute = cfg.compute_at(clock())
            try:
                if cfg.slack_s > 0:
                    self._overlapped(exchange, emit, clock, sleep, compute)
                else:
                    sleep(compute)
                    exchange()
            except PeerClosed:
                if cfg.deadline is not None and clock() >= cfg.deadline - 0.5:
                    break
                raise
            done += 1
            emit(format_line(cfg.job, done, clock(), cfg.rank))
        return done

    def _shift(self, follower: ShiftFollower, emit: Callable[[str], None], clock: Callable[[], float],
               sleep: Callable[[float], None]) -> None:
        """Delay this iteration's start once per new shift plan (CASSINI)."""
        pending = follower.pending_delay(clock())
        if pending is None:
            return
        delay, plan = pending
        if self.cfg.deadline is not None:
            delay = min(delay, max(0.0, self.cfg.deadline - clock()))
        emit(f"leveller-shift job={self.cfg.job} rank={self.cfg.rank} plan={plan} delay={delay:.6f} t={clock():.6f}")
        if delay > 0:
            sleep(delay)

    def _overlapped(self, exchange: Callable[[], None], emit: Callable[[str], None], clock: Callable[[], float],
                    sleep: Callable[[float], None], compute: float) -> None:
        """Compute ``compute`` seconds with the exchange started ``slack_s`` before the compute ends (at its
        start if the compute got shorter than the slack); both must finish."""
        cfg = self.cfg
        sleep(max(0.0, compute - cfg.slack_s))
        if cfg.wait_s > 0:
            emit(format_comm_line(cfg.job, cfg.rank, clock(), cfg.wait_s))
        errors: list[BaseException] = []

        def communicate() -> None:
            try:
                exchange()
            except BaseException as exc:  # re-raised below, in the worker's thread
                errors.append(exc)

        comm = threading.Thread(target=communicate, daemon=True)
        comm.start()
        sleep(min(cfg.slack_s, compute))
        comm.join()
        if errors:
            raise errors[0]


def _parse(argv: list[str] | None) -> tuple[WorkerConfig, str | None]:
    p = argparse.ArgumentParser(prog="python -m leveller.jobs.worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--endpoint", action="append", required=True, help="ADDR:PORT of rank i (repeat in rank order)")
    p.add_argument("--pattern", choices=("push", "ring"), default="push")
    p.add_argument("--compute", type=float, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iterations", type=int)
    p.add_argument("--deadline", type=float)
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("--log", help="append iteration lines to this file too")
    p.add_argument("--agent-sock", help="register with the host agent at this socket (default: "
                   "$LEVELLER_AGENT_SOCK, else /run/leveller/agent.sock if it exists)")
    p.add_argument("--pace", type=float, help="kernel pacing rate of sending sockets, bits/s")
    p.add_argument("--window", type=int, help="clamp every connection's TCP window to this many bytes")
    p.add_argument("--slack", type=float, default=0.0, help="start the exchange this long before compute ends")
    p.add_argument("--wait", type=float, default=0.0, help="how long the exchange can wait (comm line)")
    p.add_argument("--shift-file", help="CASSINI shift orders to follow (leveller.jobs.control)")
    p.add_argument("--compute-change", action="append", default=[], metavar="UNIX_TIME:C",
                   help="compute C seconds per iteration from UNIX_TIME on")
    a = p.parse_args(argv)
    endpoints = tuple((e.rsplit(":", 1)[0].strip("[]"), int(e.rsplit(":", 1)[1])) for e in a.endpoint)
    cfg = WorkerConfig(a.job, a.rank, endpoints, a.pattern, a.compute, a.bytes, a.iterations, a.deadline,
                       a.connect_timeout, a.pace, a.window, a.slack, a.wait, a.shift_file,
                       tuple((float(at), float(c)) for at, _, c in (x.partition(":") for x in a.compute_change)))
    if a.agent_sock:
        os.environ["LEVELLER_AGENT_SOCK"] = a.agent_sock
    return cfg, a.log


def main(argv: list[str] | None = None) -> int:
    cfg, log = _parse(argv)
    log_fd = None
    if log:
        log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    link = _agent_link(cfg)

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if log_fd is not None:
            os.write(log_fd, (line + "\n").encode())
        if link is not None and line.startswith("leveller-iter "):
            link.iteration(int(line.split(" iter=", 1)[1].split()[0]))

    worker = Worker(cfg)
    try:
        worker.connect()
        done = worker.run(emit)
        sys.stdout.write(f"leveller-done job={cfg.job} rank={cfg.rank} iterations={done} "
                         f"sent={worker.sent} received={worker.received}\n")
    except (OSError, PeerClosed) as exc:
        print(f"leveller job worker {cfg.job}/{cfg.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        worker.close()
        if link is not None:
            link.close()
    return 0


def _agent_link(cfg: WorkerConfig) -> AgentLink | None:
    """The rank's registration with its host agent (leveller.jobs.agentlink), made before the first
    connection: an agent that gives the job a cgroup of its own (a scheduler's job) has moved this
    process there by then, so every connection of the job is counted as the job's."""
    path = socket_path(os.environ)
    if path is None:
        return None
    link = AgentLink(path, cfg.job, cfg.rank)
    link.wait_registered(REGISTER_WAIT_S)
    return link


if __name__ == "__main__":
    sys.exit(main())
