"""Where a registered job's iterations come from: a log the agent opened for it, or messages.

Both look like the agent's log tailers (leveller.agent.rate_tracker.LogTailer) to the agent's loop,
so a registered job is read, checked and counted exactly like a job named by --log: ``FdTailer``
follows a log from a descriptor opened once on the client's behalf (leveller.agent.peers.open_as:
never by path again, so a log replaced by a symbolic link later is not followed), and
``MessageTailer`` turns iteration-end messages of the registration socket into the log lines of
leveller.jobs.logline, which the job's RateTracker parses with the controller's own field checks.
"""

from __future__ import annotations

import os
import threading
from collections import deque

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.jobs.logline import DEFAULT_PATTERN, format_line

MAX_QUEUED = 256  # iteration ends kept between two polls (a count is cumulative: older ones are redundant)


class FdTailer(LogTailer):
    """A LogTailer over one descriptor, read from its start; rotation by path is not followed."""

    def __init__(self, fd: int, label: str) -> None:
        self._given: int | None = fd
        super().__init__(label, from_start=True)

    def _open(self, at_end: bool = False) -> bool:
        if self._given is None:
            return False  # closed: the registration ended
        if self._fd is None:
            st = os.fstat(self._given)
            self._fd, self._inode = self._given, (st.st_dev, st.st_ino)
        return True

    def _rotated(self) -> bool:
        return False

    def close(self) -> None:
        super().close()
        self._given = None


class MessageTailer:
    """The lines of one registration's iteration-end messages (thread-safe: the socket thread puts,
    the agent's loop polls)."""

    behind = False
    long_lines = 0
    restarts = 0

    def __init__(self, job: str, rank: int, label: str) -> None:
        self.job, self.rank, self.path = job, rank, label
        self._lines: deque[str] = deque(maxlen=MAX_QUEUED)
        self._lock = threading.Lock()

    def started(self, t: float, done: int = 0, now: float | None = None) -> None:
        """The job's start (``iter=0`` at ``t``), and the count it had when it registered (a job that
        registers again after the agent came back says how far it is)."""
        self.put(0, t)
        if done > 0:
            self.put(done, t if now is None else now)

    def put(self, n: int, t: float) -> None:
        with self._lock:
            self._lines.append(format_line(self.job, n, t, self.rank))

    def poll(self) -> list[str]:
        with self._lock:
            out = list(self._lines)
            self._lines.clear()
        return out

    def close(self) -> None:
        with self._lock:
            self._lines.clear()


class OneJobTracker(RateTracker):
    """A RateTracker of one registration: every counted line is the registered job's, whatever job name
    the line carries (a client's log cannot report iterations of another job)."""

    def __init__(self, job: str, pattern: str | None = None) -> None:
        super().__init__(pattern or DEFAULT_PATTERN, default_job=job)

    def _parse(self, groups: dict[str, str | None], now: float) -> tuple[str, int | None, float]:
        return super()._parse({**groups, "job": self.default_job}, now)
