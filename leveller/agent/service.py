"""The host agent: every interval, report progress and flows, apply the levels, honour the lease.

One :meth:`Agent.step` = poll the job logs, read the flow counters, send a
report, and apply the reply's levels (flow -> DSCP) through the enforcer.

The lease is on the *decision*, not on the reply: levels stay valid until
``lease_s`` after the controller made the decision behind them (the reply says
how old it is: ``decision_age_s``). A reply with a decision older than that
(the controller answers but its decision loop stalls) clears every rewrite,
like no reply at all. The enforcer is given the same deadline, and the
datapath itself enforces it (the BPF program compares it with the kernel
clock, the RDMA shim runs its own timer), so marks end on time even if this
process is killed.

Two local extras: with ``overlap`` (leveller.agent.overlap) the agent demotes a job's
flows to the lowest level while the job's announced communication can wait, and
restores the controller's level after (within the same lease: a demotion never
extends it); with ``shift_files`` (leveller.agent.shifts) the CASSINI shift orders of
a reply go to the jobs; with ``demotion`` (leveller.agent.demotion) a flow's demotion waits until
its communication phase has ended (its byte counter stopped growing, or its job logged an iteration
end), at most the demotion's wait bound and never past the lease of the level it keeps, while a
promotion applies at once: a TCP flow demoted mid-transfer would lose its ACK clock and stall on a
retransmission timeout; with ``rto_routes`` (leveller.agent.rto_min) the routes toward the job
peers get a lower TCP RTO minimum while the agent lives.

With several controllers (leveller.rpc.failover), a report may be answered by
another controller than the one behind the current levels. Its first decisions
were made before it had this host's reports, so they say nothing about our
flows: the levels in hand are kept (under their own lease, which keeps running)
until that controller answers with a decision made after it first answered us.
No flow loses its level when the agents move to a standby, and none keeps one
longer than the lease of the decision that set it.

Dependencies are injected as Protocols: the eBPF datapath
(enforce_bpf), the RPC client (leveller.rpc.transport) and the clocks, so the
same loop runs against fakes in tests and the kernel live.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from leveller.agent.demotion import DEFAULT_QUIET_S, FlowActivity, PhaseDemotion, Plan
from leveller.agent.fencing import EpochFence
from leveller.agent.lease import Lease
from leveller.agent.metrics import AgentMetrics, Rejections
from leveller.agent.overlap import OverlapWindows
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, FlowSource, JobClassifier, build_report, merge_progress
from leveller.model.errors import CallFailed
from leveller.model.flow import FlowKey
from leveller.model.messages import JobShift, LevelsReply, Report

LOG = logging.getLogger("leveller.agent")


class Enforcer(Protocol):
    """Rewrites DSCP per flow (the eBPF datapath through enforce_bpf.BpfEnforcer)."""

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        """Make the set of rewritten flows exactly ``marks`` (flow -> DSCP), all or nothing, for
        ``valid_for_s`` seconds from now: then the datapath stops rewriting on its own unless
        ``apply`` comes again."""
        ...

    def clear(self) -> None:
        """Stop rewriting every flow."""
        ...


class ReportClient(Protocol):
    """Sends a report, returns validated levels (leveller.rpc.transport.ControllerClient)."""

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply: ...


class ShiftSink(Protocol):
    """Passes CASSINI shift orders to the jobs (leveller.agent.shifts.ShiftFiles)."""

    def deliver(self, shifts: Sequence[JobShift], received: float) -> list[str]: ...

    def close(self) -> None: ...


class PeerSink(Protocol):
    """Takes the addresses this host's job flows go to (leveller.agent.rto_min.RtoMinGuard)."""

    def update(self, peers: Iterable[str]) -> None: ...

    def close(self) -> None: ...


class JobSource(Protocol):
    """Jobs that registered or were found by a scheduler (leveller.agent.jobtable.JobTable)."""

    def sweep(self) -> object: ...

    def logs(self) -> Sequence[tuple[Any, RateTracker]]: ...


class NoFlows:
    """Flow source for hosts without a datapath: progress is reported, no flows."""

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {}


class NoMarking:
    """Enforcer for hosts without a datapath: levels are received but not written anywhere."""

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        pass

    def clear(self) -> None:
        pass


