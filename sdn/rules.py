"""OpenFlow 1.3 messages as plain data: what the app wants switches to do.

PURE (no os-ken, no I/O): `sdn.ofsend` turns these into os-ken messages. Tests
run them through a fake flow table.

Pipeline on every switch:
- table 0: IPv4 and IPv6 packets with a level's DSCP get `set_queue(queue of that level)`
  (only in queue mode "set_queue"; the userspace datapath ignores set_queue and
  a tc classifier does the mapping instead), then everything goes to table 1.
- table 1: exact-match per-flow rules (in_port + 5-tuple, IPv4 or IPv6) output on
  the path's port; the miss rules send IPv4 and IPv6 to the controller; all else is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leveller.core.paths import Path
from leveller.core.qos import LevelMap
from leveller.model.flow import FlowKey

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_TYPES = (ETH_IPV4, ETH_IPV6)
TABLE_QOS = 0
TABLE_PATH = 1
PRIO_DSCP = 100
PRIO_FLOW = 100
PRIO_TO_CONTROLLER = 1
FLOW_COOKIE_FLAG = 0  # flow cookies come from FlowKey.cookie() (63-bit)
SETUP_COOKIE = 1 << 63  # static pipeline rules carry this cookie


@dataclass(frozen=True)
class AddFlow:
    dpid: int
    table: int
    priority: int
    match: tuple[tuple[str, int | str], ...]
    actions: tuple[tuple[str, int], ...] = ()  # ("set_queue", q) | ("output", port) | ("controller", 0)
    goto: int | None = None
    cookie: int = SETUP_COOKIE
    idle_timeout: int = 0
    notify_removal: bool = False


@dataclass(frozen=True)
class DeleteFlows:
    """Delete rules in all tables whose cookie matches `cookie` under `mask` (mask 0: all)."""

    dpid: int
    cookie: int = 0
    mask: int = 0


@dataclass(frozen=True)
class PacketOut:
    dpid: int
    in_port: int
    out_port: int
    data: bytes = field(repr=False)


Msg = AddFlow | DeleteFlows | PacketOut


def switch_setup(dpid: int, level_map: LevelMap, set_queue: bool) -> list[Msg]:
    """Clean slate and static pipeline for a switch that (re)connected."""
    msgs: list[Msg] = [DeleteFlows(dpid)]
    if set_queue:
        for dscp, queue in zip(level_map.dscp, level_map.queue):
            for eth_type in ETH_TYPES:
                msgs.append(AddFlow(dpid, TABLE_QOS, PRIO_DSCP, (("eth_type", eth_type), ("ip_dscp", dscp)),
                                    (("set_queue", queue),), goto=TABLE_PATH))
    msgs.append(AddFlow(dpid, TABLE_QOS, 0, (), goto=TABLE_PATH))
    for eth_type in ETH_TYPES:
        msgs.append(AddFlow(dpid, TABLE_PATH, PRIO_TO_CONTROLLER, (("eth_type", eth_type),), (("controller", 0),)))
    msgs.append(AddFlow(dpid, TABLE_PATH, 0, ()))  # drop the rest (no flooding: loops in leaf-spine)
    return msgs


def flow_match(flow: FlowKey, in_port: int) -> tuple[tuple[str, int | str], ...]:
    ip = "ipv6" if flow.version == 6 else "ipv4"
    match: list[tuple[str, int | str]] = [("in_port", in_port), ("eth_type", ETH_IPV6 if ip == "ipv6" else ETH_IPV4),
                                          ("ip_proto", flow.proto), (f"{ip}_src", flow.src), (f"{ip}_dst", flow.dst)]
    if flow.proto == 6:
        match += [("tcp_src", flow.sport), ("tcp_dst", flow.dport)]
    elif flow.proto == 17:
        match += [("udp_src", flow.sport), ("udp_dst", flow.dport)]
    return tuple(match)


def path_rules(path: Path, idle_timeout: int, dpids: set[int] | None = None) -> list[Msg]:
    """Exact-match rules for every hop of `path` (last hop first, so a packet
    forwarded by an upstream switch finds its rule), optionally only on `dpids`."""
    msgs: list[Msg] = []
    for hop in reversed(path.hops):
        if dpids is not None and hop.dpid not in dpids:
            continue
        msgs.append(AddFlow(hop.dpid, TABLE_PATH, PRIO_FLOW, flow_match(path.flow, hop.in_port),
                            (("output", hop.out_port),), cookie=path.flow.cookie(),
                            idle_timeout=idle_timeout, notify_removal=True))
    return msgs
