"""One agent per interface: a run lock that also tells a crashed run's filter from a live one.

The agent holds /run/leveller/agent-<netns>:<dev>.lock (agent:<dev>.lock in the
host's namespace; leveller.locking) while it runs. Neither a namespace nor an
interface name may hold ':', so one file names one (netns, dev) pair: with '-'
between them, netns a-b with dev c and netns a with dev b-c shared a lock (the
second agent refused to start, or swept the first's filter as stale), and so did
netns "host" and the host's namespace. A new agent that gets the lock knows any leveller filter on that
interface is stale (its agent died) and removes it before attaching; one that
does not get it refuses to start (another agent is live there). Lock files of
crashed agents on other interfaces (namespaces long gone) are swept at claim
time, so they do not pile up.

Names are checked (leveller.agent.names) before any file is touched, and the
lock path must lie directly in LOCK_DIR: a name like ``../../tmp/x`` can
neither create nor remove anything elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from leveller.agent.names import check_ifname, check_netns
from leveller.errors import UserError
from leveller.locking import exclusive, sweep_stale

LOCK_DIR = Path("/run/leveller")


def lock_path(dev: str, netns: str | None, lock_dir: Path = LOCK_DIR) -> Path:
    """The lock file of interface ``dev`` (in ``netns``): always a file directly in ``lock_dir``."""
    check_ifname(dev)
    if netns is not None:
        check_netns(netns)
    path = lock_dir / (f"agent-{netns}:{dev}.lock" if netns is not None else f"agent:{dev}.lock")
    if path.parent != lock_dir or path.name in (".", ".."):
        raise UserError(f"--dev {dev!r} / --netns {netns!r}: the lock file {path} would not be in {lock_dir}")
    return path


@contextlib.contextmanager
def claim_device(dev: str, netns: str | None = None, lock_dir: Path = LOCK_DIR) -> Iterator[int]:
    """Hold the interface for this agent; yields how many stale leveller filters were removed."""
    from leveller.agent.datapath import cleanup_stale  # needs pyroute2

    path = lock_path(dev, netns, lock_dir)  # checks the names before anything touches a file
    where = dev + (f" in netns {netns}" if netns else "")
    with exclusive(path, lambda holder: f"--dev {where}: another leveller agent (pid {holder}) runs there; "
                                        "stop it first"):
        sweep_stale(lock_dir, "agent*.lock", keep=path)  # also the agent-<netns>-<dev>.lock of older versions
        yield cleanup_stale(dev, netns)
