"""The host datapath: bpf/flow_marker.c on a tc clsact egress hook.

Loads the program (the CO-RE object through libbpf, or the C source through
bcc: leveller.agent.bpfload, ``loader``), attaches it with pyroute2 to an interface
(optionally inside a named network namespace) and removes exactly what it
added on detach: its own filter, and the clsact qdisc only if it created it
and nothing else hangs on it (bcc never removes tc filters). Map writes and
counter reads are batched (BPF_MAP_*_BATCH). The program rewrites only while
the lease written with set_lease() runs by the kernel clock, so the marks of an
agent that was killed end by themselves.

A marked flow has a slot: flow_dscp_egress (hash) maps its key to the slot,
flow_mark_egress (array, BPF_F_MMAPABLE) holds the mark of every slot and is
mapped into this process, so changing the mark of a flow that has a slot is a
store into memory, no system call. Slots are handed out here (leveller.agent.slots,
twice as many as max_marked_flows, freed slots reused last); a flow that leaves
loses its hash entry first, then its mark is zeroed, then its slot is freed; a
new flow's mark is in its slot before its hash entry exists.

    with Datapath("eth0", max_flows=65536) as dp:
        dp.set_lease(3.0)          # rewrites stop by themselves 3 s from now (kernel clock)
        dp.set_dscp({key: 46})
        stats = dp.read_stats()

Our filter is recognisable after a crash: priority FILTER_PRIO, handle
FILTER_HANDLE, name PROGRAM_NAME on the egress hook; cleanup_stale() removes it.
"""

from __future__ import annotations

import errno
import mmap
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from leveller.agent import libbpf
from leveller.agent.bpfload import (
    DSCP_MAP,
    DSCP_STATS_MAP,
    LEASE_MAP,
    MARK_MAP,
    PROGRAM_NAME,
    STATS_MAP,
    LoadedProgram,
    LoadError,
    check_loader,
    load_program,
)
from leveller.agent.bpfsource import bpf_dir
from leveller.agent.flow_structs import (
    DSCP_DTYPE,
    DSCP_KEY_FORMAT,
    DSCP_STATS_FORMAT,
    KEY_FORMAT,
    LEASE_FORMAT,
    LEASE_KEY_FORMAT,
    SLOT_FORMAT,
    STATS_FORMAT,
    FlowStats,
    decode_dscp,
    encode_dscp,
    key_records,
    pack_key,
    unpack_key,
)
from leveller.agent.names import check_ifname, check_netns
from leveller.agent.slots import SlotsExhausted, SlotTable
from leveller.errors import UserError
from leveller.model.flow import FlowKey

BPF_DIR = bpf_dir()  # the checkout's bpf/, or the wheel's package data (leveller.agent.bpfsource)
SOURCE = BPF_DIR / "flow_marker.c"  # what bcc compiles; libbpf loads the object built from it
SLOTS_PER_MARKED_FLOW = 2  # new flows take slots before the leaving ones free theirs
EGRESS_PARENT = 0xFFFFFFF3  # "ffff:fff3": clsact egress hook
INGRESS_PARENT = 0xFFFFFFF2
FILTER_PRIO = 0x4C56  # "LV": the priority (pref) our filter owns on the egress hook
FILTER_HANDLE = 0x4C56
DEFAULT_MAX_FLOWS = 65536
MAX_MAP_ENTRIES = 1 << 24
NETNS_DIR = Path("/run/netns")


class DatapathError(Exception):
    """The kernel refused an operation (attach, map update)."""


CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF = 12, 21, 39  # linux/capability.h


def missing_capabilities(status: Path = Path("/proc/self/status")) -> list[str]:
    """Of what loading and attaching a tc program takes (CAP_BPF, or CAP_SYS_ADMIN which covers it;
    CAP_NET_ADMIN), the capabilities this process lacks."""
    eff = next(int(line.split()[1], 16) for line in status.read_text().splitlines() if line.startswith("CapEff:"))
    missing = [] if eff >> CAP_BPF & 1 or eff >> CAP_SYS_ADMIN & 1 else ["CAP_BPF"]
    return missing + ([] if eff >> CAP_NET_ADMIN & 1 else ["CAP_NET_ADMIN"])


