"""What the controller knows: the latest report of every agent and the state of every job.

A job is the union of what the agents say about it: the most iterations,
the earliest start, an ideal time (reported by an agent, or measured here by
leveller.core.profiling while the job holds the unique top priority). One job
is profiled at a time, the earliest seen first; with a re-profiling interval,
windows reopen at semi-stochastic times (core.profiling.next_reprofile_time).
Reports are checked before anything is stored (a refused report changes nothing).
Apart from ideal times measured here, what the decision uses is a function of the
live agents' latest reports: two controllers fed the same reports decide the same
(leveller.rpc.failover relies on it).

Agents and jobs not heard from for ``stale_after_s`` are forgotten (``expire``): memory
and the work of every step and status grow with what is live, not with every host or
job name ever seen. Both maps are kept in least-recently-heard order, so expiring
costs O(1) per forgotten entry. A job that comes back later starts afresh (its ideal
time is profiled again unless an agent reports one).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field

from leveller.controller.decide import JobInput
from leveller.core.paths import FlowKey
from leveller.core.profiling import IdealTimeProfiler, next_reprofile_time
from leveller.rpc.schema import Report, check_not_future


@dataclass
class AgentState:
    report: Report
    received_at: float


@dataclass
class JobState:
    name: str
    first_seen: float
    last_seen: float
    profiler: IdealTimeProfiler = field(default_factory=IdealTimeProfiler)
    last_fed: int = 0  # highest iteration number given to the profiler
    next_reprofile: float | None = None


class Registry:
    """Agents' reports and per-job profiling state (not thread-safe: the controller holds a lock)."""

    def __init__(self, stale_after_s: float, reprofile_interval_s: float | None = None,
                 profile_samples: int = 5, seed: int = 0) -> None:
        self.stale_after_s = stale_after_s
        self.reprofile_interval_s = reprofile_interval_s
        self.profile_samples = profile_samples
        self.agents: OrderedDict[str, AgentState] = OrderedDict()  # least recently heard first
        self.jobs: OrderedDict[str, JobState] = OrderedDict()  # least recently reported first
        self._rng = random.Random(seed)

    def accept(self, report: Report, now: float) -> None:
        """Store a report after semantic checks (SchemaError names the field; nothing stored then)."""
        for i, j in enumerate(report.jobs):
            check_not_future(j.start_time, f"jobs[{i}].start_time", now)
            for k, (_, t) in enumerate(j.recent):
                check_not_future(t, f"jobs[{i}].recent[{k}][1]", now)
        self.agents[report.host] = AgentState(report, now)
        self.agents.move_to_end(report.host)
        for j in report.jobs:
            state = self.jobs.get(j.job)
            if state is None:
                state = self.jobs[j.job] = JobState(j.job, now, now, IdealTimeProfiler(self.profile_samples))
            state.last_seen = now
            self.jobs.move_to_end(j.job)
            for n, t in sorted(j.recent):
                if n > state.last_fed:
                    if state.profiler.profiling:
                        try:
                            state.profiler.iteration_end(t)
                        except ValueError:
                            pass  # an end before the window opened: not a sample
                    state.last_fed = n
            if state.profiler.ideal is not None and state.next_reprofile is None and self.reprofile_interval_s:
                state.next_reprofile = next_reprofile_time(now, self.reprofile_interval_s, self._rng.random())

    def expire(self, now: float) -> list[str]:
        """Forget agents and jobs not heard from for more than ``stale_after_s``; the hosts forgotten."""
        gone = []
        while self.agents:
            host, agent = next(iter(self.agents.items()))
            if now - agent.received_at <= self.stale_after_s:
                break
            del self.agents[host]
            gone.append(host)
        while self.jobs:
            name, job = next(iter(self.jobs.items()))
            if now - job.last_seen <= self.stale_after_s:
                break
            del self.jobs[name]
        return gone

    def live(self, now: float) -> list[AgentState]:
        """Agents whose last report is younger than ``stale_after_s``, by host name."""
        return [a for _, a in sorted(self.agents.items()) if now - a.received_at <= self.stale_after_s]

    def _reported_ideals(self, now: float) -> dict[str, float]:
        """job -> the ideal time a live agent reports for it (the first by host name)."""
        out: dict[str, float] = {}
        for a in self.live(now):
            for j in a.report.jobs:
                if j.ideal_time is not None:
                    out.setdefault(j.job, j.ideal_time)
        return out

    def update_profiling(self, now: float) -> None:
        """Open at most one profiling window: the earliest-seen job without an ideal time, or a re-profile."""
        live_jobs = {j.job for a in self.live(now) for j in a.report.jobs}
        if any(self.jobs[n].profiler.profiling for n in live_jobs):
            return
        reported = self._reported_ideals(now)
        waiting = sorted((s.first_seen, n) for n, s in self.jobs.items() if n in live_jobs
                         and s.profiler.ideal is None and n not in reported)
        if waiting:
            self.jobs[waiting[0][1]].profiler.start_window(now)
            return
        due = sorted((s.next_reprofile, n) for n, s in self.jobs.items()
                     if n in live_jobs and s.next_reprofile is not None and s.next_reprofile <= now)
        if due:
            state = self.jobs[due[0][1]]
            state.profiler.start_window(now)
            state.next_reprofile = None

    def job_inputs(self, now: float) -> list[JobInput]:
        """One JobInput per job some live agent reports, ordered by reported start, then name (the
        policy's tie-break): a function of the agents' reports, not of when or in which order they
        reached this controller, so a standby fed the same reports ranks ties the same."""
        merged: dict[str, tuple[int, float]] = {}
        for a in self.live(now):
            for j in a.report.jobs:
                it, st = merged.get(j.job, (0, j.start_time))
                merged[j.job] = (max(it, j.iterations), min(st, j.start_time))
        out = []
        reported = self._reported_ideals(now)
        for name in sorted(merged, key=lambda n: (merged[n][1], n)):
            state = self.jobs[name]
            ideal = reported.get(name)
            if ideal is None:
                ideal = None if state.profiler.ideal is None else float(state.profiler.ideal)
            it, st = merged[name]
            out.append(JobInput(name, it, st, ideal, profiling=state.profiler.profiling))
        return out

    def flows(self, now: float) -> dict[FlowKey, tuple[str, str, int]]:
        """flow -> (job, host, bytes) over live agents."""
        return {f.key: (f.job, a.report.host, f.bytes) for a in self.live(now) for f in a.report.flows}
