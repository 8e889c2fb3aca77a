"""Prometheus metrics of the controller, in its own registry (no global state).

Counters and the step-time histogram are updated as events happen (reports per
host in a plain dict, exposed at scrape time: 1,000 reports a second). Everything
that describes the latest decision (R, iterations and levels per job and flow)
is computed when Prometheus scrapes, from the decision the controller last
published: a decision step, on its way to the agents, does no metrics work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

MAX_FLOW_SERIES = 1000  # leveller_flow_level per flow up to this many flows; leveller_flows always
MAX_HOST_SERIES = 1000  # leveller_reports_total{host}: hosts beyond this many share one series
OTHER_HOSTS = "(other)"  # the host label of that series (never a host name: NAME_PATTERN has no parentheses)


@dataclass(frozen=True)
class Published:
    """What the last decision step left for the metrics: the jobs it ranked, the decision, live agents."""

    jobs: Sequence[Any]  # controller.decide.JobInput
    decision: Any  # controller.decide.Decision
    agents_live: int


class DecisionCollector:
    """Gauges of the last published decision, built at scrape time."""

    def __init__(self, source: Callable[[], Published | None], levels: int,
                 label: Callable[[Any], str]) -> None:
        self.source, self.levels, self.label = source, levels, label

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families vary with the decision: collected on each scrape only

    def collect(self) -> Iterator[Metric]:
        p = self.source()
        rate = GaugeMetricFamily("leveller_job_rate", "normalized progress rate R of a job", labels=["job"])
        iters = GaugeMetricFamily("leveller_job_iterations", "iterations done", labels=["job"])
        ideal = GaugeMetricFamily("leveller_job_ideal_seconds", "ideal iteration time", labels=["job"])
        profiling = GaugeMetricFamily("leveller_job_profiling", "1 while the ideal time is measured",
                                      labels=["job"])
        flow_level = GaugeMetricFamily("leveller_flow_level", "priority level of a flow (K-1 highest)",
                                       labels=["flow", "job"])
        at_level = GaugeMetricFamily("leveller_flows", "flows of a job at a priority level", labels=["job", "level"])
        live = GaugeMetricFamily("leveller_agents_live", "agents that reported recently")
        if p is not None:
            for j in p.jobs:
                iters.add_metric([j.name], j.iterations)
                profiling.add_metric([j.name], 1 if j.profiling else 0)
                if j.ideal_time is not None:
                    ideal.add_metric([j.name], j.ideal_time)
                r = p.decision.rates.get(j.name)
                if r is not None:
                    rate.add_metric([j.name], r)
            flows, levels, k = p.decision.flows, p.decision.level_array, self.levels
            if flows is not None and levels is not None and len(flows):
                counts = np.bincount(flows.job.astype(np.int64) * k + levels, minlength=len(flows.job_names) * k)
                for pair in np.flatnonzero(counts).tolist():
                    at_level.add_metric([flows.job_names[pair // k], str(pair % k)], int(counts[pair]))
                if len(flows) <= MAX_FLOW_SERIES:  # one series per flow only where that stays readable
                    for i, job, level in zip(flows.flow_ids.tolist(), flows.job.tolist(), levels.tolist()):
                        flow_level.add_metric([self.label(flows.keys[i]), flows.job_names[job]], level)
            live.add_metric([], p.agents_live)
        yield from (rate, iters, ideal, profiling, flow_level, at_level, live)


class ReportCounter:
    """``leveller_reports_total`` per host: a report costs one dict update (no labelled child and its lock),
    the family is built when Prometheus scrapes. The controller calls it under its own lock.

    At most ``max_hosts`` hosts have a series of their own; reports of further hosts count in the one
    series ``host="(other)"``: a client holding the secret that reports under thousands of invented host
    names must not make thousands of series (Prometheus's memory and every scrape grow with them)."""

    def __init__(self, max_hosts: int = MAX_HOST_SERIES) -> None:
        self.counts: dict[str, int] = {}
        self.max_hosts = max_hosts
        self._others: set[str] = set()  # the live hosts counted in OTHER_HOSTS (no more than the registry's)

    def inc(self, host: str) -> None:
        counts, others = self.counts, self._others
        if host not in counts:
            if len(counts) - bool(others) >= self.max_hosts:  # no series free: the shared one
                others.add(host)
                host = OTHER_HOSTS
            elif host in others:  # a series is free again (hosts went stale): its own from now on
                self.remove(host)
        counts[host] = counts.get(host, 0) + 1

    def remove(self, host: str) -> None:
        """Forget a host's series (it went stale); the shared one goes with the last host counted in it."""
        if host in self._others:
            self._others.discard(host)
            if not self._others:
                self.counts.pop(OTHER_HOSTS, None)
        else:
            self.counts.pop(host, None)

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("leveller_reports", "reports accepted", labels=["host"])
        for host, n in sorted(self.counts.items()):  # a copy taken at once (C level, under the interpreter lock)
            family.add_metric([host], n)
        yield family


class ControllerMetrics:
    """Counters for events; the decision's gauges come from ``published`` (see DecisionCollector)."""

    def __init__(self, published: Callable[[], Published | None] | None = None, levels: int = 8,
                 label: Callable[[Any], str] = str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reports = ReportCounter()
        r.register(self.reports)
        self.rejected = Counter("leveller_requests_rejected", "requests refused", ["reason"], registry=r)
        self.decisions = Counter("leveller_decisions", "decision steps done", registry=r)
        self.step_errors = Counter("leveller_step_errors", "decision steps that failed", registry=r)
        self.step_seconds = Histogram("leveller_step_seconds", "time of one decision step", registry=r,
                                      buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3))
        # the families exist (empty) before the first decision, so dashboards find every name
        r.register(DecisionCollector(published or (lambda: None), levels, label))