class Datapath:
    """Per-flow counters and DSCP marking on one interface's egress."""

    def __init__(self, ifname: str, netns: str | None = None, max_flows: int = DEFAULT_MAX_FLOWS,
                 max_marked_flows: int | None = None, loader: str = "auto") -> None:
        """max_flows sizes the counter map (LRU), max_marked_flows the DSCP map (default: max_flows),
        which has twice as many mark slots; ``loader``: auto, libbpf or bcc (leveller.agent.bpfload)."""
        check_ifname(ifname, "ifname")
        check_loader(loader, "loader")
        if netns is not None:
            check_netns(netns, "netns")
        for name, value in (("max_flows", max_flows), ("max_marked_flows", max_marked_flows)):
            if value is not None and (not isinstance(value, int) or not 1 <= value <= MAX_MAP_ENTRIES):
                raise UserError(f"{name}={value!r}: allowed is an integer in 1..{MAX_MAP_ENTRIES}")
        self.ifname = ifname
        self.netns = netns
        self.max_flows = max_flows
        self.max_marked_flows = max_marked_flows if max_marked_flows is not None else max_flows
        self.loader = loader
        self._prog: LoadedProgram | None = None
        self._ifindex: int | None = None
        self._added_clsact = False
        self._table: SlotTable | None = None  # which flow holds which slot (set at load)
        self._marks_mm: mmap.mmap | None = None  # flow_mark_egress, mapped
        self._marks: np.ndarray | None = None  # its flow_dscp.mark per slot (a view of _marks_mm)
        self._stats_fd = -1
        self._dscp_fd = -1
        self._mark_fd = -1
        self._lease_fd = -1
        self._dscp_stats_fd = -1

    @property
    def max_dscp_stats(self) -> int:
        """Entries of the per-(flow, DSCP) counter map: room for every flow on two levels."""
        return min(2 * self.max_flows, MAX_MAP_ENTRIES)

    @property
    def mark_slots(self) -> int:
        """Elements of flow_mark_egress: a slot for every marked flow and as many to take new ones from
        while the leaving ones still hold theirs."""
        return SLOTS_PER_MARKED_FLOW * self.max_marked_flows

    def map_sizes(self) -> dict[str, int]:
        """Entries of each sized map (the lease map has one, fixed)."""
        return {STATS_MAP: self.max_flows, DSCP_MAP: self.max_marked_flows, MARK_MAP: self.mark_slots,
                DSCP_STATS_MAP: self.max_dscp_stats}

    @property
    def loader_used(self) -> str | None:
        """Which loader loaded the program ("libbpf" or "bcc"; None while nothing is loaded)."""
        return self._prog.loader if self._prog is not None else None

    # ---- lifecycle -------------------------------------------------------
    def __enter__(self) -> Datapath:
        self.attach()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.detach()

    @property
    def attached(self) -> bool:
        return self._ifindex is not None

    def attach(self) -> None:
        """Load the program, then add clsact (if absent) and our egress filter."""
        if self.attached:
            raise DatapathError(f"already attached to {self._where()}")
        ipr = _iproute(self.netns)
        try:
            ifindex = _ifindex(ipr, self.ifname, self.netns)
            if _our_filters(ipr, ifindex):
                raise UserError(
                    f"{self._where()} already carries a leveller filter (prio {FILTER_PRIO:#x}); "
                    "another agent runs there, or a crashed run left it: remove it with "
                    f"leveller.agent.datapath.cleanup_stale({self.ifname!r}, {self.netns!r})")
            prog_fd = self._load()
            added_clsact = False
            try:
                if not _has_clsact(ipr, ifindex):
                    ipr.tc("add", "clsact", ifindex)
                    added_clsact = True
                ipr.tc("add-filter", "bpf", ifindex, FILTER_HANDLE, fd=prog_fd, name=PROGRAM_NAME,
                       parent=EGRESS_PARENT, prio=FILTER_PRIO, classid=1, direct_action=True)
            except Exception as exc:
                if added_clsact:
                    _remove_clsact_if_empty(ipr, ifindex)
                self._release_bpf()
                raise DatapathError(f"attaching to {self._where()} failed: {exc}") from exc
            self._ifindex, self._added_clsact = ifindex, added_clsact
        finally:
            ipr.close()

    def detach(self) -> None:
        """Remove our filter (and the clsact qdisc if we added it and it is empty); unload."""
        ifindex, self._ifindex = self._ifindex, None
        if ifindex is None:  # not attached
            self._release_bpf()
            return
        try:
            ipr = _iproute(self.netns)
        except UserError:
            self._release_bpf()  # namespace gone: its interfaces and filters went with it
            return
        try:
            _delete_our_filters(ipr, ifindex)
            if self._added_clsact:
                _remove_clsact_if_empty(ipr, ifindex)
        finally:
            ipr.close()
            self._release_bpf()

    def _load(self) -> int:
        """Load the program with this datapath's map sizes (leveller.agent.bpfload) and open its maps;
        returns the program's fd. DatapathError, with nothing left loaded, if that fails."""
        try:
            self._prog = load_program(self.loader, self.map_sizes())
            self._map_fds()
        except (LoadError, OSError, ValueError) as exc:
            self._release_bpf()
            lacking = missing_capabilities()
            hint = (f" (this process lacks {' and '.join(lacking)}: run it as root, or with the capabilities "
                    "deploy/systemd/leveller-agent.service grants)") if lacking else ""
            raise DatapathError(f"loading flow_marker (loader {self.loader}) failed: {exc}{hint}") from exc
        return self._prog.program_fd

    def _release_bpf(self) -> None:
        self._marks, self._table = None, None
        mm, self._marks_mm = self._marks_mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # someone still holds a view of the marks: unmapped when it goes
        prog, self._prog = self._prog, None
        if prog is not None:
            prog.close()
        self._stats_fd = self._dscp_fd = self._mark_fd = self._lease_fd = self._dscp_stats_fd = -1

    def _map_fds(self) -> None:
        assert self._prog is not None
        self._dscp_stats_fd = self._prog.map_fd(DSCP_STATS_MAP)
        self._stats_fd = self._prog.map_fd(STATS_MAP)
        self._dscp_fd = self._prog.map_fd(DSCP_MAP)
        self._mark_fd = self._prog.map_fd(MARK_MAP)
        self._lease_fd = self._prog.map_fd(LEASE_MAP)
        slots = self.mark_slots
        self._marks_mm = mmap.mmap(self._mark_fd, slots * DSCP_DTYPE.itemsize, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE)
        self._marks = np.frombuffer(self._marks_mm, dtype=DSCP_DTYPE, count=slots)["mark"]
        self._table = SlotTable(slots)

    def _where(self) -> str:
        return f"{self.ifname}" + (f" in netns {self.netns}" if self.netns else "")

    def _require_attached(self) -> None:
        if not self.attached:
            raise DatapathError("datapath is not attached (use it as a context manager or call attach())")

    # ---- lease ----------------------------------------------------------
    def set_lease(self, valid_for_s: float) -> None:
        """Let the DSCP map act for ``valid_for_s`` more seconds (kernel clock); 0 ends it now."""
        if not valid_for_s >= 0:
            raise UserError(f"valid_for_s={valid_for_s!r}: allowed is a number >= 0")
        deadline = time.monotonic_ns() + int(valid_for_s * 1e9) if valid_for_s > 0 else 0
        self.set_lease_deadline(deadline)

    def set_lease_deadline(self, deadline_ns: int) -> None:
        """Rewrite nothing at or after CLOCK_MONOTONIC time ``deadline_ns`` (bpf_ktime_get_ns; 0 = now)."""
        self._require_attached()
        try:
            libbpf.map_update_batch(self._lease_fd, LEASE_KEY_FORMAT.pack(0), LEASE_FORMAT.pack(deadline_ns), 1)
        except libbpf.BpfSyscallError as exc:
            raise DatapathError(f"writing the lease into {LEASE_MAP}: {exc}") from exc

    def lease_deadline(self) -> int:
        """The lease deadline the kernel holds (CLOCK_MONOTONIC ns; 0 = no lease)."""
        self._require_attached()
        rows = libbpf.map_lookup_all(self._lease_fd, LEASE_KEY_FORMAT.size, LEASE_FORMAT.size, 1)
        return int(LEASE_FORMAT.unpack(rows[0][1])[0]) if rows else 0

    # ---- DSCP marks ---------------------------------------------------------
    @property
    def slots(self) -> SlotTable:
        """Which flow holds which slot of flow_mark_egress (read it; change it with change_marks)."""
        return self._mark_state()[0]

    def _mark_state(self) -> tuple[SlotTable, np.ndarray]:
        self._require_attached()
        if self._table is None or self._marks is None:
            raise DatapathError(f"{MARK_MAP} is not loaded")
        return self._table, self._marks

    def change_marks(self, slots: np.ndarray, marks: np.ndarray, new_keys: Sequence[FlowKey],
                     new_marks: np.ndarray, gone: np.ndarray, new_records: np.ndarray | None = None) -> np.ndarray:
        """The one writer of the two DSCP maps; returns the new flows' slots.

        - The flows holding ``slots`` get ``marks`` (flow_dscp.mark, uint8): stores into the mapped
          array, no system call.
        - The flows holding ``gone`` leave: one BPF_MAP_DELETE_BATCH first (so that new flows find
          room in the hash map); their marks are zeroed and their slots freed at the end, so a new
          flow never gets a slot freed in the same call.
        - ``new_keys`` (flows without a slot; their struct flow_key records ``new_records``, else
          packed here: ValueError) get free slots holding ``new_marks``, then their entries in one
          BPF_MAP_UPDATE_BATCH.

        No checks of the marks or of max_marked_flows. All or nothing: if the kernel refuses a batch
        (or no slot is free), what was written is put back and libbpf.BpfSyscallError is raised
        (``done``: entries the kernel had taken before refusing, since put back)."""
        table, view = self._mark_state()
        if not table.bound[slots].all() or not table.bound[gone].all():
            raise ValueError("change_marks: a slot to change or to free is held by no flow")
        table.check_new(new_keys)
        records = key_records(new_keys) if new_records is None else new_records
        try:
            fresh = table.pool.take(len(new_keys))
        except SlotsExhausted as exc:
            raise libbpf.BpfSyscallError(f"taking {len(new_keys)} slots of {MARK_MAP} ({exc})", errno.ENOSPC) from exc
        if len(gone):  # first, so that the new flows find room in the hash map
            try:
                libbpf.map_delete_batch(self._dscp_fd, table.records[gone], len(gone))
            except libbpf.BpfSyscallError as exc:
                self._put_back(gone[:exc.done])
                self._unwind(records[:0], fresh)
                raise
        if len(fresh):
            view[fresh] = new_marks  # a free slot is zero and no entry leads to it yet
            try:
                libbpf.map_update_batch(self._dscp_fd, records, fresh.astype(np.uint32), len(fresh))
            except libbpf.BpfSyscallError as exc:
                self._unwind(records[:exc.done], fresh)
                self._put_back(gone)
                raise
        view[slots] = marks
        view[gone] = 0  # no entry leads here any more; zero before the slot can go to another flow
        table.bind(new_keys, records, fresh)
        table.release(gone)
        return fresh

    def _put_back(self, deleted: np.ndarray) -> None:
        """Write again the entries of flows whose slot entries a refused call deleted (their marks and
        slots were not touched yet)."""
        table, _ = self._mark_state()
        self._quietly(libbpf.map_update_batch, self._dscp_fd, table.records[deleted], deleted.astype(np.uint32),
                      len(deleted))

    def _unwind(self, written: np.ndarray, fresh: np.ndarray) -> None:
        """Take back new flows' slots after a refused batch: delete the entries ``written``, zero, free."""
        table, view = self._mark_state()
        self._quietly(libbpf.map_delete_batch, self._dscp_fd, written, len(written))
        view[fresh] = 0
        table.pool.give(fresh)

    @staticmethod
    def _quietly(call: Any, *args: Any) -> None:
        """Best effort while putting things back: the first error is the one reported."""
        try:
            call(*args)
        except libbpf.BpfSyscallError:
            pass

    def set_dscp(self, mapping: Mapping[FlowKey, int]) -> None:
        """Mark these flows' packets with these DSCPs (0..63); all or nothing (see change_marks)."""
        self._require_attached()
        if not mapping:
            return
        marks = []
        for key, dscp in mapping.items():
            if not isinstance(key, FlowKey):
                raise UserError(f"flow={key!r}: expected a FlowKey")
            try:
                marks.append(encode_dscp(dscp))
            except ValueError as exc:
                raise UserError(f"{key}: {exc}") from None
        keys, table = list(mapping), self.slots
        slots = table.lookup(keys, len(keys))
        new = slots < 0
        marked = len(table) + int(np.count_nonzero(new))
        if marked > self.max_marked_flows:
            raise UserError(
                f"{marked} marked flows would exceed max_marked_flows="
                f"{self.max_marked_flows}; nothing changed (raise the limit or clear flows)")
        new_keys = [key for key, is_new in zip(keys, new.tolist()) if is_new]
        try:
            records = key_records(new_keys)
        except ValueError as exc:
            raise UserError(f"flows refused: {exc}; nothing changed") from None
        want = np.array(marks, dtype=np.uint8)
        try:
            self.change_marks(slots[~new], want[~new], new_keys, want[new], _NO_SLOTS, records)
        except libbpf.BpfSyscallError as exc:
            raise DatapathError(f"updating {DSCP_MAP} with {len(marks)} flows: {exc}; nothing changed") from exc

    def clear_dscp(self, keys: Iterable[FlowKey]) -> None:
        """Stop marking these flows (their packets then pass unchanged); unknown keys are ignored."""
        table = self.slots
        present = [key for key in dict.fromkeys(keys) if key in table.slot_of]
        if not present:
            return
        try:
            self.change_marks(_NO_SLOTS, _NO_MARKS, [], _NO_MARKS, table.lookup(present, len(present)))
        except libbpf.BpfSyscallError as exc:
            raise DatapathError(f"deleting {len(present)} flows from {DSCP_MAP}: {exc}; nothing changed") from exc

    def write_dscp(self, keys: np.ndarray, marks: np.ndarray) -> None:
        """struct flow_key records (flow_structs.KEY_DTYPE) -> raw flow_dscp.mark (uint8, e.g.
        flow_structs.encode_dscp_array; an invalid mark is written as it is and leaves the flow's packets
        alone). No checks, no limit: for a caller that wants the raw encoding (the marker's fuzzer).
        Flows with a slot get the mark by a store; the others slots and one BPF_MAP_UPDATE_BATCH; a
        record given twice gets its last mark. All or nothing: raises libbpf.BpfSyscallError with
        nothing changed (see change_marks)."""
        wanted = dict(zip(_flows_of_records(keys), np.asarray(marks, dtype=np.uint8).tolist()))
        flows, table = list(wanted), self.slots
        slots = table.lookup(flows, len(flows))
        new = slots < 0
        want = np.fromiter(wanted.values(), dtype=np.uint8, count=len(wanted))
        new_keys = [key for key, is_new in zip(flows, new.tolist()) if is_new]
        self.change_marks(slots[~new], want[~new], new_keys, want[new], _NO_SLOTS)

    def delete_dscp(self, keys: np.ndarray) -> None:
        """Stop marking the flows of these struct flow_key records, all of which must be marked (else
        libbpf.BpfSyscallError ENOENT, nothing changed): one BPF_MAP_DELETE_BATCH; see write_dscp."""
        flows, table = list(dict.fromkeys(_flows_of_records(keys))), self.slots
        gone = table.lookup(flows, len(flows))
        if (gone < 0).any():
            raise libbpf.BpfSyscallError("BPF_MAP_DELETE_BATCH", errno.ENOENT)
        self.change_marks(_NO_SLOTS, _NO_MARKS, [], _NO_MARKS, gone)

    def read_mark_array(self) -> np.ndarray:
        """flow_dscp.mark of every slot of flow_mark_egress as the kernel holds it, read through the
        bpf() syscall (not the mapping this process writes through)."""
        table, _ = self._mark_state()
        raw = libbpf.array_lookup_all(self._mark_fd, DSCP_DTYPE.itemsize, table.capacity)
        return np.frombuffer(raw, dtype=DSCP_DTYPE)["mark"].copy()

    def read_dscp(self) -> dict[FlowKey, int | None]:
        """Every flow the kernel's DSCP maps mark, with its DSCP as the kernel holds it (both maps
        read through bpf(); None: an entry that leaves packets alone: an invalid mark, a slot past
        the array)."""
        self._require_attached()
        rows = libbpf.map_lookup_all(self._dscp_fd, KEY_FORMAT.size, SLOT_FORMAT.size, self.max_marked_flows)
        if not rows:
            return {}
        marks = self.read_mark_array()
        out: dict[FlowKey, int | None] = {}
        for k, v in rows:
            (slot,) = SLOT_FORMAT.unpack(v)
            out[unpack_key(k)] = decode_dscp(int(marks[slot])) if slot < len(marks) else None
        return out

    # ---- counters -------------------------------------------------------
    def read_stats(self) -> dict[FlowKey, FlowStats]:
        """Counters of every flow seen (since attach, or since LRU eviction), one batched read."""
        self._require_attached()
        rows = libbpf.map_lookup_all(self._stats_fd, KEY_FORMAT.size, STATS_FORMAT.size, self.max_flows)
        return {unpack_key(k): FlowStats.unpack(v) for k, v in rows}

    def read_dscp_stats(self) -> dict[tuple[FlowKey, int], tuple[int, int]]:
        """(flow, DSCP its packets left with) -> (bytes, packets), one batched read: what each flow put
        on each switch queue (LRU: a flow's oldest DSCP entry goes first when the map is full)."""
        self._require_attached()
        rows = libbpf.map_lookup_all(self._dscp_stats_fd, DSCP_KEY_FORMAT.size, DSCP_STATS_FORMAT.size,
                                     self.max_dscp_stats)
        out: dict[tuple[FlowKey, int], tuple[int, int]] = {}
        for k, v in rows:
            flow, dscp = DSCP_KEY_FORMAT.unpack(k)
            out[(unpack_key(flow), dscp)] = DSCP_STATS_FORMAT.unpack(v)
        return out

    def forget_flows(self, keys: Iterable[FlowKey]) -> None:
        """Drop counters of finished flows (a missing key is ignored)."""
        self._require_attached()
        for key in keys:
            try:
                raw = pack_key(key)
            except ValueError:
                continue  # never in the map
            try:
                libbpf.map_delete_batch(self._stats_fd, raw, 1)
            except libbpf.BpfSyscallError:
                pass

    @property
    def program_fd(self) -> int:
        """fd of the loaded program (for BPF_PROG_TEST_RUN)."""
        self._require_attached()
        if self._prog is None:
            raise DatapathError("no program is loaded")
        return self._prog.program_fd


