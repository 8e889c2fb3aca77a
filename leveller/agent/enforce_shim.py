"""Adapters from the RDMA shim (leveller.agent.shim_control) to the agent's Protocols.

RDMA traffic is invisible to the eBPF datapath (the NIC sends it), so for the
agent a queue pair IS a flow: RoCEv2 is UDP to port 4791 between the two
GIDs' IPv4 addresses, from a source port the NIC derives from the QP number
(:func:`roce_source_port`). :class:`ShimFlows` lists the shim processes' QPs
as flows (FlowSource) and names their job from the shim (LEVELLER_JOB), so
the controller ranks and levels them like TCP flows. :class:`ShimEnforcer`
turns the levels' DSCPs back into a traffic class (DSCP << 2) per QP and asks
the owning shim to rebuild that QP (QP resurrection); ``clear`` gives every QP
it changed its original class back. Every change carries the agent's lease,
renewed at each ``apply``: when it runs out, the shim's own timer puts the
QPs back, so they fall back even if the agent dies. :class:`SplitEnforcer`
sends QP flows to the shim and everything else to another enforcer (the eBPF
datapath).

A QP whose change fails keeps its old class (the shim guarantees that); the
enforcer records the error and retries at the next ``apply``. A shim process
that vanished takes its QPs with it: they are forgotten.

A shim that cannot be trusted or does not answer in time costs the agent little (issue 41):
every exchange has a deadline far below tau (:data:`EXCHANGE_TIMEOUT_S` for ``list`` and ``lease``,
which touch no QP; :data:`SET_TIMEOUT_S` for a ``set_tc``, which waits for the QP's sends to drain);
the shims are listed in parallel under one deadline for the whole listing (:data:`LIST_TIMEOUT_S`,
the shims that answered last time first); a shim that failed is left alone for a while (2 s,
doubling at each failure in a row up to 60 s: leveller.agent.shim_worker.Backoff, counted in the
agent's metrics) by the listing and the enforcer alike, and its own lease ends what we changed
there. The enforcer never talks to a shim on the agent's report/apply path: ``apply`` posts what
each shim should have and returns; threads of its own do the exchanges, latest wins per shim
(leveller.agent.shim_worker.ShimWorkers), so a slow or hostile shim never delays the reports, the
levels of the agent's other jobs, nor the other shims.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from leveller.agent.reports import FlowSample, JobClassifier
from leveller.agent.shim_control import (
    LEASE_MAX_MS,
    QpInfo,
    ShimClient,
    ShimError,
    discover,
    dscp_traffic_class,
    prepare_socket_dir,
)
from leveller.agent.shim_worker import SHIM_WORKERS, Backoff, ShimWorkers
from leveller.model.flow import FlowKey, flow_key

ROCE_V2_PORT = 4791
UDP = 17
EXCHANGE_TIMEOUT_S = 0.25  # one list or lease exchange with one shim (it answers in well under 1 ms)
SET_TIMEOUT_S = 1.0  # one set_tc: the QP's sends drain first (milliseconds on a NIC)
LIST_TIMEOUT_S = 0.5  # one listing of every shim, all of it (on the report path: far below tau)
LIST_WORKERS = 64  # shims listed at once: 80 silent sockets fit in two rounds of the deadline
CLEAR_WAIT_S = 0.3  # clear() waits this long at most for the shims to end their leases
NOT_REACHED = "not asked: the listing's deadline passed first"


class Enforcer(Protocol):
    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None: ...

    def clear(self) -> None: ...


@dataclass(frozen=True)
class QpRef:
    """Where a QP flow lives: the shim socket of its process and the QP number."""

    socket: Path
    pid: int
    qp: int
    job: str
    tc: int | None


def gid_ipv4(gid: Any) -> str | None:
    """The IPv4 address of a RoCEv2 IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
    try:
        mapped = ipaddress.IPv6Address(str(gid)).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped is not None else None


def roce_source_port(qpn: int) -> int:
    """UDP source port of a RoCEv2 QP: in 0xC000..0xFFFF, from the QP number (as NICs spread QPs for ECMP)."""
    return 0xC000 | (qpn & 0x3FFF)


