"""A contention group: jobs whose flows share directed links, simulated event by event.

Jobs in different groups cannot change each other's rates, so each group keeps
its own small arrays (flows x local links incidence, remaining bytes, rates,
levels) and its own next event. A group of one job whose iteration just began
is fast-forwarded in closed form (it repeats its alone period exactly).

The per-event array passes (advance, finished flows, rates, the congestion snapshot, the next
flow end) run as numba loops when the water-filling does (``fluid.kernel``), with the same
operations in the same order as the numpy expressions beside them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from leveller.core.levels import FlowSet
from leveller.core.overlap import effective_level
from leveller.sim.network.fluid import Incidence, Refill, kernel
from leveller.sim.network.policies import flow_table
from leveller.sim.network.runjob import TOL, RunJob

DONE = 1e-9  # a flow with at most this fraction of its bytes left is finished


class Group:
    """Jobs that contend, their flows' local state, and their next event time."""

    def __init__(self, jobs: Sequence[RunJob], capacity: np.ndarray, now: float, overlap: bool,
                 floor: float = 0.0, top: int | None = None, congestion: bool = False) -> None:
        """``congestion``: account, per job and shared link, the time the job sends on it, the time
        another job sends on it too, and the link's utilisation integrated over the latter
        (``RunJob.comm_seconds``, flushed by :meth:`write_back`)."""
        self.jobs = list(jobs)
        self.kernel = kernel()
        self.overlap = overlap
        self.floor = floor  # share of a link guaranteed to each level below ``top`` (fluid.max_min_rates)
        self.top = top
        self.t = now
        self.version = 0
        paths = [p for j in self.jobs for p in j.paths]
        links = sorted({lk for p in paths for lk in p})
        self.link_ids = np.asarray(links, dtype=np.int64)
        loc = {lk: i for i, lk in enumerate(links)}
        local = [[loc[lk] for lk in p] for p in paths]
        self.inc = Incidence.from_paths(local, len(links))
        self.cap = capacity[self.link_ids] if links else np.zeros(0)
        # A flow that shares no link with any other flow gets the smallest capacity on its path;
        # only the others need water-filling, on a smaller incidence of their own.
        crossing = np.zeros(len(links), dtype=np.int64)
        for p in local:
            crossing[list(set(p))] += 1
        self.solo = np.array([bool(p) and bool(np.all(crossing[p] == 1)) for p in local], dtype=bool)
        self.solo_rate = np.array([float(self.cap[p].min()) if p else np.inf for p in local])
        coupled = np.flatnonzero(~self.solo)
        self.coupled = coupled
        c_links = sorted({lk for f in coupled for lk in local[f]})
        c_loc = {lk: i for i, lk in enumerate(c_links)}
        self.c_inc = Incidence.from_paths([[c_loc[lk] for lk in local[f]] for f in coupled], len(c_links))
        self.c_cap = self.cap[np.asarray(c_links, dtype=np.int64)] if c_links else np.zeros(0)
        self.refill = Refill(self.c_inc, self.c_cap, floor, top)  # fills again only what an event touches
        self.slices: list[slice] = []
        i = 0
        for j in self.jobs:
            self.slices.append(slice(i, i + len(j.flows)))
            i += len(j.flows)
        n = i
        # The jobs the overlap rule can demote: a collective with slack. Profiles change only between
        # groups (engine.resync), so the list holds for the group's life.
        self.waiting = [(j, sl) for j, sl in zip(self.jobs, self.slices) if j.may_wait]
        self.volume = np.concatenate([j.volumes for j in self.jobs]) if n else np.zeros(0)
        self.remaining = np.concatenate([j.rem for j in self.jobs]) if n else np.zeros(0)
        self.active = np.zeros(n, dtype=bool)
        for j, sl in zip(self.jobs, self.slices):
            if j.comm_on and not j.comm_done:
                self.active[sl] = self.remaining[sl] > 0
        self.assigned = np.zeros(n, dtype=np.int64)
        self.rate = np.zeros(n)
        self.done = np.zeros(n, dtype=bool)
        self.flow_index = {f.name: k for k, f in enumerate(f for j in self.jobs for f in j.flows)}
        self.job_of = np.repeat(np.arange(len(self.jobs)), [len(j.flows) for j in self.jobs])
        self.has_coupled = [bool((~self.solo[sl]).any()) for sl in self.slices]
        self.timers: list[tuple[float, int, int]] = []  # (time, job index, version) heap
        self.jver = [0] * len(self.jobs)
        for i in range(len(self.jobs)):
            self.schedule(i)
        # Flows that share a link with another job's flow: only their levels can change with the
        # order. The others are alone in their contention part, whatever the order.
        table = flow_table(self.jobs)
        users: dict[Hashable, set[str]] = {}
        for f in table.values():
            for link in f.links:
                users.setdefault(link, set()).add(f.job)
        self.flows = FlowSet({n: f for n, f in table.items() if any(len(users[lk]) > 1 for lk in f.links)})
        self.quiet_flows = FlowSet({n: f for n, f in table.items() if n not in self.flows})
        self._set_index: dict[int, np.ndarray] = {}  # id of self.flows / self.quiet_flows -> their flows' indices
        self.last_order: tuple[str, ...] | None = None  # the order the levels in force come from
        self.memo: dict[tuple[str, ...] | None, dict[str, int]] = {}  # order -> levels of self.flows
        self.track = congestion and len(self.jobs) > 1
        if self.track:
            self._setup_accounting(local)

    # --- congestion accounting ----------------------------------------------------
    def _setup_accounting(self, local: list[list[int]]) -> None:
        """(flow, shared link) and (job, shared link) pairs; links used by two jobs or more only."""
        n_links = len(self.link_ids)
        use = np.zeros((len(self.jobs), n_links), dtype=bool)
        for i, sl in enumerate(self.slices):
            for p in local[sl]:
                use[i, p] = True
        shared = np.flatnonzero(use.sum(axis=0) >= 2)
        self.track = bool(len(shared))
        if not self.track:
            return
        col = np.full(n_links, -1)
        col[shared] = np.arange(len(shared))
        pairs = [(k, int(col[lk])) for k, p in enumerate(local) for lk in set(p) if col[lk] >= 0]
        self.acc_flow = np.array([k for k, _ in pairs], dtype=np.int64)  # (flow, shared link) pairs
        self.acc_col = np.array([c for _, c in pairs], dtype=np.int64)
        acc_job = self.job_of[self.acc_flow] if len(pairs) else np.zeros(0, dtype=np.int64)
        self.acc_links = shared
        self.acc_cap = self.cap[shared]
        # (job, shared link) pairs the job has a flow on: the accounting's entries
        pair, self.acc_pair = np.unique(acc_job * len(shared) + self.acc_col, return_inverse=True)
        self.pair_job, self.pair_col = pair // len(shared), pair % len(shared)
        self.acc = np.zeros((3, len(pair)))  # seconds sending, seconds with another job, utilisation-seconds then
        self.now_send = np.zeros(len(pair))
        self.now_util = np.zeros(len(pair))
        self.now_both = np.zeros(len(pair))

    def _snapshot(self) -> None:
        """Who sends on which shared link and the links' utilisation, for the rates just computed."""
        if not self.track:
            return
        if self.kernel is not None:
            self.kernel.snapshot(self.active, self.rate, self.acc_flow, self.acc_col, self.acc_pair, self.acc_cap,
                                 self.pair_col, self.now_send, self.now_util, self.now_both)
            return
        on = self.active[self.acc_flow]
        send = np.zeros(len(self.pair_job), dtype=bool)
        send[self.acc_pair[on]] = True
        rate = self.rate[self.acc_flow[on]]
        load = np.bincount(self.acc_col[on], weights=np.where(np.isfinite(rate), rate, 0.0),
                           minlength=len(self.acc_cap))
        self.now_util = (load / self.acc_cap)[self.pair_col]
        self.now_send = send.astype(float)
        senders = np.bincount(self.pair_col[send], minlength=len(self.acc_cap))
        self.now_both = (send & (senders[self.pair_col] >= 2)).astype(float)

    def _account(self, dt: float) -> None:
        if self.track and dt > 0 and self.kernel is not None:
            self.kernel.account(self.acc, dt, self.now_send, self.now_both, self.now_util)
        elif self.track and dt > 0:
            self.acc[0] += dt * self.now_send
            self.acc[1] += dt * self.now_both
            self.acc[2] += dt * self.now_both * self.now_util

    def flush_accounting(self) -> None:
        """Add the accumulated congestion figures to the jobs' ``comm_seconds`` and reset them."""
        if not self.track:
            return
        for k in np.flatnonzero(self.acc[0]):
            j = self.jobs[int(self.pair_job[k])]
            entry = j.comm_seconds.setdefault(int(self.link_ids[self.acc_links[self.pair_col[k]]]), [0.0, 0.0, 0.0])
            for q in range(3):
                entry[q] += float(self.acc[q, k])
        self.acc[:] = 0.0

    # --- state -------------------------------------------------------------
    @property
    def analytic(self) -> bool:
        return len(self.jobs) == 1 and self.jobs[0].analytic

    def advance(self, t: float) -> None:
        """Move the fluid forward to ``t`` (no event in between by construction)."""
        dt = t - self.t
        self._account(dt)
        if dt > 0 and self.kernel is not None:
            self.kernel.advance(self.remaining, self.active, self.rate, dt)  # a no-op on inactive flows
        elif dt > 0 and self.active.any():
            self.remaining -= np.where(self.active, self.rate * dt, 0.0)
        self.t = max(self.t, t)

    def write_back(self) -> None:
        """Store each job's remaining bytes in the job (the group is about to be rebuilt)."""
        for j, sl in zip(self.jobs, self.slices):
            if not j.analytic:
                j.rem = np.maximum(self.remaining[sl], 0.0)
        self.flush_accounting()

    def set_levels(self, levels: dict[str, int]) -> None:
        names = list(levels)
        for flows in (self.flows, self.quiet_flows):
            if names == flows.names:  # levels of one of the group's flow sets, in its order: one array store
                idx = self._set_index.get(id(flows))
                if idx is None:
                    idx = self._set_index[id(flows)] = np.array([self.flow_index[n] for n in names], dtype=np.int64)
                self.assigned[idx] = np.fromiter(levels.values(), dtype=np.int64, count=len(names))
                return
        for name, lv in levels.items():
            k = self.flow_index.get(name)
            if k is not None:
                self.assigned[k] = lv

    def recompute(self, coupled: bool = True) -> None:
        """Rates of the active flows from the levels in force now (overlap rule applied).

        ``coupled=False``: only solo flows started or stopped, so the water-filling of the
        coupled flows would give what it gave before.
        """
        if not coupled and len(self.rate) == len(self.active) and self.kernel is not None:
            self.kernel.keep_solo(self.active, self.solo, self.solo_rate, self.rate)
            self._snapshot()
            return
        if not coupled and len(self.rate) == len(self.active):
            rate = np.where(self.active, self.rate, 0.0)
            rate[self.active & self.solo] = self.solo_rate[self.active & self.solo]
            self.rate = rate
            self._snapshot()
            return
        level = self.assigned
        if self.overlap:
            now = self.t
            for j, sl in self.waiting:
                if j.comm_on and not j.comm_done:
                    wait = j._waits[j.stage]  # j.wait, without the property call (this loop runs at most events)
                    if wait > 0 and effective_level(1, j.comm_at, wait, now, lowest=0) == 0:
                        if level is self.assigned:
                            level = self.assigned.copy()
                        level[sl] = 0  # inside the slack window the agent demotes every flow of the job
        if self.kernel is not None:
            c = self.coupled
            c_rate = self.refill(level[c], self.active[c]) if len(c) else self.solo_rate[c]
            if len(self.rate) != len(self.active):
                self.rate = np.zeros(len(self.active))
            self.kernel.compose(self.active, self.solo, self.solo_rate, c, c_rate, self.rate)
            self._snapshot()
            return
        rate = np.where(self.active & self.solo, self.solo_rate, 0.0)
        if len(self.coupled):
            c = self.coupled
            rate[c] = self.refill(level[c], self.active[c])
        self.rate = rate
        self._snapshot()

    def job_timer(self, i: int) -> float:
        """Next timer of job ``i`` after now: iteration start, all-reduce start, compute end, slack end."""
        j = self.jobs[i]
        if j.finish is not None:
            return math.inf
        t = j.timer(self.t)
        if self.overlap and j.comm_on and not j.comm_done and j.wait > 0:
            end = j.comm_at + j.wait
            if end > self.t + TOL:
                t = min(t, end)
        return t

    def schedule(self, i: int) -> None:
        self.jver[i] += 1
        t = self.job_timer(i)
        if math.isfinite(t):
            heapq.heappush(self.timers, (t, i, self.jver[i]))

    def next_time(self) -> float:
        if self.analytic:
            return self.jobs[0].analytic_finish()
        while self.timers and self.timers[0][2] != self.jver[self.timers[0][1]]:
            heapq.heappop(self.timers)  # superseded
        t = self.timers[0][0] if self.timers else math.inf
        if self.kernel is not None:
            moves, soonest = self.kernel.soonest(self.active, self.rate, self.remaining)
            return min(t, self.t + soonest) if moves else t
        moving = self.active & (self.rate > 0)
        if moving.any():
            t = min(t, self.t + float(np.min(self.remaining[moving] / self.rate[moving])))
        return t

    # --- events ----------------------------------------------------------------
    def step(self, t: float, relevel: Callable[[Group, float], bool] | None) -> list[RunJob]:
        """Process every event of the group at ``t``; return the jobs that finished.

        Only the jobs with a timer due or a flow just finished are looked at.
        ``relevel`` (tau = 0) is called after an iteration ends to re-rank the group.
        """
        if self.analytic:
            job = self.jobs[0]
            job.materialise(t)
            job.iterations = job.spec.iterations or job.iterations
            job.finish = t
            return [job]
        self.advance(t)
        if self.kernel is not None:
            which = self.kernel.finish(self.active, self.remaining, self.volume, self.solo, DONE, self.done)
            changed, coupled = which > 0, which > 1
            touched = set(self.job_of[self.done].tolist()) if changed else set()
        else:
            done = self.active & (self.remaining <= self.volume * DONE)
            changed = bool(done.any())
            coupled = changed and bool((done & ~self.solo).any())
            touched = set(self.job_of[done].tolist()) if changed else set()
            self.active[done] = False
            self.remaining[done] = 0.0
        while self.timers and self.timers[0][0] <= t + TOL:
            _, i, ver = heapq.heappop(self.timers)
            if ver == self.jver[i]:
                touched.add(i)
        finished: list[RunJob] = []
        ended = False
        began = False
        slack_edge = False
        for i in sorted(touched):
            j, sl = self.jobs[i], self.slices[i]
            if j.finish is not None:
                continue
            if self.overlap and j.comm_on and not j.comm_done and j.wait > 0 \
                    and abs(j.comm_at + j.wait - t) <= TOL:
                slack_edge = True
            while j.iter_start <= t + TOL:
                progressed = False
                if not j.comm_on and j.comm_at <= t + TOL:
                    j.comm_on = True
                    if len(j.flows):
                        self.remaining[sl] = j.volumes
                        self.active[sl] = True
                        changed = True
                        coupled = coupled or self.has_coupled[i]
                    progressed = True
                if j.comm_on and not j.comm_done and not self.active[sl].any():
                    j.comm_done = True
                    progressed = True
                if not j.comp_done and j.comp_end <= t + TOL:
                    j.comp_done = True
                    progressed = True
                if j.comp_done and j.comm_done and not j.last_stage:
                    j.next_stage(t)  # the next phase of the iteration (FSDP) starts now
                    continue
                if j.comp_done and j.comm_done:
                    j.iterations += 1
                    ended = True
                    if j.spec.iterations is not None and j.iterations >= j.spec.iterations:
                        j.finish = t
                        finished.append(j)
                        break
                    j.begin(j.next_start(t))
                    began = True
                    progressed = True
                if not progressed:
                    break
            self.schedule(i)
        if ended and relevel is not None and relevel(self, t):
            changed = coupled = True
        if changed or slack_edge:
            self.recompute(coupled or slack_edge)
        if began:
            self.try_analytic(t)
        return finished

    def try_analytic(self, t: float) -> bool:
        """Fast-forward a lone job whose iteration begins now or later (it repeats its alone period)."""
        if len(self.jobs) != 1:
            return False
        j = self.jobs[0]
        fresh = j.stage == 0 and j.iter_start >= t - TOL and not j.comp_done and (not j.comm_on or j.comm_at >= t - TOL)
        if fresh and j.shift is None and j.finish is None and not j.analytic:
            j.go_analytic()
            return True
        return False
