"""ECMP path choice: shortest, deterministic, spread over spines, ports consistent with the topology."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core import paths
from leveller.core.paths import choose_path, equal_cost_paths
from leveller.core.topology import preset, topology_from_dict
from leveller.errors import UserError
from leveller.model.flow import flow_key

LS = preset("leafspine")
IPS = [h.ip for h in LS.hosts]


def test_dumbbell_path_crosses_the_bottleneck_with_right_ports():
    t = preset("dumbbell")
    p = choose_path(t, flow_key("10.0.0.1", "10.0.0.3", 5000, 5201, "tcp"))
    assert p.nodes == ("h1", "s1", "s2", "h3")
    assert p.links == ("h1>s1", "s1>s2", "s2>h3")
    # s1 ports: 1 = s2, 2 = h1; s2 ports: 1 = s1, 2 = h3, 3 = h4
    assert [(h.switch, h.in_port, h.out_port) for h in p.hops] == [("s1", 2, 1), ("s2", 1, 2)]


def test_same_leaf_stays_on_leaf():
    p = choose_path(LS, flow_key("10.0.0.1", "10.0.0.2", 1, 2))
    assert p.nodes == ("h1", "leaf1", "h2") and p.choices == 1


def test_unknown_address_has_no_path():
    assert choose_path(LS, flow_key("10.9.9.9", "10.0.0.2", 1, 2)) is None


def test_ecmp_uses_both_spines_and_is_repeatable():
    spines = set()
    for sport in range(40000, 40020):
        f = flow_key("10.0.0.1", "10.0.0.6", sport, 5201)
        p = choose_path(LS, f)
        assert p == choose_path(LS, f)
        assert p.choices == 2
        spines.add(p.nodes[2])
    assert spines == {"spine1", "spine2"}


def test_bad_flow_fields_are_named():
    for args, needle in [(("x", "10.0.0.1"), "src"), (("10.0.0.1", "10.0.0.2", 70000), "sport"),
                         (("10.0.0.1", "10.0.0.2", 1, 2, "sctpx"), "proto")]:
        with pytest.raises(UserError, match=needle):
            flow_key(*args)


@settings(max_examples=200)
@given(st.sampled_from(IPS), st.sampled_from(IPS), st.integers(0, 65535), st.integers(0, 65535),
       st.sampled_from(["tcp", "udp"]))
def test_paths_are_shortest_and_port_consistent(src, dst, sport, dport, proto):
    f = flow_key(src, dst, sport, dport, proto)
    p = choose_path(LS, f)
    if src == dst:
        assert p is None
        return
    assert p.nodes in equal_cost_paths(LS, p.src_host, p.dst_host)
    assert len(p.nodes) == len(equal_cost_paths(LS, p.src_host, p.dst_host)[0])
    for prev, hop, nxt in zip(p.nodes, p.hops, p.nodes[2:]):
        ports = dict((node, port) for port, node, _ in LS.switch_ports(hop.switch))
        assert ports[prev] == hop.in_port and ports[nxt] == hop.out_port
    assert p.nodes[0] == LS.host_by_ip(src).name and p.nodes[-1] == LS.host_by_ip(dst).name


def grid(n: int):
    """An n x n grid of switches, host a on the top-left corner, host b on the bottom-right one."""

    sw = [f"s{r}_{c}" for r in range(n) for c in range(n)]
    links = [{"a": f"s{r}_{c}", "b": f"s{r}_{c + 1}", "rate_mbps": 10} for r in range(n) for c in range(n - 1)]
    links += [{"a": f"s{r}_{c}", "b": f"s{r + 1}_{c}", "rate_mbps": 10} for r in range(n - 1) for c in range(n)]
    links += [{"a": "a", "b": "s0_0", "rate_mbps": 10}, {"a": "b", "b": f"s{n - 1}_{n - 1}", "rate_mbps": 10}]
    return topology_from_dict({"switches": [{"name": s} for s in sw], "hosts": [{"name": "a"}, {"name": "b"}],
                               "links": links})


def test_a_12x12_grid_picks_among_705432_paths_without_listing_them():
    """Issue 10 low 15: the 705,432 corner-to-corner paths used to be enumerated for every flow
    (7.8 s per GET /paths). Memory is the witness: listing them takes hundreds of MB."""
    import math
    import tracemalloc

    topo = grid(12)
    tracemalloc.start()
    try:
        first = choose_path(topo, flow_key("10.0.0.1", "10.0.0.2", 0, 80))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 << 20, f"{peak / 2**20:.0f} MiB"
    paths = [first] + [choose_path(topo, flow_key("10.0.0.1", "10.0.0.2", sport, 80)) for sport in range(1, 50)]
    assert {p.choices for p in paths} == {math.comb(22, 11)} == {705432}
    assert all(len(p.nodes) == 2 + 23 and len(p.hops) == 23 for p in paths)  # 23 switches: shortest
    assert len({p.nodes for p in paths}) > 40  # spread over many of them
    assert paths == [choose_path(topo, flow_key("10.0.0.1", "10.0.0.2", sport, 80)) for sport in range(50)]
    assert len(equal_cost_paths(topo, "a", "b")) == 64  # listing is capped


@st.composite
def small_graph(draw):
    """A random connected graph of up to 9 switches (some with equal-cost alternatives), two hosts."""
    import networkx as nx

    n = draw(st.integers(2, 9))
    edges = {(i, draw(st.integers(0, i - 1))) for i in range(1, n)}  # a random spanning tree
    edges |= {tuple(sorted(e)) for e in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                                                        max_size=12)) if e[0] != e[1]}
    g = nx.Graph()
    g.add_edges_from((f"s{a}", f"s{b}") for a, b in edges)
    g.add_edge("ha", f"s{draw(st.integers(0, n - 1))}")
    g.add_edge("hb", f"s{draw(st.integers(0, n - 1))}")
    return g


@settings(max_examples=300)
@given(small_graph())
def test_indexed_paths_are_exactly_the_sorted_shortest_paths(g):
    import networkx as nx

    from leveller.core.paths import shortest_paths

    reference = sorted(tuple(p) for p in nx.all_shortest_paths(g, "ha", "hb"))
    dag = shortest_paths(g, "ha", "hb")
    assert dag.count == len(reference)
    assert [dag.nth(i) for i in range(dag.count)] == reference
    assert dag.first(3) == reference[:3]


@settings(max_examples=200)
@given(st.sampled_from(IPS), st.sampled_from(IPS), st.integers(0, 65535), st.integers(0, 65535))
def test_choice_is_the_same_as_picking_from_the_sorted_list(src, dst, sport, dport):
    """Same answer as before the change (hash mod count into the sorted list): paths installed by a
    running SDN app and those a new controller computes agree."""
    import networkx as nx

    from leveller.core.paths import graph
    from leveller.model.flow import stable_hash

    f = flow_key(src, dst, sport, dport)
    p = choose_path(LS, f)
    if p is None:
        assert src == dst
        return
    reference = sorted(tuple(x) for x in nx.all_shortest_paths(graph(LS), p.src_host, p.dst_host))
    assert p.nodes == reference[stable_hash(f) % len(reference)] and p.choices == len(reference)


# ---- Router: many flows at once, the same choice as choose_path ---------------------------------

def test_router_picks_exactly_what_choose_path_picks() -> None:
    from leveller.bench.workload import rail_topology
    from leveller.core.paths import Router

    for topo in (LS, preset("dumbbell"), preset("leafspine", {"leaves": 4, "spines": 3, "hosts_per_leaf": 3}),
                 rail_topology(hosts=8, rails=2, leaves=4, spines=2), grid(4)):
        router = Router(topo)
        ips = [h.ip for h in topo.hosts] + ["10.9.9.9"]
        for i, src in enumerate(ips):
            for dst in ips[i % 3::2]:
                for sport in (1, 40000, 65535):
                    f = flow_key(src, dst, sport, 4791, "udp")
                    p = choose_path(topo, f)
                    assert router.links(f) == (None if p is None else p.links)


@settings(max_examples=300)
@given(st.text(alphabet="0123456789.", max_size=16)
       | st.from_regex(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", fullmatch=True))
def test_fast_ipv4_check_accepts_exactly_what_ipaddress_accepts(text: str) -> None:

    try:
        ipaddress.IPv4Address(text)
        valid = True
    except ValueError:
        valid = False
    if valid:
        assert flow_key(text, "10.0.0.1").src == text
    else:
        with pytest.raises(UserError, match="src"):
            flow_key(text, "10.0.0.1")


def test_flow_key_is_a_plain_tuple_with_its_methods() -> None:
    f = flow_key("10.0.0.1", "10.0.0.2", 5, 6, "udp")
    assert f == ("10.0.0.1", "10.0.0.2", 5, 6, 17) and hash(f) == hash(("10.0.0.1", "10.0.0.2", 5, 6, 17))
    assert f.reversed() == flow_key("10.0.0.2", "10.0.0.1", 6, 5, "udp")
    assert f.to_dict() == {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 5, "dport": 6, "proto": 17}
    assert sorted([f.reversed(), f]) == [f, f.reversed()]


# ---- paths over a caller's graph (one that lost a link, say) ----------------------------------------------

def test_paths_follow_the_graph_the_caller_gives() -> None:
    """With a graph lacking a fabric link (e.g. one that went down), ECMP uses only the others."""
    t = preset("leafspine")
    g = paths.graph(t)
    assert len(paths.equal_cost_paths(t, "h1", "h3")) == 2
    g.remove_edge("leaf1", "spine1")
    assert paths.equal_cost_paths(t, "h1", "h3", g) == [("h1", "leaf1", "spine2", "leaf2", "h3")]
    for sport in range(20):
        flow = flow_key(t.host("h1").ip, t.host("h3").ip, 1000 + sport, 80, "tcp")
        path = paths.choose_path(t, flow, g)
        assert path is not None and path.choices == 1 and "spine1" not in path.nodes


def test_router_keeps_its_topology_and_agrees_with_choose_path() -> None:
    t = preset("leafspine")
    router = paths.Router(t)
    assert router.topo is t
    for sport in range(20):
        flow = flow_key(t.host("h1").ip, t.host("h6").ip, 2000 + sport, 443, "tcp")
        chosen = paths.choose_path(t, flow)
        assert chosen is not None and router.links(flow) == chosen.links
