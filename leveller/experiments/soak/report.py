"""Growth of memory and open files over a soak, per process, and a verdict. Pure.

A process's samples after a warm-up (the first WARMUP_SHARE of the run, at most
WARMUP_MAX_S: imports, caches and first connections settle there) are split into
a first and a last window (each WINDOW_SHARE of them, at least two samples).
Growth = last window - first window (mean RSS; highest fd count); the slope per
hour is a least-squares line through all samples after the warm-up. Verdict per
process:
  exited   it stopped answering before the end of the run
  growing  RSS grew by more than max(RSS_TOLERANCE_MIB, RSS_TOLERANCE_SHARE of the
           first window), or the fd count by more than FD_TOLERANCE
  ok       otherwise
The run's verdict is "stable" when every process is ok, else the worst one's word
with the processes concerned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from leveller.experiments.shared.procstat import ProcSample

WARMUP_SHARE = 0.1
WARMUP_MAX_S = 60.0
WINDOW_SHARE = 0.1
RSS_TOLERANCE_MIB = 4.0
RSS_TOLERANCE_SHARE = 0.05
FD_TOLERANCE = 2


def _slope_per_h(t: np.ndarray, y: np.ndarray) -> float:
    if len(t) < 2 or float(np.ptp(t)) == 0.0:
        return 0.0
    return float(np.polyfit(t, y, 1)[0] * 3600.0)


def process_growth(samples: Sequence[ProcSample], t_start: float, t_end: float,
                   interval_s: float) -> dict[str, Any]:
    """Figures and verdict of one process sampled over [t_start, t_end] (time.monotonic())."""
    if not samples:
        return {"samples": 0, "verdict": "exited"}
    warmup = min(WARMUP_MAX_S, WARMUP_SHARE * (t_end - t_start))
    steady = [s for s in samples if s.t >= t_start + warmup] or list(samples)
    w = max(2, int(len(steady) * WINDOW_SHARE))
    first, last = steady[:w], steady[-w:]
    t = np.array([s.t for s in steady])
    rss = np.array([s.rss_kib / 1024.0 for s in steady])
    fds = np.array([s.fds for s in steady], dtype=float)
    rss_first = float(np.mean([s.rss_kib for s in first])) / 1024.0
    rss_last = float(np.mean([s.rss_kib for s in last])) / 1024.0
    fds_first, fds_last = max(s.fds for s in first), max(s.fds for s in last)
    span = samples[-1].t - samples[0].t
    cpu_pct = 100.0 * (samples[-1].cpu_s - samples[0].cpu_s) / span if span > 0 else 0.0
    rss_growth, fd_growth = rss_last - rss_first, fds_last - fds_first
    if samples[-1].t < t_end - 2.5 * interval_s:
        verdict = "exited"
    elif rss_growth > max(RSS_TOLERANCE_MIB, RSS_TOLERANCE_SHARE * rss_first) or fd_growth > FD_TOLERANCE:
        verdict = "growing"
    else:
        verdict = "ok"
    return {
        "samples": len(samples),
        "rss_mib": {"first": round(rss_first, 2), "last": round(rss_last, 2),
                    "max": round(max(s.rss_kib for s in samples) / 1024.0, 2),
                    "growth": round(rss_growth, 2),
                    "growth_pct": round(100.0 * rss_growth / rss_first, 2) if rss_first else 0.0,
                    "slope_per_h": round(_slope_per_h(t, rss), 2)},
        "fds": {"first": fds_first, "last": fds_last, "max": max(s.fds for s in samples), "growth": fd_growth,
                "slope_per_h": round(_slope_per_h(t, fds), 2)},
        "cpu_pct": round(cpu_pct, 1),
        "verdict": verdict,
    }


def run_verdict(processes: Mapping[str, Mapping[str, Any]]) -> str:
    """'stable', or 'exited: a, b' / 'growing: a, b' (exited outranks growing)."""
    for word in ("exited", "growing"):
        names = sorted(name for name, p in processes.items() if p["verdict"] == word)
        if names:
            return f"{word}: {', '.join(names)}"
    return "stable"
