"""K switch priority levels from a job order, by pruning the contention graph.

Contention graph: one node per flow, an edge between two flows of different
jobs that share a link. Pruning (paper section 3.3, Figures 6-7): in every
connected part, all flows of the highest-priority job present in that part
take the highest free level and leave the graph; the graph is re-split into
connected parts and the next level is used; when one level is left, every
remaining flow shares it. Levels are K-1 (highest) .. 0 (lowest). Flows that
never contend are thus set independently, so K levels serve more than K jobs.

With no order (the ``fair`` policy) every flow gets level 0. A job's flows
can land on different levels when they sit in different connected parts.
Deterministic: ranks come from the order; flows and parts are visited sorted
by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import networkx as nx


@dataclass(frozen=True)
class Flow:
    """A flow of ``job`` crossing ``links`` (any hashable link ids, e.g. "s1-s2")."""

    job: str
    links: tuple[str, ...]


def contention_graph(flows: Mapping[str, Flow]) -> nx.Graph:
    """Graph with one node per flow and an edge where flows of different jobs share a link."""
    graph = nx.Graph()
    by_link: dict[str, list[str]] = {}
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


def assign_levels(order: Optional[Sequence[str]], flows: Mapping[str, Flow], k: int) -> dict[str, int]:
    """Map every flow to a level in [0, k-1] given a job order (highest priority first) or None."""
    if k < 1:
        raise ValueError(f"number of levels K must be >= 1, got {k!r}")
    if order is None:
        return {name: 0 for name in flows}
    rank = {job: i for i, job in enumerate(order)}
    if len(rank) != len(order):
        raise ValueError(f"job order has duplicates: {list(order)}")
    unknown = sorted({f.job for f in flows.values()} - rank.keys())
    if unknown:
        raise ValueError(f"flows name jobs missing from the order: {unknown}")
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
