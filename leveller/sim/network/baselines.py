"""Crux and CASSINI as network-simulator policies, over ``leveller.core.crux`` / ``leveller.core.cassini``.

Both recompute on every arrival and finish (``tau`` None), as their papers do.

Crux: per job a :class:`~leveller.core.crux.CruxJob` (its shape: GPUs, compute,
communication M = its bytes of one iteration on its busiest link of its ECMP
paths / that link's rate; ``traffic`` = those bytes); priorities ``P_j = k_j I_j`` (``k_j`` against
the reference job, cached per pair); flows take the least congested equal-cost
path in decreasing intensity (demand = the flow's bytes per ideal iteration);
levels by Max K-Cut compression of the contention DAG (jobs whose flows share a
directed link contend). No overlap rule.

CASSINI: ECMP paths, one class; on every directed link that two or more jobs
share, each job is a circle (perimeter = its iteration time alone, one arc =
its all-reduce: start ``compute - slack``, length = its all-reduce alone,
demand = its bytes on the link per all-reduce time / capacity); the shifts of
:func:`~leveller.core.cassini.job_shifts` delay each job's next iteration
start once. Quantum = ``quantum_fraction`` of the shortest period, unified
circle capped at ``lcm_periods`` x the longest period; links with the same jobs
and demands are searched once, and a link searched at an earlier arrival or
finish is not searched again while its content and the grid stay the same (a
cache of up to ``CACHE`` links, emptied when full). The search's per-job step runs compiled
(:mod:`leveller.sim.network.cassini_kernel`, the same values) when the compiled backend is in use.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from leveller.core import cassini, crux
from leveller.core.levels import Flow
from leveller.core.rate import Number
from leveller.model.shape import JobShape
from leveller.sim.network.fluid import kernel
from leveller.sim.network.runjob import RunJob
from leveller.sim.network.topology import Network

CACHE = 4096  # CASSINI: searched links kept across re-plans (cassini.job_shifts' cache)


def rotation_search() -> cassini.BestRotation | None:
    """CASSINI's per-job search step in the simulator: the compiled twin of ``cassini._best_rotation`` when
    the compiled backend is in use (``LEVELLER_SIM_KERNEL``, as for the water-filling), else None (numpy)."""
    if kernel() is None:
        return None
    from leveller.sim.network import cassini_kernel

    return cassini_kernel.best_rotation


def link_bytes(job: RunJob, paths: Sequence[tuple[int, ...]]) -> dict[int, float]:
    """Bytes of one iteration of ``job`` (all its collectives) on every directed link of ``paths``."""
    out: dict[int, float] = {}
    for path, vol in zip(paths, job.volumes):
        for link in path:
            out[link] = out.get(link, 0.0) + float(vol) * job.phases
    return out


@dataclass
class CruxNet:
    """Crux (SIGCOMM 2024) through leveller.core.crux."""

    name: str = "crux"
    tau: float | None = None
    overlap: bool = False
    samples: int = 10
    seed: int = 0
    _k: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    priority: dict[str, float] = field(default_factory=dict, repr=False)
    intensity: dict[str, Number] = field(default_factory=dict, repr=False)

    def crux_job(self, job: RunJob, net: Network) -> crux.CruxJob:
        per_link = link_bytes(job, job.ecmp_paths)
        if not per_link:  # one host: no network traffic; tiny comm time keeps it top
            return crux.CruxJob(job.name, JobShape(job.spec.compute, 1e-9, job.gpus, 0.0), 0.0)
        link = max(per_link, key=lambda lk: per_link[lk] / net.capacity[lk])
        comm = per_link[link] / net.capacity[link]
        shape = JobShape(job.spec.compute, comm, job.gpus, min(job.overlap_window, job.spec.compute))
        return crux.CruxJob(job.name, shape, per_link[link])

    def rank(self, jobs: Sequence[RunJob], net: Network) -> None:
        cj = [self.crux_job(j, net) for j in jobs]
        if not cj:
            return
        ref = crux.reference_job(cj)
        for j in cj:
            key = (ref.name, j.name)
            if key not in self._k:
                self._k[key] = 1.0 if j.name == ref.name else crux.correction_factors([ref, j])[j.name]
        self.intensity = {j.name: j.intensity for j in cj}
        self.priority = {j.name: self._k[(ref.name, j.name)] * j.intensity for j in cj}

    def route(self, now: float, jobs: Sequence[RunJob], net: Network) -> dict[str, list[tuple[int, ...]]]:
        self.rank(jobs, net)
        ordered = sorted(jobs, key=lambda j: -self.intensity[j.name])
        requests = [((j.name, i), list(f.candidates), float(f.volume / j.ideal))
                    for j in ordered for i, f in enumerate(j.flows)]
        capacity = {lk: float(net.capacity[lk]) for _, cands, _ in requests for p in cands for lk in p}
        chosen, _ = crux.assign_paths(requests, capacity)
        return {j.name: [j.flows[i].candidates[chosen[(j.name, i)]] for i in range(len(j.flows))] for j in jobs}

    def order(self, now: float, jobs: Sequence[RunJob]) -> list[str] | None:
        return sorted((j.name for j in jobs), key=lambda n: -self.priority.get(n, 0.0))

    def levels(self, order: list[str] | None, jobs: Sequence[RunJob], flows: Mapping[str, Flow],
               k: int) -> dict[str, int]:
        users: dict[Hashable, set[str]] = {}
        for f in flows.values():
            for link in f.links:
                users.setdefault(link, set()).add(f.job)
        contends = {(a, b) for names in users.values() for a in names for b in names if a < b}
        names = order or [j.name for j in jobs]
        level = crux.compress_levels({n: self.priority[n] for n in names}, {n: self.intensity[n] for n in names},
                                     contends, k, samples=self.samples, seed=self.seed)
        return {name: level[f.job] for name, f in flows.items()}

    def shifts(self, now: float, jobs: Sequence[RunJob]) -> dict[str, float]:
        return {}


@dataclass
class CassiniNet:
    """CASSINI (NSDI 2024) through leveller.core.cassini."""

    name: str = "cassini"
    tau: float | None = None
    overlap: bool = False
    quantum_fraction: float = 0.01
    lcm_periods: float = 20.0
    capacity: np.ndarray | None = field(default=None, repr=False)
    searched: cassini.RotationCache = field(default_factory=dict, repr=False)

    def route(self, now: float, jobs: Sequence[RunJob], net: Network) -> dict[str, list[tuple[int, ...]]]:
        self.capacity = net.capacity
        return {}

    def order(self, now: float, jobs: Sequence[RunJob]) -> list[str] | None:
        return None

    def levels(self, order: list[str] | None, jobs: Sequence[RunJob], flows: Mapping[str, Flow],
               k: int) -> dict[str, int]:
        return {name: 0 for name in flows}

    def circles(self, jobs: Sequence[RunJob]) -> dict[Hashable, list[cassini.CircleJob]]:
        """One entry per distinct set of (job, demand) among links shared by two or more jobs."""
        assert self.capacity is not None
        on_link: dict[int, list[tuple[RunJob, float]]] = {}
        for j in jobs:
            if j.profile.duration <= 0:
                continue
            for link, nbytes in link_bytes(j, j.paths).items():
                demand = min(1.0, nbytes / j.phases / j.profile.duration / float(self.capacity[link]))
                on_link.setdefault(link, []).append((j, demand))
        out: dict[Hashable, list[cassini.CircleJob]] = {}
        windows: dict[str, list[tuple[float, float]]] = {}  # per job: its arcs' (start, duration), once
        for members in on_link.values():
            if len(members) < 2:
                continue
            key = tuple((j.name, round(d, 6)) for j, d in members)
            if key in out:
                continue
            circles = []
            for j, d in members:
                spans = windows.get(j.name)
                if spans is None:
                    spans = windows[j.name] = [(start % j.period, duration) for start, duration in j.comm_windows()]
                arcs = tuple((start, duration, max(d, 1e-9)) for start, duration in spans)
                circles.append(cassini.CircleJob(j.name, j.period, arcs))
            out[key] = circles
        return out

    def shifts(self, now: float, jobs: Sequence[RunJob]) -> dict[str, float]:
        if len(self.searched) >= CACHE:
            self.searched.clear()
        return cassini.shared_link_shifts(self.circles(jobs), self.quantum_fraction, self.lcm_periods,
                                          cache=self.searched, best_rotation=rotation_search())
