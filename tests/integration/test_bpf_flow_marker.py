"""bpf/flow_marker.c on crafted packets via BPF_PROG_TEST_RUN (real kernel, no interface).

Packets are built byte by byte (packets.py) and checksums computed there, independently
of the program and of leveller's code. The marking tests run under a running
lease (an hour ahead); the lease tests check that without one, or after it,
nothing is rewritten whatever the DSCP maps hold. A marked flow's DSCP is in two
maps: flow_dscp_egress (flow -> slot) and flow_mark_egress (slot -> mark, an
array the agent writes through mmap); tests/integration/test_bpf_mark_slots.py
covers the slots themselves.
"""

from __future__ import annotations

import ctypes
import struct
import time
from collections.abc import Iterator

import numpy as np
import pytest

from leveller.agent import libbpf
from leveller.agent.flow_structs import (
    KEY_FORMAT,
    SLOT_FORMAT,
    FlowDscpC,
    FlowKeyC,
    FlowSlotC,
    FlowStatsC,
    decode_dscp,
    key_records,
    pack_key,
    unpack_key,
)
from leveller.errors import UserError

from .packets import (
    ETH_IP,
    ipv4,
    ipv4_checksum_ok,
    ipv6,
    key4,
    key6,
    run,
    tcp,
    udp,
)

pytestmark = pytest.mark.privileged

LEASE_S = 3600.0  # the marking tests' lease: runs for the whole test session
LOADERS = ("libbpf", "bcc")  # leveller.agent.bpfload: one source, two loaders, the same program


@pytest.fixture(scope="module", params=LOADERS)
def loaded(request: pytest.FixtureRequest) -> Iterator[object]:
    """The program loaded by each loader in turn (the CO-RE object by libbpf, the C by bcc): every test
    of this module checks both."""
    from leveller.agent.datapath import load_detached

    dp = load_detached(max_flows=1024, max_marked_flows=1024, loader=request.param)
    assert dp.loader_used == request.param
    yield dp
    dp.detach()


@pytest.fixture()
def dp(loaded: object) -> Iterator[object]:
    """The loaded program with its maps emptied and a running lease before each test."""
    loaded.clear_dscp(list(loaded.read_dscp()))  # type: ignore[attr-defined]
    raw = libbpf.map_lookup_all(loaded._dscp_fd, KEY_FORMAT.size, SLOT_FORMAT.size, 1024)  # type: ignore[attr-defined]
    if raw:  # entries a test wrote past the datapath's record
        libbpf.map_delete_batch(loaded._dscp_fd, b"".join(k for k, _ in raw), len(raw))  # type: ignore[attr-defined]
    assert not loaded.read_mark_array().any()  # type: ignore[attr-defined]  # every freed slot zeroed
    loaded.forget_flows(list(loaded.read_stats()))  # type: ignore[attr-defined]
    by_dscp = libbpf.map_lookup_all(loaded._dscp_stats_fd, 44, 16, loaded.max_dscp_stats)  # type: ignore[attr-defined]
    if by_dscp:
        libbpf.map_delete_batch(loaded._dscp_stats_fd, b"".join(k for k, _ in by_dscp), len(by_dscp))  # type: ignore[attr-defined]
    assert not loaded.read_stats() and not loaded.read_dscp() and not loaded.read_dscp_stats()  # type: ignore[attr-defined]
    loaded.set_lease(LEASE_S)  # type: ignore[attr-defined]
    return loaded


