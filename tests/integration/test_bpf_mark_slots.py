"""The two DSCP maps of bpf/flow_marker.c on the real kernel: flow_dscp_egress (flow -> slot) and the
mmap'd flow_mark_egress (slot -> mark), written by the agent's BpfEnforcer and Datapath.

Packets are crafted by tests/integration/packets.py's builders and run with
BPF_PROG_TEST_RUN; the maps are read back through the bpf() syscall, never through the mapping the
datapath writes with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from leveller.agent import libbpf
from leveller.agent.datapath import Datapath, DatapathError, load_detached
from leveller.agent.enforce_bpf import BpfEnforcer
from leveller.agent.flow_structs import decode_dscp

from .packets import ipv4, ipv4_checksum_ok, ipv6, key4, key6, run, tcp
from .support import reset_datapath

pytestmark = pytest.mark.privileged


@pytest.fixture(scope="module")
def loaded() -> Iterator[Datapath]:
    """One program for the module's tests that take the default sizes: bcc compiles it for seconds."""
    dp = load_detached(max_flows=256, max_marked_flows=64)
    try:
        yield dp
    finally:
        dp.detach()


@pytest.fixture
def datapath(loaded: Datapath) -> Datapath:
    """The module's program as a freshly loaded one (support.reset_datapath)."""
    return reset_datapath(loaded)


