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

A shim that cannot be trusted or does not answer in time costs the agent at
most one deadline (leveller.agent.shim_control checks the peer and every reply):
the shims are listed in parallel under one deadline for the whole listing, and
one that failed is left alone for a while (2 s, doubling up to 60 s) by the
listing and the enforcer alike; its own lease ends what we changed there. A
slow or hostile shim never stalls the reports of the others.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
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
from leveller.model.flow import FlowKey, flow_key

ROCE_V2_PORT = 4791
UDP = 17
LIST_TIMEOUT_S = 1.0  # one listing of every shim (a shim answers in well under 1 ms)
BACKOFF_S = (2.0, 60.0)  # a shim that failed is left alone this long, doubling up to the maximum
LIST_WORKERS = 8


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
    bounds a whole listing (the shims are asked in parallel); ``timeout_s``
    bounds one class change (it may wait for the QP's sends to drain).
    """

    def __init__(self, sockets: Callable[[], Iterable[Path]] = discover, base: JobClassifier | None = None,
                 timeout_s: float = 5.0, client: Callable[[Path, float], Any] = ShimClient,
                 list_timeout_s: float = LIST_TIMEOUT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.sockets, self.base, self.timeout_s, self.client = sockets, base, timeout_s, client
        self.list_timeout_s, self.monotonic = list_timeout_s, monotonic
        self.qps: dict[FlowKey, QpRef] = {}
        self.errors: list[str] = []
        self._backoff: dict[Path, tuple[float, float]] = {}  # socket -> (left alone until, last delay)

    def usable(self, path: Path) -> bool:
        """False while the shim at ``path`` is left alone after a failure."""
        entry = self._backoff.get(Path(path))
        return entry is None or entry[0] <= self.monotonic()

    def failed(self, path: Path) -> None:
        """The shim at ``path`` failed (unreachable, too slow, or an invalid answer): leave it alone for a
        while, longer each time in a row."""
        path = Path(path)
        _, last = self._backoff.get(path, (0.0, 0.0))
        delay = min(BACKOFF_S[1], max(BACKOFF_S[0], 2 * last))
        self._backoff[path] = (self.monotonic() + delay, delay)

    def answered(self, path: Path) -> None:
        self._backoff.pop(Path(path), None)

    def _list(self, path: Path) -> list[QpInfo] | ShimError:
        try:
            return list(self.client(path, self.list_timeout_s).list_qps())
        except ShimError as exc:
            return exc

    def refresh(self) -> dict[FlowKey, QpRef]:
        """List the QPs again (a shim that cannot be reached or answers wrong is skipped and noted in
        ``errors``, and left alone for a while)."""
        qps: dict[FlowKey, QpRef] = {}
        errors = []
        paths = list(dict.fromkeys(Path(p) for p in self.sockets()))
        due = [p for p in paths if self.usable(p)]
        for path in paths:
            if path not in due:
                errors.append(f"shim {path}: skipped for {self._backoff[path][0] - self.monotonic():.0f} s more "
                              "after it failed")
        if len(due) > 1:
            with ThreadPoolExecutor(max_workers=min(LIST_WORKERS, len(due))) as pool:
                listed = list(pool.map(self._list, due))
        else:
            listed = [self._list(p) for p in due]
        for path, result in zip(due, listed):
            if isinstance(result, ShimError):
                errors.append(str(result))
                self.failed(path)
                continue
            self.answered(path)
            for q in result:
                key = qp_flow_key(q)
                if key is not None:
                    qps[key] = QpRef(path, q.pid, q.qp, q.job, q.tc)
        for gone in set(self._backoff) - set(paths):
            del self._backoff[gone]
        self.qps, self.errors = qps, errors
        return qps

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {key: FlowSample(0) for key in self.refresh()}

    def job_of(self, key: FlowKey, sample: FlowSample) -> str | None:
        ref = self.qps.get(key)
        if ref is not None:
            return ref.job
        return self.base.job_of(key, sample) if self.base is not None else None


class ShimEnforcer:
    """Enforcer for QP flows: DSCP -> traffic class (``dscp_to_tc``) applied by the shim, per QP."""

    def __init__(self, flows: ShimFlows, dscp_to_tc: Callable[[int], int] = dscp_traffic_class) -> None:
        self.flows, self.dscp_to_tc = flows, dscp_to_tc
        self.current: dict[FlowKey, int] = {}  # QP flow -> DSCP we gave it
        self.original: dict[FlowKey, int] = {}  # QP flow -> traffic class before our first change
        self._refs: dict[FlowKey, QpRef] = {}
        self.errors: list[str] = []

    def owns(self, key: FlowKey) -> bool:
        return key in self.flows.qps or key in self._refs

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        """Give QP flows in ``marks`` their class for ``valid_for_s`` seconds (the shims' lease, renewed
        here); QP flows we changed that are not in ``marks`` get theirs back."""
        self.errors = []
        lease_ms = min(LEASE_MAX_MS, max(1, math.ceil(valid_for_s * 1000)))
        self._renew(lease_ms)
        for key, dscp in marks.items():
            ref = self.flows.qps.get(key)
            if ref is not None and self.current.get(key) != dscp:
                if self._set(key, ref, self.dscp_to_tc(dscp), lease_ms):
                    self.current[key] = dscp
        for key in [k for k in self.current if k not in marks]:
            self._restore(key)

    def clear(self) -> None:
        """Every QP we changed goes back to its original traffic class: each shim ends its lease."""
        self.errors = []
        for path, keys in self._by_socket().items():
            ref = self._refs[keys[0]]
            try:
                if not self.flows.usable(path):
                    raise ShimError("left alone after it failed")
                self.flows.client(path, self.flows.timeout_s).lease(0)
            except ShimError as exc:
                if ref.socket.exists() and Path(f"/proc/{ref.pid}").exists():
                    self.errors.append(f"pid {ref.pid} ({ref.job}): {exc}; its own lease ends the classes")
            self._forget(keys)

    def _renew(self, lease_ms: int) -> None:
        """Renew the lease of every shim holding QPs we changed; a shim whose lease ran out has put them
        back already: forget them (the next change starts afresh)."""
        for path, keys in self._by_socket().items():
            ref = self._refs[keys[0]]
            if not self.flows.usable(path):
                self.errors.append(f"pid {ref.pid} ({ref.job}): lease not renewed: left alone after it failed")
                continue
            try:
                running = self.flows.client(path, self.flows.timeout_s).lease(lease_ms)
            except ShimError as exc:
                if not ref.socket.exists() or not Path(f"/proc/{ref.pid}").exists():
                    self._forget(keys)  # the process ended: its QPs are gone
                else:
                    self.flows.failed(path)
                    self.errors.append(f"pid {ref.pid} ({ref.job}): lease not renewed: {exc}")
                continue
            if not running:
                self._forget(keys)

    def _by_socket(self) -> dict[Path, list[FlowKey]]:
        out: dict[Path, list[FlowKey]] = {}
        for key, ref in self._refs.items():
            out.setdefault(ref.socket, []).append(key)
        return out

    def _forget(self, keys: Iterable[FlowKey]) -> None:
        for key in keys:
            self.current.pop(key, None)
            self.original.pop(key, None)
            self._refs.pop(key, None)

    def _restore(self, key: FlowKey) -> None:
        ref = self._refs.get(key)
        if ref is None or self._set(key, ref, self.original.get(key, 0)):
            self._forget([key])

    def _set(self, key: FlowKey, ref: QpRef, tc: int, lease_ms: int | None = None) -> bool:
        """True when the QP has class ``tc`` afterwards, or is gone (nothing left to change)."""
        if not self.flows.usable(ref.socket):
            self.errors.append(f"QP {ref.qp} of pid {ref.pid} ({ref.job}): left alone after its shim failed")
            return False
        try:
            results = self.flows.client(ref.socket, self.flows.timeout_s).set_traffic_class(
                tc, qp=ref.qp, lease_ms=lease_ms)
        except ShimError as exc:
            if not ref.socket.exists() or not Path(f"/proc/{ref.pid}").exists():
                return True  # the process ended: its QPs are gone
            self.flows.failed(ref.socket)
            self.errors.append(f"QP {ref.qp} of pid {ref.pid} ({ref.job}): {exc}")
            return False
        if not results:
            return True  # the QP was destroyed meanwhile
        r = results[0]
        if not r.ok:
            self.errors.append(f"QP {ref.qp} of pid {ref.pid} ({ref.job}): {r.error}")
            return False
        self._refs[key] = ref
        self.original.setdefault(key, r.old_tc if r.old_tc is not None else 0)
        return True


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
             sockets: Callable[[], Iterable[Path]] = discover) -> tuple[MergedFlows, SplitEnforcer, ShimFlows]:
    """An agent's (flows, enforcer, classifier) extended with the shim's QPs: pass the three to Agent.
    With the default sockets, the shims' directory is created (as root) or refused if untrusted."""
    if sockets is discover:
        prepare_socket_dir()
    shim = ShimFlows(sockets, base=classifier)
    return MergedFlows(shim, flows), SplitEnforcer(ShimEnforcer(shim), enforcer), shim
