"""Build an agent's report: jobs from the rate trackers, flows from the datapath, attributed to jobs.

A flow belongs to a job by its cgroup (the datapath records the sending
socket's cgroup id, which on cgroup v2 is the inode number of the cgroup's
directory) or by a port range (the job emulator's workers listen on
consecutive ports). Flows of jobs this host has no progress for are left out,
and so are flows that match no rule: the controller only ranks what it can score.

A report is built so that the controller accepts it: every job passes the
controller's own checks (leveller.model.checks.check_job and the
future-time rule) or is left out, and the lists stay within the schema's
limits. One bad job never costs the host its other jobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from leveller.agent.rate_tracker import JobProgress
from leveller.errors import UserError
from leveller.jobs.logline import check_job_name
from leveller.model.checks import check_job, check_not_future
from leveller.model.errors import FieldError
from leveller.model.flow import FlowKey
from leveller.model.limits import MAX_DSCP_BYTES, MAX_FLOWS, MAX_JOBS
from leveller.model.messages import FlowReport, JobReport, Report

MAX_BYTES = 2**63 - 1  # the schema's bound on a flow's byte counter


@dataclass(frozen=True)
class FlowSample:
    """What the datapath knows about one flow."""

    bytes: int
    cgroup_id: int = 0
    dscp_bytes: tuple[tuple[int, int], ...] = ()  # (DSCP the packets left with, bytes), from the datapath


class FlowSource(Protocol):
    """Per-flow byte counters (the eBPF datapath satisfies it through enforce_bpf.BpfFlowSource)."""

    def read_flows(self) -> Mapping[FlowKey, FlowSample]: ...


@dataclass(frozen=True)
class PortRule:
    job: str
    low: int
    high: int

    def matches(self, key: FlowKey) -> bool:
        return self.low <= key.sport <= self.high or self.low <= key.dport <= self.high


@dataclass(frozen=True)
class CgroupRule:
    job: str
    cgroup_id: int


def parse_port_rule(text: str) -> PortRule:
    """``JOB=LOW-HIGH`` or ``JOB=PORT``."""
    job, _, ports = text.partition("=")
    lo, _, hi = ports.partition("-")
    try:
        low, high = int(lo), int(hi or lo)
    except ValueError:
        raise UserError(f"--job-ports {text!r}: expected JOB=LOW-HIGH or JOB=PORT") from None
    if not 0 < low <= high <= 65535:
        raise UserError(f"--job-ports {text!r}: ports must satisfy 0 < LOW <= HIGH <= 65535")
    return PortRule(check_job_name(job), low, high)


def parse_cgroup_rule(text: str) -> CgroupRule:
    """``JOB=/sys/fs/cgroup/.../DIR`` -> the cgroup id (inode of the cgroup v2 directory)."""
    job, _, path = text.partition("=")
    try:
        st = os.stat(path)
    except OSError as exc:
        raise UserError(f"--job-cgroup {text!r}: cannot stat {path!r} ({exc.strerror})") from None
    return CgroupRule(check_job_name(job), st.st_ino)


class JobClassifier(Protocol):
    """Anything that names the job of a flow (None: not a job's)."""

    def job_of(self, key: FlowKey, sample: FlowSample) -> str | None: ...


@dataclass(frozen=True)
class Classifier:
    """Maps a flow to its job: cgroup rules first, then port rules, in the order given."""

    cgroups: tuple[CgroupRule, ...] = ()
    ports: tuple[PortRule, ...] = ()

    def job_of(self, key: FlowKey, sample: FlowSample) -> str | None:
        for c in self.cgroups:
            if sample.cgroup_id and c.cgroup_id == sample.cgroup_id:
                return c.job
        for p in self.ports:
            if p.matches(key):
                return p.job
        return None


def merge_progress(sources: Iterable[Mapping[str, JobProgress]]) -> dict[str, JobProgress]:
    """Combine one job seen in several logs: most iterations, earliest start, union of recent ends."""
    merged: dict[str, JobProgress] = {}
    for jobs in sources:
        for name, p in jobs.items():
            m = merged.setdefault(name, JobProgress(name))
            m.iterations = max(m.iterations, p.iterations)
            starts = [s for s in (m.start_time, p.start_time) if s is not None]
            m.start_time = min(starts) if starts else None
            lasts = [s for s in (m.last_time, p.last_time) if s is not None]
            m.last_time = max(lasts) if lasts else None
            recent = dict(m.recent)
            recent.update({n: t for n, t in p.recent if n not in recent})
            m.recent.clear()
            m.recent.extend(sorted(recent.items())[-m.recent.maxlen:] if m.recent.maxlen else sorted(recent.items()))
    return merged


def build_report(host: str, progress: Mapping[str, JobProgress], flows: Mapping[FlowKey, FlowSample],
                 classifier: JobClassifier, ideal_times: Mapping[str, float], now: float,
                 on_reject: Callable[[str, str], None] | None = None,
                 weights: Mapping[str, float] | None = None) -> Report:
    """The report for this host as the controller will accept it (checked at ``now``, this host's clock).

    Jobs without a known start time are not reported yet; a job the controller's checks would refuse, or
    beyond the schema's MAX_JOBS / MAX_FLOWS, is left out and passed to ``on_reject(field, message)``."""
    jobs: list[JobReport] = []
    for name in sorted(progress):
        p = progress[name]
        if p.start_time is None:
            continue
        recent = tuple((n, t) for n, t in p.recent if 1 <= n <= p.iterations and t >= p.start_time)
        job = JobReport(name, p.iterations, p.start_time, ideal_times.get(name), recent,
                        (weights or {}).get(name))
        field = f"jobs[{len(jobs)}]"
        try:
            if len(jobs) >= MAX_JOBS:
                raise FieldError("jobs", f"{name!r} would be job number {len(jobs) + 1}; at most {MAX_JOBS}")
            job = check_job(job, field)  # the controller's own checks
            check_not_future(job.start_time, f"{field}.start_time", now)
        except FieldError as exc:
            if on_reject is not None:
                on_reject(exc.field, f"job {name!r} left out of the report: {exc}")
            continue
        jobs.append(job)
    known = {j.job for j in jobs}
    out = []
    for key in sorted(flows):
        owner = classifier.job_of(key, flows[key])
        if owner in known:
            out.append(FlowReport(key, owner, min(flows[key].bytes, MAX_BYTES)))
    if len(out) > MAX_FLOWS:
        if on_reject is not None:
            on_reject("flows", f"{len(out) - MAX_FLOWS} of {len(out)} flows left out of the report: "
                      f"at most {MAX_FLOWS}")
        out = out[:MAX_FLOWS]
    by_dscp = [(i, dscp, min(nbytes, MAX_BYTES)) for i, f in enumerate(out)
               for dscp, nbytes in flows[f.key].dscp_bytes if 0 <= dscp <= 63]
    return Report(host, tuple(jobs), tuple(out), dscp_bytes=tuple(by_dscp[:MAX_DSCP_BYTES]))
