"""Fuzz input for the marker: a realistic flow set and a seeded stream of frames built with scapy.

Flows (`plan_flows`): one host of a training cluster with four rails (an IPv4 and
an IPv6 address per rail) talking to peers on the same rails: TCP collective
connections (gloo/NCCL ports 29500+, ephemeral source ports) and RoCEv2 UDP
(destination 4791, source-port entropy). Mapped flows get the DSCP of a switch
level (leveller.core.qos defaults) or, for some, any DSCP 0..63; a few carry
invalid raw marks (the program must treat them as unmapped).

Frames (`frames`): every frame is built by scapy or derived from one it built:
  fresh      scapy frames of every kind in FRESH_KINDS (IPv4/IPv6 x TCP/UDP/ICMP/other,
             IPv4 options, fragments, IPv6 extension headers, VLAN/QinQ tags, non-IP,
             TCP GSO packets) on mapped flows, near misses of mapped flows (reverse
             direction, other protocol, port or address off by one, IPv4-mapped IPv6,
             IPv6 addresses holding an IPv4 key's bytes) and unrelated flows;
  truncated  a fresh frame cut at every offset in turn, 0 to its length - 1;
  mutated    a recent fresh frame with 1-3 random byte changes, mostly in the headers,
             sometimes shortened or lengthened.
The stream is a pure function of the seed.
"""

from __future__ import annotations

import ipaddress
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from leveller.bench.fuzz_oracle import Flow
from leveller.core.qos import default_level_map

RAILS = 4
PEERS_PER_RAIL = 16
LOCAL_HOST = 11
GLOO_PORT = 29500
ROCE_PORT = 4791
EPHEMERAL = (32768, 60999)
ROCE_SPORTS = (49152, 65535)
LEVEL_DSCPS = default_level_map(4).dscp
INVALID_MARKS = (0x00, 0x3F, 0x40 | 24, 0xC0 | 8, 0xFF)  # not 0x80 | dscp: leave alone
MAX_FRAME = 1600  # well below BPF_PROG_TEST_RUN's limit (~3.5 KB on 4 KiB pages)

FRESH_KINDS: dict[str, int] = {  # kind -> weight among fresh frames
    "ipv4-tcp": 14, "ipv4-udp": 10, "ipv6-tcp": 12, "ipv6-udp": 8,
    "ipv4-icmp": 3, "ipv6-icmp": 3, "ipv4-other": 3, "ipv6-other": 3,
    "ipv4-options": 5, "ipv4-fragment": 6, "ipv6-ext": 5, "ipv6-fragment": 5,
    "vlan": 6, "non-ip": 4, "gso": 5,
}
KINDS = (*FRESH_KINDS, "truncated", "mutated")
SHARE_FRESH, SHARE_TRUNCATED = 0.06, 0.34  # the rest is mutated
INTERESTING = (0x00, 0x01, 0x02, 0x03, 0x06, 0x11, 0x20, 0x2C, 0x3A, 0x40, 0x45, 0x46, 0x4F, 0x60,
               0x7F, 0x80, 0x81, 0x86, 0x88, 0xA8, 0xDD, 0xFE, 0xFF)


@dataclass(frozen=True)
class FlowPlan:
    """The DSCP map to load (mapped: flow -> DSCP; inert: flow -> invalid raw mark) and the
    addresses frames are drawn from."""

    mapped: dict[Flow, int]
    inert: dict[Flow, int]
    local: tuple[tuple[str, str], ...]  # (IPv4, IPv6) address of each rail
    peers: tuple[tuple[str, str], ...]

    def marks(self) -> dict[Flow, int]:
        """flow -> raw flow_dscp.mark as written into the map."""
        return {**{f: 0x80 | d for f, d in self.mapped.items()}, **self.inert}


def _flow(src: str, dst: str, sport: int, dport: int, proto: int) -> Flow:
    a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    return a.version, a.packed, b.packed, sport, dport, proto


