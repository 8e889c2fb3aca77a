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

Vectorised over the (flow, link) pairs of a flows x links incidence: one round per
distinct bottleneck, a few ``np.bincount`` passes per round.

Incremental filling (:class:`Refill`): every rule above acts link by link, so the
allocation splits exactly over the connected parts of the active flows (two
active flows are connected when they share a link, transitively). When some
flows start, stop or change level, only the parts they belong to, before and
after, are filled again; the rest keep their rates.

Two backends compute the same rates: numba loops (:mod:`leveller.sim.network.fluid_kernel`, the
default: the same floating-point operations in the same order, so the same bits, without numpy's
per-call cost) and the numpy code below (the reference, and the fallback when numba is not
importable). ``LEVELLER_SIM_KERNEL`` = ``auto`` (default), ``numba`` (an error if it cannot be
imported) or ``numpy`` chooses; :func:`backend` says which is in use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType

import numpy as np
import scipy.sparse as sp

from leveller.sim.network.ties import TIE

ENV = "LEVELLER_SIM_KERNEL"
CHOICES = ("auto", "numba", "numpy")
_UNSET = object()
_kernel: object = _UNSET  # the fluid_kernel module, None for numpy, _UNSET before the first use


def _load(choice: str) -> ModuleType | None:
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={choice!r}: the water-filling backend is one of {', '.join(CHOICES)}")
    if choice == "numpy":
        return None
    try:
        from leveller.sim.network import fluid_kernel
    except ImportError as e:
        if choice == "numba":
            raise ImportError(f"{ENV}=numba: numba cannot be imported ({e}); pip install numba, or "
                              f"{ENV}=auto to fall back to numpy") from e
        return None
    return fluid_kernel


def kernel() -> ModuleType | None:
    """The compiled kernels in use, or None for the numpy code (chosen once, from ``LEVELLER_SIM_KERNEL``)."""
    global _kernel
    if _kernel is _UNSET:
        _kernel = _load(os.environ.get(ENV, "auto"))
    return _kernel  # type: ignore[return-value]


def set_backend(choice: str) -> str:
    """Choose the backend as ``LEVELLER_SIM_KERNEL`` would (for tests and benchmarks); the one now in use.
    Takes effect for new :class:`Refill` objects and every :func:`max_min_rates` call."""
    global _kernel
    _kernel = _load(choice)
    return backend()


def backend() -> str:
    """``numba`` or ``numpy``: which water-filling runs."""
    return "numpy" if kernel() is None else "numba"


@dataclass(frozen=True)
class Incidence:
    """Flows x links 0/1 incidence as its (flow, link) pairs, sorted by flow, each pair once."""

    e_flow: np.ndarray
    e_link: np.ndarray
    n_flows: int
    n_links: int

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], n_links: int) -> Incidence:
        """Row f has a 1 in every column (link id) of ``paths[f]``; a link listed twice counts once."""
        rows = np.repeat(np.arange(len(paths), dtype=np.int64), [len(p) for p in paths])
        cols = np.fromiter((lk for p in paths for lk in p), dtype=np.int64, count=len(rows))
        if len(rows):
            pair = np.unique(rows * max(n_links, 1) + cols)  # sorted by flow, duplicates dropped
            rows, cols = pair // max(n_links, 1), pair % max(n_links, 1)
        return cls(rows, cols, len(paths), n_links)

    @cached_property
    def flows_links(self) -> sp.csr_matrix:
        """The incidence as a sparse flows x links matrix."""
        return sp.csr_matrix((np.ones(len(self.e_flow)), (self.e_flow, self.e_link)),
                             shape=(self.n_flows, self.n_links))

    @cached_property
    def links_flows(self) -> sp.csr_matrix:
        """Its transpose (``links_flows @ rates``: the load of every link)."""
        return self.flows_links.T.tocsr()

    @cached_property
    def has_link(self) -> np.ndarray:
        """Per flow: it crosses at least one link."""
        return np.bincount(self.e_flow, minlength=self.n_flows) > 0


