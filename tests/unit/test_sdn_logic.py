"""The app's pure logic driven through a fake flow table (FAUCET-style): packets are
walked through the rules it installed; we assert where they go and on which queue."""

from __future__ import annotations

import ipaddress
import struct

from leveller.core.paths import choose_path
from leveller.core.qos import default_level_map
from leveller.core.topology import preset
from leveller.model.flow import FlowKey
from sdn.logic import LOOPBACK, PathController, parse_flow, switch_refusal
from sdn.rules import AddFlow, DeleteFlows, PacketOut
from tests.helpers.sdn import frame


class FakeFlowTable:
    """Per-switch OpenFlow tables fed with sdn.rules messages."""

    def __init__(self, topo):
        self.topo = topo
        self.tables: dict[int, list[AddFlow]] = {s.dpid: [] for s in topo.switches}
        self.packet_outs: list[PacketOut] = []

    def apply(self, msgs):
        for m in msgs:
            if isinstance(m, DeleteFlows):
                self.tables[m.dpid] = [r for r in self.tables[m.dpid] if (r.cookie & m.mask) != (m.cookie & m.mask)]
            elif isinstance(m, AddFlow):
                rules = [r for r in self.tables[m.dpid]
                         if not (r.table == m.table and r.priority == m.priority and r.match == m.match)]
                self.tables[m.dpid] = rules + [m]
            else:
                self.packet_outs.append(m)

    def lookup(self, dpid, table, pkt):
        best = None
        for r in self.tables[dpid]:
            if r.table == table and all(pkt.get(k) == v for k, v in r.match):
                if best is None or r.priority > best.priority:
                    best = r
        return best

    def forward(self, flow: FlowKey, dscp: int):
        """Walk a packet from its source host; returns [(switch, out_port, queue)] and the
        place it ended ('host:<name>', 'controller@<switch>' or 'drop@<switch>')."""
        src = self.topo.host_by_ip(flow.src).name
        link = self.topo.host_link(src)
        sw, in_port = link.b, link.b_port
        hops = []
        for _ in range(10):
            dpid = self.topo.switch(sw).dpid
            ip = "ipv6" if ":" in flow.src else "ipv4"
            l4 = "udp" if flow.proto == 17 else "tcp"
            pkt = {"in_port": in_port, "eth_type": 0x86DD if ip == "ipv6" else 0x0800, "ip_proto": flow.proto,
                   f"{ip}_src": flow.src, f"{ip}_dst": flow.dst, "ip_dscp": dscp, f"{l4}_src": flow.sport,
                   f"{l4}_dst": flow.dport}
            queue = 0
            r0 = self.lookup(dpid, 0, pkt)
            if r0 is None:
                return hops, f"drop@{sw}"
            for name, arg in r0.actions:
                if name == "set_queue":
                    queue = arg
            r1 = self.lookup(dpid, r0.goto, pkt)
            if r1 is None or not r1.actions:
                return hops, f"drop@{sw}"
            name, port = r1.actions[0]
            if name == "controller":
                return hops, f"controller@{sw}"
            hops.append((sw, port, queue))
            peer = next(node for p, node, _ in self.topo.switch_ports(sw) if p == port)
            if peer in {h.name for h in self.topo.hosts}:
                return hops, f"host:{peer}"
            in_port = self.topo.port_towards(peer, sw)
            sw = peer
        raise AssertionError("loop")


def setup(topo_name="dumbbell", set_queue=True, topo=None):
    topo = topo or preset(topo_name)
    ctl = PathController(topo, default_level_map(topo.levels), set_queue=set_queue)
    net = FakeFlowTable(topo)
    for s in topo.switches:
        net.apply(ctl.switch_connected(s.dpid, now=0.0))
    return topo, ctl, net


A = FlowKey("10.0.0.1", "10.0.0.3", 40000, 5201, 6)


def test_parse_flow_reads_the_5_tuple_and_ignores_non_ip():
    assert parse_flow(frame(A, tos=0x60)) == A
    assert parse_flow(b"\xff" * 12 + b"\x08\x06" + b"\x00" * 28) is None


