"""CASSINI's rotation scores (:func:`leveller.core.cassini._best_rotation`) compiled with numba, for the simulator.

On the contended 1,024-GPU hour most of CASSINI's CPU time is its planning, and most of that is the
reference scores of near-tied rotations (on saturated links many rotations have the same excess in
exact arithmetic, and only the element-wise values, rounded as numpy rounds them, tell them apart)
and the rough sums that rank them. This is the same search in compiled loops:

- the reference value of a rotation ``r`` is computed as ``cassini._scores`` computes it, term by term
  ``max((base[k] + curve[k - r]) - 1, 0)``, summed in numpy's pairwise order (``add.reduce`` of a
  contiguous row: 8 running sums over blocks of up to 128 terms, halves split at multiples of 8,
  started from 0), divided by the bins and taken from 1: the same float64 operations on the same
  operands in the same order, so the same bits. The 8 running sums of a leaf are one vector of 8
  float64 (:func:`_rows`, a numba intrinsic: numba's LLVM does not vectorise the scalar sums); the
  leaves and the order of additions are planned once per step (:func:`_plan`); and a leaf whose window
  of the rotated curve holds one demand value (most of them: a profile is long runs of one demand) has
  the same operands for every rotation that puts it over that value, so it is summed once per value
  (:func:`_memo_scores`);
- the rough sums are ``cassini._rough``'s, per run of the profile: a run's excess over the whole tiles
  from prefix sums of the excess folded over the tiles, one fold per demand value, as in the numpy
  code, a short run bin by bin only where that is cheaper (:func:`_rough_in`); their bound is the numpy
  code's, doubled (a wider margin only scores more candidates exactly, it cannot change the result).

So :func:`best_rotation` returns what ``cassini._best_rotation`` returns, ties included; the tests hold it
against the numpy code (tests/unit/test_sim_network_cassini_kernel.py). The live controller keeps the
numpy code.

Imported only when numba is importable (:func:`leveller.sim.network.baselines.rotation_search` falls back
to the numpy search otherwise); compiled code is cached on disk as in ``fluid_kernel``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir  # type: ignore[import-untyped]
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from leveller.core.cassini import EPS, NEAR, SHORT

_BLOCK = 128  # numpy's PW_BLOCKSIZE: the pairwise sum's leaves
_LANES = 8  # numpy's running sums per leaf: one vector of 8 float64 (two on AVX2, four on SSE2)


def _c_array(t: types.Type) -> bool:
    return isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C" and t.dtype == types.float64


@intrinsic
def _rows(typingctx, base_t, doubled_t, off_t, lo_t, rows_t):  # pragma: no cover - compiled
    """The first ``8 rows`` terms of a leaf from ``lo``, as numpy's leaf sums them: eight running sums
    ``r[j]`` started from the first 8 terms, each row of 8 terms added lane by lane, then
    ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``. The running sums are one vector of 8 lanes
    (numba's LLVM does not vectorise the eight scalar sums itself): the same float64 additions on the
    same operands in the same order, so the same bits. ``rows >= 1``; C-contiguous float64 arrays."""
    if not (_c_array(base_t) and _c_array(doubled_t)):
        return None
    sig = types.float64(base_t, doubled_t, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        base, doubled, off, lo, rows = args
        bptr = context.make_array(signature.args[0])(context, builder, base).data
        dptr = context.make_array(signature.args[1])(context, builder, doubled).data
        vec = ir.VectorType(ir.DoubleType(), _LANES)
        one = ir.Constant(vec, [1.0] * _LANES)
        zero = ir.Constant(vec, [0.0] * _LANES)
        intp = context.get_value_type(types.intp)

        def term(k):  # max((base[k:k+8] + doubled[off+k:off+k+8]) - 1, 0)
            b = builder.load(builder.bitcast(builder.gep(bptr, [k]), vec.as_pointer()), align=8)
            d = builder.load(builder.bitcast(builder.gep(dptr, [builder.add(off, k)]), vec.as_pointer()), align=8)
            w = builder.fsub(builder.fadd(b, d), one)
            return builder.select(builder.fcmp_ordered(">", w, zero), w, zero)

        acc = cgutils.alloca_once(builder, vec)
        builder.store(term(lo), acc)
        with cgutils.for_range(builder, builder.sub(rows, ir.Constant(intp, 1))) as loop:
            k = builder.add(lo, builder.mul(builder.add(loop.index, ir.Constant(intp, 1)), ir.Constant(intp, _LANES)))
            builder.store(builder.fadd(builder.load(acc), term(k)), acc)
        a = builder.load(acc)
        r = [builder.extract_element(a, ir.Constant(ir.IntType(32), i)) for i in range(_LANES)]
        return builder.fadd(builder.fadd(builder.fadd(r[0], r[1]), builder.fadd(r[2], r[3])),
                            builder.fadd(builder.fadd(r[4], r[5]), builder.fadd(r[6], r[7])))

    return sig, codegen


@njit(cache=True, inline="always")
def _term(b: float, c: float) -> float:  # pragma: no cover - compiled
    """``np.maximum((b + c) - 1, 0)`` (operands are finite: no NaN to propagate)."""
    w = (b + c) - 1.0
    return w if w > 0.0 else 0.0


@njit(cache=True)
def _leaf(base: np.ndarray, doubled: np.ndarray, off: int, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """A leaf of numpy's pairwise sum (``n <= 128``) of the terms ``max((base[k] + doubled[off + k]) - 1, 0)``:
    fewer than 8 terms one by one, else the 8 running sums over the whole rows (:func:`_rows`), then the
    rest one by one."""
    if n < 8:
        res = 0.0
        for k in range(lo, lo + n):
            res += _term(base[k], doubled[off + k])
        return res
    m = n - n % 8
    res = _rows(base, doubled, off, lo, m // 8)  # type: ignore[call-arg]
    for k in range(lo + m, lo + n):
        res += _term(base[k], doubled[off + k])
    return res


@njit(cache=True)
def _plan(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """numpy's pairwise sum of ``n`` terms as a program: its leaves (starts, lengths, left to right) and
    the order of additions, ``prog`` a postfix sequence (1: the next leaf's sum, 0: add the two sums on
    top). Halves split at multiples of 8 down to leaves of at most 128 terms, the halves' sums added;
    a loop over an explicit stack (numba's disk cache does not hold recursive functions safely)."""
    cap = 2 * (n // 64 + 2)
    los = np.empty(cap, dtype=np.int64)
    ns = np.empty(cap, dtype=np.int64)
    prog = np.empty(2 * cap, dtype=np.int64)
    nl, npg = 0, 0
    slo = np.empty(64, dtype=np.int64)
    sn = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)
    top = 0
    slo[0], sn[0], stage[0] = 0, n, 0
    while top >= 0:
        lo, m = slo[top], sn[top]
        if m <= _BLOCK:
            los[nl], ns[nl] = lo, m
            nl += 1
            prog[npg] = 1
            npg += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if stage[top] == 0:  # the first half
            stage[top] = 1
            top += 1
            slo[top], sn[top], stage[top] = lo, half, 0
        elif stage[top] == 1:  # the second half
            stage[top] = 2
            top += 1
            slo[top], sn[top], stage[top] = lo + half, m - half, 0
        else:  # both done: their sum
            prog[npg] = 0
            npg += 1
            top -= 1
    return los[:nl], ns[:nl], prog[:npg]


@njit(cache=True)
def _run(base: np.ndarray, doubled: np.ndarray, off: int, los: np.ndarray, ns: np.ndarray, prog: np.ndarray,
         vals: np.ndarray, sums: np.ndarray) -> float:  # pragma: no cover - compiled
    """The pairwise sum of :func:`_plan` (``los``, ``ns``, ``prog``) of the terms
    ``max((base[k] + doubled[off + k]) - 1, 0)``: every leaf into ``sums`` (at least ``len(los)``), then
    :func:`_combine`; ``vals`` a stack of at least 64 sums."""
    for k in range(los.shape[0]):
        sums[k] = _leaf(base, doubled, off, los[k], ns[k])
    return _combine(sums, prog, vals)


@njit(cache=True)
def _pairwise(base: np.ndarray, doubled: np.ndarray, off: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's pairwise sum of the terms ``max((base[k] + doubled[off + k]) - 1, 0)``, ``k`` in ``[0, n)``."""
    los, ns, prog = _plan(n)
    return _run(base, doubled, off, los, ns, prog, np.empty(64), np.empty(los.shape[0]))


@njit(cache=True)
def scores(base: np.ndarray, doubled: np.ndarray, candidates: np.ndarray) -> np.ndarray:  # pragma: no cover
    """``cassini._scores``: the raw score of ``base + roll(curve, r)`` per ``r``, ``doubled`` the curve twice."""
    bins = base.shape[0]
    los, ns, prog = _plan(bins)
    vals, sums = np.empty(64), np.empty(los.shape[0])
    out = np.empty(candidates.shape[0])
    for i in range(candidates.shape[0]):
        out[i] = 1.0 - (0.0 + _run(base, doubled, bins - candidates[i], los, ns, prog, vals, sums)) / bins
    return out


@njit(cache=True)
def _rough(base: np.ndarray, prof: np.ndarray,
           candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:  # pragma: no cover - compiled
    """:func:`_rough_in` with a buffer of its own."""
    return _rough_in(base, prof, candidates, np.empty(base.shape[0] + prof.shape[0]))


@njit(cache=True)
def _rough_in(base: np.ndarray, prof: np.ndarray, candidates: np.ndarray,
              ext: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:  # pragma: no cover - compiled
    """``cassini._rough``: per candidate the excess summed over the circle by runs of the profile, whether
    any bin has an excess (exact), and a bound on the sums' rounding error (twice the numpy code's).

    A run's excess over the whole tiles is a difference of prefix sums of the excess folded over the
    tiles (one fold per demand value, a pass over the circle), as in the numpy code; a short run (an
    arc's cut end, a value of its own) is summed bin by bin instead when that is cheaper (few tiles or
    candidates), else folded as the long runs are."""
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
    ext[:bins] = base  # ext: len(base) + len(prof) bins, the base and its first q bins again
    ext[bins:] = base[:q]
    excess = np.zeros(nc)
    count = np.zeros(nc, dtype=np.int64)
    folded = np.empty(runs, dtype=np.bool_)
    per_bin = (tiles + 1) * nc  # a bin of a run summed bin by bin, against a fold's pass over the circle
    for u in range(runs):
        folded[u] = ends[u] - starts[u] > SHORT or 4 * (ends[u] - starts[u]) * per_bin > bins + 4 * q
    # runs summed bin by bin: every bin they cover on the circle, one by one
    for u in range(runs):
        if folded[u]:
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
    # folded runs, per demand value: the excess folded over whole tiles, prefix sums, a difference per run
    done = np.zeros(runs, dtype=np.bool_)
    mid = np.empty(q)
    fold = np.empty(2 * q)
    g = np.empty(2 * q + 1)
    z = np.empty(2 * q + 1, dtype=np.int64)
    h = np.empty(rest + q + 1)
    y = np.empty(rest + q + 1, dtype=np.int64)
    for u0 in range(runs):
        if done[u0] or not folded[u0]:
            continue
        v = prof[starts[u0]] - 1.0
        mid[:] = 0.0
        for t in range(1, tiles):  # mid[x] = sum over the inner tiles t of e[t q + x], e = max(ext + v - 1, 0)
            row = ext[t * q:(t + 1) * q]
            for x in range(q):
                w = row[x] + v
                mid[x] += w if w > 0.0 else 0.0
        head = ext[:q]
        tail = ext[tiles * q:(tiles + 1) * q]
        for x in range(q):
            w = head[x] + v
            fold[x] = (w if w > 0.0 else 0.0) + mid[x]
            w = tail[x] + v
            fold[q + x] = mid[x] + (w if w > 0.0 else 0.0)
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
                w = ext[tiles * q + i] + v
                w = w if w > 0.0 else 0.0
                h[i + 1] = h[i] + w
                y[i + 1] = y[i] + (1 if w > 0.0 else 0)
            total += h[rest + q]
        for u in range(u0, runs):
            if done[u] or not folded[u] or prof[starts[u]] != prof[starts[u0]]:
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


_MEMO = 2  # from this many reference scores on, a leaf over one demand value is summed once per value


@njit(cache=True)
def _memo_scores(base: np.ndarray, doubled: np.ndarray, prof: np.ndarray, candidates: np.ndarray,
                 need: np.ndarray, los: np.ndarray, ns: np.ndarray, prog: np.ndarray, vals: np.ndarray,
                 exact: np.ndarray) -> None:  # pragma: no cover - compiled
    """The reference scores of ``candidates[need]`` into ``exact``, a leaf whose window of the rotated
    curve holds one demand value ``v`` taken from the first rotation that put it there: its terms are
    then ``max((base[k] + v) - 1, 0)`` for every such rotation, the same operands in the same order."""
    bins, q = base.shape[0], prof.shape[0]
    nl = los.shape[0]
    # span[x]: how many bins of the curve from profile position x on (cyclically) hold prof[x]
    span = np.empty(q, dtype=np.int64)
    first = 0
    while first < q and prof[first] == prof[(first - 1) % q]:
        first += 1
    if first == q:  # one value throughout
        span[:] = bins
    else:
        x = first - 1 if first else q - 1
        count = 1
        for _ in range(q):
            span[x] = count
            nxt = x - 1 if x else q - 1
            count = count + 1 if prof[nxt] == prof[x] else 1
            x = nxt
    distinct = np.unique(prof)
    vid = np.searchsorted(distinct, prof)
    memo = np.full((nl, distinct.shape[0]), np.nan)
    sums = np.empty(nl)
    for t in range(need.shape[0]):
        r = candidates[need[t]]
        off = q - r
        # bin k of the rotated curve is curve[k - r + bins] for k < r, curve[k - r] from r on; p its
        # profile position, kept as the leaves advance
        p = (bins - r) % q if r else 0
        at = 0
        wrapped = r > 0
        for k in range(nl):
            lo, n = los[k], ns[k]
            if wrapped and lo >= r:
                wrapped = False
                p = (lo - r) % q
            else:
                p += lo - at
                while p >= q:
                    p -= q
            at = lo
            if wrapped and lo + n > r:  # the leaf holds the cut of the circle
                sums[k] = _leaf(base, doubled, off, lo, n)
                continue
            if not wrapped and lo - r + n > bins:
                sums[k] = _leaf(base, doubled, off, lo, n)
                continue
            if span[p] >= n:
                w = memo[k, vid[p]]
                if w != w:
                    w = _leaf(base, doubled, off, lo, n)
                    memo[k, vid[p]] = w
                sums[k] = w
            else:
                sums[k] = _leaf(base, doubled, off, lo, n)
        exact[need[t]] = 1.0 - (0.0 + _combine(sums, prog, vals)) / bins


@njit(cache=True)
def _combine(sums: np.ndarray, prog: np.ndarray, vals: np.ndarray) -> float:  # pragma: no cover - compiled
    """The pairwise sum of the leaves' sums ``sums`` in the order of :func:`_plan`'s ``prog``."""
    nv, leaf = 0, 0
    for p in prog:
        if p:
            vals[nv] = sums[leaf]
            nv += 1
            leaf += 1
        else:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
    return vals[0]


@njit(cache=True)
def _best(base: np.ndarray, curve: np.ndarray, prof: np.ndarray, candidates: np.ndarray,
          work: np.ndarray) -> tuple[float, int]:  # pragma: no cover - compiled
    """``cassini._best_rotation``; ``work`` a buffer of at least ``2 (len(base) + len(prof))`` float64."""
    bins = base.shape[0]
    q = prof.shape[0]
    excess, over, err = _rough_in(base, prof, candidates, work[:bins + q])
    nc = candidates.shape[0]
    rough = 1.0 - excess / bins
    margin = NEAR + 2.0 * err / bins
    top = rough.max()
    need = np.empty(nc, dtype=np.int64)
    nn = 0
    for c in range(nc):
        if over[c] and rough[c] >= top - margin:
            need[nn] = c
            nn += 1
    exact = np.empty(nc)
    # the curve rolled by r is curve[(k - r) mod bins]: bin k of doubled[q - r:], doubled the curve's last
    # q bins then the whole curve (r < q <= bins)
    doubled = work[bins + q:2 * (bins + q)]
    if nn:
        doubled[:q] = curve[bins - q:]
        doubled[q:] = curve
    los, ns, prog = _plan(bins)
    vals = np.empty(64)
    if nn >= _MEMO:
        _memo_scores(base, doubled, prof, candidates, need[:nn], los, ns, prog, vals, exact)
    elif nn:
        exact[need[0]] = 1.0 - (0.0 + _run(base, doubled, q - candidates[need[0]], los, ns, prog, vals,
                                           np.empty(los.shape[0]))) / bins
    best, at = -np.inf, 0
    for c in range(nc):
        if not over[c]:
            val = 1.0
        elif rough[c] >= top - margin:
            val = exact[c]
        else:
            continue
        if val > best:
            best, at = val, c
    return best, candidates[at]


_work = np.empty(0)  # best_rotation's scratch buffer, grown as needed (fresh large arrays cost page faults)


def best_rotation(base: np.ndarray, curve: np.ndarray, prof: np.ndarray,
                  candidates: np.ndarray) -> tuple[float, int]:
    """``cassini._best_rotation``, compiled: best raw score of ``base + roll(curve, r)`` over ``candidates``
    (first best wins) and that rotation. ``curve`` is ``prof`` tiled over the circle and the candidates are
    in ``[0, len(prof))``, as ``cassini.link_rotations`` passes them. The scratch buffer is shared by the
    calls of a process (they hold the GIL: numba's code here does not release it)."""
    global _work
    need = 2 * (len(base) + len(prof))
    if len(_work) < need:
        _work = np.empty(need)
    val, r = _best(np.ascontiguousarray(base, dtype=np.float64), np.ascontiguousarray(curve, dtype=np.float64),
                   np.ascontiguousarray(prof, dtype=np.float64), np.ascontiguousarray(candidates, dtype=np.int64),
                   _work)
    return float(val), int(r)
