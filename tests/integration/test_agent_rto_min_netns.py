"""--rto-min-ms on real routes: the keeper adds a host route with a lower RTO minimum toward a peer (and no
other destination of its subnet gets one: issue 41, finding 10), an open TCP connection picks it up, and the
host route is gone when the agent exits or is killed."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support import wait_until

pytestmark = pytest.mark.privileged

AGENT = r"""
import sys, time
from leveller.agent.rto_min import RtoMinGuard
guard = RtoMinGuard(int(sys.argv[1]), sys.argv[2]).start()
guard.update([sys.argv[3]])
print("told", guard.proc.pid, flush=True)
time.sleep(120)
"""


@pytest.fixture()
def pair() -> Iterator[Any]:
    from leveller.testbed.vethpair import VethPair

    assert shutil.which("ip") and shutil.which("ss"), "iproute2 (ip, ss) is needed"
    with VethPair(prefix="lvr") as p:
        yield p


def route_metrics(ns: str, dst: str) -> dict[str, int]:
    """The metrics of the route to ``dst``/24 in ``ns``'s main table."""
    from pyroute2 import NetNS

    with NetNS(ns, flags=0) as ipr:
        for msg in ipr.route("dump", family=2, table=254):
            if msg.get_attr("RTA_DST") == dst and msg["dst_len"] == 24:
                metrics = msg.get_attr("RTA_METRICS")
                return dict(metrics["attrs"]) if metrics else {}
    raise AssertionError(f"no route {dst}/24 in {ns}")


def host_routes(ns: str) -> dict[str, dict[str, int]]:
    """The keeper's host routes in ``ns`` (protocol 76): destination -> metrics."""
    from pyroute2 import NetNS

    from leveller.agent.rto_min import RTPROT_LEVELLER

    with NetNS(ns, flags=0) as ipr:
        return {m.get_attr("RTA_DST"): dict((m.get_attr("RTA_METRICS") or {"attrs": []})["attrs"])
                for m in ipr.route("dump", family=2, proto=RTPROT_LEVELLER)}


def rto_min_toward(ns: str, dst: str) -> int | None:
    """The RTO minimum (ms) the kernel uses toward ``dst`` from ``ns`` (`ip route get`), None: Linux's."""
    out = subprocess.run(["ip", "-n", ns, "route", "get", dst], capture_output=True, text=True, check=True).stdout
    m = re.search(r"rto_min (?:lock )?(\d+)ms", out)
    return int(m.group(1)) if m else None


def rto_ms(ns: str, sock: socket.socket) -> float:
    """The current RTO (ms) of the TCP connection ``sock`` in ``ns`` (ss -ti)."""
    (_, sport), (_, dport) = sock.getsockname(), sock.getpeername()
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tin", "dst", f":{dport}", "src", f":{sport}"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"\brto:([\d.]+)", out)
    assert m, out
    return float(m.group(1))


class Echo(threading.Thread):
    """Reads and discards what the connection sends (the receiver in ns_b)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            while conn.recv(65536):
                pass


def test_an_open_connection_gets_the_lower_rto_minimum_until_the_agent_is_killed(pair: Any, tmp_path: Path) -> None:
    net = str(pair.ip_a).rsplit(".", 1)[0] + ".0"
    assert route_metrics(pair.ns_a, net) == {}
    listener = pair.socket(pair.ns_b)
    listener.bind((str(pair.ip_b), 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    Echo(listener).start()
    conn = pair.socket(pair.ns_a)
    conn.connect((str(pair.ip_b), port))

    def send(sock: socket.socket) -> None:
        for _ in range(20):
            sock.sendall(b"x" * 65536)

    try:
        send(conn)
        assert rto_ms(pair.ns_a, conn) >= 200  # Linux's minimum
        out = tmp_path / "agent.out"
        with out.open("w") as f:
            agent = subprocess.Popen([sys.executable, "-c", AGENT, "10", pair.ns_a, str(pair.ip_b)], stdout=f,
                                     stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "told" in out.read_text(), 20, lambda: out.read_text())
            keeper = int(out.read_text().split("told", 1)[1].split()[0])
            peer = str(pair.ip_b)
            wait_until(lambda: host_routes(pair.ns_a).get(peer, {}).get("RTAX_RTO_MIN") == 10, 10,
                       lambda: f"no host route: {host_routes(pair.ns_a)}\n{out.read_text()}")
            assert host_routes(pair.ns_a)[peer]["RTAX_LOCK"] & (1 << 13) and len(host_routes(pair.ns_a)) == 1
            assert rto_min_toward(pair.ns_a, peer) == 10
            other = str(pair.ip_b).rsplit(".", 1)[0] + ".77"  # another destination of the same subnet
            assert rto_min_toward(pair.ns_a, other) is None  # main: 10, the whole /24 was changed
            assert route_metrics(pair.ns_a, net) == {}  # the subnet's route as it was
            send(conn)  # the connection opened before: its next packets use the new route
            assert rto_ms(pair.ns_a, conn) < 200
            agent.send_signal(signal.SIGKILL)  # the agent dies without a word: its pipe ends
            agent.wait(10)
            wait_until(lambda: host_routes(pair.ns_a) == {}, 10,
                       lambda: f"host route not deleted: {host_routes(pair.ns_a)}\n{out.read_text()}")
            wait_until(lambda: not Path(f"/proc/{keeper}").exists(), 10, "the keeper to exit")
            assert "deleted 1 host route(s) with a lower RTO minimum" in out.read_text()
            # a connection opened now has Linux's minimum again (the one that lived through the change keeps
            # its lowered RTT variance: TCP only raises it when the RTT varies more; see rto_min's docstring)
            conn.close()
            Echo(listener).start()
            conn = pair.socket(pair.ns_a)
            conn.connect((str(pair.ip_b), port))
            send(conn)
            assert rto_ms(pair.ns_a, conn) >= 200
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(10)
    finally:
        conn.close()
        listener.close()


def test_closing_the_guard_deletes_the_host_routes_and_an_operator_route_is_left_alone(pair: Any) -> None:
    from leveller.agent.rto_min import RtoMinGuard

    net = str(pair.ip_a).rsplit(".", 1)[0] + ".0"
    other = "10.213.77.0/24"
    subprocess.run(["ip", "-n", pair.ns_a, "route", "add", other, "via", str(pair.ip_b), "rto_min", "50ms"],
                   check=True)
    v6 = str(pair.ip6_b)
    with RtoMinGuard(20, pair.ns_a) as guard:
        guard.update([str(pair.ip_b), "10.213.77.9", v6])
        wait_until(lambda: rto_min_toward(pair.ns_a, str(pair.ip_b)) == 20 and rto_min_toward(pair.ns_a, v6) == 20,
                   10, "the host routes")
        assert rto_min_toward(pair.ns_a, "10.213.77.9") == 50  # the operator's, left as set
    assert guard.proc is None
    assert host_routes(pair.ns_a) == {} and route_metrics(pair.ns_a, net) == {}  # gone before close() returned
    assert rto_min_toward(pair.ns_a, v6) is None
    assert route_metrics(pair.ns_a, "10.213.77.0")["RTAX_RTO_MIN"] == 50  # the operator's, untouched
