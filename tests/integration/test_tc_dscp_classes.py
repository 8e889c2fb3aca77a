"""Live: the SDN app's tc classifier (leveller.core.qos.tc_dscp_filters, as sdn.tcmap runs it on the OVS
userspace datapath's ports) puts IPv4 and IPv6 packets into the HTB class of their DSCP and TCP's small
packets (ACKs) into the control queue's, and running the commands again replaces the filters instead of
piling them up (the first command flushes)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from leveller.core.qos import control_queue, default_level_map, htb_classid, tc_dscp_filters
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


def classify(p: object, dev: str, levels: int) -> None:
    """An HTB with one class per queue (the levels' and the control queue) and the classifier, run twice:
    the second run must replace, not add."""
    tc(p, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    for q in range(levels + 1):
        tc(p, "class", "add", "dev", dev, "parent", "1:", "classid", htb_classid(q), "htb", "rate", "1gbit")
    for _ in range(2):
        first, *adds = tc_dscp_filters(dev, default_level_map(levels))
        tc(p, *first[1:], check=False)  # nothing to flush the first time
        for argv in adds:
            tc(p, *argv[1:])


def test_ipv4_and_ipv6_packets_take_their_levels_class(pair: object) -> None:
    p, dev, level_map = pair, pair.if_a, default_level_map(LEVELS)  # type: ignore[attr-defined]
    classify(p, dev, LEVELS)
    assert tc(p, "filter", "show", "dev", dev, "parent", "1:").count("flowid") == 2 * LEVELS + 2
    send(p, socket.AF_INET6, str(p.ip6_b), level_map.dscp[3])  # type: ignore[attr-defined]
    send(p, socket.AF_INET, str(p.ip_b), level_map.dscp[2])  # type: ignore[attr-defined]
    stats = parse_class_stats(tc(p, "-s", "class", "show", "dev", dev))
    assert stats[level_map.queue[3]]["packets"] >= PACKETS, stats  # the IPv6 datagrams (plus their ND, if any)
    assert stats[level_map.queue[2]]["packets"] >= PACKETS, stats  # the IPv4 datagrams
    assert stats[level_map.queue[1]]["packets"] == 0, stats  # nothing else was marked with level 1's DSCP
    assert stats[control_queue(LEVELS)]["packets"] == 0, stats  # UDP is never control, however short


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_tcp_acks_take_the_control_class_and_data_its_level(pair: object, family: int) -> None:
    """A TCP connection from side A marked with level 2's DSCP: A's data segments go to level 2's class, and
    A's pure ACKs of what B sends back (and its SYN and FIN) to the control queue's, ahead of every level."""
    p, dev, level_map = pair, pair.if_a, default_level_map(LEVELS)  # type: ignore[attr-defined]
    classify(p, dev, LEVELS)
    size = 300_000
    server = p.socket(p.ns_b, family)  # type: ignore[attr-defined]
    server.bind((str(p.ip6_b if family == socket.AF_INET6 else p.ip_b), 0))  # type: ignore[attr-defined]
    server.listen(1)
    server.settimeout(20)

    def echo() -> None:  # B reads all of A's bytes, then sends as many back
        conn, _ = server.accept()
        with conn:
            got = 0
            while got < size:
                chunk = conn.recv(65536)
                assert chunk
                got += len(chunk)
            conn.sendall(b"b" * size)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    client = p.socket(p.ns_a, family)  # type: ignore[attr-defined]
    try:
        tos = level_map.dscp[2] << 2
        if family == socket.AF_INET6:
            client.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
        else:
            client.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        client.settimeout(20)
        client.connect(server.getsockname()[:2])
        client.sendall(b"a" * size)
        got = 0
        while got < size:
            chunk = client.recv(65536)
            assert chunk
            got += len(chunk)
    finally:
        client.close()
        t.join(20)
        server.close()
    stats = parse_class_stats(tc(p, "-s", "class", "show", "dev", dev))
    data, control = stats[level_map.queue[2]], stats[control_queue(LEVELS)]
    assert data["bytes"] >= size and data["bytes"] / data["packets"] > 1000, stats  # A's full-sized segments
    # B's 300 kB arrive in at least 300 kB / 64 kB segments (GRO off or on); A acknowledges them with short
    # packets: at least a handful, every one under 128 bytes
    assert control["packets"] >= 5 and control["bytes"] / control["packets"] < 128, stats
