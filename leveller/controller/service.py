"""The controller: accepts reports, every tau decides levels, answers agents and `leveller status`.

``Controller`` implements leveller.rpc.transport.ControllerHandler. A step
reads the live agents' reports, asks the path provider for every flow's
links, runs controller.decide (leveller.core policy + pruning), and keeps the
result; each agent's next report is answered with the levels of its flows, a
lease, and the age of the decision (measured from when the step read its
inputs). Agents keep levels only until the lease after the decision, so a
failed step (e.g. the SDN app unreachable, levels kept, the error counted and
shown in status) or a step that takes longer than the lease ends the levels
on every host instead of keeping stale ones alive.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from leveller.controller.decide import Decision, JobShape, decide
from leveller.controller.metrics import ControllerMetrics
from leveller.controller.paths import PathProvider
from leveller.controller.registry import Registry
from leveller.core.policies import Policy
from leveller.core.qos import LevelMap
from leveller.rpc.schema import FlowLevel, LevelsReply, Report, flow_label


class Controller:
    def __init__(self, paths: PathProvider, policy: Policy, level_map: LevelMap, tau_s: float,
                 lease_s: float | None = None, stale_after_s: float | None = None,
                 reprofile_interval_s: float | None = None, metrics: ControllerMetrics | None = None,
                 shapes: Mapping[str, JobShape] | None = None, on_iteration: bool = False,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not tau_s > 0:
            raise ValueError(f"tau must be > 0, got {tau_s!r}")
        self.paths, self.policy, self.level_map, self.tau_s = paths, policy, level_map, tau_s
        self.shapes = dict(shapes or {})
        # on_iteration: also decide as soon as a report shows a finished iteration (the paper's tau = 0)
        self.on_iteration = on_iteration
        self._wake = threading.Event()
        self.lease_s = lease_s if lease_s is not None else 3 * tau_s
        self.registry = Registry(stale_after_s if stale_after_s is not None else 3 * tau_s, reprofile_interval_s)
        self.metrics = metrics or ControllerMetrics()
        self.decision: Decision | None = None
        self.monotonic = monotonic  # decision ages (immune to wall-clock steps)
        self._decided_at = 0.0  # self.monotonic() when the current decision's step read its inputs
        self.epoch = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._decided = threading.Condition(self._lock)  # notified on every new decision (push path)

    # ---- RPC handler ---------------------------------------------------------------------------
    def report(self, report: Report, now: float) -> LevelsReply:
        with self._lock:
            self._expire(now)
            before = self.registry.agents.get(report.host)
            self.registry.accept(report, now)
            self.metrics.reports.labels(report.host).inc()
            if self.on_iteration and _progressed(before.report if before else None, report):
                self._wake.set()
            return self._reply(report)

    def _reply(self, report: Report) -> LevelsReply:
        levels = self.decision.levels if self.decision else {}
        flows = tuple(FlowLevel(f.key, f.job, levels[f.key]) for f in report.flows if f.key in levels)
        return LevelsReply(self.epoch, self.lease_s, self.level_map.dscp, flows, self.decision_age())

    def decision_age(self) -> float:
        """Seconds since the current decision's step read its inputs (0 before the first decision)."""
        return max(0.0, self.monotonic() - self._decided_at) if self.decision is not None else 0.0

    def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> LevelsReply | None:
        """Push path (leveller.rpc.push): once the epoch differs from ``seen_epoch`` (or after
        ``timeout_s``), the levels of the flows in ``host``'s last report; None if it never reported."""
        with self._decided:
            self._decided.wait_for(lambda: self.epoch != seen_epoch, timeout_s)
            agent = self.registry.agents.get(host)
            return None if agent is None else self._reply(agent.report)

    def _expire(self, now: float) -> None:
        """Forget stale agents and jobs (Registry.expire) and their per-host metrics; lock held."""
        for host in self.registry.expire(now):
            self.metrics.reports.remove(host)

    def status(self, now: float) -> dict[str, Any]:
        with self._lock:
            self._expire(now)
            d = self.decision
            jobs = self.registry.job_inputs(now)
            flows = self.registry.flows(now)
            return {
                "now": now, "epoch": self.epoch, "policy": self.policy.name, "levels": self.level_map.levels,
                "tau_s": self.tau_s, "lease_s": self.lease_s, "last_error": self.last_error,
                "decision_age_s": self.decision_age() if d else None,
                "order": d.order if d else None,
                "jobs": [{"job": j.name, "iterations": j.iterations, "start_time": j.start_time,
                          "ideal_time": j.ideal_time, "profiling": j.profiling,
                          "rate": d.rates.get(j.name) if d else None} for j in jobs],
                "agents": [{"host": a.report.host, "age_s": now - a.received_at, "jobs": len(a.report.jobs),
                            "flows": len(a.report.flows)} for a in self.registry.live(now)],
                "flows": [{"flow": flow_label(k), "job": job, "host": host, "bytes": nbytes,
                           "level": d.levels.get(k) if d else None,
                           "links": list(d.links.get(k, ())) if d else []}
                          for k, (job, host, nbytes) in sorted(flows.items())],
            }

    def reject(self, reason: str) -> None:
        """Count a request refused by the RPC layer (bad signature, bad schema)."""
        self.metrics.rejected.labels(reason).inc()

    # ---- decision step ---------------------------------------------------------------------------
    def step(self, now: float) -> Decision:
        """One tau: profile bookkeeping, paths, decide, publish. Raises on failure (levels kept)."""
        started = time.perf_counter()
        inputs_at = self.monotonic()
        with self._lock:
            self._expire(now)
            self.registry.update_profiling(now)
            jobs = self.registry.job_inputs(now)
            flows = {k: job for k, (job, _, _) in self.registry.flows(now).items()}
        try:
            links = self.paths.links(sorted(flows))
            decision = decide(jobs, flows, links, self.policy, self.level_map.levels, now, self.shapes)
        except Exception as exc:
            with self._lock:
                self.last_error = f"step at {now:.3f}: {type(exc).__name__}: {exc}"
            self.metrics.step_errors.inc()
            raise
        with self._lock:
            self.decision = decision
            self._decided_at = inputs_at
            self.epoch += 1
            self.last_error = None
            self._publish(jobs, flows, decision, now)
            self._decided.notify_all()
        self.metrics.decisions.inc()
        self.metrics.step_seconds.observe(time.perf_counter() - started)
        return decision

    def _publish(self, jobs: list[Any], flows: dict[Any, str], decision: Decision, now: float) -> None:
        m = self.metrics
        m.reset_jobs_and_flows()
        for j in jobs:
            m.job_iterations.labels(j.name).set(j.iterations)
            m.job_profiling.labels(j.name).set(1 if j.profiling else 0)
            if j.ideal_time is not None:
                m.job_ideal.labels(j.name).set(j.ideal_time)
            rate = decision.rates.get(j.name)
            if rate is not None:
                m.job_rate.labels(j.name).set(rate)
        for key, level in decision.levels.items():
            m.flow_level.labels(flow_label(key), flows[key]).set(level)
        m.agents_live.set(len(self.registry.live(now)))

    def run(self, stop: threading.Event, clock: Callable[[], float] = time.time,
            on_step: Callable[[Decision | None, str | None], None] | None = None) -> None:
        """Step every tau until ``stop``; a failed step is reported to ``on_step`` and retried next tau."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                decision, error = self.step(clock()), None
            except Exception as exc:  # kept in last_error / metrics; the loop must survive
                decision, error = None, f"{type(exc).__name__}: {exc}"
            if on_step:
                on_step(decision, error)
            if self.on_iteration:
                self._wake.wait(max(0.0, self.tau_s - (time.monotonic() - started)))
                self._wake.clear()
            else:
                stop.wait(max(0.0, self.tau_s - (time.monotonic() - started)))


def _progressed(before: Report | None, after: Report) -> bool:
    """True if ``after`` shows a job with more iterations (or a new job) than ``before``."""
    seen = {j.job: j.iterations for j in before.jobs} if before else {}
    return any(j.iterations > seen.get(j.job, -1) for j in after.jobs)
