"""The eBPF datapath (leveller.agent.datapath.Datapath) as the agent's Enforcer and FlowSource.

The datapath, the agent, the RPC and the controller all speak the model's
FlowKey (IPv4 or IPv6); this module computes the minimal change of the
datapath's two DSCP maps as numpy arrays: new marks of flows that hold a slot
(stores into the mmap'd mark array), flows that get a slot, flows that leave.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from leveller.agent import libbpf
from leveller.agent.datapath import DatapathError
from leveller.agent.flow_structs import encode_dscp_array, key_records
from leveller.agent.reports import FlowSample
from leveller.agent.slots import SlotTable
from leveller.model.flow import FlowKey


class BpfEnforcer:
    """Enforcer over an attached Datapath: ``apply`` changes only what differs.

    A flow with a mark holds a slot of the datapath's mark array (Datapath.slots). A call looks up
    every listed flow's slot (or reuses the slots of the last call when it lists the same flows in
    the same order and no flow got or lost a slot since), then hands Datapath.change_marks the new
    marks of flows with a slot (stores into the mmap'd array, no system call), the flows that left
    (one BPF_MAP_DELETE_BATCH) and the flows without a slot (one BPF_MAP_UPDATE_BATCH), then writes
    the kernel's lease deadline. All or nothing: if the kernel refuses a batch, what was written is put
    back and DatapathError is raised (the old deadline is left to run out). ``clear`` ends the lease
    first (one write stops every rewrite), then removes every flow. ``current``: the marks of the
    last successful ``apply`` (a dict built when asked).
    """

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath
        self._keys: list[FlowKey] = []  # the flows of the last apply, in its order
        self._dscp = np.zeros(0, dtype=np.int64)  # and their DSCPs
        self._slots = np.zeros(0, dtype=np.int64)  # and their slots, valid while _table is at _version
        self._table: SlotTable | None = None
        self._version = -1

    @property
    def current(self) -> dict[FlowKey, int]:
        return dict(zip(self._keys, self._dscp.tolist()))

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        keys = list(marks)
        n = len(keys)
        try:
            dscp = np.fromiter(marks.values(), dtype=np.int64, count=n)
            want = encode_dscp_array(dscp)
        except (TypeError, ValueError) as exc:
            raise DatapathError(f"levels refused: {exc}; nothing changed") from None
        table = self.datapath.slots
        if self._version == table.version and self._table is table and keys == self._keys:
            slots = self._slots  # the same flows in the same order: the same slots
        else:
            slots = table.lookup(keys, n)
        new = np.flatnonzero(slots < 0)
        if len(new):
            held = np.flatnonzero(slots >= 0)
            at = slots[held]
        else:
            held, at = None, slots
        if len(at) == len(table):  # distinct flows, each holding a slot: every held slot listed
            gone = np.zeros(0, dtype=np.int64)
        else:
            listed = np.zeros(table.capacity, dtype=bool)
            listed[at] = True
            gone = np.flatnonzero(table.bound & ~listed)
        marked = len(table) - len(gone) + len(new)
        if marked > self.datapath.max_marked_flows:
            raise DatapathError(f"{marked} marked flows would exceed max_marked_flows="
                                f"{self.datapath.max_marked_flows}; nothing changed")
        new_keys = [keys[i] for i in new.tolist()]
        try:
            records = key_records(new_keys)
        except ValueError as exc:
            raise DatapathError(f"levels refused: {exc}; nothing changed") from None
        try:
            fresh = self.datapath.change_marks(at, want if held is None else want[held], new_keys, want[new],
                                               gone, records)
        except libbpf.BpfSyscallError as exc:
            raise DatapathError(f"the DSCP maps refused {len(new) + len(gone)} changes: {exc}; "
                                "nothing changed") from exc
        if len(new):
            slots = slots.copy()
            slots[new] = fresh
        self._keys, self._dscp, self._slots = keys, dscp, slots
        self._table, self._version = table, table.version
        self.datapath.set_lease(valid_for_s)

    def clear(self) -> None:
        self.datapath.set_lease(0)
        table = self.datapath.slots
        gone = np.flatnonzero(table.bound)
        try:
            self.datapath.change_marks(gone[:0], np.zeros(0, dtype=np.uint8), [], np.zeros(0, dtype=np.uint8), gone)
        except libbpf.BpfSyscallError as exc:
            raise DatapathError(f"the DSCP maps refused {len(gone)} changes: {exc}; nothing changed") from exc
        self._keys, self._dscp, self._slots = [], np.zeros(0, dtype=np.int64), gone[:0]
        self._table, self._version = table, table.version


class BpfFlowSource:
    """FlowSource over an attached Datapath's per-flow counters."""

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath

    def read_bytes(self) -> dict[FlowKey, int]:
        """Every flow's byte counter alone, one batched read (the idle test of phase-aligned demotion reads
        it every poll while a demotion waits; the per-DSCP counters are for reports)."""
        return {key: stats.bytes for key, stats in self.datapath.read_stats().items()}

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        by_dscp: dict[FlowKey, list[tuple[int, int]]] = {}
        for (key, dscp), (nbytes, _) in self.datapath.read_dscp_stats().items():
            by_dscp.setdefault(key, []).append((dscp, nbytes))
        return {key: FlowSample(stats.bytes, stats.cgroup_id, tuple(sorted(by_dscp.get(key, ()))))
                for key, stats in self.datapath.read_stats().items()}
