"""SIGTERM / SIGINT unwind a long run's context managers, in the process that installed them only.

A long run (demo, soak) tears everything down by unwinding its with-blocks when it
is stopped: SIGTERM raises SystemExit, SIGINT KeyboardInterrupt. Python signal
handlers are inherited by forked children, and pyroute2 forks a child for every
namespace operation (netns.create, a socket in a NetNS) and stops it with SIGTERM
once it answered. A child still running Python when that SIGTERM (or a terminal's
Ctrl-C, which reaches the whole process group) arrives would raise in its copy of
the parent's stack and run the parent's cleanup code: `testbed down` of a testbed
that is being built, which removed its run directory and namespaces under the
parent's feet. Here a child that is not the installing process exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def unwind_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises SystemExit(143) and SIGINT KeyboardInterrupt in this process;
    a forked child that inherited the handlers exits with 128 + signal instead (no cleanup of ours runs)."""
    owner = os.getpid()

    def handler(signum: int, _frame: FrameType | None) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
