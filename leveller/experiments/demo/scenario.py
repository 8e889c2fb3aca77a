"""What the demo runs: the paper's examples as emulated jobs on the one-switch star. Pure.

Topology: leveller.experiments.shared.star (senders h1, h2, h3 and receiver h4 on
switch s1). Every job has two workers (push pattern): rank 0 on h4 receives, rank 1
on its own sender host sends, so all jobs meet on the switch port towards h4 and
nowhere else (each sender host carries one job).
One model time unit is ``unit_s`` seconds: a job C:M computes C units and sends
M units' worth of bytes at the link rate per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

from leveller.errors import UserError
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.star import RECEIVER, SENDERS
from leveller.model.shape import JobShape

BASE_PORT = 21000  # below the ephemeral range, so a flow's port names its job unambiguously
PORT_STRIDE = 10

# Paper model numbers (digest sections 2 and 3.2); None where the paper gives none.
PAPER: dict[str, dict[str, list[float | None]]] = {
    "pair": {"fair": [0.75, 0.75], "crux": [1.0, 0.75], "leveller": [0.857, 0.857]},
    "trio": {"fair": [0.5, 0.5, 0.667], "crux": [None, 0.0, None], "leveller": [0.6, 0.6, 0.6]},
}
SHAPES: dict[str, tuple[tuple[int, int], ...]] = {  # example -> (C, M) per job, in model units
    "pair": ((1, 1), (1, 2)),
    "trio": ((1, 2), (1, 2), (2, 1)),
}


@dataclass(frozen=True)
class JobPlan:
    """One emulated job of an example: its shape in model time units, its sender host and ports."""

    name: str
    units: JobShape[float]  # C and M in model time units
    sender: str
    port: int  # rank 0 listens on port, rank 1 on port + 1

    @property
    def shape(self) -> str:
        """``C:M`` in model units: the example's name for the shape (its ideal time is profiled once)."""
        return f"{self.units.compute}:{self.units.comm}"

    def seconds(self, unit_s: float) -> JobShape[float]:
        """The shape in seconds, one model time unit being ``unit_s`` seconds."""
        return JobShape(self.units.compute * unit_s, self.units.comm * unit_s)

    def live(self, unit_s: float) -> LiveJob:
        """The job on the live cluster: rank 0 on the receiver, rank 1 sends (push)."""
        return LiveJob(self.name, (RECEIVER, self.sender), self.seconds(unit_s), self.port)


def plan(example: str) -> list[JobPlan]:
    """The jobs of ``example`` ('pair' or 'trio'), job i+1 on sender host i+1."""
    if example not in SHAPES:
        raise UserError(f"example = {example!r} is invalid; allowed: {', '.join(SHAPES)}")
    return [JobPlan(f"j{i + 1}", JobShape(c, m), SENDERS[i], BASE_PORT + PORT_STRIDE * i)
            for i, (c, m) in enumerate(SHAPES[example])]


def check_settings(unit_s: float, seconds: float) -> None:
    """Validate the time unit and run length (names the option and what is allowed)."""
    if not 0.05 <= unit_s <= 2.0:
        raise UserError(f"--unit {unit_s!r} is invalid; seconds per model time unit in [0.05, 2]")
    if not 10 <= seconds <= 600:
        raise UserError(f"--seconds {seconds!r} is invalid; seconds per policy run in [10, 600]")


def names(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    """The comma-separated subset of ``allowed`` given to ``option`` (UserError naming what is allowed)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UserError(f"{option} {text!r} is invalid; a comma-separated subset of {', '.join(allowed)}")
    return items
