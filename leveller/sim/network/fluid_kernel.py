"""The water-filling of :mod:`leveller.sim.network.fluid` compiled with numba (the default backend).

The numpy rounds of ``fluid`` spend their time in the fixed cost of about 15 calls on arrays of a
few hundred elements; these loops do the same arithmetic, in the same order, without the calls.
Every floating-point operation of the numpy code is repeated here on the same operands in the same
order (share = residual / count per link, the minimum share, the bottleneck threshold
x * (1 + TIE) + 1e-300, residual -= frozen pairs x x then clamped at 0, the floor's per-link loads
summed in pair order), so the rates are the numpy rates to the last bit; the tests hold this against
the numpy code (tests/unit/test_sim_network_kernel.py).

Imported only when numba is importable (``fluid`` falls back to numpy otherwise). Compiled code is
cached on disk (``cache=True``): numba writes it to ``__pycache__`` beside this file when that is
writable, else to the user's cache directory (``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba``);
``NUMBA_CACHE_DIR`` chooses another place.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from leveller.sim.network.ties import TIE

_SLACK = 1.0 + TIE


@njit(cache=True)
def fill(e_flow: np.ndarray, e_link: np.ndarray, residual: np.ndarray, unfrozen: np.ndarray,
         rates: np.ndarray) -> None:  # pragma: no cover - compiled
    """``fluid._fill_numpy``: progressive filling of the ``unfrozen`` flows on ``residual`` (both updated
    in place) over the pairs given; rates written to ``rates``."""
    n_links = residual.shape[0]
    n = 0
    ef = np.empty(e_flow.shape[0], dtype=np.int64)
    el = np.empty(e_flow.shape[0], dtype=np.int64)
    counts = np.zeros(n_links, dtype=np.int64)
    for p in range(e_flow.shape[0]):
        if unfrozen[e_flow[p]]:
            ef[n] = e_flow[p]
            el[n] = e_link[p]
            counts[e_link[p]] += 1
            n += 1
    gone = np.zeros(n_links, dtype=np.int64)
    bottleneck = np.zeros(n_links, dtype=np.bool_)
    while n > 0:
        m = np.inf
        for lk in range(n_links):
            if counts[lk] > 0:
                s = residual[lk] / counts[lk]
                if s < m:
                    m = s
        x = 0.0 if 0.0 > m else m  # Python's max(m, 0.0)
        thr = x * _SLACK + 1e-300
        for lk in range(n_links):
            bottleneck[lk] = counts[lk] > 0 and residual[lk] / counts[lk] <= thr
        for p in range(n):
            if bottleneck[el[p]]:
                rates[ef[p]] = x
                unfrozen[ef[p]] = False
        kept = 0
        for p in range(n):
            if unfrozen[ef[p]]:
                ef[kept] = ef[p]
                el[kept] = el[p]
                kept += 1
            else:
                gone[el[p]] += 1
        for lk in range(n_links):
            r = residual[lk] - gone[lk] * x
            residual[lk] = 0.0 if r < 0.0 else r
            counts[lk] -= gone[lk]
            gone[lk] = 0
        n = kept
    for f in range(unfrozen.shape[0]):
        if unfrozen[f]:  # flows that cross no link are not limited by the network
            rates[f] = np.inf
            unfrozen[f] = False


@njit(cache=True)
def rates_of(e_flow: np.ndarray, e_link: np.ndarray, capacity: np.ndarray, level: np.ndarray,
             active: np.ndarray, floor: float, top: int, rates: np.ndarray) -> None:  # pragma: no cover
    """``fluid._rates_numpy`` (``top`` < 0: None): the rates of the ``active`` flows written into
    ``rates``, the other entries left alone."""
    n_flows = active.shape[0]
    n_links = capacity.shape[0]
    n_act = 0
    lo = 0
    hi = 0
    for f in range(n_flows):
        if active[f]:
            if n_act == 0 or level[f] < lo:
                lo = level[f]
            if n_act == 0 or level[f] > hi:
                hi = level[f]
            n_act += 1
    if n_act == 0:
        return
    n = 0
    ef = np.empty(e_flow.shape[0], dtype=np.int64)
    el = np.empty(e_flow.shape[0], dtype=np.int64)
    for p in range(e_flow.shape[0]):
        if active[e_flow[p]]:
            ef[n] = e_flow[p]
            el[n] = e_link[p]
            n += 1
    ef = ef[:n]
    el = el[:n]
    residual = capacity.astype(np.float64)
    if lo == hi:
        fill(ef, el, residual, active.copy(), rates)
        return
    present = np.zeros(hi - lo + 1, dtype=np.bool_)
    for f in range(n_flows):
        if active[f]:
            present[level[f] - lo] = True
    n_lv = 0
    for i in range(hi - lo + 1):
        n_lv += present[i]
    levels = np.empty(n_lv, dtype=np.int64)
    k = 0
    for i in range(hi - lo + 1):
        if present[i]:
            levels[k] = lo + i
            k += 1
    reserved = np.zeros((n_lv, n_links))
    has_reserved = np.zeros(n_lv, dtype=np.bool_)
    e_level = np.empty(n, dtype=np.int64)
    for p in range(n):
        e_level[p] = level[ef[p]]
    if floor > 0:  # a level alone is not affected by its floor
        cap = capacity.astype(np.float64)
        below = hi if top < 0 else top
        for i in range(n_lv):
            this = levels[i]
            if this < below:
                above = np.zeros(n_links, dtype=np.bool_)
                for p in range(n):
                    if e_level[p] > this:
                        above[el[p]] = True
                room = np.empty(n_links)
                for lk in range(n_links):
                    room[lk] = cap[lk] * floor if above[lk] else cap[lk]
                share = np.zeros(n_flows)
                mask = np.zeros(n_flows, dtype=np.bool_)
                for f in range(n_flows):
                    mask[f] = active[f] and level[f] == this
                fill(ef, el, room, mask, share)
                load = np.zeros(n_links)
                for p in range(n):
                    if e_level[p] == this:
                        s = share[ef[p]]
                        load[el[p]] += s if np.isfinite(s) else 0.0
                for lk in range(n_links):
                    lim = cap[lk] * floor
                    reserved[i, lk] = load[lk] if load[lk] < lim else lim  # np.minimum (no NaN here)
                has_reserved[i] = True
        for i in range(n_lv):
            if has_reserved[i]:
                for lk in range(n_links):
                    residual[lk] -= reserved[i, lk]
        for lk in range(n_links):
            if residual[lk] < 0.0:
                residual[lk] = 0.0
    mask = np.zeros(n_flows, dtype=np.bool_)
    for i in range(n_lv - 1, -1, -1):
        this = levels[i]
        if has_reserved[i]:
            for lk in range(n_links):
                residual[lk] += reserved[i, lk]  # the level's own reservation comes back to it
        for f in range(n_flows):
            mask[f] = active[f] and level[f] == this
        fill(ef, el, residual, mask, rates)


@njit(cache=True)
def part(flow_ptr: np.ndarray, e_link: np.ndarray, link_ptr: np.ndarray, link_flow: np.ndarray,
         changed: np.ndarray, active: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``fluid.Refill.part``: the active flows connected, through links shared among active flows, to a
    link of a ``changed`` flow (a breadth-first search over flow -> links -> flows)."""
    n_flows = changed.shape[0]
    n_links = link_ptr.shape[0] - 1
    seen_link = np.zeros(n_links, dtype=np.bool_)
    inside = np.zeros(n_flows, dtype=np.bool_)
    stack = np.empty(n_links, dtype=np.int64)
    top = 0
    for f in range(n_flows):
        if changed[f]:
            for p in range(flow_ptr[f], flow_ptr[f + 1]):
                lk = e_link[p]
                if not seen_link[lk]:
                    seen_link[lk] = True
                    stack[top] = lk
                    top += 1
    while top > 0:
        top -= 1
        lk = stack[top]
        for q in range(link_ptr[lk], link_ptr[lk + 1]):
            g = link_flow[q]
            if active[g] and not inside[g]:
                inside[g] = True
                for p in range(flow_ptr[g], flow_ptr[g + 1]):
                    other = e_link[p]
                    if not seen_link[other]:
                        seen_link[other] = True
                        stack[top] = other
                        top += 1
    return inside


