"""Several controllers, one leader: the election on etcd, the leader-only handler, state kept in etcd.

``leveller controller --etcd URL[,URL...]`` wraps the Controller (leveller.controller.service) in a
:class:`HaController`, which is what the RPC layer serves:

- an **elector** thread keeps this controller's etcd lease alive (a keep-alive every TTL/4), registers it
  under ``members/<name>``, and while another controller leads polls the election key every
  ``poll_s``: once the key is gone (the leader's lease expired or was revoked), it campaigns
  (leveller.controller.leadership, key layout in leveller.controller.hastate);
- only the leader decides (:meth:`run` steps the Controller every tau while
  ``Leadership.may_decide``; during its first tau as leader every ``poll_s``, so that it decides as soon
  as the agents' reports reach it rather than a tau later) and only the leader answers reports and Watch
  calls; a standby raises
  NotLeader naming the leader ("not the leader; the leader is X", FAILED_PRECONDITION on the wire),
  which the agents follow (leveller.rpc.failover). Every reply carries the leader's epoch
  (``LevelsReply.leader_epoch``), which the agents fence on (leveller.agent.fencing);
- after every step the leader writes what a successor needs (ideal times and progress accounting,
  operator weights, the CASSINI plan, each host's replay high-water mark) to ``state/`` in guarded,
  batched transactions; a new leader reads it once before its first decision: no job is profiled
  again, and a report signed before the election is refused (the replay marks come back with the
  election time as their floor, leveller.rpc.replay.ReplayGuard.restore).

A controller stopped cleanly revokes its lease, so a standby takes over at its next poll; one killed
takes over after the TTL. A restarted controller joins as a standby. Without ``--etcd`` none of this
runs: a lone controller works as before.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from leveller.controller.hastate import (
    LEADER_VERSION,
    HaState,
    Holder,
    JobRecord,
    Layout,
    LeaderRecord,
    PlanRecord,
    ReplayMark,
    StateError,
    batches,
    changes,
    decode,
    encode,
    leader_record,
    member_record,
    read_address,
    read_leader,
)
from leveller.controller.leadership import Leadership, NotLeader
from leveller.controller.registry import JobState
from leveller.controller.service import Controller
from leveller.controller.shifts import ShiftPlan
from leveller.core.profiling import IdealTimeProfiler
from leveller.model.messages import LevelsReply, Report

LOG = logging.getLogger("leveller.controller.ha")
REPLAY_REFRESH_S = 60.0  # a host's replay mark in etcd is rewritten at most this often (same run)


class Store(Protocol):
    """The etcd calls used here (leveller.controller.etcdstore.EtcdStore; a dict-backed fake in tests)."""

    def grant(self, ttl_s: int) -> tuple[int, int]: ...

    def keepalive(self, lease: int) -> int: ...

    def revoke(self, lease: int) -> None: ...

    def campaign(self, key: str, value: bytes, lease: int) -> tuple[bool, Holder | None]: ...

    def holder(self, key: str) -> Holder | None: ...

    def mark(self, key: str, created: int, value: bytes, lease: int) -> bool: ...

    def depose(self, key: str, created: int, modified: int, value: bytes, lease: int) -> bool: ...

    def get_prefix(self, prefix: str) -> dict[str, bytes]: ...

    def put(self, key: str, value: bytes, lease: int | None = None) -> None: ...

    def guarded_write(self, guard_key: str, epoch: int, ops: Any) -> bool: ...


class ReplayMarks(Protocol):
    """The RPC layer's replay memory (leveller.rpc.replay.ReplayGuard)."""

    def marks(self) -> dict[str, tuple[str, int, float]]: ...

    def restore(self, host: str, run: str, seq: int, sent_at: float) -> None: ...


