"""What the controller knows: the latest report of every agent and the state of every job.

A job is the union of what the agents say about it: the most iterations,
the earliest start, an ideal time (reported by an agent, or measured here by
leveller.core.profiling while the job holds the top priority on its links). One
job is profiled at a time, the earliest seen first, beside it any job waiting for
its first profile whose flows share no link with a job being profiled (the
controller says which links each job's routed flows cross); with a re-profiling interval,
windows reopen at semi-stochastic times (core.profiling.next_reprofile_time).
Reports are checked before anything is stored (a refused report changes nothing).
Apart from ideal times measured here and the samples a windowed or decayed R reads
(kept here, one per step), what the decision uses is a function of the live agents'
latest reports: two controllers fed the same reports decide the same
(leveller.rpc.failover relies on it; a standby's windowed or decayed R starts from
what it saw since it started).

Agents and jobs not heard from for ``stale_after_s`` are forgotten (``expire``): memory
and the work of every step and status grow with what is live, not with every host or
job name ever seen. Both maps are kept in least-recently-heard order, so expiring
costs O(1) per forgotten entry. A job that comes back later starts afresh (its ideal
time is profiled again unless an agent reports one).

Progress is kept in ideal-seconds (iterations x the ideal time in use when they
were done): when a job's ideal time changes (re-profiled, or another one
reported), the iterations done so far keep their old value, so R stays the
share of ideal speed the job had all along instead of jumping. For a windowed
or decayed R (leveller.core.rate) each job keeps (time, ideal-seconds) samples,
one per decision step, as far back as the R reads (``history_horizon``) and at
most MAX_SAMPLES of them (older ones thinned out). With a drift tolerance, a
profiled job whose recent iteration times say its time alone moved
(leveller.core.profiling.drifted) is profiled again.

Weights: an operator's ``weights`` (``--job-weight``) win over a weight an
agent declares for the job; 1 without either.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from leveller.controller.decide import JobInput
from leveller.core.profiling import IdealTimeProfiler, drifted, next_reprofile_time
from leveller.core.rate import Number, history_horizon, trim_history
from leveller.model.checks import check_not_future
from leveller.model.flow import FlowKey
from leveller.model.messages import Report

LOG = logging.getLogger("leveller.controller")
MAX_SAMPLES = 256  # (time, ideal-seconds) samples kept per job for a windowed / decayed R


@dataclass
class AgentState:
    report: Report
    received_at: float


@dataclass(frozen=True)
class LiveView:
    """What the live agents' latest reports say at one ``now``, from one pass over them (a step asks
    for it several times: profiling, samples, job inputs, the published count).
    ``hosts``: the live agents' hosts, by name; ``merged``: job -> (most iterations, earliest start);
    ``ideal`` / ``weight``: job -> the value the first live agent by host name declares.
    It holds no report: a report replaced is freed at once, by the report replacing it, not with
    the view (1,000 reports of 100 flows freed at once held the report thread for 20-25 ms)."""

    hosts: tuple[str, ...]
    merged: dict[str, tuple[int, float]]
    ideal: dict[str, float]
    weight: dict[str, float]


@dataclass
class JobState:
    name: str
    first_seen: float
    last_seen: float
    profiler: IdealTimeProfiler = field(default_factory=IdealTimeProfiler)
    last_fed: int = 0  # highest iteration number given to the profiler
    next_reprofile: Number | None = None
    # progress in ideal-seconds: work_base done before iteration iter_base, ideal_in_use since
    ideal_in_use: float | None = None
    work_base: float = 0.0
    iter_base: int = 0
    last_sampled: int = 0  # iterations at the latest sample (a new ideal time applies from there)
    window_from: int | None = None  # iterations when the open / last profiling window opened
    history: list[tuple[float, float]] = field(default_factory=list)  # (time, ideal-seconds done)
    # drift detection: recent iteration durations, all and those run wholly at the top of the order
    last_end: tuple[int, float] | None = None
    durations: deque = field(default_factory=lambda: deque(maxlen=16))
    top_durations: deque = field(default_factory=lambda: deque(maxlen=16))
    top_since: float | None = None  # controller time since which the job is first in the order
    drift: str | None = None  # why the current / next profiling window opens ("faster", "slower")

    def work(self, iterations: int) -> float | None:
        """Ideal-seconds done after ``iterations`` (None before the job has an ideal time)."""
        if self.ideal_in_use is None:
            return None
        return self.work_base + max(0, iterations - self.iter_base) * self.ideal_in_use


class Registry:
    """Agents' reports and per-job profiling state (not thread-safe: the controller holds a lock)."""

    def __init__(self, stale_after_s: float, reprofile_interval_s: float | None = None,
                 profile_samples: int = 5, seed: int = 0, weights: Mapping[str, float] | None = None,
                 rate_window: float | None = None, rate_half_life: float | None = None,
                 drift_tolerance: float | None = None) -> None:
        self.stale_after_s = stale_after_s
        self.reprofile_interval_s = reprofile_interval_s
        self.profile_samples = profile_samples
        self.weights = dict(weights or {})
        self.rate_window, self.rate_half_life = rate_window, rate_half_life
        self.horizon = history_horizon(rate_window, rate_half_life)
        self.drift_tolerance = drift_tolerance
        self.agents: OrderedDict[str, AgentState] = OrderedDict()  # least recently heard first
        self.jobs: OrderedDict[str, JobState] = OrderedDict()  # least recently reported first
        self._rng = random.Random(seed)
        # changes with every accepted report (LiveView cache); an expiry needs none: a view at ``now``
        # already leaves out the agents expire(now) deletes
        self._version = 0
        self._view: tuple[tuple[float, int], LiveView] | None = None

    def accept(self, report: Report, now: float) -> None:
        """Store a report after semantic checks (FieldError names the field; nothing stored then)."""
        for i, j in enumerate(report.jobs):
            check_not_future(j.start_time, f"jobs[{i}].start_time", now)
            for k, (_, t) in enumerate(j.recent):
                check_not_future(t, f"jobs[{i}].recent[{k}][1]", now)
        self.agents[report.host] = AgentState(report, now)
        self.agents.move_to_end(report.host)
        self._version += 1
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
                            if state.profiler.iteration_end(t) is not None:
                                state.durations.clear()  # measured against the old ideal time
                                state.top_durations.clear()
                        except ValueError:
                            pass  # an end before the window opened: not a sample
                    self._note_duration(state, n, t)
                    state.last_fed = n
            if state.profiler.ideal is not None and state.next_reprofile is None and self.reprofile_interval_s:
                state.next_reprofile = next_reprofile_time(now, self.reprofile_interval_s, self._rng.random())

    @staticmethod
    def _note_duration(state: JobState, n: int, t: float) -> None:
        """Keep the duration of iteration ``n`` (ended at ``t``) if its start is known."""
        prev = state.last_end
        state.last_end = (n, t)
        if prev is None or prev[0] != n - 1 or not t > prev[1]:
            return
        state.durations.append(t - prev[1])
        if state.top_since is not None and state.top_since <= prev[1]:
            state.top_durations.append(t - prev[1])

    def note_order(self, order: list[str] | None, now: float) -> None:
        """The order of a new decision: who is first since when (drift detection reads it)."""
        top = order[0] if order else None
        for name, state in self.jobs.items():
            if name != top:
                state.top_since = None
            elif state.top_since is None:
                state.top_since = now

    def sample(self, now: float) -> None:
        """Once per decision step: value progress at the ideal time in use, rebasing when it changed,
        and keep a (time, ideal-seconds) sample per job when the R needs history."""
        merged = self._merged(now)
        ideals = self._ideals(now, merged)
        for name, (iterations, start) in merged.items():
            state, ideal = self.jobs[name], ideals[name]
            if ideal is None:
                continue
            if state.ideal_in_use is None:  # the first ideal time values every iteration since the start
                state.ideal_in_use, state.work_base, state.iter_base = ideal, 0.0, 0
                state.history = [(start, 0.0)] if start <= now else []
            elif ideal != state.ideal_in_use:
                # the new ideal time values the iterations since the window that measured it opened (else
                # since the last step); the ones before keep the old value
                since = state.window_from if state.window_from is not None else state.last_sampled
                at = min(iterations, max(since, state.iter_base))
                state.window_from = None
                state.work_base = state.work(at) or 0.0
                state.iter_base, state.ideal_in_use = at, ideal
            state.last_sampled = iterations
            if self.horizon is None:
                continue
            work = state.work(iterations) or 0.0
            hist = state.history
            if hist and (now < hist[-1][0] or work < hist[-1][1]):
                continue  # a clock step back or an agent gone: keep the samples monotonic
            hist.append((now, work))
            if len(hist) > 8 and hist[1][0] <= now - self.horizon:
                hist[:] = trim_history(hist, now, self.horizon)
            if len(hist) > MAX_SAMPLES:  # thin the older half: every other sample, the base kept
                half = len(hist) // 2
                hist[:] = hist[:1] + hist[1:half:2] + hist[half:]

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

    def live(self, now: float) -> tuple[AgentState, ...]:
        """Agents whose last report is younger than ``stale_after_s``, by host name."""
        agents = self.agents
        return tuple(agents[h] for h in self.view(now).hosts if h in agents)  # expire(later now): gone

    def view(self, now: float) -> LiveView:
        """The LiveView at ``now``; computed once while no report arrives and ``now`` stays the same."""
        key = (now, self._version)
        if self._view is not None and self._view[0] == key:
            return self._view[1]
        agents = tuple(a for _, a in sorted(self.agents.items()) if now - a.received_at <= self.stale_after_s)
        merged: dict[str, tuple[int, float]] = {}
        ideal: dict[str, float] = {}
        weight: dict[str, float] = {}
        for a in agents:
            for j in a.report.jobs:
                it, st = merged.get(j.job, (0, j.start_time))
                merged[j.job] = (max(it, j.iterations), min(st, j.start_time))
                if j.ideal_time is not None:
                    ideal.setdefault(j.job, j.ideal_time)
                if j.weight is not None:
                    weight.setdefault(j.job, j.weight)
        view = LiveView(tuple(a.report.host for a in agents), merged, ideal, weight)
        self._view = (key, view)
        return view

    def _reported_ideals(self, now: float) -> dict[str, float]:
        """job -> the ideal time a live agent reports for it (the first by host name)."""
        return self.view(now).ideal

    def update_profiling(self, now: float,
                         job_links: Callable[[], Mapping[str, frozenset[int]]] | None = None) -> None:
        """Open profiling windows: the earliest-seen job without an ideal time when no job is being
        profiled (else a job whose time alone drifted, else a scheduled re-profile), and with
        ``job_links`` (job -> the links its routed flows cross, asked for only when needed) every further
        job waiting for its first profile whose flows cross no link of a job being profiled, earliest
        first: their top priorities cannot meet, and jobs that arrive together are not profiled one
        after the other, each window at the bottom of the queue until the ones before it end (the
        churn experiment's newcomers waited 13 s). A job whose links are not known yet waits its turn."""
        live_jobs = self.view(now).merged.keys()
        profiling = [n for n in live_jobs if self.jobs[n].profiler.profiling]
        reported = self._reported_ideals(now)
        waiting = sorted((s.first_seen, n) for n, s in self.jobs.items() if n in live_jobs
                         and s.profiler.ideal is None and n not in reported and not s.profiler.profiling)
        if not profiling and waiting:
            first = waiting.pop(0)[1]
            self._open_window(self.jobs[first], now)
            profiling.append(first)
        if profiling:
            if waiting and job_links is not None:
                self._open_beside(now, profiling, [n for _, n in waiting], job_links())
            return
        if self.drift_tolerance:
            for _, name in sorted((s.first_seen, n) for n, s in self.jobs.items() if n in live_jobs
                                  and s.profiler.ideal is not None and n not in reported):
                state = self.jobs[name]
                ideal = state.profiler.ideal
                if ideal is None:  # not reached: the jobs are picked above by a known ideal time
                    continue
                kind = drifted(list(state.durations), list(state.top_durations), ideal,
                               self.drift_tolerance, self.profile_samples)
                if kind is not None:
                    LOG.info("job %s: iterations %s than its ideal time %.4g s (beyond %.0f%%): profiling again",
                             name, kind, state.profiler.ideal, 100 * self.drift_tolerance)
                    state.drift = kind
                    self._open_window(state, now)
                    state.durations.clear()
                    state.top_durations.clear()
                    return
        due = sorted((s.next_reprofile, n) for n, s in self.jobs.items()
                     if n in live_jobs and s.next_reprofile is not None and s.next_reprofile <= now)
        if due:
            state = self.jobs[due[0][1]]
            self._open_window(state, now)
            state.next_reprofile = None

    def _open_beside(self, now: float, profiling: list[str], waiting: list[str],
                     links: Mapping[str, frozenset[int]]) -> None:
        """Open the windows of the ``waiting`` jobs (in that order) whose links meet none of the jobs
        being profiled nor of one opened before it; none while a profiled job's links are unknown."""
        if not all(links.get(n) for n in profiling):
            return
        busy: set[int] = set().union(*(links[n] for n in profiling))
        for name in waiting:
            mine = links.get(name)
            if mine and busy.isdisjoint(mine):
                self._open_window(self.jobs[name], now)
                busy |= mine

    @staticmethod
    def _open_window(state: JobState, now: float) -> None:
        state.profiler.start_window(now)
        state.window_from = state.last_fed

    def _merged(self, now: float) -> dict[str, tuple[int, float]]:
        """job -> (most iterations, earliest start) over the live agents' reports."""
        return self.view(now).merged

    def _ideals(self, now: float, merged: Mapping[str, object]) -> dict[str, float | None]:
        """job -> its ideal time: reported by an agent, else profiled here, else None."""
        reported = self._reported_ideals(now)
        out: dict[str, float | None] = {}
        for name in merged:
            ideal = reported.get(name)
            profiled = self.jobs[name].profiler.ideal
            out[name] = ideal if ideal is not None else (None if profiled is None else float(profiled))
        return out

    def job_inputs(self, now: float) -> list[JobInput]:
        """One JobInput per job some live agent reports, ordered by reported start, then name (the
        policy's tie-break): a function of the agents' reports, not of when or in which order they
        reached this controller, so a standby fed the same reports ranks ties the same."""
        merged = self._merged(now)
        ideals = self._ideals(now, merged)
        declared = self.view(now).weight
        out = []
        for name in sorted(merged, key=lambda n: (merged[n][1], n)):
            state, ideal = self.jobs[name], ideals[name]
            it, st = merged[name]
            weight = self.weights.get(name, declared.get(name, 1.0))
            work = state.work(it) if ideal is not None and ideal == state.ideal_in_use else None
            history: tuple[tuple[float, float], ...] = ()
            if work is not None and self.horizon is not None:
                history = tuple(p for p in state.history if st <= p[0] <= now and p[1] <= work)
            out.append(JobInput(name, it, st, ideal, profiling=state.profiler.profiling, weight=weight,
                                work=work, history=history, window=self.rate_window,
                                half_life=self.rate_half_life))
        return out

    def flows(self, now: float) -> dict[FlowKey, tuple[str, str, int]]:
        """flow -> (job, host, bytes) over live agents."""
        return {f.key: (f.job, a.report.host, f.bytes) for a in self.live(now) for f in a.report.flows}
