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

Where the host runs an agent with a registration socket ($LEVELLER_AGENT_SOCK, else
/run/leveller/agent.sock), the hook also registers the job there and sends each
iteration end (leveller.jobs.agentlink): the agent then needs no flag for the job.

Two optional extras, for the controller's policies:

* CASSINI time shifts: with LEVELLER_SHIFT_FILE set (the file an agent run with
  ``--shift-dir`` writes for this job), ``iteration_done()`` delays the start of
  the next iteration once per shift plan (leveller.jobs.control).
* The overlap rule: ``communication_started(wait_s)`` where the job's gradient
  communication starts (e.g. in a DDP comm hook), with how long it can wait without
  stalling the next operation (default: LEVELLER_WAIT seconds); an agent run with
  ``--overlap`` demotes the job's flows for that long.

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
from collections.abc import Callable, Mapping
from pathlib import Path

from leveller.jobs.agentlink import AgentLink, socket_path
from leveller.jobs.control import ShiftFollower, format_comm_line
from leveller.jobs.logline import check_job_name, format_line

REGISTER_WAIT_S = 2.0  # the longest the first iteration_done() waits for the agent's answer


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
                 clock: Callable[[], float] = time.time, start_time: float | None = None,
                 shift_file: str | None = None, wait_s: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep, link: AgentLink | None = None) -> None:
        self.job = check_job_name(job)
        self.rank = rank
        self._write = write
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self.iterations = 0
        self.wait_s = wait_s
        self.follower = ShiftFollower(shift_file, self.job) if shift_file else None
        self.shifted_s = 0.0  # total delay applied for CASSINI shifts
        self.link = link  # the host agent's registration socket (None: the log line only)
        self._write(format_line(self.job, 0, clock() if start_time is None else start_time, rank) + "\n")

    def iteration_done(self) -> int:
        """Record one finished iteration; return the count so far. With a shift file, a new shift
        plan delays the return (the start of the next iteration) to the plan's phase."""
        with self._lock:
            self.iterations += 1
            now = self._clock()
            self._write(format_line(self.job, self.iterations, now, self.rank) + "\n")
            count = self.iterations
        if self.link is not None:
            self.link.iteration(count, now)
        pending = self.follower.pending_delay(self._clock()) if self.follower is not None else None
        if pending is not None and pending[0] > 0:
            self.shifted_s += pending[0]
            self._sleep(pending[0])
        return count

    def communication_started(self, wait_s: float | None = None) -> None:
        """Announce a communication phase that can wait ``wait_s`` seconds (default: the reporter's)."""
        wait = self.wait_s if wait_s is None else wait_s
        self._write(format_comm_line(self.job, self.rank, self._clock(), wait) + "\n")


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
    """Build a reporter configured by LEVELLER_JOB / LEVELLER_RANK / RANK / LEVELLER_ITER_LOG,
    LEVELLER_SHIFT_FILE and LEVELLER_WAIT (seconds; ValueError names a bad value)."""
    job = env.get("LEVELLER_JOB") or Path(sys.argv[0] or "job").stem or "job"
    rank = int(env.get("LEVELLER_RANK") or env.get("RANK") or 0)
    wait_text = env.get("LEVELLER_WAIT") or "0"
    try:
        wait = float(wait_text)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= 3600:
        raise ValueError(f"LEVELLER_WAIT={wait_text!r}: seconds in [0, 3600]")
    path = socket_path(env)
    link = None
    if path is not None:  # registered before the job opens a connection (see leveller.jobs.agentlink)
        link = AgentLink(path, check_job_name(job), rank)
        link.wait_registered(REGISTER_WAIT_S)
    return IterationReporter(job, rank, _sink(env.get("LEVELLER_ITER_LOG")), start_time=process_start_time(),
                             shift_file=env.get("LEVELLER_SHIFT_FILE") or None, wait_s=wait, link=link)


@functools.lru_cache(maxsize=1)
def default_reporter() -> IterationReporter:
    """The process-wide reporter used by :func:`iteration_done` (created on first use)."""
    return reporter_from_env(os.environ)


def iteration_done() -> int:
    """Call once at the end of every training iteration; returns the iteration count."""
    return default_reporter().iteration_done()


def communication_started(wait_s: float | None = None) -> None:
    """Call where a communication phase starts that can wait ``wait_s`` seconds without stalling
    (default LEVELLER_WAIT); an agent with ``--overlap`` demotes the job's flows meanwhile."""
    default_reporter().communication_started(wait_s)
