"""Flow rates on a network: strict priority by level, max-min water-filling within a level.

The rate model of the network simulator (a fluid model, no packets). Levels are
served from the highest down; the flows of one level share the capacity that
higher levels left on every directed link by progressive filling: all unfrozen
flows grow together, and when a link runs out the flows crossing it freeze at
its fair share. The result is the max-min fair allocation of each level on the
residual capacity, so a lower level can never slow a higher one.

With a floor F (the switches' guaranteed share of every queue below the top,
leveller.core.qos): on every link, each level below the top first reserves
min(its demand, F x capacity), split max-min among its flows; then the levels are
served from the top down as above, each on the capacity the higher levels left
plus its own reservation, max-min within the level. A level's demand is what its
flows get water-filled alone on F x capacity where a higher level sends and on
the whole capacity elsewhere (a fluid approximation: a higher level held back
elsewhere is not counted). A level alone on its links is not affected by the
floor; F = 0 is the paper's model.

Vectorised over a flows x links incidence matrix (scipy.sparse): one round per
distinct bottleneck, two sparse products per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

# A link whose fair share is within this relative distance of the minimum is a
# bottleneck of the same round (floating-point ties are real ties).
TIE = 1e-9


DENSE_MAX = 40_000  # flows x links up to which plain numpy arrays beat scipy.sparse (call overhead)


@dataclass(frozen=True)
class Incidence:
    """Flows x links 0/1 matrix and its transpose (dense arrays when small, CSR otherwise)."""

    flows_links: Any
    links_flows: Any
    n_flows: int
    n_links: int

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], n_links: int) -> Incidence:
        """Row f has a 1 in every column (link id) of ``paths[f]``; a link listed twice counts once."""
        rows = np.repeat(np.arange(len(paths)), [len(p) for p in paths])
        cols = np.fromiter((lk for p in paths for lk in p), dtype=np.int64, count=len(rows))
        m = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(paths), n_links))
        m.data[:] = 1.0  # duplicates were summed
        if len(paths) * n_links <= DENSE_MAX:
            dense = m.toarray()
            return cls(dense, np.ascontiguousarray(dense.T), len(paths), n_links)
        return cls(m, m.T.tocsr(), len(paths), n_links)


def max_min_rates(inc: Incidence, capacity: np.ndarray, level: np.ndarray, active: np.ndarray,
                  floor: float = 0.0, top: int | None = None) -> np.ndarray:
    """Rate of every flow (0 when inactive, inf when it crosses no link).

    ``capacity`` per link (any unit per second), ``level`` per flow (higher =
    served first), ``active`` a bool mask of the flows that are sending.
    ``floor``: share of every link guaranteed to each level below ``top`` (the
    highest level, K-1; None: the highest active one), see the module docstring.
    """
    rates = np.zeros(inc.n_flows)
    act = np.flatnonzero(active)
    if not len(act):
        return rates
    residual = np.array(capacity, dtype=float)
    lv = level[act]
    lo, hi = lv.min(), lv.max()
    reserved: dict[int, np.ndarray] = {}
    if floor > 0 and lo != hi:  # a level alone is not affected by its floor
        cap = np.asarray(capacity, dtype=float)
        for this in np.unique(lv):
            if this < (hi if top is None else top):
                above = (inc.links_flows @ (active & (level > this)).astype(float)) > 0
                share = np.zeros(inc.n_flows)
                _fill(inc, np.where(above, cap * floor, cap), active & (level == this), share)
                reserved[int(this)] = np.minimum(link_load(inc, share), cap * floor)
        for r in reserved.values():
            residual -= r
        np.maximum(residual, 0.0, out=residual)
    for this in ([hi] if lo == hi else np.unique(lv)[::-1]):
        unfrozen = active.copy() if lo == hi else active & (level == this)
        if int(this) in reserved:
            residual += reserved[int(this)]  # the level's own reservation comes back to it
        _fill(inc, residual, unfrozen, rates)
    return rates


def _fill(inc: Incidence, residual: np.ndarray, unfrozen: np.ndarray, rates: np.ndarray) -> None:
    """Progressive filling of the ``unfrozen`` flows on ``residual`` (both updated in place), their
    rates written to ``rates``: max-min fair among them."""
    left = int(np.count_nonzero(unfrozen))
    while left:
        counts = inc.links_flows @ unfrozen.astype(float)
        used = np.flatnonzero(counts)
        if not len(used):  # flows that cross no link are not limited by the network
            rates[unfrozen] = np.inf
            break
        share = residual[used] / counts[used]
        x = max(float(share.min()), 0.0)
        bottleneck = np.zeros(inc.n_links)
        bottleneck[used[share <= x * (1 + TIE) + 1e-300]] = 1.0
        newly = unfrozen & ((inc.flows_links @ bottleneck) > 0)
        rates[newly] = x
        residual -= (inc.links_flows @ newly.astype(float)) * x
        np.maximum(residual, 0.0, out=residual)
        unfrozen &= ~newly
        left -= int(np.count_nonzero(newly))


def link_load(inc: Incidence, rates: np.ndarray) -> np.ndarray:
    """Sum of the rates of the flows on every link (inf rates count as 0)."""
    finite = np.where(np.isfinite(rates), rates, 0.0)
    return inc.links_flows @ finite
