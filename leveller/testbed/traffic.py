"""Test traffic between testbed hosts: iperf3 runs with a DSCP mark, and small TCP
transfers with chosen source ports (known 5-tuples). Everything runs inside the
hosts' namespaces and is bounded in time.

    python -m leveller.testbed.traffic sink PORT
    python -m leveller.testbed.traffic send DST PORT SPORT BYTES [SPORT BYTES ...]
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from typing import Any

from leveller.testbed.cluster import Testbed


def iperf_server(tb: Testbed, host: str, port: int) -> subprocess.Popen[str]:
    """One-off iperf3 server printing JSON (receiver-side intervals) when the test ends."""
    return subprocess.Popen(tb.exec_argv(host, ["iperf3", "-s", "-1", "-J", "-p", str(port)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def iperf_client(tb: Testbed, src: str, dst_ip: str, port: int, seconds: float, tos: int = 0,
                 cport: int | None = None) -> subprocess.Popen[str]:
    """TCP sender for `seconds`; `tos` is set with IP_TOS on its socket (DSCP << 2)."""
    argv = ["iperf3", "-c", dst_ip, "-p", str(port), "-t", str(seconds), "-J", "-S", str(tos),
            "--connect-timeout", "3000"]
    if cport:
        argv += ["--cport", str(cport)]
    return subprocess.Popen(tb.exec_argv(src, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def received_mbps(server_json: str, start: float, end: float) -> float:
    """Receiver throughput over [start, end) seconds of the test, from iperf3 server intervals."""
    data = json.loads(server_json)
    total, span = 0.0, 0.0
    for interval in data.get("intervals", []):
        s = interval["sum"]
        if s["start"] >= start - 1e-6 and s["end"] <= end + 0.5:
            total += s["bytes"] * 8
            span += s["end"] - s["start"]
    if span <= 0:
        raise RuntimeError(f"no iperf3 intervals in [{start}, {end}): {server_json[:300]}")
    return total / span / 1e6


def sink(port: int) -> None:
    """Accept TCP connections and discard what they send (until killed)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(dst: str, port: int, transfers: list[tuple[int, int]], timeout: float = 10.0) -> None:
    """Open one TCP connection per (source port, bytes) and send that many bytes."""
    chunk = b"x" * 65536
    for sport, nbytes in transfers:
        with socket.create_connection((dst, port), timeout=timeout, source_address=("0.0.0.0", sport)) as s:
            left = nbytes
            while left > 0:
                left -= s.send(chunk[:min(left, len(chunk))])
            s.shutdown(socket.SHUT_WR)
            s.recv(1)


def main(argv: list[str]) -> int:
    if argv[:1] == ["sink"]:
        sink(int(argv[1]))
    elif argv[:1] == ["send"]:
        rest = [int(x) for x in argv[3:]]
        send(argv[1], int(argv[2]), list(zip(rest[::2], rest[1::2])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def host_python(tb: Testbed, host: str, *args: Any) -> list[str]:
    """argv running this module inside a host's namespace."""
    return tb.exec_argv(host, [sys.executable, "-m", "leveller.testbed.traffic", *map(str, args)])
