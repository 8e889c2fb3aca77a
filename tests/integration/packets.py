"""Packets for bpf/flow_marker.c under BPF_PROG_TEST_RUN, built byte by byte here with their
checksums computed here, independently of the program and of leveller's code; ``run`` passes one
through a loaded program (test_bpf_flow_marker.py, test_bpf_mark_slots.py)."""

from __future__ import annotations

import ipaddress
import struct

from leveller.agent import libbpf
from leveller.model.flow import FlowKey, flow_key

TC_ACT_OK = 0
SRC4, DST4 = ipaddress.IPv4Address("10.9.0.1"), ipaddress.IPv4Address("10.9.0.2")
SRC6, DST6 = ipaddress.IPv6Address("fd00:9::1"), ipaddress.IPv6Address("fd00:9::2")
ETH_IP, ETH_IP6 = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00", \
    b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x86\xdd"


def ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ipv4_checksum_ok(header: bytes) -> bool:
    return ones_complement_sum(header) == 0xFFFF


def tcp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    # checksum field left 0: neither the program nor the test run look at it
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 0x18, 65535, 0, 0) + payload


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def ipv4(l4: bytes, proto: int = 6, tos: int = 0, frag: int = 0x4000, options: bytes = b"",
         src: ipaddress.IPv4Address = SRC4, dst: ipaddress.IPv4Address = DST4) -> bytes:
    ihl = 5 + len(options) // 4
    hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, ihl * 4 + len(l4), 0x1234, frag, 64,
                                proto, 0, src.packed, dst.packed) + options)
    hdr[10:12] = struct.pack("!H", 0xFFFF - ones_complement_sum(bytes(hdr)))
    assert ipv4_checksum_ok(bytes(hdr))
    return ETH_IP + bytes(hdr) + l4


def ipv6(l4: bytes, nexthdr: int = 6, tclass: int = 0, flow_label: int = 0) -> bytes:
    first = (6 << 28) | (tclass << 20) | flow_label
    return ETH_IP6 + struct.pack("!IHBB16s16s", first, len(l4), nexthdr, 64, SRC6.packed, DST6.packed) + l4


def key4(sport: int, dport: int, proto: int = 6) -> FlowKey:
    return flow_key(SRC4, DST4, sport, dport, proto)


def key6(sport: int, dport: int, proto: int = 6) -> FlowKey:
    return flow_key(SRC6, DST6, sport, dport, proto)


def run(dp: object, packet: bytes, repeat: int = 1) -> bytes:
    res = libbpf.prog_test_run(dp.program_fd, packet, repeat)  # type: ignore[attr-defined]
    assert res.retval == TC_ACT_OK
    assert len(res.data) == len(packet), "the program must never truncate or grow a packet"
    return res.data