def test_unknown_flow_goes_to_controller_then_follows_its_path_on_dscp_queue():
    topo, ctl, net = setup()
    assert net.forward(A, dscp=0) == ([], "controller@s1")
    net.apply(ctl.packet_in(topo.switch("s1").dpid, 2, frame(A), now=1.0))
    assert net.packet_outs[-1].out_port == 1  # the first packet is sent on, towards s2
    # level 3 (top) of 4 = DSCP 24 -> queue 3 at every hop; unmarked -> queue 0
    assert net.forward(A, dscp=24) == ([("s1", 1, 3), ("s2", 2, 3)], "host:h3")
    assert net.forward(A, dscp=0) == ([("s1", 1, 0), ("s2", 2, 0)], "host:h3")
    assert net.forward(A, dscp=46) == ([("s1", 1, 0), ("s2", 2, 0)], "host:h3")
    # the reverse direction is a separate flow, unknown yet
    assert net.forward(A.reversed(), dscp=0) == ([], "controller@s2")


def test_userspace_mode_installs_no_set_queue():
    topo, ctl, net = setup(set_queue=False)
    net.apply(ctl.packet_in(1, 2, frame(A), now=1.0))
    assert net.forward(A, dscp=24) == ([("s1", 1, 0), ("s2", 2, 0)], "host:h3")


def test_leafspine_packets_follow_the_reported_path_and_use_both_spines():
    topo, ctl, net = setup("leafspine")
    spines = set()
    for sport in range(1000, 1020):
        flow = FlowKey("10.0.0.1", "10.0.0.5", sport, 80, 6)
        first = topo.switch(topo.host_link("h1").b).dpid
        net.apply(ctl.packet_in(first, topo.host_link("h1").b_port, frame(flow), now=1.0))
        reported = ctl.describe(flow)
        hops, end = net.forward(flow, dscp=0)
        assert end == "host:h5" and reported["installed"]
        assert [(h["switch"], h["out_port"]) for h in reported["hops"]] == [(s, p) for s, p, _ in hops]
        spines.add(hops[1][0])
    assert spines == {"spine1", "spine2"}
    assert len(ctl.flows_of_host("h5")) == 20 and ctl.flows_of_host("h3") == []


def test_reconnected_switch_gets_its_rules_back():
    topo, ctl, net = setup()
    net.apply(ctl.packet_in(1, 2, frame(A), now=1.0))
    net.tables[2] = []  # s2's ovs-vswitchd restarted: empty table
    ctl.switch_disconnected(2)
    assert net.forward(A, dscp=24)[1] == "drop@s2"
    net.apply(ctl.switch_connected(2, now=5.0))
    assert net.forward(A, dscp=24) == ([("s1", 1, 3), ("s2", 2, 3)], "host:h3")


def test_packet_racing_ahead_reinstalls_only_locally_and_flow_removal_cleans_up():
    topo, ctl, net = setup()
    net.apply(ctl.packet_in(1, 2, frame(A), now=1.0))
    again = ctl.packet_in(2, 1, frame(A), now=1.1)
    assert {m.dpid for m in again} == {2} and isinstance(again[-1], PacketOut)
    net.apply(ctl.flow_removed(1, A.cookie(), now=70.0))
    net.tables[1] = [r for r in net.tables[1] if r.cookie != A.cookie()]  # the switch removed its own
    assert A not in ctl.flows
    assert all(r.cookie != A.cookie() for rules in net.tables.values() for r in rules)
    assert net.forward(A, dscp=0) == ([], "controller@s1")


def test_foreign_addresses_and_switches_are_ignored():
    topo, ctl, net = setup()
    stray = FlowKey("192.168.9.9", "10.0.0.3", 1, 2, 6)
    assert ctl.packet_in(1, 2, frame(stray), now=1.0) == []
    assert ctl.switch_connected(999, now=1.0) == []
    assert ctl.describe(A)["installed"] is False
    assert ctl.describe(A)["links"] == ["h1>s1", "s1>s2", "s2>h3"] == list(choose_path(topo, A).links)


