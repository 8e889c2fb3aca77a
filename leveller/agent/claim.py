"""One agent per interface: an advisory lock that also tells a crashed run's filter from a live one.

The agent holds ``flock`` on /run/leveller/agent-<netns>-<dev>.lock while it
runs. The kernel drops the lock when the process dies, however it dies
(SIGKILL included). So a new agent that gets the lock knows any leveller
filter on that interface is stale and removes it before attaching; one that
does not get it refuses to start (another agent is live there). Lock files of
crashed agents on other interfaces (namespaces long gone) are swept at claim
time with the same lock-then-unlink protocol, so they do not pile up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from leveller.errors import UserError

LOCK_DIR = Path("/run/leveller")


def lock_path(dev: str, netns: str | None) -> Path:
    return LOCK_DIR / f"agent-{netns or 'host'}-{dev}.lock"


@contextlib.contextmanager
def claim_device(dev: str, netns: str | None = None) -> Iterator[int]:
    """Hold the interface for this agent; yields how many stale leveller filters were removed."""
    from leveller.agent.datapath import cleanup_stale  # noqa: PLC0415 (needs pyroute2)

    path = lock_path(dev, netns)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock(path, dev, netns)
    sweep_stale_locks(keep=path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield cleanup_stale(dev, netns)
    finally:
        path.unlink(missing_ok=True)  # while still locked: a waiting opener sees a stale inode, retries
        os.close(fd)  # releases the lock


def _lock(path: Path, dev: str, netns: str | None) -> int:
    """An fd holding the exclusive lock on the file currently at ``path``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            where = f"{dev}" + (f" in netns {netns}" if netns else "")
            raise UserError(f"--dev {where}: another leveller agent (pid {holder}) runs there; "
                            "stop it first") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # we locked a file its previous holder had just removed: take the new one


def sweep_stale_locks(keep: Path) -> int:
    """Remove agent lock files nobody holds (their agent died); returns how many were removed."""
    removed = 0
    for other in LOCK_DIR.glob("agent-*.lock"):
        if other == keep:
            continue
        try:
            fd = os.open(other, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino == os.stat(other).st_ino:
                other.unlink()  # while locked: an opener racing us sees a stale inode and retries
                removed += 1
        except (BlockingIOError, FileNotFoundError):
            pass  # held by a live agent, or already gone
        finally:
            os.close(fd)
    return removed