_NO_SLOTS = np.zeros(0, dtype=np.int64)
_NO_MARKS = np.zeros(0, dtype=np.uint8)


def _flows_of_records(records: np.ndarray) -> list[FlowKey]:
    raw = np.ascontiguousarray(records).tobytes()
    size = KEY_FORMAT.size
    return [unpack_key(raw[i:i + size]) for i in range(0, len(raw), size)]


def load_detached(max_flows: int = 1024, max_marked_flows: int | None = None, loader: str = "auto") -> Datapath:
    """A Datapath whose program and maps are loaded but attached nowhere (for BPF_PROG_TEST_RUN)."""
    dp = Datapath("none", max_flows=max_flows, max_marked_flows=max_marked_flows, loader=loader)
    dp._load()
    dp._ifindex = -1  # "attached" for the map API; detach() must not touch tc
    return dp


def cleanup_stale(ifname: str, netns: str | None = None) -> int:
    """Remove leveller filters a crashed run left on ifname's egress (and clsact if then empty).

    Returns how many filters were removed; a missing interface or namespace is not an error.
    """
    try:
        ipr = _iproute(netns)
    except UserError:
        return 0
    try:
        try:
            ifindex = _ifindex(ipr, ifname, netns)
        except UserError:
            return 0
        removed = _delete_our_filters(ipr, ifindex)
        if removed:
            _remove_clsact_if_empty(ipr, ifindex)
        return removed
    finally:
        ipr.close()


