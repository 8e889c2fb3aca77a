"""BpfEnforcer on the real kernel map of bpf/flow_marker.c (loaded, attached nowhere).

The map is read back from the kernel after every change; a thin wrapper counts the bpf() batch calls
the enforcer makes and how many entries each carries (the calls themselves go to the kernel).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from leveller.agent.datapath import Datapath, DatapathError, load_detached
from leveller.agent.enforce_bpf import BpfEnforcer
from leveller.model.flow import FlowKey, flow_key

pytestmark = pytest.mark.privileged


class Counted:
    """The real Datapath, with a log of the batch calls: (kind, entries)."""

    def __init__(self, dp: Datapath) -> None:
        self.dp, self.calls = dp, []  # type: ignore[var-annotated]
        self.max_marked_flows = dp.max_marked_flows

    def write_dscp(self, keys: np.ndarray, marks: np.ndarray) -> None:
        self.calls.append(("write", len(keys)))
        self.dp.write_dscp(keys, marks)

    def delete_dscp(self, keys: np.ndarray) -> None:
        self.calls.append(("delete", len(keys)))
        self.dp.delete_dscp(keys)

    def set_lease(self, valid_for_s: float) -> None:
        self.calls.append(("lease", valid_for_s))
        self.dp.set_lease(valid_for_s)


@pytest.fixture
def datapath() -> Iterator[Datapath]:
    dp = load_detached(max_flows=64, max_marked_flows=4096)
    try:
        yield dp
    finally:
        dp.detach()


def flows(n: int, start: int = 0) -> list[FlowKey]:
    return [flow_key("10.7.0.1", f"10.7.{i // 250}.{i % 250 + 1}", 2000 + i, 4791, "udp") for i in range(start, n)]


def kernel(dp: Datapath) -> dict[Any, int | None]:
    return dp.read_dscp()


def test_only_changes_are_written_one_batch_each(datapath: Datapath) -> None:
    counted = Counted(datapath)
    enf = BpfEnforcer(counted)
    keys = flows(3000)
    enf.apply(dict.fromkeys(keys, 16), 30)
    assert counted.calls == [("write", 3000), ("lease", 30)]
    assert kernel(datapath) == {k: 16 for k in keys}
    counted.calls.clear()
    marks = dict.fromkeys(keys, 16) | {keys[5]: 8, keys[2999]: 8}
    del marks[keys[7]]
    enf.apply(marks, 30)  # two changed, one gone, 2,997 unchanged
    assert counted.calls == [("write", 2), ("delete", 1), ("lease", 30)]
    assert kernel(datapath) == dict(marks)
    counted.calls.clear()
    enf.apply(marks, 30)
    assert counted.calls == [("lease", 30)]  # no map write, only the lease renewed
    counted.calls.clear()
    enf.clear()
    assert counted.calls == [("lease", 0), ("delete", 2999)] and kernel(datapath) == {} and enf.current == {}


def test_a_refused_batch_changes_nothing() -> None:
    small = load_detached(max_flows=64, max_marked_flows=8)
    try:
        enf = BpfEnforcer(small)
        first = dict.fromkeys(flows(4), 24)
        enf.apply(first, 30)
        small.max_marked_flows = 100  # hide the real size: the kernel itself must refuse the batch
        with pytest.raises(DatapathError, match="nothing changed"):
            enf.apply({k: 32 for k in flows(12)}, 30)  # 4 rewritten + 8 new > 8 entries
        assert kernel(small) == {k: 24 for k in first}
        assert enf.current == first
        enf.apply({k: 40 for k in flows(6)}, 30)  # fits: the enforcer's record of the map is still right
        assert kernel(small) == {k: 40 for k in flows(6)}
    finally:
        small.detach()


def test_limits_and_bad_values_are_refused_before_the_kernel(datapath: Datapath) -> None:
    counted = Counted(datapath)
    enf = BpfEnforcer(counted)
    counted.max_marked_flows = 5
    with pytest.raises(DatapathError, match="max_marked_flows=5"):
        enf.apply(dict.fromkeys(flows(6), 8), 30)
    with pytest.raises(DatapathError, match="DSCP"):
        enf.apply({flows(1)[0]: 64}, 30)
    assert counted.calls == [] and kernel(datapath) == {}
