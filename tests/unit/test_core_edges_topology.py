"""Edges of the topology model and of ECMP path choice that the other topology tests leave open.

Pinned here: IPv6 host addresses (given or assigned from ``subnet6``, refused with the field, value
and rule named), a topology's dict form carrying every field (IPv6 included) back to an equal
topology, the limits at their exact boundaries (levels 1, a /29's six hosts, 999 ports per switch,
a /120 for 255 hosts, 32 hosts per dumbbell side), the missing name carried by a lookup's KeyError,
and a caller's own graph being the one paths are chosen over.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import pytest

from leveller.core import paths
from leveller.core.topology import Topology, preset, topology_from_dict
from leveller.model.errors import UserError
from leveller.model.flow import flow_key

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


# --- paths over a caller's graph ------------------------------------------------------

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
