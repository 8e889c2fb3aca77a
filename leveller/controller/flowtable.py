"""The controller's flows, jobs and links as integer ids, kept up to date report by report.

A decision every tau over 100,000 flows cannot rebuild dicts of every flow
from every report. Here a flow is interned once (FlowKey -> id), its job and
its path (link ids, asked from the path provider once) live in numpy arrays
indexed by id, and each report only applies its difference to the host's
previous report. A flow is live while at least one live host reports it.

With ``claims`` (the controller's, under mutual TLS), a flow's source address
belongs to the host that first reported a flow from it, as long as that host is
live: another host reporting a flow from that address (h2 claiming h1's flow for
its own job moved it to that job and reordered) has that entry refused, kept in
``refused`` and counted by the controller; the rest of its report stands.

Ids are never reused between compactions, and compaction builds new
containers, so a Decision that kept references to ``keys``/``ids`` stays
valid while the table moves on. Not thread-safe: the controller holds its
lock around every call.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from leveller.model.flow import FlowKey

UNKNOWN_PATH = "?unknown-path"  # the one pseudo-link of every flow whose path is unknown
COMPACT_SLACK = 65536  # dead ids tolerated beyond the live ones before the table is rebuilt
_FIRST, _SECOND, _KEY_JOB = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(0, 1)


class Interner:
    """Names <-> dense integer ids (append-only)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class FlowSnapshot:
    """The flows of one decision, frozen: row r is flow ``keys[flow_ids[r]]`` of job ``job_names[job[r]]``
    crossing links ``link_names[j]`` for j >= 0 in ``path[r]``. ``ids``, ``keys``, ``job_names`` and
    ``link_names`` are the table's append-only containers (shared, never changed below their length)."""

    ids: Mapping[FlowKey, int]
    keys: Sequence[FlowKey]
    flow_ids: np.ndarray
    row_by_id: np.ndarray  # table id -> row, -1 for flows outside this snapshot
    job: np.ndarray
    path: np.ndarray
    job_ids: Mapping[str, int]
    job_names: Sequence[str]
    link_names: Sequence[str]
    generation: int = 0  # of the table's ids
    path_id: np.ndarray | None = None  # interned path of each row: rows with the same links share an id
    version: int = -1  # of the table's flows, jobs and paths when taken (-1: unknown)

    def row(self, key: FlowKey) -> int | None:
        i = self.ids.get(key)
        if i is None or i >= len(self.row_by_id):
            return None
        r = int(self.row_by_id[i])
        return None if r < 0 else r

    def __len__(self) -> int:
        return len(self.flow_ids)


class HostFlows:
    """The flows of one host's last report: flow -> job, and the same as parallel lists and table ids
    (the controller answers each report from these without a lookup per flow)."""

    def __init__(self, flows: dict[FlowKey, str], ids: Mapping[FlowKey, int]) -> None:
        self.flows = flows
        self.keys = list(flows)
        self.jobs = list(flows.values())
        self.ids = np.fromiter(map(ids.__getitem__, self.keys), dtype=np.int64, count=len(self.keys))
        # the levels of these flows in the last reply (the bytes of their array, -1: not decided) and that
        # reply's entries, reused while a new decision leaves them unchanged (the controller's business)
        self.last_reply: tuple[bytes, Any] | None = None


