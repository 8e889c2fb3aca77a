"""Topology model: presets, port numbering and rejection of bad files before anything is built."""

import ipaddress
import subprocess
import sys

import pytest

from leveller.core.topology import preset, topology_from_dict
from leveller.errors import UserError


def small(**over):
    data = {
        "switches": [{"name": "s1"}, {"name": "s2"}],
        "hosts": [{"name": "a"}, {"name": "b"}],
        "links": [{"a": "a", "b": "s1", "rate_mbps": 100}, {"a": "s1", "b": "s2", "rate_mbps": 10},
                  {"a": "s2", "b": "b", "rate_mbps": 100}],
    }
    data.update(over)
    return data


def test_dumbbell_shape_and_rates():
    t = preset("dumbbell", {"hosts_per_side": 2, "bottleneck_mbps": 50})
    assert [h.name for h in t.hosts] == ["h1", "h2", "h3", "h4"]
    assert [h.ip for h in t.hosts] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert t.host_link("h1").b == "s1" and t.host_link("h4").b == "s2"
    bottleneck = [lk for lk in t.links if {lk.a, lk.b} == {"s1", "s2"}]
    assert len(bottleneck) == 1 and bottleneck[0].rate_mbps == 50.0
    # s1: port 1 = bottleneck (first link), then h1, h2
    assert t.switch_ports("s1") == [(1, "s2", 50.0), (2, "h1", 1000.0), (3, "h2", 1000.0)]


def test_leafspine_is_3x2_with_2_hosts_per_leaf():
    t = preset("leafspine")
    leaves = [s.name for s in t.switches if s.name.startswith("leaf")]
    spines = [s.name for s in t.switches if s.name.startswith("spine")]
    assert (len(leaves), len(spines), len(t.hosts)) == (3, 2, 6)
    for leaf in leaves:
        peers = [p for _, p, _ in t.switch_ports(leaf)]
        assert sorted(x for x in peers if x.startswith("spine")) == ["spine1", "spine2"]
        assert len([x for x in peers if x.startswith("h")]) == 2
    assert len({s.dpid for s in t.switches}) == 5


def test_macs_and_ips_unique():
    t = preset("leafspine", {"leaves": 4, "hosts_per_leaf": 8})
    assert len({h.mac for h in t.hosts}) == len({h.ip for h in t.hosts}) == 32


def test_round_trip():
    t = topology_from_dict(small())
    assert topology_from_dict(t.to_dict()) == t


@pytest.mark.parametrize("data, needle", [
    ({"preset": "ring"}, "preset"),
    (small(links=[{"a": "a", "b": "s9", "rate_mbps": 1}]), "links[0].b"),
    (small(links=[{"a": "a", "b": "s1", "rate_mbps": 0}, {"a": "s1", "b": "s2", "rate_mbps": 1},
                  {"a": "s2", "b": "b", "rate_mbps": 1}]), "rate_mbps"),
    (small(links=[{"a": "a", "b": "s1", "rate_mbps": -5}]), "rate_mbps"),
    (small(hosts=[{"name": "a"}, {"name": "a"}]), "unique"),
    (small(hosts=[{"name": "s1"}, {"name": "b"}]), "unique"),
    (small(switches=[{"name": "s1"}, {"name": "s1"}]), "unique"),
    (small(hosts=[{"name": "a"}, {"name": "b"}, {"name": "c"}]), "hosts.c"),
    (small(hosts=[{"name": "a", "ip": "10.0.0.1"}, {"name": "b", "ip": "10.0.0.1"}]), "unique"),
    (small(hosts=[{"name": "a", "ip": "192.168.1.1"}, {"name": "b"}]), "inside subnet"),
    (small(hosts=[{"name": "a", "ip": "10.0.0.0"}, {"name": "b"}]), "inside subnet"),  # network address
    (small(hosts=[{"name": "a", "ip": "10.0.0.255"}, {"name": "b"}]), "inside subnet"),  # broadcast
    (small(hosts=[{"name": "a", "ip": 167772161}, {"name": "b"}]), "hosts[0].ip"),  # a number, not a string
    (small(subnet="10.0.0.0/29", hosts=[{"name": f"h{i}"} for i in range(7)]), "too small for 7 hosts"),
    (small(levels=9), "levels"),
    (small(switches=[{"name": "s1", "colour": "red"}, {"name": "s2"}]), "colour"),
    (small(switches=[{"name": "S-1!"}, {"name": "s2"}]), "switches[0].name"),
    ({"preset": "dumbbell", "bottleneck_mbps": 0}, "bottleneck_mbps"),
    ({"preset": "dumbbell", "spines": 2}, "spines"),
    (small(links=[{"a": "a", "b": "s1", "rate_mbps": 1}, {"a": "s2", "b": "b", "rate_mbps": 1}]), "reachable"),
    (small(links=[{"a": "a", "b": "b", "rate_mbps": 1}]), "another host"),
])
def test_bad_topologies_are_rejected_with_the_field_named(data, needle):
    with pytest.raises(UserError) as err:
        topology_from_dict(data)
    assert needle in str(err.value)


def test_addresses_are_assigned_in_order_skipping_none() -> None:
    topo = topology_from_dict(small(subnet="192.168.4.0/29", hosts=[{"name": "a"}, {"name": "b", "ip": "192.168.4.6"}]))
    assert [h.ip for h in topo.hosts] == ["192.168.4.1", "192.168.4.6"]


@pytest.mark.parametrize("subnet", ["0.0.0.0/1", "10.0.0.0/8"])
def test_a_huge_subnet_is_not_enumerated(subnet: str) -> None:
    """Issue 10 medium 8: /1 used to be expanded into a list of 2^31 addresses (out of memory after 92 s).
    Built here under a 512 MiB address-space limit: expanding even a /8 exceeds it."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\n"
        "from leveller.core.topology import topology_from_dict\n"
        "links = [{'a': h, 'b': 's1', 'rate_mbps': 10} for h in ('a', 'b')]\n"
        f"topo = topology_from_dict({{'subnet': {subnet!r}, 'switches': [{{'name': 's1'}}], "
        "'hosts': [{'name': 'a'}, {'name': 'b', 'ip': '10.200.0.9'}], 'links': links})\n"
        "print(' '.join(h.ip for h in topo.hosts))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    first = str(ipaddress.ip_network(subnet).network_address + 1)
    assert out.returncode == 0 and out.stdout.split() == [first, "10.200.0.9"], out.stderr[-2000:]
