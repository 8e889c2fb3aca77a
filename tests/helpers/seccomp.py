"""A unit's SystemCallFilter= applied to a command without systemd (PID 1 is not systemd here).

The allow-list's groups are expanded with `systemd-analyze syscall-filter` (the same tables systemd
uses), and a launcher run by Debian's python3 with python3-seccomp loads a seccomp filter that
kills the process on any other system call (SCMP_ACT_KILL_PROCESS: systemd's default action), then
execs the command: the filter holds for it and every process it starts, as under the unit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

SYSTEM_PYTHON = Path("/usr/bin/python3")
LAUNCHER = r"""
import json, os, sys
import seccomp
names, argv = json.loads(sys.argv[1]), sys.argv[2:]
f = seccomp.SyscallFilter(defaction=seccomp.KILL_PROCESS)
for name in names:
    try:
        f.add_rule(seccomp.ALLOW, name)
    except (RuntimeError, ValueError, OSError):
        pass  # a system call of another architecture
f.load()
os.execv(argv[0], argv)
"""


def syscall_groups() -> dict[str, list[str]]:
    """systemd's groups: name -> members (system calls and @groups)."""
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def allowed(filter_line: str) -> set[str]:
    """The system calls an allow-list SystemCallFilter= value permits (groups expanded), with the few systemd
    always permits."""
    assert not filter_line.startswith("~"), "an allow-list is expected"
    groups = syscall_groups()
    out = {"execve", "exit", "exit_group", "getrlimit", "rt_sigreturn", "sigreturn"}
    todo = filter_line.split()
    seen: set[str] = set()
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        if item.startswith("@"):
            todo.extend(groups[item])
        else:
            out.add(item)
    return out


def available() -> str | None:
    """Why a filtered launch cannot be made here (None: it can)."""
    if shutil.which("systemd-analyze") is None:
        return "systemd-analyze is not installed"
    probe = subprocess.run([str(SYSTEM_PYTHON), "-c", "import seccomp"], capture_output=True)
    if probe.returncode != 0:
        return "Debian's python3-seccomp is not installed (scripts/setup-system.sh installs it)"
    return None


def filtered(filter_line: str, argv: list[str]) -> list[str]:
    """``argv`` run under the seccomp equivalent of ``SystemCallFilter=filter_line``."""
    return [str(SYSTEM_PYTHON), "-c", LAUNCHER, json.dumps(sorted(allowed(filter_line))), *argv]
