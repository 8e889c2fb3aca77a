"""Live: the SDN app under deploy/systemd/leveller-sdn.service's SystemCallFilter (issue 41, finding 8).

`leveller sdn` runs under a seccomp filter equivalent to the unit's allow-list (tests/helpers/seccomp.py;
any other system call kills it with SIGSYS, as systemd's default action does) and serves its API: os-ken,
eventlet, its OS thread pool and the OpenFlow listener need nothing beyond the service set. No root needed
for this part (no switch connects)."""

from __future__ import annotations

import json
import sys
import urllib.request
from configparser import ConfigParser
from pathlib import Path

from tests.helpers import seccomp

from .support import Proc, free_port, wait_until

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "leveller-sdn.service"


def _health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def test_the_sdn_app_serves_under_its_units_system_call_filter(tmp_path: Path) -> None:
    why = seccomp.available()
    assert why is None, why
    cp = ConfigParser(strict=False, interpolation=None)
    cp.read_string(UNIT.read_text())
    svc = cp["Service"]
    port, of_port = free_port(), free_port()
    argv = seccomp.filtered(svc["SystemCallFilter"], [sys.executable, "-m", "leveller.cli", "sdn", "--topology",
                                                      "dumbbell", "--api", f"127.0.0.1:{port}", "--of-port",
                                                      str(of_port)])
    with Proc(tmp_path / "sdn.out", argv) as sdn:
        wait_until(lambda: not sdn.alive() or _health(port) is not None, 60,
                   lambda: f"the SDN app's API: {sdn.output()}")
        assert sdn.alive(), f"exit {sdn.p.returncode} (-31: a system call outside the filter): {sdn.output()}"
        status = Path(f"/proc/{sdn.p.pid}/status").read_text()
        assert "Seccomp:\t2" in status  # filtered
        threads = int(next(x for x in status.splitlines() if x.startswith("Threads:")).split()[1])
        assert threads < int(svc["TasksMax"]) // 4
        health = _health(port)
        assert health is not None and health["queue_mode"] == "set_queue"
        assert sdn.interrupt() in (0, 130), sdn.output()
