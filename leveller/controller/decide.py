"""The per-tau decision: rates -> policy order -> K levels per flow. Pure: ``now`` is an argument.

It calls leveller.core exactly as the simulators do (progress_rate, a Policy,
the pruning of leveller.core.levels). Jobs being profiled rank first (the
policy does that); jobs waiting for their turn to be profiled have no ideal
time yet and count as R = 0 (just started, least advanced). Flows whose path
is unknown are put on one shared pseudo-link, so they contend with each other
but with no known flow. Flows are numpy rows of a FlowSnapshot
(leveller.controller.flowtable): no per-flow Python work in a decision. The
flows of one job on one path get one level, so one of them per class is pruned
(``flow_classes``): ring all-reduce channels share their paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from leveller.controller.flowtable import UNKNOWN_PATH, FlowSnapshot, FlowTable
from leveller.core.levels import prune
from leveller.core.policies import JobView, Policy
from leveller.core.rate import progress_rate
from leveller.model.flow import FlowKey
from leveller.model.shape import JobShape

__all__ = ["UNKNOWN_PATH", "Decision", "FlowClasses", "JobInput", "JobShape", "class_ranks", "decide",
           "decide_snapshot", "decision_of", "job_links", "job_rate", "job_views", "snapshot_classes"]
MAX_RATE = 1e6  # R is ~1 for a job at its ideal speed; far above means its ideal time is wrong


@dataclass(frozen=True)
class JobInput:
    name: str
    iterations: int
    start_time: float
    ideal_time: float | None
    profiling: bool = False
    weight: float = 1.0  # operator weight: leveller ranks by R / weight
    work: float | None = None  # ideal-seconds done (None: iterations x ideal_time)
    history: tuple[tuple[float, float], ...] = ()  # (time, ideal-seconds) samples for a windowed/decayed R
    window: float | None = None  # R over the last `window` seconds (leveller.core.rate)
    half_life: float | None = None  # R from decayed iterations and time


class FlowLevels(Mapping[FlowKey, int]):
    """flow -> level of one decision (a read-only view over its arrays)."""

    def __init__(self, flows: FlowSnapshot, levels: np.ndarray) -> None:
        self.flows, self.array = flows, levels

    def __getitem__(self, key: FlowKey) -> int:
        r = self.flows.row(key)
        if r is None:
            raise KeyError(key)
        return int(self.array[r])

    def __iter__(self) -> Iterator[FlowKey]:
        keys = self.flows.keys
        return (keys[i] for i in self.flows.flow_ids.tolist())

    def __len__(self) -> int:
        return len(self.flows)


class FlowLinks(Mapping[FlowKey, tuple[str, ...]]):
    """flow -> links of one decision (UNKNOWN_PATH for a flow without a known path)."""

    def __init__(self, flows: FlowSnapshot) -> None:
        self.flows = flows

    def __getitem__(self, key: FlowKey) -> tuple[str, ...]:
        r = self.flows.row(key)
        if r is None:
            raise KeyError(key)
        names = self.flows.link_names
        return tuple(names[j] for j in self.flows.path[r].tolist() if j >= 0)

    def __iter__(self) -> Iterator[FlowKey]:
        return iter(FlowLevels(self.flows, np.empty(0)))

    def __len__(self) -> int:
        return len(self.flows)


@dataclass(frozen=True)
class Decision:
    order: list[str] | None
    rates: dict[str, float | None]
    levels: Mapping[FlowKey, int]
    links: Mapping[FlowKey, tuple[str, ...]]
    flows: FlowSnapshot | None = None
    level_array: np.ndarray | None = None  # level of row r of ``flows``
    # level by the table id of a flow (-1: not in this decision), one longer than the ids it covers: the
    # last entry is -1 too, so an id past the end or -1 reads "not decided" (Controller._reply, per report)
    level_by_id: np.ndarray | None = None


def levels_by_id(flows: FlowSnapshot, levels: np.ndarray) -> np.ndarray:
    """``Decision.level_by_id`` of a decision over ``flows`` with ``levels`` per row."""
    by_id = np.full(len(flows.row_by_id) + 1, -1, dtype=np.int16)
    by_id[flows.flow_ids] = levels
    return by_id


def job_rate(job: JobInput, now: float) -> float | None:
    """R of a job at ``now`` (None without an ideal time), at most MAX_RATE: cumulative, or over a
    window, or decayed, as the job's input says (leveller.core.rate.progress_rate on ideal-seconds).

    Reports bound iterations and ideal times, so R is finite; the cap keeps status and
    metrics meaningful (and JSON-encodable) whatever a misconfigured ideal time gives."""
    if job.ideal_time is None:
        return None
    work = job.iterations * job.ideal_time if job.work is None else job.work
    rate = float(progress_rate(work, 1.0, job.start_time, max(now, job.start_time), job.history, job.window,
                               job.half_life))
    return rate if rate <= MAX_RATE else MAX_RATE  # also maps an infinite or NaN R to the cap


def rank(jobs: Sequence[JobInput], policy: Policy, now: float,
         shapes: Mapping[str, JobShape] | None = None) -> tuple[list[str] | None, dict[str, float | None]]:
    """(policy order, R per job) at ``now``. ``shapes`` gives GPUs / compute / communication per job,
    which Crux ranks by."""
    rates = {j.name: job_rate(j, now) for j in jobs}
    return policy.order(job_views(jobs, rates, shapes)), rates


def job_views(jobs: Sequence[JobInput], rates: Mapping[str, float | None],
              shapes: Mapping[str, JobShape] | None = None) -> list[JobView]:
    """What the policy sees of each job: R (0 for a job waiting to be profiled), weight, shape."""
    shapes = shapes or {}
    views = []
    for j in jobs:
        shape = shapes.get(j.name)
        rate = rates[j.name] if rates[j.name] is not None else (None if j.profiling else 0.0)
        views.append(JobView(j.name, rate=rate, profiling=j.profiling, weight=j.weight,
                             gpus=shape.gpus if shape else 1, compute=shape.compute if shape else None,
                             comm=shape.comm if shape else None))
    return views


Pruner = Callable[[np.ndarray, np.ndarray, np.ndarray, int, int], np.ndarray]  # core.levels.prune's signature


@dataclass(frozen=True)
class FlowClasses:
    """The classes of a snapshot's rows (``flow_classes``) and what their pruning needs: the job id of
    every class and the (class, link) incidence of one row per class. A function of the rows' jobs and
    paths only, so the controller keeps it while its flow table does not change."""

    cls: np.ndarray  # class of every row
    job: np.ndarray  # job id of every class
    inc_class: np.ndarray
    inc_link: np.ndarray


def snapshot_classes(flows: FlowSnapshot) -> FlowClasses:
    """The FlowClasses of a snapshot; rows without an interned path are each a class of their own."""
    if flows.path_id is None or (len(flows) and flows.path_id.min() < 0):
        reps, cls = np.arange(len(flows)), np.arange(len(flows))
    else:
        reps, cls = flow_classes(flows.job, flows.path_id)
    path = flows.path[reps]
    present = path >= 0
    return FlowClasses(cls, flows.job[reps], np.nonzero(present)[0], path[present])


def job_links(flows: FlowSnapshot) -> dict[str, frozenset[int]]:
    """job -> the links (ids into ``link_names``) its rows cross; jobs whose rows cross none are left out.
    The registry opens profiling windows side by side for jobs whose links do not meet."""
    rows, cols = np.nonzero(flows.path >= 0)
    if not len(rows):
        return {}
    pairs = np.unique(np.stack([flows.job[rows].astype(np.int64), flows.path[rows, cols].astype(np.int64)], 1), axis=0)
    starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    return {flows.job_names[int(pairs[a, 0])]: frozenset(pairs[a:b, 1].tolist())
            for a, b in zip(starts, [*starts[1:], len(pairs)])}


def flow_levels(order: list[str] | None, flows: FlowSnapshot, k: int, pruner: Pruner = prune,
                classes: FlowClasses | None = None) -> np.ndarray:
    """Level of every row of ``flows`` (int8) by pruning one row per class; every flow's job must be in
    ``order``. ``pruner``: core.levels.prune, or the same run elsewhere (leveller.controller.prune_worker);
    ``classes``: the snapshot's FlowClasses if known (computed here otherwise)."""
    if order is None:
        return np.zeros(len(flows), dtype=np.int8)
    c = classes if classes is not None else snapshot_classes(flows)
    return pruner(class_ranks(order, flows, c), c.inc_class, c.inc_link, len(flows.link_names), k)[c.cls]


