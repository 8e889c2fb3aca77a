"""The controller's closed loop: every tau, do switch queues hold the bytes the hosts marked for them?

Agents report, per flow, the bytes its packets left the host with each DSCP
(eBPF counters; ``Report.dscp_bytes``, cumulative). The report path only keeps
each host's latest report; every check turns the difference between a host's
latest report and its counters at the previous check into bytes per flow and
DSCP (per-flow work once per check, in the decision thread), places
them on every switch egress port of the flow's path (the decision's links)
at the DSCP's level, and keeps running totals per (switch, port, level). At
each check it reads what every queue took (the SDN app's ``GET /queues``: the
HTB class counters on the userspace datapath) and compares the two over the
last ``window_s`` seconds (leveller.core.enforcement: tolerances and
hysteresis). A mismatch names the switch, the port and the level; it shows in
status, in the metric ``leveller_enforcement_mismatch{switch,port,level}``
(1: mismatch, 0: checked and fine) and in the log when raised and cleared.

Bytes of a flow the monitor has not seen before are a baseline, not news (they
may predate the window); a host's first report too. So a miscount can only
lower what a queue should hold, never raise a false alarm.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge

from leveller.core.enforcement import Port, QueueCheck, QueueKey, Tolerance, compare, egress_ports, expected_bytes
from leveller.core.qos import LevelMap, dscp_levels
from leveller.model.flow import FlowKey
from leveller.model.messages import Report

LOG = logging.getLogger("leveller.controller")


class QueueSource(Protocol):
    """Switch-side truth (leveller.controller.enforcement.SdnQueues over the SDN app)."""

    def egress_ports(self) -> Mapping[str, Port]:
        """Directed link name ``a>b`` -> (switch a, port towards b), for links leaving a switch."""
        ...

    def arrived(self) -> dict[QueueKey, int]:
        """Bytes each (switch, port, level) queue took so far: sent + queued now + dropped."""
        ...


class SdnQueues:
    """QueueSource over the SDN app's API (sdn.client.SdnClient): /topology once, /queues per check."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._ports: dict[str, Port] | None = None

    def egress_ports(self) -> Mapping[str, Port]:
        if self._ports is None:
            from leveller.core.topology import topology_from_dict

            topo = topology_from_dict(self.client.topology())
            towards = {}
            for link in topo.links:
                for a, b, port in ((link.a, link.b, link.a_port), (link.b, link.a, link.b_port)):
                    if port:
                        towards[(a, b)] = port
            names = [f"{a}>{b}" for a, b in towards]
            self._ports = egress_ports(names, [s.name for s in topo.switches], towards)
        return self._ports

    def arrived(self) -> dict[QueueKey, int]:
        """Per level's queue as the protocol says; a port's queues of no level (the control queue, which
        takes TCP's ACKs of every level: leveller.core.qos) count toward each of its levels, since the
        hosts counted those ACKs with their flow's DSCP. They are a few percent of a level's bytes, so a
        level whose data went to another queue still counts far too little."""
        out: dict[QueueKey, int] = {}
        extra: dict[Port, int] = {}
        for q in self.client.queues():
            if q.get("switch") is None:
                continue
            sent, packets = int(q["tx_bytes"]), int(q["tx_packets"])
            dropped = int(q.get("drops") or 0) * (sent // packets if packets else 1500)
            took = sent + int(q.get("backlog_bytes") or 0) + dropped
            if q.get("level") is None:
                port = (q["switch"], int(q["port"]))
                extra[port] = extra.get(port, 0) + took
                continue
            key = (q["switch"], int(q["port"]), int(q["level"]))
            out[key] = out.get(key, 0) + took
        for key in out:
            out[key] += extra.get(key[:2], 0)
        return out


@dataclass(frozen=True)
class Mismatch:
    switch: str
    port: int
    level: int
    expected: int
    counted: int
    since: float

    def describe(self, window_s: float) -> str:
        return (f"switch {self.switch} port {self.port} level {self.level}: its queue took "
                f"{self.counted / 1e6:.2f} of the {self.expected / 1e6:.2f} MB marked for it in {window_s:g} s")


class EnforcementMonitor:
    """Per-port, per-level comparison of marked bytes with queue counters (thread-safe)."""

    def __init__(self, source: QueueSource, level_map: LevelMap, window_s: float,
                 tolerance: Tolerance = Tolerance(), forget_after_s: float | None = None,
                 registry: CollectorRegistry | None = None, interval_s: float = 0.0) -> None:
        if not window_s > 0:
            raise ValueError(f"window must be > 0 seconds, got {window_s!r}")
        self.source, self.window_s, self.tolerance = source, window_s, tolerance
        # reading the switch counters costs the SDN app a `tc` call per port: at most one check per
        # interval_s, however often the controller decides (every iteration end with --on-iteration)
        self.interval_s = interval_s
        self._checked_at: float | None = None
        self.forget_after_s = forget_after_s if forget_after_s is not None else 10 * window_s
        self.level_of_dscp = dscp_levels(level_map)
        self._lock = threading.Lock()
        self._latest: dict[str, Report] = {}  # host -> its latest report since the last check
        self._forgotten: set[str] = set()  # hosts forgotten while a check reads their counters
        self._prev: dict[str, tuple[str, dict[tuple[FlowKey, int], int]]] = {}  # host -> (run, counters) at it
        self._totals: dict[QueueKey, int] = {}  # bytes that should have entered each queue, so far
        self._snaps: deque[tuple[float, dict[QueueKey, int], dict[QueueKey, int]]] = deque()
        self.alarmed: frozenset[QueueKey] = frozenset()
        self.since: dict[QueueKey, float] = {}
        self.judged_at: dict[QueueKey, float] = {}
        self.checks: list[QueueCheck] = []
        self.error: str | None = None
        self.gauge = Gauge("leveller_enforcement_mismatch", "1 while a switch queue took much less than the "
                           "bytes marked for its level (0: checked, fine)", ["switch", "port", "level"],
                           registry=registry)

    # ---- from the RPC threads ------------------------------------------------------------------
    def observe(self, report: Report) -> None:
        """Keep a host's latest report; its counters are read at the next check (the report path, under
        the controller's lock, does no per-flow work: the counters are cumulative, so the latest
        report before each check is all a check needs)."""
        with self._lock:
            self._latest[report.host] = report

    def forget(self, host: str) -> None:
        with self._lock:
            self._latest.pop(host, None)
            self._prev.pop(host, None)
            self._forgotten.add(host)

    def _news(self, latest: Mapping[str, Report]) -> dict[tuple[FlowKey, int], int]:
        """Bytes per (flow, DSCP) since the previous check, from each host's latest report against its
        counters at the previous check. A host's first counters are the baseline, and so are those of a
        flow seen for the first time (its bytes may predate the window)."""
        news: dict[tuple[FlowKey, int], int] = {}
        with self._lock:
            prevs = {host: self._prev.get(host) for host in latest}
        updated = {}
        for host, report in latest.items():
            flows = report.flows
            cur = {(flows[index].key, dscp): nbytes for index, dscp, nbytes in report.dscp_bytes}
            updated[host] = (report.run, cur)
            prev = prevs[host]
            if prev is None or not cur:
                continue
            run, old = prev
            known = {flow for flow, _ in old}
            for key, nbytes in cur.items():
                if run != report.run:
                    delta = nbytes  # a new agent run: its counters started from zero
                elif key in old:
                    delta = nbytes - old[key] if nbytes >= old[key] else nbytes  # evicted and back: from 0
                elif key[0] in known:
                    delta = nbytes  # a known flow on a new DSCP: all of it is new
                else:
                    continue  # a flow seen for the first time: its bytes may predate the window
                if delta > 0:
                    news[key] = news.get(key, 0) + delta
        with self._lock:
            for host, counters in updated.items():
                if host not in self._forgotten:
                    self._prev[host] = counters
        return news

    # ---- from the decision step ----------------------------------------------------------------
    def check(self, now: float, links: Mapping[FlowKey, tuple[str, ...]]) -> list[QueueCheck]:
        """One comparison over the last window (the decision's ``links`` place the flows); returns the
        checks made. Raises if the switch counters cannot be read (the caller records it). Within
        ``interval_s`` of the previous check nothing is read: the previous checks are returned."""
        if self._checked_at is not None and 0 <= now - self._checked_at < self.interval_s:
            with self._lock:
                return list(self.checks)
        self._checked_at = now
        try:
            ports = self.source.egress_ports()
            arrived = self.source.arrived()
        except Exception as exc:
            with self._lock:
                self.error = f"{type(exc).__name__}: {exc}"
            raise
        with self._lock:
            latest, self._latest = self._latest, {}
            self._forgotten = set()
        pending = self._news(latest)
        flows = [(links[flow], dscp, nbytes) for (flow, dscp), nbytes in pending.items() if flow in links]
        with self._lock:
            self.error = None
            for key, nbytes in expected_bytes(flows, ports, self.level_of_dscp).items():
                self._totals[key] = self._totals.get(key, 0) + nbytes
            self._snaps.append((now, dict(self._totals), arrived))
            while len(self._snaps) > 1 and self._snaps[1][0] <= now - self.window_s:
                self._snaps.popleft()
            base_t, base_totals, base_arrived = self._snaps[0]
            if base_t > now - self.window_s:
                return []  # not a full window yet
            expected = {k: v - base_totals.get(k, 0) for k, v in self._totals.items()}
            counted = {k: v - base_arrived[k] for k, v in arrived.items() if k in base_arrived and v >= base_arrived[k]}
            before = self.alarmed
            self.checks, alarmed = compare(expected, counted, self.tolerance, before)
            for c in self.checks:
                self.judged_at[(c.switch, c.port, c.level)] = now
            alarmed = frozenset(k for k in alarmed if now - self.judged_at.get(k, now) <= self.forget_after_s)
            self._publish(before, alarmed, now)
            return list(self.checks)

    def _publish(self, before: frozenset[QueueKey], alarmed: frozenset[QueueKey], now: float) -> None:
        by_key = {(c.switch, c.port, c.level): c for c in self.checks}
        for key in sorted(alarmed - before):
            self.since[key] = now
            c = by_key.get(key)
            LOG.warning("enforcement mismatch: %s", Mismatch(*key, c.expected if c else 0, c.counted if c else 0,
                                                             now).describe(self.window_s))
        for key in sorted(before - alarmed):
            self.since.pop(key, None)
            LOG.info("enforcement mismatch cleared: switch %s port %s level %s", *key)
        self.alarmed = alarmed
        self.gauge.clear()
        for c in self.checks:
            key = (c.switch, c.port, c.level)
            self.gauge.labels(c.switch, str(c.port), str(c.level)).set(1 if key in alarmed else 0)
        for key in alarmed:
            if key not in by_key:
                self.gauge.labels(key[0], str(key[1]), str(key[2])).set(1)

    def mismatches(self) -> list[Mismatch]:
        with self._lock:
            by_key = {(c.switch, c.port, c.level): c for c in self.checks}
            out = []
            for key in sorted(self.alarmed):
                c = by_key.get(key)
                out.append(Mismatch(*key, c.expected if c else 0, c.counted if c else 0, self.since.get(key, 0.0)))
            return out

    def status(self) -> dict[str, Any]:
        """For `leveller status`: the window, every check of the last comparison, the mismatches."""
        mismatches = self.mismatches()
        with self._lock:
            return {"window_s": self.window_s, "error": self.error,
                    "checks": [{"switch": c.switch, "port": c.port, "level": c.level, "expected_bytes": c.expected,
                                "counted_bytes": c.counted} for c in self.checks],
                    "mismatches": [{"switch": m.switch, "port": m.port, "level": m.level,
                                    "expected_bytes": m.expected, "counted_bytes": m.counted, "since": m.since,
                                    "message": m.describe(self.window_s)} for m in mismatches]}