@dataclass
class StepResult:
    """What one step did (for logs, status and tests)."""

    report: Report
    ok: bool
    error: str | None = None
    marks: dict[FlowKey, int] | None = None  # applied this step
    cleared: bool = False  # the lease ran out this step: all rewrites removed
    stale: bool = False  # the controller answered with a decision older than its lease
    t: float = 0.0  # wall-clock time the report was built (its flow counters were read)
    controller: str | None = None  # the address that answered (a FailoverClient's active controller)
    waiting: bool = False  # a controller new to us answered with a decision made before it knew us: levels kept
    mode: str = "enforce"  # the controller's mode ("shadow": its levels were not applied)
    held: int = 0  # flows whose demotion waits for their phase to end (after this step)
    leader_epoch: int = 0  # the leader epoch of the levels in hand (leveller.agent.fencing; 0: no election)


@dataclass
class Agent:
    host: str
    logs: Sequence[tuple[LogTailer, RateTracker]]
    client: ReportClient
    enforcer: Enforcer
    flows: FlowSource = field(default_factory=NoFlows)
    classifier: JobClassifier = field(default_factory=Classifier)
    ideal_times: Mapping[str, float] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)  # declared job weights (--job-weight)
    clock: Callable[[], float] = time.time  # wall clock: times of log lines and reports
    monotonic: Callable[[], float] = time.monotonic  # the lease's clock
    lease: Lease = field(default_factory=Lease)  # expiry on the monotonic clock
    marks: dict[FlowKey, int] = field(default_factory=dict)
    last_error: str | None = None
    known_jobs: frozenset[str] = frozenset()  # jobs of the last report (pushed levels are checked against it)
    metrics: AgentMetrics | None = None
    rejected: Rejections | None = None  # skipped log lines and jobs (counted, logged); made from metrics
    overlap: OverlapWindows | None = None  # the overlap rule (None: off)
    shift_files: ShiftSink | None = None  # where CASSINI shift orders go (None: not delivered)
    assigned: dict[FlowKey, tuple[str, int]] = field(default_factory=dict)  # controller's (job, level)
    dscp_by_level: tuple[int, ...] = ()
    mode: str = "enforce"  # of the controller's latest reply taken ("shadow": nothing is marked)
    would_be: dict[FlowKey, tuple[str, int]] = field(default_factory=dict)  # shadow mode: (job, level) per flow
    demotion: PhaseDemotion[FlowKey] | None = None  # phase-aligned demotion (None: every level at once)
    activity: FlowActivity[FlowKey] | None = None  # byte counters over time: idle flows (made with demotion)
    in_force: dict[FlowKey, int] = field(default_factory=dict)  # with demotion: the level in force per flow
    rto_routes: PeerSink | None = None  # told the job peers of every report (None: routes left alone)
    jobs: JobSource | None = None  # jobs that came by themselves (leveller.agent.jobtable.JobTable)
    # Push path (leveller.rpc.push.LevelsWatcher -> apply_pushed): the lock orders the two writers.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pushes: int = 0
    _pushed_epoch: int = -1
    _pushed_leader: int = 0  # leader epoch of the last pushed decision (decision epochs compare within one)
    # Epoch fencing (controllers with --etcd): levels of a leader older than the newest seen are refused
    fence: EpochFence = field(default_factory=EpochFence)
    leader_epoch: int = 0  # of the levels in hand
    _closed: bool = False
    _long_lines: dict[int, int] = field(default_factory=dict, repr=False)
    _restarts: dict[int, int] = field(default_factory=dict, repr=False)  # LogTailer.restarts seen, per tailer
    # Failover: the controller whose replies we take, and when its first answer to us arrived (monotonic)
    _source: str | None = None
    _source_since: float = 0.0
    _held_from: str | None = None  # the controller whose decision set the levels in hand

    def __post_init__(self) -> None:
        if self.rejected is None:
            self.rejected = Rejections(self.metrics)
        for tailer, tracker in self.logs:
            if tracker.on_reject is None:
                tracker.on_reject = self.rejected
            if getattr(tailer, "on_reject", False) is None:  # a log that is not a log: counted like a bad line
                tailer.on_reject = self.rejected
        if self.demotion is not None and self.activity is None:
            self.activity = FlowActivity(DEFAULT_QUIET_S)

    def poll_logs(self, now: float) -> bool:
        """Read new log lines into the trackers; True if some job finished an iteration (and the log
        is caught up: a backlog being worked off is not news worth an extra report)."""
        advanced = False
        ended: set[str] = set()  # jobs that finished an iteration: their communication phase is over
        for tailer, tracker in self._all_logs():
            lines = tailer.poll()
            restarts = getattr(tailer, "restarts", 0)
            if restarts != self._restarts.get(id(tailer), 0):  # truncated or replaced: a job may have restarted
                self._restarts[id(tailer)] = restarts
                tracker.restart()
            jobs = tracker.feed_all(lines, now) if lines else set()
            if jobs and not tailer.behind:
                advanced = True
                ended |= jobs
            if lines and self.overlap is not None:
                self.overlap.feed(lines)
            long = tailer.long_lines - self._long_lines.get(id(tailer), 0)
            if long:
                self._long_lines[id(tailer)] = tailer.long_lines
                assert self.rejected is not None
                self.rejected("line", f"{long} line(s) of {tailer.path} longer than {tailer.max_line} bytes",
                              count=long)
        refresh = self.overlap is not None and self.overlap.changed(self.clock())
        release = bool(ended) and self.demotion is not None and bool(self.demotion.waiting)
        if refresh or release:
            with self._lock:
                self._rewrite(ended)
        return advanced

    def _all_logs(self) -> Sequence[tuple[Any, RateTracker]]:
        """The --log pairs, then those of the jobs that came by themselves (ended ones swept first)."""
        if self.jobs is None:
            return self.logs
        self.jobs.sweep()
        return [*self.logs, *self.jobs.logs()]

    def poll_demotions(self) -> bool:
        """While demotions wait: read the flows' byte counters and apply the demotions whose flows went
        idle or whose wait ran out. True if demotions still wait afterwards."""
        if self.demotion is None or not self.demotion.waiting:
            return False
        read_bytes = getattr(self.flows, "read_bytes", None)  # the counters alone, where the source has them
        counters = read_bytes() if read_bytes is not None else {k: s.bytes for k, s in self.flows.read_flows().items()}
        read_at = self.monotonic()
        with self._lock:
            if self.activity is not None:
                self.activity.observe(counters, read_at)
            self._rewrite()
            return bool(self.demotion.waiting)

    def _wake_in(self) -> float | None:
        """Seconds until waiting demotions need a look (a counter reading, or a deadline); None: none wait."""
        if self.demotion is None or not self.demotion.waiting:
            return None
        quiet = self.activity.quiet_s if self.activity is not None else DEFAULT_QUIET_S
        deadline = self.demotion.next_deadline()
        due = quiet if deadline is None else min(quiet, deadline - self.monotonic())
        return max(0.0, due)

    def _tick(self, poll_s: float | None) -> float | None:
        """How long the run loop may sleep between reports (None: until the next report): the log poll,
        and with phase-aligned demotion a counter reading while demotions wait (a pushed decision can
        start a wait at any time, so the loop looks every quiet interval)."""
        ticks = [poll_s] if poll_s else []
        if self.demotion is not None:
            wake = self._wake_in()
            ticks.append(wake if wake is not None else
                         (self.activity.quiet_s if self.activity is not None else DEFAULT_QUIET_S))
        return min(ticks) if ticks else None

    def _levels(self) -> Mapping[FlowKey, tuple[str, int]]:
        """flow -> (job, level in force): the controller's, or the level a waiting demotion keeps. Lock held."""
        if self.demotion is None:
            return self.assigned
        return {k: (job, self.in_force.get(k, level)) for k, (job, level) in self.assigned.items()}

    def _effective(self) -> dict[FlowKey, int]:
        """flow -> DSCP now: the levels in force, with the overlap rule applied. Lock held."""
        levels = self._levels()
        if self.overlap is None:
            return {k: self.dscp_by_level[level] for k, (_, level) in levels.items()}
        return self.overlap.marks(levels, self.dscp_by_level, self.clock())

    def _plan(self, now: float, ended: Iterable[str] = ()) -> None:
        """With phase-aligned demotion: the levels in force for the controller's levels at monotonic
        ``now`` (promotions at once, demotions when the flow is idle, its job ``ended`` an iteration or
        its wait ran out; never past the current lease). Lock held."""
        if self.demotion is None:
            return
        top = len(self.dscp_by_level)
        current = {k: level for k, level in self.in_force.items() if level < top}  # levels the map still has
        wanted = {k: level for k, (_, level) in self.assigned.items()}
        done, activity, assigned = frozenset(ended), self.activity, self.assigned

        def busy(key: FlowKey) -> bool:
            return assigned[key][0] not in done and not (activity is not None and activity.idle(key, now))

        plan = self.demotion.plan(current, wanted, busy, now, hold_until=self.lease.expires_at)
        self.in_force = plan.levels
        self._count_demotions(plan)

    def _count_demotions(self, plan: Plan[FlowKey]) -> None:
        if self.metrics is None:
            return
        for outcome, n in (("immediate", len(plan.immediate)), ("deferred", len(plan.started))):
            if n:
                self.metrics.demotions.labels(outcome).inc(n)
        for why in plan.released.values():
            self.metrics.demotions.labels(why).inc()

    def _rewrite(self, ended: Iterable[str] = ()) -> None:
        """Write the marks again if they changed (a job entered or left its overlap window, a waiting
        demotion was applied), within the current lease (never beyond it). Lock held."""
        now = self.monotonic()
        if self._closed or self.lease.expires_at is None or not self.assigned or self.lease.expires_at <= now:
            if self.demotion is not None:
                self.demotion.clear()  # nothing to keep: the marks end with the lease
            return
        left = self.lease.expires_at - now
        self._plan(now, ended)
        marks = self._effective()
        if marks != self.marks:
            self.enforcer.apply(marks, left)
            self.marks = marks

    def build(self, now: float) -> Report:
        self.poll_logs(now)
        progress = merge_progress(tracker.jobs for _, tracker in self._all_logs())
        flows = self.flows.read_flows()
        if self.activity is not None:  # every report's counters are a reading for the idle test
            counters = {k: s.bytes for k, s in flows.items()}
            read_at = self.monotonic()
            with self._lock:
                self.activity.observe(counters, read_at)
        return build_report(self.host, progress, flows, self.classifier, self.ideal_times,
                            now, self.rejected, self.weights)

    def step(self) -> StepResult:
        built_at = self.clock()
        report = self.build(built_at)
        self.known_jobs = frozenset(j.job for j in report.jobs)
        if self.rto_routes is not None:
            self.rto_routes.update({f.key.dst for f in report.flows})
        pushes = self._pushes
        sent = self.monotonic()
        try:
            reply = self.client.report(report, known_jobs=self.known_jobs)
        except CallFailed as exc:
            self.last_error = str(exc)
            with self._lock:
                cleared = self._expire_if_due()
            self._count("failed")
            return StepResult(report, False, str(exc), cleared=cleared, t=built_at, controller=self._source)
        source = getattr(self.client, "active", None)
        with self._lock:
            self._follow(source)
            # a newer decision pushed while this report was in flight wins over this reply
            pushed = (self._pushed_leader, self._pushed_epoch)  # decision epochs compare within a leader's
            if (self._pushes != pushes and pushed > (reply.leader_epoch, reply.epoch)) or self._closed:
                stale, cleared, waiting = False, False, False
            else:
                # the request left at `sent`: the decision is at least decision_age_s older than that
                stale, cleared, waiting = self._take(reply, sent, reported=True)
            marks, mode = dict(self.marks), self.mode
            held = len(self.demotion.waiting) if self.demotion is not None else 0
        self.last_error = None
        self._count("stale" if stale else "ok")
        return StepResult(report, True, marks=marks, cleared=cleared, stale=stale, t=built_at, controller=source,
                          waiting=waiting, mode=mode, held=held, leader_epoch=self.leader_epoch)

    def apply_pushed(self, reply: LevelsReply) -> None:
        """Apply levels the controller pushed (a new decision) without waiting for the next step.
        The pusher delivers only replies of the active controller (leveller.rpc.push.LevelsWatcher)."""
        received = self.monotonic()  # a push leaves as soon as the decision exists: its arrival time
        with self._lock:
            if self._closed:
                return
            if not self.fence.admit(reply.leader_epoch, received):  # a deposed leader's decision: never applied
                self._count("fenced")
                return
            self._take(reply, received)
            self._pushes += 1
            self._pushed_epoch, self._pushed_leader = reply.epoch, reply.leader_epoch

    def _follow(self, source: str | None) -> None:
        """Note the controller that answered; a new one starts its own epochs and must first learn our
        flows (see the module docstring). Caller holds the lock."""
        if source == self._source:
            return
        previous, self._source = self._source, source
        self._source_since = self.monotonic()  # its first answer is here: later decisions can know us
        self._pushed_epoch = -1  # epochs of different controllers are not comparable
        if self.metrics is not None:
            if previous is not None:
                self.metrics.failovers.inc()
                self.metrics.controller.labels(previous).set(0)
            if source is not None:
                self.metrics.controller.labels(source).set(1)
        if previous is not None:
            LOG.warning("now reporting to controller %s (%s stopped answering)", source, previous)

    def _take(self, reply: LevelsReply, reference: float, reported: bool = False) -> tuple[bool, bool, bool]:
        """Apply ``reply`` if its decision is still within the lease, else drop every mark. ``reference``
        is a monotonic time not later than when the reply left the controller (a report: when the request
        left; a push, sent once the decision exists: its arrival, late by the network delay only).
        A decision made before the answering controller first answered us is not applied while we
        hold levels of another one (they run out with their own lease).
        Returns (stale, cleared, waiting). Caller holds the lock."""
        now = self.monotonic()
        decided = reference - reply.decision_age_s
        expired = self._expire_if_due()  # levels in hand whose lease ran out are cleared as such
        resets = self.fence.resets
        # a deposed leader's levels: the ones in hand stay (unless etcd was restored: leveller.agent.fencing)
        if not self.fence.admit(reply.leader_epoch, now, decided if reported else None, reply.lease_s):
            self._count("fenced")
            return False, expired, False
        if self.fence.resets != resets and self.metrics is not None:
            self.metrics.fence_resets.inc()
        if self._held_from != self._source and decided < self._source_since and self.lease.valid(now):
            return False, False, True
        valid_for = decided + reply.lease_s - now
        if valid_for <= 0:
            return True, self._drop() or expired, False
        self.mode = reply.mode
        if reply.mode == "shadow":  # the levels are what would apply: write no DSCP, touch no QP
            self.would_be = {f.key: (f.job, f.level) for f in reply.flows}
            if self.marks or self.assigned:  # the controller went from enforce to shadow: unmark
                self._drop()
            return False, expired, False
        self.would_be = {}
        self.assigned = {f.key: (f.job, f.level) for f in reply.flows}
        self.dscp_by_level = reply.dscp_by_level
        self._plan(now)  # before the renewal: a level kept by a waiting demotion ends with the current lease
        marks = self._effective()
        self.enforcer.apply(marks, valid_for)
        self.marks, self._held_from = marks, self._source
        self.leader_epoch = reply.leader_epoch
        self.fence.note_applied(self.clock(), reply.leader_epoch)
        self.lease.renew(now, valid_for)
        if self.metrics is not None:
            self.metrics.lease_left.set(valid_for)
        if reply.shifts and self.shift_files is not None:
            self.shift_files.deliver(reply.shifts, self.clock())
        return False, expired, False

    def _expire_if_due(self) -> bool:
        """Drop every mark if the lease ran out; True if that happened now. Caller holds the lock."""
        if not self.lease.expire_if_due(self.monotonic()):
            return False
        self._clear_all()
        return True

    def _drop(self) -> bool:
        """End the lease now (once: True if there was a lease or marks to end). Caller holds the lock."""
        if self.lease.expires_at is None and not self.marks:
            return False
        self.lease.expires_at = None
        self._clear_all()
        return True

    def _clear_all(self) -> None:
        self.enforcer.clear()
        self.marks = {}
        self.assigned = {}
        self.in_force = {}
        if self.demotion is not None:
            self.demotion.clear()
        if self.metrics is not None:
            self.metrics.lease_expiries.inc()
            self.metrics.lease_left.set(0)

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.reports.labels(outcome).inc()

    def run(self, interval_s: float, stop: threading.Event,
            on_step: Callable[[StepResult], None] | None = None, poll_s: float | None = None) -> None:
        """Step every ``interval_s`` until ``stop`` is set; clears all rewrites on the way out.
        With ``poll_s``, the job logs are read every ``poll_s`` in between and a job that finished
        an iteration is reported at once (the controller can then re-rank at iteration ends)."""
        try:
            while not stop.is_set():
                started = time.monotonic()
                result = self.step()
                if on_step:
                    on_step(result)
                due = started + interval_s
                while not stop.is_set():
                    left = due - time.monotonic()
                    if left <= 0:
                        break
                    tick = self._tick(poll_s)
                    if tick is None:
                        stop.wait(left)
                        break
                    stop.wait(min(tick, left))
                    if poll_s and self.poll_logs(self.clock()):
                        break  # an iteration ended: report now
                    self.poll_demotions()
        finally:
            with self._lock:
                self._closed = True
                self.enforcer.clear()
                self.marks = {}
                self.in_force = {}
                if self.demotion is not None:
                    self.demotion.clear()
                if self.shift_files is not None:
                    self.shift_files.close()
            if self.rto_routes is not None:
                self.rto_routes.close()  # the routes get their RTO minimum back
