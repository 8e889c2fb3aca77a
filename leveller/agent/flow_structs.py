"""Python mirror of bpf/flow_marker.h: the map key/value structs and their encoding.

The ONE place that knows the byte layout of the datapath maps. ctypes structs
mirror the C structs field by field (tests/unit/test_flow_structs.py compiles
the header with clang and compares sizes and offsets). A flow is the model's
FlowKey (leveller.model.flow, IPv4 or IPv6): this module only packs it into the
map key (``pack_key``, ``key_records``) and back (``unpack_key``); FlowStats is
the decoded counters. A marked flow's DSCP lives in two maps: flow_dscp_egress
(flow_key -> flow_slot) and the mmap'd array flow_mark_egress (slot -> flow_dscp).
Pure: no bcc, no I/O.
"""

from __future__ import annotations

import builtins
import ctypes
import ipaddress
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leveller.model.flow import PORT_PROTOCOLS, FlowKey
from leveller.model.limits import DSCP_MAX

IPPROTO_TCP = 6
IPPROTO_UDP = 17

FLOW_DSCP_SET = 0x80  # flow_dscp.mark = FLOW_DSCP_SET | dscp; 0 = leave alone
FLOW_DSCP_MASK = 0x3F


class FlowKeyC(ctypes.Structure):
    """struct flow_key (40 bytes)."""

    _fields_ = [
        ("src_addr", ctypes.c_uint8 * 16),
        ("dst_addr", ctypes.c_uint8 * 16),
        ("src_port", ctypes.c_uint16),
        ("dst_port", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("ip_version", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 2),
    ]


class FlowStatsC(ctypes.Structure):
    """struct flow_stats (32 bytes)."""

    _fields_ = [
        ("bytes", ctypes.c_uint64),
        ("packets", ctypes.c_uint64),
        ("last_seen_ns", ctypes.c_uint64),
        ("cgroup_id", ctypes.c_uint64),
    ]


class FlowSlotC(ctypes.Structure):
    """struct flow_slot (4 bytes): the value of flow_dscp_egress, a marked flow's index in flow_mark_egress."""

    _fields_ = [("slot", ctypes.c_uint32)]


class FlowDscpC(ctypes.Structure):
    """struct flow_dscp (8 bytes): one element of flow_mark_egress, as laid out in its mmap'd area."""

    _fields_ = [("mark", ctypes.c_uint8), ("pad", ctypes.c_uint8 * 7)]


class FlowDscpKeyC(ctypes.Structure):
    """struct flow_dscp_key (44 bytes): a flow and the DSCP its packets left with."""

    _fields_ = [("flow", FlowKeyC), ("dscp", ctypes.c_uint8), ("pad", ctypes.c_uint8 * 3)]


class FlowDscpStatsC(ctypes.Structure):
    """struct flow_dscp_stats (16 bytes)."""

    _fields_ = [("bytes", ctypes.c_uint64), ("packets", ctypes.c_uint64)]


class FlowLeaseC(ctypes.Structure):
    """struct flow_lease (8 bytes): the only value of flow_lease_egress (key: u32 0)."""

    _fields_ = [("deadline_ns", ctypes.c_uint64)]


# struct-module formats with the same layout (native byte order, no padding):
# fast packing of thousands of entries for batched map operations.
KEY_FORMAT = struct.Struct("=16s16sHHBB2x")
STATS_FORMAT = struct.Struct("=QQQQ")
SLOT_FORMAT = struct.Struct("=I")
DSCP_FORMAT = struct.Struct("=B7x")
DSCP_KEY_FORMAT = struct.Struct("=40sB3x")  # struct flow_dscp_key: packed flow_key, dscp
DSCP_STATS_FORMAT = struct.Struct("=QQ")
LEASE_KEY_FORMAT = struct.Struct("=I")
LEASE_FORMAT = struct.Struct("=Q")

# numpy record types derived from the ctypes structs (same fields, offsets and size): the
# buffers of BPF_MAP_*_BATCH for 10,000 flows are built as arrays, not entry by entry, and
# DSCP_DTYPE views the mmap'd flow_mark_egress (one record per slot).
KEY_DTYPE = np.dtype(FlowKeyC)
SLOT_DTYPE = np.dtype(FlowSlotC)
DSCP_DTYPE = np.dtype(FlowDscpC)


_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}