# ---- IPv6 (issue 13): the same pipeline, paths by the hosts' IPv6 addresses --------------------------------

def frame6(flow: FlowKey, tclass: int = 0) -> bytes:
    """An Ethernet/IPv6/UDP frame, built by hand (the parser under test is os_ken's)."""
    import ipaddress

    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x86\xdd"
    ip = struct.pack("!IHBB16s16s", (6 << 28) | (tclass << 20), 8 + 4, 17, 64,
                     ipaddress.IPv6Address(flow.src).packed, ipaddress.IPv6Address(flow.dst).packed)
    return eth + ip + struct.pack("!HHHH", flow.sport, flow.dport, 12, 0) + b"ping"


def setup6():
    from leveller.core.topology import topology_from_dict

    return setup(topo=topology_from_dict(preset("leafspine").to_dict() | {"subnet6": "fd00:13::/64"}))


def test_parse_flow_reads_ipv6_and_leaves_what_is_not_ip():
    six = FlowKey("fd00:13::1", "fd00:13::5", 4791, 4791, 17)
    assert parse_flow(frame6(six, tclass=24 << 2)) == six
    assert parse_flow(b"\x02" * 12 + b"\x86\xdd" + b"\x60") is None  # cut in the IPv6 header


def test_an_ipv6_flow_gets_its_path_and_its_level_queue():
    topo, ctl, net = setup6()
    h1, h5 = topo.host("h1"), topo.host("h5")
    assert (h1.ip6, h5.ip6) == ("fd00:13::1", "fd00:13::5")
    flow = FlowKey(h1.ip6, h5.ip6, 50000, 4791, 17)
    first = topo.host_link("h1")
    assert net.forward(flow, dscp=0) == ([], f"controller@{first.b}")  # IPv6 misses go to the app
    net.apply(ctl.packet_in(topo.switch(first.b).dpid, first.b_port, frame6(flow), now=1.0))
    hops, end = net.forward(flow, dscp=24)  # top level of 4 -> queue 3 on every hop
    assert end == "host:h5" and [q for _, _, q in hops] == [3, 3, 3]
    assert [(h["switch"], h["out_port"]) for h in ctl.describe(flow)["hops"]] == [(s, p) for s, p, _ in hops]
    assert net.forward(flow, dscp=0)[1] == "host:h5" and {q for _, _, q in net.forward(flow, dscp=0)[0]} == {0}
    # the IPv4 flow between the same hosts is another flow, on its own rules
    assert net.forward(FlowKey(h1.ip, h5.ip, 50000, 4791, 17), dscp=0) == ([], f"controller@{first.b}")


# ---- switch admission (issue 26, finding 11): by the topology's dpids and the allowed source networks (--of-allow),
# no takeover of a connected dpid from another address -----------------------------------------------------------

LEAFSPINE = preset("leafspine")
LEAF1 = LEAFSPINE.switches[0].dpid
SITE = (ipaddress.ip_network("10.1.0.0/24"),)


def test_switch_admission_rules() -> None:
    assert switch_refusal(LEAFSPINE, LEAF1, "10.1.0.7", SITE, {}) is None
    assert "not a switch of the topology" in (switch_refusal(LEAFSPINE, 0xDEAD, "10.1.0.7", SITE, {}) or "")
    assert "not in --of-allow" in (switch_refusal(LEAFSPINE, LEAF1, "10.9.0.7", SITE, {}) or "")
    assert "not in --of-allow" in (switch_refusal(LEAFSPINE, LEAF1, "127.0.0.1", SITE, {}) or "")
    assert "connected already from 10.1.0.7" in (switch_refusal(LEAFSPINE, LEAF1, "10.1.0.8", SITE,
                                                                 {LEAF1: "10.1.0.7"}) or "")
    assert switch_refusal(LEAFSPINE, LEAF1, "::ffff:10.1.0.7", SITE, {LEAF1: "10.1.0.7"}) is None  # it restarted
    assert switch_refusal(LEAFSPINE, LEAF1, "::1", LOOPBACK, {}) is None
