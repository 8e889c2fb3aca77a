"""Epoch fencing: an agent obeys only the newest leader it has heard of.

With ``leveller controller --etcd``, one controller at a time is the leader and every reply it sends
carries its **leader epoch**: the etcd revision at which its election key was created, which grows with
every election. Two controllers may both believe they lead for a moment (a leader cut from etcd keeps
deciding until its own lease guard runs out, a reply may be late on the wire), so an agent keeps the
highest epoch it has seen and refuses levels of any lower one: once a host has heard from leader N+1,
nothing leader N says is applied there again. Epoch 0 is a controller without an election (no
``--etcd``): it is accepted only while no elected leader has been heard from, so mixing a lone
controller into an elected cluster cannot undo the fence either. No clock: the caller passes the
times in. Every change of the epoch applied is logged ("applied levels of leader epoch N at T", T the
agent's wall clock), so a run's logs show which leader each agent obeyed when (the live tests read them).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

LOG = logging.getLogger("leveller.agent.fencing")
APPLIED_FORMAT = "applied levels of leader epoch %d at %.6f"  # tests parse it
MAX_APPLIED_LOG = 256  # (time, epoch) entries kept of the epochs applied: the live tests read them


@dataclass
class EpochFence:
    """The newest leader epoch seen; :meth:`admit` says whether a reply's levels may be applied."""

    newest: int = 0
    refused: int = 0  # replies refused for an older epoch (also counted in the agent's metrics)
    applied: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=MAX_APPLIED_LOG))

    def admit(self, epoch: int) -> bool:
        """True if levels of leader ``epoch`` may be applied (it is the newest seen; it becomes so)."""
        if epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {epoch!r}")
        if epoch < self.newest:
            self.refused += 1
            return False
        self.newest = epoch
        return True

    def note_applied(self, now: float, epoch: int) -> None:
        """Record that levels of ``epoch`` were applied at ``now`` (kept when the epoch changes only)."""
        if not self.applied or self.applied[-1][1] != epoch:
            self.applied.append((now, epoch))
            LOG.info(APPLIED_FORMAT, epoch, now)