def class_ranks(order: list[str], flows: FlowSnapshot, classes: FlowClasses) -> np.ndarray:
    """The rank in ``order`` of every class's job: the pruning's input beside the classes' incidence.
    Raises ValueError naming the jobs of ``flows`` that ``order`` leaves out."""
    rank_by_job = np.full(len(flows.job_names), -1, dtype=np.int64)
    for i, name in enumerate(order):
        jid = flows.job_ids.get(name)
        if jid is not None and jid < len(rank_by_job):
            rank_by_job[jid] = i
    ranks = rank_by_job[classes.job]
    if len(ranks) and ranks.min() < 0:
        missing = sorted({flows.job_names[j] for j in np.unique(classes.job[ranks < 0]).tolist()})
        raise ValueError(f"flows name jobs missing from the order: {missing}")
    return ranks


DENSE_KEYS = 8  # flow_classes counts classes in a table while it has at most this many slots per flow


def flow_classes(job: np.ndarray, path_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row of every class, the class of every row), where a class is the rows of one job on one path.

    The pruning gives every row of a class the same level: they have one rank and one set of links, so
    they are in one connected part in every round (or each alone, on no contended link, and then all
    chosen), and a copy adds no job to any link and joins no links the first does not. So the controller
    prunes one row per class and gives the rest its level: at 100,000 flows of the generated 1,024-GPU
    cluster, 5,616 classes (ring channels share their paths)."""
    n = len(job)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    paths = int(path_id.max()) + 1
    key = job.astype(np.int64) * paths + path_id
    slots = (int(job.max()) + 1) * paths
    if slots > DENSE_KEYS * n + 65536:  # sparse keys: sort them
        _, reps, cls = np.unique(key, return_index=True, return_inverse=True)
        return reps, cls.reshape(-1)
    rep = np.full(slots, -1, dtype=np.int64)
    rep[key] = np.arange(n)  # any row of a class represents it: they all get one level
    used = rep >= 0
    index = np.cumsum(used) - 1
    return rep[used], index[key]


def decide_snapshot(jobs: Sequence[JobInput], flows: FlowSnapshot, policy: Policy, k: int, now: float,
                    shapes: Mapping[str, JobShape] | None = None, pruner: Pruner = prune,
                    classes: FlowClasses | None = None) -> Decision:
    """The decision for the flows of a snapshot (every flow's job must be in ``jobs``); ``classes``: the
    snapshot's FlowClasses if known."""
    order, rates = rank(jobs, policy, now, shapes)
    return decision_of(order, rates, flows, flow_levels(order, flows, k, pruner, classes))


def decision_of(order: list[str] | None, rates: dict[str, float | None], flows: FlowSnapshot,
                levels: np.ndarray) -> Decision:
    """The Decision giving row r of ``flows`` the level ``levels[r]``."""
    return Decision(order, rates, FlowLevels(flows, levels), FlowLinks(flows), flows, levels,
                    levels_by_id(flows, levels))


def decide(jobs: Sequence[JobInput], flows: Mapping[FlowKey, str],
           links: Mapping[FlowKey, tuple[str, ...] | None], policy: Policy, k: int, now: float,
           shapes: Mapping[str, JobShape] | None = None) -> Decision:
    """Levels for ``flows`` (flow -> job) given each flow's links; every flow's job must be in ``jobs``.
    ``shapes`` gives GPUs / compute / communication per job, which Crux ranks by."""
    table = FlowTable()
    table.update_host("", flows.items())
    table.set_links([(f, links.get(f)) for f in flows])
    return decide_snapshot(jobs, table.snapshot(table.live()), policy, k, now, shapes)
