"""CASSINI on the live controller: one time shift per job, recomputed when the jobs on the links change.

Every step hands the planner what the step saw: the jobs (ideal iteration time), their
shapes (``--job-shape JOB=C:M[:G[:S]]``: compute, communication, slack), each flow's job
and byte counter, and each flow's links. A job's **circle** on a link (leveller.core.cassini)
has perimeter = its ideal iteration time and one arc = its communication: from
``C - S`` into the iteration, ``M`` long, demanding the whole link (an emulated or
all-reduce flow alone runs at its bottleneck's rate). A job is on a link when one of its
flows crosses it and carries at least ``min_share`` of the bytes of the job's busiest flow (and
64 KiB), so the ACK streams of the reverse direction (a few % of the bytes) put no job on a link.

The shifts come from :func:`leveller.core.cassini.shared_link_shifts`, the search the
network simulator uses. A new **plan** is made when the set of shared links, their jobs or
the jobs' circles change, once that change has held for ``settle_s`` (jobs' flows appear one
by one at start-up; one plan for the settled picture beats a plan per flow). A plan fixes
an anchor time; job ``j`` should start iterations at ``anchor + shift_j + k * T_j``. Replies
carry that as ``start_in_s`` (seconds from the reply, in ``[0, T_j)``) with the plan
number; each job applies a plan once (leveller.jobs.control). No priorities: the policy's
order is None, every flow stays on one level.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from leveller.controller.decide import JobInput, JobShape
from leveller.core.cassini import CircleJob, shared_link_shifts
from leveller.model.flow import FlowKey
from leveller.model.messages import JobShift

Structure = tuple[tuple[tuple[Hashable, tuple[str, ...]], ...], tuple[tuple[str, float, tuple], ...]]


@dataclass(frozen=True)
class ShiftPlan:
    """One CASSINI computation: job -> shift (s) counted from ``anchor`` (the planner's clock)."""

    plan: int
    anchor: float
    shifts: dict[str, float]
    periods: dict[str, float]


MIN_BYTES = 64 * 1024  # a flow that moved less carries no communication yet (a handshake, first ACKs)


def job_links(flows: Mapping[FlowKey, tuple[str, int]], links: Mapping[FlowKey, Sequence[Hashable]],
              min_share: float = 0.1, min_bytes: int = MIN_BYTES) -> dict[str, set[Hashable]]:
    """job -> links its communication crosses: flows with at least ``min_bytes`` and ``min_share`` of
    the bytes of the job's busiest flow (leaves out ACK streams)."""
    busiest: dict[str, int] = {}
    for job, nbytes in flows.values():
        busiest[job] = max(busiest.get(job, 0), nbytes)
    out: dict[str, set[Hashable]] = {}
    for key, (job, nbytes) in flows.items():
        if nbytes >= min_bytes and nbytes >= min_share * busiest[job]:
            out.setdefault(job, set()).update(links.get(key) or ())
    return out


def circle(name: str, period_s: float, shape: JobShape) -> CircleJob | None:
    """The job's circle on any link it crosses, or None if it has no communication."""
    if not shape.comm > 0 or not period_s > 0:
        return None
    start = (shape.compute - shape.slack) % period_s
    return CircleJob(name, period_s, ((start, min(shape.comm, period_s), 1.0),))


@dataclass
class ShiftPlanner:
    """Keeps the current plan; :meth:`update` after every step, :meth:`replies` for every answer."""

    settle_s: float = 0.5
    quantum_fraction: float = 0.01
    lcm_periods: float = 20.0
    min_share: float = 0.1
    plan: ShiftPlan | None = None
    _structure: Structure | None = field(default=None, repr=False)
    _pending: Structure | None = field(default=None, repr=False)
    _pending_since: float = 0.0
    _count: int = 0

    def structure(self, jobs: Sequence[JobInput], shapes: Mapping[str, JobShape],
                  flows: Mapping[FlowKey, tuple[str, int]],
                  links: Mapping[FlowKey, Sequence[Hashable]]) -> tuple[Structure, dict[Hashable, list[CircleJob]]]:
        """What a plan depends on (comparable) and the circles per shared link."""
        circles: dict[str, CircleJob] = {}
        for j in jobs:
            shape = shapes.get(j.name)
            if shape is not None and j.ideal_time is not None:
                c = circle(j.name, float(j.ideal_time), shape)
                if c is not None:
                    circles[j.name] = c
        on_link: dict[Hashable, list[str]] = {}
        for job, crossed in job_links(flows, links, self.min_share).items():
            if job in circles:
                for link in crossed:
                    on_link.setdefault(link, []).append(job)
        shared = {link: sorted(names) for link, names in on_link.items() if len(names) >= 2}
        members = sorted({n for names in shared.values() for n in names})
        key: Structure = (tuple(sorted(((link, tuple(names)) for link, names in shared.items()), key=repr)),
                          tuple((n, circles[n].period_s, circles[n].arcs) for n in members))
        return key, {link: [circles[n] for n in names] for link, names in shared.items()}

    def update(self, jobs: Sequence[JobInput], shapes: Mapping[str, JobShape],
               flows: Mapping[FlowKey, tuple[str, int]], links: Mapping[FlowKey, Sequence[Hashable]],
               now: float) -> bool:
        """Make a new plan if the picture changed and held for ``settle_s``; True if one was made."""
        key, shared = self.structure(jobs, shapes, flows, links)
        if key == self._structure:
            self._pending = None
            return False
        if key != self._pending:
            self._pending, self._pending_since = key, now
        if now - self._pending_since < self.settle_s:
            return False
        self._structure, self._pending = key, None
        shifts = shared_link_shifts(shared, self.quantum_fraction, self.lcm_periods)
        periods = {c.name: c.period_s for circles in shared.values() for c in circles}
        self._count += 1
        self.plan = ShiftPlan(self._count, now, shifts, periods)
        return True

    def replies(self, jobs: Iterable[str], now: float) -> tuple[JobShift, ...]:
        """The shift orders of ``jobs`` in the current plan, as seen from ``now``."""
        plan = self.plan
        if plan is None:
            return ()
        out = []
        for job in jobs:
            if job in plan.shifts:
                period = plan.periods[job]
                start_in = (plan.anchor + plan.shifts[job] - now) % period
                out.append(JobShift(job, plan.plan, start_in if start_in < period else 0.0, period))
        return tuple(out)
