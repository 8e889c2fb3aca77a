"""One agent per interface: a run lock that also tells a crashed run's filter from a live one.

The agent holds /run/leveller/agent-<netns>-<dev>.lock (leveller.locking) while
it runs. A new agent that gets the lock knows any leveller filter on that
interface is stale (its agent died) and removes it before attaching; one that
does not get it refuses to start (another agent is live there). Lock files of
crashed agents on other interfaces (namespaces long gone) are swept at claim
time, so they do not pile up.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from leveller.locking import exclusive, sweep_stale

LOCK_DIR = Path("/run/leveller")


def lock_path(dev: str, netns: str | None) -> Path:
    return LOCK_DIR / f"agent-{netns or 'host'}-{dev}.lock"


@contextlib.contextmanager
def claim_device(dev: str, netns: str | None = None) -> Iterator[int]:
    """Hold the interface for this agent; yields how many stale leveller filters were removed."""
    from leveller.agent.datapath import cleanup_stale  # noqa: PLC0415 (needs pyroute2)

    where = dev + (f" in netns {netns}" if netns else "")
    path = lock_path(dev, netns)
    with exclusive(path, lambda holder: f"--dev {where}: another leveller agent (pid {holder}) runs there; "
                                        "stop it first"):
        sweep_stale(LOCK_DIR, "agent-*.lock", keep=path)
        yield cleanup_stale(dev, netns)
