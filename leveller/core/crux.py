"""Crux (Cao et al., SIGCOMM 2024): GPU-intensity priorities, path choice and K-level compression.

Crux maximises cluster GPU utilisation. Its three mechanisms, as pure functions the
network simulator and the live controller share:

1. **GPU intensity** ``I_j = W_j / t_j``: the job's GPU work per iteration (GPUs x
   compute seconds) over ``t_j``, the time its traffic of one iteration takes on its
   bottleneck link at full rate (:func:`gpu_intensity`).
2. **Priority** ``P_j = k_j * I_j`` (:func:`priorities`). The correction factor ``k_j``
   comes from a pairwise comparison with the *reference job*, the one with the most
   traffic (``k = 1``): ``D_x`` is the link time job ``x`` gets when it has strict
   priority over the other job minus the link time it gets when the other job has
   priority, and ``k_j = D_j / D_ref`` (:func:`correction_factors`).
3. **Path selection** in decreasing ``I_j``, each job taking the least congested of its
   ECMP candidates (:func:`least_congested_path`, :func:`assign_paths`), and
   **priority compression** to the K switch levels: a contention DAG (edge
   ``j1 -> j2`` when the jobs share a link and ``P_j1 > P_j2``, weight ``I_j1``) cut into
   K ordered groups by a Max K-Cut dynamic program over sampled topological orders
   (:func:`compress_levels`, :func:`max_k_cut_dp`). Levels are K-1 (highest) .. 0.

Choices where the paper (or what we could read of it) leaves room, each a parameter:

- *Pairwise comparison model* (:func:`link_times`): the two jobs alone on one link of
  unit capacity, both starting to compute at t = 0; an iteration computes C (the
  job's shape); its communication (M seconds at full rate) may start S (the
  slack) before compute ends and the iteration ends when both are done; strict
  priority, preemptive and fluid. "Link time" is the full-rate transmission time a job
  completes inside the window ``[0, window_iterations x longer ideal iteration)``,
  transient included. Default 100 iterations.
- *Reference job*: the most ``traffic`` (bytes of one iteration on the bottleneck;
  defaults to M, i.e. equal link rates); ties go to the job listed first.
- *Degenerate ratios*: ``D_ref = D_j = 0`` (the pair never interferes) gives ``k_j = 1``;
  otherwise ``k_j`` is clamped to ``[1 / k_max, k_max]`` (default 10) so that a zero
  ``D`` on either side stays finite and keeps intensity meaningful.
- *Congestion of a path*: the largest ``(load + demand) / capacity`` over its links;
  ties go to the smaller sum of those ratios, then to the lower index.
- *Equal priorities*: the contention DAG still orients the edge, from the job listed
  first in ``priority``, so contending jobs can always be separated.
- *Topological orders*: per weakly connected part of the DAG (jobs that contend with
  nobody take the top level K-1), the first sample is the priority order itself
  (``include_priority_order``), the rest are random Kahn orders (uniform among ready
  nodes) from ``numpy.random.default_rng(seed)``. Best cut wins; ties go to the earlier
  sample.
- *DP ties*: a group is split off only if it strictly raises the cut, so nothing is
  demoted without gain; among equal splits the earliest boundary wins.

Using it (simulator or controller, on arrival and finish of a job): build one
:class:`CruxJob` per job (its shape's M = its bytes of one iteration on its busiest link /
that link's rate), call :func:`priorities`; sort jobs by decreasing intensity and give
their flows paths with :func:`assign_paths`; list the job pairs that share a directed
link; :func:`compress_levels` gives each job's level for all its flows.
``leveller.core.policies.CruxPolicy`` stays the single-link, k = 1 form used by
``leveller simulate link``.

Crux's own Figure 11 numbers were not available in the sources we could search; the
unit test pins k2 = 1.5 with a documented two-job example (equal intensity, the
reference job's iteration twice as long).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import numpy as np

from leveller.core.rate import Number
from leveller.model.errors import UserError
from leveller.model.shape import JobShape

L = TypeVar("L", bound=Hashable)
K = TypeVar("K", bound=Hashable)


def gpu_intensity(gpus: int, compute_s: Number, bottleneck_time_s: Number) -> Number:
    """Crux's ``I_j = W_j / t_j`` with ``W_j = gpus * compute_s`` (GPU-seconds per iteration)."""
    if gpus < 1:
        raise UserError(f"gpus must be >= 1, got {gpus!r}")
    if not compute_s >= 0:  # also refuses NaN
        raise UserError(f"compute_s must be >= 0, got {compute_s!r}")
    if not bottleneck_time_s > 0:
        raise UserError(f"bottleneck_time_s must be > 0, got {bottleneck_time_s!r}")
    return gpus * compute_s / bottleneck_time_s


