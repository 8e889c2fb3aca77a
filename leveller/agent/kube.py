"""Kubernetes pods on this node as jobs: a pod's cgroup, named by its ``leveller.io/job`` label.

The kubelet puts every pod in a cgroup of its own under ``kubepods``; its name carries the pod's UID,
spelled by the kubelet's cgroup driver:

- systemd: ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID with _ for ->.slice``
  (``kubepods-besteffort...``; a Guaranteed pod is ``kubepods.slice/kubepods-pod<UID_>.slice``),
  its containers ``cri-containerd-<ID>.scope`` (``crio-<ID>.scope``, ``docker-<ID>.scope``) below;
- cgroupfs: ``kubepods/burstable/pod<UID>/<ID>`` (``besteffort``; Guaranteed: ``kubepods/pod<UID>``).

The pod's metadata comes from the kubelet's pod list (the JSON of its ``/pods`` endpoint: the
read-only port ``http://127.0.0.1:10255/pods``, the authenticated ``https://127.0.0.1:10250/pods``
with a bearer token, or a file holding that JSON). A pod is a LEVELLER job when it has the label
(or annotation) ``leveller.io/job``; ``leveller.io/ideal-time`` and ``leveller.io/weight``
annotations give its ideal iteration time and weight. The job reports as ``NAMESPACE.JOB``: the
pods of one job on different nodes report as one job, and a tenant's namespace cannot report under
another namespace's job. The UID in the cgroup's name ties the pod list to the cgroup; the kubelet
makes both, so neither comes from the pod itself. Each pod is one entry of the agent's job table
(source ``kube``, key the pod UID) with its pod cgroup, whose tree the eBPF datapath counts flows
by; it ends when the cgroup empties or the pod leaves the kubelet's list. Iterations come as for
Slurm's jobs: the hook of a process in the pod registers on the agent's socket and is named here.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveller.agent import peers
from leveller.model.limits import NAME_PATTERN

if TYPE_CHECKING:
    from leveller.agent.jobtable import JobTable

LOG = logging.getLogger("leveller.agent")
JOB_KEY = "leveller.io/job"
IDEAL_KEY = "leveller.io/ideal-time"
WEIGHT_KEY = "leveller.io/weight"
SCAN_S = 1.0  # seconds between two walks of the kubepods tree
PODS_S = 2.0  # seconds between two reads of the pod list
MAX_DEPTH = 6  # directories below the scan root where a pod cgroup may be (kind nests kubepods deeper)
MAX_PODS_BYTES = 64 << 20
_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_SYSTEMD_POD = re.compile(rf"^kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice$")
_CGROUPFS_POD = re.compile(rf"^pod({_UID})$")
_QOS_DIRS = frozenset({"burstable", "besteffort"})


@dataclass(frozen=True)
class PodCgroup:
    uid: str  # the pod's UID as the API spells it (dashes)
    qos: str  # guaranteed | burstable | besteffort
    path: str  # the pod's cgroup, as given (relative to the cgroup2 mount or absolute)


def pod_of_cgroup(path: str) -> PodCgroup | None:
    """The pod whose cgroup is ``path`` or an ancestor of it (a container's scope), under either
    cgroup driver; None when ``path`` is no pod's. ``path`` may be relative to a cgroup namespace
    (``/../../kubepods-pod<UID_>.slice/...``, as /proc/PID/cgroup reads in a container): a systemd pod
    slice names itself, a cgroupfs ``pod<UID>`` counts under ``kubepods``, its QoS directory or ``..``."""
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        m = _SYSTEMD_POD.match(part)
        if m:
            return PodCgroup(m.group(2).replace("_", "-").lower(), m.group(1) or "guaranteed",
                             "/".join(parts[: i + 1]))
        m = _CGROUPFS_POD.match(part)
        if m and i > 0 and (parts[i - 1].endswith("kubepods") or parts[i - 1] in _QOS_DIRS or parts[i - 1] == ".."):
            qos = parts[i - 1] if parts[i - 1] in _QOS_DIRS else "guaranteed"
            return PodCgroup(m.group(1).replace("_", "-").lower(), qos, "/".join(parts[: i + 1]))
    return None


def pod_cgroups(root: str) -> Iterator[PodCgroup]:
    """Every pod cgroup below directory ``root`` (absolute paths), under either driver; the walk enters
    only ``kube*`` directories and the cgroupfs QoS directories, and stops at a pod."""
    def walk(directory: str, depth: int, under_kubepods: bool) -> Iterator[PodCgroup]:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if under_kubepods:
                found = pod_of_cgroup(entry.path)
                if found is not None and found.path == entry.path:
                    yield found
                    continue
            name = entry.name
            if depth < MAX_DEPTH and ("kube" in name or (under_kubepods and name in _QOS_DIRS)):
                yield from walk(entry.path, depth + 1, under_kubepods or name.startswith("kubepods")
                                or name.endswith("kubepods") or "-kubepods" in name)

    yield from walk(root.rstrip("/") or "/", 0, "kubepods" in root)


@dataclass(frozen=True)
class PodJob:
    """A pod that is a LEVELLER job: its report name and what its annotations declare."""

    uid: str
    job: str  # NAMESPACE.JOB
    ideal: float | None
    weight: float | None


class PodError(ValueError):
    """A pod's LEVELLER label or annotation is not usable (the message names the pod, key and value)."""


def _positive(pod: str, key: str, raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < 1e9:
        raise PodError(f"pod {pod}: annotation {key}={raw!r}: must be a number of seconds > 0"
                       if key == IDEAL_KEY else f"pod {pod}: annotation {key}={raw!r}: must be a number > 0")
    return value


def pod_job(pod: dict[str, Any]) -> PodJob | None:
    """The job of one item of the kubelet's pod list (None: not a LEVELLER job); PodError when its
    label or annotations are bad."""
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    name = labels.get(JOB_KEY, notes.get(JOB_KEY))
    if name is None:
        return None
    namespace, uid = str(meta.get("namespace") or "default"), str(meta.get("uid") or "")
    where = f"{namespace}/{meta.get('name', '?')}"
    if not re.fullmatch(_UID, uid):
        raise PodError(f"pod {where}: metadata.uid {uid!r} is not a pod UID")
    job = f"{namespace}.{name}"
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(job):
        raise PodError(f"pod {where}: {JOB_KEY}={name!r}: NAMESPACE.JOB must be 1-64 of A-Z a-z 0-9 _ . : -")
    return PodJob(uid.lower(), job, _positive(where, IDEAL_KEY, notes.get(IDEAL_KEY)),
                  _positive(where, WEIGHT_KEY, notes.get(WEIGHT_KEY)))


def read_pod_list(source: str, token_file: str | None = None, ca_file: str | None = None,
                  timeout: float = 5.0) -> list[dict[str, Any]]:
    """The items of the kubelet's pod list from a URL (http, or https with a bearer token and CA) or a
    file; OSError / ValueError naming the source when it cannot be read or is not a pod list."""
    if source.startswith(("http://", "https://")):
        headers = {}
        if token_file:
            headers["Authorization"] = "Bearer " + Path(token_file).read_text().strip()
        context = None
        if source.startswith("https://"):
            context = ssl.create_default_context(cafile=ca_file)
        request = urllib.request.Request(source, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
            raw = reply.read(MAX_PODS_BYTES + 1)
    else:
        with open(source, "rb") as f:
            raw = f.read(MAX_PODS_BYTES + 1)
    if len(raw) > MAX_PODS_BYTES:
        raise ValueError(f"{source}: pod list over {MAX_PODS_BYTES} bytes")
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise ValueError(f"{source}: not a pod list (a JSON object with an 'items' list, as the kubelet's /pods)")
    return [p for p in data["items"] if isinstance(p, dict)]


class KubeSource:
    """Finds this node's pods that are LEVELLER jobs; answers which pod's job a process is in."""

    name = "kube"

    def __init__(self, pods: str, cgroup_root: str | None = None, token_file: str | None = None,
                 ca_file: str | None = None, on_reject: Callable[..., None] | None = None,
                 proc: str = "/proc") -> None:
        root = cgroup_root or peers.cgroup2_mount()
        self.root = root if os.path.isabs(root) else os.path.join(peers.cgroup2_mount(), root)
        self.pods_source, self.token_file, self.ca_file = pods, token_file, ca_file
        self.on_reject, self.proc = on_reject, proc
        self.jobs: dict[str, PodJob] = {}  # pod UID -> job, from the latest pod list read
        self.paths: dict[str, str] = {}  # pod UID -> its cgroup (absolute), from the latest walk
        self._read, self._scanned = -1e18, -1e18
        self._bad: set[str] = set()  # pods already refused (one refusal per pod, not one per read)
        self.read_errors = 0

    def refresh(self, now: float, force: bool = False) -> None:
        """Read the pod list again (at most every PODS_S); a failed read keeps the last one."""
        if not force and now - self._read < PODS_S:
            return
        self._read = now
        try:
            items = read_pod_list(self.pods_source, self.token_file, self.ca_file)
        except (OSError, ValueError) as exc:
            self.read_errors += 1
            if self.read_errors in (1, 10) or self.read_errors % 100 == 0:
                LOG.warning("pod list %s: %s (read errors: %d; the last list read stays)", self.pods_source,
                            exc, self.read_errors)
            return
        jobs = {}
        for item in items:
            try:
                found = pod_job(item)
            except PodError as exc:
                uid = str((item.get("metadata") or {}).get("uid"))
                if uid not in self._bad and self.on_reject is not None:
                    self.on_reject("registration", str(exc), reason="bad_pod")
                self._bad.add(uid)
                continue
            if found is not None:
                jobs[found.uid] = found
        self.jobs = jobs

    def claim(self, pid: int) -> tuple[str, str] | None:
        try:
            path = peers.cgroup_of(pid, self.proc)
        except OSError:
            return None
        pod = pod_of_cgroup(path)
        if pod is None:
            return None
        job = self.jobs.get(pod.uid)
        if job is None:
            self.refresh(0.0, force=True)  # a pod started since the last read
            job = self.jobs.get(pod.uid)
        where = self.paths.get(pod.uid) if job is not None else None
        if job is not None and where is None:
            self.paths = {p.uid: p.path for p in pod_cgroups(self.root)}
            where = self.paths.get(pod.uid)
        if job is None or where is None:
            return None
        return job.job, where

    def scan(self, table: JobTable, now: float) -> None:
        if now - self._scanned < SCAN_S:
            return
        self._scanned = now
        from leveller.agent.jobtable import Refused

        self.refresh(now)
        # the pods' own entries (keyed by pod UID), not the registrations this source named (key None)
        known = {e.key: e for e in table.entries.values() if e.source == self.name and e.key is not None}
        seen = set()
        found = list(pod_cgroups(self.root))
        self.paths = {p.uid: p.path for p in found}
        for pod in found:
            job = self.jobs.get(pod.uid)
            if job is None:
                continue
            seen.add(pod.uid)
            if pod.uid in known or not peers.populated(pod.path):
                continue
            try:
                table.add(self.name, job.job, 0, pod.path, ideal=job.ideal, weight=job.weight, key=pod.uid)
            except Refused as exc:
                if self.on_reject is not None:
                    self.on_reject("registration", f"pod {pod.uid}: {exc}", reason=exc.reason)
        for uid, entry in known.items():
            if uid not in seen:  # the pod left the kubelet's list, or its cgroup went
                table.end(entry.id, "pod_gone")
