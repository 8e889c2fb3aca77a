"""R measured from the jobs' iteration logs (leveller.jobs.logline lines). Pure.

R_j = N_j(t_end) x T_j / (t_end - t0_j): iterations finished by the end of the
run times the ideal iteration time profiled alone, over the time since the job
started (its ``iter=0`` line), transient included, as the paper measures it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leveller.core.profiling import estimate_ideal_time
from leveller.core.rate import progress_rate

_LINE = re.compile(r"leveller-iter job=(?P<job>\S+) rank=\d+ iter=(?P<iter>\d+) t=(?P<t>[0-9.]+)")


@dataclass
class JobLog:
    """Iteration ends of one job (the earliest time each iteration count was logged by any rank)."""

    job: str
    start: float | None = None
    ends: dict[int, float] = field(default_factory=dict)

    def iterations_by(self, t: float) -> int:
        return max((n for n, when in self.ends.items() if when <= t), default=0)

    def end_times(self) -> list[float]:
        return [self.ends[n] for n in sorted(self.ends)]


def parse_logs(lines: Iterable[str]) -> dict[str, JobLog]:
    """Group iteration lines by job; other lines are ignored."""
    jobs: dict[str, JobLog] = {}
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        log = jobs.setdefault(m["job"], JobLog(m["job"]))
        n, t = int(m["iter"]), float(m["t"])
        if n == 0:
            log.start = t if log.start is None else min(log.start, t)
        elif n not in log.ends or t < log.ends[n]:
            log.ends[n] = t
    return jobs


def ideal_from_alone(log: JobLog, skip: int = 1) -> float:
    """Ideal iteration time of a job that ran alone: the median iteration duration
    (leveller.core.profiling), leaving out the first ``skip`` iterations (TCP slow start)."""
    times = ([log.start] if log.start is not None else []) + log.end_times()
    durations = [b - a for a, b in zip(times, times[1:])][skip:]
    return float(estimate_ideal_time(durations))


def measured_rate(log: JobLog, ideal_s: float, t_end: float) -> float:
    """R of a job at ``t_end`` from its log (ValueError if the job never started)."""
    if log.start is None:
        raise ValueError(f"job {log.job}: no start line (iter=0) in its log")
    return float(progress_rate(log.iterations_by(t_end), ideal_s, log.start, t_end))


def rate_series(log: JobLog, ideal_s: float, times: Sequence[float]) -> list[float | None]:
    """R(t) at each of ``times`` (None before the job started)."""
    out: list[float | None] = []
    for t in times:
        out.append(None if log.start is None or t <= log.start else measured_rate(log, ideal_s, t))
    return out


def top_job_changes(decisions: Sequence[dict[str, Any]]) -> int:
    """How often a re-ranking changed the controller's first-ranked job (0 for static or no priority).

    Only consecutive decisions over the same set of jobs count: a job that starts reporting
    later (at start-up, agents report in any order) changes the order without any re-ranking.
    """
    orders = [d["order"] for d in decisions if d.get("order")]
    return sum(1 for a, b in zip(orders, orders[1:]) if set(a) == set(b) and a[0] != b[0])


def job_bytes(lines: Iterable[str]) -> dict[str, list[tuple[float, int]]]:
    """From an agent's ``--json`` lines: per job, (time, bytes its flows sent from that host so far),
    read from the eBPF counters at every report."""
    out: dict[str, list[tuple[float, int]]] = {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or "t" not in rec:
            continue
        for job, flows in (rec.get("bytes") or {}).items():
            out.setdefault(job, []).append((float(rec["t"]), int(sum(flows.values()))))
    return {job: sorted(series) for job, series in out.items()}


def sending(series: Sequence[tuple[float, int]], t0: float, t1: float, bin_s: float,
            min_rate_bps: float) -> np.ndarray:
    """Bins of ``bin_s`` over [t0, t1): True where the job sent faster than ``min_rate_bps`` (the
    cumulative counter interpolated linearly between samples)."""
    edges = np.arange(t0, t1 + 1e-9, bin_s)
    if len(series) < 2 or len(edges) < 2:
        return np.zeros(max(0, len(edges) - 1), dtype=bool)
    t = np.array([s[0] for s in series])
    b = np.array([s[1] for s in series], dtype=float)
    cum = np.interp(edges, t, b)
    return np.diff(cum) * 8 / bin_s > min_rate_bps


def overlap_share(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the time either job communicates during which both do (0: interleaved, 1: always together)."""
    either = int((a | b).sum())
    return float((a & b).sum()) / either if either else 0.0
