"""How many registrations per second the agent's registration socket sustains (leveller.agent.regserver).

Client processes in a cgroup of their own (made here under the cgroup2 mount, removed after) each
open a connection, register a job, read the answer and close, as fast as they can, while the
server runs with its rate limit out of the way. Every registration costs the agent what a real one
does: SO_PEERCRED, /proc/PID/cgroup and /proc/PID/stat, the uid check of the cgroup's processes,
the table's cgroup-id arrays rebuilt, and the end when the connection closes.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from leveller.agent.jobtable import JobTable
from leveller.agent.metrics import Rejections
from leveller.agent.peers import cgroup2_mount
from leveller.agent.regserver import Limits, RegistrationServer

CLIENT = textwrap.dedent("""
    import json, socket, sys, time
    path, n, job = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ok = 0
    msg = json.dumps({"op": "register", "job": job}).encode() + b"\\n"
    start = time.monotonic()
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(msg)
        buf = b""
        while not buf.endswith(b"\\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        ok += b'"ok": true' in buf
        s.close()
    print(json.dumps({"ok": ok, "seconds": time.monotonic() - start}))
""")


def run(registrations: int = 2000, clients: int = 2) -> dict[str, Any]:
    """{"registrations", "clients", "accepted", "seconds", "per_s"} of one run."""
    cgroup = Path(cgroup2_mount()) / f"leveller-bench-reg-{secrets.token_hex(3)}"
    cgroup.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="leveller-bench-reg-") as tmp:
            path = str(Path(tmp) / "agent.sock")
            table = JobTable(max_entries=1 << 20)
            limits = Limits(registrations_per_s=1e6, max_connections=1 << 16)
            with RegistrationServer(path, table, Rejections(), limits) as server:
                each = registrations // clients
                script = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
                started = time.monotonic()
                procs = [subprocess.Popen(["sh", "-c", script, "sh", sys.executable, "-c", CLIENT, path, str(each),
                                           "bench"], stdout=subprocess.PIPE, text=True)
                         for i in range(clients)]
                outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
                seconds = time.monotonic() - started
                accepted = server.accepted
    finally:
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    total = each * clients
    return {"registrations": total, "clients": clients, "accepted": accepted,
            "client_ok": sum(o["ok"] for o in outs), "seconds": round(seconds, 3),
            "per_s": round(total / seconds, 1), "load": round(os.getloadavg()[0], 2)}
