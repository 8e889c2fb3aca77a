"""leveller.procs.stop_process: a child that obeys the signal ends at once, one that ignores it is killed
after the grace, and both are reaped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from leveller.procs import stop_process

IGNORES_TERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); " \
               "time.sleep(30)"


def test_a_child_that_obeys_ends_with_the_signal() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    t0 = time.monotonic()
    stop_process(proc, grace=10)
    assert proc.returncode == -signal.SIGTERM and time.monotonic() - t0 < 5


def test_a_child_that_ignores_the_signal_is_killed_after_the_grace() -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"1\n"  # its handler is in place
    stop_process(proc, grace=0.3)
    assert proc.returncode == -signal.SIGKILL


def test_a_child_that_already_ended_is_left_alone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stop_process(proc, sig=signal.SIGINT)
    assert proc.returncode == 0
