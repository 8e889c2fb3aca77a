"""unwind_on_signals: SIGTERM/SIGINT unwind the installing process's with-blocks, never a forked child's copy.

Regression: pyroute2 forks a child per namespace operation and stops it with SIGTERM;
with a plain `raise SystemExit` handler inherited by that child, the child ran the
demo's cleanup (`testbed down`) while the parent was still building the testbed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from leveller.experiments.shared.interrupts import unwind_on_signals


def _fork_and_signal(sig: int, marker: Path) -> int:
    """Fork a child that waits inside a try/except BaseException (its copy of our cleanup),
    signal it, and return its exit code; the marker exists if the cleanup ran in the child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: like pyroute2's, still running Python when the signal comes
        try:
            os.close(r)
            os.write(w, b"x")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.005)
            os._exit(0)
        except BaseException:
            marker.write_text("the child ran its parent's cleanup")
            os._exit(99)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    os.kill(pid, sig)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_forked_child_exits_without_running_our_cleanup(sig: int, tmp_path: Path) -> None:
    marker = tmp_path / "cleanup-ran"
    with unwind_on_signals():
        code = _fork_and_signal(sig, marker)
    assert not marker.exists()
    assert code == 128 + sig


def test_in_the_installing_process_the_signals_unwind_and_handlers_are_restored() -> None:
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    with pytest.raises(SystemExit) as exc:
        with unwind_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert exc.value.code == 143
    with pytest.raises(KeyboardInterrupt):
        with unwind_on_signals():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
