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

**etcd restored, rebuilt or replaced.** Epochs are etcd revisions, which start again lower when etcd is
restored from an older snapshot or replaced by a fresh cluster; an agent that kept the highest epoch would
then refuse every new leader. Within one etcd history, an older leader's decisions all precede its
successor's election, which precedes the first reply of the successor an agent hears (a leader stops
deciding before its key can expire, leveller.controller.leadership, and a standby takes a key over only
from a holder that never decided, leveller.controller.ha). So a reply of an older epoch whose decision
was made more than half a lease (at least the controllers' TTL) after the agent first heard the newest
epoch cannot come from a deposed leader: it comes from a new etcd history. The fence then starts again
from that epoch (a warning, ``resets`` counted; the agent's ``leveller_agent_fence_resets_total``). Only
report replies count (the request's departure bounds the decision time from below; a push's arrival does
not), and never epoch 0. No agent restart, no operator action.
"""

from __future__ import annotations

import logging
import math
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
    resets: int = 0  # times a new etcd history was followed (see the module docstring)
    newest_since: float = -math.inf  # the caller's monotonic time ``newest`` was first admitted
    applied: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=MAX_APPLIED_LOG))

    def admit(self, epoch: int, now: float = 0.0, decided_after: float | None = None, lease_s: float = 0.0) -> bool:
        """True if levels of leader ``epoch`` may be applied at monotonic time ``now`` (it is the newest
        seen, and becomes so; or it is older, and the reply's decision, made no earlier than
        ``decided_after``, is more than ``lease_s`` / 2 later than the newest epoch was first heard: a
        new etcd history, which the fence follows from then on)."""
        if epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {epoch!r}")
        if epoch < self.newest:
            if epoch == 0 or decided_after is None or not decided_after - self.newest_since > lease_s / 2:
                self.refused += 1
                return False
            LOG.warning("leader epoch %d, decided %.1f s after epoch %d was first heard: etcd was restored or "
                        "replaced (its revisions start again lower); following epoch %d from now on",
                        epoch, decided_after - self.newest_since, self.newest, epoch)
            self.resets += 1
            self.newest, self.newest_since = epoch, now
            return True
        if epoch > self.newest or self.newest_since == -math.inf:
            self.newest_since = now
        self.newest = epoch
        return True

    def note_applied(self, now: float, epoch: int) -> None:
        """Record that levels of ``epoch`` were applied at ``now`` (kept when the epoch changes only)."""
        if not self.applied or self.applied[-1][1] != epoch:
            self.applied.append((now, epoch))
            LOG.info(APPLIED_FORMAT, epoch, now)
