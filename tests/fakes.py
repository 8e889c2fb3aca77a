"""Test doubles shared by unit and integration tests (the real parts need root or hardware)."""

from __future__ import annotations

from typing import Mapping

from leveller.core.paths import FlowKey


class RecordingEnforcer:
    """Records the DSCP marks an agent would write into the BPF map (the real datapath needs root)."""

    def __init__(self) -> None:
        self.marks: dict[FlowKey, int] = {}
        self.clears = 0

    def apply(self, marks: Mapping[FlowKey, int]) -> None:
        self.marks = dict(marks)

    def clear(self) -> None:
        self.marks = {}
        self.clears += 1
