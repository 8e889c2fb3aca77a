"""Interpreter settings for the controller process: garbage collection paced by the controller.

At 1,000 agents the controller holds a large heap that lives long (every flow,
each host's remembered report entries) and receives 1,000 reports a second, each
leaving objects that live about one report interval. With CPython's default
thresholds those objects reach the older generations and set off collections
that traverse the whole heap: measured with `leveller bench controller` (1,000
agents x 100 flows), gen1 pauses of 25-35 ms and full collections of 75-160 ms
every few seconds, and reports queued behind them (p99 above 500 ms). So:

- only the youngest generation is collected automatically (its pauses stay a
  few milliseconds); objects that outlive it are freed by reference counting
  as usual, and only reference cycles wait for the next full collection;
- every ``every_s`` seconds (default 60), between two decisions
  (``after_step``), a collection of everything but the frozen heap, which is
  then frozen (``gc.freeze``: live objects are left out of later collections;
  they are still freed by reference counting when they die); so its pause is
  proportional to what was allocated since, not to the heap (measured: 20-40 ms
  instead of 150-190 ms at 100,000 flows);
- every ``thaw_every`` such collections (default 10, i.e. ten minutes) the
  frozen heap is thawed first, so reference cycles that died frozen are
  reclaimed too: cyclic garbage stays bounded, at one full pause per period;
- a 0.5 ms switch interval: the thread answering reports gets the interpreter
  back from a long decision step within 0.5 ms instead of 5.

Process-wide; only the controller process installs it (`leveller controller`,
`leveller bench controller`). ``uninstall`` restores what was there.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

YOUNG_THRESHOLD = 700  # CPython's own gen0 threshold: short pauses
NEVER = 1_000_000_000  # an older-generation threshold that is never reached
SWITCH_INTERVAL_S = 0.0005
EVERY_S = 60.0
THAW_EVERY = 10


class GcPacer:
    """Young-only automatic collection, the rest every ``every_s`` (see the module doc)."""

    def __init__(self, every_s: float = EVERY_S, thaw_every: int = THAW_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s!r}")
        if thaw_every < 1:
            raise ValueError(f"thaw_every must be >= 1, got {thaw_every!r}")
        self.every_s, self.thaw_every, self.clock = every_s, thaw_every, clock
        self.next_at = clock() + every_s
        self.collections = 0
        self.collected = 0  # unreachable objects found by the paced collections
        self._saved: tuple[tuple[int, int, int], float] | None = None

    def install(self) -> GcPacer:
        """Set the thresholds and the switch interval for this process (returns self)."""
        if self._saved is None:
            self._saved = (gc.get_threshold(), sys.getswitchinterval())
        gc.set_threshold(YOUNG_THRESHOLD, NEVER, NEVER)
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        return self

    def uninstall(self) -> None:
        """Put back the thresholds and switch interval found by ``install``; thaw the frozen heap."""
        if self._saved is not None:
            (t0, t1, t2), interval = self._saved
            gc.set_threshold(t0, t1, t2)
            sys.setswitchinterval(interval)
            self._saved = None
        gc.unfreeze()

    def after_step(self) -> bool:
        """Between decisions: the paced collection if one is due (see the module doc). True if it ran."""
        now = self.clock()
        if now < self.next_at:
            return False
        self.collections += 1
        if self.collections % self.thaw_every == 0:
            gc.unfreeze()
        self.collected += gc.collect()
        gc.freeze()
        self.next_at = now + self.every_s
        return True
