"""Prometheus metrics of the host agent, in its own registry (no global state), and the
rate-limited log of what the agent skipped (bad log lines, jobs left out of a report)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

LOG = logging.getLogger("leveller.agent")
LOG_EVERY_S = 10.0  # per field: the first rejection is logged at once, then one summary per interval


class AgentMetrics:
    """Counters for reports, lease expiries, failovers, demotions, skipped input and RDMA shims left alone; the
    lease left, the active controller and the shims left alone now as gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reports = PromCounter("leveller_agent_reports", "reports sent, by outcome (ok, failed, stale: "
                                   "answered with a decision older than the lease)", ["outcome"], registry=r)
        self.rejected = PromCounter("leveller_agent_rejected", "what the agent refused or skipped, by field (job, "
                                    "iter, t, jobs, line, flows, log: lines or jobs the controller would refuse, "
                                    "reason \"invalid\"; registration: a client of the registration socket, by "
                                    "reason: silent, garbage, rate, connections, jobs, registrations, name_taken, "
                                    "foreign_cgroup, root_cgroup, cgroup_taken, log, flood)", ["field", "reason"],
                                    registry=r)
        self.jobs_ended = PromCounter("leveller_agent_jobs_ended", "registered or discovered jobs (one per rank "
                                      "registration) that left, by why (empty: their cgroup has no process left; "
                                      "lease; end: they said so; closed: their connection closed; gone: their "
                                      "scheduler no longer runs them)", ["why"], registry=r)
        self.registered = Gauge("leveller_agent_registered_jobs", "registrations in the agent's job table",
                                registry=r)
        self.lease_expiries = PromCounter("leveller_agent_lease_expiries", "times every mark was removed because "
                                          "no fresh decision arrived within the lease", registry=r)
        self.controller = Gauge("leveller_agent_controller", "1 for the controller the agent reports to (its "
                                "address), 0 for one it left", ["address"], registry=r)
        self.failovers = PromCounter("leveller_agent_failovers", "moves to another controller after the active one "
                                     "failed to answer", registry=r)
        self.demotions = PromCounter("leveller_agent_demotions", "flows moved to a lower level with phase-aligned "
                                     "demotion, by outcome (immediate: the flow was idle; deferred: it started "
                                     "waiting for its phase to end; phase_end / deadline: a waiting one applied "
                                     "because the phase ended / its wait ran out)", ["outcome"], registry=r)
        self.fence_resets = PromCounter("leveller_agent_fence_resets", "times the agent followed a lower leader "
                                        "epoch decided well after the newest it had seen: etcd restored or "
                                        "replaced (leveller.agent.fencing)", registry=r)
        self.lease_left = Gauge("leveller_agent_lease_seconds_left", "seconds the current marks stay valid "
                                "(0: none)", registry=r)
        self.datapath_loader = Gauge("leveller_agent_datapath_loader", "1 for the loader that put the eBPF "
                                     "program into the kernel (libbpf: the CO-RE object; bcc: compiled at start)",
                                     ["loader"], registry=r)
        self.loader: str | None = None  # the same, for the --json lines (None: no eBPF datapath)
        self.shim_backoffs = PromCounter("leveller_agent_shim_backoffs", "times an RDMA shim was left alone after "
                                         "an exchange failed (no answer in time, an invalid answer, refused), by "
                                         "exchange (list, lease, set_tc, clear)", ["op"], registry=r)
        self.shims_left_alone = Gauge("leveller_agent_shims_left_alone", "RDMA shims left alone now after a "
                                      "failure (their own lease ends the classes the agent gave)", registry=r)

    def set_loader(self, loader: str | None) -> None:
        """Record which loader loaded the eBPF datapath."""
        self.loader = loader
        if loader is not None:
            self.datapath_loader.labels(loader).set(1)


class Rejections:
    """Counts what was skipped by field and logs it without flooding: the first time a field is seen at
    once, then at most once per ``every_s`` with the number skipped meanwhile."""

    def __init__(self, metrics: AgentMetrics | None = None, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, log: logging.Logger = LOG) -> None:
        self.metrics, self.every_s, self.clock, self.log = metrics, every_s, clock, log
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()  # by reason, for what has one (registrations)
        self._logged_at: dict[str, float] = {}
        self._since_log: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __call__(self, field: str, message: str, count: int = 1, reason: str = "invalid") -> None:
        self.counts[field] += count
        if reason != "invalid":
            self.reasons[reason] += count
        self._since_log[field] += count
        if self.metrics is not None:
            self.metrics.rejected.labels(field, reason).inc(count)
        now = self.clock()
        last = self._logged_at.get(field)
        if last is None or now - last >= self.every_s:
            n = self._since_log.pop(field)
            more = f" ({n} skipped for '{field}' in the last {now - last:.0f} s)" if last is not None else ""
            self.log.warning("skipped: %s%s", message, more)
            self._logged_at[field] = now
