"""The controller: accepts reports, every tau decides levels, answers agents and `leveller status`.

``Controller`` implements leveller.rpc.transport.ControllerHandler. Reports
update a FlowTable (flows, jobs and links as integer ids) with their
difference to the host's previous report. A step drops the flows of agents
gone stale, asks the path provider once, in one batch, for the flows it has
never routed (paths are cached per flow), runs controller.decide over numpy
arrays (leveller.core policy + pruning) outside the lock, and keeps the
result; each agent's next report is answered with the levels of its flows, a
lease, and the age of the decision (measured from when the step began); a host
whose flows' levels did not change gets the same reply entries as before. With
``flow_claims`` (the command sets it under mutual TLS, where a report's host is
the one its certificate names) a flow's source address belongs to the live host
that first reported a flow from it: another host's report of such a flow has
that entry refused (no level for it, counted in
leveller_requests_rejected_total{reason="flow_claim"}).
While it serves (leveller.rpc.transport.serve) a step runs its Python pieces on
the thread that answers reports (``use_report_thread``), between reports.
Agents keep levels only until the lease after the decision, so a failed step
(e.g. the SDN app unreachable, levels kept, the error counted and shown in
status) or a step that takes longer than the lease ends the levels on every
host instead of keeping stale ones alive. With an EnforcementMonitor
(``enforcement``), every step also checks that the switch queues took the bytes
the hosts marked for them (leveller.controller.enforcement); a failed check is
shown in status and never fails the step.

Under a policy with ``time_shifts`` (``cassini``) a step also updates the CASSINI
plan (leveller.controller.shifts) and every reply carries the shift orders of the
host's jobs; under every other policy none of that work is done.
"""

from __future__ import annotations

import heapq
import operator
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import repeat
from typing import Any, TypeVar

import numpy as np

from leveller.controller.decide import (
    Decision,
    FlowClasses,
    JobInput,
    JobShape,
    Pruner,
    class_ranks,
    decision_of,
    job_links,
    job_views,
    rank,
    snapshot_classes,
)
from leveller.controller.flowtable import FlowSnapshot, FlowTable, HostFlows
from leveller.controller.gcpacing import GcPacer
from leveller.controller.metrics import ControllerMetrics, Published
from leveller.controller.paths import PathProvider
from leveller.controller.registry import Registry
from leveller.controller.shadow import ShadowCollector, ShadowLedger
from leveller.controller.shifts import ShiftPlanner
from leveller.core.levels import prune
from leveller.core.policies import Policy
from leveller.core.qos import LevelMap
from leveller.core.switching import PAPER, SwitchMemory, SwitchRule, applies_to, forget, switch_order
from leveller.model.flow import FlowKey
from leveller.model.limits import MAX_LEASE_S, MODES
from leveller.model.messages import FlowLevel, JobReport, LevelsReply, Report

MAX_STATUS_FLOWS = 10_000  # flows a Status reply lists (the first by flow key); flows_total counts them all
_FLOW_KEY = operator.itemgetter(0)

T = TypeVar("T")
StepInputs = tuple[list[JobInput], FlowSnapshot, dict[FlowKey, tuple[str, int]], int]  # Controller._step_inputs
Runner = Callable[[Callable[[], T]], T]  # runs a function somewhere and returns its result


def _here(fn: Callable[[], T]) -> T:
    return fn()


