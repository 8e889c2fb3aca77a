"""Slurm's jobs on this host, found the way a node exposes them: the processes under each slurmstepd.

Every step of a Slurm job on a node runs under a ``slurmstepd`` process of root's whose title names
it, ``slurmstepd: [JOBID.STEP]``. That title is set by root, so it is the job's identity; the
processes below it are the job's (whatever they claim in their environment). The job's name is
SLURM_JOB_NAME of one of its processes' initial environment (the same on every node), and the job is
reported as ``NAME.JOBID`` (cut to the name rule): the ranks of one job on different hosts report as
one job with no configuration shared between the hosts.

This works with any ProctrackType, with and without systemd (docs/operations.md names the plugins:
proctrack/linuxproc, task/none, no cgroup plugin, which is what a host without systemd or with a
hybrid cgroup layout can run). The eBPF datapath attributes a flow by its socket's cgroup, so the
source gives each job a cgroup of its own, ``<cgroup2 mount>/<root>/slurm-JOBID``, and moves the
job's processes there: when it scans (every SCAN_S) and at once when a process of the job registers
on the socket (``claim``: the hook and the job emulator register before their first connection, so
all their connections are counted). The job ends when that cgroup empties (scancel, the job's end);
the source then removes the cgroup. With ``netns``, only the slurmstepd processes in that network
namespace are this host's (several emulated hosts on one machine).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from leveller.agent import peers
from leveller.model.limits import NAME_PATTERN

if TYPE_CHECKING:
    from leveller.agent.jobtable import JobTable

LOG = logging.getLogger("leveller.agent")
SCAN_S = 1.0
_TITLE = re.compile(rb"^slurmstepd: \[(\d+)\.([A-Za-z0-9_]+)\]")
_BAD = re.compile(r"[^A-Za-z0-9_.:-]")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str


def read_procs(proc: str = "/proc") -> dict[int, Proc]:
    """Every process's parent and command name (from /proc/PID/stat)."""
    out = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            raw = Path(proc, name, "stat").read_bytes()
        except OSError:
            continue
        head, _, tail = raw.rpartition(b")")
        comm = head.split(b"(", 1)[1].decode(errors="replace") if b"(" in head else ""
        fields = tail.split()
        if len(fields) > 2:
            out[int(name)] = Proc(int(name), int(fields[1]), comm)
    return out


def job_name(job_id: int, name: str | None) -> str:
    """The report name of Slurm job ``job_id`` named ``name``: NAME.JOBID within the name rule."""
    suffix = f".{job_id}"
    clean = _BAD.sub("_", name or "slurm")[: 64 - len(suffix)] or "slurm"
    out = clean + suffix
    assert NAME_PATTERN.fullmatch(out)
    return out


class SlurmSource:
    """Finds this host's Slurm jobs; gives each a cgroup; answers which job a process is in."""

    name = "slurm"

    def __init__(self, root: str = "leveller", netns: str | None = None,
                 on_reject: Callable[..., None] | None = None, proc: str = "/proc") -> None:
        mount = peers.cgroup2_mount()
        self.base = root if root.startswith(mount + "/") else os.path.join(mount, root.strip("/"))
        self.proc, self.on_reject = proc, on_reject
        self.netns_ino = os.stat(f"/run/netns/{netns}").st_ino if netns else None
        self._scanned = -1e18
        self.moved = 0  # processes moved into job cgroups

    def close(self) -> None:
        """Remove the job cgroups that are empty (a live job's stays: its flows keep their cgroup)."""
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.base):
                if entry.is_dir() and entry.name.startswith("slurm-"):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)

    def _ours(self, pid: int) -> bool:
        if self.netns_ino is None:
            return True
        try:
            return os.stat(f"{self.proc}/{pid}/ns/net").st_ino == self.netns_ino
        except OSError:
            return False

    def _steps(self, procs: dict[int, Proc]) -> dict[int, int]:
        """slurmstepd pid -> job id, for root's slurmstepd processes of this host."""
        out = {}
        for p in procs.values():
            if p.comm != "slurmstepd":
                continue
            try:
                title = Path(self.proc, str(p.pid), "cmdline").read_bytes()
                if peers.uid_of(p.pid, self.proc) != 0:
                    continue
            except OSError:
                continue
            m = _TITLE.match(title)
            if m and self._ours(p.pid):
                out[p.pid] = int(m.group(1))
        return out

    def _jobs(self, procs: dict[int, Proc]) -> dict[int, list[int]]:
        """job id -> the pids below its slurmstepd processes on this host."""
        steps = self._steps(procs)
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        out: dict[int, list[int]] = {}
        for stepd, job in steps.items():
            todo, pids = list(children.get(stepd, ())), out.setdefault(job, [])
            while todo:
                pid = todo.pop()
                if pid in steps:
                    continue
                pids.append(pid)
                todo.extend(children.get(pid, ()))
        return out

    def _cgroup(self, job: int) -> str:
        path = os.path.join(self.base, f"slurm-{job}")
        os.makedirs(path, exist_ok=True)
        return path

    def _adopt(self, job: int, pids: list[int]) -> tuple[str, str, int] | None:
        """Move ``pids`` into the job's cgroup; (report name, cgroup, uid) or None if all are gone."""
        cgroup = self._cgroup(job)
        inside = set(peers.cgroup_procs(cgroup))
        uid, name = None, None
        for pid in pids:
            try:
                if uid is None:
                    uid = peers.uid_of(pid, self.proc)
                if name is None:
                    name = _environ(f"{self.proc}/{pid}/environ").get("SLURM_JOB_NAME")
                if pid not in inside:
                    Path(cgroup, "cgroup.procs").write_text(str(pid))
                    self.moved += 1
            except OSError:
                continue  # exited meanwhile
        if uid is None:
            return None
        return job_name(job, name), cgroup, uid

    def claim(self, pid: int) -> tuple[str, str] | None:
        procs = read_procs(self.proc)
        steps = self._steps(procs)
        at, seen = pid, set()
        while at in procs and at not in seen and at > 1:
            seen.add(at)
            at = procs[at].ppid
            if at in steps:
                job = steps[at]
                adopted = self._adopt(job, self._jobs(procs).get(job, [pid]))
                return None if adopted is None else (adopted[0], adopted[1])
        return None

    def scan(self, table: JobTable, now: float) -> None:
        if now - self._scanned < SCAN_S:
            return
        self._scanned = now
        from leveller.agent.jobtable import Refused

        procs = read_procs(self.proc)
        known = {e.key: e for e in table.entries.values() if e.source == self.name and e.key is not None}
        for job, pids in self._jobs(procs).items():
            if not pids:
                continue
            adopted = self._adopt(job, pids)
            if adopted is None or job in known:
                continue
            name, cgroup, uid = adopted
            try:
                table.add(self.name, name, uid, cgroup, key=job)
            except Refused as exc:
                if self.on_reject is not None:
                    self.on_reject("registration", f"Slurm job {job}: {exc}", reason=exc.reason)
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.base):  # jobs gone: their cgroups
                if entry.is_dir() and entry.name.startswith("slurm-") and not peers.populated(entry.path):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)


def _environ(path: str) -> dict[str, str]:
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out
