"""How a scheduling policy plugs into the network simulator.

The simulator asks a policy three things, through the same ``leveller.core``
objects the live controller uses (no simulation-only branches there):

- ``route``: the path of every flow of the running jobs (on arrival / finish),
- ``levels``: a switch priority level per flow (on arrival / finish, every
  ``tau`` > 0, or at iteration ends when ``tau`` = 0),
- ``shifts``: a one-shot delay of each job's next iteration start (CASSINI).

``overlap`` says whether the host agents apply the overlap (slack) rule of
``leveller.core.overlap``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from leveller.core.levels import Flow, FlowSet, Pruner, assign_levels, prune
from leveller.core.policies import FairPolicy, JobView, LevellerPolicy, Policy
from leveller.core.switching import PAPER, SwitchMemory, SwitchRule, applies_to, switch_order
from leveller.model.limits import POLICIES
from leveller.sim.network.fluid import kernel
from leveller.sim.network.runjob import RunJob
from leveller.sim.network.topology import Network


class NetPolicy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tau(self) -> float | None: ...

    @property
    def overlap(self) -> bool: ...

    def route(self, now: float, jobs: Sequence[RunJob], net: Network) -> dict[str, list[tuple[int, ...]]]:
        """New paths (one per flow, in flow order) for the jobs whose paths change."""
        ...

    def order(self, now: float, jobs: Sequence[RunJob]) -> list[str] | None:
        """Job names, highest priority first (None: no priority). Equal orders give equal levels."""
        ...

    def levels(self, order: list[str] | None, jobs: Sequence[RunJob], flows: Mapping[str, Flow],
               k: int) -> dict[str, int]:
        """Level per flow name (K-1 highest) for ``flows`` of ``jobs`` (see :func:`flow_table`)."""
        ...

    def shifts(self, now: float, jobs: Sequence[RunJob]) -> dict[str, float]:
        """Per job, a time shift in [0, period) of its iteration starts (empty: none)."""
        ...


def job_views(now: float, jobs: Sequence[RunJob], window: float | None = None,
              half_life: float | None = None) -> list[JobView]:
    """What the controller knows of each job: R (cumulative, or over a window, or decayed, as the
    controller's --rate-window / --rate-half-life), GPUs, compute and communication time alone."""
    return [JobView(j.name, rate=j.policy_rate(now, window, half_life), gpus=j.gpus, compute=j.spec.compute,
                    comm=j.comm_alone if j.comm_alone > 0 else None) for j in jobs]


def leveller_order(now: float, jobs: Sequence[RunJob]) -> list[str] | None:
    """``LevellerPolicy().order(job_views(now, jobs))`` for the paper's cumulative R, without a
    ``JobView`` per job (the simulator ranks a group at every iteration end): the names sorted by
    R (stable, so ties keep the jobs' order), each R the float ``core.rate.progress_rate`` gives
    for a float ideal time, float(n) x ideal / (now - start), 0.0 at the start. None (the caller
    takes the core path) when a job's ideal time is not a float > 0 or two jobs share a name."""
    rates = []
    names = []
    for j in jobs:
        ideal = j.ideal
        if type(ideal) is not float or not ideal > 0:
            return None
        start = j.start
        elapsed = (now if now > start else start) - start  # rate_at's max(t, start), then now - start
        n = j.iterations_at(now)
        if n < 0 or elapsed < 0:
            return None
        rates.append(0.0 if elapsed == 0 else float(n) * ideal / float(elapsed))
        names.append(j.name)
    if len(set(names)) != len(names):
        return None
    return [names[i] for i in sorted(range(len(names)), key=rates.__getitem__)]


def pruner() -> Pruner:
    """The pruning the simulator uses: the compiled twin of ``leveller.core.levels.prune`` when the
    compiled backend is in use (``LEVELLER_SIM_KERNEL``, as for the water-filling), else ``prune``."""
    if kernel() is None:
        return prune
    from leveller.sim.network import prune_kernel

    return prune_kernel.prune


def flow_table(jobs: Sequence[RunJob]) -> dict[str, Flow]:
    """The flows of the jobs with the links they cross, as assign_levels takes them."""
    return {f.name: Flow(j.name, tuple(str(lk) for lk in path))
            for j in jobs for f, path in zip(j.flows, j.paths)}


@dataclass(frozen=True)
class RankedPolicy:
    """A core Policy (an order of jobs) turned into levels by K-level pruning, on ECMP paths."""

    core: Policy
    overlap: bool = False
    rate_window: float | None = None  # R over the last S seconds (leveller.core.rate)
    rate_half_life: float | None = None  # R decayed with this half-life
    switching: SwitchRule = PAPER  # hysteresis and dwell of the order (leveller.core.switching)

    @property
    def name(self) -> str:
        return self.core.name

    def switched(self, now: float, jobs: Sequence[RunJob], order: list[str], memory: SwitchMemory
                 ) -> tuple[list[str], SwitchMemory]:
        """``order`` (of ``jobs``, one contention group) after the switching rule, and the rule's memory."""
        if self.switching.is_paper or not applies_to(self.core):
            return order, memory
        out, memory = switch_order(order, job_views(now, jobs, self.rate_window, self.rate_half_life), memory,
                                   now, self.switching)
        return out or order, memory

    @property
    def tau(self) -> float | None:
        return None if self.core.tau is None else float(self.core.tau)

    def route(self, now: float, jobs: Sequence[RunJob], net: Network) -> dict[str, list[tuple[int, ...]]]:
        return {}

    def order(self, now: float, jobs: Sequence[RunJob]) -> list[str] | None:
        if type(self.core) is LevellerPolicy and self.rate_window is None and self.rate_half_life is None:
            fast = leveller_order(now, jobs)
            if fast is not None:
                return fast
        return self.core.order(job_views(now, jobs, self.rate_window, self.rate_half_life))

    def levels(self, order: list[str] | None, jobs: Sequence[RunJob], flows: Mapping[str, Flow],
               k: int) -> dict[str, int]:
        if isinstance(flows, FlowSet):  # a group's flows, their incidence built once
            return flows.levels(order, k, pruner())
        return assign_levels(order, flows, k)

    def shifts(self, now: float, jobs: Sequence[RunJob]) -> dict[str, float]:
        return {}




def make_net_policy(name: str, tau: float = 0.0, rate_window: float | None = None,
                    rate_half_life: float | None = None, switching: SwitchRule = PAPER) -> NetPolicy:
    """The policy called ``name``; ``tau`` is leveller's re-ranking period (0 = every iteration end),
    ``rate_window`` / ``rate_half_life`` the R it ranks by (default: the paper's cumulative R),
    ``switching`` its hysteresis and dwell (default: the paper's, none)."""
    if name == "fair":
        return RankedPolicy(FairPolicy())
    if name == "leveller":
        return RankedPolicy(LevellerPolicy(tau=tau), overlap=True, rate_window=rate_window,
                            rate_half_life=rate_half_life, switching=switching)
    if name == "crux":
        from leveller.sim.network.baselines import CruxNet

        return CruxNet()
    if name == "cassini":
        from leveller.sim.network.baselines import CassiniNet

        return CassiniNet()
    raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}")
