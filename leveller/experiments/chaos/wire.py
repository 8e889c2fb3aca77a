"""DSCP on the wire over a whole run: runs of packets with one DSCP, per sending host.

An AF_PACKET socket on a host's interface (inside its namespace) sees every TCP
packet arriving there; the ones sent to that host with a destination port in
the jobs' range are kept as segments: consecutive packets from one source with
one DSCP and no pause longer than SILENCE_S, from the first packet's kernel
time stamp to the last one's (so a segment never spans a time without packets). Every
mark a sender's datapath wrote shows up here, and so does every packet that
went out unmarked, which is what the chaos experiment's stale-mark check needs
(leveller.experiments.chaos.check): a DSCP change alone would hide a mark that carries
on after a silence.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping

from leveller.experiments.chaos.check import Segment
from leveller.testbed.capture import ETH_P_IP, SO_TIMESTAMPNS, frames, kernel_stamp

IPPROTO_TCP = 6
SILENCE_S = 0.05  # a longer pause between two packets of a host ends its segment (a job's compute phase)


class DscpSegments:
    """Capture on ``ifname`` in ``ns``: packets to ``dst`` whose TCP destination port is in [low, high],
    by source address (named through ``hosts``: address -> host). ``with`` starts and stops it."""

    def __init__(self, ns: str, ifname: str, dst: str, ports: tuple[int, int], hosts: Mapping[str, str]) -> None:
        from leveller.testbed.vethpair import VethPair

        self.dst, self.low, self.high = socket.inet_aton(dst), ports[0], ports[1]
        self.names = {socket.inet_aton(ip): name for ip, name in hosts.items()}
        self.sock = VethPair.socket(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.settimeout(0.2)
        self.packets = 0
        self._open: dict[bytes, list[float | int]] = {}  # source -> [dscp, start, end] of its current run
        self._done: list[Segment] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dscp-segments", daemon=True)

    def __enter__(self) -> DscpSegments:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def _loop(self) -> None:
        for fields, anc in frames(self.sock, self._stop.is_set):
            proto, src, dst, dport, dscp = fields
            if proto != IPPROTO_TCP or dst != self.dst or not self.low <= dport <= self.high or src not in self.names:
                continue
            stamp = kernel_stamp(anc)
            with self._lock:
                self.packets += 1
                run = self._open.get(src)
                if run is not None and run[0] == dscp and stamp - float(run[2]) <= SILENCE_S:
                    run[2] = stamp
                    continue
                if run is not None:
                    self._done.append(Segment(self.names[src], int(run[0]), float(run[1]), float(run[2])))
                self._open[src] = [dscp, stamp, stamp]

    def marked(self, host: str, within_s: float = 0.2) -> bool:
        """True if ``host``'s latest packet, seen in the last ``within_s`` seconds, carried a mark."""
        with self._lock:
            run = next((r for src, r in self._open.items() if self.names[src] == host), None)
        return run is not None and run[0] != 0 and time.time() - float(run[2]) <= within_s

    def segments(self) -> list[Segment]:
        """Every run so far (the open ones up to their latest packet), by start time."""
        with self._lock:
            out = self._done + [Segment(self.names[src], int(r[0]), float(r[1]), float(r[2]))
                                for src, r in self._open.items()]
        return sorted(out, key=lambda s: s.start)
