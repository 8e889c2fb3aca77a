"""The fuzz input (leveller/bench/fuzz_packets.py): realistic flows, every kind, truncation at every offset,
seeded. Frames are dissected with scapy to check they are what their kind says."""

from __future__ import annotations

import ipaddress
import random
from collections import Counter

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
from scapy.layers.l2 import Dot1Q, Ether

from leveller.bench import fuzz_packets as fp
from leveller.bench.fuzz_oracle import flow_of, mark_is_valid


@pytest.fixture(scope="module")
def plan() -> fp.FlowPlan:
    return fp.plan_flows(random.Random(3))


def test_flow_plan_is_a_cluster_hosts_flow_set(plan: fp.FlowPlan) -> None:
    versions = Counter(f[0] for f in plan.mapped)
    assert versions == {4: 160, 6: 160}
    local = {ipaddress.ip_address(a).packed for pair in plan.local for a in pair}
    assert all(f[1] in local for f in plan.mapped)  # sent by this host
    assert all(f[5] in (6, 17) for f in plan.mapped)
    assert all(f[4] == fp.ROCE_PORT for f in plan.mapped if f[5] == 17)
    assert all(0 <= d <= 63 for d in plan.mapped.values())
    level_share = sum(1 for d in plan.mapped.values() if d in fp.LEVEL_DSCPS) / len(plan.mapped)
    assert level_share > 0.7
    assert len(plan.inert) == 16 and not set(plan.inert) & set(plan.mapped)
    assert not any(mark_is_valid(m) for m in plan.inert.values())
    assert all(mark_is_valid(m) for f, m in plan.marks().items() if f in plan.mapped)


def test_same_seed_same_frames_other_seed_other_frames(plan: fp.FlowPlan) -> None:
    s1, s2, s3 = fp.FrameStream(plan, 9), fp.FrameStream(plan, 9), fp.FrameStream(plan, 10)
    a = [s1.next() for _ in range(1500)]
    assert a == [s2.next() for _ in range(1500)]
    assert a != [s3.next() for _ in range(1500)]


def test_every_kind_appears_and_frames_stay_in_bounds(plan: fp.FlowPlan) -> None:
    stream = fp.FrameStream(plan, 1)
    seen = Counter()
    for _ in range(6000):
        kind, frame, segs = stream.next()
        seen[kind] += 1
        assert len(frame) <= fp.MAX_FRAME
        assert segs == 0 or (kind == "gso" and 2 <= segs <= 44)
    assert set(seen) == set(fp.KINDS)
    assert seen["mutated"] > seen["truncated"] > seen["ipv4-tcp"]


def test_truncation_cuts_one_base_at_every_offset(plan: fp.FlowPlan) -> None:
    stream = fp.FrameStream(plan, 2)
    cuts = [stream.truncated() for _ in range(600)]
    starts = [i for i, c in enumerate(cuts) if len(c) == 0]
    assert len(starts) >= 2
    base = cuts[starts[1] - 1]  # the longest cut of the first base
    run = cuts[starts[0]:starts[1]]
    assert [len(c) for c in run] == list(range(len(run)))
    assert all(base.startswith(c) for c in run)


def test_mutations_stay_close_to_their_fresh_frame(plan: fp.FlowPlan) -> None:
    stream = fp.FrameStream(plan, 4)
    base = stream.fresh()[1]
    stream._recent[:] = [base]
    lengths = Counter()
    for _ in range(400):
        m = stream.mutated()
        common = min(len(m), len(base))
        assert sum(a != b for a, b in zip(m[:common], base[:common])) <= 3
        lengths[(len(m) > len(base)) - (len(m) < len(base))] += 1
    assert lengths[0] > 300 and lengths[1] > 0 and lengths[-1] > 0  # mostly same length, sometimes not


def _fresh(plan: fp.FlowPlan, kind: str, n: int = 25, seed: int = 5) -> list[tuple[bytes, int]]:
    stream = fp.FrameStream(plan, seed)
    return [getattr(stream, "_build_" + kind.replace("-", "_"))() for _ in range(n)]


@pytest.mark.parametrize("kind,family,l4", [("ipv4-tcp", IP, TCP), ("ipv4-udp", IP, UDP),
                                            ("ipv6-tcp", IPv6, TCP), ("ipv6-udp", IPv6, UDP)])
def test_plain_kinds_are_what_scapy_dissects(plan: fp.FlowPlan, kind: str, family: type, l4: type) -> None:
    frames = _fresh(plan, kind)
    for frame, _ in frames:
        pkt = Ether(frame)
        assert family in pkt and l4 in pkt
    flows = [flow_of(f) for f, _ in frames]
    assert sum(f in plan.mapped for f in flows) >= 3  # many frames belong to mapped flows
    assert sum(f not in plan.mapped for f in flows) >= 3  # and many do not


def test_special_kinds_are_what_scapy_dissects(plan: fp.FlowPlan) -> None:
    for frame, _ in _fresh(plan, "ipv4-options"):
        assert Ether(frame)[IP].ihl > 5
    assert any(Ether(f)[IP].flags.MF or Ether(f)[IP].frag > 0 for f, _ in _fresh(plan, "ipv4-fragment"))
    for frame, _ in _fresh(plan, "ipv6-fragment"):
        assert IPv6ExtHdrFragment in Ether(frame)
    for frame, _ in _fresh(plan, "ipv6-ext"):
        assert Ether(frame)[IPv6].nh in (0, 43, 60)
    for frame, _ in _fresh(plan, "vlan"):
        assert Dot1Q in Ether(frame)
    for frame, _ in _fresh(plan, "non-ip"):
        pkt = Ether(frame)
        assert pkt.type not in (0x0800, 0x86DD) or (pkt.type == 0x0800 and frame[14] >> 4 == 6)
    for frame, _ in _fresh(plan, "ipv4-icmp"):
        assert Ether(frame)[IP].proto == 1
    for frame, _ in _fresh(plan, "ipv4-other"):
        assert Ether(frame)[IP].proto not in (6, 17)
    for frame, segs in _fresh(plan, "gso"):
        assert TCP in Ether(frame) and segs >= 2


def test_near_misses_are_other_flows(plan: fp.FlowPlan) -> None:
    stream = fp.FrameStream(plan, 6)
    mapped = list(plan.mapped)
    misses = [stream._near_miss(f) for f in mapped for _ in range(3)]
    assert sum(m in plan.mapped for m in misses) <= len(misses) // 50  # only by chance
    assert any(m[0] == 6 and m[1][:12] == bytes(10) + b"\xff\xff" for m in misses)  # IPv4-mapped IPv6