class FlowTable:
    """Flows by id: ``job`` (job id), ``refs`` (live hosts reporting it), ``path`` (link ids, -1 padded),
    ``path_id`` (the path interned: flows crossing the same links in the same order share it)."""

    def __init__(self, capacity: int = 1024, width: int = 4, claims: bool = False) -> None:
        self.claims = claims
        self.owners: dict[str, str] = {}  # source address -> host, learned from first reports (claims)
        self._owned: dict[str, set[str]] = {}  # host -> the addresses it owns (released when it goes stale)
        self.refused: list[tuple[FlowKey, str]] = []  # the last update_host's refused entries (key, owner)
        self.keys: list[FlowKey] = []
        self.ids: dict[FlowKey, int] = {}
        self.jobs = Interner()
        self.links = Interner()
        self.job = np.full(capacity, -1, dtype=np.int32)
        self.refs = np.zeros(capacity, dtype=np.int32)
        self.path = np.full((capacity, width), -1, dtype=np.int32)
        self.routed = np.zeros(capacity, dtype=bool)  # path asked and stored
        self.path_id = np.full(capacity, -1, dtype=np.int32)
        self.path_ids: dict[tuple[int, ...], int] = {}  # link ids of a path -> its id (append-only)
        self._hosts: dict[str, HostFlows] = {}  # host -> the flows of its last report
        self.generation = 0  # ids change at each compaction
        self.version = 0  # changes with the live flows, their jobs or their paths (not with byte counts)

    # ---- reports -------------------------------------------------------------------------------
    def update_host(self, host: str, flows: Iterable[Sequence[Any]]) -> HostFlows:
        """Make ``host``'s flows exactly ``flows`` ((key, job, ...) tuples: pairs or FlowReports); only the
        difference is applied. The common report, the host's last flows in the same order, is told by
        comparing two lists (its decoded keys are the very objects held: no hashing of 100 keys)."""
        held = self._hosts.get(host)
        if held is not None:  # a host new to the table (a whole levels file in decide()) has nothing to compare
            flows = flows if isinstance(flows, (list, tuple)) else list(flows)
            if (len(flows) == len(held.keys) and list(map(_FIRST, flows)) == held.keys
                    and list(map(_SECOND, flows)) == held.jobs):
                return held
        new = dict(map(_KEY_JOB, flows))
        old = held.flows if held else {}
        self.refused = []
        if self.claims:
            self._check_claims(host, new, old)
        if held is not None and new == old:
            return held
        self.version += 1
        for key in old.keys() - new.keys():
            self.refs[self.ids[key]] -= 1
        for key, job in new.items():
            was = old.get(key)
            if was == job:
                continue
            i = self._intern(key)
            if was is None:
                self.refs[i] += 1
            self.job[i] = self.jobs.id(job)
        held = self._hosts[host] = HostFlows(new, self.ids)
        return held

    def _check_claims(self, host: str, new: dict[FlowKey, str], old: Mapping[FlowKey, str]) -> None:
        """Remove from ``new`` the flows (not held already) whose source address another host owns, noting
        them in ``refused``; the host owns the free addresses of the others from now on."""
        owners = self.owners
        for key in [k for k in new if k not in old]:
            src = key.src
            owner = owners.get(src)
            if owner is None:
                owners[src] = host
                self._owned.setdefault(host, set()).add(src)
            elif owner != host:
                del new[key]
                self.refused.append((key, owner))

    def drop_host(self, host: str) -> None:
        """Forget a host's flows (it went stale) and release its addresses; a later report adds them back."""
        for src in self._owned.pop(host, ()):
            if self.owners.get(src) == host:
                del self.owners[src]
        held = self._hosts.pop(host, None)
        if held is not None and len(held.ids):
            np.subtract.at(self.refs, held.ids, 1)
            self.version += 1

    def host(self, host: str) -> HostFlows | None:
        """The flows of ``host``'s last report (None if it never reported or went stale)."""
        return self._hosts.get(host)

    def hosts(self) -> list[str]:
        return list(self._hosts)

    def _intern(self, key: FlowKey) -> int:
        i = self.ids.get(key)
        if i is not None:
            return i
        i = len(self.keys)
        if i == len(self.job):
            self._grow(2 * i)
        self.keys.append(key)
        self.ids[key] = i
        return i

    def _grow(self, capacity: int, width: int | None = None) -> None:
        n, w = len(self.job), self.path.shape[1]
        width = width or w
        job = np.full(capacity, -1, dtype=np.int32)
        refs = np.zeros(capacity, dtype=np.int32)
        path = np.full((capacity, width), -1, dtype=np.int32)
        routed = np.zeros(capacity, dtype=bool)
        path_id = np.full(capacity, -1, dtype=np.int32)
        job[:n], refs[:n], path[:n, :w], routed[:n] = self.job, self.refs, self.path, self.routed
        path_id[:n] = self.path_id
        self.job, self.refs, self.path, self.routed, self.path_id = job, refs, path, routed, path_id

    # ---- paths ---------------------------------------------------------------------------------
    def live(self) -> np.ndarray:
        """Ids of the flows some live host reports, ascending."""
        return np.flatnonzero(self.refs[:len(self.keys)] > 0)

    def unrouted(self, ids: np.ndarray) -> list[FlowKey]:
        """Keys of those flows whose path was never asked."""
        return [self.keys[i] for i in ids[~self.routed[ids]].tolist()]

    def set_links(self, links: Sequence[tuple[FlowKey, tuple[str, ...] | None]]) -> None:
        """Store paths (None: unknown, the flow goes on the shared UNKNOWN_PATH pseudo-link)."""
        self.version += 1
        for key, path in links:
            i = self.ids.get(key)
            if i is None:
                continue  # compacted away meanwhile
            names = path or (UNKNOWN_PATH,)
            if len(names) > self.path.shape[1]:
                self._grow(len(self.job), len(names))
            row = self.path[i]
            row[:] = -1
            link_ids = tuple(self.links.id(n) for n in names)
            row[:len(names)] = link_ids
            self.path_id[i] = self.path_ids.setdefault(link_ids, len(self.path_ids))
            self.routed[i] = True

    def snapshot(self, ids: np.ndarray) -> FlowSnapshot:
        """Copies of the arrays of flows ``ids`` (all routed), for a decision outside the lock."""
        row_by_id = np.full(len(self.keys), -1, dtype=np.int64)
        row_by_id[ids] = np.arange(len(ids))
        return FlowSnapshot(self.ids, self.keys, ids, row_by_id, self.job[ids], self.path[ids],
                            self.jobs.ids, self.jobs.names, self.links.names, self.generation, self.path_id[ids],
                            self.version)

    # ---- housekeeping --------------------------------------------------------------------------
    def compact(self) -> bool:
        """Rebuild without the dead flows once they outnumber the live ones (plus slack)."""
        if len(self.keys) <= COMPACT_SLACK:
            return False  # cannot be due: at most COMPACT_SLACK dead flows
        live = self.live()
        if len(self.keys) - len(live) <= len(live) + COMPACT_SLACK:
            return False
        keys = [self.keys[i] for i in live.tolist()]
        n = len(keys)
        capacity = max(1024, 2 * n)
        job, refs = np.full(capacity, -1, dtype=np.int32), np.zeros(capacity, dtype=np.int32)
        path = np.full((capacity, self.path.shape[1]), -1, dtype=np.int32)
        routed = np.zeros(capacity, dtype=bool)
        path_id = np.full(capacity, -1, dtype=np.int32)
        job[:n], refs[:n], path[:n], routed[:n] = self.job[live], self.refs[live], self.path[live], self.routed[live]
        path_id[:n] = self.path_id[live]
        self.keys, self.ids = keys, {k: i for i, k in enumerate(keys)}
        self.job, self.refs, self.path, self.routed, self.path_id = job, refs, path, routed, path_id
        self._hosts = {h: HostFlows(held.flows, self.ids) for h, held in self._hosts.items()}
        self.generation += 1
        self.version += 1
        return True
