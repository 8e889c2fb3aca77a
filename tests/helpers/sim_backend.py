"""The network simulator's water-filling backend chosen for the length of a block (and the environment's
choice again after it): the compiled kernels' tests run both backends on the same input."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from leveller.sim.network import fluid


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """The water-filling backend `name` inside the block, the environment's choice again after it."""
    fluid.set_backend(name)
    try:
        yield
    finally:
        fluid.set_backend(os.environ.get(fluid.ENV, "auto"))
