"""leveller.model.flow: addresses are canonical, both of one version, without scope ids; labels bracket
IPv6; ICMP flows carry no ports."""

from __future__ import annotations

import ipaddress

import pytest

from leveller.model.errors import UserError
from leveller.model.flow import canonical_address, flow_key


def test_ipv4_text_is_version_4_like_an_address_object() -> None:
    """The fast path for IPv4 text gives version 4, so text and ``ipaddress`` objects mix in one key."""
    assert canonical_address("10.0.0.1", "src") == ("10.0.0.1", 4)
    assert canonical_address(ipaddress.ip_address("10.0.0.2"), "dst") == ("10.0.0.2", 4)
    key = flow_key(ipaddress.ip_address("10.0.0.1"), "10.0.0.2", 1, 2)
    assert key == ("10.0.0.1", "10.0.0.2", 1, 2, 6) and key.version == 4


@pytest.mark.parametrize(("value", "shown"), [
    ("fe80::1%eth0", "'fe80::1%eth0'"),  # a scope id names a host's interface: no flow crosses hosts with it
    ("10.0.0.1%1", "'10.0.0.1%1'"),
    (167772161, "167772161"),  # ipaddress would take an int; a flow's address is text
    (None, "None"),
    (b"10.0.0.1", "b'10.0.0.1'"),
])
def test_address_with_a_scope_id_or_not_text_is_refused(value: object, shown: str) -> None:
    """Only address text (or an ipaddress object) is taken; the message names the end and the value."""
    with pytest.raises(UserError) as info:
        flow_key(value, "fe80::2" if isinstance(value, str) and ":" in value else "10.0.0.2")
    assert str(info.value) == f"flow: src = {shown} is invalid; an IPv4 or IPv6 address"


def test_mixed_address_versions_are_refused_with_both_addresses() -> None:
    """src and dst must be of one version; the message shows both canonical texts."""
    with pytest.raises(UserError) as info:
        flow_key("10.0.0.1", "FD00:0::1")
    assert str(info.value) == ("flow: src = '10.0.0.1' and dst = 'fd00::1' are invalid together; "
                               "both IPv4 or both IPv6")


def test_labels_bracket_ipv6_and_name_port_protocols() -> None:
    """IPv6 labels put the canonical address in brackets before the port; protocols without ports by number."""
    v6 = flow_key("FD00:0:0::1", "fd00::0002", 5, 6, "udp")
    assert (v6.src, v6.dst, v6.version) == ("fd00::1", "fd00::2", 6)
    assert v6.label() == "udp [fd00::1]:5>[fd00::2]:6"
    assert flow_key("10.0.0.1", "10.0.0.3", 40000, 47000).label() == "tcp 10.0.0.1:40000>10.0.0.3:47000"
    assert flow_key("fd00::1", "fd00::2", 7, 8, "icmp").label() == "1 [fd00::1]:0>[fd00::2]:0"
    assert flow_key("10.0.0.1", "10.0.0.2", 7, 8, 47).label() == "47 10.0.0.1:0>10.0.0.2:0"


@pytest.mark.parametrize("proto", ["icmp", 1, "1"])
def test_icmp_flows_carry_no_ports(proto: object) -> None:
    # ICMP has no ports: keeping them would make two packets of one ping two different flows.
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (0, 0, 1)
    assert key == flow_key("10.0.0.1", "10.0.0.2", 0, 0, "icmp")


@pytest.mark.parametrize("proto,n", [("tcp", 6), ("udp", 17), (17, 17)])
def test_tcp_and_udp_flows_keep_their_ports(proto: object, n: int) -> None:
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (1234, 80, n)