def qp_flow_key(qp: QpInfo) -> FlowKey | None:
    """The flow a connected QP sends as (None before RTR or for non-IPv4 GIDs)."""
    if not qp.connected or not qp.remote:
        return None
    src, dst = gid_ipv4(qp.local.get("gid")), gid_ipv4(qp.remote.get("gid"))
    if src is None or dst is None:
        return None
    return flow_key(src, dst, roce_source_port(qp.qp), ROCE_V2_PORT, UDP)


class ShimFlows:
    """FlowSource and job classifier over the QPs of every shim process on this host.

    ``sockets`` lists the shims' control sockets (default: discover());
    ``base`` classifies every other flow (e.g. TCP by port or cgroup). Bytes
    are reported as 0: the shim does not count RDMA traffic. ``list_timeout_s``
    bounds a whole listing (the shims are asked in parallel, each exchange within
    ``timeout_s`` and what is left of the listing's deadline). ``backoff`` is shared
    with the enforcer: a shim that failed is left alone by both.
    """

    def __init__(self, sockets: Callable[[], Iterable[Path]] = discover, base: JobClassifier | None = None,
                 timeout_s: float = EXCHANGE_TIMEOUT_S, client: Callable[[Path, float], Any] = ShimClient,
                 list_timeout_s: float = LIST_TIMEOUT_S, monotonic: Callable[[], float] = time.monotonic,
                 backoff: Backoff | None = None) -> None:
        self.sockets, self.base, self.timeout_s, self.client = sockets, base, timeout_s, client
        self.list_timeout_s, self.monotonic = list_timeout_s, monotonic
        self.backoff = backoff if backoff is not None else Backoff(monotonic)
        self.qps: dict[FlowKey, QpRef] = {}
        self.errors: list[str] = []
        self._answered: set[Path] = set()  # the shims that answered the last listing: asked first next time

    def usable(self, path: Path) -> bool:
        """False while the shim at ``path`` is left alone after a failure."""
        return self.backoff.usable(path)

    def _list(self, path: Path, deadline: float) -> list[QpInfo] | ShimError:
        left = min(self.timeout_s, deadline - time.monotonic())
        if left <= 0:
            return ShimError(NOT_REACHED)
        try:
            return list(self.client(path, left).list_qps())
        except ShimError as exc:
            return exc

    def refresh(self) -> dict[FlowKey, QpRef]:
        """List the QPs again, all within ``list_timeout_s``. A shim that cannot be reached or answers
        wrong is skipped, noted in ``errors`` and left alone for a while; one the deadline left no time
        for keeps the QPs it had."""
        deadline = time.monotonic() + self.list_timeout_s
        errors = []
        paths = list(dict.fromkeys(Path(p) for p in self.sockets()))
        due = [p for p in paths if self.backoff.usable(p)]
        for path in paths:
            if path not in due:
                errors.append(f"shim {path}: skipped for {self.backoff.left_s(path):.0f} s more after it failed")
        # those that answered last time first, then new ones, then those that failed before
        due.sort(key=lambda p: 0 if p in self._answered else 2 if self.backoff.delay_s(p) else 1)
        results: dict[Path, list[QpInfo] | ShimError] = {}
        if due:
            pool = ThreadPoolExecutor(max_workers=min(LIST_WORKERS, len(due)), thread_name_prefix="leveller-list")
            futures = {pool.submit(self._list, p, deadline): p for p in due}
            done, _ = wait_futures(futures, timeout=max(0.0, deadline - time.monotonic()) + 0.05)
            pool.shutdown(wait=False, cancel_futures=True)  # the running ones end by the deadline
            for future, path in futures.items():
                results[path] = future.result() if future in done else ShimError(NOT_REACHED)
        kept = {k: ref for k, ref in self.qps.items() if isinstance(results.get(ref.socket), ShimError)
                and str(results[ref.socket]) == NOT_REACHED}
        qps: dict[FlowKey, QpRef] = dict(kept)
        self._answered = set()
        for path, result in results.items():
            if isinstance(result, ShimError):
                if str(result) == NOT_REACHED:
                    errors.append(f"shim {path}: {NOT_REACHED} ({self.list_timeout_s:g} s); its QPs as last listed")
                else:
                    errors.append(str(result))
                    self.backoff.failed(path, "list")
                continue
            self.backoff.answered(path, "list")
            self._answered.add(path)
            for q in result:
                key = qp_flow_key(q)
                if key is not None:
                    qps[key] = QpRef(path, q.pid, q.qp, q.job, q.tc)
        self.backoff.keep_only(paths)
        self.qps, self.errors = qps, errors
        return qps

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {key: FlowSample(0) for key in self.refresh()}

    def job_of(self, key: FlowKey, sample: FlowSample) -> str | None:
        ref = self.qps.get(key)
        if ref is not None:
            return ref.job
        return self.base.job_of(key, sample) if self.base is not None else None


