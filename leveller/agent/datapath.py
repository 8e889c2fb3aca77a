"""The host datapath: bpf/flow_marker.c on a tc clsact egress hook.

Loads the program through bcc, attaches it with pyroute2 to an interface
(optionally inside a named network namespace) and removes exactly what it
added on detach: its own filter, and the clsact qdisc only if it created it
and nothing else hangs on it (bcc never removes tc filters). Map writes and
counter reads are batched (BPF_MAP_*_BATCH). The program rewrites only while
the lease written with set_lease() runs by the kernel clock, so the marks of an
agent that was killed end by themselves.

    with Datapath("eth0", max_flows=65536) as dp:
        dp.set_lease(3.0)          # rewrites stop by themselves 3 s from now (kernel clock)
        dp.set_dscp({key: 46})
        stats = dp.read_stats()

Our filter is recognisable after a crash: priority FILTER_PRIO, handle
FILTER_HANDLE, name PROGRAM_NAME on the egress hook; cleanup_stale() removes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from leveller.agent import libbpf
from leveller.agent.flow_structs import (
    DSCP_FORMAT,
    DSCP_KEY_FORMAT,
    DSCP_STATS_FORMAT,
    KEY_FORMAT,
    LEASE_FORMAT,
    LEASE_KEY_FORMAT,
    STATS_FORMAT,
    FlowStats,
    decode_dscp,
    encode_dscp,
    key_records,
    pack_key,
    unpack_key,
)
from leveller.agent.names import check_ifname, check_netns
from leveller.errors import UserError
from leveller.model.flow import FlowKey

BPF_DIR = Path(__file__).resolve().parents[2] / "bpf"
SOURCE = BPF_DIR / "flow_marker.c"
PROGRAM_NAME = "leveller_egress"
STATS_MAP = "flow_stats_egress"
DSCP_MAP = "flow_dscp_egress"
LEASE_MAP = "flow_lease_egress"
DSCP_STATS_MAP = "flow_dscp_stats_egress"
EGRESS_PARENT = 0xFFFFFFF3  # "ffff:fff3": clsact egress hook
INGRESS_PARENT = 0xFFFFFFF2
FILTER_PRIO = 0x4C56  # "LV": the priority (pref) our filter owns on the egress hook
FILTER_HANDLE = 0x4C56
DEFAULT_MAX_FLOWS = 65536
MAX_MAP_ENTRIES = 1 << 24
NETNS_DIR = Path("/run/netns")


class DatapathError(Exception):
    """The kernel refused an operation (attach, map update)."""


class Datapath:
    """Per-flow counters and DSCP marking on one interface's egress."""

    def __init__(self, ifname: str, netns: str | None = None, max_flows: int = DEFAULT_MAX_FLOWS,
                 max_marked_flows: int | None = None) -> None:
        """max_flows sizes the counter map (LRU), max_marked_flows the DSCP map (default: max_flows)."""
        check_ifname(ifname, "ifname")
        if netns is not None:
            check_netns(netns, "netns")
        for name, value in (("max_flows", max_flows), ("max_marked_flows", max_marked_flows)):
            if value is not None and (not isinstance(value, int) or not 1 <= value <= MAX_MAP_ENTRIES):
                raise UserError(f"{name}={value!r}: allowed is an integer in 1..{MAX_MAP_ENTRIES}")
        self.ifname = ifname
        self.netns = netns
        self.max_flows = max_flows
        self.max_marked_flows = max_marked_flows if max_marked_flows is not None else max_flows
        self._bpf: Any = None
        self._ifindex: int | None = None
        self._added_clsact = False
        self._dscp: dict[FlowKey, int] = {}  # what we wrote into flow_dscp_egress
        self._stats_fd = -1
        self._dscp_fd = -1
        self._lease_fd = -1
        self._dscp_stats_fd = -1

    @property
    def max_dscp_stats(self) -> int:
        """Entries of the per-(flow, DSCP) counter map: room for every flow on two levels."""
        return min(2 * self.max_flows, MAX_MAP_ENTRIES)

    def _cflags(self) -> list[str]:
        return [f"-I{BPF_DIR}", f"-DFLOW_STATS_MAX={self.max_flows}", f"-DFLOW_DSCP_MAX={self.max_marked_flows}",
                f"-DFLOW_DSCP_STATS_MAX={self.max_dscp_stats}"]

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
        """Compile and load the program, then add clsact (if absent) and our egress filter."""
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
            fn = self._load()
            added_clsact = False
            try:
                if not _has_clsact(ipr, ifindex):
                    ipr.tc("add", "clsact", ifindex)
                    added_clsact = True
                ipr.tc("add-filter", "bpf", ifindex, FILTER_HANDLE, fd=fn.fd, name=PROGRAM_NAME,
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
            self._dscp.clear()

    def _load(self) -> Any:
        """Compile the program with this datapath's map sizes, load it and open its maps (the one place
        bcc runs); returns the loaded function. DatapathError, with nothing left loaded, if that fails."""
        from bcc import BPF

        try:
            self._bpf = BPF(src_file=str(SOURCE).encode(), cflags=self._cflags())
            fn = self._bpf.load_func(PROGRAM_NAME.encode(), BPF.SCHED_CLS)
            self._map_fds()
        except Exception as exc:
            self._release_bpf()
            raise DatapathError(f"loading {SOURCE.name} failed: {exc}") from exc
        return fn

    def _release_bpf(self) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None
        self._stats_fd = self._dscp_fd = self._lease_fd = self._dscp_stats_fd = -1

    def _map_fds(self) -> None:
        self._dscp_stats_fd = self._bpf.get_table(DSCP_STATS_MAP.encode()).map_fd
        self._stats_fd = self._bpf.get_table(STATS_MAP.encode()).map_fd
        self._dscp_fd = self._bpf.get_table(DSCP_MAP.encode()).map_fd
        self._lease_fd = self._bpf.get_table(LEASE_MAP.encode()).map_fd

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

    # ---- DSCP map -------------------------------------------------------
    def set_dscp(self, mapping: Mapping[FlowKey, int]) -> None:
        """Mark these flows' packets with these DSCPs (0..63), in one batch; all or nothing."""
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
        new = sum(1 for key in mapping if key not in self._dscp)
        if len(self._dscp) + new > self.max_marked_flows:
            raise UserError(
                f"{len(self._dscp) + new} marked flows would exceed max_marked_flows="
                f"{self.max_marked_flows}; nothing changed (raise the limit or clear flows)")
        try:
            keys = key_records(list(mapping))
        except ValueError as exc:
            raise UserError(f"flows refused: {exc}; nothing changed") from None
        try:
            libbpf.map_update_batch(self._dscp_fd, keys, bytes(marks), len(marks))
        except libbpf.BpfSyscallError as exc:
            self._restore(list(mapping))
            raise DatapathError(f"updating {DSCP_MAP} with {len(marks)} flows: {exc}; nothing changed") from exc
        self._dscp.update(mapping)

    def clear_dscp(self, keys: Iterable[FlowKey]) -> None:
        """Stop marking these flows (their packets then pass unchanged); unknown keys are ignored."""
        self._require_attached()
        present = [key for key in dict.fromkeys(keys) if key in self._dscp]
        if not present:
            return
        try:
            libbpf.map_delete_batch(self._dscp_fd, key_records(present), len(present))
        except libbpf.BpfSyscallError as exc:
            self._restore(present)
            raise DatapathError(f"deleting {len(present)} flows from {DSCP_MAP}: {exc}; nothing changed") from exc
        for key in present:
            del self._dscp[key]

    def write_dscp(self, keys: np.ndarray, marks: np.ndarray) -> None:
        """One BPF_MAP_UPDATE_BATCH: struct flow_key records (flow_structs.KEY_DTYPE) -> flow_dscp.mark
        (uint8, flow_structs.encode_dscp_array). For a caller that keeps its own record of the map
        (enforce_bpf.BpfEnforcer): no checks, no bookkeeping here. Raises libbpf.BpfSyscallError,
        whose ``done`` tells how many entries were written first."""
        self._require_attached()
        libbpf.map_update_batch(self._dscp_fd, keys, marks, len(keys))

    def delete_dscp(self, keys: np.ndarray) -> None:
        """One BPF_MAP_DELETE_BATCH of flow_key records (all must be in the map); see write_dscp."""
        self._require_attached()
        libbpf.map_delete_batch(self._dscp_fd, keys, len(keys))

    def _restore(self, keys: list[FlowKey]) -> None:
        """Put the kernel map back to self._dscp for these keys after a failed batch."""
        for key in keys:
            old = self._dscp.get(key)
            try:
                if old is None:
                    libbpf.map_delete_batch(self._dscp_fd, pack_key(key), 1)
                else:
                    libbpf.map_update_batch(self._dscp_fd, pack_key(key), bytes([encode_dscp(old)]), 1)
            except libbpf.BpfSyscallError:
                pass  # not there / unchanged: already in the old state

    def read_dscp(self) -> dict[FlowKey, int | None]:
        """The DSCP map as the kernel holds it (None: an entry that leaves packets alone)."""
        self._require_attached()
        rows = libbpf.map_lookup_all(self._dscp_fd, KEY_FORMAT.size, DSCP_FORMAT.size, self.max_marked_flows)
        return {unpack_key(k): decode_dscp(v[0]) for k, v in rows}

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
        return int(self._bpf.funcs[PROGRAM_NAME.encode()].fd)


def load_detached(max_flows: int = 1024, max_marked_flows: int | None = None) -> Datapath:
    """A Datapath whose program and maps are loaded but attached nowhere (for BPF_PROG_TEST_RUN)."""
    dp = Datapath("none", max_flows=max_flows, max_marked_flows=max_marked_flows)
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

