"""The one way a test waits: poll a condition that can be observed until it holds, with a deadline.

A fixed sleep is a guess (too short on a loaded machine, too long everywhere else); ``wait_until``
returns as soon as the condition holds and fails with what was awaited when it does not. Sleeps that
define a measurement window (a rate over 2 s, an idle period a timer must see) are not waits and stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, message: str | Callable[[], str] = "the condition",
               interval: float = 0.01) -> T:
    """Poll ``condition`` every ``interval`` seconds until it returns something true, and return that.

    After ``timeout`` seconds without it, fail with ``message`` (what was awaited; a callable is evaluated
    only then, so it can show a process's output or a status at that moment). The condition is always
    checked once more at the deadline, so a slow machine that got there in time passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(interval)