def plan_flows(rng: random.Random, per_version: int = 160, inert: int = 16) -> FlowPlan:
    """A realistic flow set: ``per_version`` mapped IPv4 and as many IPv6 flows, ``inert`` invalid marks."""
    local = tuple((f"10.{r}.0.{LOCAL_HOST}", f"fd00:{r}::{LOCAL_HOST:x}") for r in range(RAILS))
    peers = tuple((f"10.{r}.0.{LOCAL_HOST + 1 + p}", f"fd00:{r}::{LOCAL_HOST + 1 + p:x}")
                  for r in range(RAILS) for p in range(PEERS_PER_RAIL))
    mapped: dict[Flow, int] = {}
    inert_marks: dict[Flow, int] = {}
    for version in (0, 1):
        while sum(1 for f in mapped if f[0] == 4 + 2 * version) < per_version:
            mapped[_random_flow(rng, local, peers, version)] = (
                rng.choice(LEVEL_DSCPS) if rng.random() < 0.8 else rng.randrange(64))
    while len(inert_marks) < inert:
        f = _random_flow(rng, local, peers, rng.randrange(2))
        if f not in mapped:
            inert_marks[f] = INVALID_MARKS[len(inert_marks) % len(INVALID_MARKS)]
    return FlowPlan(mapped, inert_marks, local, peers)


def _random_flow(rng: random.Random, local: tuple[tuple[str, str], ...], peers: tuple[tuple[str, str], ...],
                 version: int) -> Flow:
    rail = rng.randrange(RAILS)
    src = local[rail][version]
    dst = peers[rail * PEERS_PER_RAIL + rng.randrange(PEERS_PER_RAIL)][version]
    if rng.random() < 0.6:  # TCP collective connection
        return _flow(src, dst, rng.randint(*EPHEMERAL), GLOO_PORT + rng.randrange(8), 6)
    return _flow(src, dst, rng.randint(*ROCE_SPORTS), ROCE_PORT, 17)  # RoCEv2


def _addr(version: int, packed: bytes) -> str:
    return str(ipaddress.IPv4Address(packed) if version == 4 else ipaddress.IPv6Address(packed))


