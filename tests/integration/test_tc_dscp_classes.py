"""Live: the SDN app's tc classifier (leveller.core.qos.tc_dscp_filters, as sdn.tcmap runs it on the OVS
userspace datapath's ports) puts IPv4 and IPv6 packets into the HTB class of their DSCP, and running the
commands again replaces the filters instead of piling them up (the first command flushes)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest

from leveller.core.qos import default_level_map, htb_classid, tc_dscp_filters
from sdn.tcmap import parse_class_stats

pytestmark = pytest.mark.privileged
LEVELS = 4
PACKETS = 20


@pytest.fixture()
def pair() -> Iterator[object]:
    from leveller.testbed.vethpair import VethPair

    with VethPair(prefix="lq") as p:
        yield p


def tc(p: object, *argv: str, check: bool = True) -> str:
    proc = subprocess.run(p.exec_in(p.ns_a, ["tc", *argv]), capture_output=True, text=True)  # type: ignore[attr-defined]
    if check and proc.returncode != 0:
        raise AssertionError(f"tc {' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def send(p: object, family: int, dst: str, dscp: int) -> None:
    s = p.socket(p.ns_a, family, socket.SOCK_DGRAM)  # type: ignore[attr-defined]
    try:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, dscp << 2)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        for _ in range(PACKETS):
            s.sendto(b"x" * 100, (dst, 9))
    finally:
        s.close()


def test_ipv4_and_ipv6_packets_take_their_levels_class(pair: object) -> None:
    p, dev, level_map = pair, pair.if_a, default_level_map(LEVELS)  # type: ignore[attr-defined]
    tc(p, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    for q in range(LEVELS):
        tc(p, "class", "add", "dev", dev, "parent", "1:", "classid", htb_classid(q), "htb", "rate", "1gbit")
    for _ in range(2):  # twice: the second run must replace, not add
        first, *adds = tc_dscp_filters(dev, level_map)
        tc(p, *first[1:], check=False)  # nothing to flush the first time
        for argv in adds:
            tc(p, *argv[1:])
    assert tc(p, "filter", "show", "dev", dev, "parent", "1:").count("flowid") == 2 * LEVELS
    send(p, socket.AF_INET6, str(p.ip6_b), level_map.dscp[3])  # type: ignore[attr-defined]
    send(p, socket.AF_INET, str(p.ip_b), level_map.dscp[2])  # type: ignore[attr-defined]
    stats = parse_class_stats(tc(p, "-s", "class", "show", "dev", dev))
    assert stats[level_map.queue[3]]["packets"] >= PACKETS, stats  # the IPv6 datagrams (plus their ND, if any)
    assert stats[level_map.queue[2]]["packets"] >= PACKETS, stats  # the IPv4 datagrams
    assert stats[level_map.queue[1]]["packets"] == 0, stats  # nothing else was marked with level 1's DSCP
