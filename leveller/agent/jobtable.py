"""The agent's table of jobs that came by themselves: registered on the socket, found by a scheduler.

Every entry is one registration (a rank, or a scheduler's job on this host) with an integer id:
its job name, the uid it belongs to, the cgroup the kernel put it in, where its iterations come from
(a tailer + RateTracker pair the agent's loop reads like a --log), optional ideal time, weight and
slack, and a lease. Sources plug in through two calls: ``add`` (a registration, refused with
:class:`Refused` naming the reason) and ``end``; a scheduler source (leveller.agent.slurm, a
Kubernetes pod source) also answers ``claim(pid)``: the job identity and cgroup of a process, so a
registration from inside a scheduler's job is named by the scheduler, not by the client.

Flows are attributed by cgroup id (the eBPF datapath records the sending socket's cgroup, a leaf of
the job's tree): the table keeps a sorted numpy array of the cgroup ids of every entry's tree with
the entry's index beside it, rebuilt when entries change and on every sweep (a job may create
sub-cgroups), so attributing a flow is one binary search whatever the number of jobs.

An entry ends when its cgroup has no process left (``sweep``), when its lease runs out without a
renewal, or when its source ends it (the client said so or closed its connection). Its job then
leaves the next report; its flows are no longer reported, so the controller stops ranking them and
their marks go with the next decision, within the lease of the levels in hand at the latest; the
controller forgets the job once no agent reports it (leveller.controller.registry).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from leveller.agent import peers
from leveller.agent.rate_tracker import RateTracker
from leveller.agent.reports import Classifier, FlowSample, JobClassifier
from leveller.model.flow import FlowKey
from leveller.model.limits import MAX_JOBS

LOG = logging.getLogger("leveller.agent")
SWEEP_S = 0.25  # seconds between two looks at the entries' cgroups and leases
DEFAULT_MAX_ENTRIES = 4 * MAX_JOBS  # registrations (ranks) per host


class Refused(Exception):
    """A registration refused: ``reason`` is the label of leveller_agent_rejected_total."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Tailer(Protocol):
    path: str
    behind: bool
    long_lines: int

    def poll(self) -> list[str]: ...

    def close(self) -> None: ...


class SchedulerSource(Protocol):
    """A source that knows which scheduler job a process belongs to (Slurm, Kubernetes)."""

    name: str

    def claim(self, pid: int) -> tuple[str, str] | None:
        """(job name, absolute cgroup directory) of the scheduler's job process ``pid`` belongs to,
        once that cgroup holds it (None: not a job of this scheduler)."""
        ...

    def scan(self, table: JobTable, now: float) -> None:
        """Add the scheduler's jobs on this host to ``table`` and end those that are gone."""
        ...


@dataclass
class Entry:
    id: int
    source: str  # "socket", "slurm", "kube", ...
    job: str
    uid: int
    cgroup: str  # absolute directory under the cgroup2 mount
    rank: int = 0
    tailer: Tailer | None = None
    tracker: RateTracker | None = None
    ideal: float | None = None
    weight: float | None = None
    slack: float | None = None
    lease_s: float | None = None  # None: no lease (the source ends it)
    expires: float | None = None  # monotonic
    key: Any = None  # the source's own key (a Slurm job id)


