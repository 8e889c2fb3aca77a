"""Phase-aligned demotion: a flow's promotion applies at once, its demotion when its phase has ended.

Under strict priority a TCP flow demoted in the middle of a transfer waits behind the new top flows,
loses its ACK clock, hits a retransmission timeout and restarts from a collapsed window (issue 25,
item 3). So a flow whose new level is LOWER than the level in force keeps its level until its
communication phase has ended, as the caller judges it (``busy``: its byte counter still grows, its
job logged no iteration end), and at most ``wait_max_s``, never past ``hold_until`` (the end of the
lease of the level in force): a flow that never goes idle is still demoted, and no level outlives
the decision that set it. A promotion, a new flow and an unchanged level apply at once. A newer
decision replaces a waiting demotion: back to the level in force or above cancels it, another
demotion keeps its deadline (the bound counts from when the flow started waiting).

:class:`FlowActivity` turns successive byte counter readings into "idle" (the counter did not grow
over ``quiet_s``). Both classes are pure: levels, counters and times in, levels out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
DEFAULT_WAIT_MAX_S = 1.0  # a demotion waits at most this long for its flow's phase to end
DEFAULT_QUIET_S = 0.02  # a flow is idle when its counter did not grow over this long (the agent's --poll)
PHASE_END, DEADLINE = "phase_end", "deadline"  # why a waiting demotion was applied


@dataclass(frozen=True)
class Waiting:
    """A demotion that waits: the flow goes to ``level`` when its phase ends, at ``deadline`` at the latest."""

    level: int
    since: float
    deadline: float


@dataclass(frozen=True)
class Plan(Generic[K]):
    """What to write now: ``levels`` has a level for every wanted flow (a waiting flow keeps the level
    in force). ``waiting``: the demotions that wait. ``started``: flows that began to wait in this plan;
    ``released``: flows whose waiting demotion was applied in this plan, and why (PHASE_END, DEADLINE);
    ``immediate``: flows demoted at once (their phase had ended already)."""

    levels: dict[K, int]
    waiting: dict[K, Waiting]
    started: frozenset[K] = frozenset()
    released: dict[K, str] = field(default_factory=dict)
    immediate: frozenset[K] = frozenset()


class PhaseDemotion(Generic[K]):
    """Holds demotions until the flow's phase ends (see the module docstring); keeps the waiting ones."""

    def __init__(self, wait_max_s: float = DEFAULT_WAIT_MAX_S) -> None:
        if not (isinstance(wait_max_s, (int, float)) and math.isfinite(wait_max_s) and wait_max_s >= 0):
            raise ValueError(f"wait_max_s = {wait_max_s!r}: allowed is a finite number of seconds >= 0")
        self.wait_max_s = float(wait_max_s)
        self.waiting: dict[K, Waiting] = {}

    def plan(self, current: Mapping[K, int], wanted: Mapping[K, int],
             busy: Mapping[K, bool] | Callable[[K], bool], now: float,
             hold_until: float | None = None) -> Plan[K]:
        """The levels to write at ``now``.

        ``current``: the level in force per flow (what the last plan returned; a flow without one is
        unmarked and takes its wanted level at once); ``wanted``: the latest decision; ``busy(flow)``
        (or ``busy[flow]``, missing = not busy): the flow's phase goes on; ``hold_until``: the end of
        the lease of the levels in force (None: no bound but ``wait_max_s``). Flows not in ``wanted``
        are left out of the result (their marks go) and stop waiting."""
        is_busy = busy.get if isinstance(busy, Mapping) else busy
        levels: dict[K, int] = {}
        waiting: dict[K, Waiting] = {}
        started: set[K] = set()
        immediate: set[K] = set()
        released: dict[K, str] = {}
        for key, level in wanted.items():
            old = current.get(key)
            if old is None or level >= old:  # new flow, same level or promotion: at once
                levels[key] = level
                continue
            before = self.waiting.get(key)
            if before is None:
                cap = now + self.wait_max_s if hold_until is None else min(now + self.wait_max_s, hold_until)
                w = Waiting(level, now, cap)
            else:
                w = Waiting(level, before.since, before.deadline)
            if now >= w.deadline or not is_busy(key):
                levels[key] = level
                if before is None:
                    immediate.add(key)
                else:
                    released[key] = DEADLINE if now >= w.deadline else PHASE_END
            else:
                levels[key] = old
                waiting[key] = w
                if before is None:
                    started.add(key)
        self.waiting = waiting
        return Plan(levels, dict(waiting), frozenset(started), released, frozenset(immediate))

    def next_deadline(self) -> float | None:
        """When the first waiting demotion runs out of time (None: none waits)."""
        return min((w.deadline for w in self.waiting.values()), default=None)

    def clear(self) -> None:
        """Forget every waiting demotion (the marks were removed)."""
        self.waiting = {}


class FlowActivity(Generic[K]):
    """Which flows sent nothing lately, from successive readings of their byte counters.

    A flow is idle at ``now`` if the latest reading is at most ``quiet_s`` old and its counter has
    not changed over at least ``quiet_s`` of readings (or the latest reading does not list it: the
    datapath saw no packet of it since its entry went). A flow read once only is not idle yet."""

    def __init__(self, quiet_s: float = DEFAULT_QUIET_S) -> None:
        if not (isinstance(quiet_s, (int, float)) and math.isfinite(quiet_s) and quiet_s > 0):
            raise ValueError(f"quiet_s = {quiet_s!r}: allowed is a finite number of seconds > 0")
        self.quiet_s = float(quiet_s)
        self.read_at: float | None = None
        self._since: dict[K, tuple[int, float]] = {}  # flow -> (bytes, first reading that showed them)

    def observe(self, counters: Mapping[K, int], now: float) -> None:
        """Take a reading of every flow's byte counter made at ``now``."""
        old = self._since
        fresh: dict[K, tuple[int, float]] = {}
        for key, nbytes in counters.items():
            seen = old.get(key)
            fresh[key] = seen if seen is not None and seen[0] == nbytes else (nbytes, now)
        self._since, self.read_at = fresh, now

    def idle(self, key: K, now: float) -> bool:
        """True if ``key`` sent nothing over the last ``quiet_s`` as of a reading at most that old."""
        if self.read_at is None or now - self.read_at > self.quiet_s:
            return False  # no recent reading: the flow may have started sending
        seen = self._since.get(key)
        return seen is None or self.read_at - seen[1] >= self.quiet_s