def test_the_kernels_maps_have_the_mirrors_struct_sizes(dp: object) -> None:
    """What the kernel created (BPF_OBJ_GET_INFO_BY_FD), whichever loader asked: the key and value
    sizes of leveller/agent/flow_structs.py, the sizes the datapath asked for, the mark array mmapable."""
    info = {name: libbpf.map_info(fd) for name, fd in (
        ("flow_stats_egress", dp._stats_fd), ("flow_dscp_egress", dp._dscp_fd),  # type: ignore[attr-defined]
        ("flow_mark_egress", dp._mark_fd), ("flow_lease_egress", dp._lease_fd),  # type: ignore[attr-defined]
        ("flow_dscp_stats_egress", dp._dscp_stats_fd))}  # type: ignore[attr-defined]
    lru_hash, hash_, array = 9, 1, 2  # enum bpf_map_type
    assert {n: (i.type, i.key_size, i.value_size) for n, i in info.items()} == {
        "flow_stats_egress": (lru_hash, ctypes.sizeof(FlowKeyC), ctypes.sizeof(FlowStatsC)),
        "flow_dscp_egress": (hash_, ctypes.sizeof(FlowKeyC), ctypes.sizeof(FlowSlotC)),
        "flow_mark_egress": (array, 4, ctypes.sizeof(FlowDscpC)),
        "flow_lease_egress": (array, 4, 8),
        "flow_dscp_stats_egress": (lru_hash, 44, 16),
    }
    assert info["flow_mark_egress"].map_flags & 1024  # BPF_F_MMAPABLE
    assert info["flow_mark_egress"].max_entries == dp.mark_slots == 2 * dp.max_marked_flows  # type: ignore[attr-defined]
    assert (info["flow_stats_egress"].max_entries, info["flow_dscp_egress"].max_entries,
            info["flow_lease_egress"].max_entries) == (1024, 1024, 1)
    assert info["flow_dscp_stats_egress"].max_entries == dp.max_dscp_stats  # type: ignore[attr-defined]
    assert all(n.startswith(i.name) for n, i in info.items())  # the kernel keeps 15 characters of a name


@pytest.mark.parametrize("ecn", [0, 1, 2, 3])
def test_ipv4_dscp_rewritten_ecn_kept_checksum_valid(dp: object, ecn: int) -> None:
    dp.set_dscp({key4(1000, 80): 46})  # type: ignore[attr-defined]
    pkt = ipv4(tcp(1000, 80, b"payload"), tos=(8 << 2) | ecn)
    out = run(dp, pkt)
    assert out[15] == (46 << 2) | ecn
    assert ipv4_checksum_ok(out[14:34])
    # only TOS and checksum changed
    changed = [i for i in range(len(pkt)) if pkt[i] != out[i]]
    assert set(changed) <= {15, 24, 25} and 15 in changed


def test_ipv4_set_dscp_zero_clears_dscp(dp: object) -> None:
    dp.set_dscp({key4(1001, 80): 0})  # type: ignore[attr-defined]
    out = run(dp, ipv4(tcp(1001, 80), tos=0xB9))
    assert out[15] == 0x01 and ipv4_checksum_ok(out[14:34])


def test_ipv4_udp_is_marked(dp: object) -> None:
    dp.set_dscp({key4(53, 5353, 17): 10})  # type: ignore[attr-defined]
    out = run(dp, ipv4(udp(53, 5353, b"x" * 20), proto=17))
    assert out[15] == 10 << 2 and ipv4_checksum_ok(out[14:34])


def test_other_protocol_or_direction_of_the_flow_is_not_marked(dp: object) -> None:
    dp.set_dscp({key4(1002, 80): 46})  # type: ignore[attr-defined]
    for pkt in (ipv4(udp(1002, 80), proto=17), ipv4(tcp(80, 1002)), ipv4(tcp(1002, 81))):
        assert run(dp, pkt) == pkt


def test_matching_dscp_leaves_packet_identical(dp: object) -> None:
    dp.set_dscp({key4(1003, 80): 46})  # type: ignore[attr-defined]
    pkt = ipv4(tcp(1003, 80), tos=0xBA)
    assert run(dp, pkt) == pkt


@pytest.mark.parametrize("ecn", [0, 3])
def test_ipv6_traffic_class_set_flow_label_kept(dp: object, ecn: int) -> None:
    dp.set_dscp({key6(2000, 443): 46})  # type: ignore[attr-defined]
    label = 0xFABCD  # high nibble shares a byte with the traffic class
    pkt = ipv6(tcp(2000, 443, b"data"), tclass=(3 << 2) | ecn, flow_label=label)
    out = run(dp, pkt)
    first = struct.unpack("!I", out[14:18])[0]
    assert first >> 28 == 6
    assert (first >> 20) & 0xFF == (46 << 2) | ecn
    assert first & 0xFFFFF == label
    assert out[18:] == pkt[18:]


