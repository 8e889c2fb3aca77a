"""Shadow mode's ledger: how many bytes each job sent on each level it would have had.

In shadow mode (`leveller controller --mode shadow`) the controller decides as usual, but
agents mark nothing. To compare its decisions with what the network does, every report's
flow counters (eBPF, cumulative per flow) are turned into byte deltas since the host's
previous report and added to (job, level of the flow in the current decision). Flows the
current decision does not cover (new since the last step) go to level None.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from leveller.model.flow import FlowKey
from leveller.model.messages import Report


class ShadowLedger:
    """(job, would-be level) -> bytes, from successive reports of each host; thread-safe."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, int | None], int] = {}
        self._lock = threading.Lock()

    def observe(self, before: Report | None, report: Report, levels: Mapping[FlowKey, int]) -> None:
        """Add ``report``'s bytes since ``before`` (the host's previous report) per job and level
        (``levels``: the current decision). A counter that went down (flow re-created, datapath
        restarted) counts from zero; a host's first report counts nothing (its bytes predate us)."""
        if before is None:
            return
        prev = {(f.key, f.job): f.bytes for f in before.flows}
        with self._lock:
            for f in report.flows:
                last = prev.get((f.key, f.job))
                sent = f.bytes if last is None or f.bytes < last else f.bytes - last
                if sent:
                    slot = (f.job, levels.get(f.key))
                    self.bytes[slot] = self.bytes.get(slot, 0) + sent

    def by_job(self) -> dict[str, dict[str, int]]:
        """job -> level ("none" for undecided flows) -> bytes, for `leveller status`."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            items = sorted(self.bytes.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]))
        for (job, level), n in items:
            out.setdefault(job, {})["none" if level is None else str(level)] = n
        return out


class ShadowCollector:
    """``leveller_shadow_mode`` (1 in shadow mode) and ``leveller_shadow_bytes_total{job,level}`` at scrape
    time (no samples while ``source()`` is None: enforce mode)."""

    def __init__(self, source: Callable[[], ShadowLedger | None]) -> None:
        self.source = source

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily("leveller_shadow_bytes", "bytes a job sent on each level it would have "
                                     "had (shadow mode: nothing is marked)", labels=["job", "level"])
        ledger = self.source()
        yield GaugeMetricFamily("leveller_shadow_mode", "1 in shadow mode (levels computed, not applied)",
                                value=0 if ledger is None else 1)
        if ledger is not None:
            for job, levels in ledger.by_job().items():
                for level, n in levels.items():
                    family.add_metric([job, level], n)
        yield family
