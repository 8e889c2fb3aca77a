"""Soak: the demo's live system for a long run, with memory and open files of every service sampled.

The demo's orchestration runs unchanged (leveller.experiments.shared.cluster + leveller.experiments.shared.policy_run):
a one-switch testbed with OVS driven by the SDN app, a controller, an agent per
host with its eBPF marker, and the paper's trio of emulated jobs (C:M = 1:2, 1:2,
2:1) under `leveller`, re-ranked at every iteration end, for the whole duration.
While the jobs run, every ``interval_s`` the controller, each agent and the SDN
app are read from /proc (RSS, open fds, CPU time); leveller.experiments.soak.report
turns the samples into growth figures and a verdict. Everything is torn down at
the end, also on error or Ctrl-C, and the report says whether anything of the
run was left (namespaces, processes naming its directories, the directories).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.cluster import PIDS_FILE, DemoCluster
from leveller.experiments.shared.policy_run import LiveSettings, run_policy
from leveller.experiments.shared.procstat import ProcSample, cmdline, leftovers, read_proc, role_of
from leveller.experiments.shared.star import LEVELS
from leveller.experiments.soak.report import process_growth, run_verdict

EXAMPLE, POLICY = "trio", "leveller"
Progress = Callable[[float], None]
Note = Callable[[str], None]


def _quiet(_: Any) -> None:
    return None


@dataclass
class Sampler:
    """Reads every service of the cluster from /proc, at most once per ``interval_s``."""

    cluster: DemoCluster
    interval_s: float
    pids: dict[str, int] = field(default_factory=dict)
    series: dict[str, list[ProcSample]] = field(default_factory=dict)
    t_first: float | None = None
    t_last: float | None = None
    _next: float = 0.0

    def _discover(self) -> None:
        found = [self.cluster.testbed.state.sdn_pid or 0]
        pids_file = self.cluster.work_dir / PIDS_FILE
        if pids_file.exists():
            try:
                found += [int(p) for p in json.loads(pids_file.read_text())]
            except ValueError:
                pass  # being rewritten this instant: next time
        for pid in found:
            role = role_of(cmdline(pid)) if pid else None
            if role is not None and self.pids.get(role) != pid:
                self.pids[role] = pid
                self.series.setdefault(role, [])

    def poll(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval_s
        self._discover()
        for role, pid in self.pids.items():
            sample = read_proc(pid, now)
            if sample is not None:
                self.series[role].append(sample)
        self.t_first = now if self.t_first is None else self.t_first
        self.t_last = now


def run_soak(duration_s: float, interval_s: float = 5.0, name: str = "soak", run_dir: Path | None = None,
             progress: Progress = _quiet, note: Note = _quiet) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the live system for ``duration_s`` seconds of jobs; returns (report, samples per process)."""
    settings = LiveSettings(seconds=duration_s)
    jobs = plan(EXAMPLE)
    # R is context here, not the point: ideal times from the model instead of a profiling run
    ideal = {j.name: j.seconds(settings.unit_s).ideal for j in jobs}
    cluster = DemoCluster(name, run_dir, progress=note)
    markers = [cluster.run_dir, cluster.work_dir]
    sampler = Sampler(cluster, interval_s)

    def tick(fraction: float) -> None:
        sampler.poll()
        progress(fraction)

    with cluster:

        note("running the trio under leveller")
        out = run_policy(cluster, "soak", POLICY, [j.live(settings.unit_s) for j in jobs], ideal, settings, tick)
        note("tearing down")
    left = leftovers(cluster.name, markers)
    t0, t1 = sampler.t_first or 0.0, sampler.t_last or 0.0
    processes = {role: {"pid": sampler.pids[role], **process_growth(s, t0, t1, interval_s)}
                 for role, s in sorted(sampler.series.items())}
    report = {
        "duration_s": round(t1 - t0, 1),
        "interval_s": interval_s,
        "samples": max((len(s) for s in sampler.series.values()), default=0),
        "processes": processes,
        "verdict": run_verdict(processes),
        "jobs": {j.name: {"iterations": out.logs[j.name].iterations_by(out.t_end),
                          "rate": round(out.rates[j.name], 4)} for j in jobs},
        "decisions": len(out.decisions),
        "cleanup": {"clean": not any(left.values()), **left},
        "settings": {"example": EXAMPLE, "policy": POLICY, "levels": LEVELS, "tau_s": settings.tau_s,
                     "unit_s": settings.unit_s, "lease_s": settings.lease_s},
    }
    series = {role: [[round(s.t - t0, 2), s.rss_kib, s.fds, round(s.cpu_s, 2)] for s in samples]
              for role, samples in sampler.series.items()}
    return report, series


def plot_soak(path: Path, series: dict[str, list[list[float]]], report: dict[str, Any]) -> None:
    """PNG: growth of RSS since the first sample, and open fds, of every process over the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_m, ax_f) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for role, rows in sorted(series.items()):
        if not rows:
            continue
        minutes = [r[0] / 60.0 for r in rows]
        ax_m.plot(minutes, [(r[1] - rows[0][1]) / 1024.0 for r in rows],
                  label=f"{role} ({rows[0][1] / 1024:.0f} MiB at first, {report['processes'][role]['verdict']})")
        ax_f.plot(minutes, [r[2] for r in rows], label=role)
    ax_m.set_ylabel("RSS growth since the first sample (MiB)")
    ax_m.set_title(f"soak, {report['duration_s'] / 60:.1f} min: {report['verdict']}")
    ax_m.legend(fontsize=7, loc="upper left")
    ax_f.set_ylabel("open file descriptors")
    ax_f.set_xlabel("minutes since the jobs started")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
