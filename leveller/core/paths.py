"""Deterministic ECMP path choice for a flow (5-tuple) over a Topology.

PURE. Among the equal-cost (fewest hops) paths between the flow's source and
destination hosts, the path is picked by a stable hash of the 5-tuple, so the
SDN app, a restarted app and any caller asking "which links does this flow
cross" all get the same answer without coordination.

The paths are never enumerated: their number grows exponentially with the
fabric (a 12x12 grid has 705,432 between opposite corners). One breadth-first
search and a walk back from the destination give, for every node on a shortest
path, how many shortest paths lead from it to the destination; the k-th path in sorted order (k = hash mod count)
is then walked directly, choosing at each hop the successor, in name order, whose
subtree holds index k. That is exactly ``sorted(all shortest paths)[k]``, in
O(nodes + links) per flow, whatever the count. ``equal_cost_paths`` lists at
most ``limit`` of them (the first ones in that order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import networkx as nx

from leveller.core.topology import Topology
from leveller.model.errors import UserError
from leveller.model.flow import FlowKey, flow_key, stable_hash


@dataclass(frozen=True)
class Hop:
    """One switch on a path: the packet enters on `in_port` and leaves on `out_port`."""

    switch: str
    dpid: int
    in_port: int
    out_port: int

    def to_dict(self) -> dict[str, Any]:
        return {"switch": self.switch, "dpid": self.dpid, "in_port": self.in_port, "out_port": self.out_port}


@dataclass(frozen=True)
class Path:
    flow: FlowKey
    src_host: str
    dst_host: str
    nodes: tuple[str, ...]
    hops: tuple[Hop, ...]
    choices: int

    @property
    def links(self) -> tuple[str, ...]:
        """Directed links crossed, named 'a>b' (contention is per direction)."""
        return link_names(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {"flow": self.flow.to_dict(), "src_host": self.src_host, "dst_host": self.dst_host,
                "nodes": list(self.nodes), "links": list(self.links),
                "hops": [h.to_dict() for h in self.hops], "choices": self.choices}


def graph(topo: Topology) -> nx.Graph[str]:
    g: nx.Graph[str] = nx.Graph()
    g.add_nodes_from(h.name for h in topo.hosts)
    g.add_nodes_from(s.name for s in topo.switches)
    g.add_edges_from((lk.a, lk.b) for lk in topo.links)
    return g


MAX_LISTED_PATHS = 64


@dataclass(frozen=True)
class ShortestPaths:
    """The fewest-hop paths from ``src`` to ``dst`` as a DAG: next hops (sorted by name) and, per
    node, the number of shortest paths from it to ``dst``. ``count`` is 0 when ``dst`` is unreachable."""

    src: str
    dst: str
    next_hops: Mapping[str, tuple[str, ...]]
    paths_to_dst: Mapping[str, int]

    @property
    def count(self) -> int:
        return self.paths_to_dst.get(self.src, 0)

    def nth(self, index: int) -> tuple[str, ...]:
        """The ``index``-th path (0-based) in sorted order of node tuples."""
        if not 0 <= index < self.count:
            raise IndexError(f"path index {index} outside 0..{self.count - 1}")
        nodes = [self.src]
        while nodes[-1] != self.dst:
            for nxt in self.next_hops[nodes[-1]]:
                if index < self.paths_to_dst[nxt]:
                    nodes.append(nxt)
                    break
                index -= self.paths_to_dst[nxt]
        return tuple(nodes)

    def first(self, limit: int) -> list[tuple[str, ...]]:
        """The first ``limit`` paths in sorted order (all of them if there are fewer)."""
        return [self.nth(i) for i in range(min(limit, self.count))]


def shortest_paths(g: nx.Graph[str], src: str, dst: str) -> ShortestPaths:
    """Count and index the fewest-hop paths between two nodes of ``g`` (one BFS, no enumeration).

    Paths never transit a host: hosts are single-homed, so none lies between two links."""
    # node -> its predecessors on shortest paths from src (the stub's return type covers every variant)
    preds = cast(dict[str, list[str]], nx.predecessor(g, src))
    if dst not in preds:
        return ShortestPaths(src, dst, {}, {})
    # walk back from dst: the nodes met are those on some shortest path, one distance layer at a time
    order = [dst]
    successors: dict[str, list[str]] = {dst: []}
    for node in order:
        for prev in preds[node]:
            if prev not in successors:
                successors[prev] = []
                order.append(prev)
            successors[prev].append(node)
    next_hops: dict[str, tuple[str, ...]] = {}
    paths_to_dst: dict[str, int] = {dst: 1}
    for node in order:  # successors (one layer nearer dst) are always counted first
        next_hops[node] = tuple(sorted(successors[node]))
        if node != dst:
            paths_to_dst[node] = sum(paths_to_dst[m] for m in next_hops[node])
    return ShortestPaths(src, dst, next_hops, paths_to_dst)


def equal_cost_paths(topo: Topology, src_host: str, dst_host: str, g: nx.Graph[str] | None = None,
                     limit: int = MAX_LISTED_PATHS) -> list[tuple[str, ...]]:
    """The fewest-hop node paths between two hosts in sorted (deterministic) order, at most ``limit``
    of them (there can be exponentially many; ``shortest_paths(...).count`` says how many)."""
    return shortest_paths(graph(topo) if g is None else g, src_host, dst_host).first(limit)


def link_names(nodes: tuple[str, ...]) -> tuple[str, ...]:
    """Directed links along a node path, named 'a>b' (contention is per direction)."""
    return tuple(f"{a}>{b}" for a, b in zip(nodes, nodes[1:]))


def choose_path(topo: Topology, flow: FlowKey, g: nx.Graph[str] | None = None) -> Path | None:
    """The path of a flow, or None when its addresses are not hosts of the topology
    (or both ends are the same host). Among all equal-cost paths, the one at index
    stable_hash(flow) mod their number in sorted order: the same in every process."""
    src, dst = topo.host_by_ip(flow.src), topo.host_by_ip(flow.dst)
    if src is None or dst is None or src == dst:
        return None
    dag = shortest_paths(graph(topo) if g is None else g, src.name, dst.name)
    if dag.count == 0:
        return None
    nodes = dag.nth(stable_hash(flow) % dag.count)
    hops = []
    for prev, here, nxt in zip(nodes, nodes[1:], nodes[2:]):
        sw = topo.switch(here)
        hops.append(Hop(here, sw.dpid, topo.port_towards(here, prev), topo.port_towards(here, nxt)))
    return Path(flow, src.name, dst.name, nodes, tuple(hops), dag.count)


class Router:
    """The links of many flows over one topology, as choose_path picks them (same ECMP choice).

    Hosts are looked up by address in a dict. Hosts are single-homed, so the shortest paths between
    two hosts are those between their switches with the hosts at both ends, in the same sorted
    order; the switch pair's ShortestPaths is computed once. A batch of 100,000 flows thus costs a
    hash and a short walk per flow, not one breadth-first search each."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._graph = graph(topo)
        self._by_ip = {h.ip: h.name for h in topo.hosts}
        self._switch = {h.name: topo.host_link(h.name).b for h in topo.hosts}
        self._pairs: dict[tuple[str, str], ShortestPaths] = {}

    def links(self, flow: FlowKey) -> tuple[str, ...] | None:
        """Directed links of the flow's path; None outside the topology or between one host's ends."""
        src, dst = self._by_ip.get(flow.src), self._by_ip.get(flow.dst)
        if src is None or dst is None or src == dst:
            return None
        a, b = self._switch[src], self._switch[dst]
        dag = self._pairs.get((a, b))
        if dag is None:
            dag = self._pairs[(a, b)] = shortest_paths(self._graph, a, b)
        if dag.count == 0:
            return None
        return (f"{src}>{a}",) + link_names(dag.nth(stable_hash(flow) % dag.count)) + (f"{b}>{dst}",)


def flow_from_mapping(query: Mapping[str, Any]) -> FlowKey:
    """FlowKey from a mapping with src, dst and optional sport, dport, proto (default tcp)."""
    for key in ("src", "dst"):
        if key not in query:
            raise UserError(f"flow: missing {key!r}; give src, dst, sport, dport, proto")
    return flow_key(query["src"], query["dst"], query.get("sport", 0), query.get("dport", 0),
                    query.get("proto", "tcp"))