def key_records(keys: Sequence[FlowKey]) -> np.ndarray:
    """struct flow_key records (KEY_DTYPE) of flows, IPv4 and IPv6 alike, built column by column.

    Ports are in host order, as the program stores them. Raises ValueError for an address that
    is not canonical IPv4/IPv6 text, a port outside 0..65535 or a protocol the marker does not
    track (only TCP and UDP)."""
    n = len(keys)
    out = np.zeros(n, dtype=KEY_DTYPE)
    if not n:
        return out
    src, dst, sport, dport, proto = zip(*keys)
    version = np.fromiter((6 if ":" in a else 4 for a in src), dtype=np.uint8, count=n)
    try:
        for v, width in ((4, 4), (6, 16)):
            rows = np.flatnonzero(version == v)
            if not len(rows):
                continue
            pton, family = socket.inet_pton, _FAMILY[v]
            for column, addrs in (("src_addr", src), ("dst_addr", dst)):
                packed = b"".join(pton(family, addrs[i]) for i in rows.tolist())
                out[column][rows, :width] = np.frombuffer(packed, np.uint8).reshape(len(rows), width)
    except (OSError, TypeError, ValueError):
        raise ValueError("a flow address is not an IPv4 or IPv6 address (both ends the same version)") from None
    ports = np.array([sport, dport], dtype=np.int64).reshape(2, n)
    if ports.min() < 0 or ports.max() > 65535:
        raise ValueError("a flow port is outside 0..65535")
    protos = np.asarray(proto, dtype=np.int64)
    if not np.isin(protos, PORT_PROTOCOLS).all():
        raise ValueError(f"a flow protocol is not one of {list(PORT_PROTOCOLS)} (tcp, udp)")
    out["src_port"], out["dst_port"], out["proto"] = ports[0], ports[1], protos
    out["ip_version"] = version
    return out


def pack_key(key: FlowKey) -> bytes:
    """The bytes of the struct flow_key of ``key``; ValueError as ``key_records``."""
    return key_records([key]).tobytes()


def unpack_key(raw: bytes) -> FlowKey:
    """The FlowKey of the bytes of a struct flow_key (addresses in canonical text)."""
    src, dst, sport, dport, proto, version = KEY_FORMAT.unpack(raw)
    if version == 4:
        return FlowKey(str(ipaddress.IPv4Address(src[:4])), str(ipaddress.IPv4Address(dst[:4])), sport, dport, proto)
    if version == 6:
        return FlowKey(str(ipaddress.IPv6Address(src)), str(ipaddress.IPv6Address(dst)), sport, dport, proto)
    raise ValueError(f"ip_version={version}: a flow_key holds 4 or 6")


def encode_dscp_array(dscp: np.ndarray) -> np.ndarray:
    """flow_dscp.mark (uint8) for an array of DSCP values; ValueError outside 0..63."""
    dscp = np.asarray(dscp)
    if dscp.size and (dscp.dtype.kind not in "iu" or dscp.min() < 0 or dscp.max() > DSCP_MAX):
        raise ValueError(f"a DSCP is an integer in 0..{DSCP_MAX}")
    return (dscp.astype(np.uint8) | FLOW_DSCP_SET).astype(np.uint8)


def encode_dscp(dscp: int) -> int:
    """flow_dscp.mark for a DSCP value; raises ValueError outside 0..63."""
    if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp <= DSCP_MAX:
        raise ValueError(f"dscp={dscp!r}: a DSCP is an integer in 0..{DSCP_MAX}")
    return FLOW_DSCP_SET | dscp


def decode_dscp(mark: int) -> int | None:
    """The DSCP a flow_dscp.mark sets, or None when the program leaves the packet alone."""
    if mark & FLOW_DSCP_SET and not mark & ~(FLOW_DSCP_SET | FLOW_DSCP_MASK):
        return mark & FLOW_DSCP_MASK
    return None


@dataclass(frozen=True)
class FlowStats:
    """Counters of one flow (see struct flow_stats for the exact meaning)."""

    bytes: int
    packets: int
    last_seen_ns: int
    cgroup_id: int

    @classmethod
    def unpack(cls, raw: builtins.bytes) -> FlowStats:  # `bytes` is a field here
        """Decode the bytes of a struct flow_stats."""
        return cls(*STATS_FORMAT.unpack(raw))
