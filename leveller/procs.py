"""Processes and commands the project starts: run one and read its error, tell whether a process we
started still runs (its command line carries a marker, against pid reuse), stop it. Shared by the
testbed (OVS daemons), the demos and the experiments."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def run(argv: list[str], env: dict[str, str] | None = None, check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure raises RuntimeError with its stderr (not a UserError)."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def pid_alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and its command line mentions `marker` (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def stop_pid(pid: int, marker: str, grace: float = 3.0) -> None:
    """SIGTERM then SIGKILL a process we started (identified by `marker` in its command line)."""
    if not pid_alive(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid, marker) or _zombie(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def stop_process(proc: subprocess.Popen[Any], grace: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to a child we started if it still runs, give it ``grace`` seconds, then SIGKILL it;
    the child is reaped either way."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
