"""One-line iteration hook for real training code.

    from leveller.jobs.hook import iteration_done
    ...
    iteration_done()          # at the end of every training iteration

It writes the emulator's log line (leveller.jobs.logline) so the host agent's
rate tracker counts real jobs exactly like emulated ones. Configuration comes
from the environment, so the training script needs no arguments:
LEVELLER_JOB (job name, default: the script name), LEVELLER_RANK (else RANK,
which torchrun sets, else 0) and LEVELLER_ITER_LOG (file to append to, default
stderr). The first line written is ``iter=0`` stamped with the process start
time, which is the job's t0 for R.

The one process-wide reporter lives in ``default_reporter`` (an lru_cache):
a one-line hook cannot avoid holding the count somewhere; tests call
``default_reporter.cache_clear()``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from leveller.jobs.logline import check_job_name, format_line


def process_start_time(pid: int | str = "self") -> float:
    """Unix time at which process ``pid`` started (from /proc), or now if /proc is unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat; fields[0] is field 3
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class IterationReporter:
    """Counts iterations and writes one log line per iteration to ``sink``."""

    def __init__(self, job: str, rank: int, write: Callable[[str], None],
                 clock: Callable[[], float] = time.time, start_time: float | None = None) -> None:
        self.job = check_job_name(job)
        self.rank = rank
        self._write = write
        self._clock = clock
        self._lock = threading.Lock()
        self.iterations = 0
        self._write(format_line(self.job, 0, clock() if start_time is None else start_time, rank) + "\n")

    def iteration_done(self) -> int:
        """Record one finished iteration; return the count so far."""
        with self._lock:
            self.iterations += 1
            self._write(format_line(self.job, self.iterations, self._clock(), self.rank) + "\n")
            return self.iterations


def _sink(path: str | None) -> Callable[[str], None]:
    """A writer appending to ``path`` with one write() per line (atomic with O_APPEND), or stderr."""
    if not path:
        def write_stderr(line: str) -> None:
            sys.stderr.write(line)
            sys.stderr.flush()
        return write_stderr
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write_file(line: str) -> None:
        os.write(fd, line.encode())
    return write_file


def reporter_from_env(env: Mapping[str, str]) -> IterationReporter:
    """Build a reporter configured by LEVELLER_JOB / LEVELLER_RANK / RANK / LEVELLER_ITER_LOG."""
    job = env.get("LEVELLER_JOB") or Path(sys.argv[0] or "job").stem or "job"
    rank = int(env.get("LEVELLER_RANK") or env.get("RANK") or 0)
    return IterationReporter(job, rank, _sink(env.get("LEVELLER_ITER_LOG")),
                             start_time=process_start_time())


@functools.lru_cache(maxsize=1)
def default_reporter() -> IterationReporter:
    """The process-wide reporter used by :func:`iteration_done` (created on first use)."""
    return reporter_from_env(os.environ)


def iteration_done() -> int:
    """Call once at the end of every training iteration; returns the iteration count."""
    return default_reporter().iteration_done()
