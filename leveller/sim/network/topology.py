"""Networks for the simulator: a core Topology plus what the fluid model needs.

A job runs on *hosts*; a host has ``gpus_per_host`` GPUs and one or more NICs
(the core topology's hosts, single-homed). Testbed presets, testbed TOML files
and ``lingjun`` have one NIC per host; ``fabric:`` is rail-style with
``nics_per_host`` NICs per host (default one per GPU; NIC r of every host on rail
r; with fewer NICs than GPUs, GPU g uses NIC g x nics / gpus). Links are full duplex: each becomes two
directed links named ``a>b`` as in :class:`leveller.core.paths.Path`, with
capacity in bytes per second. Equal-cost paths and the ECMP
choice come from :mod:`leveller.core.paths` (``shortest_paths``), the code the SDN app uses.

Specs accepted by :func:`load_network`:
  dumbbell[:hosts_per_side=N,bottleneck_mbps=R,host_mbps=R]   testbed preset
  leafspine[:leaves=N,spines=N,hosts_per_leaf=N,host_mbps=R,fabric_mbps=R]
  FILE.toml                                                  testbed topology file (Mbit/s)
  fabric:gpus=1024,gpus_per_host=8,hosts_per_leaf=8,spines=8,gbps=400,nics_per_host=8,oversub=1
        gbps = NIC rate; a leaf's uplinks (one per spine) carry its downlinks' rate / oversub
  paper-testbed                                              the paper's testbed (see PAPER_TESTBED)
  lingjun[:host_gbps=200,oversub=2]                          Alibaba Lingjun 2023 topology
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from leveller.core.paths import MAX_LISTED_PATHS, ShortestPaths, graph, shortest_paths
from leveller.core.topology import PRESETS, Host, Link, Switch, Topology, host_mac, preset
from leveller.errors import UserError
from leveller.model.flow import FlowKey, stable_hash

FABRIC_DEFAULTS = {"gpus": 1024, "gpus_per_host": 8, "hosts_per_leaf": 8, "spines": 8, "gbps": 400.0,
                   "nics_per_host": 8, "oversub": 1.0}  # nics_per_host: default = gpus_per_host
# The paper's testbed: 12 GPUs in 12 hosts with one NIC each, 4 hosts per leaf, 3 leaves, 2 spines,
# 50 Gbit/s between switches. The NIC rate is not given in the issue: 100 Gbit/s assumed (each leaf's
# 4 x 100 Gbit/s of hosts share 2 x 50 Gbit/s of uplinks).
PAPER_TESTBED = {"gpus": 12, "gpus_per_host": 1, "hosts_per_leaf": 4, "spines": 2, "gbps": 100.0,
                 "nics_per_host": 1, "uplink_gbps": 50.0}
LINGJUN_DEFAULTS = {"host_gbps": 200.0, "oversub": 2.0, "gpus_per_host": 8}
MAX_FABRIC_GPUS = 65536


@dataclass
class Network:
    """Directed links with capacities, hosts with their NICs, and ECMP candidates between NICs."""

    name: str
    topo: Topology
    nics: dict[str, tuple[str, ...]]  # host -> its NICs (core topology hosts), rail order
    gpus_per_host: int
    note: str = ""  # the link rates assumed, for humans
    links: list[str] = field(init=False)
    index: dict[str, int] = field(init=False)
    capacity: np.ndarray = field(init=False)  # bytes/s per directed link
    _graph: nx.Graph = field(init=False, repr=False)
    _attach: dict[str, str] = field(init=False, repr=False)  # NIC -> its switch
    _ip: dict[str, str] = field(init=False, repr=False)
    _memo: dict[tuple[str, str], ShortestPaths] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        caps: list[float] = []
        for link in self.topo.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                names.append(f"{a}>{b}")
                caps.append(link.rate_mbps * 1e6 / 8)
        self.links = names
        self.index = {n: i for i, n in enumerate(names)}
        self.capacity = np.array(caps)
        self._graph = graph(self.topo)
        nic_names = {h.name for h in self.topo.hosts}
        self._attach = {}
        for link in self.topo.links:
            if link.a in nic_names:
                self._attach[link.a] = link.b
            if link.b in nic_names:
                self._attach[link.b] = link.a
        self._ip = {h.name: h.ip for h in self.topo.hosts}
        self._memo = {}

    @property
    def total_gpus(self) -> int:
        return len(self.nics) * self.gpus_per_host

    def ip(self, nic: str) -> str:
        return self._ip[nic]

    def _dag(self, src_nic: str, dst_nic: str) -> ShortestPaths:
        """Fewest-hop paths between the NICs' switches (NICs are single-homed, so the switch
        part of every NIC-to-NIC path depends on them only; sorted orders agree)."""
        key = (self._attach[src_nic], self._attach[dst_nic])
        if key not in self._memo:
            self._memo[key] = shortest_paths(self._graph, *key)
        return self._memo[key]

    def _links(self, src_nic: str, middle: tuple[str, ...], dst_nic: str) -> tuple[int, ...]:
        nodes = (src_nic, *middle, dst_nic)
        return tuple(self.index[f"{a}>{b}"] for a, b in zip(nodes, nodes[1:]))

    def candidates(self, src_nic: str, dst_nic: str) -> list[tuple[int, ...]]:
        """The equal-cost paths between two NICs (the first MAX_LISTED_PATHS in sorted order, as
        :func:`leveller.core.paths.equal_cost_paths` lists them) as tuples of directed link ids."""
        return [self._links(src_nic, m, dst_nic) for m in self._dag(src_nic, dst_nic).first(MAX_LISTED_PATHS)]

    def ecmp(self, src_nic: str, dst_nic: str, flow: FlowKey) -> tuple[int, ...]:
        """The path ECMP gives ``flow``: the rule of :func:`leveller.core.paths.choose_path`
        (index stable_hash(flow) mod the number of equal-cost paths, in sorted order)."""
        dag = self._dag(src_nic, dst_nic)
        return self._links(src_nic, dag.nth(stable_hash(flow) % dag.count), dst_nic)

    def connected(self, a: str, b: str) -> bool:
        return nx.has_path(self._graph, a, b)


def _single_nic(name: str, topo: Topology, note: str, gpus_per_host: int = 1) -> Network:
    return Network(name, topo, {h.name: (h.name,) for h in topo.hosts}, gpus_per_host, note)


def _build(hosts: list[str], switches: list[str], links: list[tuple[str, str, float]]) -> Topology:
    """A core Topology built directly (simulated rates may exceed what the testbed validator allows)."""
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    hs = tuple(Host(h, str(ipaddress.IPv4Address(base + i + 1)), host_mac(i + 1)) for i, h in enumerate(hosts))
    ss = tuple(Switch(s, i + 1) for i, s in enumerate(switches))
    ls = tuple(Link(a, b, rate) for a, b, rate in links)
    return Topology(hs, ss, ls, levels=8, subnet="10.0.0.0/8")


def parse_options(spec: str, text: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``k=v,k=v`` into a dict typed like ``defaults``; UserError naming the key and the allowed ones."""
    out = dict(defaults)
    if not text:
        return out
    for part in text.split(","):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in defaults:
            raise UserError(f"--topology {spec!r}: unknown option {part!r}; allowed: "
                            + ", ".join(f"{k}={v}" for k, v in defaults.items()))
        kind = type(defaults[key])
        try:
            value = kind(raw) if kind is not int else int(raw, 10)
        except ValueError:
            raise UserError(f"--topology {spec!r}: {key} = {raw!r} is not "
                            f"a{'n integer' if kind is int else ' number'}") from None
        if not value > 0:
            raise UserError(f"--topology {spec!r}: {key} = {raw!r} must be > 0")
        out[key] = value
    return out