@dataclass(frozen=True)
class CruxJob:
    """What Crux knows about one job: its ``shape`` (leveller.model.shape, the one type and rule for
    it: compute C, GPUs G, slack S <= C; communication M is ``t_j``, the time of one iteration's
    traffic on the job's bottleneck link at full rate) and ``traffic``: bytes of one iteration on the
    bottleneck, to pick the reference job (default M).
    """

    name: str
    shape: JobShape[float] | JobShape[Fraction]
    traffic: Number | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise UserError("job name must be a non-empty string")
        if self.traffic is not None and self.traffic < 0:
            raise UserError(f"job {self.name!r}: traffic must be >= 0, got {self.traffic!r}")

    @property
    def intensity(self) -> Number:
        return gpu_intensity(self.shape.gpus, self.shape.compute, self.shape.comm)

    @property
    def ideal_s(self) -> Number:
        """Iteration time alone on the link: compute, plus the communication the slack cannot hide."""
        return self.shape.compute + max(0, self.shape.comm - self.shape.slack)

    @property
    def volume(self) -> Number:
        return self.shape.comm if self.traffic is None else self.traffic


def _alone_sends(job: CruxJob, until: Number) -> list[tuple[Number, Number]]:
    """Sending intervals of ``job`` running undisturbed from t = 0, those starting before ``until``."""
    out: list[tuple[Number, Number]] = []
    t: Number = 0
    while t < until:
        release = t + job.shape.compute - job.shape.slack
        done = release + job.shape.comm
        if release < until:
            out.append((release, done))
        t = max(t + job.shape.compute, done)
    return out


def _low_link_time(job: CruxJob, busy: Sequence[tuple[Number, Number]], until: Number) -> Number:
    """Link time ``job`` completes in ``[0, until)`` using only the link time ``busy`` leaves free."""
    used: Number = 0
    t: Number = 0
    i = 0
    while t < until:
        cur = t + job.shape.compute - job.shape.slack
        need = job.shape.comm
        while need > 0:
            if cur >= until:
                return used
            while i < len(busy) and busy[i][1] <= cur:
                i += 1
            if i < len(busy) and busy[i][0] <= cur:
                cur = busy[i][1]
                continue
            free_end = busy[i][0] if i < len(busy) else math.inf
            take = min(need, free_end - cur)
            used += min(cur + take, until) - cur
            need -= take
            cur += take
        t = max(t + job.shape.compute, cur)
    return used


def link_times(first: CruxJob, second: CruxJob, window_s: Number) -> tuple[Number, Number]:
    """Link time of (first, second) in ``[0, window_s)`` when ``first`` has strict priority.

    Exact for exact inputs (int / Fraction): the model is the pairwise comparison of the
    module docstring.
    """
    if not window_s > 0:
        raise UserError(f"window_s must be > 0, got {window_s!r}")
    busy = _alone_sends(first, window_s)
    high = sum((min(e, window_s) - s for s, e in busy), 0)
    return high, _low_link_time(second, busy, window_s)


def priority_gain(job: CruxJob, other: CruxJob, window_s: Number) -> Number:
    """``D_job``: link time ``job`` gets with priority over ``other`` minus without it."""
    with_priority, _ = link_times(job, other, window_s)
    _, without = link_times(other, job, window_s)
    return with_priority - without


