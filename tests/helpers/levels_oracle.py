"""The pairwise-graph pruning LEVELLER shipped first (networkx), kept as the tests' oracle.

Quadratic in the flows per link, so only for small inputs: leveller.core.levels.assign_levels must
return exactly what this returns. Same semantics as the paper's section 3.3: in every connected
part of the contention graph, all flows of the highest-priority job take the highest free level and
leave; the graph is re-split; the last level holds every remaining flow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from leveller.core.levels import Flow


def contention_graph(flows: Mapping[str, Flow]) -> nx.Graph:
    """Graph with one node per flow and an edge where flows of different jobs share a link."""
    graph: nx.Graph[str] = nx.Graph()
    by_link: dict[object, list[str]] = {}
    for name in sorted(flows):
        graph.add_node(name)
        for link in flows[name].links:
            by_link.setdefault(link, []).append(name)
    for members in by_link.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if flows[a].job != flows[b].job:
                    graph.add_edge(a, b)
    return graph


def oracle_levels(order: Sequence[str] | None, flows: Mapping[str, Flow], k: int) -> dict[str, int]:
    """Map every flow to a level in [0, k-1] given a job order (highest priority first) or None."""
    if k < 1:
        raise ValueError(f"number of levels K must be >= 1, got {k!r}")
    if order is None:
        return {name: 0 for name in flows}
    rank = {job: i for i, job in enumerate(order)}
    graph = contention_graph(flows)
    levels: dict[str, int] = {}
    level = k - 1
    while level > 0 and graph.number_of_nodes():
        chosen: list[str] = []
        for part in nx.connected_components(graph):
            top = min(rank[flows[f].job] for f in part)
            chosen.extend(f for f in part if rank[flows[f].job] == top)
        for f in chosen:
            levels[f] = level
        graph.remove_nodes_from(chosen)
        level -= 1
    for f in graph.nodes:
        levels[f] = 0
    return {name: levels[name] for name in flows}
