"""BpfEnforcer on the real kernel maps of bpf/flow_marker.c (loaded, attached nowhere).

The maps are read back from the kernel after every change; a thin wrapper logs every bpf() batch call
made on the datapath's maps while the enforcer works, and how many entries each carries (the calls
themselves go to the kernel). A mark changed for a flow that holds a slot is a store into the mmap'd
mark array: no call at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from leveller.agent import libbpf
from leveller.agent.datapath import Datapath, DatapathError, load_detached
from leveller.agent.enforce_bpf import BpfEnforcer
from leveller.agent.flow_structs import KEY_FORMAT, SLOT_FORMAT
from leveller.agent.slots import SlotTable
from leveller.model.flow import FlowKey, flow_key

from .support import reset_datapath

pytestmark = pytest.mark.privileged


class Counted:
    """The real Datapath, with a log of the batch calls on its DSCP maps, ("write" | "delete", entries),
    and of its lease writes, ("lease", seconds); any other batch call on its maps is logged too."""

    def __init__(self, dp: Datapath, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dp, self.calls = dp, []  # type: ignore[var-annotated]
        self.max_marked_flows = dp.max_marked_flows
        update, delete = libbpf.map_update_batch, libbpf.map_delete_batch

        def logged_update(fd: int, keys: Any, values: Any, count: int) -> None:
            if fd != dp._lease_fd:
                self.calls.append(("write" if fd == dp._dscp_fd else f"update fd {fd}", count))
            update(fd, keys, values, count)

        def logged_delete(fd: int, keys: Any, count: int) -> None:
            self.calls.append(("delete" if fd == dp._dscp_fd else f"delete fd {fd}", count))
            delete(fd, keys, count)

        monkeypatch.setattr(libbpf, "map_update_batch", logged_update)
        monkeypatch.setattr(libbpf, "map_delete_batch", logged_delete)

    @property
    def slots(self) -> SlotTable:
        return self.dp.slots

    def change_marks(self, *args: Any) -> np.ndarray:
        return self.dp.change_marks(*args)

    def set_lease(self, valid_for_s: float) -> None:
        self.calls.append(("lease", valid_for_s))
        self.dp.set_lease(valid_for_s)


@pytest.fixture(scope="module")
def loaded() -> Iterator[Datapath]:
    """One program for the module's tests that take the default sizes: bcc compiles it for seconds."""
    dp = load_detached(max_flows=64, max_marked_flows=4096)
    try:
        yield dp
    finally:
        dp.detach()


@pytest.fixture
def datapath(loaded: Datapath) -> Datapath:
    """The module's program as a freshly loaded one (support.reset_datapath)."""
    return reset_datapath(loaded)


def flows(n: int, start: int = 0) -> list[FlowKey]:
    return [flow_key("10.7.0.1", f"10.7.{i // 250}.{i % 250 + 1}", 2000 + i, 4791, "udp") for i in range(start, n)]


def kernel(dp: Datapath) -> dict[Any, int | None]:
    return dp.read_dscp()


def slot_entries(dp: Datapath) -> dict[bytes, int]:
    """flow_dscp_egress as the kernel holds it: packed flow key -> slot."""
    rows = libbpf.map_lookup_all(dp._dscp_fd, KEY_FORMAT.size, SLOT_FORMAT.size, dp.mark_slots)
    return {k: SLOT_FORMAT.unpack(v)[0] for k, v in rows}


