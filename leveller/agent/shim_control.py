"""Client for the RDMA shim's local control channel (shim/control.c).

Every process that runs with ``LD_PRELOAD=libleveller_shim.so`` and creates an
RC queue pair serves a unix socket (``leveller-shim-<pid>.sock`` in
/run/leveller, $XDG_RUNTIME_DIR or /tmp, or ``$LEVELLER_SHIM_SOCK``). The host
agent lists the QPs there (job, local/remote endpoints learnt at RTR, so the
controller sees RDMA flows like TCP ones) and changes a job's traffic class,
which the shim applies by rebuilding each QP (QP resurrection). A change made
with a lease (``lease_ms``; renewed with :meth:`ShimClient.lease`) ends by
itself: when the lease runs out, the shim's own timer rebuilds every QP at the
class the application gave it, whether or not the agent is still alive.

The mapping from a LEVELLER level to a traffic class is the caller's: pass it
to :func:`apply_job_level` (:func:`dscp_traffic_class` helps when levels map
to DSCP values, as for TCP).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.errors import UserError

SOCKET_GLOB = "leveller-shim-*.sock"
LEASE_MAX_MS = 86_400_000


class ShimError(Exception):
    """The shim could not be reached or answered with an error."""


@dataclass(frozen=True)
class QpInfo:
    """One queue pair as the shim reports it."""

    pid: int
    job: str
    qp: int
    state: str
    tc: int | None
    connected: bool
    local: dict[str, Any]
    remote: dict[str, Any] | None
    resurrections: int
    failures: int
    last_pause_us: float
    last_error: str | None


@dataclass(frozen=True)
class TcResult:
    """Outcome of a traffic-class change on one QP."""

    pid: int
    qp: int
    ok: bool
    old_tc: int | None
    tc: int | None
    changed: bool
    deferred: bool
    pause_us: float
    drain_us: float
    error: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def default_socket_dirs() -> list[Path]:
    """Directories where the shim puts its sockets, in the shim's order of preference."""
    dirs = [Path("/run/leveller")]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        dirs.append(Path(xdg))
    dirs.append(Path("/tmp"))
    return dirs


def discover(dirs: Iterable[Path] | None = None) -> list[Path]:
    """Sockets of live shim processes (stale files of dead processes are skipped)."""
    found: list[Path] = []
    for d in dirs if dirs is not None else default_socket_dirs():
        for path in sorted(Path(d).glob(SOCKET_GLOB)):
            pid_text = path.name[len("leveller-shim-"):-len(".sock")]
            if pid_text.isdigit() and not Path(f"/proc/{pid_text}").exists():
                continue
            found.append(path)
    return found


def validate_tc(tc: int) -> int:
    """Check a traffic class (the GRH byte: DSCP << 2 | ECN)."""
    if isinstance(tc, bool) or not isinstance(tc, int) or not 0 <= tc <= 255:
        raise UserError(f"traffic class: got {tc!r}; allowed: an integer 0..255 (DSCP << 2)")
    return tc


def dscp_traffic_class(dscp: int) -> int:
    """Traffic class carrying DSCP ``dscp`` with ECN bits 0."""
    if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp <= 63:
        raise UserError(f"dscp: got {dscp!r}; allowed: an integer 0..63")
    return dscp << 2


