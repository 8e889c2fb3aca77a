"""One emulated training job on the live cluster, as the experiments hand it to a policy run. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from leveller.experiments.shared.star import LINK_MBPS
from leveller.model.job import JobSpec
from leveller.model.shape import JobShape


@dataclass(frozen=True)
class LiveJob:
    """One emulated job on the live cluster: a worker per host of ``hosts`` (rank order), each
    iteration of the model's ``shape`` (leveller.model.shape: compute and communication seconds at
    ``rate_mbps``, GPUs for Crux's intensity, slack for the overlap); worker i listens on ``port + i``."""

    name: str
    hosts: tuple[str, ...]
    shape: JobShape[float]
    port: int
    pattern: str = "push"
    rate_mbps: float = LINK_MBPS

    @property
    def ports(self) -> str:
        """``JOB=LOW-HIGH`` for the agent's --job-ports."""
        return f"{self.name}={self.port}-{self.port + len(self.hosts) - 1}"

    @property
    def shape_arg(self) -> str:
        """``JOB=C:M:G:S`` for the controller's --job-shape (the shape's wire form)."""
        s = self.shape
        return f"{self.name}={float(s.compute)!r}:{float(s.comm)!r}:{s.gpus}:{float(s.slack)!r}"


def model_specs(jobs: Sequence[LiveJob]) -> list[JobSpec]:
    """The simulator's jobs for live ring jobs: each rank's link carries the live volume per iteration."""
    from leveller.sim.network.jobs import ring_volumes

    specs = []
    for j in jobs:
        shape = j.shape
        volume = shape.comm * j.rate_mbps * 1e6 / 8  # bytes one rank sends its successor per iteration
        per_rank = ring_volumes(len(j.hosts), 1.0, 1)
        specs.append(JobSpec(j.name, tuple(j.hosts), float(shape.compute), volume / per_rank if per_rank else 0.0,
                             slack=float(shape.slack)))
    return specs
