"""The switching options of a live LEVELLER run, alone and combined (`experiment tenants --switching`).

Lowest-R-first levels the jobs, so their R end nearly equal and noise picks the top job at every
tau; each change starves a TCP flow under strict priority. Three remedies, each measurable alone:

- ``hysteresis``: the controller's switching rule (leveller.core.switching: delta and dwell);
- ``floor``: every switch queue below the top keeps a share of its port (leveller.core.qos), so a
  demoted flow keeps its ACK clock; it is the network's setting, so every policy of a run has it;
- ``phase``: the agents apply a demotion when the flow's communication phase has ended
  (leveller.agent.demotion), a promotion at once.

``paper`` is none of them (the paper's rule on pure strict priority), ``all`` all three.
"""

from __future__ import annotations

from dataclasses import dataclass

from leveller.core.qos import DEFAULT_FLOOR
from leveller.core.switching import DEFAULT, PAPER, SwitchRule


@dataclass(frozen=True)
class LiveSwitching:
    """One combination of the options: the controller's rule, the queues' floor, the agents' demotions."""

    name: str
    rule: SwitchRule = PAPER
    floor: float = 0.0
    phase: bool = False

    def controller_args(self) -> tuple[str, ...]:
        """`leveller controller` flags for LEVELLER runs."""
        return ("--switch-delta", repr(self.rule.delta), "--switch-dwell", repr(self.rule.dwell))

    def agent_args(self) -> tuple[str, ...]:
        """`leveller agent` flags for LEVELLER runs."""
        return ("--phase-demotion",) if self.phase else ("--no-phase-demotion",)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "delta": self.rule.delta, "dwell_s": self.rule.dwell, "floor": self.floor,
                "phase_demotion": self.phase}


MODES = {m.name: m for m in (
    LiveSwitching("paper"),
    LiveSwitching("hysteresis", rule=DEFAULT),
    LiveSwitching("floor", floor=DEFAULT_FLOOR),
    LiveSwitching("phase", phase=True),
    LiveSwitching("all", rule=DEFAULT, floor=DEFAULT_FLOOR, phase=True),
)}
DEFAULT_MODE = "all"
