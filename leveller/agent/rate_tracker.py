"""Rate tracker: count a job's iterations from its log output.

A configurable regular expression finds iteration lines. Named groups:
``iter`` (iterations finished so far; the tracker keeps the largest, so
duplicate lines from several ranks do not double count; without it every
match counts one), ``job`` (the job name; without it the log's default job is
used) and ``t`` (unix time of the line; without it the time the line was read).
The default pattern matches leveller.jobs.logline, which the emulator and the
one-line hook write. R itself is computed with leveller.core.rate.progress_rate.

Every matched line is checked with the controller's own field rules
(leveller.rpc.schema: job name, iteration count, time not in the far future)
before it changes anything: a bad line is skipped and counted (``rejected``,
by field) instead of poisoning the job table, so one malformed line cannot
make every later report of the host invalid.

:class:`RateTracker` is pure (lines and times in, counts out); :class:`LogTailer`
follows a file or a FIFO with bounded reads, surviving truncation, rotation
and late creation. A log truncated or replaced (its size went down, or its path
leads to another inode) may hold a job restarted under the same name: the
tailer counts it in ``restarts``, the agent calls ``RateTracker.restart`` and a
job whose next count is below the one it had starts a new run of R (a job that
goes on counting, as after logrotate, keeps its run). A log path that leads to anything else (a directory, a
device such as /dev/zero, a socket, a symlink loop, a file it may not read) is
skipped and counted like a bad line (field ``log``), and followed again once it
is a log again: the agent, which marks every flow of the host, must not stop
for one job's log.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from leveller.core.rate import progress_rate
from leveller.errors import UserError
from leveller.jobs.logline import DEFAULT_PATTERN, check_job_name
from leveller.model.checks import check_iterations, check_name, check_not_future, check_time
from leveller.model.errors import FieldError
from leveller.model.limits import MAX_JOBS

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
    """Counts iterations per job from log lines (pure: the caller passes the time).

    ``on_reject(field, message)`` is called for every matched line that is skipped;
    ``rejected`` counts them by field (job, iter, t, jobs = one job too many).
    """

    def __init__(self, pattern: str = DEFAULT_PATTERN, default_job: str | None = None,
                 on_reject: Callable[[str, str], None] | None = None, max_jobs: int = MAX_JOBS) -> None:
        self.default_job = check_job_name(default_job) if default_job is not None else None
        self.pattern = compile_pattern(pattern, self.default_job)
        self.counts_lines = "iter" not in self.pattern.groupindex
        self.jobs: dict[str, JobProgress] = {}
        self.rejected: Counter[str] = Counter()
        self.on_reject = on_reject
        self.max_jobs = max_jobs
        self._restarted: set[str] = set()  # jobs whose next count says whether their log's job restarted

    def restart(self) -> None:
        """The log was truncated or replaced: each job's next counted line below its count starts a new run
        (start time and count from that line on), a line at or above it continues the run."""
        self._restarted = set(self.jobs)

    def _parse(self, groups: dict[str, str | None], now: float) -> tuple[str, int | None, float]:
        """(job, iteration or None, time) of a matched line; FieldError names the bad field."""
        job = check_name(groups.get("job") or self.default_job, "job")
        t = now
        raw_t = groups.get("t")
        if raw_t:
            t = check_time(_number(raw_t, "t", float), "t")
        check_not_future(t, "t", now)
        n = None if self.counts_lines else check_iterations(_number(groups["iter"] or "", "iter", int), "iter")
        if job not in self.jobs and len(self.jobs) >= self.max_jobs:
            raise FieldError("jobs", f"{job!r} would be job number {len(self.jobs) + 1}; a report carries at "
                              f"most {self.max_jobs}")
        return job, n, t

    def feed(self, line: str, now: float) -> str | None:
        """Account one log line read at ``now``; return the job it advanced, if any."""
        m = self.pattern.search(line)
        if m is None:
            return None
        try:
            job, n, t = self._parse(m.groupdict(), now)
        except FieldError as exc:
            self.rejected[exc.field] += 1
            if self.on_reject is not None:
                self.on_reject(exc.field, f"{exc} (line {line[:120]!r})")
            return None
        if job in self._restarted and n is not None:
            self._restarted.discard(job)
            if n < self.jobs[job].iterations:  # the count went down: a new run of this job, not the old one
                del self.jobs[job]
        progress = self.jobs.setdefault(job, JobProgress(job))
        if n is None:
            if progress.start_time is None:
                progress.start_time = t
            else:
                progress.iterations += 1
                progress.recent.append((progress.iterations, t))
        else:
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


def _number(text: str, name: str, kind: type[int] | type[float]) -> int | float:
    """``text`` as an int or float; FieldError (field ``name``) if it is not one or is absurdly long."""
    if len(text) > 40:
        raise FieldError(name, f"{text[:20]!r}... has {len(text)} characters; not a plausible number")
    try:
        return kind(text)
    except ValueError:
        raise FieldError(name, f"{text!r} is not a number") from None


EDGE_BYTES = 64 * 1024  # read at both ends of a log joined late: its jobs' start lines, their latest lines
MAX_READ_BYTES = 1 << 20  # read per poll at most: a backlog is worked off over several polls
MAX_LINE_BYTES = 64 * 1024  # longer lines are skipped (counted in long_lines), never buffered whole


class LogTailer:
    """Follows a log file (or FIFO) with bounded memory: at most ``max_read`` bytes per poll.

    By default it starts at the end of a file that exists when it is created
    (lines written before are history: a 100 MB backlog is not replayed), after
    reading the file's first and last ``edge_bytes``: a job logs its start
    (``iter=0``) at the top and its latest count at the bottom, so R is right
    from the first report; pass ``edge_bytes=0`` for patterns without an
    ``iter`` group (counting old lines would be wrong). ``from_start`` reads
    the whole file instead, ``max_read`` bytes per poll.
    A file created, rotated or truncated later is read from its start. Lines
    longer than ``max_line`` bytes are skipped and counted in ``long_lines``.
    ``behind`` is True while more than one poll's worth is waiting.
    Only regular files and FIFOs are opened (checked before the open, so no
    device is ever opened, and again on the open descriptor); a path that leads
    elsewhere or cannot be opened or read is skipped: ``on_reject("log", why)``
    is called (the agent counts it with the bad lines) and ``bad_logs`` counts
    up, once each time the path goes bad, not at every poll.
    """

    def __init__(self, path: str, from_start: bool = False, edge_bytes: int = EDGE_BYTES,
                 max_read: int = MAX_READ_BYTES, max_line: int = MAX_LINE_BYTES) -> None:
        if not 0 < max_line <= max_read:
            raise ValueError(f"need 0 < max_line <= max_read, got {max_line}, {max_read}")
        self.path = path
        self.max_read, self.max_line, self.edge_bytes = max_read, max_line, edge_bytes
        self.long_lines = 0
        self.behind = False
        self.on_reject: Callable[[str, str], None] | None = None  # (field "log", why): set by the agent
        self.bad_logs = 0  # times the path went bad (not a regular file or FIFO, or unreadable)
        self.restarts = 0  # times the log was truncated or replaced by another file (its job may have restarted)
        self._bad: str | None = None  # why the path is not read now (None: it is, or it does not exist)
        self._unreported: list[str] = []  # refusals before on_reject was set (reported at the next poll)
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None  # (device, inode) of the open log
        self._pos = 0
        self._edge_lines: list[str] = []  # joined late: complete lines of the file's two ends, for the next poll
        self._partial = b""
        self._discarding = False  # inside a line longer than max_line: drop up to its newline
        if not from_start:
            self._open(at_end=True)  # the end as of now; a file that appears later is read whole

    def _refuse(self, why: str) -> bool:
        """Skip the path (False): report why, once per time it goes bad."""
        if why != self._bad:
            self._bad = why
            self.bad_logs += 1
            message = f"log {self.path}: {why}"
            if self.on_reject is not None:
                self.on_reject("log", message)
            else:
                self._unreported = [*self._unreported[-15:], message]
        return False

    def _open(self, at_end: bool = False) -> bool:
        try:  # stat first (following a symlink: a log may be a link to the current file): never open a device
            st = os.stat(self.path)
        except FileNotFoundError:
            self._bad = None
            return False
        except OSError as exc:  # a symlink loop, a path through a file, no permission
            return self._refuse(f"cannot be opened: {exc.strerror}")
        if not _is_log(st.st_mode):
            return self._refuse(f"it is {_kind(st.st_mode)}; only regular files and FIFOs are read")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as exc:
            return self._refuse(f"cannot be opened: {exc.strerror}")
        st = os.fstat(fd)
        if not _is_log(st.st_mode):  # replaced between the stat and the open
            os.close(fd)
            return self._refuse(f"it is {_kind(st.st_mode)}; only regular files and FIFOs are read")
        self._bad = None
        if self._inode is not None and self._inode != (st.st_dev, st.st_ino):
            self.restarts += 1  # another file than the one read before
        self._fd, self._inode, self._partial, self._discarding = fd, (st.st_dev, st.st_ino), b"", False
        self._pos, self._edge_lines = 0, []
        size = st.st_size
        if at_end and _is_regular(st.st_mode) and size > 2 * self.edge_bytes:
            try:
                self._read_edges(fd, size)
            except OSError as exc:
                self.close()
                return self._refuse(f"read failed: {exc.strerror}")
        return True

    def _read_edges(self, fd: int, size: int) -> None:
        """Joined late: start at the end, keeping the complete lines of the file's two ends for the next poll."""
        tail = os.pread(fd, max(self.edge_bytes, 1), size - max(self.edge_bytes, 1))
        cut = tail.rfind(b"\n") + 1  # a line being written is read whole at the next poll
        self._pos = size - len(tail) + cut
        self._discarding = cut == 0  # no line end in sight: drop the rest of that line
        if self.edge_bytes:
            head = os.pread(fd, self.edge_bytes, 0).split(b"\n")[:-1]  # complete lines only
            self._edge_lines = [self._decode(raw) for raw in head + tail[:cut].split(b"\n")[1:-1]
                                if len(raw) <= self.max_line]

    def poll(self) -> list[str]:
        """Return the complete lines written since the last poll (reading at most ``max_read`` bytes)."""
        if self._unreported and self.on_reject is not None:
            for message in self._unreported:
                self.on_reject("log", message)
            self._unreported = []
        if self._fd is None and not self._open():
            return []
        assert self._fd is not None
        lines, self._edge_lines = self._edge_lines, []
        try:
            return lines + self._read()
        except OSError as exc:  # an I/O error on the open log: drop it, try the path again at the next poll
            self.close()
            self._refuse(f"read failed: {exc.strerror}")
            return lines

    def _read(self) -> list[str]:
        assert self._fd is not None
        st = os.fstat(self._fd)
        if _is_regular(st.st_mode):
            if st.st_size < self._pos:  # truncated
                self._pos, self._partial, self._discarding = 0, b"", False
                self.restarts += 1
            data = os.pread(self._fd, min(self.max_read, max(0, st.st_size - self._pos)), self._pos)
            self._pos += len(data)
            self.behind = self._pos < st.st_size
            if not self.behind and self._rotated():  # old file finished: switch to the new one
                self.close()
        else:
            chunks, size = [], 0
            while size < self.max_read:
                try:
                    chunk = os.read(self._fd, min(65536, self.max_read - size))
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
            self.behind = size >= self.max_read
        return self._split(data)

    def _rotated(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # the path leads nowhere readable now (a symlink loop...): the next open says why
        return (st.st_dev, st.st_ino) != self._inode

    def _split(self, data: bytes) -> list[str]:
        """Complete lines of partial + data; an over-long line is dropped (counted once), in pieces."""
        *parts, partial = (self._partial + data).split(b"\n")
        out = []
        for raw in parts:
            if self._discarding:  # the tail of a line already dropped
                self._discarding = False
            elif len(raw) > self.max_line:
                self.long_lines += 1
            else:
                out.append(self._decode(raw))
        if len(partial) > self.max_line:
            if not self._discarding:
                self.long_lines += 1
                self._discarding = True
            partial = b""
        self._partial = partial
        return out

    @staticmethod
    def _decode(raw: bytes) -> str:
        return raw.decode("utf-8", "replace")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


def _is_log(mode: int) -> bool:
    """What a log may be: a regular file, or a FIFO a job writes into."""
    return stat.S_ISREG(mode) or stat.S_ISFIFO(mode)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a unix socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return f"not a regular file (mode {mode:o})"
