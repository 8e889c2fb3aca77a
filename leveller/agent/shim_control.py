"""Client for the RDMA shim's local control channel (shim/control.c).

Every process that runs with ``LD_PRELOAD=libleveller_shim.so`` and creates an
RC queue pair serves a unix socket: ``leveller-shim-<pid>.sock`` in
/run/leveller/shim (:data:`SOCKET_DIR`), or ``$LEVELLER_SHIM_SOCK``. The host
agent lists the QPs there (job, local/remote endpoints learnt at RTR, so the
controller sees RDMA flows like TCP ones) and changes a job's traffic class,
which the shim applies by rebuilding each QP (QP resurrection). A change made
with a lease (``lease_ms``; renewed with :meth:`ShimClient.lease`) ends by
itself: when the lease runs out, the shim's own timer rebuilds every QP at the
class the application gave it, whether or not the agent is still alive.

The mapping from a LEVELLER level to a traffic class is the caller's: pass it
to :func:`apply_job_level` (:func:`dscp_traffic_class` helps when levels map
to DSCP values, as for TCP).

The agent runs as root and reports what a shim says as its host's flows, so a
socket is trusted only as far as this can be checked (issue 26): it must be in
a directory of root's (or of this process's user) that not every user may
write, with no symlink on the way (:func:`check_socket_dir`; the shim refuses
any other place but ``$LEVELLER_SHIM_SOCK``, and there is no /tmp fallback);
its peer (SO_PEERCRED) must be the process its name gives, running as the
socket file's owner or root, and a ``list`` reply must carry that pid. Every
reply is validated field by field and bounded in size, and one deadline covers
a whole exchange (connect, request, reply), so a shim dripping its reply byte
by byte costs at most ``timeout`` seconds. The agent and the shims must share a
pid namespace. Whoever may write into the socket directory can still name the
job its own QPs belong to (as ``LEVELLER_JOB`` does): give write access (a group
with the sticky bit, mode 1770) only to the users whose jobs the agent levels.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import stat
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.errors import UserError

LOG = logging.getLogger("leveller.agent.shim")

SOCKET_DIR = Path("/run/leveller/shim")
SOCKET_GLOB = "leveller-shim-*.sock"
SOCKET_NAME = re.compile(r"leveller-shim-([0-9]{1,10})\.sock")
LEASE_MAX_MS = 60_000  # the longest shim lease (shim/control.c LEASE_MAX_MS): the agent renews at every report
MAX_REPLY_BYTES = 8 << 20  # a list of 20,000 QPs fits; a reply growing past this is refused
MAX_QPS = 65_536  # QPs in one reply
MAX_TEXT = 1024  # characters of a job name, state or error in a reply
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


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
    """Where the shim puts its sockets: only the root-owned :data:`SOCKET_DIR` (no /tmp fallback)."""
    return [SOCKET_DIR]


def check_socket_dir(directory: Path | str) -> str | None:
    """Why sockets in ``directory`` must not be trusted, or None: it and every directory above it
    (symlinks above it resolved) must be owned by root or by this process's user; the directory
    itself must not be a symlink nor writable by every user, and a directory above it writable by
    others needs the sticky bit (as /tmp has), so nobody else can swap the tree."""
    trusted = {0, os.geteuid()}
    path = Path(os.path.realpath(Path(directory).parent)) / Path(directory).name
    for i, d in enumerate([path, *path.parents]):
        try:
            st = os.lstat(d)
        except OSError as exc:
            return f"{d}: {exc.strerror}"
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            return f"{d} is a symbolic link; give the directory itself"
        if not stat.S_ISDIR(st.st_mode):
            return f"{d} is not a directory"
        if st.st_uid not in trusted:
            return f"{d} is owned by uid {st.st_uid}, not by root"
        if i == 0 and mode & stat.S_IWOTH:
            return f"{d} is writable by every user (mode {mode:04o}): any user could serve a socket there"
        if i > 0 and mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            return f"{d} is writable by others without the sticky bit (mode {mode:04o})"
    return None


_warned: set[tuple[str, str]] = set()


def discover(dirs: Iterable[Path] | None = None) -> list[Path]:
    """Sockets of live shim processes: ``leveller-shim-<pid>.sock`` in trusted directories
    (:func:`check_socket_dir`; an untrusted one is skipped with a warning, once), only sockets (no
    symlinks), and only of live processes (stale files of dead ones are skipped)."""
    found: list[Path] = []
    for d in dirs if dirs is not None else default_socket_dirs():
        d = Path(d)
        if not d.exists():
            continue
        why = check_socket_dir(d)
        if why is not None:
            if (str(d), why) not in _warned:
                _warned.add((str(d), why))
                LOG.warning("shim sockets in %s ignored: %s", d, why)
            continue
        for path in sorted(d.glob(SOCKET_GLOB)):
            m = SOCKET_NAME.fullmatch(path.name)
            if m is None or not Path(f"/proc/{m.group(1)}").exists():
                continue
            try:
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            found.append(path)
    return found


def prepare_socket_dir(directory: Path = SOCKET_DIR) -> None:
    """The agent's start (root): create the socket directory (mode 0755: root's jobs only; an operator
    lets a group's jobs in with chgrp + chmod 1770), and refuse one that is not trusted."""
    if os.geteuid() == 0 and not directory.exists():
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    why = check_socket_dir(directory)
    if why is not None:
        raise UserError(f"--rdma: the shim socket directory cannot be trusted: {why}")


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
    """One shim process's control socket; ``timeout`` bounds each whole exchange (connect, request,
    reply), not each read."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 15.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.peer_pid: int | None = None  # the process behind the socket at the last exchange

    def request_line(self, line: bytes) -> bytes:
        """Send one raw request line (without its newline) and return the raw reply line (with it)."""
        deadline = time.monotonic() + self.timeout

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            return remaining

        try:
            st = os.lstat(self.path)
            if not stat.S_ISSOCK(st.st_mode):
                raise ShimError(f"shim socket {self.path}: not a socket (a symlink or a file is never followed)")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(left())
                sock.connect(str(self.path))
                self.peer_pid = self._check_peer(sock, st.st_uid)
                sock.settimeout(left())
                sock.sendall(line + b"\n")
                chunks: list[bytes] = []
                size = 0
                while True:
                    sock.settimeout(left())
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ShimError(f"shim socket {self.path}: the reply ended after {size} bytes without "
                                        "its newline")
                    chunks.append(chunk)
                    size += len(chunk)
                    if b"\n" in chunk:
                        break
                    if size > MAX_REPLY_BYTES:
                        raise ShimError(f"shim socket {self.path}: reply longer than {MAX_REPLY_BYTES} bytes")
        except TimeoutError:
            raise ShimError(f"shim socket {self.path}: no complete reply within {self.timeout:g} s") from None
        except OSError as exc:
            raise ShimError(f"shim socket {self.path}: {exc}") from exc
        data = b"".join(chunks)
        return data[:data.index(b"\n") + 1]

    def _check_peer(self, sock: socket.socket, owner: int) -> int:
        """The peer's pid, if it may speak for the socket: the process its name gives, running as
        the socket file's owner or root (SO_PEERCRED); else ShimError."""
        pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        named = self.named_pid()
        if named is not None and pid != named:
            raise ShimError(f"shim socket {self.path}: served by process {pid}, not by process {named} its name "
                            "gives; refused")
        if uid not in (0, owner):
            raise ShimError(f"shim socket {self.path}: served by uid {uid}, but the socket belongs to uid {owner}; "
                            "refused")
        return pid

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one JSON request line and return the decoded reply line (a JSON object)."""
        data = self.request_line(json.dumps(message).encode())
        try:
            reply = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ShimError(f"shim socket {self.path}: bad reply {data[:200]!r}: {exc}") from exc
        if not isinstance(reply, dict):
            raise ShimError(f"shim socket {self.path}: bad reply {data[:200]!r}: not a JSON object")
        return reply

    def _refused(self, reply: dict[str, Any]) -> ShimError:
        error = reply.get("error")
        return ShimError(f"shim {self.path}: {error[:MAX_TEXT] if isinstance(error, str) else 'refused: no error'}")

    def list_qps(self) -> list[QpInfo]:
        """The QPs of this process with their job, state, class and endpoints."""
        reply = self.request({"op": "list"})
        if reply.get("ok") is not True:
            raise self._refused(reply)
        try:
            pid = _int(reply, "pid", 1, 2**31 - 1)
            if pid != self.peer_pid:
                raise _Bad(f"'pid' is {pid}, but the socket is served by process {self.peer_pid}")
            job = _text(reply, "job")
            qps = reply.get("qps")
            if not isinstance(qps, list) or len(qps) > MAX_QPS:
                raise _Bad(f"'qps' must be a list of at most {MAX_QPS} QPs, got {_what(qps)}")
            return [_qp_info(pid, job, q, i) for i, q in enumerate(qps)]
        except _Bad as exc:
            raise ShimError(f"shim {self.path}: invalid list reply: {exc}") from None

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
            raise self._refused(reply)
        pid = self.pid()
        try:
            results = reply["results"]
            if not isinstance(results, list) or len(results) > MAX_QPS:
                raise _Bad(f"'results' must be a list of at most {MAX_QPS}, got {_what(results)}")
            if qp is not None and len(results) > 1:
                raise _Bad(f"{len(results)} results for the one QP {qp}")
            out = [_tc_result(pid, r, i) for i, r in enumerate(results)]
            if qp is not None and any(r.qp != qp for r in out):
                raise _Bad(f"a result for QP {out[0].qp}, not for the QP {qp} asked")
            return out
        except _Bad as exc:
            raise ShimError(f"shim {self.path}: invalid set_tc reply: {exc}") from None

    def lease(self, ms: int) -> bool:
        """Renew the shim's lease ``ms`` ahead (0: end it now; the shim then puts every QP back to the
        application's class before answering). Returns whether the lease was still running: False
        means it had run out and the QPs are back at their own classes already."""
        reply = self.request({"op": "lease", "ms": _lease_ms(ms, low=0)})
        if reply.get("ok") is not True:
            raise self._refused(reply)
        was = reply.get("was_armed")
        if not isinstance(was, bool):
            raise ShimError(f"shim {self.path}: invalid lease reply: 'was_armed' must be true or false, got "
                            f"{_what(was)}")
        return was

    def named_pid(self) -> int | None:
        """Process id from the socket name (None for a custom socket path)."""
        m = SOCKET_NAME.fullmatch(self.path.name)
        return int(m.group(1)) if m else None

    def pid(self) -> int:
        """Process id from the socket name, else of the peer seen last (-1: not known)."""
        named = self.named_pid()
        if named is not None:
            return named
        return self.peer_pid if self.peer_pid is not None else -1


class _Bad(Exception):
    """A reply field is missing or wrong (turned into ShimError naming the socket)."""


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _get(obj: dict[str, Any], key: str) -> Any:
    if key not in obj:
        raise _Bad(f"'{key}' is missing")
    return obj[key]


def _int(obj: dict[str, Any], key: str, low: int, high: int, nullable: bool = False) -> Any:
    value = _get(obj, key)
    if nullable and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Bad(f"'{key}' must be an integer {low}..{high}{' or null' if nullable else ''}, got {_what(value)}")
    return value


def _number(obj: dict[str, Any], key: str) -> float:
    value = _get(obj, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Bad(f"'{key}' must be a finite number >= 0, got {_what(value)}")
    return float(value)


def _flag(obj: dict[str, Any], key: str) -> bool:
    value = _get(obj, key)
    if not isinstance(value, bool):
        raise _Bad(f"'{key}' must be true or false, got {_what(value)}")
    return value


def _text(obj: dict[str, Any], key: str, nullable: bool = False, absent: bool = False) -> Any:
    """A string field; ``nullable``: null allowed, ``absent``: it may be missing too (None)."""
    value = obj.get(key) if absent else _get(obj, key)
    if (nullable or absent) and value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise _Bad(f"'{key}' must be a string of at most {MAX_TEXT} characters{' or null' if nullable else ''}, "
                   f"got {_what(value)}")
    return value


def _endpoint(q: dict[str, Any], key: str, connected: bool) -> dict[str, Any] | None:
    """A QP's local or remote endpoint: qpn, and when connected the port (local) or lid (remote) and gid."""
    value = q.get(key)
    if value is None and key == "remote" and not connected:
        return None
    if not isinstance(value, dict):
        raise _Bad(f"'{key}' must be an object, got {_what(value)}")
    out: dict[str, Any] = {"qpn": _int(value, "qpn", 0, 0xFFFFFF)}
    if connected:
        out["port" if key == "local" else "lid"] = _int(value, "port" if key == "local" else "lid", 0, 0xFFFF)
        out["gid"] = _text(value, "gid")
    return out


