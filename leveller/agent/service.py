"""The host agent: every interval, report progress and flows, apply the levels, honour the lease.

One :meth:`Agent.step` = poll the job logs, read the flow counters, send a
report, and either apply the reply's levels (flow -> DSCP) through the
enforcer or, when no valid reply came for longer than the lease, clear every
rewrite (fallback to no priorities). Dependencies are injected as Protocols:
the eBPF datapath (enforce_bpf), the RPC client (leveller.rpc.transport) and
the clock, so the same loop runs against fakes in tests and the kernel live.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from leveller.agent.lease import Lease
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, FlowSource, build_report, merge_progress
from leveller.core.paths import FlowKey
from leveller.rpc.schema import LevelsReply, Report
from leveller.rpc.transport import RpcFailure


class Enforcer(Protocol):
    """Rewrites DSCP per flow (the eBPF datapath through enforce_bpf.BpfEnforcer)."""

    def apply(self, marks: Mapping[FlowKey, int]) -> None:
        """Make the set of rewritten flows exactly ``marks`` (flow -> DSCP); all or nothing."""
        ...

    def clear(self) -> None:
        """Stop rewriting every flow."""
        ...


class ReportClient(Protocol):
    """Sends a report, returns validated levels (leveller.rpc.transport.ControllerClient)."""

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply: ...


class NoFlows:
    """Flow source for hosts without a datapath: progress is reported, no flows."""

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {}


def marks_from_reply(reply: LevelsReply) -> dict[FlowKey, int]:
    """flow -> DSCP for every flow the reply sets."""
    return {f.key: reply.dscp_by_level[f.level] for f in reply.flows}


@dataclass
class StepResult:
    """What one step did (for logs, status and tests)."""

    report: Report
    ok: bool
    error: str | None = None
    marks: dict[FlowKey, int] | None = None  # applied this step
    cleared: bool = False  # lease ran out this step: all rewrites removed


@dataclass
class Agent:
    host: str
    logs: Sequence[tuple[LogTailer, RateTracker]]
    client: ReportClient
    enforcer: Enforcer
    flows: FlowSource = field(default_factory=NoFlows)
    classifier: Classifier = field(default_factory=Classifier)
    ideal_times: Mapping[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    lease: Lease = field(default_factory=Lease)
    marks: dict[FlowKey, int] = field(default_factory=dict)
    last_error: str | None = None
    known_jobs: frozenset[str] = frozenset()  # jobs of the last report (pushed levels are checked against it)
    # Push path (leveller.rpc.push.LevelsWatcher -> apply_pushed): the lock orders the two writers.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pushes: int = 0
    _pushed_epoch: int = -1
    _closed: bool = False

    def poll_logs(self, now: float) -> bool:
        """Read new log lines into the trackers; True if some job finished an iteration."""
        advanced = False
        for tailer, tracker in self.logs:
            lines = tailer.poll()
            if lines and tracker.feed_all(lines, now):
                advanced = True
        return advanced

    def build(self, now: float) -> Report:
        self.poll_logs(now)
        progress = merge_progress(tracker.jobs for _, tracker in self.logs)
        return build_report(self.host, progress, self.flows.read_flows(), self.classifier, self.ideal_times)

    def step(self) -> StepResult:
        report = self.build(self.clock())
        self.known_jobs = frozenset(j.job for j in report.jobs)
        pushes = self._pushes
        try:
            reply = self.client.report(report, known_jobs=self.known_jobs)
        except RpcFailure as exc:
            self.last_error = str(exc)
            with self._lock:
                cleared = self.lease.expire_if_due(self.clock())
                if cleared:
                    self.enforcer.clear()
                    self.marks = {}
            return StepResult(report, False, str(exc), cleared=cleared)
        with self._lock:
            # a newer decision pushed while this report was in flight wins over this reply
            if not (self._pushes != pushes and self._pushed_epoch > reply.epoch) and not self._closed:
                self.marks = marks_from_reply(reply)
                self.enforcer.apply(self.marks)
            self.lease.renew(self.clock(), reply.lease_s)
            marks = dict(self.marks)
        self.last_error = None
        return StepResult(report, True, marks=marks)

    def apply_pushed(self, reply: LevelsReply) -> None:
        """Apply levels the controller pushed (a new decision) without waiting for the next step."""
        with self._lock:
            if self._closed:
                return
            marks = marks_from_reply(reply)
            self.enforcer.apply(marks)
            self.marks = marks
            self.lease.renew(self.clock(), reply.lease_s)
            self._pushes += 1
            self._pushed_epoch = reply.epoch

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
                    if not poll_s:
                        stop.wait(left)
                        break
                    stop.wait(min(poll_s, left))
                    if self.poll_logs(self.clock()):
                        break  # an iteration ended: report now
        finally:
            with self._lock:
                self._closed = True
                self.enforcer.clear()
                self.marks = {}