class Controller:
    def __init__(self, paths: PathProvider, policy: Policy, level_map: LevelMap, tau_s: float,
                 lease_s: float | None = None, stale_after_s: float | None = None,
                 reprofile_interval_s: float | None = None, metrics: ControllerMetrics | None = None,
                 shapes: Mapping[str, JobShape] | None = None, on_iteration: bool = False,
                 monotonic: Callable[[], float] = time.monotonic, weights: Mapping[str, float] | None = None,
                 rate_window: float | None = None, rate_half_life: float | None = None,
                 drift_tolerance: float | None = None, mode: str = "enforce", gc_pacer: GcPacer | None = None,
                 pruner: Pruner = prune, switching: SwitchRule = PAPER, flow_claims: bool = False) -> None:
        if not tau_s > 0:
            raise ValueError(f"tau must be > 0, got {tau_s!r}")
        self.paths, self.policy, self.level_map, self.tau_s = paths, policy, level_map, tau_s
        self.shapes = dict(shapes or {})
        # on_iteration: also decide as soon as a report shows a finished iteration (the paper's tau = 0)
        self.on_iteration = on_iteration
        self._wake = threading.Event()
        self.lease_s = lease_s if lease_s is not None else 3 * tau_s
        if not 0 < self.lease_s <= MAX_LEASE_S:  # agents refuse every reply with a longer (or infinite) lease
            raise ValueError(f"lease must be in (0, {MAX_LEASE_S:g}] seconds, got {self.lease_s!r}")
        self.registry = Registry(stale_after_s if stale_after_s is not None else 3 * tau_s, reprofile_interval_s,
                                 weights=weights, rate_window=rate_window, rate_half_life=rate_half_life,
                                 drift_tolerance=drift_tolerance)
        self._published: Published | None = None  # read by the metrics when Prometheus scrapes
        self.metrics = metrics or ControllerMetrics(lambda: self._published, level_map.levels, FlowKey.label)
        # flow_claims (mutual TLS: a report's host is the certificate's): a flow's source address belongs to the
        # host that reported it first
        self.flows = FlowTable(claims=flow_claims)
        self.decision: Decision | None = None
        # CASSINI: time shifts instead of priorities; a plan waits until the jobs' flows settled
        self.shift_planner = ShiftPlanner(settle_s=max(0.5, 2 * tau_s)) \
            if getattr(policy, "time_shifts", False) else None
        self.monotonic = monotonic  # decision ages (immune to wall-clock steps)
        self._decided_at = 0.0  # self.monotonic() when the current decision's step began
        self.epoch = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._stepping = threading.Lock()  # one step at a time (run loop, benchmarks, tests)
        self._decided = threading.Condition(self._lock)  # notified on every new decision (push path)
        self._listeners: list[Callable[[], None]] = []  # told of every new decision (push path on an event loop)
        self.enforcement: Any = None  # an EnforcementMonitor, set by the caller (needs the SDN app)
        self.last_jobs: list[Any] = []  # the JobInputs of the latest decision
        # shadow mode: decide and report, the agents mark nothing; bytes per would-be level are counted
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.shadow = ShadowLedger() if mode == "shadow" else None
        self.gc_pacer = gc_pacer  # the controller process's garbage collection, run between steps
        # core.levels.prune, or a PruneWorker (controller.prune_worker), whose offloads(pairs) says when it
        # prunes in its process: the step then waits for it in its own thread, not on the report thread
        self.pruner = pruner
        self._classes: tuple[int, FlowClasses] | None = None  # (flow table version, its classes)
        self._snapshot: FlowSnapshot | None = None  # the last step's, kept while the table's version stays
        self._run: Runner[Any] = _here  # where a step's Python pieces run (use_report_thread)
        # hysteresis and dwell of the order (leveller.core.switching), for a policy that orders by R only
        self.switching = switching if applies_to(policy) else PAPER
        self._switch_memory = SwitchMemory()  # touched by steps only (one at a time)
        self.metrics.registry.register(ShadowCollector(lambda: self.shadow))

    # ---- RPC handler ---------------------------------------------------------------------------
    def report(self, report: Report, now: float) -> LevelsReply:
        with self._lock:
            self._expire(now)
            before = self.registry.agents.get(report.host)
            self.registry.accept(report, now)
            held = self.flows.update_host(report.host, report.flows)
            if self.flows.refused:  # flows from another live host's address: not this host's to claim
                self.metrics.rejected.labels("flow_claim").inc(len(self.flows.refused))
            if self.enforcement is not None:
                self.enforcement.observe(report)
            self.metrics.reports.inc(report.host)
            if self.shadow is not None:
                self.shadow.observe(before.report if before else None, report,
                                    self.decision.levels if self.decision else {})
            if self.on_iteration and _progressed(before.report if before else None, report):
                self._wake.set()
            return self._reply(held, report.jobs)

    def _reply(self, held: HostFlows, host_jobs: Sequence[JobReport] = ()) -> LevelsReply:
        """The levels of a host's flows in the current decision (flows it does not cover are left out);
        under CASSINI also the shift orders of the host's jobs ``host_jobs``.
        The entries of the host's previous reply are reused when its flows' levels did not change, so
        steady levels cost a few array operations per report (and the encoder can reuse its bytes)."""
        d = self.decision
        flows: tuple[FlowLevel, ...] = ()
        if d is not None and d.flows is not None and d.level_by_id is not None and held.keys:
            by_id = d.level_by_id
            if d.flows.generation == self.flows.generation:
                idx = held.ids
            else:  # the table was compacted after this decision: its ids are the decision's own
                idx = np.fromiter(map(d.flows.ids.get, held.keys, repeat(-1)), dtype=np.int64, count=len(held.keys))
            # ids past the decision's (flows new since) and -1 read its last entry: -1, not decided
            levels = by_id[np.minimum(idx, len(by_id) - 1)]
            same = levels.tobytes()
            last = held.last_reply
            if last is not None and last[0] == same:
                flows = last[1]
            else:
                pick = np.flatnonzero(levels >= 0)
                keys, jobs = held.keys, held.jobs
                if len(pick) < len(keys):
                    keys, jobs = [keys[i] for i in pick.tolist()], [jobs[i] for i in pick.tolist()]
                # tuple.__new__ builds the FlowLevel named tuples without a Python frame per flow
                flows = tuple(map(tuple.__new__, repeat(FlowLevel), zip(keys, jobs, levels[pick].tolist())))
                held.last_reply = (same, flows)
        shifts = () if self.shift_planner is None else \
            self.shift_planner.replies([j.job for j in host_jobs], self.monotonic())
        return LevelsReply(self.epoch, self.lease_s, self.level_map.dscp, flows, self.decision_age(), shifts,
                           self.mode)

    def decision_age(self) -> float:
        """Seconds since the current decision's step began (0 before the first decision)."""
        return max(0.0, self.monotonic() - self._decided_at) if self.decision is not None else 0.0

    def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> LevelsReply | None:
        """Push path (leveller.rpc.push): once the epoch differs from ``seen_epoch`` (or after
        ``timeout_s``), the levels of the flows in ``host``'s last report; None if it never reported."""
        with self._decided:
            self._decided.wait_for(lambda: self.epoch != seen_epoch, timeout_s)
            return self._levels_for(host)

    def levels_for(self, host: str) -> LevelsReply | None:
        """The levels of the flows in ``host``'s last report now (None if it never reported): the push
        path's reply once ``on_decision`` told it of a new decision, without a thread waiting."""
        with self._lock:
            return self._levels_for(host)

    def on_decision(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every new decision, from the deciding thread: it must only hand the news
        on (leveller.rpc.push wakes its waiting Watch calls on the server's event loop)."""
        self._listeners.append(listener)

    def _levels_for(self, host: str) -> LevelsReply | None:
        agent = self.registry.agents.get(host)
        if agent is None:
            return None
        held = self.flows.host(host)
        return LevelsReply(self.epoch, self.lease_s, self.level_map.dscp, (), self.decision_age(), (), self.mode) \
            if held is None else self._reply(held, agent.report.jobs)

    def _expire(self, now: float) -> None:
        """Forget stale agents and jobs (Registry.expire) and their per-host metrics; lock held."""
        for host in self.registry.expire(now):
            self.metrics.reports.remove(host)
            if self.enforcement is not None:
                self.enforcement.forget(host)

    def status(self, now: float, flows_limit: int = MAX_STATUS_FLOWS) -> dict[str, Any]:
        """What `leveller status` shows. The lock is held only to take the live agents' reports, the jobs
        and the decision (all immutable once taken), never over the flows: a status of 100,000 flows does
        not hold up the reports. ``flows`` lists the first ``flows_limit`` flows by flow key;
        ``flows_total`` counts every flow entry of the live agents' reports (a reply of every flow could
        exceed any message bound)."""
        with self._lock:
            self._expire(now)
            d = self.decision
            jobs = self.registry.job_inputs(now)
            agents = self.registry.live(now)
            out = {
                "now": now, "epoch": self.epoch, "policy": self.policy.name, "levels": self.level_map.levels,
                "tau_s": self.tau_s, "lease_s": self.lease_s, "last_error": self.last_error, "mode": self.mode,
                "shadow_bytes": self.shadow.by_job() if self.shadow is not None else None,
                "rate": {"window_s": self.registry.rate_window, "half_life_s": self.registry.rate_half_life},
                "decision_age_s": self.decision_age() if d else None,
                "enforcement": self.enforcement.status() if self.enforcement is not None else None,
                "order": d.order if d else None,
                "jobs": [{"job": j.name, "iterations": j.iterations, "start_time": j.start_time,
                          "ideal_time": j.ideal_time, "profiling": j.profiling, "weight": j.weight,
                          "rate": d.rates.get(j.name) if d else None} for j in jobs],
                "agents": [{"host": a.report.host, "age_s": now - a.received_at, "jobs": len(a.report.jobs),
                            "flows": len(a.report.flows)} for a in agents],
            }
        # outside the lock: reports and decisions are never changed once made
        entries = ((f.key, f.job, a.report.host, f.bytes) for a in agents for f in a.report.flows)
        first = heapq.nsmallest(flows_limit + 1, entries, key=_FLOW_KEY)  # as sorted(...)[:n]: stable
        picked: dict[FlowKey, tuple[str, str, int]] = {}
        for key, job, host, nbytes in first:  # a flow two hosts report: the later host's entry (as before)
            picked[key] = (job, host, nbytes)
        total = sum(len(a.report.flows) for a in agents)
        listed = [{"flow": k.label(), "job": job, "host": host, "bytes": nbytes,
                   "level": d.levels.get(k) if d else None, "links": list(d.links.get(k, ())) if d else []}
                  for k, (job, host, nbytes) in list(picked.items())[:flows_limit]]
        out.update(flows=listed, flows_total=total, flows_truncated=total > len(listed))
        return out

    def reject(self, reason: str) -> None:
        """Count a request refused by the RPC layer (bad signature, bad schema)."""
        self.metrics.rejected.labels(reason).inc()

    # ---- decision step ---------------------------------------------------------------------------
    def step(self, now: float) -> Decision:
        """One tau: profile bookkeeping, paths, decide, publish. Raises on failure (levels kept)."""
        try:
            with self._stepping:
                return self._step(now)
        finally:
            if self.gc_pacer is not None:
                self.gc_pacer.after_step()

    def use_report_thread(self, run: Runner | None) -> None:
        """Run the Python pieces of every step through ``run`` (None: in the step's own thread).
        leveller.rpc.transport.serve passes its event loop's ``LoopServer.call``, the thread that answers
        reports: one thread then holds the interpreter, and reports wait at most one piece (a few ms at
        100,000 flows) instead of trading the interpreter lock with the step at every numpy call, which
        stretched a 25 ms step to 130-170 ms and the reports that came meanwhile. Waiting (paths from the
        SDN app, the pruning worker) and the policy's order (any policy's code: one that hangs must not
        stop the answers, whose decision then ages past the lease) stay in the step's thread."""
        self._run = run or _here

    def _step(self, now: float) -> Decision:
        started = time.perf_counter()
        inputs_at = self.monotonic()
        run = self._run
        try:
            unrouted, inputs = run(partial(self._begin_step, now))
            if inputs is None:
                links = self.paths.links(unrouted)  # new flows only, in one batch
                inputs = run(partial(self._step_inputs, now, unrouted, links))
            jobs, snapshot, counted, agents = inputs
            order, rates = rank(jobs, self.policy, now, self.shapes)  # here: a policy's code may take long
            if not self.switching.is_paper:
                memory = forget(self._switch_memory, {j.name for j in jobs}, now, self.switching)
                order, self._switch_memory = switch_order(order, job_views(jobs, rates, self.shapes), memory, now,
                                                          self.switching)
            c, ranks = run(partial(self._class_ranks, snapshot, order))
            if ranks is None:
                class_levels = np.zeros(len(c.job), dtype=np.int8)
            else:
                prune_classes = partial(self.pruner, ranks, c.inc_class, c.inc_link, len(snapshot.link_names),
                                        self.level_map.levels)
                offloads = getattr(self.pruner, "offloads", None)  # a PruneWorker: wait for it here
                class_levels = prune_classes() if offloads is not None and offloads(len(c.inc_class)) \
                    else run(prune_classes)
            decision = run(partial(self._publish, now, inputs_at, jobs, snapshot, order, rates,
                                   class_levels, c.cls, counted, agents))
        except Exception as exc:
            with self._lock:
                self.last_error = f"step at {now:.3f}: {type(exc).__name__}: {exc}"
            self.metrics.step_errors.inc()
            raise
        for listener in self._listeners:
            listener()
        self.metrics.decisions.inc()
        self.metrics.step_seconds.observe(time.perf_counter() - started)
        if self.enforcement is not None:
            try:
                self.enforcement.check(now, decision.links)
            except Exception:  # shown in status (enforcement.error); the decision stands
                pass
        return decision

    def _begin_step(self, now: float) -> tuple[list[FlowKey], StepInputs | None]:
        """A step's first piece: forget stale agents and their flows; the live flows never routed, and
        when there is none the step's inputs (``_step_inputs``) at once, in the same piece."""
        with self._lock:
            self._expire(now)
            live_hosts = set(self.registry.view(now).hosts)
            for host in self.flows.hosts():
                if host not in live_hosts:
                    self.flows.drop_host(host)
            self.flows.compact()
            unrouted = self.flows.unrouted(self.flows.live())
        return unrouted, None if unrouted else self._step_inputs(now, [], {})

    def _step_inputs(self, now: float, unrouted: list[FlowKey], links: Mapping[FlowKey, Any]) -> StepInputs:
        """The paths found stored; the jobs, the routed live flows (later arrivals: next step), under
        CASSINI each flow's job and bytes, and the number of live agents."""
        with self._lock:
            if unrouted:
                self.flows.set_links([(f, links.get(f)) for f in unrouted])
            snapshot = self._snapshot
            if snapshot is None or snapshot.version != self.flows.version:  # the flows changed
                ids = self.flows.live()
                snapshot = self._snapshot = self.flows.snapshot(ids[self.flows.routed[ids]])
            routed = snapshot
            self.registry.update_profiling(now, lambda: job_links(routed))
            self.registry.sample(now)
            jobs = self.registry.job_inputs(now)
            counted = {k: (job, nbytes) for k, (job, _, nbytes) in self.registry.flows(now).items()} \
                if self.shift_planner is not None else {}
            agents = len(self.registry.view(now).hosts)
        return jobs, snapshot, counted, agents

    def _class_ranks(self, snapshot: FlowSnapshot, order: list[str] | None
                     ) -> tuple[FlowClasses, np.ndarray | None]:
        """The flow classes (kept while the flow table's version stays) and every class's rank in
        ``order`` (None without an order)."""
        if self._classes is None or self._classes[0] != snapshot.version:
            self._classes = (snapshot.version, snapshot_classes(snapshot))  # the flows changed
        classes = self._classes[1]
        return classes, None if order is None else class_ranks(order, snapshot, classes)

    def _publish(self, now: float, inputs_at: float, jobs: list[JobInput], snapshot: FlowSnapshot,
                 order: list[str] | None, rates: dict[str, float | None], class_levels: np.ndarray,
                 cls: np.ndarray, counted: dict[FlowKey, tuple[str, int]], agents: int) -> Decision:
        """A step's last piece: the decision (row r of ``snapshot`` at the level of its class ``cls[r]``),
        the CASSINI plan, and the decision made the current one."""
        decision = decision_of(order, rates, snapshot, class_levels[cls])
        if self.shift_planner is not None:
            self.shift_planner.update(jobs, self.shapes, counted, decision.links, inputs_at)
        with self._lock:
            self.registry.note_order(decision.order, now)
            self.last_jobs = jobs
            self.decision = decision
            self._decided_at = inputs_at
            self.epoch += 1
            self.last_error = None
            self._published = Published(jobs, decision, agents)
            self._decided.notify_all()
        return decision

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
