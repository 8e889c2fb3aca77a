"""Exclusive run locks that tell a live holder from a crashed one, and leave no files behind.

A lock is ``flock`` on a file holding the holder's pid. The kernel drops it when
the process dies however it dies (SIGKILL included), so whoever gets the lock
knows any earlier holder is gone. The file is unlinked while still locked on
release; an opener that raced us locked a file no longer at that path, notices
(inode check) and retries, so unlinking is safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from leveller.errors import UserError


@contextlib.contextmanager
def exclusive(path: Path, busy: Callable[[str], str]) -> Iterator[int]:
    """Hold the lock at ``path`` (created, with our pid); ``busy(holder_pid)`` is the UserError
    message when a live process holds it. Yields the locked fd; the file is removed on exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, busy)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        path.unlink(missing_ok=True)  # while still locked: a waiting opener sees a stale inode, retries
        os.close(fd)  # releases the lock


def _acquire(path: Path, busy: Callable[[str], str]) -> int:
    """An fd holding the exclusive lock on the file currently at ``path``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(busy(holder)) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)  # we locked a file its previous holder had just removed: take the new one


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def sweep_stale(directory: Path, pattern: str, keep: Path | None = None) -> int:
    """Remove lock files matching ``pattern`` in ``directory`` that nobody holds (their holder
    died); returns how many were removed."""
    removed = 0
    for other in directory.glob(pattern):
        if other == keep:
            continue
        try:
            fd = os.open(other, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, other):
                other.unlink()  # while locked: an opener racing us sees a stale inode and retries
                removed += 1
        except (BlockingIOError, FileNotFoundError):
            pass  # held by a live process, or already gone
        finally:
            os.close(fd)
    return removed
