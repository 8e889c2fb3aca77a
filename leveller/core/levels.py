"""K switch priority levels from a job order, by pruning the contention graph.

Contention graph: one node per flow, an edge between two flows of different
jobs that share a link. Pruning (paper section 3.3, Figures 6-7): in every
connected part, all flows of the highest-priority job present in that part
take the highest free level and leave the graph; the graph is re-split into
connected parts and the next level is used; when one level is left, every
remaining flow shares it. Levels are K-1 (highest) .. 0 (lowest). Flows that
never contend are thus set independently, so K levels serve more than K jobs.

The pairwise graph is never built (it is quadratic in the flows per link). A
link whose remaining flows belong to two or more jobs joins all of them in
one part: each such flow has a neighbour of another job there, and flows of
one job meet through it. A link carrying one job only adds no edge. So the
parts of a round are the connected components of the flow-link incidence
restricted to contended links (scipy.sparse.csgraph over integer ids), and a
flow on no contended link is a part of its own. Work per round is linear in
the incidence; K rounds.

With no order (the ``fair`` policy) every flow gets level 0. A job's flows
can land on different levels when they sit in different connected parts.
Deterministic: the result depends only on the order and the flow-link sets.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from leveller.core.policies import LevellerPolicy

if TYPE_CHECKING:
    from leveller.core.levels_input import LevelsInput

Pruner = Callable[[np.ndarray, np.ndarray, np.ndarray, int, int], np.ndarray]  # prune()'s signature

SMALL_INCIDENCE = 512  # up to this many (flow, link) pairs, prune() runs in plain Python


@dataclass(frozen=True)
class Flow:
    """A flow of ``job`` crossing ``links`` (any hashable link ids, e.g. "s1-s2")."""

    job: str
    links: tuple[Hashable, ...]


def prune(rank: np.ndarray, inc_flow: np.ndarray, inc_link: np.ndarray, n_links: int, k: int) -> np.ndarray:
    """Levels (int8, K-1 highest) of flows 0..len(rank)-1 by K rounds of pruning.

    ``rank[f]`` is the position of flow f's job in the order (0 = highest priority; flows of one
    job share a rank, different jobs differ). The incidence lists one (flow, link) pair per entry:
    ``inc_flow[i]`` crosses link ``inc_link[i]`` (link ids in 0..n_links-1; a pair may repeat)."""
    if k < 1:
        raise ValueError(f"number of levels K must be >= 1, got {k!r}")
    rank = np.asarray(rank, dtype=np.int64)
    inc_flow = np.asarray(inc_flow, dtype=np.int64)
    inc_link = np.asarray(inc_link, dtype=np.int64)
    n = len(rank)
    if len(inc_flow) != len(inc_link):
        raise ValueError(f"incidence arrays differ in length: {len(inc_flow)} flows, {len(inc_link)} links")
    if len(inc_flow) and (inc_flow.min() < 0 or inc_flow.max() >= n or inc_link.min() < 0
                          or inc_link.max() >= n_links):
        raise ValueError("incidence refers to a flow or link id out of range")
    levels = np.zeros(n, dtype=np.int8)
    if n == 0 or k == 1:
        return levels
    if len(inc_flow) <= SMALL_INCIDENCE:
        levels[:] = _prune_small(rank.tolist(), inc_flow.tolist(), inc_link.tolist(), k)
        return levels
    alive = np.ones(n, dtype=bool)
    big = np.iinfo(np.int64).max
    level = k - 1
    f, lk = inc_flow, inc_link
    while level > 0:
        keep = alive[f]
        f, lk = f[keep], lk[keep]
        r = rank[f]
        lo = np.full(n_links, big, dtype=np.int64)
        hi = np.full(n_links, -1, dtype=np.int64)
        np.minimum.at(lo, lk, r)
        np.maximum.at(hi, lk, r)
        contended = (lo != hi)[lk]  # two or more jobs among the remaining flows of that link
        cf, cl = f[contended], lk[contended]
        # bipartite graph: flow nodes 0..n-1, link nodes n..n+n_links-1
        graph = csr_matrix((np.ones(len(cf), dtype=np.int32), (cf, cl + n)), shape=(n + n_links, n + n_links))
        ncomp, labels = connected_components(graph, directed=False)
        part = labels[:n]
        top = np.full(ncomp, big, dtype=np.int64)
        np.minimum.at(top, part[alive], rank[alive])
        chosen = alive & (rank == top[part])
        levels[chosen] = level
        alive &= ~chosen
        level -= 1
        if not alive.any():
            break
    return levels


def _find(parent: list[int], x: int) -> int:
    """Union-find root of x, halving the path on the way."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _prune_small(rank: list[int], inc_flow: list[int], inc_link: list[int], k: int) -> list[int]:
    """prune() in plain Python with union-find: for small inputs, where numpy's and scipy's fixed
    cost per call (about 0.25 ms) would dominate (the link simulator decides thousands of times)."""
    n = len(rank)
    links_of: list[list[int]] = [[] for _ in range(n)]
    for f, lk in zip(inc_flow, inc_link):
        links_of[f].append(lk)
    levels = [0] * n
    alive = list(range(n))
    for level in range(k - 1, 0, -1):
        on_link: dict[int, list[int]] = {}
        for f in alive:
            for lk in links_of[f]:
                on_link.setdefault(lk, []).append(f)
        parent = list(range(n))
        for members in on_link.values():
            first = rank[members[0]]
            if any(rank[f] != first for f in members):  # contended: join every flow on it
                root = _find(parent, members[0])
                for f in members[1:]:
                    other = _find(parent, f)
                    if other != root:
                        parent[other] = root
        top: dict[int, int] = {}
        for f in alive:
            root = _find(parent, f)
            if rank[f] < top.get(root, rank[f] + 1):
                top[root] = rank[f]
        rest = []
        for f in alive:
            if rank[f] == top[_find(parent, f)]:
                levels[f] = level
            else:
                rest.append(f)
        alive = rest
        if not alive:
            break
    return levels


