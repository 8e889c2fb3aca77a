"""Live: a host's egress as the testbed builds it (leveller.testbed.cluster.host_egress, the queues of
leveller.core.qos.tc_host_queues) serves the higher level first: two TCP flows leaving one host at the
same time, one with the top level's DSCP and one unmarked, the top takes nearly all of the link and the
unmarked one keeps its floor. With the FIFO the hosts had before (host_shaper's TBF) they split the link
about evenly, so a job at the top of the order lost its rate to the jobs beside it on its hosts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from leveller.core.qos import DEFAULT_FLOOR, default_level_map
from leveller.testbed.cluster import host_egress, tc_batch

pytestmark = pytest.mark.privileged
LEVELS = 4
RATE_MBPS = 20.0
WARMUP_S, MEASURE_S = 1.5, 5.0


@pytest.fixture()
def pair() -> Iterator[object]:
    from leveller.testbed.vethpair import VethPair

    with VethPair(prefix="lh") as p:
        yield p


def flows_bytes(p: object, dscps: tuple[int, ...]) -> list[int]:
    """Bytes each of len(dscps) TCP flows from side A (marked with its DSCP) delivered to side B during
    MEASURE_S seconds after WARMUP_S, all running at once."""
    server = p.socket(p.ns_b)  # type: ignore[attr-defined]
    server.bind((str(p.ip_b), 0))  # type: ignore[attr-defined]
    server.listen(len(dscps))
    server.settimeout(10)
    port = server.getsockname()[1]
    counts = [0] * len(dscps)
    window = [float("inf"), float("inf")]
    stop = threading.Event()

    def receive(conn: socket.socket, i: int) -> None:
        conn.settimeout(1.0)
        with conn:
            while not stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                now = time.monotonic()
                if window[0] <= now < window[1]:
                    counts[i] += len(chunk)

    def send(s: socket.socket) -> None:
        payload = b"x" * 65536
        with s:
            try:
                while not stop.is_set():
                    s.sendall(payload)
            except OSError:
                return

    threads = []
    for i, dscp in enumerate(dscps):
        c = p.socket(p.ns_a)  # type: ignore[attr-defined]
        c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        c.settimeout(5)
        c.connect((str(p.ip_b), port))  # type: ignore[attr-defined]
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        # the receiver knows its flow by the order of accepts: each sender connects before the next
        threads += [threading.Thread(target=receive, args=(conn, i), daemon=True),
                    threading.Thread(target=send, args=(c,), daemon=True)]
    server.close()
    t0 = time.monotonic()
    window[:] = [t0 + WARMUP_S, t0 + WARMUP_S + MEASURE_S]
    for t in threads:
        t.start()
    time.sleep(WARMUP_S + MEASURE_S + 0.2)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return counts


def test_the_top_level_takes_the_host_link_and_the_lowest_keeps_its_floor(pair: object) -> None:
    p = pair
    tc_batch(p.ns_a, host_egress(RATE_MBPS, LEVELS, DEFAULT_FLOOR, dev=p.if_a))  # type: ignore[attr-defined]
    level_map = default_level_map(LEVELS)
    top, low = flows_bytes(p, (level_map.dscp[LEVELS - 1], level_map.dscp[0]))
    link = RATE_MBPS * 1e6 / 8 * MEASURE_S
    assert top + low >= 0.8 * link, (top, low, link)  # the shaper delivers the link
    assert top + low <= 1.1 * link, (top, low, link)  # and no more: the link rate is enforced
    assert top >= 0.8 * (top + low), (top, low)  # an even split (a FIFO) gives ~0.5
    assert low >= 0.5 * DEFAULT_FLOOR * link, (top, low)  # the demoted flow keeps sending


def test_a_batch_that_fails_names_the_namespace_and_tcs_error(pair: object) -> None:
    with pytest.raises(RuntimeError, match=r"tc -batch in .*failed"):
        tc_batch(pair.ns_a, [["tc", "qdisc", "replace", "dev", "nosuchdev0", "root", "pfifo"]])  # type: ignore[attr-defined]
