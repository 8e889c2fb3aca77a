"""Python mirror of bpf/flow_marker.h: the map key/value structs and their encoding.

The ONE place that knows the byte layout of the datapath maps. ctypes structs
mirror the C structs field by field (tests/unit/test_flow_structs.py compiles
the header with clang and compares sizes and offsets); FlowKey / FlowStats
are the friendly immutable forms the agent uses. Pure: no bcc, no I/O.
"""

from __future__ import annotations

import ctypes
import functools
import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

IPPROTO_TCP = 6
IPPROTO_UDP = 17
PROTOCOLS = {IPPROTO_TCP: "tcp", IPPROTO_UDP: "udp"}

FLOW_DSCP_SET = 0x80  # flow_dscp.mark = FLOW_DSCP_SET | dscp; 0 = leave alone
FLOW_DSCP_MASK = 0x3F
DSCP_MAX = 63


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


class FlowDscpC(ctypes.Structure):
    """struct flow_dscp (1 byte)."""

    _fields_ = [("mark", ctypes.c_uint8)]


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
DSCP_FORMAT = struct.Struct("=B")
DSCP_KEY_FORMAT = struct.Struct("=40sB3x")  # struct flow_dscp_key: packed flow_key, dscp
DSCP_STATS_FORMAT = struct.Struct("=QQ")
LEASE_KEY_FORMAT = struct.Struct("=I")
LEASE_FORMAT = struct.Struct("=Q")

# numpy record types derived from the ctypes structs (same fields, offsets and size): the
# buffers of BPF_MAP_*_BATCH for 10,000 flows are built as arrays, not entry by entry.
KEY_DTYPE = np.dtype(FlowKeyC)
DSCP_DTYPE = np.dtype(FlowDscpC)


_inet4 = functools.partial(socket.inet_pton, socket.AF_INET)  # strict dotted quad (unlike inet_aton)


def ipv4_key_records(src: Sequence[str], dst: Sequence[str], sport: Sequence[int], dport: Sequence[int],
                     proto: Sequence[int]) -> np.ndarray:
    """struct flow_key records (KEY_DTYPE) of IPv4 flows, built column by column.

    Addresses are dotted-quad strings (already validated); ports are in host order, as the
    program stores them. Raises ValueError for a bad address, port or protocol."""
    n = len(src)
    out = np.zeros(n, dtype=KEY_DTYPE)
    try:
        out["src_addr"][:, :4] = np.frombuffer(b"".join(map(_inet4, src)), np.uint8).reshape(n, 4)
        out["dst_addr"][:, :4] = np.frombuffer(b"".join(map(_inet4, dst)), np.uint8).reshape(n, 4)
    except (OSError, TypeError, ValueError):
        raise ValueError("a flow address is not an IPv4 address") from None
    ports = np.array([sport, dport], dtype=np.int64).reshape(2, n)
    if n and (ports.min() < 0 or ports.max() > 65535):
        raise ValueError("a flow port is outside 0..65535")
    protos = np.asarray(proto, dtype=np.int64)
    if n and not np.isin(protos, list(PROTOCOLS)).all():
        raise ValueError(f"a flow protocol is not one of {sorted(PROTOCOLS)}")
    out["src_port"], out["dst_port"], out["proto"] = ports[0], ports[1], protos
    out["ip_version"] = 4
    return out


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
class FlowKey:
    """A TCP or UDP 5-tuple as the egress program sees it (src = this host's side)."""

    src: IPAddress
    dst: IPAddress
    sport: int
    dport: int
    proto: int = IPPROTO_TCP
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        src, dst = _address("src", self.src), _address("dst", self.dst)
        if src.version != dst.version:
            raise ValueError(f"src={src}, dst={dst}: both addresses must be IPv4 or both IPv6")
        for name in ("sport", "dport"):
            port = getattr(self, name)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"{name}={port!r}: a port is an integer in 0..65535")
        if self.proto not in PROTOCOLS:
            raise ValueError(f"proto={self.proto!r}: allowed are {IPPROTO_TCP} (tcp) and {IPPROTO_UDP} (udp)")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(
            self, "packed",
            KEY_FORMAT.pack(src.packed, dst.packed, self.sport, self.dport, self.proto, src.version),
        )

    @classmethod
    def unpack(cls, raw: bytes) -> FlowKey:
        """Decode the bytes of a struct flow_key."""
        src, dst, sport, dport, proto, version = KEY_FORMAT.unpack(raw)
        if version == 4:
            return cls(ipaddress.IPv4Address(src[:4]), ipaddress.IPv4Address(dst[:4]), sport, dport, proto)
        if version == 6:
            return cls(ipaddress.IPv6Address(src), ipaddress.IPv6Address(dst), sport, dport, proto)
        raise ValueError(f"ip_version={version}: a flow_key holds 4 or 6")

    def reversed(self) -> FlowKey:
        """The same flow seen from the other end (replies)."""
        return FlowKey(self.dst, self.src, self.dport, self.sport, self.proto)

    def __str__(self) -> str:
        def ep(addr: IPAddress, port: int) -> str:
            return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"

        return f"{PROTOCOLS[self.proto]} {ep(self.src, self.sport)} -> {ep(self.dst, self.dport)}"


@dataclass(frozen=True)
class FlowStats:
    """Counters of one flow (see struct flow_stats for the exact meaning)."""

    bytes: int
    packets: int
    last_seen_ns: int
    cgroup_id: int

    @classmethod
    def unpack(cls, raw: bytes) -> FlowStats:
        """Decode the bytes of a struct flow_stats."""
        return cls(*STATS_FORMAT.unpack(raw))


def _address(name: str, value: object) -> IPAddress:
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return value
    try:
        return ipaddress.ip_address(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an IPv4 or IPv6 address") from None