class JobTable:
    """Registered jobs of this host (thread-safe: the socket thread adds, the agent's loop reads)."""

    def __init__(self, static: JobClassifier | None = None, static_ideals: Mapping[str, float] | None = None,
                 static_weights: Mapping[str, float] | None = None, max_jobs: int = MAX_JOBS,
                 max_entries: int = DEFAULT_MAX_ENTRIES, monotonic: Callable[[], float] = time.monotonic,
                 on_change: Callable[[str, str | None], None] | None = None) -> None:
        self.static = static if static is not None else Classifier()
        self.static_ideals = dict(static_ideals or {})
        self.static_weights = dict(static_weights or {})
        self.max_jobs, self.max_entries = max_jobs, max_entries
        self.monotonic = monotonic
        self.on_change = on_change  # (job, why it ended / None: added) after an entry came or went
        self.sources: list[SchedulerSource] = []
        self.entries: dict[int, Entry] = {}
        self.ended: Counter[str] = Counter()  # entries ended, by why
        self._next_id = 1
        self._lock = threading.RLock()
        self._ids = np.zeros(0, dtype=np.uint64)  # sorted cgroup ids of every entry's tree
        self._owner = np.zeros(0, dtype=np.int64)  # entry id of each
        self._names: dict[int, str] = {}  # entry id -> job (for job_of)
        self._swept = -1e18
        self.ideal_times: Mapping[str, float] = _View(self, "ideal", self.static_ideals)
        self.weights: Mapping[str, float] = _View(self, "weight", self.static_weights)

    # -- sources ---------------------------------------------------------------------------------------
    def claim(self, pid: int) -> tuple[str, str, str] | None:
        """(source, job, cgroup) of a process a scheduler source knows (None: none does)."""
        for source in self.sources:
            found = source.claim(pid)
            if found is not None:
                return source.name, found[0], found[1]
        return None

    def add(self, source: str, job: str, uid: int, cgroup: str, *, rank: int = 0, tailer: Tailer | None = None,
            tracker: RateTracker | None = None, ideal: float | None = None, weight: float | None = None,
            slack: float | None = None, lease_s: float | None = None, key: Any = None) -> Entry:
        """Add one registration; Refused (``jobs``, ``registrations``, ``name_taken``, ``cgroup_taken``)
        leaves the table as it was."""
        with self._lock:
            if len(self.entries) >= self.max_entries:
                raise Refused("registrations", f"this host has {len(self.entries)} registrations; at most "
                              f"{self.max_entries} (--max-registrations)")
            names = self.jobs_by_uid()
            # a scheduler's source (not "socket") named the job from what the scheduler set up, so the name is
            # its, whichever uid the job's processes run as (a pod's containers may run as several)
            if job in names and names[job] != uid and uid != 0 and source == "socket":
                raise Refused("name_taken", f"job {job!r} is registered on this host by uid {names[job]}; "
                              f"uid {uid} may not report under that name (choose another LEVELLER_JOB)")
            if job not in names and len(names) >= self.max_jobs:
                raise Refused("jobs", f"this host reports {len(names)} jobs; at most {self.max_jobs} "
                              "(--max-jobs)")
            for e in self.entries.values():
                if e.cgroup == cgroup and e.job != job:
                    raise Refused("cgroup_taken", f"cgroup {cgroup} is job {e.job!r}'s; one job per cgroup "
                                  "(start each job in its own cgroup)")
            entry = Entry(self._next_id, source, job, uid, cgroup, rank, tailer, tracker, ideal, weight, slack,
                          lease_s, None if lease_s is None else self.monotonic() + lease_s, key)
            self._next_id += 1
            self.entries[entry.id] = entry
            self._rebuild()
        LOG.info("job %s (rank %d, uid %d, cgroup %s) registered by %s", job, rank, uid, cgroup, source)
        if self.on_change is not None:
            self.on_change(job, None)
        return entry

    def end(self, entry_id: int, why: str) -> Entry | None:
        """Remove one entry (its tailer closed); None if it was gone already."""
        with self._lock:
            entry = self.entries.pop(entry_id, None)
            if entry is None:
                return None
            if entry.tailer is not None:
                entry.tailer.close()
            self.ended[why] += 1
            self._rebuild()
        LOG.info("job %s (rank %d) left: %s", entry.job, entry.rank, why)
        if self.on_change is not None:
            self.on_change(entry.job, why)
        return entry

    def renew(self, entry_id: int) -> None:
        with self._lock:
            entry = self.entries.get(entry_id)
            if entry is not None and entry.lease_s is not None:
                entry.expires = self.monotonic() + entry.lease_s

    def sweep(self, now: float | None = None, force: bool = False) -> list[Entry]:
        """End entries whose lease ran out or whose cgroup emptied; let the sources scan (at most every
        SWEEP_S unless ``force``). Returns the entries ended."""
        mono = self.monotonic() if now is None else now
        if not force and mono - self._swept < SWEEP_S:
            return []
        self._swept = mono
        for source in self.sources:
            source.scan(self, mono)
        with self._lock:
            due = [(e.id, "lease") for e in self.entries.values() if e.expires is not None and e.expires <= mono]
            due += [(e.id, "empty") for e in self.entries.values()
                    if (e.id, "lease") not in due and not peers.populated(e.cgroup)]
        out = [e for i, why in due if (e := self.end(i, why)) is not None]
        with self._lock:
            self._rebuild()  # sub-cgroups made since
        return out

    # -- what the agent's loop reads -------------------------------------------------------------------
    def logs(self) -> list[tuple[Tailer, RateTracker]]:
        """(tailer, tracker) of every entry that has iterations to read."""
        with self._lock:
            return [(e.tailer, e.tracker) for e in self.entries.values() if e.tailer is not None
                    and e.tracker is not None]

    def jobs_by_uid(self) -> dict[str, int]:
        with self._lock:
            return {e.job: e.uid for e in self.entries.values()}

    def job_of(self, key: FlowKey, sample: FlowSample) -> str | None:
        """The static rules' job (--job-cgroup, --job-ports), else the registered job of the flow's cgroup."""
        owner = self.static.job_of(key, sample)
        if owner is not None or not sample.cgroup_id:
            return owner
        ids = self._ids
        i = int(np.searchsorted(ids, np.uint64(sample.cgroup_id)))
        if i < len(ids) and int(ids[i]) == sample.cgroup_id:
            return self._names.get(int(self._owner[i]))
        return None

    def _rebuild(self) -> None:
        """The cgroup id -> entry arrays from the entries' trees. Lock held."""
        pairs = [(cid, e.id) for e in self.entries.values() for cid in peers.cgroup_ids(e.cgroup)]
        ids = np.fromiter((p[0] for p in pairs), dtype=np.uint64, count=len(pairs))
        owner = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
        order = np.argsort(ids, kind="stable")
        self._ids, self._owner = ids[order], owner[order]
        self._names = {e.id: e.job for e in self.entries.values()}

    def snapshot(self) -> list[dict[str, Any]]:
        """The entries as plain data (the agent's --json, status)."""
        with self._lock:
            return [{"id": e.id, "source": e.source, "job": e.job, "rank": e.rank, "uid": e.uid,
                     "cgroup": e.cgroup} for e in self.entries.values()]


class _View(Mapping[str, float]):
    """job -> ideal time / weight: the static flags', else the first registration declaring one."""

    def __init__(self, table: JobTable, attr: str, static: Mapping[str, float]) -> None:
        self.table, self.attr, self.static = table, attr, static

    def _merged(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with self.table._lock:
            for e in self.table.entries.values():
                value = getattr(e, self.attr)
                if value is not None:
                    out.setdefault(e.job, value)
        out.update(self.static)
        return out

    def __getitem__(self, job: str) -> float:
        return self._merged()[job]

    def get(self, job: str, default: Any = None) -> Any:
        return self._merged().get(job, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())