def test_unmapped_flow_identical_but_counted(dp: object) -> None:
    dp.set_dscp({key4(1, 2): 46})  # type: ignore[attr-defined]
    pkt = ipv4(tcp(1004, 80, b"y" * 100), tos=0x11)
    assert run(dp, pkt, repeat=3) == pkt
    stats = dp.read_stats()  # type: ignore[attr-defined]
    st = stats[key4(1004, 80)]
    assert (st.bytes, st.packets) == (3 * (20 + 20 + 100), 3)
    assert st.last_seen_ns > 0
    assert set(stats) == {key4(1004, 80)}


def test_counters_per_flow_v4_and_v6(dp: object) -> None:
    run(dp, ipv4(tcp(1005, 80, b"a" * 10)))
    run(dp, ipv4(tcp(1005, 80, b"a" * 30)))
    run(dp, ipv6(udp(1006, 80, b"b" * 7), nexthdr=17))
    stats = dp.read_stats()  # type: ignore[attr-defined]
    assert stats[key4(1005, 80)].bytes == (40 + 10) + (40 + 30)
    assert stats[key4(1005, 80)].packets == 2
    assert stats[key6(1006, 80, 17)].bytes == 40 + 8 + 7
    assert stats[key6(1006, 80, 17)].packets == 1


def test_bytes_per_dscp_the_packets_left_with(dp: object) -> None:
    # an unmarked flow counts under its own DSCP; a marked one under the DSCP it was rewritten to,
    # also when the mark changes (one entry per DSCP); with the lease ended, under its own again
    run(dp, ipv4(tcp(1010, 80, b"u" * 60), tos=(10 << 2) | 1), repeat=2)
    dp.set_dscp({key4(1011, 80): 8})  # type: ignore[attr-defined]
    run(dp, ipv4(tcp(1011, 80, b"m" * 100)), repeat=3)
    dp.set_dscp({key4(1011, 80): 16})  # type: ignore[attr-defined]
    run(dp, ipv4(tcp(1011, 80, b"m" * 100)))
    dp.set_dscp({key6(2011, 443): 8})  # type: ignore[attr-defined]
    run(dp, ipv6(tcp(2011, 443, b"s" * 12), tclass=4 << 2))
    dp.set_lease(0)  # type: ignore[attr-defined]
    run(dp, ipv4(tcp(1011, 80, b"m" * 100), tos=4 << 2))
    got = dp.read_dscp_stats()  # type: ignore[attr-defined]
    assert got == {(key4(1010, 80), 10): (2 * (20 + 20 + 60), 2), (key4(1011, 80), 8): (3 * 140, 3),
                   (key4(1011, 80), 16): (140, 1), (key6(2011, 443), 8): (40 + 20 + 12, 1),
                   (key4(1011, 80), 4): (140, 1)}
    stats = dp.read_stats()  # type: ignore[attr-defined]
    assert stats[key4(1011, 80)].bytes == 5 * 140  # the flow's total is the sum over its DSCPs