def attached_filters(ifname: str, netns: str | None = None) -> list[dict[str, Any]]:
    """Every tc filter and whether clsact exists on ifname: for checks that nothing of ours remains."""
    ipr = _iproute(netns)
    try:
        ifindex = _ifindex(ipr, ifname, netns)
        out = []
        for parent in (EGRESS_PARENT, INGRESS_PARENT):
            for msg in _filters(ipr, ifindex, parent):
                out.append({"parent": parent, "prio": _prio(msg), "kind": msg.get_attr("TCA_KIND"),
                            "name": _bpf_name(msg)})
        return out
    finally:
        ipr.close()


def has_clsact(ifname: str, netns: str | None = None) -> bool:
    """Whether ifname carries a clsact qdisc."""
    ipr = _iproute(netns)
    try:
        return _has_clsact(ipr, _ifindex(ipr, ifname, netns))
    finally:
        ipr.close()


# ---- pyroute2 helpers -----------------------------------------------------
def _iproute(netns: str | None) -> Any:
    from pyroute2 import IPRoute, NetNS

    if netns is None:
        return IPRoute()
    if not (NETNS_DIR / netns).exists():
        raise UserError(f"netns={netns!r}: no such network namespace (see `ip netns list`)")
    return NetNS(netns, flags=0)  # flags=0: never create it


