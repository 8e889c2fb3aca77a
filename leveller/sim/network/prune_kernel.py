"""The K-level pruning of :func:`leveller.core.levels.prune` compiled with numba, for the simulator.

The network simulator re-prunes a contention group of thousands of flows at every iteration end
whose order is new; there ``prune``'s numpy rounds spend their time building a scipy.sparse graph per
round (about 1 ms each, K - 1 rounds). This is the same rule as ``prune``'s plain-Python
union-find (``_prune_small``) in compiled loops: per round, every link whose remaining flows belong to
two or more jobs joins them in one part, and the flows of the highest-priority job of each part take
the round's level. Levels are integers, so the result is ``prune``'s exactly; the tests hold it against
``prune`` (tests/unit/test_sim_network_prune_kernel.py). The live controller keeps ``prune`` itself.

Imported only when numba is importable (:func:`leveller.sim.network.policies.pruner` falls back to
``prune`` otherwise); compiled code is cached on disk as in ``fluid_kernel``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_BIG = int(np.iinfo(np.int64).max)  # a plain int, frozen into the compiled code as a constant


@njit(cache=True)
def _find(parent: np.ndarray, x: int) -> int:  # pragma: no cover - compiled
    """Union-find root of x, halving the path on the way."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def _prune(rank: np.ndarray, inc_flow: np.ndarray, inc_link: np.ndarray, n_links: int,
           k: int) -> np.ndarray:  # pragma: no cover - compiled
    n = rank.shape[0]
    m = inc_flow.shape[0]
    levels = np.zeros(n, dtype=np.int8)
    if n == 0 or k == 1:
        return levels
    ptr = np.zeros(n_links + 1, dtype=np.int64)  # the incidence by link (counting sort)
    for i in range(m):
        ptr[inc_link[i] + 1] += 1
    for lk in range(n_links):
        ptr[lk + 1] += ptr[lk]
    slot = ptr[:-1].copy()
    member = np.empty(m, dtype=np.int64)
    for i in range(m):
        member[slot[inc_link[i]]] = inc_flow[i]
        slot[inc_link[i]] += 1
    alive = np.ones(n, dtype=np.bool_)
    parent = np.empty(n, dtype=np.int64)
    top = np.empty(n, dtype=np.int64)
    left = n
    for level in range(k - 1, 0, -1):
        for f in range(n):
            parent[f] = f
        for lk in range(n_links):
            first = -1
            contended = False
            for q in range(ptr[lk], ptr[lk + 1]):
                f = member[q]
                if alive[f]:
                    if first < 0:
                        first = f
                    elif rank[f] != rank[first]:
                        contended = True
                        break
            if contended:  # join every remaining flow on the link
                root = _find(parent, first)
                for q in range(ptr[lk], ptr[lk + 1]):
                    f = member[q]
                    if alive[f]:
                        other = _find(parent, f)
                        if other != root:
                            parent[other] = root
        for f in range(n):
            top[f] = _BIG
        for f in range(n):
            if alive[f]:
                root = _find(parent, f)
                if rank[f] < top[root]:
                    top[root] = rank[f]
        for f in range(n):
            if alive[f] and rank[f] == top[_find(parent, f)]:
                levels[f] = level
                alive[f] = False
                left -= 1
        if left == 0:
            break
    return levels


def prune(rank: np.ndarray, inc_flow: np.ndarray, inc_link: np.ndarray, n_links: int, k: int) -> np.ndarray:
    """:func:`leveller.core.levels.prune`, compiled; the same arguments, checks and result."""
    if k < 1:
        raise ValueError(f"number of levels K must be >= 1, got {k!r}")
    rank = np.ascontiguousarray(rank, dtype=np.int64)
    inc_flow = np.ascontiguousarray(inc_flow, dtype=np.int64)
    inc_link = np.ascontiguousarray(inc_link, dtype=np.int64)
    n = len(rank)
    if len(inc_flow) != len(inc_link):
        raise ValueError(f"incidence arrays differ in length: {len(inc_flow)} flows, {len(inc_link)} links")
    if len(inc_flow) and (inc_flow.min() < 0 or inc_flow.max() >= n or inc_link.min() < 0
                          or inc_link.max() >= n_links):
        raise ValueError("incidence refers to a flow or link id out of range")
    return _prune(rank, inc_flow, inc_link, int(n_links), int(k))