@njit(cache=True)
def part_levels(flow_ptr: np.ndarray, e_link: np.ndarray, link_ptr: np.ndarray, link_flow: np.ndarray,
                capacity: np.ndarray, level: np.ndarray, inside: np.ndarray,
                rates: np.ndarray) -> bool:  # pragma: no cover - compiled
    """``rates_of`` without a floor for the flows ``inside`` (a part: each crosses a link), level by level
    from the highest, each level's rounds of ``fill`` on its own links only; False (nothing written)
    when a link of the part has a capacity that is not finite, negative or -0.0 (then ``rates_of`` must
    run).

    The same rounds and the same arithmetic as ``fill``: a round's minimum share m is taken over the
    level's links with flows, in ascending link order, of residual / count (kept per link and computed
    again, with the same operands, whenever its residual or count changes); x = max(m, 0); the
    bottlenecks are the links whose share is at most x * (1 + TIE) + 1e-300; the level's flows on them
    freeze at x (found from the links' flow lists instead of a scan of every pair); each link those flows
    cross gets residual - gone * x clamped at 0 and count - gone. ``fill`` also visits the links without
    flows of the level: it skips them in the minimum and the bottleneck test, and their update
    residual - 0 * x leaves the residual as it was for a finite x, since residuals stay finite and >= 0
    here. Links outside the part carry none of its flows. Hence the same bits.

    One pass over the level's links per round: the pass that takes the minimum also lists, in ascending
    order, the links whose share is at most the threshold of the running minimum then. The running
    minimum only falls towards m and the threshold max(m, 0) * (1 + TIE) + 1e-300 does not rise as m
    falls (rounded products and sums are monotone), so every bottleneck of the next round is on that
    list, and the round tests the list instead of every link."""
    n_flows = inside.shape[0]
    n_links = capacity.shape[0]
    lo = 0
    hi = 0
    first = True
    for f in range(n_flows):
        if inside[f]:
            if first or level[f] < lo:
                lo = level[f]
            if first or level[f] > hi:
                hi = level[f]
            first = False
            for p in range(flow_ptr[f], flow_ptr[f + 1]):
                c = capacity[e_link[p]]
                if not (c - c == 0.0) or c < 0.0 or (c == 0.0 and np.copysign(1.0, c) < 0.0):
                    return False  # not finite, negative or -0.0
    residual = capacity.astype(np.float64)
    # the part's flows by level, in flow order within a level
    n_lv = hi - lo + 1
    start = np.zeros(n_lv + 1, dtype=np.int64)
    for f in range(n_flows):
        if inside[f]:
            start[level[f] - lo + 1] += 1
    for i in range(n_lv):
        start[i + 1] += start[i]
    at = start[:n_lv].copy()
    by_level = np.empty(start[n_lv], dtype=np.int64)
    for f in range(n_flows):
        if inside[f]:
            i = level[f] - lo
            by_level[at[i]] = f
            at[i] += 1
    counts = np.zeros(n_links, dtype=np.int64)
    gone = np.zeros(n_links, dtype=np.int64)
    share = np.empty(n_links)
    unfrozen = np.zeros(n_flows, dtype=np.bool_)
    links = np.empty(n_links, dtype=np.int64)
    cand = np.empty(n_links, dtype=np.int64)
    touched = np.empty(n_links, dtype=np.int64)
    for i in range(n_lv - 1, -1, -1):
        if start[i + 1] == start[i]:
            continue  # no flow of the part at this level
        for q in range(start[i], start[i + 1]):
            f = by_level[q]
            unfrozen[f] = True
            for p in range(flow_ptr[f], flow_ptr[f + 1]):
                counts[e_link[p]] += 1
        n_l = 0
        m = np.inf
        n_cand = 0
        for lk in range(n_links):  # the level's links in ascending order
            if counts[lk] > 0:
                links[n_l] = lk
                n_l += 1
                s = residual[lk] / counts[lk]
                share[lk] = s
                if s < m:
                    m = s
                if s <= (0.0 if 0.0 > m else m) * _SLACK + 1e-300:
                    cand[n_cand] = lk  # at most the running minimum's threshold: see below
                    n_cand += 1
        while n_l > 0:
            x = 0.0 if 0.0 > m else m  # Python's max(m, 0.0)
            thr = x * _SLACK + 1e-300
            n_touched = 0
            for q in range(n_cand):  # the bottlenecks are the candidates at most thr, in the same order
                lk = cand[q]
                if share[lk] <= thr:
                    for k in range(link_ptr[lk], link_ptr[lk + 1]):
                        g = link_flow[k]
                        if unfrozen[g]:
                            unfrozen[g] = False
                            rates[g] = x
                            for p in range(flow_ptr[g], flow_ptr[g + 1]):
                                other = e_link[p]
                                if gone[other] == 0:
                                    touched[n_touched] = other
                                    n_touched += 1
                                gone[other] += 1
            for r in range(n_touched):
                lk = touched[r]
                v = residual[lk] - gone[lk] * x
                residual[lk] = 0.0 if v < 0.0 else v
                counts[lk] -= gone[lk]
                gone[lk] = 0
                if counts[lk] > 0:
                    share[lk] = residual[lk] / counts[lk]
            kept = 0
            m = np.inf  # the next round's minimum, over the links kept, in the same ascending order
            n_cand = 0
            for q in range(n_l):
                lk = links[q]
                if counts[lk] > 0:
                    links[kept] = lk
                    kept += 1
                    s = share[lk]
                    if s < m:
                        m = s
                    if s <= (0.0 if 0.0 > m else m) * _SLACK + 1e-300:
                        cand[n_cand] = lk
                        n_cand += 1
            n_l = kept
    return True


