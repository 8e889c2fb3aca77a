"""Lease on the controller's levels: stale priorities are worse than none.

A fresh decision grants levels until ``lease_s`` after it was made
(leveller.agent.service computes how long that is from the reply). When the
lease runs out (controller unreachable, refusing us, or deciding nothing new),
the agent clears every DSCP rewrite through its enforcer, once, and traffic
goes back to plain flow-fair sharing until a fresh decision arrives; the
datapath enforces the same deadline by itself. Pure: time is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Lease:
    """When the current levels stop being valid (None: never granted or already expired)."""

    expires_at: float | None = None

    def renew(self, now: float, lease_s: float) -> None:
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        self.expires_at = now + lease_s

    def valid(self, now: float) -> bool:
        return self.expires_at is not None and now < self.expires_at

    def expire_if_due(self, now: float) -> bool:
        """True exactly once when the lease has run out (the caller then clears all marks)."""
        if self.expires_at is not None and now >= self.expires_at:
            self.expires_at = None
            return True
        return False
