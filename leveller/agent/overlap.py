"""The overlap rule on a host: a job's flows yield while its communication can wait.

Jobs announce each communication phase in the log the agent follows
(``leveller-comm job=J rank=R t=T wait=W``, leveller.jobs.control): it started at
``T`` and can wait ``W`` seconds without stalling the next operation. Inside
``[T, T + W)`` the agent writes the lowest level's DSCP for that job's flows instead
of the controller's level (leveller.core.overlap.effective_level), then the
controller's level again; no coordination with anyone. The latest announced phase
of a job counts. Pure: lines and times in, levels out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from leveller.core.overlap import effective_level
from leveller.jobs.control import COMM_PATTERN, MAX_WAIT_S
from leveller.model.checks import check_name
from leveller.model.errors import FieldError
from leveller.model.flow import FlowKey


class OverlapWindows:
    """The latest communication window of every job seen in the logs."""

    def __init__(self) -> None:
        self.windows: dict[str, tuple[float, float]] = {}  # job -> (start, wait)
        self.rejected = 0  # comm lines with a bad field (skipped)
        self._inside: frozenset[str] | None = None  # jobs inside their window at the last check

    def changed(self, now: float) -> bool:
        """True if the set of jobs inside their window differs from the last call's (O(jobs): the
        caller rewrites the marks of all flows only then)."""
        inside = frozenset(j for j, (start, wait) in self.windows.items() if start <= now < start + wait)
        if inside == self._inside:
            return False
        self._inside = inside
        return True

    def feed(self, lines: Iterable[str]) -> bool:
        """Read the comm lines among ``lines``; True if a job's window changed."""
        changed = False
        for line in lines:
            if "leveller-comm" not in line:
                continue
            m = COMM_PATTERN.search(line)
            if m is None:
                continue
            try:
                job = check_name(m["job"], "job")
                start, wait = float(m["t"]), float(m["wait"])
            except (FieldError, ValueError):
                self.rejected += 1
                continue
            if not (math.isfinite(start) and start > 0 and 0 <= wait <= MAX_WAIT_S):
                self.rejected += 1
                continue
            old = self.windows.get(job)
            if old is None or start > old[0]:
                self.windows[job] = (start, wait)
                changed = True
        return changed

    def level(self, job: str, assigned: int, now: float, lowest: int = 0) -> int:
        """The level a flow of ``job`` uses at ``now`` given the controller's ``assigned`` one."""
        window = self.windows.get(job)
        if window is None:
            return assigned
        return effective_level(assigned, window[0], window[1], now, lowest)

    def marks(self, assigned: Mapping[FlowKey, tuple[str, int]], dscp_by_level: tuple[int, ...],
              now: float) -> dict[FlowKey, int]:
        """flow -> DSCP at ``now`` for flows given as flow -> (job, controller's level)."""
        return {key: dscp_by_level[self.level(job, level, now)] for key, (job, level) in assigned.items()}
