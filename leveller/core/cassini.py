"""CASSINI (Rajasekaran et al., NSDI 2024): interleave jobs' communication by time shifts.

CASSINI gives no priorities. It delays each job's iteration start by a shift chosen so
that jobs sharing a link communicate at different times. No public code exists; this
module follows the paper's description, as pure functions the network simulator and
the live controller share:

- **Circle** (:class:`CircleJob`): one job on one link; perimeter = iteration time,
  arcs = communication phases ``(start_s, duration_s, demand_fraction)`` with the
  fraction of the link's capacity the phase demands.
- **Unified circle** (:func:`unified_period`): perimeter = LCM of the jobs' iteration
  times; each job's circle repeats around it.
- **Compatibility** (:func:`compatibility`): ``1 - mean(excess demand) / capacity`` over
  the unified circle, where excess = ``max(0, total demand - capacity)``.
- **Rotation search** per link (:func:`link_rotations`): the rotation (time shift) of
  every job on the link that maximises compatibility.
- **Affinity graph** (:func:`bfs_shifts`, :func:`job_shifts`): jobs and links as a
  bipartite graph; a BFS turns per-link rotations ``t_j^l`` into one shift per job,
  ``t_j = (t_u - t_u^l + t_j^l) mod T_j`` when link ``l`` is reached from job ``u``.

Using it (on arrival and finish of a job): for every link shared by jobs, one
:class:`CircleJob` per job with ``period_s`` = its iteration time and one arc per
communication phase (e.g. ``(compute_s - slack_s, comm_s, fraction of the link its
flows can fill)``); :func:`job_shifts` gives the delay to apply to each job's next
iteration start.

Choices where the paper is ambiguous, each a parameter:

- *Quantisation* (``quantum_s``): every iteration time is rounded to a whole number
  ``q_j >= 1`` of quanta, and the circle is sampled in bins of one quantum. A job's arcs
  are scaled by ``q_j * quantum_s / period_s`` (its shape is kept, not its length), and
  a bin holds the arc's average demand over the bin. Rotations are whole quanta.
- *LCM cap* (``lcm_cap``, seconds): if the LCM of the quantised periods exceeds it, the
  unified circle is the largest whole number of the longest quantised period that fits
  in ``lcm_cap`` (never less than one longest period). Jobs whose period does not divide
  it are then evaluated on their periodic extension cut at the perimeter: an
  approximation over a window, exact only when the LCM fits.
- *Capacity*: demand is a fraction of the link's capacity, so capacity is 1. A mean
  excess above capacity would give a negative value; the reported score is clipped to
  ``[0, 1]``, the search maximises the unclipped value.
- *Rotation grid* (``angles``): at most ``angles`` candidate rotations per job, evenly
  spaced multiples of the quantum over its own period (CASSINI discretises angles).
  The first job on a link stays at rotation 0 (rotating every job together does not
  change the score).
- *Search* (``max_exhaustive``, ``sweeps``): exhaustive over the grid when it has at most
  ``max_exhaustive`` combinations, otherwise greedy (jobs added in link order, each at
  its best rotation) followed by ``sweeps`` rounds of coordinate ascent. Ties go to the
  smaller rotation, so results are deterministic.
- *BFS*: links are visited in the order of ``links``, jobs on a link in their listed
  order; each connected part starts from its first job in that order with shift 0.
  When the affinity graph has a loop, the first shift a job receives is kept (the
  loop-closing link does not get its best relative rotation). Links with one job add
  no constraint; a job on no shared link gets shift 0.

Speed: a rotation's score is defined by the element-wise computation of :func:`_scores`
(what :func:`compatibility` computes). The search ranks the candidates by a cheaper sum over
the runs of a job's profile (:func:`_rough`) and computes the defined score only for the
candidates within the rough sums' rounding error of the best, so it returns exactly what
scoring every candidate would, ties included. :func:`job_shifts` takes a cache of searched
links.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Hashable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from leveller.model.errors import UserError

CHUNK_CELLS = 1 << 17  # rows x bins per block of reference scores (1 MiB: stays in the CPU's cache)
EPS = 2.0 ** -52  # float64 machine epsilon (bounds of rounding errors)
SHORT = 2  # runs of a profile up to this many bins are summed bin by bin, longer ones by prefix sums
# link content and search settings -> link_rotations' result (job_shifts' cache)
RotationCache = MutableMapping[tuple[object, ...], tuple[float, dict[str, float]]]
NEAR = 1e-9  # candidates ranked within this of the best get their reference score
# (base, curve, profile, candidates) -> (best raw score, its rotation): _best_rotation or a twin returning the same
BestRotation = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[float, int]]


@dataclass(frozen=True)
class CircleJob:
    """One job's circle on one link: perimeter ``period_s``, communication ``arcs``.

    Each arc is ``(start_s, duration_s, demand_fraction)``: from ``start_s`` into the
    iteration, for ``duration_s`` (wrapping around the circle if needed), the job
    demands ``demand_fraction`` of the link's capacity (in (0, 1]).
    """

    name: str
    period_s: float
    arcs: tuple[tuple[float, float, float], ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise UserError("circle job name must be a non-empty string")
        if not self.period_s > 0:
            raise UserError(f"job {self.name!r}: period_s must be > 0, got {self.period_s!r}")
        for arc in self.arcs:
            if len(arc) != 3:
                raise UserError(f"job {self.name!r}: an arc is (start_s, duration_s, demand_fraction), got {arc!r}")
            start, duration, demand = arc
            if not 0 <= start < self.period_s:
                raise UserError(f"job {self.name!r}: arc start_s must be in [0, period_s), got {start!r}")
            if not 0 < duration <= self.period_s:
                raise UserError(f"job {self.name!r}: arc duration_s must be in (0, period_s], got {duration!r}")
            if not 0 < demand <= 1:
                raise UserError(f"job {self.name!r}: arc demand_fraction must be in (0, 1], got {demand!r}")


def _check_quantum(quantum_s: float, lcm_cap: float) -> None:
    if not quantum_s > 0:
        raise UserError(f"quantum_s must be > 0, got {quantum_s!r}")
    if not lcm_cap > 0:
        raise UserError(f"lcm_cap must be > 0, got {lcm_cap!r}")


def _quanta(period_s: float, quantum_s: float) -> int:
    return max(1, round(period_s / quantum_s))


def _unified_bins(periods: Sequence[float], quantum_s: float, lcm_cap: float) -> int:
    _check_quantum(quantum_s, lcm_cap)
    if not periods:
        raise UserError("need at least one period")
    for p in periods:
        if not p > 0:
            raise UserError(f"periods must be > 0, got {p!r}")
    q = [_quanta(p, quantum_s) for p in periods]
    full = math.lcm(*q)
    cap = int(math.floor(lcm_cap / quantum_s + 1e-9))
    if full <= cap:
        return full
    longest = max(q)
    return longest * max(1, cap // longest)


def unified_period(periods: Sequence[float], quantum_s: float, lcm_cap: float) -> float:
    """Perimeter of the unified circle in seconds: LCM of the quantised periods, capped.

    See the module docstring for the cap rule.
    """
    return _unified_bins(periods, quantum_s, lcm_cap) * quantum_s


def _profile(job: CircleJob, quantum_s: float) -> np.ndarray:
    """Average demand per bin over one quantised period of ``job``."""
    q = _quanta(job.period_s, quantum_s)
    scale = q / job.period_s  # seconds -> bins, shape preserved
    prof = np.zeros(q)
    edges = np.arange(q + 1, dtype=float)
    for start, duration, demand in job.arcs:
        a = start * scale
        b = a + duration * scale
        # the arc may wrap: cover [a, b) on the circle of q bins, as up to two linear pieces
        for lo, hi in ((a, min(b, q)), (0.0, b - q)):
            if hi > lo:
                cover = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None)
                prof += demand * cover
    return prof


def _tiled(job: CircleJob, quantum_s: float, bins: int) -> np.ndarray:
    prof = _profile(job, quantum_s)
    return np.tile(prof, -(-bins // len(prof)))[:bins]


def _raw_score(total: np.ndarray) -> float:
    return 1.0 - float(np.maximum(total - 1.0, 0.0).mean())


def _clip(score: float) -> float:
    return min(1.0, max(0.0, score))


def _check_link(jobs_on_link: Sequence[CircleJob]) -> None:
    if not jobs_on_link:
        raise UserError("need at least one job on the link")
    names = [j.name for j in jobs_on_link]
    if len(set(names)) != len(names):
        raise UserError(f"a job appears twice on one link (merge its arcs): {names}")


def compatibility(jobs_on_link: Sequence[CircleJob], rotations: Mapping[str, float], quantum_s: float,
                  lcm_cap: float) -> float:
    """``1 - mean(excess demand) / capacity`` with every job rotated (delayed) by its rotation.

    Rotations in seconds, rounded to whole quanta; a missing job has rotation 0.
    Clipped to [0, 1].
    """
    _check_link(jobs_on_link)
    unknown = set(rotations) - {j.name for j in jobs_on_link}
    if unknown:
        raise UserError(f"rotations given for jobs not on the link: {sorted(unknown)}")
    bins = _unified_bins([j.period_s for j in jobs_on_link], quantum_s, lcm_cap)
    total = np.zeros(bins)
    for job in jobs_on_link:
        total += np.roll(_tiled(job, quantum_s, bins), round(rotations.get(job.name, 0.0) / quantum_s))
    return _clip(_raw_score(total))


def _scores(base: np.ndarray, doubled: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Raw score of ``base + roll(curve, r)`` for every ``r`` in ``candidates``, ``doubled`` being the
    curve twice over; computed element by element as ``compatibility`` does (the reference values),
    a few rows at a time so that the rows stay in the CPU's cache."""
    bins = len(base)
    rows = max(1, min(len(candidates), CHUNK_CELLS // bins))
    buf = np.empty((rows, bins))
    out = np.empty(len(candidates))
    for lo in range(0, len(candidates), rows):
        rs = candidates[lo:lo + rows]
        block = buf[:len(rs)]
        for k, r in enumerate(rs.tolist()):
            np.add(base, doubled[bins - r:2 * bins - r], out=block[k])  # base + roll(curve, r)
        block -= 1.0
        np.maximum(block, 0.0, out=block)
        out[lo:lo + rows] = 1.0 - block.mean(axis=1)
    return out


def _rough(base: np.ndarray, prof: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """For every rotation ``r`` in ``candidates``: the excess of ``base + roll(tile(prof), r)`` summed over
    the circle (``len(base)`` bins, ``prof`` tiled and cut there), whether any bin has an excess (exact),
    and a bound on the sums' rounding error.

    Bin ``k`` of the curve holds ``prof[k % q]``: per profile position and demand value, the excess over
    all whole tiles is one folded sum (``fold``), and a long run of equal demand in the profile costs a
    difference of prefix sums of it, so the work per rotation is per run of the profile, not per bin.
    Short runs (an arc's cut ends, each its own demand) are summed bin by bin instead.
    """
    bins, q = len(base), len(prof)
    tiles, rest = divmod(bins, q)  # tiles >= 1: the circle holds the longest period
    edge = np.flatnonzero(prof[1:] != prof[:-1]) + 1
    starts = np.concatenate(([0], edge))
    ends = np.concatenate((edge, [q]))
    values = prof[starts]
    ext = np.concatenate((base, base[:q]))  # positions up to bins + q - 1, wrapped
    r = candidates[:, None]
    long = ends - starts > SHORT
    # runs of a bin or two (an arc's cut ends): every bin they cover on the circle, taken one by one
    pos = np.flatnonzero(np.repeat(~long, ends - starts))
    at = np.concatenate((((np.arange(tiles) * q)[:, None] + pos[None, :]).ravel(), pos[pos < rest] + tiles * q))
    terms = np.maximum(ext[at[None, :] + r] + prof[at % q] - 1.0, 0.0)
    excess = terms.sum(axis=1)
    over = (terms > 0.0).sum(axis=1)
    total = float(excess.max())  # what the rounding errors are relative to
    for v in np.unique(values[long]).tolist():
        e = np.maximum(ext + v - 1.0, 0.0)  # the excess of every bin where the curve holds v
        sel = long & (values == v)
        lo, hi = starts[sel][None, :] + r, ends[sel][None, :] + r
        rows = e[:(tiles + 1) * q].reshape(tiles + 1, q)
        mid = rows[1:tiles].sum(axis=0)
        fold = np.concatenate((rows[0] + mid, mid + rows[tiles]))  # fold[x] = sum over whole tiles t of e[t q + x]
        g = np.concatenate(([0.0], np.cumsum(fold)))
        z = np.concatenate(([0], np.cumsum(fold > 0.0)))
        excess += (g[hi] - g[lo]).sum(axis=1)
        over += (z[hi] - z[lo]).sum(axis=1)
        total += float(g[-1])
        if rest:  # the cut tile: profile positions below rest
            tail = e[tiles * q:]
            h = np.concatenate(([0.0], np.cumsum(tail)))
            y = np.concatenate(([0], np.cumsum(tail > 0.0)))
            lo, hi = np.minimum(starts[sel], rest)[None, :] + r, np.minimum(ends[sel], rest)[None, :] + r
            excess += (h[hi] - h[lo]).sum(axis=1)
            over += (y[hi] - y[lo]).sum(axis=1)
            total += float(h[-1])
    # every prefix sum is off by at most (its terms + the fold's) x EPS x its end; a rotation adds two
    # per run, and the runs' sums add their own rounding
    err = 4.0 * EPS * len(starts) * (2 * q + tiles + rest + 8) * (total + float(np.abs(excess).max()))
    return excess, over > 0, err


def _best_rotation(base: np.ndarray, curve: np.ndarray, prof: np.ndarray,
                   candidates: np.ndarray) -> tuple[float, int]:
    """Best raw score of ``base + roll(curve, r)`` over ``candidates`` (first best wins); ``curve`` is
    ``prof`` tiled over the circle.

    The candidates are ranked by :func:`_rough` first; the reference values of :func:`_scores` are
    computed only for those within rounding error (plus ``NEAR``) of the best, and a candidate without
    any excess scores exactly 1. So the result is the one the reference values of every candidate
    give, ties included, at a fraction of the work.
    """
    bins = len(base)
    excess, over, err = _rough(base, prof, candidates)
    rough = 1.0 - excess / bins
    margin = NEAR + 2.0 * err / bins
    near = over & (rough >= rough.max() - margin)
    vals = np.full(len(candidates), -math.inf)
    vals[~over] = 1.0  # no bin with an excess: the reference value is exactly 1
    if near.any():
        vals[near] = _scores(base, np.concatenate([curve, curve]), candidates[near])
    i = int(vals.argmax())
    return float(vals[i]), int(candidates[i])


def _add_rolled(total: np.ndarray, curve: np.ndarray, r: int) -> None:
    """``total += np.roll(curve, r)`` (``0 <= r < len(curve)``) without the rolled copy: the same
    element-wise additions."""
    cut = len(curve) - r
    total[r:] += curve[:cut]
    total[:r] += curve[cut:]


def _rolled(op: np.ufunc, a: np.ndarray, curve: np.ndarray, r: int) -> np.ndarray:
    """``op(a, np.roll(curve, r))`` (``0 <= r < len(curve)``) without the rolled copy: the same
    element-wise operations."""
    cut = len(curve) - r
    out = np.empty_like(a)
    op(a[r:], curve[:cut], out=out[r:])
    op(a[:r], curve[cut:], out=out[:r])
    return out


def link_rotations(jobs_on_link: Sequence[CircleJob], quantum_s: float, lcm_cap: float, angles: int = 72,
                   max_exhaustive: int = 4096, sweeps: int = 3,
                   best_rotation: BestRotation | None = None) -> tuple[float, dict[str, float]]:
    """Rotation search on one link: best compatibility (clipped) and the rotation per job in seconds.

    ``best_rotation``: the per-job step of the search, :func:`_best_rotation` by default; the simulator
    passes its compiled twin (``leveller.sim.network.cassini_kernel``), which returns the same values.
    """
    best = _best_rotation if best_rotation is None else best_rotation
    _check_link(jobs_on_link)
    if angles < 1:
        raise UserError(f"angles must be >= 1, got {angles!r}")
    if sweeps < 0:
        raise UserError(f"sweeps must be >= 0, got {sweeps!r}")
    bins = _unified_bins([j.period_s for j in jobs_on_link], quantum_s, lcm_cap)
    profs = [_profile(j, quantum_s) for j in jobs_on_link]
    curves = [np.tile(p, -(-bins // len(p)))[:bins] for p in profs]
    grids = []
    for job in jobs_on_link:
        q = _quanta(job.period_s, quantum_s)
        grids.append(np.arange(0, q, -(-q // angles)))
    n = len(jobs_on_link)
    rot = [0] * n
    if n == 1:
        score = _raw_score(curves[0])
    elif math.prod(len(g) for g in grids[1:]) <= max_exhaustive:
        score = -math.inf
        for combo in itertools.product(*(g.tolist() for g in grids[1:-1])):
            base = curves[0].copy()
            for c, r in zip(curves[1:-1], combo):
                _add_rolled(base, c, r)
            val, last = best(base, curves[-1], profs[-1], grids[-1])
            if val > score:
                score, rot = val, [0, *combo, last]
    else:
        total = curves[0].copy()
        for i in range(1, n):  # greedy placement in link order
            _, rot[i] = best(total, curves[i], profs[i], grids[i])
            _add_rolled(total, curves[i], rot[i])
        score = _raw_score(total)
        for _ in range(sweeps):
            improved = False
            for i in range(1, n):
                base = _rolled(np.subtract, total, curves[i], rot[i])  # total - roll(curve, rot)
                val, r = best(base, curves[i], profs[i], grids[i])
                if val > score + 1e-12:
                    rot[i], score, improved = r, val, True
                total = _rolled(np.add, base, curves[i], rot[i])  # base + roll(curve, rot)
            if not improved:
                break
    return _clip(score), {j.name: r * quantum_s for j, r in zip(jobs_on_link, rot)}


def bfs_shifts(rotations: Mapping[Hashable, Mapping[str, float]], periods: Mapping[str, float]) -> dict[str, float]:
    """One shift per job from per-link rotations, by BFS over the job-link affinity graph.

    ``rotations[link][job] = t_j^l``. Reaching link ``l`` from job ``u`` sets, for every
    other job ``j`` on ``l`` without a shift yet, ``t_j = (t_u - t_u^l + t_j^l) mod T_j``.
    """
    for link, rot in rotations.items():
        for job in rot:
            if job not in periods:
                raise UserError(f"job {job!r} on link {link!r} has no period")
    links_of: dict[str, list[Hashable]] = {}
    for link, rot in rotations.items():
        for job in rot:
            links_of.setdefault(job, []).append(link)
    shifts: dict[str, float] = {}
    seen_links: set[Hashable] = set()
    for root in links_of:
        if root in shifts:
            continue
        shifts[root] = 0.0
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for link in links_of[u]:
                if link in seen_links:
                    continue
                seen_links.add(link)
                rot = rotations[link]
                for j, t_jl in rot.items():
                    if j not in shifts:
                        shifts[j] = (shifts[u] - rot[u] + t_jl) % periods[j]
                        queue.append(j)
    return shifts


def job_shifts(links: Mapping[Hashable, Sequence[CircleJob]], quantum_s: float, lcm_cap: float,
               angles: int = 72, max_exhaustive: int = 4096, sweeps: int = 3,
               cache: RotationCache | None = None,
               best_rotation: BestRotation | None = None) -> dict[str, float]:
    """CASSINI's shift per job (seconds to delay its iteration start), for every job on ``links``.

    Rotation search on every link shared by two or more jobs, then :func:`bfs_shifts`.
    A job must have the same period on every link. ``cache``: a mapping the caller keeps across
    calls, from a link's jobs (in order) and the search settings to :func:`link_rotations`' result;
    a link whose content was searched before is not searched again (the search is a pure function
    of that content, so the shifts are the same). ``best_rotation`` as for :func:`link_rotations`.
    """
    _check_quantum(quantum_s, lcm_cap)
    periods: dict[str, float] = {}
    for link, jobs in links.items():
        _check_link(jobs)
        for job in jobs:
            if not math.isclose(periods.setdefault(job.name, job.period_s), job.period_s, rel_tol=1e-9):
                raise UserError(f"job {job.name!r} has period {periods[job.name]!r} on one link and "
                                f"{job.period_s!r} on link {link!r}")
    rotations: dict[Hashable, dict[str, float]] = {}
    for link, jobs in links.items():
        if len(jobs) >= 2:
            key = (tuple(jobs), quantum_s, lcm_cap, angles, max_exhaustive, sweeps)
            found = None if cache is None else cache.get(key)
            if found is None:
                if best_rotation is None:
                    found = link_rotations(jobs, quantum_s, lcm_cap, angles, max_exhaustive, sweeps)
                else:
                    found = link_rotations(jobs, quantum_s, lcm_cap, angles, max_exhaustive, sweeps,
                                           best_rotation=best_rotation)
                if cache is not None:
                    cache[key] = found
            rotations[link] = dict(found[1])
    shifts = bfs_shifts(rotations, periods)
    return {name: shifts.get(name, 0.0) for name in periods}


def shift_overlap(a: CircleJob, shift_a: float, b: CircleJob, shift_b: float, horizon_s: float,
                  step_s: float | None = None) -> float:
    """Seconds in ``[0, horizon_s)`` during which both jobs communicate, each delayed by its shift.

    Sampled every ``step_s`` (default: 1/1000 of the shorter period); a measure for tests
    and reports, independent of the search's quantisation.
    """
    step = step_s or min(a.period_s, b.period_s) / 1000.0
    t = np.arange(0.0, horizon_s, step) + step / 2

    def busy(job: CircleJob, shift: float) -> np.ndarray:
        phase = np.mod(t - shift, job.period_s)
        on = np.zeros(len(t), dtype=bool)
        for start, duration, _ in job.arcs:
            on |= np.mod(phase - start, job.period_s) < duration
        return on & (t >= shift)

    return float((busy(a, shift_a) & busy(b, shift_b)).sum() * step)


def shared_link_shifts(links: Mapping[Hashable, Sequence[CircleJob]], quantum_fraction: float = 0.01,
                       lcm_periods: float = 20.0,
                       cache: RotationCache | None = None,
                       best_rotation: BestRotation | None = None) -> dict[str, float]:
    """:func:`job_shifts` with the grid scaled to the jobs: quantum = ``quantum_fraction`` of the
    shortest period, unified circle capped at ``lcm_periods`` times the longest. Links with fewer
    than two jobs add nothing; with no shared link at all the result is empty. ``cache`` and
    ``best_rotation`` as for :func:`job_shifts`."""
    shared = {link: jobs for link, jobs in links.items() if len(jobs) >= 2}
    if not shared:
        return {}
    if not 0 < quantum_fraction <= 1:
        raise UserError(f"quantum_fraction must be in (0, 1], got {quantum_fraction!r}")
    if not lcm_periods >= 1:
        raise UserError(f"lcm_periods must be >= 1, got {lcm_periods!r}")
    periods = [c.period_s for jobs in shared.values() for c in jobs]
    return job_shifts(shared, quantum_fraction * min(periods), lcm_periods * max(periods), cache=cache,
                      best_rotation=best_rotation)
