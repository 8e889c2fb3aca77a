"""The app's brain, FAUCET-style: events in, OpenFlow messages (as data) out.

PURE: `now` is an argument; nothing here talks to a switch. `sdn.app` feeds it
os-ken events and sends what it returns.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from os_ken.lib.packet import ipv4, ipv6, packet, tcp, udp

from leveller.core.paths import Path, Router, choose_path, graph
from leveller.core.qos import LevelMap
from leveller.core.topology import Topology
from leveller.model.flow import FlowKey, flow_key
from sdn.rules import DeleteFlows, Msg, PacketOut, path_rules, switch_setup


def parse_flow(frame: bytes) -> FlowKey | None:
    """5-tuple of an Ethernet/IPv4 or Ethernet/IPv6 frame, parsed by os_ken.lib.packet (ports 0 unless TCP/UDP
    whose header is there); None for anything else."""
    try:
        pkt = packet.Packet(frame)
    except Exception:
        return None
    ip4, ip6 = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(ipv6.ipv6)
    if ip4 is None and ip6 is None:
        return None
    l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
    if l4 is not None:
        proto, sport, dport = (6 if isinstance(l4, tcp.tcp) else 17), l4.src_port, l4.dst_port
    else:
        proto, sport, dport = (ip4.proto if ip4 is not None else ip6.nxt), 0, 0
    ip = ip4 if ip4 is not None else ip6
    try:
        return flow_key(ip.src, ip.dst, sport, dport, proto)
    except ValueError:
        return None


LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as an IP (an IPv4-mapped IPv6 one as IPv4, a zone dropped); None if it is none."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    return ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped is not None else ip


def switch_refusal(topo: Topology, dpid: int | None, address: str, allowed: Sequence[IpNetwork],
                   connected: Mapping[int, str]) -> str | None:
    """Why a switch that connected from ``address`` claiming ``dpid`` is refused (None: admitted). A switch
    is one of the topology's (by dpid), connects from an allowed network, and does not take over a dpid
    connected from another address (a second connection from the same address is the switch restarting).
    ``connected``: dpid -> the address its live connection came from."""
    ip = _ip(address)
    if ip is None:
        return f"source address {address!r} is not an IP address"
    if not any(ip in net for net in allowed):
        return f"source address {ip} is not in --of-allow ({', '.join(map(str, allowed))})"
    if dpid is None or topo.switch_by_dpid(dpid) is None:
        return f"dpid {dpid!r} is not a switch of the topology ({', '.join(f'{s.dpid:#x}' for s in topo.switches)})"
    held = connected.get(dpid)
    if held is not None and _ip(held) != ip:
        return f"dpid {dpid:#x} is connected already from {held}"
    return None


@dataclass
class FlowEntry:
    path: Path
    installed_at: float
    last_seen: float


@dataclass
class PathController:
    """Tracks connected switches and installed flows; decides every rule."""

    topo: Topology
    level_map: LevelMap
    set_queue: bool = True
    idle_timeout: int = 60
    flows: dict[FlowKey, FlowEntry] = field(default_factory=dict)
    connected: set[int] = field(default_factory=set)
    _graph: nx.Graph | None = None
    _router: Router = field(init=False)

    def __post_init__(self) -> None:
        self._graph = graph(self.topo)
        self._router = Router(self.topo)

    def links(self, flow: FlowKey) -> tuple[str, ...] | None:
        """The directed links of the flow's path (installed, or the one it will take), fast for batches."""
        entry = self.flows.get(flow)
        return entry.path.links if entry else self._router.links(flow)

    def path(self, flow: FlowKey) -> Path | None:
        """The path this flow takes (or will take once it sends): deterministic ECMP."""
        entry = self.flows.get(flow)
        return entry.path if entry else choose_path(self.topo, flow, self._graph)

    def switch_connected(self, dpid: int, now: float) -> list[Msg]:
        """(Re)connection: reset the pipeline and reinstall every known flow crossing it."""
        if self.topo.switch_by_dpid(dpid) is None:
            return []
        self.connected.add(dpid)
        msgs = switch_setup(dpid, self.level_map, self.set_queue)
        for entry in self.flows.values():
            msgs += path_rules(entry.path, self.idle_timeout, {dpid})
        return msgs

    def switch_disconnected(self, dpid: int) -> None:
        self.connected.discard(dpid)

    def packet_in(self, dpid: int, in_port: int, frame: bytes, now: float) -> list[Msg]:
        """A flow's packet missed table 1: install its whole path, then forward the packet."""
        flow = parse_flow(frame)
        if flow is None:
            return []
        entry = self.flows.get(flow)
        if entry is None:
            path = choose_path(self.topo, flow, self._graph)
            if path is None:
                return []
            entry = FlowEntry(path, now, now)
            self.flows[flow] = entry
            msgs = path_rules(path, self.idle_timeout)
        else:
            # a packet raced ahead of its rule, or the rule vanished: (re)install on this switch
            entry.last_seen = now
            msgs = path_rules(entry.path, self.idle_timeout, {dpid})
        hop = next((h for h in entry.path.hops if h.dpid == dpid), None)
        if hop is not None:
            msgs.append(PacketOut(dpid, in_port, hop.out_port, frame))
        return msgs

    def flow_removed(self, dpid: int, cookie: int, now: float) -> list[Msg]:
        """A rule idled out: forget the flow and remove its rules on the other switches."""
        gone = [f for f, e in self.flows.items() if f.cookie() == cookie]
        msgs: list[Msg] = []
        for flow in gone:
            entry = self.flows.pop(flow)
            msgs += [DeleteFlows(h.dpid, cookie, 2**64 - 1) for h in entry.path.hops if h.dpid != dpid]
        return msgs

    def flows_of_host(self, host: str) -> list[Path]:
        return [e.path for f, e in sorted(self.flows.items()) if host in (e.path.src_host, e.path.dst_host)]

    def describe(self, flow: FlowKey) -> dict[str, Any] | None:
        path = self.path(flow)
        if path is None:
            return None
        return path.to_dict() | {"installed": flow in self.flows}
