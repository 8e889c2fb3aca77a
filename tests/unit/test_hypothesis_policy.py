"""The test policy in tests/conftest.py: a slow example is not a failure.

A correct property test failed under mutmut on a loaded machine (one example took 527 ms against
Hypothesis' default 200 ms deadline). This test's first example is slower than that deadline; it
fails with DeadlineExceeded / FlakyFailure unless the project's profile has turned the deadline off."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

_seen: list[int] = []


@settings(max_examples=3, database=None)
@given(st.integers())
def test_a_slow_example_is_not_a_failure(n: int) -> None:
    if not _seen:
        time.sleep(0.3)  # a GC pause, a busy neighbour, mutmut's trampolines
    _seen.append(n)
