"""ECMP path choice: shortest, deterministic, spread over spines, ports consistent with the topology."""

from hypothesis import given, settings, strategies as st

from leveller.core.paths import choose_path, equal_cost_paths, flow_key
from leveller.core.topology import preset
from leveller.errors import UserError

import pytest

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


@settings(max_examples=200, deadline=None)
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