def _malformed() -> dict[str, bytes]:
    full = ipv4(tcp(1007, 80, b"z" * 8))
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    vlan = ETH_IP[:12] + b"\x81\x00\x00\x05\x08\x00" + full[14:]
    return {
        "non-ip (arp)": arp,
        "vlan-tagged": vlan,
        # (BPF_PROG_TEST_RUN itself refuses an IPv4/IPv6 ethertype whose IP header is cut)
        "no l4 header": full[:14 + 20],
        "truncated tcp header": full[:14 + 20 + 10],
        "truncated udp header": ipv4(udp(1007, 80), proto=17)[:14 + 20 + 6],
        "ipv4 options": ipv4(tcp(1007, 80), options=b"\x01\x01\x01\x00"),
        "first fragment (MF)": ipv4(tcp(1007, 80), frag=0x2000),
        "later fragment": ipv4(tcp(1007, 80), frag=0x0010),  # bytes that look like the flow
        "ipv4 version field wrong": ETH_IP + bytes([0x65]) + full[15:],
        "icmp": ipv4(b"\x08\x00" + bytes(6), proto=1),
        "ipv6 hop-by-hop ext header": ipv6(bytes([6, 0]) + bytes(6) + tcp(1007, 80), nexthdr=0),
        "truncated ipv6 tcp header": ipv6(tcp(1007, 80))[:14 + 40 + 19],
    }


@pytest.mark.parametrize("name", list(_malformed()))
def test_malformed_or_foreign_packets_pass_identical_and_uncounted(dp: object, name: str) -> None:
    mapped = {key4(1007, 80): 46, key6(1007, 80): 46}
    dp.set_dscp(mapped)  # type: ignore[attr-defined]
    pkt = _malformed()[name]
    assert run(dp, pkt) == pkt
    assert dp.read_stats() == {}  # type: ignore[attr-defined]


def test_invalid_marks_written_directly_leave_packets_alone(dp: object) -> None:
    for sport, mark in ((1100, 0x00), (1101, 0x40 | 46), (1102, 46), (1103, 0xFF)):
        key = key4(sport, 80)
        dp.write_dscp(key_records([key]), np.array([mark], dtype=np.uint8))  # type: ignore[attr-defined]
        assert dp.read_dscp()[key] is None  # type: ignore[attr-defined]
        pkt = ipv4(tcp(sport, 80), tos=0x05)
        assert run(dp, pkt) == pkt, f"mark {mark:#x}"


def test_a_slot_past_the_mark_array_leaves_packets_alone(dp: object) -> None:
    """Slot entries written around the datapath, pointing past the mark array: the program's lookup
    of the mark fails and the packet passes unchanged; a marked flow beside them is still marked."""
    valid = key4(1105, 80)
    dp.set_dscp({valid: 46})  # type: ignore[attr-defined]
    for sport, slot in ((1104, dp.mark_slots), (1106, 2**32 - 1)):  # type: ignore[attr-defined]
        key = key4(sport, 80)
        libbpf.map_update_batch(dp._dscp_fd, pack_key(key), SLOT_FORMAT.pack(slot), 1)  # type: ignore[attr-defined]
        assert dp.read_dscp()[key] is None  # type: ignore[attr-defined]
        pkt = ipv4(tcp(sport, 80), tos=0x05)
        assert run(dp, pkt) == pkt, f"slot {slot}"
    assert run(dp, ipv4(tcp(1105, 80)))[15] == 46 << 2


def test_clear_dscp_stops_marking(dp: object) -> None:
    key = key4(1200, 80)
    dp.set_dscp({key: 46})  # type: ignore[attr-defined]
    assert run(dp, ipv4(tcp(1200, 80)))[15] == 46 << 2
    dp.clear_dscp([key, key4(9, 9)])  # type: ignore[attr-defined]
    pkt = ipv4(tcp(1200, 80))
    assert run(dp, pkt) == pkt
    assert dp.read_dscp() == {}  # type: ignore[attr-defined]


def test_full_maps_keep_forwarding_and_refuse_extra_marks_atomically() -> None:
    from leveller.agent.datapath import load_detached

    small = load_detached(max_flows=2, max_marked_flows=2)
    try:
        small.set_lease(LEASE_S)
        small.set_dscp({key4(1, 80): 10, key4(2, 80): 12})
        with pytest.raises(UserError, match="max_marked_flows=2"):
            small.set_dscp({key4(1, 80): 20, key4(3, 80): 14})
        assert small.read_dscp() == {key4(1, 80): 10, key4(2, 80): 12}, "nothing half-applied"
        for sport in range(1, 9):  # 8 flows through a 2-entry LRU stats map
            pkt = ipv4(tcp(sport, 80), tos=0)
            out = run(small, pkt)
            want = {1: 10, 2: 12}.get(sport)
            assert out == pkt if want is None else out[15] == want << 2
        assert 1 <= len(small.read_stats()) <= 2
        with pytest.raises(UserError, match="dscp"):
            small.set_dscp({key4(1, 80): 64})
    finally:
        small.detach()


