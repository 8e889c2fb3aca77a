"""Overlap rule: communication that can wait yields the link while it may.

If a job's communication starting at t_i can be delayed by up to ``slack``
without stalling the next operation (e.g. DDP AllReduce during the backward
pass), the host agent demotes its flows to the lowest level inside
``[t_i, t_i + slack)`` and restores the controller's level afterwards. No
coordination is needed: the decision uses only local times.
"""

from __future__ import annotations

from leveller.core.rate import Number


def effective_level(assigned: int, comm_start: Number, slack: Number, now: Number, lowest: int = 0) -> int:
    """Level a flow uses at ``now``: ``lowest`` inside the slack window, else ``assigned``."""
    if slack < 0:
        raise ValueError(f"slack must be >= 0, got {slack!r}")
    if comm_start <= now < comm_start + slack:
        return lowest
    return assigned
