"""Mutual TLS with real processes on loopback: a `leveller controller` with --tls-*, and four real
`leveller agent`s reporting as host h1: with h1's certificate (accepted), with h2's (refused: the
certificate names another host), with a certificate of another CA (refused in the handshake), and
with no certificate at all, only the lab HMAC secret (refused). `leveller status` with the admin
certificate shows h1 and nothing else. The controller and the TLS agents have no HMAC secret (TLS
only). No datapath: the reports carry jobs, not flows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from leveller.rpc.certs import init

from .support import free_port, json_lines, leveller_proc, wait_until

SECRET_ENV = {"LEVELLER_SECRET": "lab-secret-0123456789abcdef"}


def _tls(d: Path, name: str, ca: Path | None = None) -> list[str]:
    return ["--tls-cert", str(d / f"{name}.pem"), "--tls-key", str(d / f"{name}.key"),
            "--tls-ca", str((ca or d) / "ca.pem")]


def test_only_the_hosts_own_certificate_from_our_ca_is_accepted(tmp_path: Path) -> None:
    ours, other = tmp_path / "ours", tmp_path / "other"
    init(ours, ("h1", "h2"))
    init(other, ("h1",))
    log = tmp_path / "job.log"
    log.write_text("".join(f"leveller-iter job=j1 iter={i} t={time.time() + i * 0.2:.3f}\n" for i in range(5)))
    port = free_port()
    address = f"127.0.0.1:{port}"
    agents = {"own": _tls(ours, "h1"), "other-host": _tls(ours, "h2"), "other-ca": _tls(other, "h1", ca=ours),
              "no-cert": []}
    with leveller_proc(tmp_path / "controller.out", "controller", "--listen", address, "--tau", "0.3",
                       *_tls(ours, "controller")) as ctl:
        wait_until(lambda: "controller listening" in ctl.output(), 30, lambda: f"controller up: {ctl.output()}")
        procs = {name: leveller_proc(tmp_path / f"{name}.out", "agent", "--controller", address, "--host", "h1",
                                     "--log", str(log), "--from-start", "--ideal-time", "j1=0.2", "--interval",
                                     "0.3", "--timeout", "2", "--json", *argv,
                                     env=SECRET_ENV if name == "no-cert" else None)
                 for name, argv in agents.items()}
        try:
            for name in agents:
                wait_until(lambda name=name: len(json_lines(tmp_path / f"{name}.out")) >= 2, 40,
                           lambda name=name: f"{name}: two reports: {procs[name].output()} controller: {ctl.output()}")
            results = {name: json_lines(tmp_path / f"{name}.out") for name in agents}
            status = subprocess.run([sys.executable, "-m", "leveller.cli", "status", "--controller", address,
                                     "--json", *_tls(ours, "admin")], capture_output=True, text=True, timeout=30)
            plain = subprocess.run([sys.executable, "-m", "leveller.cli", "status", "--controller", address,
                                    "--json"], capture_output=True, text=True, timeout=30,
                                   env=dict(os.environ, **SECRET_ENV))
        finally:
            for p in procs.values():
                p.__exit__()
    assert all(r["ok"] for r in results["own"]), results["own"]
    assert {r["controller"] for r in results["own"]} == {address}
    assert not any(r["ok"] for r in results["other-host"])
    assert "PERMISSION_DENIED" in results["other-host"][-1]["error"], results["other-host"][-1]
    assert "'h1' is not named in the client certificate" in results["other-host"][-1]["error"]
    for name in ("other-ca", "no-cert"):  # the handshake fails: nothing reaches the service
        assert not any(r["ok"] for r in results[name]), results[name]
        assert "UNAVAILABLE" in results[name][-1]["error"], results[name][-1]
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert [a["host"] for a in shown["agents"]] == ["h1"]
    assert [j["job"] for j in shown["jobs"]] == ["j1"]
    assert plain.returncode == 2 and "UNAVAILABLE" in plain.stderr, plain