@njit(cache=True)
def refill(flow_ptr: np.ndarray, e_link: np.ndarray, link_ptr: np.ndarray, link_flow: np.ndarray,
           has_link: np.ndarray, capacity: np.ndarray, floor: float, top: int, old_level: np.ndarray,
           old_active: np.ndarray, level: np.ndarray, active: np.ndarray,
           rates: np.ndarray) -> int:  # pragma: no cover - compiled
    """``fluid.Refill.__call__`` on the incidence as CSR both ways: ``rates``, ``old_level`` and
    ``old_active`` updated in place; the number of flows filled again, -1 when nothing changed."""
    n_flows = active.shape[0]
    changed = np.zeros(n_flows, dtype=np.bool_)
    anything = False
    for f in range(n_flows):
        changed[f] = active[f] != old_active[f] or (active[f] and level[f] != old_level[f])
        anything = anything or changed[f]
    if not anything:
        return -1
    inside = part(flow_ptr, e_link, link_ptr, link_flow, changed, active)
    n_part = 0
    n_pairs = 0
    for f in range(n_flows):
        if changed[f] and not active[f]:
            rates[f] = 0.0
        if changed[f] and active[f] and not has_link[f]:
            rates[f] = np.inf  # no link: not limited by the network
        if inside[f]:
            n_part += 1
            n_pairs += flow_ptr[f + 1] - flow_ptr[f]
    if n_part and floor > 0:
        ef = np.empty(n_pairs, dtype=np.int64)
        el = np.empty(n_pairs, dtype=np.int64)
        k = 0
        for f in range(n_flows):
            if inside[f]:
                rates[f] = 0.0
                for p in range(flow_ptr[f], flow_ptr[f + 1]):
                    ef[k] = f
                    el[k] = e_link[p]
                    k += 1
        rates_of(ef, el, capacity, level, inside, floor, top, rates)
    elif n_part:
        for f in range(n_flows):
            if inside[f]:
                rates[f] = 0.0
        if not part_levels(flow_ptr, e_link, link_ptr, link_flow, capacity, level, inside, rates):
            ef = np.empty(n_pairs, dtype=np.int64)
            el = np.empty(n_pairs, dtype=np.int64)
            k = 0
            for f in range(n_flows):
                if inside[f]:
                    for p in range(flow_ptr[f], flow_ptr[f + 1]):
                        ef[k] = f
                        el[k] = e_link[p]
                        k += 1
            rates_of(ef, el, capacity, level, inside, floor, top, rates)
    for f in range(n_flows):
        old_level[f] = level[f]
        old_active[f] = active[f]
    return n_part