def _check_unique(names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise UserError(f"job names must be unique, repeated: {dup}")


def reference_job(jobs: Sequence[CruxJob]) -> CruxJob:
    """The job with the most traffic (ties: listed first)."""
    if not jobs:
        raise UserError("need at least one job")
    return max(jobs, key=lambda j: j.volume)  # max keeps the first of equal keys


def correction_factors(jobs: Sequence[CruxJob], window_iterations: int = 100,
                       k_max: float = 10.0) -> dict[str, float]:
    """``k_j = D_j / D_ref`` against the reference job (k = 1); see the module docstring."""
    _check_unique([j.name for j in jobs])
    if window_iterations < 1:
        raise UserError(f"window_iterations must be >= 1, got {window_iterations!r}")
    if not k_max >= 1:
        raise UserError(f"k_max must be >= 1, got {k_max!r}")
    ref = reference_job(jobs)
    out: dict[str, float] = {}
    for job in jobs:
        if job.name == ref.name:
            out[job.name] = 1.0
            continue
        window = window_iterations * max(job.ideal_s, ref.ideal_s)
        d_job = priority_gain(job, ref, window)
        d_ref = priority_gain(ref, job, window)
        if d_job == 0 and d_ref == 0:
            out[job.name] = 1.0
        elif d_ref == 0:
            out[job.name] = k_max
        else:
            out[job.name] = min(k_max, max(1.0 / k_max, float(d_job / d_ref)))
    return out


def priorities(jobs: Sequence[CruxJob], window_iterations: int = 100, k_max: float = 10.0) -> dict[str, float]:
    """``P_j = k_j * I_j`` for every job."""
    k = correction_factors(jobs, window_iterations, k_max)
    return {j.name: k[j.name] * j.intensity for j in jobs}


# --- path selection -------------------------------------------------------------------

def _path_cost(path: Sequence[L], load: Mapping[L, float], capacity: Mapping[L, float],
               demand: float) -> tuple[float, float]:
    ratios = []
    for link in path:
        if link not in capacity:
            raise UserError(f"link {link!r} has no capacity")
        cap = capacity[link]
        if not cap > 0:
            raise UserError(f"capacity of link {link!r} must be > 0, got {cap!r}")
        ratios.append((load.get(link, 0.0) + demand) / cap)
    return (max(ratios, default=0.0), sum(ratios))


def least_congested_path(candidates: Sequence[Sequence[L]], load: Mapping[L, float],
                         capacity: Mapping[L, float], demand: float = 0.0) -> int:
    """Index of the candidate whose busiest link has the lowest ``(load + demand) / capacity``.

    Ties: lower sum of those ratios, then lower index.
    """
    if not candidates:
        raise UserError("need at least one candidate path")
    if demand < 0:
        raise UserError(f"demand must be >= 0, got {demand!r}")
    costs = [_path_cost(p, load, capacity, demand) for p in candidates]
    return min(range(len(candidates)), key=lambda i: costs[i])


def assign_paths(requests: Sequence[tuple[K, Sequence[Sequence[L]], float]], capacity: Mapping[L, float],
                 load: Mapping[L, float] | None = None) -> tuple[dict[K, int], dict[L, float]]:
    """Crux path selection: ``(key, candidates, demand)`` in the given order (decreasing I_j).

    Each request takes its least congested candidate and adds its demand to the links of
    that path. Returns the chosen index per key and the resulting load (the input
    ``load`` is not modified).
    """
    acc: dict[L, float] = dict(load or {})
    chosen: dict[K, int] = {}
    for key, candidates, demand in requests:
        if key in chosen:
            raise UserError(f"request {key!r} appears twice")
        i = least_congested_path(candidates, acc, capacity, demand)
        chosen[key] = i
        for link in candidates[i]:
            acc[link] = acc.get(link, 0.0) + demand
    return chosen, acc


# --- priority compression -------------------------------------------------------------

def max_k_cut_dp(order: Sequence[str], edges: Mapping[tuple[str, str], float],
                 k: int) -> tuple[float, dict[str, int]]:
    """Best cut of ``order`` into at most ``k`` consecutive groups; levels k-1 (first group) .. .

    ``edges[(u, v)] = w`` with ``u`` before ``v`` in ``order`` (a topological order). The
    cut value is the total weight of edges whose ends fall in different groups.
    O(k n^2) with numpy; see the module docstring for ties.
    """
    if k < 1:
        raise UserError(f"levels k must be >= 1, got {k!r}")
    pos = {name: i for i, name in enumerate(order)}
    if len(pos) != len(order):
        raise UserError(f"order repeats a node: {list(order)}")
    n = len(order)
    w = np.zeros((n, n))
    for (u, v), weight in edges.items():
        if u not in pos or v not in pos:
            raise UserError(f"edge ({u!r}, {v!r}) has a node outside the order")
        if not pos[u] < pos[v]:
            raise UserError(f"edge ({u!r}, {v!r}) goes backwards: the order is not topological")
        if not weight >= 0:
            raise UserError(f"edge ({u!r}, {v!r}) weight must be >= 0, got {weight!r}")
        w[pos[u], pos[v]] += weight
    if n == 0:
        return 0.0, {}
    # s[a, b] = weight from positions < a into positions < b; cut[j, i] = weight from [0, j) into [j, i).
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = w.cumsum(0).cumsum(1)
    cut = s - np.diag(s)[:, None]
    valid = np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)
    valid[0, :] = False  # a group boundary at 0 is no split
    tol = 1e-12 * (1.0 + float(w.sum()))
    best = np.zeros(n + 1)  # at most one group: nothing cut
    choice = []  # choice[g][i]: start of the last group when g+2 groups are used, -1 = fewer groups
    for _ in range(1, k):
        cand = np.where(valid, best[:, None] + cut, -np.inf)
        j = cand.argmax(axis=0)
        val = cand[j, np.arange(n + 1)]
        split = val > best + tol
        choice.append(np.where(split, j, -1))
        best = np.where(split, val, best)
    bounds = []
    i = n
    for g in range(len(choice) - 1, -1, -1):
        j = int(choice[g][i])
        if j >= 0:
            bounds.append(j)
            i = j
    starts = [0] + sorted(bounds)
    levels: dict[str, int] = {}
    for group, start in enumerate(starts):
        end = starts[group + 1] if group + 1 < len(starts) else n
        for name in order[start:end]:
            levels[name] = k - 1 - group
    return float(best[n]), levels