def _qp_info(pid: int, job: str, q: Any, i: int) -> QpInfo:
    if not isinstance(q, dict):
        raise _Bad(f"qps[{i}] must be an object, got {_what(q)}")
    try:
        connected = _flag(q, "connected")
        return QpInfo(pid=pid, job=job, qp=_int(q, "qp", 0, 0xFFFFFF), state=_text(q, "state"),
                      tc=_int(q, "tc", 0, 255, nullable=True), connected=connected,
                      local=_endpoint(q, "local", connected) or {}, remote=_endpoint(q, "remote", connected),
                      resurrections=_int(q, "resurrections", 0, 2**63), failures=_int(q, "failures", 0, 2**63),
                      last_pause_us=_number(q, "last_pause_us"), last_error=_text(q, "last_error", nullable=True))
    except _Bad as exc:
        raise _Bad(f"qps[{i}]: {exc}") from None


def _tc_result(pid: int, r: Any, i: int) -> TcResult:
    if not isinstance(r, dict):
        raise _Bad(f"results[{i}] must be an object, got {_what(r)}")
    try:
        return TcResult(pid=pid, qp=_int(r, "qp", 0, 0xFFFFFF), ok=_flag(r, "ok"),
                        old_tc=_int(r, "old_tc", 0, 255, nullable=True), tc=_int(r, "tc", 0, 255, nullable=True),
                        changed=_flag(r, "changed"), deferred=_flag(r, "deferred"), pause_us=_number(r, "pause_us"),
                        drain_us=_number(r, "drain_us"), error=_text(r, "error", absent=True), raw=r)
    except _Bad as exc:
        raise _Bad(f"results[{i}]: {exc}") from None


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
