"""The eBPF datapath (leveller.agent.datapath.Datapath) as the agent's Enforcer and FlowSource.

The datapath, the agent, the RPC and the controller all speak the model's
FlowKey (IPv4 or IPv6); this module computes the minimal map update, as numpy
record arrays handed to one batched bpf() call.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from leveller.agent import libbpf
from leveller.agent.datapath import DatapathError
from leveller.agent.flow_structs import KEY_DTYPE, encode_dscp_array, key_records
from leveller.agent.reports import FlowSample
from leveller.model.flow import FlowKey

COMPACT_SLACK = 65536  # rows of departed flows kept (packed keys reused if they come back)


class BpfEnforcer:
    """Enforcer over an attached Datapath: ``apply`` writes only what changed, in one batch.

    Every flow gets a row once: its struct flow_key record (flow_structs.KEY_DTYPE, built for all new
    flows of a call in one vectorised step) and the mark the kernel map holds for it (0: no entry).
    A call then compares arrays and hands the changed rows to one BPF_MAP_UPDATE_BATCH and the
    flows that left to one BPF_MAP_DELETE_BATCH, then writes the kernel's lease deadline. All or
    nothing: if the kernel refuses a batch, the entries written before are put back and
    DatapathError is raised (the old deadline is left to run out). ``clear`` ends the lease first
    (one write stops every rewrite), then empties the map.
    """

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath
        self.current: dict[FlowKey, int] = {}
        self._rows: dict[FlowKey, int] = {}
        self._keys = np.zeros(0, dtype=KEY_DTYPE)
        self._mark = np.zeros(0, dtype=np.uint8)  # what the kernel map holds per row; 0 = no entry

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        keys = list(marks)
        try:
            want = encode_dscp_array(np.fromiter(marks.values(), dtype=np.int64, count=len(keys)))
        except (TypeError, ValueError) as exc:
            raise DatapathError(f"levels refused: {exc}; nothing changed") from None
        self._compact(len(keys))
        rows = self._rows_of(keys)
        listed = np.zeros(len(self._mark), dtype=bool)
        listed[rows] = True
        gone = np.flatnonzero((self._mark != 0) & ~listed)
        change = self._mark[rows] != want
        rows, want = rows[change], want[change]
        marked = int(np.count_nonzero(self._mark)) - len(gone) + int(np.count_nonzero(self._mark[rows] == 0))
        if marked > self.datapath.max_marked_flows:
            raise DatapathError(f"{marked} marked flows would exceed max_marked_flows="
                                f"{self.datapath.max_marked_flows}; nothing changed")
        self._change(rows, want, gone)
        self.current = dict(marks)
        self.datapath.set_lease(valid_for_s)

    def clear(self) -> None:
        self.datapath.set_lease(0)
        self._change(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8), np.flatnonzero(self._mark))
        self.current = {}

    def _change(self, rows: np.ndarray, marks: np.ndarray, gone: np.ndarray) -> None:
        """Write ``marks`` for ``rows`` and remove the entries of ``gone``: two bpf() calls at most."""
        old = self._mark.copy()
        try:
            if len(rows):
                self._batch(rows, marks)
            if len(gone):
                self._batch(gone, None)
        except libbpf.BpfSyscallError as exc:
            self._undo(old)
            raise DatapathError(f"the DSCP map refused {len(rows) + len(gone)} changes: {exc}; "
                                "nothing changed") from exc

    def _batch(self, rows: np.ndarray, marks: np.ndarray | None) -> None:
        keys = self._keys[rows]  # one contiguous buffer of records
        try:
            if marks is None:
                self.datapath.delete_dscp(keys)
            else:
                self.datapath.write_dscp(keys, marks)
        except libbpf.BpfSyscallError as exc:
            done = rows[:exc.done]
            self._mark[done] = 0 if marks is None else marks[:exc.done]
            raise
        self._mark[rows] = 0 if marks is None else marks

    def _undo(self, old: np.ndarray) -> None:
        """Best effort after a refused batch: put back every row whose kernel mark changed."""
        for row in np.flatnonzero(self._mark != old).tolist():
            try:
                if old[row]:
                    self.datapath.write_dscp(self._keys[row:row + 1], old[row:row + 1])
                else:
                    self.datapath.delete_dscp(self._keys[row:row + 1])
                self._mark[row] = old[row]
            except libbpf.BpfSyscallError:
                pass

    def _rows_of(self, keys: list[FlowKey]) -> np.ndarray:
        """Row of every key; new keys get rows and their packed records in one step."""
        rows = np.fromiter(map(self._rows.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            new = [keys[i] for i in missing.tolist()]
            try:
                records = key_records(new)
            except ValueError as exc:
                raise DatapathError(f"levels refused: {exc}; nothing changed") from None
            start = len(self._rows)
            self._keys = np.concatenate([self._keys[:start], records])
            self._mark = np.concatenate([self._mark[:start], np.zeros(len(new), dtype=np.uint8)])
            self._rows.update(zip(new, range(start, start + len(new))))
            rows[missing] = np.arange(start, start + len(new))
        return rows

    def _compact(self, listed: int) -> None:
        """Drop the rows of flows neither listed nor marked once they outnumber the rest."""
        if len(self._rows) <= 2 * listed + COMPACT_SLACK:
            return
        keep = [k for k, r in self._rows.items() if self._mark[r] or k in self.current]
        idx = np.array([self._rows[k] for k in keep], dtype=np.int64)
        self._keys, self._mark = self._keys[idx], self._mark[idx]
        self._rows = {k: i for i, k in enumerate(keep)}


class BpfFlowSource:
    """FlowSource over an attached Datapath's per-flow counters."""

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        by_dscp: dict[FlowKey, list[tuple[int, int]]] = {}
        for (key, dscp), (nbytes, _) in self.datapath.read_dscp_stats().items():
            by_dscp.setdefault(key, []).append((dscp, nbytes))
        return {key: FlowSample(stats.bytes, stats.cgroup_id, tuple(sorted(by_dscp.get(key, ()))))
                for key, stats in self.datapath.read_stats().items()}
