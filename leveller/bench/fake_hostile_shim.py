"""A FAKE RDMA shim served by a job's user to stall the root agent: what `leveller bench shim --hostile` runs.

Any process of a user who may put a socket into the shim directory can serve the shim's control
protocol (shim/control.c) without running the shim or having a QP at all. This one does, in one of
two ways (``--mode``):

- ``no-lease``: ``list`` is answered at once with ``--qps`` connected QPs of job ``--job`` (so the
  controller levels them and the agent talks to this process at every report), ``set_tc`` at once
  with success, and ``lease`` never: the connection is held open, unanswered, until the agent gives up;
- ``silent``: nothing is ever answered (a socket that accepts and says nothing).

Every connection gets its own thread, so the agent's every attempt costs it its full timeout.
Run as ``python -m leveller.bench.fake_hostile_shim --socket PATH ...``; it prints ``READY`` once it
listens and serves until killed. Nothing here touches a NIC, a QP or a route.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from typing import Any

MODES = ("no-lease", "silent")
HOLD_S = 120.0  # an unanswered connection is held at most this long (the agent gives up far sooner)


def listing(pid: int, job: str, qps: int, base: int = 0x300) -> dict[str, Any]:
    """A valid ``list`` reply: ``qps`` connected RoCEv2 QPs of ``job`` (IPv4-mapped GIDs 10.99.0.1 > .2)."""
    return {"ok": True, "pid": pid, "job": job, "job_tc": None, "qps": [
        {"qp": base + i, "state": "RTS", "tc": 0, "connected": True,
         "local": {"qpn": base + i, "port": 1, "gid": "::ffff:10.99.0.1"},
         "remote": {"qpn": base + i + 0x1000, "lid": 0, "gid": "::ffff:10.99.0.2"},
         "resurrections": 0, "failures": 0, "last_pause_us": 0.0, "last_error": None} for i in range(qps)]}


def set_tc_reply(request: dict[str, Any]) -> dict[str, Any]:
    """A successful ``set_tc`` reply for the one QP asked (``job`` requests: no QP touched)."""
    qp = request.get("qp")
    if not isinstance(qp, int):
        return {"ok": True, "job_match": False, "results": []}
    tc = request.get("tc", 0)
    return {"ok": True, "job_match": True, "results": [
        {"qp": qp, "ok": True, "old_tc": 0, "tc": tc, "changed": True, "deferred": False, "pause_us": 1.0,
         "drain_us": 0.5}]}


def answer(conn: socket.socket, mode: str, job: str, qps: int) -> None:
    """Serve one connection of the agent as ``mode`` says (see the module docstring)."""
    conn.settimeout(HOLD_S)
    try:
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        request = json.loads(data.split(b"\n", 1)[0])
        op = request.get("op") if isinstance(request, dict) else None
        if mode == "no-lease" and op == "list":
            conn.sendall(json.dumps(listing(os.getpid(), job, qps)).encode() + b"\n")
        elif mode == "no-lease" and op == "set_tc":
            conn.sendall(json.dumps(set_tc_reply(request)).encode() + b"\n")
        while conn.recv(4096):  # lease (or anything in silent mode): hold until the agent closes
            pass
    except (OSError, ValueError):
        pass
    finally:
        conn.close()


def serve(path: str, mode: str, job: str, qps: int) -> None:
    """Listen on the unix socket ``path`` (replacing a stale file) and serve every connection forever."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    os.chmod(path, 0o600)
    ls.listen(64)
    print("READY", flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=answer, args=(conn, mode, job, qps), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leveller.bench.fake_hostile_shim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True, help="the unix socket to serve")
    parser.add_argument("--mode", choices=MODES, default="no-lease")
    parser.add_argument("--job", default="rdma", help="job its QPs claim to belong to (default rdma)")
    parser.add_argument("--qps", type=int, default=2, help="QPs in its list reply (default 2)")
    args = parser.parse_args(argv)
    serve(args.socket, args.mode, args.job, args.qps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