def test_only_new_and_leaving_flows_take_a_batch_call(datapath: Datapath, monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(datapath, monkeypatch)
    enf = BpfEnforcer(counted)
    keys = flows(3000)
    enf.apply(dict.fromkeys(keys, 16), 30)
    assert counted.calls == [("write", 3000), ("lease", 30)]
    assert kernel(datapath) == {k: 16 for k in keys}
    counted.calls.clear()
    marks = dict.fromkeys(keys, 16) | {keys[5]: 8, keys[2999]: 8}
    del marks[keys[7]]
    enf.apply(marks, 30)  # two changed (stores into the mark array), one gone, 2,997 unchanged
    assert counted.calls == [("delete", 1), ("lease", 30)]
    assert kernel(datapath) == dict(marks) and enf.current == marks
    counted.calls.clear()
    every = {k: 24 for k in marks}
    enf.apply(every, 30)  # every flow changes, none comes or goes: no call but the lease
    assert counted.calls == [("lease", 30)]
    assert kernel(datapath) == every
    counted.calls.clear()
    enf.apply({FlowKey(*k): v for k, v in every.items()}, 30)  # equal keys, other objects: nothing to write
    assert counted.calls == [("lease", 30)] and kernel(datapath) == every
    counted.calls.clear()
    back = every | {keys[7]: 8, flows(3001, 3000)[0]: 8}  # the one that left comes back, one new
    enf.apply(back, 30)
    assert counted.calls == [("write", 2), ("lease", 30)] and kernel(datapath) == back
    counted.calls.clear()
    enf.clear()
    assert counted.calls == [("lease", 0), ("delete", 3001)] and kernel(datapath) == {} and enf.current == {}
    assert not datapath.read_mark_array().any() and len(datapath.slots) == 0


def test_reordered_or_changed_flow_lists_find_their_own_slots(datapath: Datapath,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The slots of the last call are reused only for the same flows in the same order: any other list
    is looked up again, so no flow ever writes into another's slot."""
    enf = BpfEnforcer(datapath)
    keys = flows(50)
    enf.apply({k: i % 60 + 1 for i, k in enumerate(keys)}, 30)
    reordered = {k: i % 60 + 2 for i, k in enumerate(reversed(keys))}
    enf.apply(reordered, 30)
    assert kernel(datapath) == reordered
    datapath.clear_dscp(keys[:3])  # the datapath's own writer in between: the slots move
    datapath.set_dscp({keys[0]: 40})
    enf.apply(reordered, 30)
    assert kernel(datapath) == reordered
    slots = [datapath.slots.slot_of[k] for k in keys]
    assert len(set(slots)) == len(keys) and slot_entries(datapath) == dict(zip(
        (k.tobytes() for k in datapath.slots.records[slots]), slots))


def test_a_refused_batch_changes_nothing() -> None:
    small = load_detached(max_flows=64, max_marked_flows=8)
    try:
        enf = BpfEnforcer(small)
        first = dict.fromkeys(flows(4), 24)
        enf.apply(first, 30)
        before = slot_entries(small), small.read_mark_array(), small.slots.pool.free
        small.max_marked_flows = 100  # hide the real size: the kernel itself must refuse the batch
        with pytest.raises(DatapathError, match="nothing changed"):
            enf.apply({k: 32 for k in flows(12)}, 30)  # 4 rewritten + 8 new > 8 entries: refused after 4 new
        assert kernel(small) == {k: 24 for k in first}
        after = slot_entries(small), small.read_mark_array(), small.slots.pool.free
        assert after[0] == before[0] and (after[1] == before[1]).all() and after[2] == before[2]
        assert enf.current == first
        enf.apply({k: 40 for k in flows(6)}, 30)  # fits: the enforcer's record of the map is still right
        assert kernel(small) == {k: 40 for k in flows(6)}
    finally:
        small.detach()


def test_a_refused_delete_puts_back_what_it_deleted() -> None:
    """The kernel refuses a delete batch part way (an entry removed behind the datapath's back): the
    flows it deleted before are written again with their slots, the new flows of the same call are
    taken back, and the marks of the rest are not changed."""
    dp = load_detached(max_flows=64, max_marked_flows=16)
    try:
        enf = BpfEnforcer(dp)
        a, b, c, d = flows(4)
        enf.apply({a: 10, b: 12, c: 14}, 30)
        libbpf.map_delete_batch(dp._dscp_fd, dp.slots.records[[dp.slots.slot_of[b]]], 1)  # b vanishes
        before = slot_entries(dp), dp.read_mark_array(), dp.slots.pool.free
        with pytest.raises(DatapathError, match="nothing changed"):
            enf.apply({d: 16}, 30)  # a, b, c leave (b is not there: refused after a), d comes
        after = slot_entries(dp), dp.read_mark_array(), dp.slots.pool.free
        assert after[0] == before[0] and (after[1] == before[1]).all() and after[2] == before[2]
        assert kernel(dp) == {a: 10, c: 14} and enf.current == {a: 10, b: 12, c: 14}
    finally:
        dp.detach()


def test_limits_and_bad_values_are_refused_before_the_kernel(datapath: Datapath,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(datapath, monkeypatch)
    enf = BpfEnforcer(counted)
    counted.max_marked_flows = 5
    with pytest.raises(DatapathError, match="max_marked_flows=5"):
        enf.apply(dict.fromkeys(flows(6), 8), 30)
    with pytest.raises(DatapathError, match="DSCP"):
        enf.apply({flows(1)[0]: 64}, 30)
    assert counted.calls == [] and kernel(datapath) == {}
