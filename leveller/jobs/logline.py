"""The one-line-per-iteration log format shared by the emulator, the hook and the rate tracker.

    leveller-iter job=NAME rank=R iter=N t=UNIX_TIME

``iter`` is the number of iterations finished so far (0 = the job has started,
so ``t`` of that line is the job's start time t0). The rate tracker takes the
largest ``iter`` it saw, so several ranks logging into one file do not double count.
"""

from __future__ import annotations

import math

from leveller.errors import UserError
from leveller.rpc.codec import SchemaError
from leveller.rpc.schema import check_name

PREFIX = "leveller-iter"
DEFAULT_PATTERN = (
    r"leveller-iter job=(?P<job>\S+)(?: rank=\d+)? iter=(?P<iter>\d+)(?: t=(?P<t>[0-9.]+))?"
)


def check_job_name(name: str) -> str:
    """Return ``name`` if it is a valid job name (the controller's rule), else raise UserError naming it."""
    try:
        return check_name(name, "job name")
    except SchemaError as exc:
        raise UserError(str(exc)) from None


def format_line(job: str, iteration: int, t: float, rank: int = 0) -> str:
    """One log line (no trailing newline) for ``iteration`` finished iterations at unix time ``t``."""
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    if not math.isfinite(t):
        raise ValueError(f"t must be finite, got {t}")
    return f"{PREFIX} job={job} rank={rank} iter={iteration} t={t:.6f}"