def fabric(spec: str, options: Mapping[str, Any]) -> Network:
    """Rail-style leaf-spine: ``hosts_per_leaf`` hosts per group, one leaf per rail (NIC index) and
    group, every leaf to every spine; each leaf-spine link carries hosts_per_leaf x gbps / (oversub x
    spines), or ``uplink_gbps`` when given (the paper-testbed preset)."""
    gpus, per_host, per_leaf, spines = (options[k] for k in ("gpus", "gpus_per_host", "hosts_per_leaf", "spines"))
    gbps = float(options["gbps"])
    rails = int(options.get("nics_per_host") or per_host)
    oversub = float(options.get("oversub", 1.0))
    if rails > per_host or per_host % rails:
        raise UserError(f"--topology {spec!r}: nics_per_host = {rails} must divide gpus_per_host = {per_host} "
                        "(1 = one NIC per host shared by its GPUs; gpus_per_host = one NIC per GPU)")
    if gpus > MAX_FABRIC_GPUS:
        raise UserError(f"--topology {spec!r}: gpus = {gpus} is too many; at most {MAX_FABRIC_GPUS}")
    if gpus % per_host:
        raise UserError(f"--topology {spec!r}: gpus = {gpus} must be a multiple of gpus_per_host = {per_host}")
    n_hosts = gpus // per_host
    if n_hosts % per_leaf:
        raise UserError(f"--topology {spec!r}: {n_hosts} hosts (gpus / gpus_per_host) must be a multiple of "
                        f"hosts_per_leaf = {per_leaf}")
    groups = n_hosts // per_leaf
    rate = gbps * 1000
    nics: dict[str, tuple[str, ...]] = {}
    nic_names: list[str] = []
    links: list[tuple[str, str, float]] = []
    up_gbps = float(options["uplink_gbps"]) if "uplink_gbps" in options else per_leaf * gbps / (oversub * spines)
    leaves = [f"l{g}r{r}" for g in range(groups) for r in range(rails)]
    spine_names = [f"s{k}" for k in range(spines)]
    for h in range(n_hosts):
        group = h // per_leaf
        mine = tuple(f"h{h}r{r}" for r in range(rails))
        nics[f"h{h}"] = mine
        nic_names.extend(mine)
        links.extend((nic, f"l{group}r{r}", rate) for r, nic in enumerate(mine))
    links.extend((leaf, s, up_gbps * 1000) for leaf in leaves for s in spine_names)
    topo = _build(nic_names, leaves + spine_names, links)
    nic_text = "one NIC per GPU" if rails == per_host else f"{rails} NIC{'s' if rails > 1 else ''} per host"
    ratio = per_leaf * gbps / (spines * up_gbps)
    note = (f"rail-style leaf-spine: {n_hosts} hosts x {per_host} GPUs, {nic_text} at {gbps:g} Gbit/s; "
            f"{len(leaves)} leaves ({per_leaf} hosts per leaf, one leaf per rail), {spines} spines, "
            f"leaf-spine links {up_gbps:g} Gbit/s (leaf oversubscription {ratio:g}:1)")
    return Network(spec, topo, nics, per_host, note)


