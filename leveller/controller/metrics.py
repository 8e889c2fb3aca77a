"""Prometheus metrics of the controller, in its own registry (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ControllerMetrics:
    """Gauges rewritten every step (jobs and flows that left disappear); counters for events."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.job_rate = Gauge("leveller_job_rate", "normalized progress rate R of a job", ["job"], registry=r)
        self.job_iterations = Gauge("leveller_job_iterations", "iterations done", ["job"], registry=r)
        self.job_ideal = Gauge("leveller_job_ideal_seconds", "ideal iteration time", ["job"], registry=r)
        self.job_profiling = Gauge("leveller_job_profiling", "1 while the ideal time is measured", ["job"],
                                   registry=r)
        self.flow_level = Gauge("leveller_flow_level", "priority level of a flow (K-1 highest)",
                                ["flow", "job"], registry=r)
        self.agents_live = Gauge("leveller_agents_live", "agents that reported recently", registry=r)
        self.reports = Counter("leveller_reports", "reports accepted", ["host"], registry=r)
        self.rejected = Counter("leveller_requests_rejected", "requests refused", ["reason"], registry=r)
        self.decisions = Counter("leveller_decisions", "decision steps done", registry=r)
        self.step_errors = Counter("leveller_step_errors", "decision steps that failed", registry=r)
        self.step_seconds = Histogram("leveller_step_seconds", "time of one decision step", registry=r,
                                      buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3))

    def reset_jobs_and_flows(self) -> None:
        for g in (self.job_rate, self.job_iterations, self.job_ideal, self.job_profiling, self.flow_level):
            g.clear()