class FlowSet(Mapping[str, Flow]):
    """Flows by name, with their flow-link incidence in integer ids built once.

    A caller that decides the levels of the same flows under many orders (the network simulator
    re-ranks a contention group at every iteration end) pays the names-to-ids work once instead
    of at every decision. A read-only mapping, so it goes wherever a flow table does."""

    def __init__(self, flows: Mapping[str, Flow]) -> None:
        self._flows = dict(flows)
        self.names = list(self._flows)
        self.jobs = list(dict.fromkeys(f.job for f in self._flows.values()))  # in order of first flow
        job_id = {job: i for i, job in enumerate(self.jobs)}
        link_ids: dict[Hashable, int] = {}
        inc_flow: list[int] = []
        inc_link: list[int] = []
        for i, flow in enumerate(self._flows.values()):
            for link in flow.links:
                inc_flow.append(i)
                inc_link.append(link_ids.setdefault(link, len(link_ids)))
        self.job_of = np.array([job_id[f.job] for f in self._flows.values()], dtype=np.int64)
        self.inc_flow = np.array(inc_flow, dtype=np.int64)
        self.inc_link = np.array(inc_link, dtype=np.int64)
        self.n_links = len(link_ids)

    def __getitem__(self, name: str) -> Flow:
        return self._flows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flows)

    def __len__(self) -> int:
        return len(self._flows)

    def rank(self, order: Sequence[str]) -> np.ndarray:
        """Position in ``order`` (highest priority first) of every flow's job; ValueError naming
        duplicates in the order or jobs it misses."""
        rank_of = {job: i for i, job in enumerate(order)}
        if len(rank_of) != len(order):
            raise ValueError(f"job order has duplicates: {list(order)}")
        unknown = sorted(set(self.jobs) - rank_of.keys())
        if unknown:
            raise ValueError(f"flows name jobs missing from the order: {unknown}")
        by_job = np.array([rank_of[job] for job in self.jobs], dtype=np.int64)
        return by_job[self.job_of]

    def levels(self, order: Sequence[str] | None, k: int, pruner: Pruner | None = None) -> dict[str, int]:
        """Level of every flow in [0, k-1] given a job order (highest priority first) or None.
        ``pruner`` stands in for :func:`prune` (a compiled twin with the same results)."""
        if k < 1:
            raise ValueError(f"number of levels K must be >= 1, got {k!r}")
        if order is None:
            return dict.fromkeys(self.names, 0)
        levels = (pruner or prune)(self.rank(order), self.inc_flow, self.inc_link, self.n_links, k)
        return dict(zip(self.names, levels.tolist()))


def assign_levels(order: Sequence[str] | None, flows: Mapping[str, Flow], k: int) -> dict[str, int]:
    """Map every flow to a level in [0, k-1] given a job order (highest priority first) or None."""
    if k < 1:
        raise ValueError(f"number of levels K must be >= 1, got {k!r}")
    if order is None:
        return {name: 0 for name in flows}
    return (flows if isinstance(flows, FlowSet) else FlowSet(flows)).levels(order, k)


def decide_levels(inp: LevelsInput, k: int) -> list[int]:
    """Level of every flow (in input order): the leveller order by R, then K-level pruning."""
    order = LevellerPolicy().order(inp.jobs)
    rank_of = {name: r for r, name in enumerate(order)}
    rank_by_job = np.array([rank_of[j.name] for j in inp.jobs], dtype=np.int64)
    rank = rank_by_job[np.asarray(inp.job, dtype=np.int64)]
    levels = prune(rank, np.asarray(inp.inc_flow, dtype=np.int64), np.asarray(inp.inc_link, dtype=np.int64),
                   len(inp.link_names), k)
    out: list[int] = levels.tolist()
    return out