def dscp_calls(dp: Datapath, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """From now on, every batch call on the datapath's maps but the lease: (kind, entries)."""
    calls: list[tuple[str, int]] = []
    update, delete = libbpf.map_update_batch, libbpf.map_delete_batch

    def logged_update(fd: int, keys: Any, values: Any, count: int) -> None:
        if fd != dp._lease_fd:
            calls.append(("update", count))
        update(fd, keys, values, count)

    def logged_delete(fd: int, keys: Any, count: int) -> None:
        calls.append(("delete", count))
        delete(fd, keys, count)

    monkeypatch.setattr(libbpf, "map_update_batch", logged_update)
    monkeypatch.setattr(libbpf, "map_delete_batch", logged_delete)
    return calls


def test_new_marks_of_flows_with_slots_take_no_map_write_and_mark_the_packets(
        datapath: Datapath, monkeypatch: pytest.MonkeyPatch) -> None:
    enf = BpfEnforcer(datapath)
    v4, v6 = [key4(3000 + i, 80) for i in range(20)], [key6(3000 + i, 443) for i in range(20)]
    enf.apply({k: 8 for k in v4 + v6}, 60)
    calls = dscp_calls(datapath, monkeypatch)
    for dscp in (46, 16, 0, 63):
        enf.apply({k: dscp for k in v4 + v6}, 60)
        assert calls == [], "a flow that holds a slot changes its mark without a bpf() call"
        assert datapath.read_dscp() == {k: dscp for k in v4 + v6}
        for ecn in (0, 3):
            out = run(datapath, ipv4(tcp(3007, 80, b"p"), tos=(5 << 2) | ecn))
            assert out[15] == (dscp << 2) | ecn and ipv4_checksum_ok(out[14:34])
            out6 = run(datapath, ipv6(tcp(3011, 443, b"q"), tclass=(5 << 2) | ecn, flow_label=0xABCDE))
            first = int.from_bytes(out6[14:18], "big")
            assert (first >> 20) & 0xFF == (dscp << 2) | ecn and first & 0xFFFFF == 0xABCDE
    enf.apply({k: 10 for k in v4[:5]}, 60)  # 35 leave: one delete batch
    assert calls == [("delete", 35)]
    pkt = ipv4(tcp(3007, 80), tos=0x01)
    assert run(datapath, pkt) == pkt  # left: unchanged
    assert run(datapath, ipv4(tcp(3004, 80), tos=0x01))[15] == (10 << 2) | 1


def test_set_dscp_on_flows_with_slots_is_a_store_too(datapath: Datapath, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [key4(3100 + i, 80) for i in range(10)]
    datapath.set_lease(60)
    datapath.set_dscp(dict.fromkeys(keys, 12))
    calls = dscp_calls(datapath, monkeypatch)
    datapath.set_dscp(dict.fromkeys(keys[:4], 20))
    assert calls == [] and datapath.read_dscp() == dict.fromkeys(keys[:4], 20) | dict.fromkeys(keys[4:], 12)
    datapath.set_dscp({keys[0]: 22, key4(3199, 80): 24})
    assert calls == [("update", 1)]
    assert run(datapath, ipv4(tcp(3100, 80)))[15] == 22 << 2
    assert run(datapath, ipv4(tcp(3199, 80)))[15] == 24 << 2


def test_a_left_flow_s_mark_is_zeroed_and_its_slot_reused_last(datapath: Datapath) -> None:
    enf = BpfEnforcer(datapath)
    a = key4(3200, 80)
    enf.apply({a: 46}, 60)
    slot = datapath.slots.slot_of[a]
    assert datapath.read_mark_array()[slot] == 0x80 | 46
    enf.apply({}, 60)
    assert datapath.read_mark_array()[slot] == 0 and datapath.read_dscp() == {}
    taken = []
    for i in range(datapath.mark_slots):  # one new flow at a time: the freed slot comes last
        k = key4(3300 + i, 80)
        enf.apply({k: 10}, 60)
        taken.append(datapath.slots.slot_of[k])
        assert run(datapath, ipv4(tcp(3300 + i, 80)))[15] == 10 << 2
        pkt = ipv4(tcp(3200, 80))
        assert run(datapath, pkt) == pkt
    assert taken[-1] == slot and slot not in taken[:-1]


def test_flows_taking_each_other_s_slots_never_see_another_flow_s_mark() -> None:
    """Three flows, two slots: every call one flow leaves and the next comes in, taking the slot the one
    before it left (what FIFO reuse does with no spare slot). Meanwhile another thread runs the
    flows' packets through the program without pause: a packet carries its own TOS or its own
    flow's DSCP, never another flow's."""
    dp = load_detached(max_flows=64, max_marked_flows=1)
    try:
        enf = BpfEnforcer(dp)
        own = {3401: 46, 3402: 10, 3403: 20}
        packets = {sport: ipv4(tcp(sport, 80), tos=0x01) for sport in own}
        seen: dict[int, set[int]] = {sport: set() for sport in own}
        stop = threading.Event()

        def sender() -> None:
            while not stop.is_set():
                for sport, pkt in packets.items():
                    seen[sport].add(run(dp, pkt)[15] >> 2)

        thread = threading.Thread(target=sender)
        thread.start()
        slots: dict[int, set[int]] = {sport: set() for sport in own}
        try:
            deadline = time.monotonic() + 2.0
            rounds = 0
            while time.monotonic() < deadline or rounds < 300:
                sport = list(own)[rounds % 3]
                enf.apply({key4(sport, 80): own[sport]}, 60)
                slots[sport].add(dp.slots.slot_of[key4(sport, 80)])
                rounds += 1
        finally:
            stop.set()
            thread.join()
        assert all(len(s) == 2 for s in slots.values()), "every flow took both slots"
        for sport, dscps in seen.items():
            assert dscps <= {0, own[sport]}, f"flow {sport} saw {dscps}"
        assert all(own[s] in seen[s] for s in own), seen
    finally:
        dp.detach()


def test_a_set_dscp_the_kernel_refuses_leaves_both_maps_as_before() -> None:
    small = load_detached(max_flows=64, max_marked_flows=4)
    try:
        small.set_dscp({key4(3500 + i, 80): 30 + i for i in range(3)})
        before = small.read_dscp(), small.read_mark_array()
        small.max_marked_flows = 100  # hide the real size: the kernel itself refuses
        with pytest.raises(DatapathError, match="nothing changed"):
            small.set_dscp({key4(3500, 80): 40} | {key4(3600 + i, 80): 40 for i in range(3)})
        assert small.read_dscp() == before[0] and (small.read_mark_array() == before[1]).all()
        small.set_lease(60)
        assert run(small, ipv4(tcp(3500, 80)))[15] == 30 << 2
        pkt = ipv4(tcp(3600, 80))
        assert run(small, pkt) == pkt
    finally:
        small.detach()


def test_an_ended_lease_stops_rewrites_with_the_marks_still_in_the_array(datapath: Datapath) -> None:
    enf = BpfEnforcer(datapath)
    keys = {key4(3700, 80): 46, key6(3700, 443): 18}
    enf.apply(keys, 0.4)
    deadline = datapath.lease_deadline()
    if time.monotonic_ns() < deadline - 100_000_000:  # (skipped only if this process stalled 300 ms)
        assert run(datapath, ipv4(tcp(3700, 80)))[15] == 46 << 2
    while time.monotonic_ns() <= deadline:
        time.sleep(0.02)
    for pkt in (ipv4(tcp(3700, 80), tos=0x02), ipv6(tcp(3700, 443), tclass=0x02)):
        assert run(datapath, pkt) == pkt
    marks = datapath.read_mark_array()
    assert {k: decode_dscp(int(marks[datapath.slots.slot_of[k]])) for k in keys} == keys
    assert datapath.read_dscp() == keys  # the kernel still holds the marks: the program decides


def test_write_and_delete_of_raw_records_keep_the_slots_right(datapath: Datapath) -> None:
    from leveller.agent.flow_structs import key_records

    keys = [key4(3800 + i, 80) for i in range(6)]
    datapath.write_dscp(key_records(keys), np.array([0x80 | 4, 0x40, 0, 0x80 | 6, 0x80 | 7, 0x80 | 8], np.uint8))
    assert datapath.read_dscp() == {keys[0]: 4, keys[1]: None, keys[2]: None, keys[3]: 6, keys[4]: 7, keys[5]: 8}
    datapath.delete_dscp(key_records(keys[:3]))
    assert datapath.read_dscp() == {keys[3]: 6, keys[4]: 7, keys[5]: 8}
    with pytest.raises(libbpf.BpfSyscallError):
        datapath.delete_dscp(key_records(keys[2:4]))  # keys[2] is not marked: nothing deleted
    assert datapath.read_dscp() == {keys[3]: 6, keys[4]: 7, keys[5]: 8}
    assert int(np.count_nonzero(datapath.read_mark_array())) == 3 and len(datapath.slots) == 3
