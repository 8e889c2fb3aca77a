"""Test doubles shared by unit and integration tests (the real parts need root or hardware)."""

from __future__ import annotations

from collections.abc import Mapping

from leveller.model.flow import FlowKey


class RecordingEnforcer:
    """Records the DSCP marks an agent would write into the BPF map (the real datapath needs root)."""

    def __init__(self) -> None:
        self.marks: dict[FlowKey, int] = {}
        self.clears = 0
        self.valid_for: list[float] = []  # the lease given with every apply

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self.marks = dict(marks)
        self.valid_for.append(valid_for_s)

    def clear(self) -> None:
        self.marks = {}
        self.clears += 1
