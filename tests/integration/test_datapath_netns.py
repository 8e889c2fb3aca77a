"""The datapath on a real veth between two namespaces, with a real TCP transfer.

Sender: a separate process in its own fresh cgroup v2, inside ns_a. Receiver:
a socket in ns_b plus an AF_PACKET capture on ns_b's veth end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveller.errors import UserError
from leveller.model.flow import flow_key

from .support import TcpCapture, fresh_cgroup

pytestmark = pytest.mark.privileged

PHASE1 = 3_000_000  # bytes sent before the flow gets its DSCP
PHASE2 = 3_000_000  # bytes sent after
DSCP = 46
ETH_P_ALL = 0x0003
# Counted bytes = L3 bytes = payload + per-packet IPv4 (20) and TCP (20 + up to 40 options) headers;
# SYN/FIN/pure ACKs add header-only packets. So payload <= bytes <= payload + packets * 80.
MAX_HEADER_OVERHEAD = 20 + 60

SENDER = r"""
import ctypes, os, socket, sys
procs, netns, src, dst, sport, dport, n1, n2 = sys.argv[1:]
open(procs, "w").write(str(os.getpid()))            # join the test cgroup first
fd = os.open("/run/netns/" + netns, os.O_RDONLY)
if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:
    raise OSError(ctypes.get_errno(), "setns")
