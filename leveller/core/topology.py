"""Cluster topology model: hosts, switches, rated links, presets and validation.

PURE: builds and checks data only. A topology comes from a dict (a parsed TOML
file) or a preset; every check runs before the testbed creates anything, and
every error names the field, the value and what is allowed.

Switch ports are numbered 1, 2, ... in the order the switch's links appear, so
OpenFlow port numbers are known before any switch exists. Hosts are
single-homed: exactly one link, to a switch.
"""

from __future__ import annotations

import ipaddress
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leveller.model.errors import UserError
from leveller.model.limits import MAX_LEVELS

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,9}$")
NAME_RULE = "1-10 chars: a lowercase letter, then lowercase letters, digits or '_'"
PRESETS = ("dumbbell", "leafspine")
DEFAULT_SUBNET = "10.0.0.0/24"


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    ip6: str = ""  # canonical IPv6 address ("" when the topology gives hosts none)


@dataclass(frozen=True)
class Switch:
    name: str
    dpid: int


@dataclass(frozen=True)
class Link:
    """A full-duplex link; `a_port`/`b_port` are switch port numbers (0 for a host end)."""

    a: str
    b: str
    rate_mbps: float
    a_port: int = 0
    b_port: int = 0

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class Topology:
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    levels: int = 4
    subnet: str = DEFAULT_SUBNET
    subnet6: str = ""  # IPv6 network the hosts' ip6 come from ("" = IPv4 only)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def host_by_ip(self, ip: str) -> Host | None:
        """The host with this IPv4 or (canonical) IPv6 address."""
        for h in self.hosts:
            if h.ip == ip or (h.ip6 and h.ip6 == ip):
                return h
        return None

    def switch_by_dpid(self, dpid: int) -> Switch | None:
        for s in self.switches:
            if s.dpid == dpid:
                return s
        return None

    def host_link(self, host: str) -> Link:
        """The single link of a host, oriented host -> switch."""
        for link in self.links:
            if link.a == host:
                return link
            if link.b == host:
                return Link(link.b, link.a, link.rate_mbps, link.b_port, link.a_port)
        raise KeyError(host)

    def switch_ports(self, switch: str) -> list[tuple[int, str, float]]:
        """(port number, peer node, rate) for every port of a switch, by port number."""
        ports = []
        for link in self.links:
            if link.a == switch:
                ports.append((link.a_port, link.b, link.rate_mbps))
            if link.b == switch:
                ports.append((link.b_port, link.a, link.rate_mbps))
        return sorted(ports)

    def port_towards(self, switch: str, peer: str) -> int:
        for port, node, _ in self.switch_ports(switch):
            if node == peer:
                return port
        raise KeyError((switch, peer))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (round-trips through `topology_from_dict`)."""
        out: dict[str, Any] = {
            "levels": self.levels,
            "subnet": self.subnet,
            "hosts": [{"name": h.name, "ip": h.ip} | ({"ip6": h.ip6} if h.ip6 else {}) for h in self.hosts],
            "switches": [{"name": s.name, "dpid": s.dpid} for s in self.switches],
            "links": [{"a": lk.a, "b": lk.b, "rate_mbps": lk.rate_mbps} for lk in self.links],
        }
        if self.subnet6:
            out["subnet6"] = self.subnet6
        return out


def _err(field_name: str, value: Any, allowed: str) -> UserError:
    return UserError(f"topology: {field_name} = {_short.repr(value)} is invalid; {allowed}")


_short = reprlib.Repr()  # a value in an error message is shown abridged (a file can hold anything)
_short.maxstring, _short.maxother, _short.maxlevel = 80, 80, 3


def _check_keys(where: str, entry: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    if not isinstance(entry, Mapping):
        raise _err(where, entry, "expected a table")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise _err(f"{where}.{unknown[0]}", entry[unknown[0]], f"allowed keys: {', '.join(sorted(allowed))}")
    missing = sorted(required - set(entry))
    if missing:
        raise UserError(f"topology: {where} is missing required key {missing[0]!r}")


def _rate(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise _err(where, value, "a rate in Mbit/s must be a number > 0")
    if value > 100_000:
        raise _err(where, value, "at most 100000 Mbit/s")
    return float(value)


def _levels(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LEVELS:
        raise _err("levels", value, f"an integer 1..{MAX_LEVELS}")
    return value


def host_mac(index: int) -> str:
    """Deterministic locally administered MAC for the index-th host (1-based)."""
    return f"02:1e:00:00:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}"


def _host_ip6(net6: ipaddress.IPv6Network | None, entry: Mapping[str, Any], i: int, used: set[str]) -> str:
    """The IPv6 address of host ``i``: its ``ip6`` or the i-th address of ``net6`` ("" without subnet6)."""
    if net6 is None:
        return ""
    if "ip6" in entry:
        try:
            ip6 = ipaddress.IPv6Address(entry["ip6"] if isinstance(entry["ip6"], str) else "")
        except ValueError:
            raise _err(f"hosts[{i}].ip6", entry["ip6"], "an IPv6 address") from None
        if ip6 not in net6 or ip6 == net6.network_address:
            raise _err(f"hosts[{i}].ip6", entry["ip6"], f"a host address inside subnet6 {net6}")
    else:
        if i + 1 >= net6.num_addresses:
            raise _err("subnet6", str(net6), "too small for the hosts")
        ip6 = net6.network_address + 1 + i
    if str(ip6) in used:
        raise _err(f"hosts[{i}].ip6", str(ip6), "host addresses must be unique")
    used.add(str(ip6))
    return str(ip6)


def topology_from_dict(data: Mapping[str, Any]) -> Topology:
    """Validate a parsed topology file (or preset expansion) and build the model.

    Keys: `preset` (then only preset options are allowed) or `hosts`, `switches`,
    `links`; optional `levels` (1..8) and `subnet` (host addresses are assigned
    from it in host order unless a host gives `ip`); optional `subnet6` gives hosts
    IPv6 addresses the same way (or a host's `ip6`).
    """
    if not isinstance(data, Mapping):
        raise _err("<file>", data, "expected a table")
    if "preset" in data:
        return preset(data["preset"], {k: v for k, v in data.items() if k != "preset"})
    _check_keys("<file>", data, {"hosts", "switches", "links", "levels", "subnet", "subnet6", "name"},
                {"hosts", "switches", "links"})
    levels = _levels(data.get("levels", 4))
    try:
        net = ipaddress.ip_network(str(data.get("subnet", DEFAULT_SUBNET)), strict=True)
    except ValueError:
        raise _err("subnet", data.get("subnet"), "an IPv4 network such as '10.0.0.0/24'") from None
    if net.version != 4 or net.prefixlen > 29:
        raise _err("subnet", str(net), "an IPv4 network of at least 8 addresses")

    net6 = None
    if "subnet6" in data:
        try:
            net6 = ipaddress.IPv6Network(str(data["subnet6"]), strict=True)
        except ValueError:
            raise _err("subnet6", data["subnet6"], "an IPv6 network such as 'fd00:1::/64'") from None
        if net6.prefixlen > 120:
            raise _err("subnet6", str(net6), "an IPv6 network of at least 256 addresses")

    names: set[str] = set()
    for kind in ("hosts", "switches", "links"):
        if not isinstance(data[kind], list) or (kind != "links" and not data[kind]):
            raise _err(kind, data[kind], "a non-empty list of tables")

    def claim(where: str, name: Any) -> str:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise _err(where, name, NAME_RULE)
        if name in names:
            raise _err(where, name, "names must be unique across hosts and switches")
        names.add(name)
        return name

    switches: list[Switch] = []
    dpids: set[int] = set()
    for i, entry in enumerate(data["switches"]):
        _check_keys(f"switches[{i}]", entry, {"name", "dpid"}, {"name"})
        name = claim(f"switches[{i}].name", entry["name"])
        dpid = entry.get("dpid", i + 1)
        if isinstance(dpid, bool) or not isinstance(dpid, int) or not 1 <= dpid < 2**48 or dpid in dpids:
            raise _err(f"switches[{i}].dpid", dpid, "a unique integer 1..2^48-1")
        dpids.add(dpid)
        switches.append(Switch(name, dpid))

    hosts: list[Host] = []
    ips: set[str] = set()
    usable = net.num_addresses - 2  # host addresses: all but the network and broadcast ones (prefix <= 29)
    for i, entry in enumerate(data["hosts"]):
        _check_keys(f"hosts[{i}]", entry, {"name", "ip"} | ({"ip6"} if net6 else set()), {"name"})
        name = claim(f"hosts[{i}].name", entry["name"])
        if "ip" in entry:
            try:
                ip = ipaddress.IPv4Address(entry["ip"] if isinstance(entry["ip"], str) else "")
            except ValueError:
                raise _err(f"hosts[{i}].ip", entry["ip"], "an IPv4 address") from None
            if ip not in net or ip in (net.network_address, net.broadcast_address):
                raise _err(f"hosts[{i}].ip", entry["ip"], f"a host address inside subnet {net}")
        else:
            if i >= usable:
                raise _err("subnet", str(net), f"too small for {len(data['hosts'])} hosts")
            ip = net.network_address + 1 + i  # the i-th host address, computed (a /1 has 2^31 of them)
        if str(ip) in ips:
            raise _err(f"hosts[{i}].ip", str(ip), "host addresses must be unique")
        ips.add(str(ip))
        hosts.append(Host(name, str(ip), host_mac(i + 1), _host_ip6(net6, entry, i, ips)))

    host_names = {h.name for h in hosts}
    switch_names = {s.name for s in switches}
    next_port = {s: 1 for s in switch_names}
    links: list[Link] = []
    pairs: set[frozenset[str]] = set()
    host_degree = {h: 0 for h in host_names}
    for i, entry in enumerate(data["links"]):
        _check_keys(f"links[{i}]", entry, {"a", "b", "rate_mbps"}, {"a", "b", "rate_mbps"})
        a, b = entry["a"], entry["b"]
        for end, node in (("a", a), ("b", b)):
            if node not in names:
                raise _err(f"links[{i}].{end}", node,
                           f"a host or switch defined in this file ({', '.join(sorted(names))})")
        if a == b:
            raise _err(f"links[{i}].b", b, "a link must join two different nodes")
        if a in host_names and b in host_names:
            raise _err(f"links[{i}]", f"{a}-{b}", "a host must link to a switch, not to another host")
        if frozenset((a, b)) in pairs:
            raise _err(f"links[{i}]", f"{a}-{b}", "at most one link between two nodes")
        pairs.add(frozenset((a, b)))
        rate = _rate(f"links[{i}].rate_mbps", entry["rate_mbps"])
        ports = []
        for node in (a, b):
            if node in switch_names:
                ports.append(next_port[node])
                next_port[node] += 1
            else:
                host_degree[node] += 1
                ports.append(0)
        links.append(Link(a, b, rate, ports[0], ports[1]))
    for h, degree in host_degree.items():
        if degree != 1:
            raise _err(f"hosts.{h}", f"{degree} links", "every host needs exactly one link (to a switch)")
    for s, port in next_port.items():
        if port > 1000:  # names "<switch>-p<port>" must fit 15 chars
            raise _err(f"switches.{s}", f"{port - 1} ports", "at most 999 ports per switch")
    topo = Topology(tuple(hosts), tuple(switches), tuple(links), levels, str(net), str(net6) if net6 else "")
    _check_connected(topo)
    return topo


def _check_connected(topo: Topology) -> None:
    adj: dict[str, set[str]] = {}
    for link in topo.links:
        adj.setdefault(link.a, set()).add(link.b)
        adj.setdefault(link.b, set()).add(link.a)
    start = topo.hosts[0].name
    seen, todo = {start}, [start]
    while todo:
        for nxt in adj.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    missing = sorted({h.name for h in topo.hosts} - seen)
    if missing:
        raise _err("links", f"host {missing[0]}", f"every host must be reachable from {start}")


def _opt(options: Mapping[str, Any], key: str, default: Any, kind: str) -> Any:
    value = options.get(key, default)
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
            raise _err(key, value, "an integer 1..32")
        return value
    return _rate(key, value)


PRESET_OPTIONS = {
    "dumbbell": {"hosts_per_side": 2, "bottleneck_mbps": 50.0, "host_mbps": 1000.0, "levels": 4},
    "leafspine": {"leaves": 3, "spines": 2, "hosts_per_leaf": 2, "host_mbps": 100.0,
                  "fabric_mbps": 100.0, "levels": 4},
}


def preset(name: Any, options: Mapping[str, Any] | None = None) -> Topology:
    """Expand a preset: `dumbbell` (two switches joined by one bottleneck link) or
    `leafspine` (leaves x spines, every leaf linked to every spine, hosts on leaves)."""
    options = dict(options or {})
    options.pop("name", None)
    if name not in PRESETS:
        raise _err("preset", name, f"one of {', '.join(PRESETS)}")
    allowed = PRESET_OPTIONS[name]
    for key in options:
        if key not in allowed:
            raise _err(key, options[key], f"options of preset {name}: {', '.join(sorted(allowed))}")
    levels = _levels(options.get("levels", 4))
    if name == "dumbbell":
        n = _opt(options, "hosts_per_side", 2, "count")
        bottleneck = _opt(options, "bottleneck_mbps", 50.0, "rate")
        host_rate = _opt(options, "host_mbps", 1000.0, "rate")
        hosts = [f"h{i + 1}" for i in range(2 * n)]
        links = [{"a": "s1", "b": "s2", "rate_mbps": bottleneck}]
        links += [{"a": h, "b": "s1" if i < n else "s2", "rate_mbps": host_rate} for i, h in enumerate(hosts)]
        data = {"switches": [{"name": "s1"}, {"name": "s2"}], "hosts": [{"name": h} for h in hosts],
                "links": links, "levels": levels}
        return topology_from_dict(data)
    leaves = _opt(options, "leaves", 3, "count")
    spines = _opt(options, "spines", 2, "count")
    per_leaf = _opt(options, "hosts_per_leaf", 2, "count")
    host_rate = _opt(options, "host_mbps", 100.0, "rate")
    fabric = _opt(options, "fabric_mbps", 100.0, "rate")
    switches = [{"name": f"leaf{i + 1}", "dpid": 0x100 + i + 1} for i in range(leaves)]
    switches += [{"name": f"spine{i + 1}", "dpid": 0x200 + i + 1} for i in range(spines)]
    host_rows: list[dict[str, str]] = []
    link_rows: list[dict[str, Any]] = []
    for leaf in range(leaves):
        for s in range(spines):
            link_rows.append({"a": f"leaf{leaf + 1}", "b": f"spine{s + 1}", "rate_mbps": fabric})
    for leaf in range(leaves):
        for j in range(per_leaf):
            h = f"h{leaf * per_leaf + j + 1}"
            host_rows.append({"name": h})
            link_rows.append({"a": h, "b": f"leaf{leaf + 1}", "rate_mbps": host_rate})
    return topology_from_dict({"switches": switches, "hosts": host_rows, "links": link_rows, "levels": levels})
