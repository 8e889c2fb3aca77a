"""CASSINI's rotation scores (:func:`leveller.core.cassini._best_rotation`) compiled with numba, for the simulator.

On the contended 1,024-GPU hour most of CASSINI's CPU time is its planning, and most of that is the
reference scores of near-tied rotations (on saturated links many rotations have the same excess in
exact arithmetic, and only the element-wise values, rounded as numpy rounds them, tell them apart)
and the rough sums that rank them. This is the same search in compiled loops:

- the reference value of a rotation ``r`` is computed as ``cassini._scores`` computes it, term by term
  ``max((base[k] + curve[k - r]) - 1, 0)``, summed in numpy's pairwise order (``add.reduce`` of a
  contiguous row: 8 running sums over blocks of up to 128 terms, halves split at multiples of 8,
  started from 0), divided by the bins and taken from 1: the same float64 operations on the same
  operands in the same order, so the same bits;
- the rough sums are ``cassini._rough``'s, per run of the profile, summed in plain loops; their bound
  is the numpy code's, doubled (a wider margin only scores more candidates exactly, it cannot change
  the result).

So :func:`best_rotation` returns what ``cassini._best_rotation`` returns, ties included; the tests hold it
against the numpy code (tests/unit/test_sim_network_cassini_kernel.py). The live controller keeps the
numpy code.

Imported only when numba is importable (:func:`leveller.sim.network.baselines.rotation_search` falls back
to the numpy search otherwise); compiled code is cached on disk as in ``fluid_kernel``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from leveller.core.cassini import EPS, NEAR, SHORT

_BLOCK = 128  # numpy's PW_BLOCKSIZE: the pairwise sum's leaves


@njit(cache=True, inline="always")
def _term(b: float, c: float) -> float:  # pragma: no cover - compiled
    """``np.maximum((b + c) - 1, 0)`` (operands are finite: no NaN to propagate)."""
    w = (b + c) - 1.0
    return w if w > 0.0 else 0.0


@njit(cache=True)
def _leaf(base: np.ndarray, doubled: np.ndarray, off: int, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """A leaf of numpy's pairwise sum (``n <= 128``) of the terms ``max((base[k] + doubled[off + k]) - 1, 0)``."""
    if n < 8:
        res = 0.0
        for k in range(lo, lo + n):
            res += _term(base[k], doubled[off + k])
        return res
    r0 = _term(base[lo], doubled[off + lo])
    r1 = _term(base[lo + 1], doubled[off + lo + 1])
    r2 = _term(base[lo + 2], doubled[off + lo + 2])
    r3 = _term(base[lo + 3], doubled[off + lo + 3])
    r4 = _term(base[lo + 4], doubled[off + lo + 4])
    r5 = _term(base[lo + 5], doubled[off + lo + 5])
    r6 = _term(base[lo + 6], doubled[off + lo + 6])
    r7 = _term(base[lo + 7], doubled[off + lo + 7])
    m = n - n % 8
    for i in range(lo + 8, lo + m, 8):
        d = off + i
        r0 += _term(base[i], doubled[d])
        r1 += _term(base[i + 1], doubled[d + 1])
        r2 += _term(base[i + 2], doubled[d + 2])
        r3 += _term(base[i + 3], doubled[d + 3])
        r4 += _term(base[i + 4], doubled[d + 4])
        r5 += _term(base[i + 5], doubled[d + 5])
        r6 += _term(base[i + 6], doubled[d + 6])
        r7 += _term(base[i + 7], doubled[d + 7])
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for k in range(lo + m, lo + n):
        res += _term(base[k], doubled[off + k])
    return res


