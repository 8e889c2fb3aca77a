"""The ACKs of a job flow on a real veth: the receiving host's datapath counts the reverse tuple (ACK-only, a
few bytes), its report attributes it to the job (--job-ports matches the source port), and the level the
controller gives it marks the ACKs."""

from __future__ import annotations

import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from leveller.agent.rate_tracker import JobProgress
from leveller.agent.reports import Classifier, build_report, parse_port_rule
from leveller.model.flow import flow_key

from .support import TcpCapture

pytestmark = pytest.mark.privileged

ETH_P_ALL = 0x0003
DSCP = 46
CHUNK = 1 << 20


@pytest.fixture()
def pair() -> Iterator[Any]:
    from leveller.testbed.vethpair import VethPair

    assert shutil.which("ip"), "the `ip` program (iproute2) is needed"
    with VethPair(prefix="lva") as p:
        yield p


class AckCapture(TcpCapture):
    """DSCPs of the pure ACKs (no payload) of one TCP flow, from an AF_PACKET socket."""

    def __init__(self, sock: socket.socket, sport: int, dport: int) -> None:
        super().__init__(sock, sport, dport)
        self.dscps: list[int] = []

    def seen(self, seq: int, flags: int, payload: int, dscp: int) -> None:
        if payload == 0 and flags == 0x10:  # ACK only, no payload
            self.dscps.append(dscp)


@pytest.mark.timeout(90)
def test_ack_only_reverse_flow_is_counted_reported_for_the_job_and_marked(pair: Any) -> None:
    from leveller.agent.datapath import Datapath
    from leveller.agent.enforce_bpf import BpfEnforcer, BpfFlowSource

    p = pair
    sport, dport = 20000 + secrets.randbelow(20000), 47000
    data = flow_key(p.ip_a, p.ip_b, sport, dport)
    acks = data.reversed()
    listener = p.socket(p.ns_b)
    listener.bind((str(p.ip_b), dport))
    listener.listen(1)
    raw = p.socket(p.ns_a, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    raw.bind((p.if_a, 0))
    cap = AckCapture(raw, dport, sport)
    cap.start()
    received = [0]

    with Datapath(p.if_b, netns=p.ns_b, max_flows=1024) as dp:  # the receiving host's egress
        sender = p.socket(p.ns_a)
        sender.bind((str(p.ip_a), sport))
        sender.connect((str(p.ip_b), dport))
        conn, _ = listener.accept()

        def receive() -> None:
            while chunk := conn.recv(CHUNK):
                received[0] += len(chunk)

        reader = threading.Thread(target=receive, daemon=True)
        reader.start()
        try:
            sender.sendall(b"a" * 4 * CHUNK)
            deadline = time.monotonic() + 10
            while received[0] < 4 * CHUNK and time.monotonic() < deadline:
                time.sleep(0.01)
            flows = BpfFlowSource(dp).read_flows()
            assert acks in flows and data not in flows  # only the ACKs leave through this end
            assert 0 < flows[acks].bytes < 4 * CHUNK // 20, flows[acks]  # ACK-only: headers, a few bytes each
            now = time.time()
            report = build_report("h2", {"j": JobProgress("j", 3, now - 10, now)}, flows,
                                  Classifier(ports=(parse_port_rule(f"j={dport}"),)), {}, now)
            assert [(f.key, f.job) for f in report.flows] == [(acks, "j")]  # --job-ports matched its sport
            unmarked = len(cap.dscps)
            BpfEnforcer(dp).apply({acks: DSCP}, 30.0)  # the level the controller gives the reported flow
            sender.sendall(b"b" * 4 * CHUNK)
            sender.shutdown(socket.SHUT_WR)
            reader.join(timeout=20)
        finally:
            sender.close()
            conn.close()
        time.sleep(0.3)
        cap.stop.set()
        cap.join()
    listener.close()
    raw.close()
    assert received[0] == 8 * CHUNK
    before, after = cap.dscps[:unmarked], cap.dscps[unmarked:]
    assert before and set(before) == {0}, set(before)
    assert after and after.count(DSCP) >= len(after) - 2, after  # (an ACK in flight while the mark was written)
