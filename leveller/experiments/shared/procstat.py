"""Resident memory, open file descriptors and CPU time of a running process, from /proc; which of the
project's services a process is, and what a torn-down run left behind.

Linux only; reading another user's process needs root (the soak runs as root).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process: at ``t`` (time.monotonic()), RSS in KiB, open fds, CPU seconds used."""

    t: float
    rss_kib: int
    fds: int
    cpu_s: float


def cmdline(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """A process's argv ([] if it is gone, or a zombie)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


def read_proc(pid: int, t: float, proc: Path = Path("/proc")) -> ProcSample | None:
    """The process's current RSS (VmRSS), fd count and user+system CPU time; None if it is gone
    (or a zombie: its memory and files are already released)."""
    base = proc / str(pid)
    try:
        status = (base / "status").read_text()
        stat = (base / "stat").read_text()
        fds = len(os.listdir(base / "fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    if rss is None:  # kernel threads have no VmRSS
        return None
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15 of stat)
    return ProcSample(t, rss, fds, cpu)


def role_of(argv: list[str]) -> str | None:
    """'controller', 'agent-<host>' or 'sdn' for a `leveller` service's command line, else None."""
    if "leveller.cli" not in argv:
        return None
    rest = argv[argv.index("leveller.cli") + 1:]
    if not rest:
        return None
    if rest[0] == "agent" and "--host" in rest[:-1]:
        return f"agent-{rest[rest.index('--host') + 1]}"
    return rest[0] if rest[0] in ("controller", "sdn") else None


def leftovers(name: str, markers: list[Path]) -> dict[str, list[str]]:
    """What a torn-down run left: its namespaces, processes whose command line names one of
    ``markers`` (the run's directories: OVS, SDN app, controller, agents, job workers), the directories."""
    from pyroute2 import netns

    namespaces = sorted(ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-"))
    procs = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            line = " ".join(cmdline(int(entry.name)))
            if any(str(m) in line for m in markers) and read_proc(int(entry.name), 0.0) is not None:
                procs.append(f"{entry.name}: {line.strip()[:160]}")
    return {"namespaces": namespaces, "processes": procs, "files": [str(m) for m in markers if m.exists()]}