@dataclass(frozen=True)
class ShimWork:
    """What one shim should have: a class per QP flow (None: the class it had before ours), kept until
    ``lease_until`` (monotonic); ``lease_until`` None: end the lease now (every QP back, clear)."""

    classes: Mapping[FlowKey, tuple[QpRef, int | None]]
    lease_until: float | None


class ShimEnforcer:
    """Enforcer for QP flows: DSCP -> traffic class (``dscp_to_tc``) applied by the shim, per QP.

    ``apply`` and ``clear`` only post work (leveller.agent.shim_worker.ShimWorkers): the exchanges run
    on ``workers`` threads of its own; ``wait_idle`` waits for them, ``close`` stops them. ``errors``:
    what went wrong in the latest work of each shim."""

    def __init__(self, flows: ShimFlows, dscp_to_tc: Callable[[int], int] = dscp_traffic_class,
                 workers: int = SHIM_WORKERS, set_timeout_s: float = SET_TIMEOUT_S,
                 lease_timeout_s: float = EXCHANGE_TIMEOUT_S, clear_wait_s: float = CLEAR_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flows, self.dscp_to_tc = flows, dscp_to_tc
        self.set_timeout_s, self.lease_timeout_s, self.clear_wait_s, self.clock = (
            set_timeout_s, lease_timeout_s, clear_wait_s, clock)
        self.current: dict[FlowKey, int] = {}  # QP flow -> traffic class we gave it
        self.original: dict[FlowKey, int] = {}  # QP flow -> traffic class before our first change
        self._refs: dict[FlowKey, QpRef] = {}
        self._errors: dict[Path, list[str]] = {}
        self._lock = threading.Lock()
        self._workers: ShimWorkers[ShimWork] = ShimWorkers(self._work, workers)

    @property
    def errors(self) -> list[str]:
        with self._lock:
            return [e for errs in self._errors.values() for e in errs]

    def owns(self, key: FlowKey) -> bool:
        return key in self.flows.qps or key in self._refs

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        """Give QP flows in ``marks`` their class for ``valid_for_s`` seconds (the shims' lease, renewed
        here); QP flows we changed that are not in ``marks`` get theirs back. Returns at once: the
        shims are told from the enforcer's threads."""
        lease_until = self.clock() + valid_for_s
        work: dict[Path, dict[FlowKey, tuple[QpRef, int | None]]] = {}
        with self._lock:
            for key, ref in self._refs.items():
                if key not in marks:
                    work.setdefault(ref.socket, {})[key] = (ref, None)
            for key, dscp in marks.items():
                listed = self.flows.qps.get(key)
                if listed is not None:
                    work.setdefault(listed.socket, {})[key] = (listed, self.dscp_to_tc(dscp))
            sockets = set(work) | {r.socket for r in self._refs.values()}
        for path in sockets:
            self._post(path, ShimWork(work.get(path, {}), lease_until))

    def clear(self) -> None:
        """Every QP we changed goes back to its original traffic class: each shim ends its lease. Waits
        ``clear_wait_s`` at most (a shim that does not answer has its own lease end the classes)."""
        with self._lock:
            sockets = {ref.socket for ref in self._refs.values()}
        for path in sockets:
            self._post(path, ShimWork({}, None))
        if sockets:
            self._workers.wait_idle(self.clear_wait_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every posted change was tried (True), at most ``timeout_s``."""
        return self._workers.wait_idle(timeout_s)

    def close(self, timeout_s: float = CLEAR_WAIT_S) -> bool:
        """Let posted work finish (``timeout_s`` at most), then stop the enforcer's threads."""
        return self._workers.close(timeout_s)

    def _post(self, path: Path, work: ShimWork) -> None:
        if not self.flows.backoff.usable(path):
            with self._lock:
                refs = [(k, r) for k, r in self._refs.items() if r.socket == path]
                ref = refs[0][1] if refs else next(iter(work.classes.values()), (None, None))[0]
                gone = ref is not None and not _alive(ref)
                if work.lease_until is None or gone:
                    self._forget(k for k, _ in refs)  # its own lease ends the classes, or its QPs are gone
                self._errors[path] = [] if gone or ref is None else [
                    f"pid {ref.pid} ({ref.job}): left alone for {self.flows.backoff.left_s(path):.0f} s more "
                    "after it failed; its own lease ends the classes we gave"]
            return
        self._workers.post(path, work)

    # ---- on the enforcer's threads: one shim at a time ----------------------------------------------
    def _work(self, path: Path, work: ShimWork) -> None:
        errors: list[str] = []
        try:
            if work.lease_until is None:
                self._end_lease(path, errors)
            else:
                self._bring(path, work, errors)
        finally:
            with self._lock:
                self._errors[path] = errors

    def _lease_ms(self, lease_until: float) -> int:
        return min(LEASE_MAX_MS, math.ceil((lease_until - self.clock()) * 1000))

    def _end_lease(self, path: Path, errors: list[str]) -> None:
        with self._lock:
            keys = [k for k, r in self._refs.items() if r.socket == path]
            ref = self._refs[keys[0]] if keys else None
        if ref is None:
            return
        try:
            self.flows.client(path, self.lease_timeout_s).lease(0)
            self.flows.backoff.answered(path, "clear")
        except ShimError as exc:
            if _alive(ref):
                self.flows.backoff.failed(path, "clear")
                errors.append(f"pid {ref.pid} ({ref.job}): {exc}; its own lease ends the classes")
        with self._lock:
            self._forget(keys)

    def _bring(self, path: Path, work: ShimWork, errors: list[str]) -> None:
        """Renew the shim's lease if it holds QPs we changed, then change the QPs whose class differs.
        The first exchange that fails ends this work (the shim is left alone for a while), and so does
        newer work waiting for the same shim."""
        assert work.lease_until is not None
        with self._lock:
            ours = [k for k, r in self._refs.items() if r.socket == path]
            ref = self._refs[ours[0]] if ours else None
        lease_ms = self._lease_ms(work.lease_until)
        if lease_ms < 1:
            return  # the decision's lease is over: the shim's own lease ends what we gave (0 would end it now)
        if ref is not None:
            try:
                running = self.flows.client(path, self.lease_timeout_s).lease(lease_ms)
            except ShimError as exc:
                if not _alive(ref):
                    with self._lock:
                        self._forget(ours)  # the process ended: its QPs are gone
                    return
                delay = self.flows.backoff.failed(path, "lease")
                errors.append(f"pid {ref.pid} ({ref.job}): lease not renewed: {exc}; left alone for {delay:g} s")
                return
            self.flows.backoff.answered(path, "lease")
            if not running:  # its lease ran out: the QPs are back at their own classes, set them again
                with self._lock:
                    self._forget(ours)
        for key, (qref, tc) in work.classes.items():
            if self._workers.newer(path):
                return  # a later decision waits: it says what this shim should have now
            with self._lock:
                if tc is None and key not in self._refs:
                    continue
                if tc is not None and self.current.get(key) == tc:
                    continue
                target = self.original.get(key, 0) if tc is None else tc
            lease_ms = self._lease_ms(work.lease_until)
            if tc is not None and lease_ms < 1:
                return
            outcome = self._set(key, qref, target, lease_ms if tc is not None else None, errors)
            if outcome is None:
                return  # the shim failed: left alone, the rest waits for a later apply
            if outcome:
                with self._lock:
                    if tc is None:
                        self._forget([key])
                    else:
                        self.current[key] = tc

    def _set(self, key: FlowKey, ref: QpRef, tc: int, lease_ms: int | None, errors: list[str]) -> bool | None:
        """True when the QP has class ``tc`` afterwards, or is gone (nothing left to change); False when
        the shim refused it (the QP keeps its class); None when the shim failed (left alone)."""
        try:
            results = self.flows.client(ref.socket, self.set_timeout_s).set_traffic_class(
                tc, qp=ref.qp, lease_ms=lease_ms)
        except ShimError as exc:
            if not _alive(ref):
                return True  # the process ended: its QPs are gone
            delay = self.flows.backoff.failed(ref.socket, "set_tc")
            errors.append(f"QP {ref.qp} of pid {ref.pid} ({ref.job}): {exc}; left alone for {delay:g} s")
            with self._lock:  # it may have changed the class after all: the one listed before is the original
                if ref.tc is not None and key not in self.original:
                    self.original[key] = ref.tc
                    self._refs[key] = ref
            return None
        self.flows.backoff.answered(ref.socket, "set_tc")
        if not results:
            return True  # the QP was destroyed meanwhile
        r = results[0]
        if not r.ok:
            errors.append(f"QP {ref.qp} of pid {ref.pid} ({ref.job}): {r.error}")
            return False
        with self._lock:
            self._refs[key] = ref
            self.original.setdefault(key, r.old_tc if r.old_tc is not None else 0)
        return True

    def _forget(self, keys: Iterable[FlowKey]) -> None:
        """Caller holds the lock."""
        for key in list(keys):
            self.current.pop(key, None)
            self.original.pop(key, None)
            self._refs.pop(key, None)


def _alive(ref: QpRef) -> bool:
    """The shim's socket and process are still there (else its QPs are gone with it)."""
    return ref.socket.exists() and Path(f"/proc/{ref.pid}").exists()


class SplitEnforcer:
    """QP flows to the shim enforcer, all other flows to ``other`` (the eBPF datapath)."""

    def __init__(self, shim: ShimEnforcer, other: Enforcer) -> None:
        self.shim, self.other = shim, other

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self.other.apply({k: v for k, v in marks.items() if not self.shim.owns(k)}, valid_for_s)
        self.shim.apply(marks, valid_for_s)

    def clear(self) -> None:
        try:
            self.other.clear()
        finally:
            self.shim.clear()

    def close(self) -> None:
        """Stop the shim enforcer's threads (after ``clear``, at the agent's exit)."""
        self.shim.close()


class MergedFlows:
    """Flows of several sources (the eBPF datapath's TCP flows and the shim's QPs)."""

    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        out: dict[FlowKey, FlowSample] = {}
        for s in self.sources:
            out.update(s.read_flows())
        return out


def add_shim(flows: Any, enforcer: Enforcer, classifier: JobClassifier,
             sockets: Callable[[], Iterable[Path]] = discover,
             metrics: Any = None) -> tuple[MergedFlows, SplitEnforcer, ShimFlows]:
    """An agent's (flows, enforcer, classifier) extended with the shim's QPs: pass the three to Agent.
    With the default sockets, the shims' directory is created (as root) or refused if untrusted.
    ``metrics`` (leveller.agent.metrics.AgentMetrics) counts the shims left alone after a failure."""
    if sockets is discover:
        prepare_socket_dir()
    backoff = Backoff()
    if metrics is not None:
        backoff.on_failed = lambda op: metrics.shim_backoffs.labels(op).inc()
        metrics.shims_left_alone.set_function(backoff.left_alone)
    shim = ShimFlows(sockets, base=classifier, backoff=backoff)
    return MergedFlows(shim, flows), SplitEnforcer(ShimEnforcer(shim), enforcer), shim
