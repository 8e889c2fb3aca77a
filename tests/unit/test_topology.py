"""Topology model: presets, port numbering and rejection of bad files before anything is built."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from leveller.core.topology import Topology, preset, topology_from_dict
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


# === IPv6 host addresses, the dict form, limits at their exact boundaries, lookups =============================
# IPv6 host addresses (given or assigned from ``subnet6``, refused with the field, value and rule named), a
# topology's dict form carrying every field back to an equal topology, the limits at their exact boundaries
# (levels 1, a /29's six hosts, 999 ports per switch, a /120 for 255 hosts, 32 hosts per dumbbell side), and the
# missing name carried by a lookup's KeyError.

SUBNET6 = "fd00:1::/64"


def star(n_hosts: int, subnet: str = "10.0.0.0/16", **extra: Any) -> dict[str, Any]:
    """A topology file: hosts h1..hN all on switch s1 (plus any top-level keys in ``extra``)."""
    hosts = [{"name": f"h{i + 1}"} for i in range(n_hosts)]
    links = [{"a": h["name"], "b": "s1", "rate_mbps": 100} for h in hosts]
    return {"subnet": subnet, "switches": [{"name": "s1"}], "hosts": hosts, "links": links, **extra}


def with_ip6(*ip6: Any, subnet6: str | None = SUBNET6) -> dict[str, Any]:
    """Two hosts on one switch; host i is given ``ip6[i]`` (None: no ``ip6`` key)."""
    data = star(2) | ({"subnet6": subnet6} if subnet6 is not None else {})
    for host, value in zip(data["hosts"], ip6):
        if value is not None:
            host["ip6"] = value
    return data


def refusal(data: Any) -> str:
    """The message of the UserError a topology file is refused with."""
    with pytest.raises(UserError) as exc:
        topology_from_dict(data)
    return str(exc.value)


# --- IPv6 host addresses --------------------------------------------------------------

def test_given_ipv6_addresses_are_kept_in_canonical_form_and_the_others_assigned() -> None:
    t = topology_from_dict(with_ip6("FD00:1:0::A"))
    assert [(h.name, h.ip, h.ip6) for h in t.hosts] == [("h1", "10.0.0.1", "fd00:1::a"),
                                                        ("h2", "10.0.0.2", "fd00:1::2")]
    assert t.subnet6 == SUBNET6
    assert t.host_by_ip("fd00:1::a").name == "h1"
    both = topology_from_dict(with_ip6("fd00:1::7", "fd00:1::ffff"))
    assert [h.ip6 for h in both.hosts] == ["fd00:1::7", "fd00:1::ffff"]


def test_ipv4_only_topology_has_no_ipv6_anywhere() -> None:
    t = topology_from_dict(star(2))
    assert t.subnet6 == "" and [h.ip6 for h in t.hosts] == ["", ""]
    out = t.to_dict()
    assert "subnet6" not in out and all("ip6" not in h for h in out["hosts"])


IP6_INT = int(ipaddress.IPv6Address("fd00:1::5"))  # an address inside subnet6, but as a TOML integer


@pytest.mark.parametrize("data,message", [
    (with_ip6(None, "zz"), "topology: hosts[1].ip6 = 'zz' is invalid; an IPv6 address"),
    (with_ip6(IP6_INT), f"topology: hosts[0].ip6 = {IP6_INT} is invalid; an IPv6 address"),
    (with_ip6("10.0.0.1"), "topology: hosts[0].ip6 = '10.0.0.1' is invalid; an IPv6 address"),
    (with_ip6("fd00:2::1"), "topology: hosts[0].ip6 = 'fd00:2::1' is invalid; a host address inside subnet6 "
                            "fd00:1::/64"),
    (with_ip6(None, "fd00:1::"), "topology: hosts[1].ip6 = 'fd00:1::' is invalid; a host address inside subnet6 "
                                 "fd00:1::/64"),
    # h1 takes h2's would-be address: h2's assigned one collides
    (with_ip6("fd00:1::2"), "topology: hosts[1].ip6 = 'fd00:1::2' is invalid; host addresses must be unique"),
    (with_ip6("fd00:1::9", "fd00:1::9"), "topology: hosts[1].ip6 = 'fd00:1::9' is invalid; host addresses must "
                                         "be unique"),
    (with_ip6("fd00::1", subnet6=None), "topology: hosts[0].ip6 = 'fd00::1' is invalid; allowed keys: ip, name"),
    (with_ip6(subnet6="zz"), "topology: subnet6 = 'zz' is invalid; an IPv6 network such as 'fd00:1::/64'"),
    (with_ip6(subnet6="fd00:1::5/64"), "topology: subnet6 = 'fd00:1::5/64' is invalid; an IPv6 network such as "
                                       "'fd00:1::/64'"),
    (with_ip6(subnet6="fd00:1::/121"), "topology: subnet6 = 'fd00:1::/121' is invalid; an IPv6 network of at "
                                       "least 256 addresses"),
    (star(256, subnet6="fd00:1::/120"), "topology: subnet6 = 'fd00:1::/120' is invalid; too small for the hosts"),
])
def test_bad_ipv6_settings_are_refused_naming_field_value_and_rule(data: dict[str, Any], message: str) -> None:
    assert refusal(data) == message


def test_a_120_prefix_holds_255_hosts() -> None:
    """The smallest subnet6 allowed (/120, 256 addresses) gives ::1..::ff to 255 hosts."""
    t = topology_from_dict(star(255, subnet6="fd00:1::/120"))
    assert t.hosts[0].ip6 == "fd00:1::1" and t.hosts[-1].ip6 == "fd00:1::ff"
    assert t.subnet6 == "fd00:1::/120"


# --- the dict form --------------------------------------------------------------------

def test_dict_form_round_trips_every_field_including_ipv6() -> None:
    data = with_ip6("fd00:1::a") | {"levels": 3, "subnet": "10.1.0.0/24"}
    data["switches"][0]["dpid"] = 42
    t = topology_from_dict(data)
    out = t.to_dict()
    assert out["subnet6"] == SUBNET6
    assert out["hosts"] == [{"name": "h1", "ip": "10.1.0.1", "ip6": "fd00:1::a"},
                            {"name": "h2", "ip": "10.1.0.2", "ip6": "fd00:1::2"}]
    assert out["levels"] == 3 and out["switches"] == [{"name": "s1", "dpid": 42}]
    assert topology_from_dict(out) == t


# --- limits at their boundaries -------------------------------------------------------

def test_one_level_is_allowed() -> None:
    assert topology_from_dict(star(2) | {"levels": 1}).levels == 1
    assert preset("dumbbell", {"levels": 1}).levels == 1


def test_a_29_subnet_holds_six_hosts() -> None:
    """All addresses of a /29 but the network and broadcast ones go to hosts."""
    t = topology_from_dict(star(6, subnet="10.0.0.0/29"))
    assert [h.ip for h in t.hosts] == [f"10.0.0.{i}" for i in range(1, 7)]
    assert refusal(star(7, subnet="10.0.0.0/29")) == ("topology: subnet = '10.0.0.0/29' is invalid; too small for "
                                                     "7 hosts")


def test_a_switch_has_at_most_999_ports() -> None:
    t = topology_from_dict(star(999, subnet="10.0.0.0/22"))
    assert t.switch_ports("s1")[-1] == (999, "h999", 100.0)
    assert refusal(star(1000, subnet="10.0.0.0/22")) == ("topology: switches.s1 = '1000 ports' is invalid; at most "
                                                        "999 ports per switch")


def test_dumbbell_takes_up_to_32_hosts_per_side() -> None:
    t = preset("dumbbell", {"hosts_per_side": 32})
    assert len(t.hosts) == 64 and t.port_towards("s2", "h64") == 33


def test_a_bool_dpid_is_refused_even_on_the_first_switch() -> None:
    data = star(1)
    data["switches"][0]["dpid"] = True
    assert refusal(data) == "topology: switches[0].dpid = True is invalid; a unique integer 1..2^48-1"


def test_a_bad_host_name_names_the_host_field() -> None:
    data = star(1)
    data["hosts"][0]["name"] = "H1"
    data["links"][0]["a"] = "H1"
    assert refusal(data).startswith("topology: hosts[0].name = 'H1' is invalid; 1-10 chars")


# --- lookups --------------------------------------------------------------------------

@pytest.mark.parametrize("lookup,key", [
    (lambda t: t.host("h9"), "h9"),
    (lambda t: t.switch("s9"), "s9"),
    (lambda t: t.host_link("h9"), "h9"),
    (lambda t: t.port_towards("s1", "h9"), ("s1", "h9")),
])
def test_a_failed_lookup_says_what_was_missing(lookup: Callable[[Topology], object], key: object) -> None:
    with pytest.raises(KeyError) as exc:
        lookup(topology_from_dict(star(2)))
    assert exc.value.args == (key,)