def test_a_fresh_program_has_no_lease_and_rewrites_nothing() -> None:
    from leveller.agent.datapath import load_detached

    fresh = load_detached(max_flows=8, max_marked_flows=8)
    try:
        assert fresh.lease_deadline() == 0
        fresh.set_dscp({key4(1300, 80): 46})
        pkt = ipv4(tcp(1300, 80), tos=0x01)
        assert run(fresh, pkt) == pkt  # marked in the map, but nobody holds a lease
        assert fresh.read_stats()[key4(1300, 80)].packets == 1  # counting goes on regardless
    finally:
        fresh.detach()


def test_an_ended_lease_stops_every_rewrite(dp: object) -> None:
    key = key4(1301, 80)
    dp.set_dscp({key: 46})  # type: ignore[attr-defined]
    assert run(dp, ipv4(tcp(1301, 80)))[15] == 46 << 2
    dp.set_lease_deadline(time.monotonic_ns() - 1)  # type: ignore[attr-defined]
    pkt = ipv4(tcp(1301, 80), tos=0x02)
    assert run(dp, pkt) == pkt
    dp.set_lease(0)  # type: ignore[attr-defined]
    assert dp.lease_deadline() == 0  # type: ignore[attr-defined]
    assert run(dp, pkt) == pkt
    assert dp.read_dscp() == {key: 46}  # type: ignore[attr-defined]  # the map still says 46: the kernel decides


def test_the_lease_runs_out_by_the_kernel_clock_with_nobody_acting(dp: object) -> None:
    key = key4(1302, 80)
    dp.set_dscp({key: 46})  # type: ignore[attr-defined]
    before = time.monotonic_ns()
    dp.set_lease(0.5)  # type: ignore[attr-defined]
    deadline = dp.lease_deadline()  # type: ignore[attr-defined]
    assert before + 500_000_000 <= deadline <= time.monotonic_ns() + 500_000_000  # CLOCK_MONOTONIC ns
    if time.monotonic_ns() < deadline - 50_000_000:  # (skipped only if this process stalled 450 ms)
        assert run(dp, ipv4(tcp(1302, 80)))[15] == 46 << 2
    while time.monotonic_ns() <= deadline:
        time.sleep(0.02)
    pkt = ipv4(tcp(1302, 80), tos=0x03)
    assert run(dp, pkt) == pkt


@pytest.mark.parametrize("chunk", [1, 7, 1024, 4096])
def test_lookup_all_reads_every_entry_whatever_the_chunk(chunk: int) -> None:
    """map_lookup_all reads a map in chunks; any chunk size (1: every bucket with two keys
    overflows it and it must grow) returns each written entry exactly once."""
    from leveller.agent.datapath import load_detached

    dp = load_detached(max_flows=4096, max_marked_flows=4096)
    try:
        marks = {key4(1000 + i, 2000 + i % 97): (i % 63) + 1 for i in range(3000)}
        dp.set_dscp(marks)
        rows = libbpf.map_lookup_all(dp._dscp_fd, KEY_FORMAT.size, SLOT_FORMAT.size,  # type: ignore[attr-defined]
                                     dp.max_marked_flows, chunk=chunk)
        assert len(rows) == len(marks)
        got = {unpack_key(k): SLOT_FORMAT.unpack(v)[0] for k, v in rows}
        assert len(got) == len(marks) == len(set(got.values()))  # one slot per flow
        held = dp.read_mark_array()
        assert {k: decode_dscp(int(held[s])) for k, s in got.items()} == marks
        assert dp.read_dscp() == marks
    finally:
        dp.detach()