class FrameStream:
    """Seeded frames for the fuzz: ``for kind, frame, gso_segs in FrameStream(plan, seed): ...``."""

    def __init__(self, plan: FlowPlan, seed: int) -> None:
        _quiet_scapy()
        self.plan = plan
        self.rng = random.Random(seed)
        self._mapped = list(plan.mapped)
        self._inert = list(plan.inert)
        self._kinds = list(FRESH_KINDS)
        self._weights = list(FRESH_KINDS.values())
        self._recent: list[bytes] = []  # fresh frames to mutate
        self._trunc_base = b""
        self._trunc_at = 0

    def __iter__(self) -> Iterator[tuple[str, bytes, int]]:
        while True:
            yield self.next()

    def next(self) -> tuple[str, bytes, int]:
        """(kind, frame, gso_segs): gso_segs is 0 for a frame that is no GSO packet."""
        r = self.rng.random()
        if r < SHARE_FRESH or len(self._recent) < 8:
            return self.fresh()
        if r < SHARE_FRESH + SHARE_TRUNCATED:
            return "truncated", self.truncated(), 0
        return "mutated", self.mutated(), 0

    # ---- flows ------------------------------------------------------------
    def pick_flow(self, version: int | None = None, proto: int | None = None) -> Flow:
        """A mapped flow (45%), a near miss of one (30%), an inert one (10%) or an unrelated one."""
        rng = self.rng
        for _ in range(64):
            r = rng.random()
            if r < 0.45:
                f = rng.choice(self._mapped)
            elif r < 0.75:
                f = self._near_miss(rng.choice(self._mapped))
            elif r < 0.85:
                f = rng.choice(self._inert)
            else:
                f = _random_flow(rng, self.plan.local, self.plan.peers, rng.randrange(2))
            if (version is None or f[0] == version) and (proto is None or f[5] == proto):
                return f
        v = version if version is not None else 4
        return _random_flow(rng, self.plan.local, self.plan.peers, 0 if v == 4 else 1)[:5] + (proto or 6,)

    def _near_miss(self, f: Flow) -> Flow:
        version, src, dst, sport, dport, proto = f
        way = self.rng.randrange(7)
        if way == 0:
            return version, dst, src, dport, sport, proto  # the reply direction
        if way == 1:
            return version, src, dst, sport, dport, 23 - proto  # TCP <-> UDP
        if way == 2:
            return version, src, dst, (sport + self.rng.choice((-1, 1))) & 0xFFFF, dport, proto
        if way == 3:
            return version, src, dst, sport, (dport + self.rng.choice((-1, 1))) & 0xFFFF, proto
        if way == 4:
            return version, src[:-1] + bytes([src[-1] ^ 1]), dst, sport, dport, proto
        if way == 5 and version == 4:  # the same endpoints as IPv4-mapped IPv6 addresses
            return 6, bytes(10) + b"\xff\xff" + src, bytes(10) + b"\xff\xff" + dst, sport, dport, proto
        if version == 4:  # IPv6 addresses whose bytes equal the IPv4 key's 16-byte address fields
            return 6, src + bytes(12), dst + bytes(12), sport, dport, proto
        return 4, src[:4], dst[:4], sport, dport, proto  # an IPv4 flow on the IPv6 key's first bytes

    # ---- fresh frames (scapy) ---------------------------------------------
    def fresh(self) -> tuple[str, bytes, int]:
        kind = self.rng.choices(self._kinds, self._weights)[0]
        frame, segs = getattr(self, "_build_" + kind.replace("-", "_"))()
        if len(frame) > MAX_FRAME:
            frame = frame[:MAX_FRAME]
        self._recent.append(frame)
        if len(self._recent) > 64:
            self._recent.pop(self.rng.randrange(len(self._recent)))
        return kind, frame, segs

    def _ether(self, **kw: Any) -> Any:
        from scapy.layers.l2 import Ether

        r = self.rng
        return Ether(src=f"02:00:00:00:{r.randrange(256):02x}:01", dst=f"02:00:00:00:{r.randrange(256):02x}:02", **kw)

    def _payload(self, big: bool = False) -> bytes:
        r = self.rng
        n = r.randint(200, 1400) if big or r.random() < 0.1 else r.randint(0, 96)
        return r.randbytes(n)

    def _l3(self, f: Flow, proto: int | None = None) -> Any:
        from scapy.layers.inet import IP
        from scapy.layers.inet6 import IPv6

        r = self.rng
        src, dst = _addr(f[0], f[1]), _addr(f[0], f[2])
        if f[0] == 4:
            return IP(src=src, dst=dst, tos=r.randrange(256), ttl=r.randint(1, 255), id=r.randrange(65536),
                      flags=r.choice((0, 2)), proto=f[5] if proto is None else proto)
        return IPv6(src=src, dst=dst, tc=r.randrange(256), fl=r.randrange(1 << 20), hlim=r.randint(1, 255),
                    nh=f[5] if proto is None else proto)

    def _l4(self, f: Flow, big: bool = False) -> Any:
        from scapy.layers.inet import TCP, UDP
        from scapy.packet import Packet, Raw

        r = self.rng
        l4: Packet
        if f[5] == 6:
            opts = r.choice(([], [("MSS", 1460)],
                             [("NOP", None), ("NOP", None), ("Timestamp", (r.randrange(1 << 32), 0))],
                             [("SAckOK", b""), ("WScale", 7)]))
            l4 = TCP(sport=f[3], dport=f[4], seq=r.randrange(1 << 32), ack=r.randrange(1 << 32),
                     flags=r.choice(("S", "SA", "A", "PA", "FA", "R")), window=r.randrange(65536), options=opts)
        else:
            l4 = UDP(sport=f[3], dport=f[4])
        return l4 / Raw(self._payload(big))

    def _ip_frame(self, version: int, proto: int) -> bytes:
        from scapy.compat import raw

        f = self.pick_flow(version, proto)
        return raw(self._ether() / self._l3(f) / self._l4(f))

    def _build_ipv4_tcp(self) -> tuple[bytes, int]:
        return self._ip_frame(4, 6), 0

    def _build_ipv4_udp(self) -> tuple[bytes, int]:
        return self._ip_frame(4, 17), 0

    def _build_ipv6_tcp(self) -> tuple[bytes, int]:
        return self._ip_frame(6, 6), 0

    def _build_ipv6_udp(self) -> tuple[bytes, int]:
        return self._ip_frame(6, 17), 0

    def _build_ipv4_icmp(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet import ICMP
        from scapy.packet import Raw

        f = self.pick_flow(4)
        return raw(self._ether() / self._l3(f, proto=1) / ICMP(type=self.rng.choice((0, 3, 8, 11)))
                   / Raw(self._payload())), 0

    def _build_ipv6_icmp(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet6 import ICMPv6EchoRequest

        f = self.pick_flow(6)
        return raw(self._ether() / self._l3(f, proto=58) / ICMPv6EchoRequest(id=f[3], data=self._payload())), 0

    def _other_l4(self, f: Flow) -> Any:
        """Bytes after the IP header that start like the flow's ports (a parser that ignores the
        protocol field would take them for the mapped flow)."""
        from scapy.packet import Raw

        return Raw(f[3].to_bytes(2, "big") + f[4].to_bytes(2, "big") + self._payload())

    def _build_ipv4_other(self) -> tuple[bytes, int]:
        from scapy.compat import raw

        f = self.pick_flow(4)
        proto = self.rng.choice((0, 2, 4, 41, 47, 50, 51, 89, 103, 132, 136, 253, 255))
        return raw(self._ether() / self._l3(f, proto=proto) / self._other_l4(f)), 0

    def _build_ipv6_other(self) -> tuple[bytes, int]:
        from scapy.compat import raw

        f = self.pick_flow(6)
        proto = self.rng.choice((4, 41, 47, 50, 51, 59, 89, 103, 132, 136, 253, 255))
        return raw(self._ether() / self._l3(f, proto=proto) / self._other_l4(f)), 0

    def _build_ipv4_options(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet import IPOption_NOP, IPOption_Router_Alert, IPOption_RR, IPOption_Timestamp

        r = self.rng
        f = self.pick_flow(4)
        choices = ([IPOption_NOP(), IPOption_NOP(), IPOption_NOP(), IPOption_NOP()], [IPOption_Router_Alert()],
                   [IPOption_RR(routers=[_addr(4, f[2])] * r.randint(1, 8))],
                   [IPOption_Timestamp(internet_address=_addr(4, f[1]), timestamp=r.randrange(1 << 32))],
                   [IPOption_NOP(), IPOption_Router_Alert()])
        l3 = self._l3(f)
        l3.options = r.choice(choices)
        return raw(self._ether() / l3 / self._l4(f)), 0

    def _build_ipv4_fragment(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet import fragment

        f = self.pick_flow(4)
        l3 = self._l3(f)
        l3.flags = 0
        frags = fragment(l3 / self._l4(f, big=True), fragsize=8 * self.rng.randint(3, 60))
        # the first fragment carries the real ports behind MF; later ones carry payload
        return raw(self._ether() / self.rng.choice(frags[:1] * 2 + frags[1:])), 0

    def _build_ipv6_ext(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet6 import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting

        f = self.pick_flow(6)
        ext = self.rng.choice((IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt(),
                               IPv6ExtHdrRouting(addresses=[_addr(6, f[2])]),
                               IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()))
        l3 = self._l3(f)
        del l3.nh
        return raw(self._ether() / l3 / ext / self._l4(f)), 0

    def _build_ipv6_fragment(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.inet6 import IPv6ExtHdrFragment, fragment6

        f = self.pick_flow(6)
        l3 = self._l3(f)
        del l3.nh
        pkt = l3 / IPv6ExtHdrFragment(id=self.rng.randrange(1 << 32)) / self._l4(f, big=True)
        frags = fragment6(pkt, self.rng.randint(120, 900))
        return raw(self._ether() / self.rng.choice(frags)), 0

    def _build_vlan(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.layers.l2 import Dot1AD, Dot1Q

        r = self.rng
        f = self.pick_flow()
        inner = self._l3(f) / self._l4(f)
        if r.random() < 0.7:
            return raw(self._ether() / Dot1Q(vlan=r.randrange(4096), prio=r.randrange(8)) / inner), 0
        return raw(self._ether(type=0x88A8) / Dot1AD(vlan=r.randrange(4096)) / Dot1Q(vlan=r.randrange(4096))
                   / inner), 0

    def _build_non_ip(self) -> tuple[bytes, int]:
        from scapy.compat import raw
        from scapy.contrib.mpls import MPLS
        from scapy.layers.l2 import ARP, LLC, SNAP
        from scapy.packet import Raw

        r = self.rng
        f = self.pick_flow(4)
        way = r.randrange(5)
        if way == 0:
            return raw(self._ether() / ARP(psrc=_addr(4, f[1]), pdst=_addr(4, f[2]), hwsrc="02:00:00:00:00:01")), 0
        if way == 1:  # MPLS over an IP packet of a mapped flow: not ours to parse
            return raw(self._ether() / MPLS(label=r.randrange(1 << 20)) / self._l3(f) / self._l4(f)), 0
        if way == 2:
            return raw(self._ether() / LLC() / SNAP() / Raw(self._payload())), 0
        if way == 3:  # an IPv6 header under the IPv4 ethertype and the reverse
            v6 = self.pick_flow(6)
            raw_v6 = raw(self._l3(v6) / self._l4(v6))
            return raw(self._ether(type=0x0800) / Raw(raw_v6)), 0
        return raw(self._ether(type=r.choice((0x88CC, 0x88F7, 0x8906, 0x0806, 0x9000, 0x0600))) /
                   Raw(self._payload())), 0

    def _build_gso(self) -> tuple[bytes, int]:
        """A TCP GSO super-packet as tc sees it: one frame, gso_segs wire segments."""
        from scapy.compat import raw

        f = self.pick_flow(self.rng.choice((4, 6)), 6)
        return raw(self._ether() / self._l3(f) / self._l4(f, big=True)), self.rng.randint(2, 44)

    # ---- derived frames ---------------------------------------------------
    def truncated(self) -> bytes:
        """The current base cut at the next offset; a new short base when all offsets were used."""
        if self._trunc_at >= len(self._trunc_base):
            kind = self.rng.choice(("ipv4-tcp", "ipv4-udp", "ipv6-tcp", "ipv6-udp", "ipv4-options",
                                    "ipv6-ext", "vlan"))
            self._trunc_base = getattr(self, "_build_" + kind.replace("-", "_"))()[0][:200]
            self._trunc_at = 0
        cut = self._trunc_base[:self._trunc_at]
        self._trunc_at += 1
        return cut

    def mutated(self) -> bytes:
        r = self.rng
        b = bytearray(r.choice(self._recent))
        for _ in range(r.randint(1, 3)):
            if not b:
                break
            hi = min(len(b), 80)
            at = r.randrange(12, hi) if hi > 12 and r.random() < 0.8 else r.randrange(len(b))
            op = r.random()
            if op < 0.4:
                b[at] ^= 1 << r.randrange(8)
            elif op < 0.7:
                b[at] = r.choice(INTERESTING)
            else:
                b[at] = r.randrange(256)
        if r.random() < 0.1:
            if r.random() < 0.5:
                del b[r.randrange(len(b) + 1):]
            else:
                b += r.randbytes(r.randint(1, 64))
        return bytes(b[:MAX_FRAME])


def _quiet_scapy() -> None:
    logging.getLogger("scapy").setLevel(logging.ERROR)
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
