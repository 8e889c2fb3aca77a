"""The fuzz's reference (leveller/bench/fuzz_oracle.py) against scapy's own parsing and checksums."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import IP, TCP, UDP, IPOption_NOP, IPOption_Router_Alert
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from leveller.agent.flow_structs import decode_dscp
from leveller.bench import fuzz_oracle as o

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
ipv4s = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
ipv6s = st.integers(0, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n)))
ports = st.integers(0, 65535)
payloads = st.binary(max_size=64)


def v4(src: str = "10.0.0.11", dst: str = "10.0.0.12", sport: int = 40000, dport: int = 29500, tos: int = 0,
       proto: str = "tcp", **ip: object) -> bytes:
    l4 = TCP(sport=sport, dport=dport) if proto == "tcp" else UDP(sport=sport, dport=dport)
    return raw(ETH / IP(src=src, dst=dst, tos=tos, **ip) / l4 / Raw(b"payload"))


def flow(src: str, dst: str, sport: int, dport: int, proto: int) -> o.Flow:
    a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    return a.version, a.packed, b.packed, sport, dport, proto


@settings(max_examples=300)
@given(six=st.booleans(), data=st.data(), sport=ports, dport=ports, tc=st.integers(0, 255), udp=st.booleans(),
       payload=payloads)
def test_flow_is_what_scapy_dissects(six: bool, data: st.DataObject, sport: int, dport: int, tc: int, udp: bool,
                                     payload: bytes) -> None:
    addrs = ipv6s if six else ipv4s
    src, dst = data.draw(addrs), data.draw(addrs)
    l3, family, af = (IPv6(src=src, dst=dst, tc=tc), IPv6, socket.AF_INET6) if six else \
        (IP(src=src, dst=dst, tos=tc), IP, socket.AF_INET)
    l4 = UDP(sport=sport, dport=dport) if udp else TCP(sport=sport, dport=dport)
    frame = raw(ETH / l3 / l4 / Raw(payload))
    back = Ether(frame)
    proto = back[family].nh if six else back[family].proto
    assert o.flow_of(frame) == (6 if six else 4, socket.inet_pton(af, back[family].src),
                                    socket.inet_pton(af, back[family].dst), back.sport, back.dport, proto)


@settings(max_examples=300)
@given(src=ipv4s, dst=ipv4s, tos=st.integers(0, 255), ident=st.integers(0, 65535), ttl=st.integers(0, 255),
       proto=st.integers(0, 255), length=st.integers(20, 65535))
def test_ipv4_checksum_from_scratch_equals_scapys(src: str, dst: str, tos: int, ident: int, ttl: int, proto: int,
                                                 length: int) -> None:
    header = raw(IP(src=src, dst=dst, tos=tos, id=ident, ttl=ttl, proto=proto, len=length))
    assert o.ipv4_checksum(header) == int.from_bytes(header[10:12], "big")
    assert o.ones_complement_sum(header) == 0xFFFF


@pytest.mark.parametrize("frame,why", [
    (raw(ETH / IP(options=[IPOption_NOP()] * 4) / TCP()), "IPv4 options"),
    (raw(ETH / IP(options=[IPOption_Router_Alert()]) / UDP()), "IPv4 router alert"),
    (raw(ETH / IP(flags="MF") / TCP()), "first fragment"),
    (raw(ETH / IP(frag=3) / TCP()), "later fragment"),
    (raw(ETH / IP(proto=1) / Raw(b"\x08\x00" + bytes(30))), "ICMP"),
    (raw(ETH / IPv6() / IPv6ExtHdrHopByHop() / TCP()), "IPv6 extension header"),
    (raw(ETH / Dot1Q(vlan=5) / IP() / TCP()), "VLAN tag"),
    (raw(ETH / IP() / TCP())[:14 + 20 + 19], "TCP header one byte short"),
    (raw(ETH / IP() / UDP())[:14 + 20 + 7], "UDP header one byte short"),
    (raw(ETH / IPv6() / TCP())[:14 + 40 + 19], "IPv6 TCP header one byte short"),
    (raw(ETH) + bytes(10), "too short for IP"),
    (bytes(13), "no Ethernet header"),
])
def test_frames_the_program_must_not_understand(frame: bytes, why: str) -> None:
    assert o.flow_of(frame) is None, why
    exp = o.expect(frame, {}, True)
    assert exp.flow is None and exp.dscp is None and exp.count_packets == 0


def test_shortest_understood_frames() -> None:
    assert o.flow_of(raw(ETH / IP() / TCP())[:14 + 20 + 20]) is not None
    assert o.flow_of(raw(ETH / IP() / UDP())[:14 + 20 + 8]) is not None
    assert o.flow_of(raw(ETH / IP(flags="DF") / TCP())) is not None  # DF alone is no fragment


def test_kernel_input_rule() -> None:
    assert not o.kernel_takes(bytes(13))
    assert o.kernel_takes(bytes(14))  # an Ethernet header of some other ethertype
    full4, full6 = raw(ETH / IP() / TCP()), raw(ETH / IPv6() / TCP())
    assert not o.kernel_takes(full4[:33]) and o.kernel_takes(full4[:34])
    assert not o.kernel_takes(full6[:53]) and o.kernel_takes(full6[:54])


@given(mark=st.integers(0, 255))
def test_mark_validity_agrees_with_the_agents_decoder(mark: int) -> None:
    assert o.mark_is_valid(mark) == (decode_dscp(mark) is not None)


def test_expectations_for_mapped_unmapped_invalid_and_lease() -> None:
    f = flow("10.0.0.11", "10.0.0.12", 40000, 29500, 6)
    frame = v4(tos=0x01)
    assert o.expect(frame, {f: 0x80 | 46}, True).dscp == 46
    assert o.expect(frame, {f: 0x80 | 46}, False).dscp is None  # lease ended
    assert o.expect(frame, {f: 0x80 | 46}, False).mapped
    for bad in (0x00, 0x40 | 46, 0xC0 | 46, 0x2E):
        assert o.expect(frame, {f: bad}, True).dscp is None
    exp = o.expect(frame, {}, True, gso_segs=7)
    assert (exp.flow, exp.count_bytes, exp.count_packets) == (f, len(frame) - 14, 7)
    assert o.expect(frame, {}, True).count_packets == 1


def understood(frame: bytes) -> o.Flow:
    f = o.flow_of(frame)
    assert f is not None
    return f


def scapy_rewrite_v4(frame: bytes, dscp: int) -> bytes:
    """The frame with DSCP set by scapy, which recomputes the header checksum."""
    pkt = Ether(frame)
    pkt[IP].tos = (pkt[IP].tos & 0x03) | (dscp << 2)
    del pkt[IP].chksum
    return raw(pkt)


@settings(max_examples=100)
@given(tos=st.integers(0, 255), dscp=st.integers(0, 63), src=ipv4s)
def test_a_correct_ipv4_rewrite_passes_every_check(tos: int, dscp: int, src: str) -> None:
    frame = v4(src=src, tos=tos)
    f = understood(frame)
    assert f is not None
    exp = o.expect(frame, {f: 0x80 | dscp}, True)
    assert o.check(frame, scapy_rewrite_v4(frame, dscp), 0, exp, True) == []


def test_broken_ipv4_rewrites_are_named() -> None:
    frame = v4(tos=0x02)
    f = understood(frame)
    exp = o.expect(frame, {f: 0x80 | 10}, True)
    good = scapy_rewrite_v4(frame, 10)
    assert o.check(frame, good, 0, exp, True) == []
    assert o.check(frame, good, 2, exp, True) == ["verdict"]
    assert o.check(frame, good[:-1], 0, exp, True) == ["length"]
    assert o.check(frame, frame, 0, exp, True) == ["dscp"]  # not rewritten at all
    no_csum = bytearray(frame)
    no_csum[15] = (10 << 2) | 0x02
    assert o.check(frame, bytes(no_csum), 0, exp, True) == ["ipv4_checksum"]
    ecn_lost = scapy_rewrite_v4(v4(tos=10 << 2), 10)  # right DSCP, ECN 0 instead of 2, valid checksum
    assert o.check(frame, ecn_lost, 0, exp, True) == ["ecn"]
    ttl = bytearray(good)
    ttl[22] ^= 1
    assert "outside_dscp" in o.check(frame, bytes(ttl), 0, exp, True)


def test_corrupt_checksum_must_stay_exactly_as_corrupt() -> None:
    frame = bytearray(v4(tos=0))
    frame[24] ^= 0x10  # a corrupt header checksum on the way in
    frame = bytes(frame)
    f = understood(frame)
    exp = o.expect(frame, {f: 0x80 | 8}, True)
    # RFC 1624 incremental update: the header sum keeps its error
    old_word, new_word = 0x4500, 0x4500 | (8 << 2)
    csum = int.from_bytes(frame[24:26], "big")
    s = (~csum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    incremental = bytearray(frame)
    incremental[15] = 8 << 2
    incremental[24:26] = (~s & 0xFFFF).to_bytes(2, "big")
    assert o.check(frame, bytes(incremental), 0, exp, True) == []
    # recomputing from scratch would hide the corruption from the receiver
    assert o.check(frame, scapy_rewrite_v4(frame, 8), 0, exp, True) == ["ipv4_checksum"]


def test_unchanged_expectations_name_who_was_changed() -> None:
    frame = v4(tos=0)
    f = understood(frame)
    touched = bytearray(frame)
    touched[15] = 8 << 2
    touched = bytes(touched)
    assert o.check(frame, touched, 0, o.expect(frame, {}, True), True) == ["changed_unmapped"]
    assert o.check(frame, touched, 0, o.expect(frame, {f: 0x88}, False), False) == ["changed_lease_ended"]
    opts = raw(ETH / IP(options=[IPOption_NOP()] * 4) / TCP())
    assert o.check(opts, opts[:15] + b"\x20" + opts[16:], 0, o.expect(opts, {}, True), True) \
        == ["changed_not_understood"]
    # a mapped flow whose frame already carries the DSCP: must leave identical
    same = v4(tos=(8 << 2) | 1)
    assert o.check(same, same, 0, o.expect(same, {understood(same): 0x88}, True), True) == []


@settings(max_examples=100)
@given(tc=st.integers(0, 255), fl=st.integers(0, 2**20 - 1), dscp=st.integers(0, 63))
def test_ipv6_rewrite_checks(tc: int, fl: int, dscp: int) -> None:
    frame = raw(ETH / IPv6(src="fd00::b", dst="fd00::c", tc=tc, fl=fl) / UDP(sport=50000, dport=4791))
    f = understood(frame)
    exp = o.expect(frame, {f: 0x80 | dscp}, True)
    good = Ether(frame)
    good[IPv6].tc = (tc & 0x03) | (dscp << 2)
    good = raw(good)
    assert o.check(frame, good, 0, exp, True) == []
    clobbered = Ether(good)
    clobbered[IPv6].fl = fl ^ 0x80000
    assert "outside_dscp" in o.check(frame, raw(clobbered), 0, exp, True)
    if tc >> 2 != dscp:
        assert o.check(frame, frame, 0, exp, True) == ["dscp"]