# --- a contention group's event step (leveller.sim.network.group.Group), loop for loop --------------

@njit(cache=True)
def advance(remaining: np.ndarray, active: np.ndarray, rate: np.ndarray,
            dt: float) -> None:  # pragma: no cover - compiled
    """``remaining -= where(active, rate * dt, 0.0)``."""
    for f in range(remaining.shape[0]):
        remaining[f] = remaining[f] - (rate[f] * dt if active[f] else 0.0)


@njit(cache=True)
def finish(active: np.ndarray, remaining: np.ndarray, volume: np.ndarray, solo: np.ndarray, done_share: float,
           done: np.ndarray) -> int:  # pragma: no cover - compiled
    """The active flows with at most ``done_share`` of their volume left, marked in ``done``, stopped
    and emptied; 0 if none, 1 if only solo flows, 2 if a coupled one too."""
    out = 0
    for f in range(active.shape[0]):
        d = active[f] and remaining[f] <= volume[f] * done_share
        done[f] = d
        if d:
            active[f] = False
            remaining[f] = 0.0
            if not solo[f]:
                out = 2
            elif out == 0:
                out = 1
    return out


@njit(cache=True)
def soonest(active: np.ndarray, rate: np.ndarray,
            remaining: np.ndarray) -> tuple[bool, float]:  # pragma: no cover - compiled
    """Whether a flow moves, and ``np.min(remaining / rate)`` over the moving ones (NaN if a quotient is)."""
    m = np.inf
    moving = False
    for f in range(active.shape[0]):
        if active[f] and rate[f] > 0:
            q = remaining[f] / rate[f]
            if q != q:
                return True, q
            if not moving or q < m:
                m = q
            moving = True
    return moving, m


