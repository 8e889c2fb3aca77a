"""Exact, event-driven fluid simulator of jobs sharing one link.

Each job alternates compute (C time units) and communication (M units of
work, i.e. M time units at the full link rate). All jobs start together at
t = 0 computing. The link rate is split by switch level: among the jobs that
are sending, those on the highest level split the link equally; the rest
wait. Levels come from the same core calls the controller makes:
policy.order(JobView snapshot) -> assign_levels over one flow per job.
Re-ranking follows ``policy.tau`` (None: once at t=0; 0: at every iteration
end; T > 0: every T). Arithmetic is exact (fractions), so results are
deterministic and ties are real ties.

R as the policy sees it is the paper's cumulative R unless ``rate_window`` or
``rate_half_life`` asks for a windowed or decayed one (leveller.core.rate, the
same function the controller calls). A disturbance (``Starve``) models an
unmanaged flow on a link only one job uses: for its duration that job's
communication makes no progress and the others have the shared link to
themselves. Iteration end times can be kept (``record_ends``) to measure R over
any stretch afterwards (leveller.sim.recovery).

Each step of the loop is an event: some job ends a compute or communication
phase, or a re-ranking tick is due. ``event_bound`` gives, before running, an
upper bound on their number (each job at most ends its phases at its ideal pace,
plus the ticks), so callers can refuse a run that would not finish in reasonable
time instead of running silently for hours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from leveller.core.levels import Flow, assign_levels
from leveller.core.policies import JobView, Policy
from leveller.core.rate import Number, Sample, history_horizon, progress_rate, trim_history
from leveller.core.switching import PAPER, SwitchMemory, SwitchRule, applies_to, switch_order, top_changed
from leveller.model.shape import JobShape

LINK = "link"


@dataclass(frozen=True)
class Starve:
    """Job ``job`` (index) cannot communicate in [start, end): an unmanaged flow holds its own link."""

    job: int
    start: Fraction
    end: Fraction

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"a starvation needs 0 <= start < end, got [{self.start}, {self.end})")


@dataclass(frozen=True)
class Segment:
    """Job ``job`` (index) spends [start, end) in ``kind``: compute, send, share or wait."""

    job: int
    kind: str
    start: Fraction
    end: Fraction


@dataclass(frozen=True)
class LinkResult:
    policy: str
    jobs: tuple[JobShape[Fraction], ...]
    horizon: Fraction
    iterations: tuple[int, ...]
    rates: tuple[Fraction, ...]
    segments: tuple[Segment, ...] = field(default=(), repr=False)
    events: int = 0
    ends: tuple[tuple[Fraction, ...], ...] = field(default=(), repr=False)  # iteration end times per job
    top_job_changes: int = 0  # re-rankings that changed the first job of the order

    @property
    def min(self) -> Fraction:
        return min(self.rates)

    @property
    def avg(self) -> Fraction:
        return sum(self.rates, Fraction(0)) / len(self.rates)


def job_name(index: int) -> str:
    """Name of the job at ``index`` (1-based, as in the paper's figures)."""
    return str(index + 1)


def event_bound(jobs: Sequence[JobShape[Fraction]], cycles: int, tau: Number | None, starvations: int = 0) -> int:
    """Upper bound on the events of ``simulate_link(jobs, policy with tau, cycles)``.

    A job finishes at most horizon / ideal iterations (it cannot beat its ideal time),
    i.e. at most two phase ends each (+ one partial iteration); ticks come every tau,
    and every starvation adds its two ends."""
    horizon = cycles * max(Fraction(j.ideal) for j in jobs)
    bound = sum(2 * (math.floor(horizon / j.ideal) + 1) for j in jobs) + 1 + 2 * starvations
    if tau:
        bound += math.floor(horizon / Fraction(tau))
    return bound


def simulate_link(
    jobs: Sequence[JobShape[Fraction]],
    policy: Policy,
    cycles: int = 1500,
    levels: int | None = None,
    record_until: Fraction = Fraction(0),
    on_progress: Callable[[float], None] | None = None,
    progress_every: int = 2048,
    rate_window: Fraction | None = None,
    rate_half_life: Fraction | None = None,
    starve: Sequence[Starve] = (),
    record_ends: bool = False,
    switching: SwitchRule = PAPER,
    floor: Fraction = Fraction(0),
) -> LinkResult:
    """Run until ``cycles`` x the longest ideal iteration; R_j = N_j * T_j / horizon.

    ``levels`` = switch priority levels K (default: one per job, i.e. unlimited).
    Segments are recorded for t < ``record_until`` (for timeline pictures).
    ``on_progress(fraction of the horizon done)`` is called every ``progress_every``
    events and once at the end (1.0). ``rate_window`` / ``rate_half_life``: the R the
    policy ranks by (see leveller.core.rate); the reported rates stay cumulative.
    ``starve``: disturbances (see Starve). ``record_ends``: keep iteration end times.
    ``switching``: hysteresis and dwell of the order (leveller.core.switching; default the paper's:
    none). ``floor``: the share of the link every sending level below the highest sending one keeps
    (split equally among its jobs; the highest gets the rest): a switch queue's guaranteed rate under
    strict priority; 0 = the paper's pure strict priority.
    """
    if not jobs:
        raise ValueError("need at least one job")
    if cycles < 1:
        raise ValueError(f"cycles must be >= 1, got {cycles}")
    n = len(jobs)
    k = n if levels is None else levels
    if k < 1:
        raise ValueError(f"levels K must be >= 1, got {k}")
    if not applies_to(policy):
        switching = PAPER  # the rule is for orders by R (crux's is static, fair has none)
    floor = Fraction(floor)
    if not 0 <= floor * (k - 1) < 1:
        raise ValueError(f"floor = {floor} is invalid; 0 <= floor and (K - 1) x floor < 1 (K = {k})")
    for d in starve:
        if not 0 <= d.job < n:
            raise ValueError(f"starvation of job index {d.job}: there are {n} jobs")
    horizon_of_rate = history_horizon(rate_window, rate_half_life)
    if horizon_of_rate is not None:
        progress_rate(0, 1, 0, 0, window=rate_window, half_life=rate_half_life)  # options checked up front
    names = [job_name(i) for i in range(n)]
    ideal = [j.ideal for j in jobs]
    horizon = cycles * max(ideal)
    flows = {name: Flow(job=name, links=(LINK,)) for name in names}
    sending = [False] * n
    rem = [Fraction(j.compute) for j in jobs]
    iters = [0] * n
    segs: list[list] = []  # [job, kind, start, end], merged when contiguous
    history: list[list[Sample]] = [[(Fraction(0), 0)] for _ in range(n)]  # (end time, iterations) per job
    ends: list[list[Fraction]] = [[] for _ in range(n)]
    bounds = sorted({t for d in starve for t in (Fraction(d.start), Fraction(d.end))})

    def starved(i: int, now: Fraction) -> bool:
        return any(d.job == i and d.start <= now < d.end for d in starve)

    memory = SwitchMemory()
    changes = 0
    last_order: list[str] | None = None

    def rerank(now: Fraction) -> list[int]:
        nonlocal memory, changes, last_order
        views = [
            JobView(name=names[i], rate=progress_rate(iters[i], ideal[i], 0, now, history[i], rate_window,
                                                      rate_half_life), gpus=jobs[i].gpus,
                    compute=jobs[i].compute, comm=jobs[i].comm)
            for i in range(n)
        ]
        order, memory = switch_order(policy.order(views), views, memory, float(now), switching)
        changes += top_changed(last_order, order)
        last_order = order
        lv = assign_levels(order, flows, k)
        return [lv[name] for name in names]

    def record(i: int, kind: str, start: Fraction, end: Fraction) -> None:
        for s in reversed(segs):
            if s[0] == i:
                if s[1] == kind and s[3] == start:
                    s[3] = end
                    return
                break
        segs.append([i, kind, start, end])

    tau = policy.tau
    level = rerank(Fraction(0))
    period = Fraction(tau) if tau else Fraction(0)
    next_tick = period if tau else None
    t = Fraction(0)
    one = Fraction(1)
    events = 0
    while t < horizon:
        events += 1
        if on_progress is not None and events % progress_every == 0:
            on_progress(float(t / horizon))
        share = [Fraction(0)] * n
        active = [i for i in range(n) if sending[i] and not (starve and starved(i, t))]
        if active:
            by_level: dict[int, list[int]] = {}
            for i in active:
                by_level.setdefault(level[i], []).append(i)
            top = max(by_level)
            for lv_, members in by_level.items():
                part = (1 - floor * (len(by_level) - 1)) if lv_ == top else floor
                for i in members:
                    share[i] = part / len(members)
        dt = horizon - t
        for i in range(n):
            if not sending[i]:
                dt = min(dt, rem[i])
            elif share[i]:
                dt = min(dt, rem[i] / share[i])
        if next_tick is not None:
            dt = min(dt, next_tick - t)
        while bounds and bounds[0] <= t:
            bounds.pop(0)
        if bounds:
            dt = min(dt, bounds[0] - t)
        if t < record_until:
            for i in range(n):
                kind = "compute" if not sending[i] else (
                    "send" if share[i] == one else ("share" if share[i] else "wait"))
                record(i, kind, t, t + dt)
        ended = False
        for i in range(n):
            if not sending[i]:
                rem[i] -= dt
            elif share[i]:
                rem[i] -= share[i] * dt
        t += dt
        for i in range(n):
            if rem[i] == 0:
                if sending[i]:
                    iters[i] += 1
                    ended = True
                    rem[i] = Fraction(jobs[i].compute)
                    if record_ends:
                        ends[i].append(t)
                    if horizon_of_rate is not None:
                        history[i].append((t, iters[i]))
                        if len(history[i]) > 64 and history[i][1][0] <= t - horizon_of_rate:
                            history[i] = trim_history(history[i], t, horizon_of_rate)
                else:
                    rem[i] = Fraction(jobs[i].comm)
                sending[i] = not sending[i]
        if next_tick is not None and t == next_tick:
            next_tick += period
            level = rerank(t)
        elif tau == 0 and ended:
            level = rerank(t)
    if on_progress is not None:
        on_progress(1.0)
    rates = tuple(Fraction(iters[i]) * ideal[i] / horizon for i in range(n))
    segments = tuple(Segment(s[0], s[1], s[2], s[3]) for s in segs)
    return LinkResult(policy.name, tuple(jobs), horizon, tuple(iters), rates, segments, events,
                      tuple(tuple(e) for e in ends) if record_ends else (), changes)