def _ifindex(ipr: Any, ifname: str, netns: str | None) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        where = f" in netns {netns}" if netns else ""
        raise UserError(f"ifname={ifname!r}: no such interface{where} (see `ip link`)")
    return int(found[0])


def _has_clsact(ipr: Any, ifindex: int) -> bool:
    return any(q.get_attr("TCA_KIND") == "clsact" for q in ipr.get_qdiscs(index=ifindex))


def _filters(ipr: Any, ifindex: int, parent: int) -> list[Any]:
    try:
        return list(ipr.get_filters(index=ifindex, parent=parent))
    except Exception:  # no clsact: the kernel rejects the dump
        return []


def _prio(msg: Any) -> int:
    return (int(msg["info"]) >> 16) & 0xFFFF


def _bpf_name(msg: Any) -> str | None:
    opts = msg.get_attr("TCA_OPTIONS")
    return opts.get_attr("TCA_BPF_NAME") if opts is not None and hasattr(opts, "get_attr") else None


def _our_filters(ipr: Any, ifindex: int) -> list[Any]:
    return [m for m in _filters(ipr, ifindex, EGRESS_PARENT)
            if _prio(m) == FILTER_PRIO and m.get_attr("TCA_KIND") == "bpf"]


def _delete_our_filters(ipr: Any, ifindex: int) -> int:
    if not _our_filters(ipr, ifindex):
        return 0
    # Deleting by priority removes every handle at our priority in one go.
    ipr.tc("del-filter", "bpf", ifindex, parent=EGRESS_PARENT, prio=FILTER_PRIO)
    return 1


def _remove_clsact_if_empty(ipr: Any, ifindex: int) -> None:
    if not _has_clsact(ipr, ifindex):
        return
    if _filters(ipr, ifindex, EGRESS_PARENT) or _filters(ipr, ifindex, INGRESS_PARENT):
        return
    ipr.tc("del", "clsact", ifindex)

