"""Rate tracker: count a job's iterations from its log output.

A configurable regular expression finds iteration lines. Named groups:
``iter`` (iterations finished so far; the tracker keeps the largest, so
duplicate lines from several ranks do not double count; without it every
match counts one), ``job`` (the job name; without it the log's default job is
used) and ``t`` (unix time of the line; without it the time the line was read).
The default pattern matches leveller.jobs.logline, which the emulator and the
one-line hook write. R itself is computed with leveller.core.rate.progress_rate.

:class:`RateTracker` is pure (lines and times in, counts out); :class:`LogTailer`
follows a file or a FIFO, surviving truncation, rotation and late creation.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from leveller.core.rate import progress_rate
from leveller.errors import UserError
from leveller.jobs.logline import DEFAULT_PATTERN, check_job_name

RECENT = 64  # iteration end times kept per job (enough for the ideal-time profiler)


def compile_pattern(text: str, default_job: str | None) -> re.Pattern[str]:
    """Compile a user's iteration regex; it needs a ``job`` group or a default job name."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise UserError(f"--pattern {text!r} is not a valid regular expression: {exc}") from None
    unknown = set(pattern.groupindex) - {"job", "iter", "t"}
    if unknown:
        raise UserError(f"--pattern {text!r}: unknown named groups {sorted(unknown)}; allowed: job, iter, t")
    if "job" not in pattern.groupindex and default_job is None:
        raise UserError(f"--pattern {text!r} has no (?P<job>...) group: give the job name for this log (JOB=PATH)")
    return pattern


@dataclass
class JobProgress:
    """What the log said about one job so far."""

    job: str
    iterations: int = 0
    start_time: float | None = None
    last_time: float | None = None
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=RECENT))

    def rate(self, ideal_time: float, now: float) -> float | None:
        """R via leveller.core, or None while the start time is unknown."""
        if self.start_time is None or now < self.start_time:
            return None
        return float(progress_rate(self.iterations, ideal_time, self.start_time, now))


class RateTracker:
    """Counts iterations per job from log lines (pure: the caller passes the time)."""

    def __init__(self, pattern: str = DEFAULT_PATTERN, default_job: str | None = None) -> None:
        self.default_job = check_job_name(default_job) if default_job is not None else None
        self.pattern = compile_pattern(pattern, self.default_job)
        self._counts_lines = "iter" not in self.pattern.groupindex
        self.jobs: dict[str, JobProgress] = {}

    def feed(self, line: str, now: float) -> str | None:
        """Account one log line read at ``now``; return the job it advanced, if any."""
        m = self.pattern.search(line)
        if m is None:
            return None
        groups = m.groupdict()
        job = groups.get("job") or self.default_job
        if job is None:
            return None
        t = now
        if groups.get("t"):
            try:
                t = float(groups["t"])
            except ValueError:
                return None
            if not math.isfinite(t):
                return None
        progress = self.jobs.setdefault(job, JobProgress(job))
        if self._counts_lines:
            if progress.start_time is None:
                progress.start_time = t
            else:
                progress.iterations += 1
                progress.recent.append((progress.iterations, t))
        else:
            n = int(groups["iter"])
            if n == 0 or progress.start_time is None:
                progress.start_time = t if progress.start_time is None else min(progress.start_time, t)
            if n > progress.iterations:
                progress.iterations = n
                progress.recent.append((n, t))
        progress.last_time = t if progress.last_time is None else max(progress.last_time, t)
        return job

    def feed_all(self, lines: Iterable[str], now: float) -> set[str]:
        """Feed many lines; return the jobs that advanced."""
        return {job for line in lines if (job := self.feed(line, now)) is not None}


class LogTailer:
    """Follows a log file (or FIFO) from its current end, or from the start with ``from_start``."""

    def __init__(self, path: str, from_start: bool = True) -> None:
        self.path = path
        self._fd: int | None = None
        self._inode: int | None = None
        self._pos = 0
        self._partial = b""
        self._from_start = from_start

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        self._fd, self._inode, self._partial = fd, st.st_ino, b""
        self._pos = 0 if (self._from_start or not _is_regular(st.st_mode)) else st.st_size
        self._from_start = True  # a rotated/recreated file is read from its start
        return True

    def poll(self) -> list[str]:
        """Return the complete lines written since the last poll."""
        if self._fd is None and not self._open():
            return []
        assert self._fd is not None
        st = os.fstat(self._fd)
        if _is_regular(st.st_mode):
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if st.st_size < self._pos:  # truncated
                self._pos, self._partial = 0, b""
            data = os.pread(self._fd, max(0, st.st_size - self._pos), self._pos)
            self._pos += len(data)
            if current is not None and current.st_ino != self._inode:  # rotated: finish old, switch
                self.close()
        else:
            chunks = []
            while True:
                try:
                    chunk = os.read(self._fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            data = b"".join(chunks)
        buf = self._partial + data
        *lines, self._partial = buf.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)
