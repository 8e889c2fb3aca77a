"""A running job: its ring flows, chosen paths, iteration state and progress rate.

Iteration model: an iteration is a sequence of stages (``JobSpec.stages``: one for
DDP, three for FSDP). A stage starts at ``iter_start``; its compute ends at
``iter_start + c``; its collective starts at ``iter_start + o``; the stage ends
when both are done, and the next stage (or iteration) starts then. For DDP
(c = C, o = C - slack) a job alone repeats with period ``C + max(0, A - slack)``,
A its all-reduce time alone; in general the period alone is the sum over stages
of ``max(c, o + A)``. The *ideal* iteration time (the R reference) is that period
on the default ECMP paths, so it does not depend on the policy's routing. A
stage's collective can wait ``c - o - A`` (when positive) without delaying the
stage: that is the window in which the overlap rule demotes it.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from leveller.core.rate import history_horizon, progress_rate, trim_history
from leveller.model.flow import FlowKey
from leveller.model.job import JobSpec
from leveller.sim.network.alone import AloneProfile, alone_profile
from leveller.sim.network.jobs import phase_volume
from leveller.sim.network.topology import Network

TOL = 1e-9  # seconds: timers within this distance are simultaneous
NCCL_PORT = 29500


@dataclass(frozen=True)
class SimFlow:
    """One flow of a job's ring: NIC ``src`` -> NIC ``dst``, ``volume`` bytes per iteration."""

    name: str
    src: str
    dst: str
    volume: float
    key: FlowKey
    candidates: tuple[tuple[int, ...], ...]  # equal-cost paths as directed link ids