@njit(cache=True)
def _pairwise(base: np.ndarray, doubled: np.ndarray, off: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's pairwise sum of the terms ``max((base[k] + doubled[off + k]) - 1, 0)``, ``k`` in ``[0, n)``:
    halves split at multiples of 8 down to leaves of at most 128 terms, the halves' sums added. A loop
    over an explicit stack (numba's disk cache does not hold recursive functions safely)."""
    if n <= _BLOCK:
        return _leaf(base, doubled, off, 0, n)
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)
    vals = np.empty(64)
    top, nv = 0, 0
    los[0], ns[0], stage[0] = 0, n, 0
    while top >= 0:
        lo, m = los[top], ns[top]
        if m <= _BLOCK:
            vals[nv] = _leaf(base, doubled, off, lo, m)
            nv += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if stage[top] == 0:  # the first half
            stage[top] = 1
            top += 1
            los[top], ns[top], stage[top] = lo, half, 0
        elif stage[top] == 1:  # the second half
            stage[top] = 2
            top += 1
            los[top], ns[top], stage[top] = lo + half, m - half, 0
        else:  # both done: their sum
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
            top -= 1
    return vals[0]


@njit(cache=True)
def scores(base: np.ndarray, doubled: np.ndarray, candidates: np.ndarray) -> np.ndarray:  # pragma: no cover
    """``cassini._scores``: the raw score of ``base + roll(curve, r)`` per ``r``, ``doubled`` the curve twice."""
    bins = base.shape[0]
    out = np.empty(candidates.shape[0])
    for i in range(candidates.shape[0]):
        out[i] = 1.0 - (0.0 + _pairwise(base, doubled, bins - candidates[i], bins)) / bins
    return out


@njit(cache=True)
def _rough(base: np.ndarray, prof: np.ndarray,
           candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:  # pragma: no cover - compiled
    """``cassini._rough``: per candidate the excess summed over the circle by runs of the profile, whether
    any bin has an excess (exact), and a bound on the sums' rounding error (twice the numpy code's)."""
    bins, q = base.shape[0], prof.shape[0]
    tiles = bins // q
    rest = bins - tiles * q
    nc = candidates.shape[0]
    starts = np.empty(q, dtype=np.int64)
    ends = np.empty(q, dtype=np.int64)
    runs = 0
    for x in range(q):
        if x == 0 or prof[x] != prof[x - 1]:
            if runs:
                ends[runs - 1] = x
            starts[runs] = x
            runs += 1
    ends[runs - 1] = q
    ext = np.empty(bins + q)
    ext[:bins] = base
    ext[bins:] = base[:q]
    excess = np.zeros(nc)
    count = np.zeros(nc, dtype=np.int64)
    # runs of a bin or two: every bin they cover on the circle, one by one
    for u in range(runs):
        if ends[u] - starts[u] > SHORT:
            continue
        for x in range(starts[u], ends[u]):
            v = prof[x]
            last = tiles + 1 if x < rest else tiles
            for t in range(last):
                at = t * q + x
                for c in range(nc):
                    term = max((ext[at + candidates[c]] + v) - 1.0, 0.0)
                    excess[c] += term
                    if term > 0.0:
                        count[c] += 1
    total = 0.0
    for c in range(nc):
        if excess[c] > total:
            total = excess[c]
    # long runs, per demand value: folded over whole tiles, prefix sums, a difference per run
    done = np.zeros(runs, dtype=np.bool_)
    e = np.empty(bins + q)
    fold = np.empty(2 * q)
    g = np.empty(2 * q + 1)
    z = np.empty(2 * q + 1, dtype=np.int64)
    h = np.empty(rest + q + 1)
    y = np.empty(rest + q + 1, dtype=np.int64)
    for u0 in range(runs):
        if done[u0] or ends[u0] - starts[u0] <= SHORT:
            continue
        v = prof[starts[u0]]
        for i in range(bins + q):
            w = (ext[i] + v) - 1.0
            e[i] = w if w > 0.0 else 0.0
        fold[:] = 0.0
        for t in range(tiles):  # fold[x] = sum over whole tiles t of e[t q + x], row by row
            row = t * q
            for x in range(2 * q):
                fold[x] += e[row + x]
        g[0] = 0.0
        z[0] = 0
        for x in range(2 * q):
            g[x + 1] = g[x] + fold[x]
            z[x + 1] = z[x] + (1 if fold[x] > 0.0 else 0)
        total += g[2 * q]
        if rest:
            h[0] = 0.0
            y[0] = 0
            for i in range(rest + q):
                w = e[tiles * q + i]
                h[i + 1] = h[i] + w
                y[i + 1] = y[i] + (1 if w > 0.0 else 0)
            total += h[rest + q]
        for u in range(u0, runs):
            if done[u] or ends[u] - starts[u] <= SHORT or prof[starts[u]] != v:
                continue
            done[u] = True
            a, b = starts[u], ends[u]
            ra, rb = min(a, rest), min(b, rest)
            for c in range(nc):
                r = candidates[c]
                excess[c] += g[b + r] - g[a + r]
                count[c] += z[b + r] - z[a + r]
                if rest:
                    excess[c] += h[rb + r] - h[ra + r]
                    count[c] += y[rb + r] - y[ra + r]
    big = 0.0
    for c in range(nc):
        if abs(excess[c]) > big:
            big = abs(excess[c])
    err = 8.0 * EPS * runs * (2 * q + tiles + rest + 8) * (total + big)
    return excess, count > 0, err


@njit(cache=True)
def _best(base: np.ndarray, curve: np.ndarray, prof: np.ndarray,
          candidates: np.ndarray) -> tuple[float, int]:  # pragma: no cover - compiled
    bins = base.shape[0]
    excess, over, err = _rough(base, prof, candidates)
    nc = candidates.shape[0]
    rough = 1.0 - excess / bins
    margin = NEAR + 2.0 * err / bins
    top = rough.max()
    doubled = np.empty(2 * bins)
    doubled[:bins] = curve
    doubled[bins:] = curve
    best, at = -np.inf, 0
    for c in range(nc):
        if not over[c]:
            val = 1.0
        elif rough[c] >= top - margin:
            val = 1.0 - (0.0 + _pairwise(base, doubled, bins - candidates[c], bins)) / bins
        else:
            continue
        if val > best:
            best, at = val, c
    return best, candidates[at]


def best_rotation(base: np.ndarray, curve: np.ndarray, prof: np.ndarray,
                  candidates: np.ndarray) -> tuple[float, int]:
    """``cassini._best_rotation``, compiled: best raw score of ``base + roll(curve, r)`` over ``candidates``
    (first best wins) and that rotation."""
    val, r = _best(np.ascontiguousarray(base, dtype=np.float64), np.ascontiguousarray(curve, dtype=np.float64),
                   np.ascontiguousarray(prof, dtype=np.float64), np.ascontiguousarray(candidates, dtype=np.int64))
    return float(val), int(r)
