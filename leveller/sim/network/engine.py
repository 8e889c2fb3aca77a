"""The event-driven fluid simulator of a whole network.

Global events: arrivals (placement on free hosts, FIFO queue when full),
job finishes, tau ticks, samples, the end. At arrivals and finishes the
policy routes and (re)levels every running job, and the running jobs are
partitioned into contention groups (jobs whose flows share a directed link,
transitively); between global events each group runs its own events (compute
ends, all-reduce starts, flow completions, slack ends) on a heap keyed by its
next event. A group of one job is fast-forwarded in closed form.

Disturbances: an unmanaged flow at the top priority takes a directed link
for a while (its capacity drops to STARVED of itself, then comes back); every
job is re-timed at both edges (a job alone on that link stalls, not its ideal
time, which stays the R reference).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from leveller.core.qos import check_floor
from leveller.core.switching import SwitchMemory, forget, top_changed
from leveller.model.job import JobSpec
from leveller.sim.network.group import Group
from leveller.sim.network.policies import NetPolicy
from leveller.sim.network.runjob import RunJob
from leveller.sim.network.topology import Network

Placer = Callable[[Sequence[str], int], tuple[str, ...] | None]
GROUP, GLOBAL = 0, 1
MEMO = 512  # levels remembered per group, by order
# A job still running at the end after fewer than this many ideal iterations has an R dominated
# by its unfinished iteration: it is reported but left out of min / avg / p10.
MIN_WINDOW = 20
STARVED = 1e-6  # share of a link an unmanaged top-priority flow leaves to everyone else
# A job is on a congested link when, on a link of its paths, another job sent at the same time for at
# least OVERLAPPED of the time the job sent there, and the link was utilised above CONGESTED on average
# over those shared seconds (Simulation(congestion=True)).
CONGESTED = 0.9
OVERLAPPED = 0.1


@dataclass(frozen=True)
class Disturbance:
    """An unmanaged flow holds directed link ``link`` (a name ``a>b``) from ``start`` for ``seconds``."""

    link: str
    start: float
    seconds: float


@dataclass
class JobOutcome:
    name: str
    rate: float | None
    iterations: int
    finish: float | None
    start: float | None
    ideal: float | None
    gpus: int
    hosts: tuple[str, ...]
    measured: bool = True  # counts in min / avg / p10 (see MIN_WINDOW)
    congested: bool | None = None  # on a congested shared link (CONGESTED); None: not accounted


@dataclass
class SimResult:
    policy: str
    jobs: list[JobOutcome]
    sim_seconds: float
    events: int
    wall_seconds: float
    gpu_utilization: float
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    link_utilization: dict[str, float] = field(default_factory=dict)
    top_job_changes: int = 0  # re-rankings of a contention group that changed its first job

    @property
    def congested_share(self) -> float | None:
        """Share of the measured jobs that were on a congested link (None: not accounted)."""
        flags = [j.congested for j in self.jobs if j.rate is not None and j.measured]
        if not flags or any(f is None for f in flags):
            return None
        return sum(bool(f) for f in flags) / len(flags)

    @property
    def rates(self) -> list[float]:
        """R of the measured jobs (see MIN_WINDOW)."""
        return [j.rate for j in self.jobs if j.rate is not None and j.measured]

    def summary(self) -> dict:
        """The ``leveller simulate network --json`` object (the contract in docs/api.md)."""
        r = np.asarray(self.rates)
        stats = {"min": float(r.min()), "avg": float(r.mean()), "p10": float(np.percentile(r, 10))} if len(r) \
            else {"min": None, "avg": None, "p10": None}
        return {
            "policy": self.policy,
            "jobs": {j.name: {"rate": j.rate, "iterations": j.iterations, "finish": j.finish, "start": j.start,
                              "ideal": j.ideal, "gpus": j.gpus, "measured": j.measured} for j in self.jobs},
            **stats,
            "measured": len(r),
            "gpu_utilization": self.gpu_utilization,
            "sim_seconds": self.sim_seconds,
            "events": self.events,
            "wall_seconds": self.wall_seconds,
            "top_job_changes": self.top_job_changes,
            "congested_share": self.congested_share,
        }


class Simulation:
    """One run of one policy over one network and job list."""

    def __init__(self, net: Network, specs: Sequence[JobSpec], policy: NetPolicy, levels: int,
                 duration: float | None = None, placer: Placer | None = None,
                 sample_every: float | None = None,
                 progress: Callable[[float], None] | None = None,
                 on_rates: Callable[[float, Simulation], None] | None = None,
                 disturbances: Sequence[Disturbance] = (), floor: float = 0.0, congestion: bool = False) -> None:
        """``floor``: the share of every link guaranteed to each level below the top, K-1 (the switches'
        queue floor, leveller.core.qos); 0 is the paper's pure strict priority. ``congestion``: find
        which jobs were on a congested link (``JobOutcome.congested``, CONGESTED); costs some speed."""
        self.congestion = congestion
        self.floor = check_floor(floor, levels)
        self.net = net
        self.specs = list(specs)
        self.policy = policy
        self.k = levels
        self.duration = duration
        self.placer = placer
        self.sample_every = sample_every
        self.progress = progress
        self.on_rates = on_rates
        self.heap: list[tuple] = []
        self.seq = itertools.count()
        self.running: dict[str, RunJob] = {}
        self.done: dict[str, RunJob] = {}
        self.queue: deque[JobSpec] = deque()
        self.free_slots: dict[str, list[int]] = {h: list(range(net.gpus_per_host)) for h in net.nics}
        self.taken: dict[str, dict[str, list[int]]] = {}  # job -> host -> GPU slots it holds
        self.groups: list[Group] = []
        self.group_of: dict[str, Group] = {}
        self.events = 0
        self.top_job_changes = 0
        self.switch_memory = SwitchMemory()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.carried = np.zeros(len(net.links))
        for d in disturbances:
            if d.link not in net.index:
                raise ValueError(f"disturbance on link {d.link!r}: no such directed link in {net.name} "
                                 f"(links are named a>b, e.g. {net.links[0]!r})")
            if not (d.start >= 0 and d.seconds > 0):
                raise ValueError(f"disturbance on {d.link}: needs start >= 0 and seconds > 0")
        self.disturbances = list(disturbances)

    # --- heap ------------------------------------------------------------------
    def push_group(self, g: Group) -> None:
        g.version += 1
        t = g.next_time()
        if math.isfinite(t):
            heapq.heappush(self.heap, (t, GROUP, next(self.seq), g, g.version))

    def push_global(self, t: float, kind: str, ref: object = None) -> None:
        heapq.heappush(self.heap, (t, GLOBAL, next(self.seq), kind, ref))

    # --- global changes ------------------------------------------------------
    def place(self, spec: JobSpec, now: float) -> bool:
        """Start ``spec`` on hosts with enough free GPUs (whole hosts, or ``gpus_per_rank`` GPUs on
        each), chosen by the placer; False when it does not fit now."""
        slots: tuple[int, ...] | None = None
        if spec.hosts is not None:
            hosts = spec.hosts
            for h in hosts:
                self.free_slots[h] = []
        else:
            per = spec.gpus_per_rank or self.net.gpus_per_host
            free = [h for h, sl in self.free_slots.items() if len(sl) >= per]
            if len(free) < spec.size or self.placer is None:
                return False
            chosen = self.placer(free, spec.size)
            if chosen is None:
                return False
            hosts = chosen
            held = {h: self.free_slots[h][:per] for h in hosts}
            for h in hosts:
                del self.free_slots[h][:per]
            self.taken[spec.name] = held
            if spec.gpus_per_rank:
                slots = tuple(held[h][0] for h in hosts)
        self.running[spec.name] = RunJob(spec, tuple(hosts), now, self.net, slots)
        return True

    def flush_bytes(self, job: RunJob, t: float) -> None:
        n = job.iterations_at(t) - job.flushed
        if n > 0:
            for path, vol in zip(job.paths, job.volumes):
                self.carried[list(path)] += n * vol
            job.flushed += n

    def resync(self, t: float, finished: Sequence[RunJob] = (), arrivals: Sequence[JobSpec] = (),
               retime: bool = False) -> None:
        """Bring every job to ``t`` in explicit form, admit jobs, re-route, re-level, regroup
        (``retime``: link capacities changed, time every job's all-reduce alone again)."""
        for g in self.groups:
            g.advance(t)
            g.write_back()
        for j in finished:
            self.flush_bytes(j, t)
            self.running.pop(j.name, None)
            self.done[j.name] = j
            for h, held in self.taken.pop(j.name, {}).items():
                self.free_slots[h] = sorted(self.free_slots[h] + held)
        self.queue.extend(arrivals)
        while self.queue and self.place(self.queue[0], t):
            self.queue.popleft()
        jobs = list(self.running.values())
        for j in jobs:
            self.flush_bytes(j, t)
            j.materialise(t)
            if retime:
                j.refresh_profile(self.net)
        for name, paths in self.policy.route(t, jobs, self.net).items():
            self.running[name].set_paths(paths, self.net)
        before = {frozenset(j.name for j in g.jobs) for g in self.groups}
        self.regroup(t, jobs)
        # Time shifts only for the jobs whose contention group changed: the others keep their phases.
        changed = [j for g in self.groups if frozenset(x.name for x in g.jobs) not in before for j in g.jobs]
        for name, s in self.policy.shifts(t, changed).items():
            self.running[name].shift = s
            self.running[name].shift_ref = t
        for g in self.groups:
            self.relevel(g, t, force=True)
            g.try_analytic(t)
            g.recompute()
            self.push_group(g)

    def regroup(self, t: float, jobs: Sequence[RunJob]) -> None:
        """Union jobs that share a directed link into groups."""
        parent = list(range(len(jobs)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        for i, j in enumerate(jobs):
            for path in j.paths:
                for lk in path:
                    o = owner.setdefault(lk, i)
                    if o != i:
                        a, b = find(o), find(i)
                        if a != b:
                            parent[b] = a
        members: dict[int, list[RunJob]] = {}
        for i, j in enumerate(jobs):
            members.setdefault(find(i), []).append(j)
        for g in self.groups:
            g.version += 1  # invalidate heap entries
        self.groups = [Group(m, self.net.capacity, t, self.policy.overlap, self.floor, self.k - 1,
                             self.congestion) for m in members.values()]
        rule = getattr(self.policy, "switching", None)
        if rule is not None and self.switch_memory.order:  # finished jobs leave the rule's memory
            self.switch_memory = forget(self.switch_memory, set(self.running), t, rule)
        self.group_of = {j.name: g for g in self.groups for j in g.jobs}

    def tick(self, t: float) -> None:
        """tau > 0: re-rank the jobs of every group where levels matter (two jobs or more)."""
        for g in self.groups:
            if len(g.jobs) > 1 and self.relevel(g, t):
                g.advance(t)
                g.recompute()
                self.push_group(g)

    def relevel(self, g: Group, t: float, force: bool = False) -> bool:
        """Ask the policy for the group's order; new levels only when the order changed. True if it did.

        Levels of a group depend only on the relative order of its own jobs (contention
        parts never cross groups), so ranking a group alone equals ranking everyone.
        """
        if len(g.jobs) < 2 and not force:
            return False
        order = self.policy.order(t, g.jobs)
        switched = getattr(self.policy, "switched", None)  # hysteresis and dwell (leveller.core.switching)
        if switched is not None and order is not None:
            order, self.switch_memory = switched(t, g.jobs, order, self.switch_memory)
        key = None if order is None else tuple(order)
        if not force and key == g.last_order:
            return False
        self.top_job_changes += top_changed(g.last_order, key)
        g.last_order = key
        if force and g.quiet_flows:
            g.set_levels(self.policy.levels(order, g.jobs, g.quiet_flows, self.k))
        if g.flows:
            levels = g.memo.get(key)
            if levels is None:  # levels are a function of the order (orders recur as R values cross)
                levels = self.policy.levels(order, g.jobs, g.flows, self.k)
                if len(g.memo) < MEMO:
                    g.memo[key] = levels
            g.set_levels(levels)
        return True

    def relevel_group(self, g: Group, t: float) -> bool:
        return self.relevel(g, t)

    def sample(self, t: float) -> None:
        """R of the running jobs that have run long enough for R to mean something (MIN_WINDOW)."""
        self.samples.append((t, {j.name: j.rate_at(t) for j in self.running.values()
                                 if t - j.start >= MIN_WINDOW * j.ideal}))

    # --- run ---------------------------------------------------------------------
    def run(self) -> SimResult:
        """Simulate; link capacities a disturbance changed are restored on the way out."""
        capacity = self.net.capacity.copy()
        try:
            return self._run()
        finally:
            self.net.capacity[:] = capacity

    def disturb(self, t: float, link: int, on: bool, base: np.ndarray) -> None:
        """An unmanaged flow starts (``on``) or stops holding directed link ``link`` at ``t``."""
        self.net.capacity[link] = base[link] * (STARVED if on else 1.0)
        self.resync(t, retime=True)

    def _run(self) -> SimResult:
        wall = time.perf_counter()
        base = self.net.capacity.copy()
        if not self.specs:
            raise ValueError("no jobs to simulate")
        if self.duration is None and any(s.iterations is None for s in self.specs):
            raise ValueError("a job runs to the end (iterations null): a duration is needed")
        end = self.duration if self.duration is not None else math.inf
        by_time: dict[float, list[JobSpec]] = {}
        for s in self.specs:
            if s.arrival < end:
                by_time.setdefault(s.arrival, []).append(s)
        for t0 in sorted(by_time):
            self.push_global(t0, "arrive", by_time[t0])
        tau = self.policy.tau
        if tau:
            self.push_global(tau, "tick")
        if self.sample_every:
            self.push_global(0.0, "sample")
        if math.isfinite(end):
            self.push_global(end, "end")
        for d in self.disturbances:
            self.push_global(d.start, "disturb", (self.net.index[d.link], True))
            self.push_global(d.start + d.seconds, "disturb", (self.net.index[d.link], False))
        relevel = self.relevel_group if tau == 0 else None
        t = 0.0
        pending = len(by_time)
        while self.heap:
            t, kind, _, ref, payload = heapq.heappop(self.heap)
            if kind == GROUP:
                if payload != ref.version:
                    continue  # superseded
                self.events += 1
                finished = ref.step(t, relevel)
                if finished:
                    self.resync(t, finished=finished)
                else:
                    self.push_group(ref)
            else:
                self.events += 1
                if ref == "end":
                    break
                if ref == "arrive":
                    pending -= 1
                    self.resync(t, arrivals=payload)
                elif ref == "tick":
                    self.tick(t)
                    self.push_global(t + tau, "tick")
                elif ref == "sample":
                    self.sample(t)
                    self.push_global(t + self.sample_every, "sample")
                elif ref == "disturb":
                    self.disturb(t, payload[0], payload[1], base)
                if self.progress is not None:
                    self.progress(t)
            if self.on_rates is not None:
                self.on_rates(t, self)
            if not self.running and not self.queue and pending == 0 and not math.isfinite(end):
                break
        end_t = t if not math.isfinite(end) else end
        return self.result(end_t, time.perf_counter() - wall)

    @staticmethod
    def congested(job: RunJob) -> bool:
        """A link of the job's that another job sent on during OVERLAPPED of the job's sending time there,
        utilised above CONGESTED on average while both sent (see CONGESTED)."""
        return any(both > 0 and both >= OVERLAPPED * send and util / both > CONGESTED
                   for send, both, util in job.comm_seconds.values())

    def result(self, end: float, wall: float) -> SimResult:
        outcomes = []
        busy = 0.0
        for g in self.groups:
            g.advance(end)
            g.flush_accounting()
        for spec in self.specs:
            j = self.running.get(spec.name) or self.done.get(spec.name)
            if j is None:
                outcomes.append(JobOutcome(spec.name, None, 0, None, None, None, 0, ()))
                continue
            self.flush_bytes(j, end)
            stop = j.finish if j.finish is not None else end
            rate = j.rate_at(stop) if stop > j.start else None
            busy += j.gpus * j.compute_time(stop)
            measured = j.finish is not None or stop - j.start >= MIN_WINDOW * j.ideal
            outcomes.append(JobOutcome(j.name, rate, j.iterations_at(stop), j.finish, j.start, j.ideal,
                                       j.gpus, j.hosts, measured, self.congested(j) if self.congestion else None))
        util = busy / (self.net.total_gpus * end) if end > 0 else 0.0
        used = np.flatnonzero(self.carried)
        links = {self.net.links[i]: float(self.carried[i] / (self.net.capacity[i] * end)) for i in used} \
            if end > 0 else {}
        return SimResult(self.policy.name, outcomes, end, self.events, wall, util, self.samples, links,
                         self.top_job_changes)