@njit(cache=True)
def compose(active: np.ndarray, solo: np.ndarray, solo_rate: np.ndarray, coupled: np.ndarray,
            coupled_rate: np.ndarray, rate: np.ndarray) -> None:  # pragma: no cover - compiled
    """``rate = where(active & solo, solo_rate, 0.0); rate[coupled] = coupled_rate`` into ``rate``."""
    for f in range(active.shape[0]):
        rate[f] = solo_rate[f] if active[f] and solo[f] else 0.0
    for i in range(coupled.shape[0]):
        rate[coupled[i]] = coupled_rate[i]


@njit(cache=True)
def keep_solo(active: np.ndarray, solo: np.ndarray, solo_rate: np.ndarray,
              rate: np.ndarray) -> None:  # pragma: no cover - compiled
    """``rate = where(active, rate, 0.0); rate[active & solo] = solo_rate[active & solo]`` in place."""
    for f in range(active.shape[0]):
        if not active[f]:
            rate[f] = 0.0
        elif solo[f]:
            rate[f] = solo_rate[f]


@njit(cache=True)
def snapshot(active: np.ndarray, rate: np.ndarray, acc_flow: np.ndarray, acc_col: np.ndarray, acc_pair: np.ndarray,
             acc_cap: np.ndarray, pair_col: np.ndarray, now_send: np.ndarray, now_util: np.ndarray,
             now_both: np.ndarray) -> None:  # pragma: no cover - compiled
    """``Group._snapshot``: who sends on which shared link, and its utilisation (loads summed in pair order,
    as ``np.bincount`` sums them)."""
    n_col = acc_cap.shape[0]
    load = np.zeros(n_col)
    send = np.zeros(pair_col.shape[0], dtype=np.bool_)
    for p in range(acc_flow.shape[0]):
        f = acc_flow[p]
        if active[f]:
            send[acc_pair[p]] = True
            r = rate[f]
            load[acc_col[p]] += r if np.isfinite(r) else 0.0
    senders = np.zeros(n_col, dtype=np.int64)
    for k in range(pair_col.shape[0]):
        if send[k]:
            senders[pair_col[k]] += 1
    for k in range(pair_col.shape[0]):
        c = pair_col[k]
        now_util[k] = load[c] / acc_cap[c]
        now_send[k] = 1.0 if send[k] else 0.0
        now_both[k] = 1.0 if send[k] and senders[c] >= 2 else 0.0


@njit(cache=True)
def account(acc: np.ndarray, dt: float, now_send: np.ndarray, now_both: np.ndarray,
            now_util: np.ndarray) -> None:  # pragma: no cover - compiled
    """``Group._account``: acc[0] += dt x send, acc[1] += dt x both, acc[2] += dt x both x utilisation."""
    for k in range(now_send.shape[0]):
        acc[0, k] += dt * now_send[k]
        acc[1, k] += dt * now_both[k]
        acc[2, k] += dt * now_both[k] * now_util[k]