def lingjun(spec: str, options: Mapping[str, Any]) -> Network:
    """The Alibaba Lingjun 2023 topology (host -> ASW -> PSW -> DSW) from the committed ToR table."""
    from leveller.sim.network.lingjun_data import DSW, TORS

    host_rate = float(options["host_gbps"]) * 1000
    oversub = float(options["oversub"])
    hosts: list[str] = []
    links: list[tuple[str, str, float]] = []
    psw_up: dict[str, float] = {}
    tors: list[str] = []
    for psw, asw, count in TORS:
        tor = f"t{psw}{asw}".lower()
        tors.append(tor)
        up = count * host_rate / oversub
        links.append((tor, psw.lower(), up))
        psw_up[psw] = psw_up.get(psw, 0.0) + up / oversub
        for _ in range(count):
            h = f"h{len(hosts)}"
            hosts.append(h)
            links.append((h, tor, host_rate))
    links.extend((psw.lower(), DSW.lower(), up) for psw, up in sorted(psw_up.items()))
    switches = tors + [p.lower() for p in sorted(psw_up)] + [DSW.lower()]
    topo = _build(hosts, switches, links)
    note = (f"Alibaba Lingjun 2023: {len(hosts)} hosts x {options['gpus_per_host']} GPUs, {len(tors)} ToRs (ASW), "
            f"{len(psw_up)} PSWs, 1 DSW; assumed rates: host {options['host_gbps']:g} Gbit/s, ToR uplink = its "
            f"hosts' rate / {oversub:g}, PSW uplink = its ToRs' uplinks / {oversub:g} (single path: a tree)")
    return _single_nic(spec, topo, note, int(options["gpus_per_host"]))


def load_network(spec: str) -> Network:
    """Build the network named by ``spec`` (see the module docstring); UserError for a bad spec."""
    name, _, opts = spec.partition(":")
    if name == "fabric":
        options = parse_options(spec, opts, FABRIC_DEFAULTS)
        if not any(p.partition("=")[0].strip() == "nics_per_host" for p in opts.split(",")):
            options["nics_per_host"] = options["gpus_per_host"]
        return fabric(spec, options)
    if name == "paper-testbed":
        if opts:
            raise UserError(f"--topology {spec!r}: paper-testbed takes no options (use fabric:... to vary it)")
        return fabric(spec, PAPER_TESTBED)
    if name == "lingjun":
        options = parse_options(spec, opts, {**LINGJUN_DEFAULTS})
        return lingjun(spec, options)
    if name in PRESETS:
        from leveller.core.topology import PRESET_OPTIONS

        defaults = {k: v for k, v in PRESET_OPTIONS[name].items() if k != "levels"}
        topo = preset(name, parse_options(spec, opts, defaults))
        return _single_nic(spec, topo, _rates_note(topo))
    path = Path(spec)
    if not path.exists():
        raise UserError(f"--topology = {spec!r} is not a preset (dumbbell, leafspine, paper-testbed, fabric:..., "
                        "lingjun) "
                        "nor an existing TOML file")
    from leveller.testbed.topofile import load_topology

    topo = load_topology(spec)
    return _single_nic(spec, topo, _rates_note(topo))


def _rates_note(topo: Topology) -> str:
    rates = sorted({lk.rate_mbps for lk in topo.links})
    return (f"{len(topo.hosts)} hosts (1 GPU, 1 NIC each), {len(topo.switches)} switches, link rates "
            + ", ".join(f"{r:g}" for r in rates) + " Mbit/s")