def rank_nics(net: Network, host: str, slot: int | None) -> tuple[str, ...]:
    """The NICs a rank uses: all of its host's (a whole-host rank stripes over them), or the one of
    its GPU ``slot`` (GPU g of a host with m NICs for G GPUs uses NIC g * m // G)."""
    nics = net.nics[host]
    if slot is None:
        return nics
    return (nics[slot * len(nics) // net.gpus_per_host],)


def ring_flows(spec: JobSpec, hosts: tuple[str, ...], net: Network,
               slots: tuple[int, ...] | None = None) -> list[SimFlow]:
    """Flows of one ring collective over ``hosts`` in order (none for a one-host job); ``slots``: the
    GPU each rank uses on its host (one-GPU-per-host jobs), None for whole-host ranks."""
    n = len(hosts)
    if n < 2:
        return []
    flows = []
    for i in range(n):
        nxt = (i + 1) % n
        a = rank_nics(net, hosts[i], None if slots is None else slots[i])
        b = rank_nics(net, hosts[nxt], None if slots is None else slots[nxt])
        per_nic = phase_volume(spec.collective, n, spec.bytes) / len(a)
        for r, (src, dst) in enumerate(zip(a, b)):
            sport = 32768 + zlib.crc32(f"{spec.name}/{i}/{r}".encode()) % 28000
            key = FlowKey(net.ip(src), net.ip(dst), sport, NCCL_PORT + r, 6)
            flows.append(SimFlow(f"{spec.name}#{i}.{r}", src, dst, per_nic, key,
                                 tuple(net.candidates(src, dst))))
    return flows


class RunJob:
    """State of one placed job (explicit, or fast-forwarded while alone on its links)."""

    def __init__(self, spec: JobSpec, hosts: tuple[str, ...], start: float, net: Network,
                 slots: tuple[int, ...] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.hosts = hosts
        self.slots = slots
        self.gpus = len(hosts) * (spec.gpus_per_rank or net.gpus_per_host)
        self.start = start
        self.stages = spec.stages()
        self.phases = sum(1 for _ in self.stages)  # collectives per iteration
        self.flows = ring_flows(spec, hosts, net, slots)
        self.volumes = np.array([f.volume for f in self.flows])
        ecmp = [net.ecmp(f.src, f.dst, f.key) for f in self.flows]
        self.ecmp_paths = ecmp
        reference = alone_profile(ecmp, self.volumes, net.capacity)
        self.comm_alone = reference.duration * self.phases  # communication time per iteration alone
        self.ideal = self.period_for(reference.duration)
        self.paths: list[tuple[int, ...]] = list(ecmp)
        self.profile = reference
        self.period = self.ideal
        self.stage = 0
        self.done_compute = 0.0  # compute of this iteration's finished stages
        self.comm_seconds: dict[int, list[float]] = {}  # congestion accounting (Group.account)
        self.iterations = 0
        self.finish: float | None = None
        self.rem = np.zeros(len(self.flows))  # remaining bytes per flow, while not inside a group
        self.shift: float | None = None  # one-shot: delay the next iteration start to this phase
        self.shift_ref = 0.0
        self.flushed = 0  # iterations already counted into link byte totals
        self.analytic = False
        self.anchor = 0.0  # analytic: an iteration starts at anchor + k * period
        self.n_anchor = 0
        self.history: list[tuple[float, int]] = [(start, 0)]  # (time, iterations) when the policy ranked
        self.begin(start)

    # --- routing -----------------------------------------------------------
    def set_paths(self, paths: list[tuple[int, ...]], net: Network) -> None:
        if paths != self.paths:
            self.paths = list(paths)
            self.profile = alone_profile(self.paths, self.volumes, net.capacity)
            self.period = self.period_for(self.profile.duration)

    def refresh_profile(self, net: Network) -> None:
        """Re-time the all-reduce alone after link capacities changed (the ideal time stays the reference)."""
        self.profile = alone_profile(self.paths, self.volumes, net.capacity)
        self.period = self.period_for(self.profile.duration)

    def period_for(self, comm: float) -> float:
        """Iteration time alone when one collective takes ``comm`` s: sum over stages of max(c, o + comm)."""
        if not self.flows:
            return self.spec.compute
        return sum(max(c, o + comm) for c, o in self.stages)

    @property
    def overlap_window(self) -> float:
        """Compute time per iteration that communication may overlap (slack for DDP, all of it for FSDP)."""
        return sum(c - o for c, o in self.stages)

    def comm_windows(self) -> list[tuple[float, float]]:
        """(start within the period, duration) of every collective of an iteration alone."""
        out, at, a = [], 0.0, self.profile.duration
        for c, o in self.stages:
            out.append((at + o, min(a, self.period)))
            at += max(c, o + a)
        return out

    @property
    def profile(self) -> AloneProfile:
        """The all-reduce alone on the paths in force (setting it re-times every stage's slack)."""
        return self._profile

    @profile.setter
    def profile(self, value: AloneProfile) -> None:
        self._profile = value
        self._waits = [max(0.0, c - o - value.duration) for c, o in self.stages]

    @property
    def wait(self) -> float:
        """How long the stage's collective can wait without stalling the stage (the overlap
        rule's slack): the stage's overlap window minus the collective's own time alone."""
        return self._waits[self.stage]

    @property
    def may_wait(self) -> bool:
        """Whether some stage's collective has slack (:attr:`wait` > 0) on the paths in force."""
        return any(w > 0 for w in self._waits)

    # --- explicit iteration state ------------------------------------------
    def begin(self, at: float) -> None:
        """Start an iteration at ``at`` (possibly in the future: the job waits)."""
        self.stage = 0
        self.done_compute = 0.0
        self.begin_stage(at)

    def begin_stage(self, at: float) -> None:
        c, o = self.stages[self.stage]
        self.iter_start = at
        self.comp_end = at + c
        self.comm_at = at + o
        self.comm_on = False
        self.comm_done = not self.flows
        self.comp_done = False

    @property
    def last_stage(self) -> bool:
        return self.stage + 1 >= len(self.stages)

    def next_stage(self, at: float) -> None:
        """The stage in progress is done at ``at``: start the next one of the iteration."""
        self.done_compute += self.stages[self.stage][0]
        self.stage += 1
        self.begin_stage(at)

    def next_start(self, now: float) -> float:
        """When the next iteration may start: now, or later to honour a pending time shift."""
        if self.shift is None:
            return now
        target = self.shift_ref + self.shift
        wait = (target - now) % self.period if self.period > 0 else 0.0
        self.shift = None
        return now + (0.0 if wait > self.period - TOL else wait)

    def timer(self, now: float) -> float:
        """The job's next timer after ``now`` (flow completions are the group's business)."""
        if self.iter_start > now + TOL:
            return self.iter_start
        if not self.comm_on:
            return self.comm_at
        if not self.comp_done:
            return self.comp_end
        return math.inf

    # --- fast-forward while alone ----------------------------------------------
    def go_analytic(self) -> None:
        """Switch to closed form at an iteration start (nothing shares its links)."""
        self.analytic = True
        self.anchor = self.iter_start
        self.n_anchor = self.iterations

    def iterations_at(self, t: float) -> int:
        if not self.analytic or t < self.anchor:
            return self.iterations
        done = self.n_anchor + int(math.floor((t - self.anchor + TOL) / self.period))
        return done if self.spec.iterations is None else min(done, self.spec.iterations)

    def analytic_finish(self) -> float:
        if self.spec.iterations is None:
            return math.inf
        return self.anchor + (self.spec.iterations - self.n_anchor) * self.period

    def materialise(self, t: float) -> None:
        """Leave closed form at ``t``: rebuild the explicit state an event loop would have."""
        if not self.analytic:
            return
        self.analytic = False
        if t < self.anchor:
            self.begin(self.anchor)
            self.rem[:] = 0.0
            return
        k = int(math.floor((t - self.anchor + TOL) / self.period))
        self.iterations = self.n_anchor + k
        s = self.anchor + k * self.period
        self.begin(s)
        e = t - s
        a = self.profile.duration if self.flows else 0.0
        while not self.last_stage:
            c, o = self.stages[self.stage]
            length = max(c, o + a)
            if e < length - TOL:
                break
            s += length
            e -= length
            self.next_stage(s)
        c, o = self.stages[self.stage]
        self.comp_done = e >= c - TOL
        if e >= o - TOL:
            self.comm_on = True
            self.rem = self.profile.remaining_at(e - o)
            self.comm_done = bool(not self.flows or not (self.rem > 0).any())
        else:
            self.rem[:] = 0.0

    # --- measures --------------------------------------------------------------
    def rate_at(self, t: float) -> float:
        """R = iterations x ideal / (t - start)."""
        return float(progress_rate(self.iterations_at(t), self.ideal, self.start, max(t, self.start)))

    def policy_rate(self, t: float, window: float | None = None, half_life: float | None = None) -> float:
        """The R a policy ranks by at ``t``: cumulative (as :meth:`rate_at`), over the last ``window`` s,
        or decayed with ``half_life`` (leveller.core.rate); keeps a (time, iterations) sample per call."""
        horizon = history_horizon(window, half_life)
        if horizon is None:
            return self.rate_at(t)
        t = max(t, self.start)
        n = self.iterations_at(t)
        last_t, last_n = self.history[-1]
        if t > last_t and n >= last_n:
            self.history.append((t, n))
            if len(self.history) > 64 and self.history[1][0] <= t - horizon:
                self.history = trim_history(self.history, t, horizon)
        hist = [p for p in self.history if p[0] <= t and p[1] <= n]
        return float(progress_rate(n, self.ideal, self.start, t, hist, window, half_life))

    def compute_time(self, t: float) -> float:
        """GPU-busy seconds (per GPU) spent computing until ``t``."""
        if self.analytic:
            if t < self.anchor:
                return self.iterations * self.spec.compute
            k = int(math.floor((t - self.anchor + TOL) / self.period))
            e = t - (self.anchor + k * self.period)
            a = self.profile.duration if self.flows else 0.0
            partial = 0.0
            for c, o in self.stages:
                partial += min(max(e, 0.0), c)
                e -= max(c, o + a)
            return (self.n_anchor + k) * self.spec.compute + partial
        partial = 0.0
        if self.finish is None and t > self.iter_start:
            partial = self.done_compute + min(t - self.iter_start, self.stages[self.stage][0])
        elif self.finish is None:
            partial = self.done_compute
        return self.iterations * self.spec.compute + partial
