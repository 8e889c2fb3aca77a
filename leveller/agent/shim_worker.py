"""How the agent keeps one shim's slowness from costing the others anything (issue 41, finding 2).

Every shim socket is served by a process of a job's user, who can also serve it with a program of
their own that answers some requests and never others. Two pieces bound what that costs:

- :class:`Backoff`: a shim that failed an exchange (no answer in time, an invalid answer, refused)
  is left alone for 2 s, doubling at each failure in a row up to 60 s. An exchange that succeeds
  clears only the failure of that same kind of exchange: a shim that answers ``list`` at once and
  never answers ``lease`` keeps its ``lease`` failure, so its delay keeps doubling (a success of
  ``list`` used to reset it before every lease, and the agent waited on it at every report).
- :class:`ShimWorkers`: the agent's report/apply path never talks to a shim itself. It posts
  what each shim should have (its QPs' classes and lease) and returns; threads of a pool of their
  own do the exchanges, one shim at a time per thread and never two pieces of work for the same
  shim at once. Only the latest piece of work per shim waits: a shim still busy with an old one
  gets the newest when it is done (latest wins), so a slow shim never builds a queue, and the other
  shims' work runs on the other threads meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Generic, TypeVar

BACKOFF_S = (2.0, 60.0)  # a shim that failed is left alone this long, doubling up to the maximum
SHIM_WORKERS = 32  # shims talked to at once (each exchange is bounded, see leveller.agent.enforce_shim)

W = TypeVar("W")


class Backoff:
    """Shims left alone after a failure, per socket and kind of exchange (thread-safe).

    ``on_failed(op)`` is called at each failure (the agent counts them in a metric)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic, first_s: float = BACKOFF_S[0],
                 max_s: float = BACKOFF_S[1], on_failed: Callable[[str], None] | None = None) -> None:
        self.monotonic, self.first_s, self.max_s, self.on_failed = monotonic, first_s, max_s, on_failed
        self._entries: dict[Path, tuple[float, float, frozenset[str]]] = {}  # until, delay, failed ops
        self.counts: Counter[str] = Counter()  # failures by kind of exchange
        self._lock = threading.Lock()

    def usable(self, path: Path) -> bool:
        """False while the shim at ``path`` is left alone after a failure."""
        return self.left_s(path) <= 0

    def left_s(self, path: Path) -> float:
        """Seconds the shim at ``path`` is still left alone (0: it may be asked)."""
        with self._lock:
            entry = self._entries.get(Path(path))
        return max(0.0, entry[0] - self.monotonic()) if entry is not None else 0.0

    def delay_s(self, path: Path) -> float:
        """The delay of the shim's current run of failures (0: none)."""
        with self._lock:
            entry = self._entries.get(Path(path))
        return entry[1] if entry is not None else 0.0

    def failed(self, path: Path, op: str) -> float:
        """The shim at ``path`` failed an exchange ``op`` (list, lease, set_tc, clear): leave it alone for
        twice as long as the last time in this run of failures (at least ``first_s``, at most ``max_s``);
        returns that delay."""
        path = Path(path)
        with self._lock:
            _, last, ops = self._entries.get(path, (0.0, 0.0, frozenset()))
            delay = min(self.max_s, max(self.first_s, 2 * last))
            self._entries[path] = (self.monotonic() + delay, delay, ops | {op})
            self.counts[op] += 1
        if self.on_failed is not None:
            self.on_failed(op)
        return delay

    def answered(self, path: Path, op: str) -> None:
        """The shim at ``path`` answered an exchange ``op``: that kind of failure is over. The run of
        failures (and its delay) ends only when no kind of exchange it failed is still failing."""
        path = Path(path)
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or op not in entry[2]:
                return
            ops = entry[2] - {op}
            if ops:
                self._entries[path] = (entry[0], entry[1], ops)
            else:
                del self._entries[path]

    def keep_only(self, paths: Iterable[Path]) -> None:
        """Forget the shims not in ``paths`` (their sockets are gone)."""
        keep = {Path(p) for p in paths}
        with self._lock:
            for gone in set(self._entries) - keep:
                del self._entries[gone]

    def left_alone(self) -> int:
        """How many shims are left alone now."""
        now = self.monotonic()
        with self._lock:
            return sum(1 for until, _, _ in self._entries.values() if until > now)


class ShimWorkers(Generic[W]):
    """Runs ``run(path, work)`` per shim socket on a pool of ``workers`` threads: at most one piece of
    work per socket at a time, and only the latest posted one waits (see the module docstring)."""

    def __init__(self, run: Callable[[Path, W], None], workers: int = SHIM_WORKERS,
                 name: str = "leveller-shim") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._pending: dict[Path, W] = {}
        self._running: set[Path] = set()
        self._cv = threading.Condition()
        self._closed = False
        self.superseded = 0  # pieces of work replaced by a newer one before they ran

    def post(self, path: Path, work: W) -> None:
        """Have ``work`` done for the shim at ``path``, replacing any of its work not started yet."""
        path = Path(path)
        with self._cv:
            if self._closed:
                return
            self.superseded += path in self._pending
            self._pending[path] = work
            if path in self._running:
                return  # its thread takes the newest when the current piece is done
            self._running.add(path)
        self._pool.submit(self._drain, path)

    def _drain(self, path: Path) -> None:
        while True:
            with self._cv:
                if path not in self._pending:
                    self._running.discard(path)
                    self._cv.notify_all()
                    return
                work = self._pending.pop(path)
            try:
                self._run(path, work)
            except Exception:  # a bug must not wedge this shim's lane: its next work runs again
                import logging

                logging.getLogger("leveller.agent.shim").exception("shim %s: work failed", path)

    def newer(self, path: Path) -> bool:
        """True if newer work waits for the shim at ``path`` (the running piece may stop early)."""
        with self._cv:
            return Path(path) in self._pending

    def busy(self) -> int:
        """Shims with work running or waiting."""
        with self._cv:
            return len(self._running | set(self._pending))

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until no work runs or waits; True if none does."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._running or self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def close(self, timeout_s: float) -> bool:
        """Let the work posted so far finish for up to ``timeout_s``, then take no more; True if it all
        finished. An exchange still running ends by its own deadline (the process waits for it at exit)."""
        idle = self.wait_idle(timeout_s)
        with self._cv:
            self._closed = True
            self._pending.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return idle