class ShimClient:
    """One shim process's control socket."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 15.0) -> None:
        self.path = Path(path)
        self.timeout = timeout

    def request_line(self, line: bytes) -> bytes:
        """Send one raw request line (without its newline) and return the raw reply line."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(str(self.path))
                sock.sendall(line + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:
            raise ShimError(f"shim socket {self.path}: {exc}") from exc
        return data

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one JSON request line and return the decoded reply line."""
        data = self.request_line(json.dumps(message).encode())
        try:
            reply = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ShimError(f"shim socket {self.path}: bad reply {data[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise ShimError(f"shim socket {self.path}: bad reply {reply!r}")
        return reply

    def list_qps(self) -> list[QpInfo]:
        """The QPs of this process with their job, state, class and endpoints."""
        reply = self.request({"op": "list"})
        if not reply.get("ok"):
            raise ShimError(f"shim {self.path}: {reply.get('error')}")
        return [
            QpInfo(
                pid=int(reply["pid"]), job=str(reply["job"]), qp=int(q["qp"]), state=q["state"], tc=q["tc"],
                connected=bool(q["connected"]), local=q["local"], remote=q["remote"],
                resurrections=int(q["resurrections"]), failures=int(q["failures"]),
                last_pause_us=float(q["last_pause_us"]), last_error=q["last_error"],
            )
            for q in reply["qps"]
        ]

    def set_traffic_class(self, tc: int, *, qp: int | None = None, job: str | None = None,
                          lease_ms: int | None = None) -> list[TcResult]:
        """Give one QP (``qp``) or every QP of ``job`` the traffic class ``tc``; with ``lease_ms``, the
        shim's lease is (re)armed that far ahead first (when it runs out, classes go back by themselves).

        Returns one result per QP touched (none if this process runs another
        job). A failed QP keeps its old class and carries the shim's error.
        """
        validate_tc(tc)
        if (qp is None) == (job is None):
            raise UserError("set_traffic_class: give exactly one of qp= (QP number) or job= (job name)")
        message: dict[str, Any] = {"op": "set_tc", "tc": tc}
        if qp is not None:
            if isinstance(qp, bool) or not isinstance(qp, int) or not 0 <= qp <= 0xFFFFFF:
                raise UserError(f"qp: got {qp!r}; allowed: a QP number 0..16777215")
            message["qp"] = qp
        else:
            if not isinstance(job, str) or not job or "\n" in job or '"' in job:
                raise UserError(f"job: got {job!r}; allowed: a non-empty name without quotes or newlines")
            message["job"] = job
        if lease_ms is not None:
            message["lease_ms"] = _lease_ms(lease_ms, low=1)
        reply = self.request(message)
        if "results" not in reply:
            raise ShimError(f"shim {self.path}: {reply.get('error')}")
        pid = self.pid()
        return [
            TcResult(pid=pid, qp=int(r["qp"]), ok=bool(r["ok"]), old_tc=r["old_tc"], tc=r["tc"],
                     changed=bool(r["changed"]), deferred=bool(r["deferred"]), pause_us=float(r["pause_us"]),
                     drain_us=float(r["drain_us"]), error=r.get("error"), raw=r)
            for r in reply["results"]
        ]

    def lease(self, ms: int) -> bool:
        """Renew the shim's lease ``ms`` ahead (0: end it now; the shim then puts every QP back to the
        application's class before answering). Returns whether the lease was still running: False
        means it had run out and the QPs are back at their own classes already."""
        reply = self.request({"op": "lease", "ms": _lease_ms(ms, low=0)})
        if not reply.get("ok"):
            raise ShimError(f"shim {self.path}: {reply.get('error')}")
        return bool(reply.get("was_armed"))

    def pid(self) -> int:
        """Process id from the socket name (-1 for a custom socket path)."""
        text = self.path.name[len("leveller-shim-"):-len(".sock")]
        return int(text) if self.path.name.startswith("leveller-shim-") and text.isdigit() else -1


def _lease_ms(ms: int, low: int) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int) or not low <= ms <= LEASE_MAX_MS:
        raise UserError(f"lease: got {ms!r} ms; allowed: an integer {low}..{LEASE_MAX_MS}")
    return ms


def apply_job_level(job: str, level: int, level_to_tc: Callable[[int], int],
                    sockets: Iterable[str | os.PathLike[str]] | None = None,
                    timeout: float = 15.0) -> list[TcResult]:
    """The agent's call: job ``job`` got LEVELLER level ``level``; give all its QPs
    on this host the traffic class ``level_to_tc(level)``.

    ``sockets`` defaults to every live shim found by :func:`discover`. Results
    of all processes are returned; failures are in them (``ok`` False, and
    ``qp`` -1 when the process could not be reached), not raised, so one broken
    process does not stop the others.
    """
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise UserError(f"level: got {level!r}; allowed: an integer >= 0")
    tc = validate_tc(level_to_tc(level))
    paths = [Path(p) for p in sockets] if sockets is not None else discover()
    results: list[TcResult] = []
    for path in paths:
        client = ShimClient(path, timeout)
        try:
            results.extend(client.set_traffic_class(tc, job=job))
        except ShimError as exc:  # that process only: report it, go on with the others
            results.append(TcResult(pid=client.pid(), qp=-1, ok=False, old_tc=None, tc=None, changed=False,
                                    deferred=False, pause_us=0.0, drain_us=0.0, error=str(exc)))
    return results
