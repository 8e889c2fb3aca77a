"""leveller.controller.prune_worker: large decisions pruned in a worker process, with the same result."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from leveller.controller.prune_worker import PruneWorker
from leveller.core.levels import prune
from tests.helpers.levels import random_incidence
from tests.helpers.wait import wait_until


@pytest.mark.timeout(120)
def test_the_worker_prunes_exactly_as_core_and_small_inputs_stay_in_place() -> None:
    with PruneWorker(offload_pairs=1000) as worker:
        small = random_incidence(1, flows=50)
        assert np.array_equal(worker.prune(*small, 4), prune(*small, 4))
        assert worker.pid() is None and worker.in_place == 1  # a small input never starts the worker
        for seed in range(2, 7):
            for k in (2, 8):
                inputs = random_incidence(seed)
                assert np.array_equal(worker.prune(*inputs, k), prune(*inputs, k)), (seed, k)
        assert worker.offloaded >= 8  # the first large one started it and was pruned in place
        assert worker.pid() is not None


@pytest.mark.timeout(120)
def test_a_dead_worker_costs_one_decision_in_place_and_is_replaced() -> None:
    inputs = random_incidence(9)
    want = prune(*inputs, 8)
    with PruneWorker(offload_pairs=1000) as worker:
        worker.prune(*inputs, 8)  # starts it
        assert np.array_equal(worker.prune(*inputs, 8), want) and worker.offloaded == 1
        pid = worker.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                   30, f"the worker (pid {pid}) to die", interval=0.02)
        assert np.array_equal(worker.prune(*inputs, 8), want)  # in place, while a new worker starts
        assert worker.restarts == 1
        assert np.array_equal(worker.prune(*inputs, 8), want)
        assert worker.offloaded == 2 and worker.pid() not in (None, pid)


@pytest.mark.timeout(120)
def test_close_stops_the_worker_and_later_calls_prune_in_place() -> None:
    inputs = random_incidence(11)
    worker = PruneWorker(offload_pairs=1000)
    worker.prune(*inputs, 2)
    worker.prune(*inputs, 2)
    pid = worker.pid()
    assert pid is not None
    worker.close()
    worker.close()  # idempotent
    assert worker.pid() is None
    assert not os.path.exists(f"/proc/{pid}")  # stopped and reaped
    before = worker.in_place
    assert np.array_equal(worker.prune(*inputs, 2), prune(*inputs, 2)) and worker.in_place == before + 1


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="offload_pairs must be >= 0"):
        PruneWorker(offload_pairs=-1)


@pytest.mark.timeout(120)
def test_the_worker_ends_by_itself_when_the_controller_is_killed(tmp_path) -> None:
    import subprocess
    import sys

    script = tmp_path / "controller.py"
    script.write_text(
        "import sys, time\n"
        "from leveller.controller.prune_worker import PruneWorker\n"
        "from tests.helpers.levels import random_incidence\n"
        "w = PruneWorker(offload_pairs=1000)\n"
        "inputs = random_incidence(1)\n"
        "w.prune(*inputs, 2); w.prune(*inputs, 2)\n"
        "print(w.pid(), flush=True)\n"
        "time.sleep(120)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=root))
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert os.path.exists(f"/proc/{pid}")
        proc.kill()  # SIGKILL: no cleanup of ours runs in the controller
        proc.wait()
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10, f"the orphaned worker (pid {pid}) to end",
                   interval=0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
