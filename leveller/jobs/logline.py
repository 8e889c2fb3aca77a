"""The one-line-per-iteration log format shared by the emulator, the hook and the rate tracker.

    leveller-iter job=NAME rank=R iter=N t=UNIX_TIME

``iter`` is the number of iterations finished so far (0 = the job has started,
so ``t`` of that line is the job's start time t0). The rate tracker takes the
largest ``iter`` it saw, so several ranks logging into one file do not double count.
"""

from __future__ import annotations

import math

from leveller.model.checks import check_job_name

__all__ = ["DEFAULT_PATTERN", "PREFIX", "check_job_name", "format_line"]

PREFIX = "leveller-iter"
DEFAULT_PATTERN = (
    r"leveller-iter job=(?P<job>\S+)(?: rank=\d+)? iter=(?P<iter>\d+)(?: t=(?P<t>[0-9.]+))?"
)


def format_line(job: str, iteration: int, t: float, rank: int = 0) -> str:
    """One log line (no trailing newline) for ``iteration`` finished iterations at unix time ``t``."""
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    if not math.isfinite(t):
        raise ValueError(f"t must be finite, got {t}")
    return f"{PREFIX} job={job} rank={rank} iter={iteration} t={t:.6f}"