s = socket.socket()
s.bind((src, int(sport)))
s.connect((dst, int(dport)))
s.sendall(b"a" * int(n1))
print("phase1", flush=True)
sys.stdin.readline()
s.sendall(b"b" * int(n2))
s.shutdown(socket.SHUT_WR)
s.recv(1)
print("done", flush=True)
"""


@pytest.fixture()
def pair() -> Iterator[object]:
    from leveller.testbed.vethpair import VethPair

    assert shutil.which("ip"), "the `ip` program (iproute2) is needed"
    with VethPair(prefix="lvt") as p:
        yield p


@pytest.fixture()
def cgroup() -> Iterator[Path]:
    with fresh_cgroup("leveller-test") as path:
        yield path


class Capture(TcpCapture):
    """(relative seq, payload length, DSCP) of data packets of one TCP flow seen on an interface."""

    def __init__(self, sock: socket.socket, sport: int, dport: int) -> None:
        super().__init__(sock, sport, dport)
        self.isn: int | None = None
        self.packets: list[tuple[int, int, int]] = []

    def seen(self, seq: int, flags: int, payload: int, dscp: int) -> None:
        if flags & 0x02:  # SYN
            self.isn = seq
        elif payload > 0 and self.isn is not None:
            self.packets.append(((seq - self.isn - 1) & 0xFFFFFFFF, payload, dscp))


@pytest.mark.timeout(60)
def test_real_tcp_flow_counted_marked_and_attributed(pair: object, cgroup: Path) -> None:
    from leveller.agent.datapath import Datapath, attached_filters, has_clsact
    from leveller.testbed.vethpair import VethPair

    p: VethPair = pair  # type: ignore[assignment]
    sport, dport = 20000 + secrets.randbelow(20000), 5001
    key = flow_key(p.ip_a, p.ip_b, sport, dport)

    listener = p.socket(p.ns_b)
    listener.bind((str(p.ip_b), dport))
    listener.listen(1)
    raw = p.socket(p.ns_b, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    raw.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: few capture drops
    raw.bind((p.if_b, 0))
    cap = Capture(raw, sport, dport)
    cap.start()
    received = bytearray()

    with Datapath(p.if_a, netns=p.ns_a, max_flows=4096) as dp:
        assert has_clsact(p.if_a, p.ns_a)
        sender = subprocess.Popen(
            [sys.executable, "-c", SENDER, str(cgroup / "cgroup.procs"), p.ns_a, str(p.ip_a), str(p.ip_b),
             str(sport), str(dport), str(PHASE1), str(PHASE2)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            listener.settimeout(10)
            conn, _ = listener.accept()
            conn.settimeout(10)

            def receive() -> None:  # read all the time so the sender never blocks
                while chunk := conn.recv(1 << 20):
                    received.extend(chunk)

            reader = threading.Thread(target=receive, daemon=True)
            reader.start()
            assert sender.stdout.readline().strip() == "phase1"
            deadline = time.monotonic() + 10
            while len(received) < PHASE1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(received) == PHASE1
            dp.set_lease(60)
            dp.set_dscp({key: DSCP})
            sender.stdin.write("go\n")
            sender.stdin.flush()
            reader.join(timeout=20)
            conn.close()
            assert sender.stdout.readline().strip() == "done"
            assert sender.wait(timeout=10) == 0
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait()
        time.sleep(0.3)  # let the capture drain
        cap.stop.set()
        cap.join()
        stats = dp.read_stats()

    assert bytes(received) == b"a" * PHASE1 + b"b" * PHASE2

    st = stats[key]
    payload = PHASE1 + PHASE2
    assert payload <= st.bytes <= payload + st.packets * MAX_HEADER_OVERHEAD, st
    assert payload / 1460 <= st.packets <= 2 * payload / 1000 + 100, st  # wire segments, not GSO batches
    assert st.cgroup_id == os.stat(cgroup).st_ino, "flow attributed to the sender's cgroup"
    assert key.reversed() not in stats, "ACKs flow on the other veth end: not ours to count"

    before = [dscp for seq, _n, dscp in cap.packets if seq + _n <= PHASE1]
    after = [dscp for seq, _n, dscp in cap.packets if seq >= PHASE1]
    assert before and set(before) == {0}, f"phase 1 DSCPs: {set(before)}"
    assert after and set(after) == {DSCP}, f"phase 2 DSCPs: {set(after)}"
    # the capture is a sample (AF_PACKET may drop under load), but most of phase 2 must be in it
    assert sum(n for seq, n, _d in cap.packets if seq >= PHASE1) >= PHASE2 // 2

    # after detach, nothing of ours remains: no filter, and the clsact we added is gone
    assert attached_filters(p.if_a, p.ns_a) == []
    assert not has_clsact(p.if_a, p.ns_a)
    listener.close()
    raw.close()


def test_detach_keeps_what_was_there_before(pair: object) -> None:
    from pyroute2 import NetNS

    from leveller.agent.datapath import EGRESS_PARENT, Datapath, attached_filters, has_clsact, load_detached

    p = pair
    foreign = load_detached()  # some other tc program, at another priority
    ns = NetNS(p.ns_a, flags=0)  # type: ignore[attr-defined]
    try:
        idx = ns.link_lookup(ifname=p.if_a)[0]  # type: ignore[attr-defined]
        ns.tc("add", "clsact", idx)
        ns.tc("add-filter", "bpf", idx, 7, fd=foreign.program_fd, name="someone_else", parent=EGRESS_PARENT,
              prio=1, classid=1, direct_action=True)
        with Datapath(p.if_a, netns=p.ns_a):  # type: ignore[attr-defined]
            names = {f["name"] for f in attached_filters(p.if_a, p.ns_a)}  # type: ignore[attr-defined]
            assert {"someone_else", "leveller_egress"} <= names
        left = attached_filters(p.if_a, p.ns_a)  # type: ignore[attr-defined]
        assert {f["prio"] for f in left} == {1} and "someone_else" in {f["name"] for f in left}
        assert has_clsact(p.if_a, p.ns_a)  # type: ignore[attr-defined]
    finally:
        ns.close()
        foreign.detach()


def test_stale_filter_is_refused_then_cleaned(pair: object) -> None:
    from leveller.agent.datapath import Datapath, attached_filters, cleanup_stale, has_clsact

    p = pair
    crashed = Datapath(p.if_a, netns=p.ns_a)  # type: ignore[attr-defined]
    crashed.attach()
    crashed._release_bpf()  # a crash: our fds are gone, the tc filter keeps the program alive
    crashed._ifindex = None
    assert attached_filters(p.if_a, p.ns_a)  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="cleanup"):
        Datapath(p.if_a, netns=p.ns_a).attach()  # type: ignore[attr-defined]
    assert cleanup_stale(p.if_a, p.ns_a) == 1  # type: ignore[attr-defined]
    assert attached_filters(p.if_a, p.ns_a) == []  # type: ignore[attr-defined]
    assert not has_clsact(p.if_a, p.ns_a)  # type: ignore[attr-defined]
    assert cleanup_stale(p.if_a, p.ns_a) == 0  # type: ignore[attr-defined]


def test_bad_interface_or_namespace_named_in_error() -> None:
    from leveller.agent.datapath import Datapath

    with pytest.raises(UserError, match="netns='lv-no-such-ns'"):
        Datapath("eth0", netns="lv-no-such-ns").attach()
    with pytest.raises(UserError, match="ifname='lvnosuch0'"):
        Datapath("lvnosuch0").attach()
    with pytest.raises(UserError, match="ifname"):
        Datapath("x" * 16)
    with pytest.raises(UserError, match="max_flows"):
        Datapath("eth0", max_flows=0)


def test_ipv6_flow_marked_on_the_wire(pair: object) -> None:
    """A UDP/IPv6 datagram from ns_a arrives in ns_b with the DSCP and its flow label intact."""
    from leveller.agent.datapath import Datapath

    p = pair
    rx = p.socket(p.ns_b, socket.AF_INET6, socket.SOCK_DGRAM)  # type: ignore[attr-defined]
    rx.bind((str(p.ip6_b), 0))  # type: ignore[attr-defined]
    rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    rx.settimeout(5)
    tx = p.socket(p.ns_a, socket.AF_INET6, socket.SOCK_DGRAM)  # type: ignore[attr-defined]
    tx.bind((str(p.ip6_a), 0))  # type: ignore[attr-defined]
    tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x01)  # ECT(1), DSCP 0
    key = flow_key(str(p.ip6_a), str(p.ip6_b),  # type: ignore[attr-defined]
                  tx.getsockname()[1], rx.getsockname()[1], 17)
    with Datapath(p.if_a, netns=p.ns_a) as dp:  # type: ignore[attr-defined]
        dp.set_lease(60)
        dp.set_dscp({key: 10})
        tx.sendto(b"hello", rx.getsockname()[:2])
        data, anc, _flags, _addr = rx.recvmsg(100, socket.CMSG_SPACE(4))
        assert data == b"hello"
        tclass = [struct.unpack("i", d)[0] for lvl, typ, d in anc if typ == socket.IPV6_TCLASS]
        assert tclass == [(10 << 2) | 0x01]
        assert dp.read_stats()[key].bytes == 40 + 8 + 5
    tx.close()
    rx.close()