def max_min_rates(inc: Incidence, capacity: np.ndarray, level: np.ndarray, active: np.ndarray,
                  floor: float = 0.0, top: int | None = None) -> np.ndarray:
    """Rate of every flow (0 when inactive, inf when it crosses no link).

    ``capacity`` per link (any unit per second), ``level`` per flow (higher =
    served first), ``active`` a bool mask of the flows that are sending.
    ``floor``: share of every link guaranteed to each level below ``top`` (the
    highest level, K-1; None: the highest active one), see the module docstring.
    """
    rates = np.zeros(inc.n_flows)
    active = np.asarray(active, dtype=bool)
    k = kernel()
    if k is None:
        _rates_numpy(inc.e_flow, inc.e_link, inc.n_flows, inc.n_links, capacity, level, active, floor, top, rates)
    else:
        k.rates_of(inc.e_flow, inc.e_link, np.asarray(capacity, dtype=float), np.asarray(level, dtype=np.int64),
                   active, float(floor), -1 if top is None else int(top), rates)
    return rates


def _rates_numpy(e_flow: np.ndarray, e_link: np.ndarray, n_flows: int, n_links: int, capacity: np.ndarray,
           level: np.ndarray, active: np.ndarray, floor: float, top: int | None, rates: np.ndarray) -> None:
    """:func:`max_min_rates` of the ``active`` flows on the pairs given, written into ``rates``
    (the entries of the other flows are left alone)."""
    act = np.flatnonzero(active)
    if not len(act):
        return
    keep = active[e_flow]
    e_flow, e_link = e_flow[keep], e_link[keep]
    residual = np.array(capacity, dtype=float)
    lv = level[act]
    lo, hi = lv.min(), lv.max()
    if lo == hi:
        _fill_numpy(e_flow, e_link, n_flows, residual, active.copy(), rates)
        return
    levels = np.unique(lv)
    reserved: dict[int, np.ndarray] = {}
    if floor > 0:  # a level alone is not affected by its floor
        cap = np.asarray(capacity, dtype=float)
        e_level = level[e_flow]
        for this in levels:
            if this < (hi if top is None else top):
                above = np.bincount(e_link[e_level > this], minlength=n_links) > 0
                share = np.zeros(n_flows)
                _fill_numpy(e_flow, e_link, n_flows, np.where(above, cap * floor, cap), active & (level == this),
                            share)
                mine = e_level == this
                load = np.bincount(e_link[mine], weights=_finite(share)[e_flow[mine]], minlength=n_links)
                reserved[int(this)] = np.minimum(load, cap * floor)
        for r in reserved.values():
            residual -= r
        np.maximum(residual, 0.0, out=residual)
    for this in levels[::-1]:
        if int(this) in reserved:
            residual += reserved[int(this)]  # the level's own reservation comes back to it
        _fill_numpy(e_flow, e_link, n_flows, residual, active & (level == this), rates)


def _finite(rates: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(rates), rates, 0.0)


def _fill_numpy(e_flow: np.ndarray, e_link: np.ndarray, n_flows: int, residual: np.ndarray, unfrozen: np.ndarray,
          rates: np.ndarray) -> None:
    """Progressive filling of the ``unfrozen`` flows on ``residual`` (both updated in place) over the
    (flow, link) pairs given, their rates written to ``rates``: max-min fair among them.

    One round per bottleneck value, a few numpy passes each: the flows per link are counted once and
    then decremented, and the fair share of a link without flows is left out of the minimum as NaN
    or inf (0 / 0, r / 0)."""
    n_links = len(residual)
    live = unfrozen[e_flow]
    ef, el = e_flow[live], e_link[live]
    counts = np.bincount(el, minlength=n_links)
    with np.errstate(divide="ignore", invalid="ignore"):
        while len(el):
            share = residual / counts
            x = max(float(np.fmin.reduce(share)), 0.0)
            newly = ef[share[el] <= x * (1 + TIE) + 1e-300]  # the flows crossing a bottleneck (with repeats)
            rates[newly] = x
            unfrozen[newly] = False
            keep = unfrozen[ef]
            gone = np.bincount(el[~keep], minlength=n_links)
            residual -= gone * x
            np.maximum(residual, 0.0, out=residual)
            counts -= gone
            ef, el = ef[keep], el[keep]
    if unfrozen.any():  # flows that cross no link are not limited by the network
        rates[unfrozen] = np.inf
        unfrozen[:] = False