def contention_dag(priority: Mapping[str, float], intensity: Mapping[str, Number],
                   contends: Iterable[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """Edges ``j1 -> j2`` of weight ``I_j1`` for contending jobs with ``P_j1 > P_j2``.

    Equal priorities: the job listed first in ``priority`` is the higher one. Self pairs
    are ignored; a pair listed twice gives one edge.
    """
    rank = {name: i for i, name in enumerate(priority)}
    edges: dict[tuple[str, str], float] = {}
    for a, b in contends:
        for name in (a, b):
            if name not in rank:
                raise UserError(f"contending job {name!r} has no priority")
            if name not in intensity:
                raise UserError(f"contending job {name!r} has no intensity")
        if a == b:
            continue
        hi, lo = (a, b) if (-priority[a], rank[a]) < (-priority[b], rank[b]) else (b, a)
        edges[(hi, lo)] = float(intensity[hi])
    return edges


def _components(nodes: Sequence[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Weakly connected parts with at least one edge, nodes in ``nodes`` order."""
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    touched: set[str] = set()
    for u, v in edges:
        touched.update((u, v))
        parent[find(u)] = find(v)
    parts: dict[str, list[str]] = {}
    for n in nodes:
        if n in touched:
            parts.setdefault(find(n), []).append(n)
    return list(parts.values())


def _random_topological_order(nodes: Sequence[str], edges: Iterable[tuple[str, str]],
                              rng: np.random.Generator) -> list[str]:
    """Kahn's algorithm choosing uniformly among ready nodes (ready list kept in ``nodes`` order)."""
    indeg = {n: 0 for n in nodes}
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for u, v in edges:
        succ[u].append(v)
        indeg[v] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    out = []
    while ready:
        node = ready.pop(int(rng.integers(len(ready))))
        out.append(node)
        for v in succ[node]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return out


def compress_levels(priority: Mapping[str, float], intensity: Mapping[str, Number],
                    contends: Iterable[tuple[str, str]], k: int, samples: int = 10, seed: int = 0,
                    include_priority_order: bool = True) -> dict[str, int]:
    """Crux priority compression: a level in K-1 (highest) .. 0 for every job in ``priority``.

    Max K-Cut of the contention DAG by :func:`max_k_cut_dp` over ``samples`` topological
    orders per connected part; deterministic for a given ``seed``, whatever the order (or
    orientation) in which ``contends`` lists the pairs.
    """
    if k < 1:
        raise UserError(f"levels k must be >= 1, got {k!r}")
    if samples < 1:
        raise UserError(f"samples must be >= 1, got {samples!r}")
    names = list(priority)
    pos = {name: i for i, name in enumerate(names)}
    # Edges in the order of their ends in ``priority``, not in the order ``contends`` lists them:
    # the sampled orders follow the edge order, and a caller's set of pairs has no stable order.
    edges = dict(sorted(contention_dag(priority, intensity, contends).items(),
                        key=lambda e: (pos[e[0][0]], pos[e[0][1]])))
    by_priority = sorted(names, key=lambda n: -priority[n])  # stable: ties keep the listed order
    levels = {n: k - 1 for n in names}
    rng = np.random.default_rng(seed)
    for part in _components(by_priority, edges):
        members = set(part)
        sub = {e: wt for e, wt in edges.items() if e[0] in members}
        orders = [part] if include_priority_order else []
        while len(orders) < samples:
            orders.append(_random_topological_order(part, sub, rng))
        best_value, best_levels = -1.0, {}
        for order in orders:
            value, lv = max_k_cut_dp(order, sub, k)
            if value > best_value:
                best_value, best_levels = value, lv
        levels.update(best_levels)
    return levels