class HaMetrics:
    """leveller_ha_*: elections won, the epoch, leadership, etcd call latency and errors per operation."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.elections = Counter("leveller_ha_elections", "elections this controller won", registry=registry)
        self.epoch = Gauge("leveller_ha_epoch", "the current leader's epoch (0: none known)", registry=registry)
        self.leader = Gauge("leveller_ha_leader", "1 while this controller leads and may decide", registry=registry)
        self.etcd_seconds = Histogram("leveller_etcd_request_seconds", "etcd call latency", ["op"],
                                      buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2),
                                      registry=registry)
        self.etcd_errors = Counter("leveller_etcd_errors", "etcd calls that failed, per member tried", ["op", "error"],
                                   registry=registry)
        self.state_writes = Counter("leveller_ha_state_ops", "state keys written to etcd", registry=registry)
        self.state_left_out = Gauge("leveller_ha_state_left_out", "state records the last write could not hold "
                                    "(past the bounds of leveller.controller.hastate)", registry=registry)
        self.state_refused = Counter("leveller_ha_state_refused", "state records read from etcd that were not "
                                     "records (corrupt or hostile) and were not used", registry=registry)
        self.deposed = Counter("leveller_ha_deposed", "election keys this controller deleted because their holder "
                               "never led", registry=registry)

    def on_call(self, op: str, seconds: float, error: str | None) -> None:
        self.etcd_seconds.labels(op).observe(seconds)
        if error is not None:
            self.etcd_errors.labels(op, error).inc()


class HaController:
    """The Controller behind an election (see the module docstring); the RPC layer's handler."""

    def __init__(self, controller: Controller, store: Store, name: str, address: str, ttl_s: int,
                 layout: Layout | None = None, replay: ReplayMarks | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 poll_s: float | None = None, metrics: HaMetrics | None = None) -> None:
        if ttl_s < 1 or ttl_s != int(ttl_s):
            raise ValueError(f"--etcd-ttl {ttl_s!r}: whole seconds >= 1 (etcd leases are whole seconds)")
        if 2 * ttl_s > controller.lease_s + 1e-9:
            raise ValueError(f"--etcd-ttl {ttl_s}: must be at most half the agents' lease (--lease "
                             f"{controller.lease_s:g} s), so a new leader decides before the levels run out")
        self.controller, self.store, self.name, self.address = controller, store, name, address
        self.ttl_s, self.layout, self.replay = int(ttl_s), layout or Layout(), replay
        self.clock, self.monotonic = clock, monotonic
        self.poll_s = poll_s if poll_s is not None else min(0.25, ttl_s / 4)
        self.leadership = Leadership(float(ttl_s))
        self.metrics = metrics
        self.lease: int | None = None
        self.since = clock()
        self.elected_at: float | None = None  # monotonic time this controller last won the election
        self.members: list[dict[str, Any]] = []
        self.last_error: str | None = None
        self._stored: dict[str, bytes] = {}  # state/ as this leader last wrote it
        self._left_out: list[str] = []  # what the last write could not hold (logged when it changes)
        self.depose_after_s = 2 * self.ttl_s + controller.tau_s  # a holder that does not lead this long is deposed
        self._members_read = -1e9  # monotonic time the members were last read
        self._registered: int | None = None  # the lease this controller's member key is on
        self._holding: tuple[int, float] | None = None  # (epoch, since): the key is ours, the state not read yet
        self._pending: tuple[tuple[int, int], float] | None = None  # standby: a holder not leading, since
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the RPC handler ------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The Controller's decision counter (the push path compares it)."""
        return self.controller.epoch

    def _epoch(self) -> int:
        with self._lock:
            return self.leadership.check(self.monotonic(), self.address)

    def report(self, report: Report, now: float) -> LevelsReply:
        """Only the leader takes reports (NotLeader otherwise); its reply carries its epoch."""
        epoch = self._epoch()
        return dataclasses.replace(self.controller.report(report, now), leader_epoch=epoch)

    def levels_for(self, host: str) -> LevelsReply | None:
        try:
            epoch = self._epoch()
        except NotLeader:
            return None  # the Watch call ends; the agent's reports find the leader
        reply = self.controller.levels_for(host)
        return None if reply is None else dataclasses.replace(reply, leader_epoch=epoch)

    def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> LevelsReply | None:
        reply = self.controller.wait_levels(host, seen_epoch, timeout_s)
        try:
            epoch = self._epoch()
        except NotLeader:
            return None
        return None if reply is None else dataclasses.replace(reply, leader_epoch=epoch)

    def on_decision(self, listener: Callable[[], None]) -> None:
        self.controller.on_decision(listener)

    def use_report_thread(self, run: Any) -> None:
        self.controller.use_report_thread(run)

    def reject(self, reason: str) -> None:
        self.controller.reject(reason)

    def status(self, now: float) -> dict[str, Any]:
        """The Controller's status plus ``ha``: this controller's role, the leader, its epoch, the members."""
        out = self.controller.status(now)
        out["ha"] = self.ha_status()
        return out

    def ha_status(self) -> dict[str, Any]:
        with self._lock:
            ld = self.leadership
            leading = ld.may_decide(self.monotonic())
            return {"name": self.name, "address": self.address, "role": "leader" if leading else ld.role,
                    "leader": self.address if leading else ld.leader, "epoch": ld.epoch, "ttl_s": self.ttl_s,
                    "elections": ld.elections, "members": list(self.members), "last_error": self.last_error,
                    "state_left_out": list(self._left_out)}

    # ---- election ---------------------------------------------------------------------------------------
    def start(self) -> HaController:
        """Start the elector thread (returns self)."""
        self._thread = threading.Thread(target=self._elect_loop, name="ha-elector", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop campaigning; revoke the lease, so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self.leadership.lost(None, 0)
        if self.lease is not None:
            try:
                self.store.revoke(self.lease)
            except Exception as exc:  # etcd gone: the lease ends with its TTL
                LOG.warning("could not revoke the etcd lease: %s", exc)
            self.lease = None

    def _elect_loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.elect_round())

    def elect_round(self) -> float:
        """One turn of the elector thread: a round (an error is kept in ``last_error``: a leader's term runs
        out by itself), the members read every second; the seconds to wait until the next turn."""
        try:
            self.elect_once()
            if self.monotonic() - self._members_read >= 1.0:
                self._members_read = self.monotonic()
                self._read_members()
            self.last_error = None
        except Exception as exc:  # etcd unreachable, slow, or an answer lost
            self.last_error = f"{type(exc).__name__}: {exc}"
            LOG.warning("etcd: %s", self.last_error)
        return min(self.ttl_s / 4, 0.5) if self.leadership.role == "leader" else self.poll_s

    def elect_once(self) -> None:
        """One round: renew the lease (or get one); as leader, confirm the election key is still ours
        before the term is extended; otherwise campaign, and take over when the key is ours, whether just
        won or found on our lease (a campaign whose answer was lost, a take-over cut short by an error:
        after any error a controller finds out at its next round whether it holds the key). A standby
        deposes a holder that has not led for ``depose_after_s``."""
        sent, ttl = self._renew_lease()
        if self.leadership.role == "leader":
            self._confirm(sent, ttl)
        else:
            self._campaign(sent, ttl)
        self._set_metrics()

    def _renew_lease(self) -> tuple[float, int]:
        """(monotonic time the renewal or grant was sent, its TTL): this controller's lease lives at etcd
        until at least then + TTL."""
        sent, ttl = self.monotonic(), 0
        if self.lease is not None:
            ttl = self.store.keepalive(self.lease)
            if ttl <= 0:
                with self._lock:
                    if self.leadership.role == "leader":
                        LOG.warning("lost the etcd lease: not deciding any more")
                    self.leadership.lost(None, 0)
                self.lease = None
        if self.lease is None:  # first round, or the lease expired: a new one (as a standby)
            sent = self.monotonic()
            self.lease, ttl = self.store.grant(self.ttl_s)
            self._holding = None
            if ttl > self.ttl_s:
                LOG.warning("etcd granted a %d s lease for --etcd-ttl %d (its minimum TTL)", ttl, self.ttl_s)
        if self._registered != self.lease:
            self.store.put(self.layout.member(self.name), member_record(self.name, self.address, self.since),
                           self.lease)
            self._registered = self.lease
        return sent, ttl

    def _confirm(self, sent: float, ttl: int) -> None:
        """As leader: extend the term only while the election key is still ours (created at our epoch, on
        our lease); else stop at once (deleted by an operator, etcd restored or replaced)."""
        holder = self.store.holder(self.layout.leader)
        with self._lock:
            epoch = self.leadership.epoch
            if holder is None or holder.created != epoch or holder.lease != self.lease:
                self.leadership.lost(None, 0)
                LOG.warning("epoch %d: the election key is not this controller's any more (%s): not deciding",
                            epoch, "gone" if holder is None else f"created at {holder.created}")
                return
            self.leadership.renewed(sent, ttl)

    def _campaign(self, sent: float, ttl: int) -> None:
        assert self.lease is not None
        won, holder = self.store.campaign(self.layout.leader, leader_record(self.name, self.address), self.lease)
        if holder is not None and (won or holder.lease == self.lease):
            self._pending = None
            if not won:
                LOG.warning("the election key (epoch %d) is on this controller's lease: taking over", holder.created)
            self._take_over(holder.created, sent, ttl)
            return
        leader, record = None, None
        if holder is not None:
            try:
                record = read_leader(holder.value, self.layout.leader)
                leader = record.address
            except StateError as exc:
                LOG.warning("%s", exc)
        if leader == self.address:  # an earlier run of this controller, on a lease not yet expired
            leader = None
        with self._lock:
            self.leadership.follower(leader, holder.created if leader and holder is not None else 0)
        self._watch(holder, record, sent, ttl)

    def _watch(self, holder: Holder | None, record: LeaderRecord | None, sent: float, ttl: int) -> None:
        """Standby: depose a holder that says it does not lead (yet) and has not changed for
        ``depose_after_s`` (its own rounds take over within a round or two of etcd answering: this is for a
        holder stuck otherwise), by taking its key over at the same epoch, then take over. That holder
        never decided at this epoch (it marks the key before it leads, and the mark needs the key on its
        lease), so no two controllers decide at once, and it cannot win the key straight back. Records of
        older controllers, which do not say, are left alone."""
        if holder is None or record is None or record.version < LEADER_VERSION or record.leading:
            self._pending = None
            return
        seen, now = (holder.created, holder.modified), self.monotonic()
        if self._pending is None or self._pending[0] != seen:
            self._pending = (seen, now)
            return
        held = now - self._pending[1]
        if held < self.depose_after_s:
            return
        self._pending = None
        assert self.lease is not None
        if self.store.depose(self.layout.leader, *seen, leader_record(self.name, self.address), self.lease):
            LOG.warning("%s (%s) held the election key at epoch %d for %.1f s without leading: deposed",
                        record.name, record.address, holder.created, held)
            if self.metrics is not None:
                self.metrics.deposed.inc()
            self._take_over(holder.created, sent, ttl)

    def _take_over(self, epoch: int, sent: float, ttl: int) -> None:
        """The election key is ours at ``epoch``: read the state, mark the key as leading, then lead
        (decisions from the next step). If the state cannot be read or the key not marked (etcd errors),
        the next round tries again (the key stays ours); after a TTL of failed reads this controller leads
        without the state rather than not at all. Records that are not records (corrupt, hostile) are
        left out, named in the log and counted; the rest is used."""
        elected_at = self.clock()
        if self._holding is None or self._holding[0] != epoch:
            self._holding = (epoch, self.monotonic())
        try:
            pairs = self.store.get_prefix(self.layout.state)
        except Exception as exc:  # etcd3gw's and requests' errors, EtcdError
            held = self.monotonic() - self._holding[1]
            if held < self.ttl_s:
                raise
            LOG.error("epoch %d: the state in etcd could not be read for %.1f s (%s): leading without it",
                      epoch, held, exc)
            pairs = {}
        errors: list[str] = []
        state = decode(pairs, self.layout, errors)
        for message in errors[:5]:
            LOG.error("state in etcd not used: %s", message)
        if len(errors) > 5:
            LOG.error("state in etcd: %d more records not used", len(errors) - 5)
        if errors and self.metrics is not None:
            self.metrics.state_refused.inc(len(errors))
        self._stored = dict(pairs)
        self.load(state, elected_at)
        assert self.lease is not None
        if not self.store.mark(self.layout.leader, epoch, leader_record(self.name, self.address, leading=True),
                               self.lease):  # deposed or deleted since: not leading
            LOG.warning("epoch %d: the election key changed before this controller led", epoch)
            self._holding = None
            return
        with self._lock:
            self.leadership.won(epoch, self.address, sent, ttl)
            self.elected_at = self.monotonic()
        self._holding = None
        if self.metrics is not None:
            self.metrics.elections.inc()
        LOG.warning("elected leader at epoch %d", epoch)

    def _read_members(self) -> None:
        found = []
        for key, raw in sorted(self.store.get_prefix(self.layout.members).items()):
            try:
                name, address = read_address(raw, key)
            except StateError:
                continue
            found.append({"name": name, "address": address})
        with self._lock:
            self.members = found

    def _set_metrics(self) -> None:
        if self.metrics is not None:
            with self._lock:
                self.metrics.epoch.set(self.leadership.epoch)
                self.metrics.leader.set(1 if self.leadership.may_decide(self.monotonic()) else 0)

    # ---- state ------------------------------------------------------------------------------------------
    def snapshot(self) -> HaState:
        """What a successor needs, from the Controller and the replay memory now."""
        ctl = self.controller
        wall, mono = self.clock(), ctl.monotonic()
        with ctl._lock:
            jobs = {name: JobRecord(None if s.profiler.ideal is None else float(s.profiler.ideal),
                                    s.ideal_in_use, s.work_base, s.iter_base, s.first_seen)
                    for name, s in ctl.registry.jobs.items()}
            weights = dict(ctl.registry.weights)
        plan = None
        if ctl.shift_planner is not None and ctl.shift_planner.plan is not None:
            p = ctl.shift_planner.plan
            plan = PlanRecord(p.plan, p.anchor - mono + wall, dict(p.shifts), dict(p.periods))
        replay = {}
        if self.replay is not None:
            for host, (run, seq, sent) in self.replay.marks().items():
                if run:
                    replay[host] = self._kept_mark(host, run, seq, sent)
        return HaState(jobs, weights, replay, plan)

    def _kept_mark(self, host: str, run: str, seq: int, sent_at: float) -> ReplayMark:
        """The host's replay mark to store: the one in etcd while it names the same run and is less than
        REPLAY_REFRESH_S older (a successor floors every mark at its election time anyway, so what matters
        is that the host is there; rewriting every host's mark every step would be most of the writes)."""
        raw = self._stored.get(self.layout.replay(host))
        if raw is not None:
            try:
                kept = decode({self.layout.replay(host): raw}, self.layout).replay[host]
            except (StateError, KeyError):
                kept = None
            if kept is not None and kept.run == run and 0 <= sent_at - kept.sent_at < REPLAY_REFRESH_S:
                return kept
        return ReplayMark(run, seq, sent_at)

    def load(self, state: HaState, elected_at: float) -> None:
        """Take over a predecessor's state: jobs not known here get its ideal times and progress
        accounting (not profiled again), its operator weights fill in where this controller has none,
        its CASSINI plan continues, and every host's replay mark comes back with the election time
        as its floor (a report signed before this controller led is refused)."""
        ctl = self.controller
        with ctl._lock:
            for name, rec in state.jobs.items():
                job = ctl.registry.jobs.get(name)
                if job is not None and job.profiler.ideal is not None:
                    continue
                if job is None:
                    job = JobState(name, rec.first_seen, elected_at, IdealTimeProfiler(ctl.registry.profile_samples))
                    ctl.registry.jobs[name] = job
                    ctl.registry.jobs.move_to_end(name, last=False)  # oldest first: expired if nobody reports it
                job.profiler.ideal = rec.ideal
                job.ideal_in_use, job.work_base, job.iter_base = rec.in_use, rec.work_base, rec.iter_base
                job.last_sampled = rec.iter_base
            for name, w in state.weights.items():
                ctl.registry.weights.setdefault(name, w)
        if state.plan is not None and ctl.shift_planner is not None and ctl.shift_planner.plan is None:
            p = state.plan
            mono = ctl.monotonic()
            ctl.shift_planner.plan = ShiftPlan(p.plan, p.anchor - self.clock() + mono, dict(p.shifts), dict(p.periods))
            ctl.shift_planner._count = max(ctl.shift_planner._count, p.plan)
        if self.replay is not None:
            for host, m in state.replay.items():
                self.replay.restore(host, "", 0, max(m.sent_at, elected_at))

    def save(self) -> int:
        """Write the changes of ``state/`` since the last write, guarded by this leader's epoch; the number
        of keys written. A guard that fails means another controller leads: leadership is given up. What
        the records cannot hold (leveller.controller.hastate.encode) is left out, logged when that
        changes and shown in ``leveller_ha_state_left_out`` and Status (``ha.state_left_out``); the rest
        is written."""
        with self._lock:
            epoch = self.leadership.epoch if self.leadership.may_decide(self.monotonic()) else 0
        if not epoch:
            return 0
        left: list[str] = []
        wanted = encode(self.snapshot(), self.layout, left)
        if left != self._left_out:  # said once, when what is left out changes
            for message in left:
                LOG.error("state not written to etcd: %s", message)
            self._left_out = left
        if self.metrics is not None:
            self.metrics.state_left_out.set(len(left))
        ops = changes(self._stored, wanted)
        written = 0
        for batch in batches(ops):
            if not self.store.guarded_write(self.layout.leader, epoch, batch):
                with self._lock:
                    self.leadership.lost(None, 0)
                LOG.warning("epoch %d: the election key changed, state not written: not leading any more", epoch)
                break
            for op in batch:
                if op.value is None:
                    self._stored.pop(op.key, None)
                else:
                    self._stored[op.key] = op.value
            written += len(batch)
        if self.metrics is not None and written:
            self.metrics.state_writes.inc(written)
        return written

    # ---- decisions --------------------------------------------------------------------------------------
    def may_decide(self) -> bool:
        with self._lock:
            return self.leadership.may_decide(self.monotonic())

    def period(self, leading: bool) -> float:
        """Seconds between two turns of :meth:`run`: tau while leading, except during the first tau after
        the election (the agents' reports are only arriving: a step every ``poll_s`` decides with them as
        soon as they are in); as a standby ``poll_s`` (at most tau), to start deciding soon after winning."""
        tau = self.controller.tau_s
        fresh = self.elected_at is not None and self.monotonic() - self.elected_at < tau
        return tau if leading and not fresh else min(tau, self.poll_s)

    def run(self, stop: threading.Event, clock: Callable[[], float] = time.time,
            on_step: Callable[[Any, str | None], None] | None = None) -> None:
        """Like Controller.run, but a step only while this controller leads (and its state written after)."""
        ctl = self.controller
        while not stop.is_set():
            started = time.monotonic()
            if self.may_decide():
                try:
                    decision, error = ctl.step(clock()), None
                except Exception as exc:  # kept in last_error / metrics; the loop must survive
                    decision, error = None, f"{type(exc).__name__}: {exc}"
                try:
                    self.save()
                except Exception as exc:  # etcd slow or gone: next step again; the term runs out by itself
                    self.last_error = f"state not written: {type(exc).__name__}: {exc}"
                    LOG.warning("%s", self.last_error)
                if on_step:
                    on_step(decision, error)
            leading = self.may_decide()
            left = max(0.0, self.period(leading) - (time.monotonic() - started))
            if leading and ctl.on_iteration:  # also at once when a report shows a finished iteration
                ctl._wake.wait(left)
                ctl._wake.clear()
            else:
                stop.wait(left)
