"""The per-tau decision: rates -> policy order -> K levels per flow. Pure: ``now`` is an argument.

It calls leveller.core exactly as the simulators do (progress_rate, a Policy,
assign_levels). Jobs being profiled rank first (the policy does that); jobs
waiting for their turn to be profiled have no ideal time yet and count as
R = 0 (just started, least advanced). Flows whose path is unknown are put on
one shared pseudo-link, so they contend with each other but with no known flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from leveller.core.levels import Flow, assign_levels
from leveller.core.paths import FlowKey
from leveller.core.policies import JobView, Policy
from leveller.core.rate import progress_rate
from leveller.rpc.schema import flow_label

UNKNOWN_PATH = "?unknown-path"


@dataclass(frozen=True)
class JobInput:
    name: str
    iterations: int
    start_time: float
    ideal_time: float | None
    profiling: bool = False


@dataclass(frozen=True)
class Decision:
    order: list[str] | None
    rates: dict[str, float | None]
    levels: dict[FlowKey, int]
    links: dict[FlowKey, tuple[str, ...]]


def job_rate(job: JobInput, now: float) -> float | None:
    """R of a job at ``now`` (None without an ideal time)."""
    if job.ideal_time is None:
        return None
    return float(progress_rate(job.iterations, job.ideal_time, job.start_time, max(now, job.start_time)))


def decide(jobs: Sequence[JobInput], flows: Mapping[FlowKey, str],
           links: Mapping[FlowKey, tuple[str, ...] | None], policy: Policy, k: int, now: float) -> Decision:
    """Levels for ``flows`` (flow -> job) given each flow's links; every flow's job must be in ``jobs``."""
    rates = {j.name: job_rate(j, now) for j in jobs}
    views = [JobView(j.name, rate=rates[j.name] if rates[j.name] is not None else (None if j.profiling else 0.0),
                     profiling=j.profiling) for j in jobs]
    order = policy.order(views)
    resolved = {f: (links.get(f) or (UNKNOWN_PATH,)) for f in flows}
    named = {flow_label(f): Flow(flows[f], tuple(resolved[f])) for f in flows}
    by_label = {flow_label(f): f for f in flows}
    levels = assign_levels(order, named, k)
    return Decision(order, rates, {by_label[n]: lvl for n, lvl in levels.items()}, resolved)
