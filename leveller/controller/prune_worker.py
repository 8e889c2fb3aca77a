"""The pruning of a large decision in a worker process, so the controller's interpreter stays free.

At 100,000 flows the pruning (leveller.core.levels.prune: K rounds of connected
components over the flow-link incidence) is about 40 ms of the decision's 55 ms
of CPU. In the controller's process it competes for the interpreter lock with
the event loop answering 1,000 reports a second: measured with `leveller bench
controller`, decision steps stretched to 330 ms of wall time and reports queued
behind them (p99 65-135 ms). In a worker process the pruning runs on the other
core while the decision step waits on a pipe without the lock (step 129 ms,
report p99 37 ms in the same conditions).

Since the controller prunes one flow per class (the flows of one job on one path,
leveller.controller.decide.flow_classes), the generated cluster's 100,000 flows
are 5,616 classes and 20,602 pairs, pruned in place in about 6 ms: the worker now
serves clusters whose flows rarely share a path (e.g. all-to-all over many ports).

Same function, same inputs, same output: the worker calls core.levels.prune on
the arrays it is sent (int32 on the way: ids and ranks of up to 2**31 flows).
Inputs below ``offload_pairs`` (flow-link pairs) are pruned in place, where the
transfer would cost more than it saves; so a small cluster never starts the
worker. The first large decision starts it and is pruned in place while the
worker imports; the next ones go to it. If the worker dies, that decision is
pruned in place and a new worker is started for the next one. The worker ends
by itself within a second when the controller's process is gone, even killed
(it watches its parent).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from leveller.core.levels import prune

LOG = logging.getLogger("leveller.controller")
OFFLOAD_PAIRS = 50_000


def _ready() -> bool:
    return True


def _watch_parent(parent: int) -> None:
    """Worker initializer: exit as soon as ``parent`` is no longer this process's parent (it died)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


class PruneWorker:
    """``prune`` with large inputs sent to one worker process (see the module doc); thread-safe."""

    def __init__(self, offload_pairs: int = OFFLOAD_PAIRS) -> None:
        if offload_pairs < 0:
            raise ValueError(f"offload_pairs must be >= 0, got {offload_pairs!r}")
        self.offload_pairs = offload_pairs
        self.offloaded = self.in_place = self.restarts = 0
        self._lock = threading.Lock()
        self._closed = False
        self._pool: ProcessPoolExecutor | None = None

    @staticmethod
    def _start() -> ProcessPoolExecutor:
        # spawn: a fresh interpreter, never a fork of a process that runs gRPC threads
        pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_watch_parent, initargs=(os.getpid(),))
        pool.submit(_ready)  # starts the worker now, not at the first large decision
        return pool

    def offloads(self, pairs: int) -> bool:
        """True if an incidence of ``pairs`` flow-link pairs goes to the worker: the controller then waits
        for it in its step's thread, and prunes anything smaller on its report thread
        (leveller.controller.service)."""
        return pairs >= self.offload_pairs and not self._closed

    def __call__(self, rank: np.ndarray, inc_flow: np.ndarray, inc_link: np.ndarray, n_links: int,
                 k: int) -> np.ndarray:
        """``prune``: the worker is the controller's pruner (a Pruner that knows what it offloads)."""
        return self.prune(rank, inc_flow, inc_link, n_links, k)

    def prune(self, rank: np.ndarray, inc_flow: np.ndarray, inc_link: np.ndarray, n_links: int,
              k: int) -> np.ndarray:
        """leveller.core.levels.prune, in the worker when the incidence has ``offload_pairs`` pairs or more."""
        pool = None
        if self.offloads(len(inc_flow)):
            with self._lock:
                if not self._closed:
                    pool = self._pool
                    if pool is None:
                        self._pool = self._start()  # for the next large decision; this one is pruned here
        if pool is None:
            self.in_place += 1
            return prune(rank, inc_flow, inc_link, n_links, k)
        if len(rank) >= 2**31 or n_links >= 2**31:
            raise ValueError(f"{len(rank)} flows / {n_links} links: more than the worker's int32 ids hold")
        try:
            levels = pool.submit(prune, np.asarray(rank, dtype=np.int32),
                                 np.asarray(inc_flow, dtype=np.int32), np.asarray(inc_link, dtype=np.int32),
                                 n_links, k).result()
        except BrokenProcessPool:
            LOG.warning("the pruning worker process died; this decision is pruned in place, a new worker starts")
            with self._lock:
                if self._pool is pool and not self._closed:
                    self._pool = self._start()
                    self.restarts += 1
            self.in_place += 1
            return prune(rank, inc_flow, inc_link, n_links, k)
        self.offloaded += 1
        return levels

    def pid(self) -> int | None:
        """The worker process's pid (None when there is none); for tests and diagnostics."""
        procs = getattr(self._pool, "_processes", None) or {}
        return next(iter(procs), None)

    def close(self) -> None:
        """Stop the worker (idempotent); later calls prune in place."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> PruneWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
