"""A job of the model: the one job spec the simulators, the demos and the baselines describe a job with.

A job runs on ``hosts`` (rank order); one iteration computes ``compute`` seconds, then its ranks
exchange ``bytes`` bytes per rank in a collective (``collective``: "ddp", one ring all-reduce, or
"fsdp", three ring phases); the communication may start ``slack`` seconds before the compute ends.
The wire forms (the network simulator's jobs FILE: leveller.sim.network.jobs; the demos' live jobs)
convert to and from it; nothing else restates it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobSpec:
    """One job. ``hosts`` is None for a synthetic job placed at arrival on ``size`` free hosts."""

    name: str
    hosts: tuple[str, ...] | None
    compute: float
    bytes: float
    arrival: float = 0.0
    iterations: int | None = None
    slack: float = 0.0
    size: int = 0  # hosts wanted (synthetic jobs); len(hosts) otherwise
    model: str = ""  # catalog entry of a synthetic job
    collective: str = "ddp"  # "ddp": one ring all-reduce; "fsdp": three ring phases (see ``stages``)
    gpus_per_rank: int = 0  # GPUs the job takes on each of its hosts; 0 = the whole host
    forward: float = 0.0  # FSDP: seconds of ``compute`` in the forward pass (0: a third; see ``stages``)

    @property
    def n_hosts(self) -> int:
        """Ranks of the job: its hosts, or the hosts a synthetic job wants."""
        return len(self.hosts) if self.hosts is not None else self.size

    def stages(self) -> tuple[tuple[float, float], ...]:
        """The iteration as stages ``(compute, comm_offset)``, run one after the other.

        A stage computes for ``compute`` s; its collective starts ``comm_offset`` s after the stage
        starts; the stage ends when both are done. DDP: one stage, the all-reduce starting ``slack``
        s before compute ends. FSDP full sharding: three stages of ``compute / 3`` each, every one
        with its collective from its start: all-gather | forward, all-gather | first half of the
        backward, reduce-scatter | second half of the backward. The forward is ``forward`` s when
        given (a measured catalog entry), else a third of compute (backward = 2/3). Each phase
        overlaps its own stage only.
        """
        if self.collective == "fsdp":
            if 0 < self.forward < self.compute:
                half = (self.compute - self.forward) / 2
                return ((self.forward, 0.0), (half, 0.0), (half, 0.0))
            third = self.compute / 3
            return ((third, 0.0), (third, 0.0), (third, 0.0))
        return ((self.compute, self.compute - self.slack),)
