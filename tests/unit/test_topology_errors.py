"""Every way a topology can be wrong gives its own message: the field, the value and what is allowed.

The messages are what a user reads when `leveller testbed up --topology FILE` refuses a file, so
they are pinned whole. The presets are pinned too (names, addresses, dpids, ports, rates): the
live tests, the SDN app and the README rely on them.
"""

from __future__ import annotations

from typing import Any

import pytest

from leveller.core.topology import host_mac, preset, topology_from_dict
from leveller.model.errors import UserError
from tests.helpers.rpc import mutate

GOOD: dict[str, Any] = {
    "switches": [{"name": "s1"}, {"name": "s2", "dpid": 7}],
    "hosts": [{"name": "h1"}, {"name": "h2", "ip": "10.0.0.9"}],
    "links": [{"a": "h1", "b": "s1", "rate_mbps": 100}, {"a": "s1", "b": "s2", "rate_mbps": 10},
              {"a": "s2", "b": "h2", "rate_mbps": 100}],
}
NAMES = "1-10 chars: a lowercase letter, then lowercase letters, digits or '_'"


def changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of GOOD with the entry at ``path`` set to ``value`` (deleted when value is DELETE)."""
    return mutate(GOOD, path, value)


DELETE = KeyError  # test_rpc_schema.mutate's "delete this key"


@pytest.mark.parametrize("data,message", [
    ([1], "topology: <file> = [1] is invalid; expected a table"),
    (changed(("colour",), "red"),
     "topology: <file>.colour = 'red' is invalid; allowed keys: hosts, levels, links, name, subnet, subnet6, switches"),
    (changed(("links",), DELETE), "topology: <file> is missing required key 'links'"),
    (changed(("levels",), 0), "topology: levels = 0 is invalid; an integer 1..8"),
    (changed(("levels",), 9), "topology: levels = 9 is invalid; an integer 1..8"),
    (changed(("levels",), True), "topology: levels = True is invalid; an integer 1..8"),
    (changed(("subnet",), "10.0.0.1/24"), "topology: subnet = '10.0.0.1/24' is invalid; an IPv4 network such as "
                                          "'10.0.0.0/24'"),
    (changed(("subnet",), "10.0.0.0/30"), "topology: subnet = '10.0.0.0/30' is invalid; an IPv4 network of at "
                                          "least 8 addresses"),
    (changed(("subnet",), "fd00::/64"), "topology: subnet = 'fd00::/64' is invalid; an IPv4 network of at least "
                                        "8 addresses"),
    (changed(("hosts",), []), "topology: hosts = [] is invalid; a non-empty list of tables"),
    (changed(("switches",), {"name": "s1"}), "topology: switches = {'name': 's1'} is invalid; a non-empty list "
                                             "of tables"),
    (changed(("links",), "none"), "topology: links = 'none' is invalid; a non-empty list of tables"),
    (changed(("switches", 0, "name"), "S1"), f"topology: switches[0].name = 'S1' is invalid; {NAMES}"),
    (changed(("switches", 1, "name"), "s1"), "topology: switches[1].name = 's1' is invalid; names must be unique "
                                             "across hosts and switches"),
    (changed(("switches", 1, "dpid"), 1), "topology: switches[1].dpid = 1 is invalid; a unique integer 1..2^48-1"),
    (changed(("switches", 1, "dpid"), 2**48), "topology: switches[1].dpid = 281474976710656 is invalid; a unique "
                                              "integer 1..2^48-1"),
    (changed(("switches", 1, "dpid"), 0), "topology: switches[1].dpid = 0 is invalid; a unique integer 1..2^48-1"),
    (changed(("switches", 1, "dpid"), True), "topology: switches[1].dpid = True is invalid; a unique integer "
                                             "1..2^48-1"),
    (changed(("switches", 0), "s1"), "topology: switches[0] = 's1' is invalid; expected a table"),
    (changed(("switches", 0, "port"), 3), "topology: switches[0].port = 3 is invalid; allowed keys: dpid, name"),
    (changed(("hosts", 0, "name"), DELETE), "topology: hosts[0] is missing required key 'name'"),
    (changed(("hosts", 1, "ip"), "10.0.1.9"), "topology: hosts[1].ip = '10.0.1.9' is invalid; a host address "
                                              "inside subnet 10.0.0.0/24"),
    (changed(("hosts", 1, "ip"), "10.0.0.255"), "topology: hosts[1].ip = '10.0.0.255' is invalid; a host address "
                                                "inside subnet 10.0.0.0/24"),
    (changed(("hosts", 1, "ip"), "10.0.0.0"), "topology: hosts[1].ip = '10.0.0.0' is invalid; a host address "
                                              "inside subnet 10.0.0.0/24"),
    (changed(("hosts", 1, "ip"), "10.0.0.1"), "topology: hosts[1].ip = '10.0.0.1' is invalid; host addresses "
                                              "must be unique"),
    (changed(("hosts", 1, "ip"), 9), "topology: hosts[1].ip = 9 is invalid; an IPv4 address"),
    (changed(("links", 0, "a"), "h9"), "topology: links[0].a = 'h9' is invalid; a host or switch defined in this "
                                       "file (h1, h2, s1, s2)"),
    (changed(("links", 0, "b"), "s9"), "topology: links[0].b = 's9' is invalid; a host or switch defined in this "
                                       "file (h1, h2, s1, s2)"),
    (changed(("links", 1, "b"), "s1"), "topology: links[1].b = 's1' is invalid; a link must join two different "
                                       "nodes"),
    (changed(("links", 1), {"a": "h1", "b": "h2", "rate_mbps": 1}),
     "topology: links[1] = 'h1-h2' is invalid; a host must link to a switch, not to another host"),
    (changed(("links", 1), {"a": "s2", "b": "h1", "rate_mbps": 1}),
     "topology: hosts.h1 = '2 links' is invalid; every host needs exactly one link (to a switch)"),
    (changed(("links", 1), {"a": "s1", "b": "h1", "rate_mbps": 1}),
     "topology: links[1] = 's1-h1' is invalid; at most one link between two nodes"),
    (changed(("links", 1, "rate_mbps"), 0), "topology: links[1].rate_mbps = 0 is invalid; a rate in Mbit/s must "
                                            "be a number > 0"),
    (changed(("links", 1, "rate_mbps"), "10"), "topology: links[1].rate_mbps = '10' is invalid; a rate in Mbit/s "
                                               "must be a number > 0"),
    (changed(("links", 1, "rate_mbps"), True), "topology: links[1].rate_mbps = True is invalid; a rate in Mbit/s "
                                               "must be a number > 0"),
    (changed(("links", 1, "rate_mbps"), 100_001), "topology: links[1].rate_mbps = 100001 is invalid; at most "
                                                  "100000 Mbit/s"),
    (changed(("links", 1, "rate_mbps"), DELETE), "topology: links[1] is missing required key 'rate_mbps'"),
    (changed(("links",), [GOOD["links"][0], GOOD["links"][2]]),
     "topology: links = 'host h2' is invalid; every host must be reachable from h1"),
    ({"hosts": [{"name": f"h{i}"} for i in range(7)], "switches": [{"name": "s1"}], "subnet": "10.0.0.0/29",
      "links": [{"a": f"h{i}", "b": "s1", "rate_mbps": 1} for i in range(7)]},
     "topology: subnet = '10.0.0.0/29' is invalid; too small for 7 hosts"),
    ({"preset": "ring"}, "topology: preset = 'ring' is invalid; one of dumbbell, leafspine"),
    ({"preset": "dumbbell", "spines": 2}, "topology: spines = 2 is invalid; options of preset dumbbell: "
                                          "bottleneck_mbps, host_mbps, hosts_per_side, levels"),
    ({"preset": "dumbbell", "hosts_per_side": 0}, "topology: hosts_per_side = 0 is invalid; an integer 1..32"),
    ({"preset": "dumbbell", "hosts_per_side": 33}, "topology: hosts_per_side = 33 is invalid; an integer 1..32"),
    ({"preset": "dumbbell", "hosts_per_side": True}, "topology: hosts_per_side = True is invalid; an integer 1..32"),
    ({"preset": "dumbbell", "bottleneck_mbps": -5}, "topology: bottleneck_mbps = -5 is invalid; a rate in Mbit/s "
                                                    "must be a number > 0"),
    ({"preset": "leafspine", "leaves": 40}, "topology: leaves = 40 is invalid; an integer 1..32"),
    ({"preset": "leafspine", "fabric_mbps": 0}, "topology: fabric_mbps = 0 is invalid; a rate in Mbit/s must be "
                                                "a number > 0"),
    ({"preset": "leafspine", "levels": 12}, "topology: levels = 12 is invalid; an integer 1..8"),
])
def test_each_problem_has_its_message(data: Any, message: str) -> None:
    with pytest.raises(UserError) as exc:
        topology_from_dict(data)
    assert str(exc.value) == message


def test_long_values_are_abridged_in_messages() -> None:
    with pytest.raises(UserError) as exc:
        topology_from_dict(changed(("switches", 0, "name"), "x" * 500))
    assert len(str(exc.value)) < 200 and "..." in str(exc.value)


def test_a_good_file_builds_with_its_ports_addresses_and_dpids() -> None:
    t = topology_from_dict(GOOD)
    assert [(h.name, h.ip, h.mac) for h in t.hosts] == [("h1", "10.0.0.1", "02:1e:00:00:00:01"),
                                                        ("h2", "10.0.0.9", "02:1e:00:00:00:02")]
    assert [(s.name, s.dpid) for s in t.switches] == [("s1", 1), ("s2", 7)]
    assert [(lk.a, lk.b, lk.rate_mbps, lk.a_port, lk.b_port) for lk in t.links] == [
        ("h1", "s1", 100.0, 0, 1), ("s1", "s2", 10.0, 2, 1), ("s2", "h2", 100.0, 2, 0)]
    assert t.levels == 4 and t.subnet == "10.0.0.0/24"
    h2 = t.host_link("h2")  # listed as s2-h2: oriented host -> switch
    assert (h2.a, h2.b, h2.rate_mbps, h2.a_port, h2.b_port) == ("h2", "s2", 100.0, 0, 2)
    h1 = t.host_link("h1")
    assert (h1.a, h1.b, h1.a_port, h1.b_port) == ("h1", "s1", 0, 1)
    with pytest.raises(KeyError):
        t.host_link("h9")
    assert t.switch_ports("s1") == [(1, "h1", 100.0), (2, "s2", 10.0)]
    assert t.port_towards("s1", "s2") == 2 and t.port_towards("s2", "h2") == 2
    assert t.switch_by_dpid(7).name == "s2" and t.switch_by_dpid(8) is None
    assert t.host_by_ip("10.0.0.9").name == "h2" and t.host_by_ip("10.0.0.2") is None
    with pytest.raises(KeyError):
        t.host("s1")
    with pytest.raises(KeyError):
        t.switch("h1")
    with pytest.raises(KeyError):
        t.port_towards("s1", "h2")


def test_host_macs_encode_the_index() -> None:
    assert host_mac(1) == "02:1e:00:00:00:01"
    assert host_mac(258) == "02:1e:00:00:01:02"
    assert host_mac(65535) == "02:1e:00:00:ff:ff"


def test_dumbbell_preset_pinned() -> None:
    t = preset("dumbbell")
    assert [(h.name, h.ip) for h in t.hosts] == [("h1", "10.0.0.1"), ("h2", "10.0.0.2"), ("h3", "10.0.0.3"),
                                                 ("h4", "10.0.0.4")]
    assert [(s.name, s.dpid) for s in t.switches] == [("s1", 1), ("s2", 2)]
    assert [(lk.a, lk.b, lk.rate_mbps, lk.a_port, lk.b_port) for lk in t.links] == [
        ("s1", "s2", 50.0, 1, 1), ("h1", "s1", 1000.0, 0, 2), ("h2", "s1", 1000.0, 0, 3),
        ("h3", "s2", 1000.0, 0, 2), ("h4", "s2", 1000.0, 0, 3)]
    assert t.levels == 4
    small = preset("dumbbell", {"hosts_per_side": 1, "bottleneck_mbps": 20, "host_mbps": 200, "levels": 2,
                                "name": "ignored"})
    assert [h.name for h in small.hosts] == ["h1", "h2"] and small.levels == 2
    assert [(lk.a, lk.b, lk.rate_mbps) for lk in small.links] == [("s1", "s2", 20.0), ("h1", "s1", 200.0),
                                                             ("h2", "s2", 200.0)]


def test_leafspine_preset_pinned() -> None:
    t = preset("leafspine")
    assert [(s.name, s.dpid) for s in t.switches] == [("leaf1", 0x101), ("leaf2", 0x102), ("leaf3", 0x103),
                                                      ("spine1", 0x201), ("spine2", 0x202)]
    assert [(h.name, h.ip) for h in t.hosts] == [(f"h{i}", f"10.0.0.{i}") for i in range(1, 7)]
    fabric = [(lk.a, lk.b, lk.rate_mbps, lk.a_port, lk.b_port) for lk in t.links[:6]]
    assert fabric == [("leaf1", "spine1", 100.0, 1, 1), ("leaf1", "spine2", 100.0, 2, 1),
                      ("leaf2", "spine1", 100.0, 1, 2), ("leaf2", "spine2", 100.0, 2, 2),
                      ("leaf3", "spine1", 100.0, 1, 3), ("leaf3", "spine2", 100.0, 2, 3)]
    edge = [(lk.a, lk.b, lk.rate_mbps, lk.b_port) for lk in t.links[6:]]
    assert edge == [("h1", "leaf1", 100.0, 3), ("h2", "leaf1", 100.0, 4), ("h3", "leaf2", 100.0, 3),
                    ("h4", "leaf2", 100.0, 4), ("h5", "leaf3", 100.0, 3), ("h6", "leaf3", 100.0, 4)]
    big = preset("leafspine", {"leaves": 2, "spines": 3, "hosts_per_leaf": 1, "host_mbps": 25, "fabric_mbps": 40})
    assert len(big.switches) == 5 and [h.name for h in big.hosts] == ["h1", "h2"]
    assert {lk.rate_mbps for lk in big.links if lk.b.startswith("spine")} == {40.0}
    assert {lk.rate_mbps for lk in big.links if lk.a.startswith("h")} == {25.0}
    assert topology_from_dict({"preset": "leafspine", "spines": 1}).switches[-1].name == "spine1"
