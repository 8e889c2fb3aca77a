"""What passes between a host agent and the jobs it serves, besides the iteration lines.

Two small channels, both plain files so that any training code can take part:

* **Shift orders** (agent -> job, CASSINI). The controller's ``cassini`` policy gives
  every job a phase: "start an iteration at ``start_at + k * period_s``". The agent
  writes it to a shift file (one JSON object, replaced atomically); the job emulator
  and the iteration hook read it before an iteration starts and, once per ``plan``,
  delay that start to the next such instant (see :func:`phase_delay`). A job that
  finds itself only a little late (at most :data:`LATE_SHARE` of a period) starts at
  once: waiting almost a whole period to be exact would cost more than the overlap.
* **Communication lines** (job -> agent, the overlap rule). A job whose communication
  can wait (overlap with the backward pass) writes, in the log its agent follows,

      leveller-comm job=NAME rank=R t=UNIX_TIME wait=SECONDS

  when a communication phase starts: it can wait ``wait`` seconds without stalling
  the next operation, so the agent may demote its flows inside ``[t, t + wait)``.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leveller.model.checks import check_name
from leveller.model.errors import FieldError
from leveller.model.limits import MAX_IDEAL_S

SHIFT_VERSION = 1
LATE_SHARE = 0.1  # a job at most this share of a period late starts at once (no wait of ~1 period)
MAX_SHIFT_FILE_BYTES = 4096
COMM_PREFIX = "leveller-comm"
COMM_PATTERN = re.compile(r"leveller-comm job=(?P<job>\S+) rank=\d+ t=(?P<t>[0-9.]+) wait=(?P<wait>[0-9.]+)")
MAX_WAIT_S = 3600.0


@dataclass(frozen=True)
class ShiftOrder:
    """Start iterations of ``job`` at ``start_at + k * period_s`` (unix times of this host), once per plan."""

    job: str
    plan: int
    start_at: float
    period_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"v": SHIFT_VERSION, "job": self.job, "plan": self.plan, "start_at": self.start_at,
                "period_s": self.period_s}


def shift_from_dict(raw: Any) -> ShiftOrder:
    """Validate a shift file's object; FieldError names the bad field."""
    if not isinstance(raw, dict) or set(raw) != {"v", "job", "plan", "start_at", "period_s"}:
        raise FieldError("shift", f"expected the keys v, job, plan, start_at, period_s; got {raw!r:.120}")
    if raw["v"] != SHIFT_VERSION:
        raise FieldError("v", f"{raw['v']!r} is not a supported version ({SHIFT_VERSION})")
    plan, start, period = raw["plan"], raw["start_at"], raw["period_s"]
    if isinstance(plan, bool) or not isinstance(plan, int) or plan < 0:
        raise FieldError("plan", f"{plan!r} is invalid; an integer >= 0")
    for name, value in (("start_at", start), ("period_s", period)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise FieldError(name, f"{value!r} is invalid; a finite number > 0")
    if period > MAX_IDEAL_S:
        raise FieldError("period_s", f"{period!r} is invalid; at most {MAX_IDEAL_S:g} s")
    return ShiftOrder(check_name(raw["job"], "job"), plan, float(start), float(period))


def shift_name(job: str) -> str:
    """The shift file's name for ``job`` (a checked job name: no path separator, no dot-dot)."""
    return f"{check_name(job, 'job')}.shift"


def shift_path(directory: Path | str, job: str) -> Path:
    """Where an agent with ``--shift-dir DIRECTORY`` writes the shift orders of ``job``."""
    return Path(directory) / shift_name(job)


SHIFT_FILE_MODE = 0o644  # every job's user reads its file, whatever the agent's umask
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_shift_at(dir_fd: int, name: str, order: ShiftOrder) -> None:
    """Replace the shift file ``name`` of the directory open as ``dir_fd`` atomically (a reader sees the
    old or the new order, never half of one), following no name in it: the agent is root and the
    directory may be writable by the jobs' users. The data goes to a temporary name created with
    O_CREAT|O_EXCL|O_NOFOLLOW (an entry already there, a planted symlink or a stale file, is removed
    first; a new random name is tried if it is planted again), then renamed onto ``name`` within the
    same directory (a rename replaces a symlink there, never what it points to)."""
    data = json.dumps(order.to_dict()).encode()
    tmp = f".{name}.{os.getpid()}.tmp"
    for _ in range(8):
        try:
            fd = os.open(tmp, _CREATE, SHIFT_FILE_MODE, dir_fd=dir_fd)
            break
        except FileExistsError:
            try:
                os.unlink(tmp, dir_fd=dir_fd)  # the name only: unlink never follows a symlink
            except FileNotFoundError:
                pass
            tmp = f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    else:
        raise FileExistsError(f"shift file {name}: every temporary name tried was taken at once (someone is "
                              "racing the agent in its shift directory)")
    try:
        try:
            os.fchmod(fd, SHIFT_FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_shift(path: Path, order: ShiftOrder) -> None:
    """Replace the shift file at ``path`` atomically, as :func:`write_shift_at` does in its directory."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_shift_at(dir_fd, path.name, order)
    finally:
        os.close(dir_fd)


def phase_delay(order: ShiftOrder, now: float, late_share: float = LATE_SHARE) -> float:
    """Seconds to wait from ``now`` so that the next iteration starts on the order's phase.

    A job at most ``late_share`` of a period past a start instant starts now (0)."""
    late = (now - order.start_at) % order.period_s
    if late <= late_share * order.period_s:
        return 0.0
    return order.period_s - late


class ShiftFollower:
    """Reads a job's shift file (only when it changed) and hands out each plan's delay once."""

    def __init__(self, path: Path | str, job: str) -> None:
        self.path = Path(path)
        self.job = job
        self._stamp: tuple[int, int] | None = None
        self._order: ShiftOrder | None = None
        self.applied_plan: int | None = None
        self.error: str | None = None  # why the last read was refused (the order is then ignored)

    def _read(self) -> ShiftOrder | None:
        try:
            st = self.path.stat()
        except OSError:
            return self._order
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp == self._stamp:
            return self._order
        self._stamp = stamp
        try:
            with self.path.open("rb") as fh:
                raw = json.loads(fh.read(MAX_SHIFT_FILE_BYTES))
            order = shift_from_dict(raw)
            if order.job != self.job:
                raise FieldError("job", f"{order.job!r} is not this job ({self.job!r})")
        except (OSError, ValueError, FieldError) as exc:
            self.error = f"{self.path}: {exc}"
            return self._order
        self.error = None
        self._order = order
        return order

    def pending_delay(self, now: float) -> tuple[float, int] | None:
        """(delay, plan) if a plan not applied yet is in the file, else None; marks it applied."""
        order = self._read()
        if order is None or order.plan == self.applied_plan:
            return None
        self.applied_plan = order.plan
        return phase_delay(order, now), order.plan


def format_comm_line(job: str, rank: int, t: float, wait_s: float) -> str:
    """The line a job writes when a communication phase that can wait ``wait_s`` seconds starts."""
    if not (math.isfinite(t) and math.isfinite(wait_s) and 0 <= wait_s <= MAX_WAIT_S):
        raise ValueError(f"t={t!r}, wait_s={wait_s!r}: finite, 0 <= wait_s <= {MAX_WAIT_S:g}")
    return f"{COMM_PREFIX} job={job} rank={rank} t={t:.6f} wait={wait_s:.6f}"
