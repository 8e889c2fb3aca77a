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
MAX_RATE = 1e6  # R is ~1 for a job at its ideal speed; far above means its ideal time is wrong
MAX_SHAPE_S = 86400.0  # compute / communication seconds per iteration in --job-shape
MAX_GPUS = 1_000_000


@dataclass(frozen=True)
class JobInput:
    name: str
    iterations: int
    start_time: float
    ideal_time: float | None
    profiling: bool = False


@dataclass(frozen=True)
class JobShape:
    """What Crux ranks by: GPUs, compute and communication time per iteration (seconds)."""

    compute: float
    comm: float
    gpus: int = 1


def parse_shape(text: str) -> tuple[str, JobShape]:
    """``JOB=C:M[:G]`` (compute s, communication s at full rate, GPUs) as given to ``--job-shape``."""
    from leveller.errors import UserError
    from leveller.jobs.logline import check_job_name

    job, _, spec = text.partition("=")
    parts = spec.split(":")
    try:
        compute, comm = float(parts[0]), float(parts[1])
        gpus = int(parts[2]) if len(parts) == 3 else 1
        ok = (len(parts) in (2, 3) and 0 <= compute <= MAX_SHAPE_S and 0 < comm <= MAX_SHAPE_S
              and 1 <= gpus <= MAX_GPUS)
    except (ValueError, IndexError):
        ok = False
    if not ok:
        raise UserError(f"--job-shape {text!r}: expected JOB=C:M[:G] with 0 <= C <= {MAX_SHAPE_S:g} and "
                        f"0 < M <= {MAX_SHAPE_S:g} seconds, 1 <= G <= {MAX_GPUS} GPUs")
    return check_job_name(job), JobShape(compute, comm, gpus)


@dataclass(frozen=True)
class Decision:
    order: list[str] | None
    rates: dict[str, float | None]
    levels: dict[FlowKey, int]
    links: dict[FlowKey, tuple[str, ...]]


def job_rate(job: JobInput, now: float) -> float | None:
    """R of a job at ``now`` (None without an ideal time), at most MAX_RATE.

    Reports bound iterations and ideal times, so R is finite; the cap keeps status and
    metrics meaningful (and JSON-encodable) whatever a misconfigured ideal time gives."""
    if job.ideal_time is None:
        return None
    rate = float(progress_rate(job.iterations, job.ideal_time, job.start_time, max(now, job.start_time)))
    return rate if rate <= MAX_RATE else MAX_RATE  # also maps an infinite or NaN R to the cap


def decide(jobs: Sequence[JobInput], flows: Mapping[FlowKey, str],
           links: Mapping[FlowKey, tuple[str, ...] | None], policy: Policy, k: int, now: float,
           shapes: Mapping[str, JobShape] | None = None) -> Decision:
    """Levels for ``flows`` (flow -> job) given each flow's links; every flow's job must be in ``jobs``.
    ``shapes`` gives GPUs / compute / communication per job, which Crux ranks by."""
    rates = {j.name: job_rate(j, now) for j in jobs}
    shapes = shapes or {}
    views = []
    for j in jobs:
        shape = shapes.get(j.name)
        rate = rates[j.name] if rates[j.name] is not None else (None if j.profiling else 0.0)
        views.append(JobView(j.name, rate=rate, profiling=j.profiling,
                             gpus=shape.gpus if shape else 1, compute=shape.compute if shape else None,
                             comm=shape.comm if shape else None))
    order = policy.order(views)
    resolved = {f: (links.get(f) or (UNKNOWN_PATH,)) for f in flows}
    named = {flow_label(f): Flow(flows[f], tuple(resolved[f])) for f in flows}
    by_label = {flow_label(f): f for f in flows}
    levels = assign_levels(order, named, k)
    return Decision(order, rates, {by_label[n]: lvl for n, lvl in levels.items()}, resolved)