def link_load(inc: Incidence, rates: np.ndarray) -> np.ndarray:
    """Sum of the rates of the flows on every link (inf rates count as 0)."""
    return np.bincount(inc.e_link, weights=_finite(np.asarray(rates, dtype=float))[inc.e_flow],
                       minlength=inc.n_links)


class Refill:
    """Rates kept across events: each call fills again only the connected parts of the active flows
    that a change touches (see the module docstring); equal to :func:`max_min_rates` of the same
    arguments up to the rounding of ties (TIE)."""

    def __init__(self, inc: Incidence, capacity: np.ndarray, floor: float = 0.0, top: int | None = None) -> None:
        self.inc = inc
        self.capacity = np.asarray(capacity, dtype=float)
        self.floor = floor
        self.top = top
        self.level = np.zeros(inc.n_flows, dtype=np.int64)
        self.active = np.zeros(inc.n_flows, dtype=bool)
        self.rates = np.zeros(inc.n_flows)
        self.filled = 0  # flows filled again, summed over calls (a measure of the work done)
        self.kernel = kernel()
        if self.kernel is not None:  # the incidence as CSR both ways, for the kernel's search of the parts
            self.flow_ptr = np.searchsorted(inc.e_flow, np.arange(inc.n_flows + 1)).astype(np.int64)
            by_link = np.argsort(inc.e_link, kind="stable")
            self.link_flow = inc.e_flow[by_link].astype(np.int64)
            self.link_ptr = np.searchsorted(inc.e_link[by_link], np.arange(inc.n_links + 1)).astype(np.int64)
            self.e_link = inc.e_link.astype(np.int64)
            self.top_arg = -1 if top is None else int(top)

    def __call__(self, level: np.ndarray, active: np.ndarray) -> np.ndarray:
        """The rates for ``level`` and ``active`` now (the array is owned by this object: copy to keep)."""
        active = np.asarray(active, dtype=bool)
        if self.kernel is not None:
            n = self.kernel.refill(self.flow_ptr, self.e_link, self.link_ptr, self.link_flow, self.inc.has_link,
                                   self.capacity, float(self.floor), self.top_arg, self.level, self.active,
                                   np.asarray(level, dtype=np.int64), active, self.rates)
            if n > 0:
                self.filled += n
            return self.rates
        changed = (active != self.active) | (active & (level != self.level))
        if not changed.any():
            return self.rates
        inc = self.inc
        part = self.part(changed, active)
        self.rates[changed & ~active] = 0.0
        free = changed & active & ~inc.has_link
        self.rates[free] = np.inf  # no link: not limited by the network
        if part.any():
            keep = part[inc.e_flow]
            self.rates[part] = 0.0
            _rates_numpy(inc.e_flow[keep], inc.e_link[keep], inc.n_flows, inc.n_links, self.capacity, level, part,
                         self.floor, self.top, self.rates)
            self.filled += int(np.count_nonzero(part))
        self.level = np.array(level, dtype=np.int64)
        self.active = active
        return self.rates

    def part(self, changed: np.ndarray, active: np.ndarray) -> np.ndarray:
        """The active flows connected (through shared links, among active flows) to a link of a
        ``changed`` flow: the flows whose rates can differ from before."""
        inc = self.inc
        on = np.zeros(inc.n_links, dtype=bool)
        on[inc.e_link[changed[inc.e_flow]]] = True
        part = np.zeros(inc.n_flows, dtype=bool)
        e_act = active[inc.e_flow]
        ef, el = inc.e_flow[e_act], inc.e_link[e_act]
        while True:
            reached = ef[on[el]]
            new = np.zeros(inc.n_flows, dtype=bool)
            new[reached] = True
            new &= ~part
            if not new.any():
                return part
            part |= new
            on[el[new[ef]]] = True
