"""Live: a real PyTorch DDP job (gloo over TCP) between two namespaces, under the real agent and controller.

Rank 0 runs in ns_b, rank 1 in ns_a, each in its own fresh cgroup v2. A
`leveller controller` and a `leveller agent` (eBPF datapath on ns_a's veth end,
flows attributed only by --job-cgroup) run as processes. Checks: the model
really trains (loss down, replicas kept equal by the all-reduces); the agent
reports the job's iterations from the hook's log lines; the kernel attributes the gradient
traffic to the job by the sending socket's cgroup id, with byte counts matching the gradient size; a flow from
outside the cgroup is neither attributed nor marked; and the job's packets
carry the controller's top-level DSCP on the wire.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveller.core.qos import default_level_map

from .support import Proc, free_port, fresh_cgroup, leveller_proc, wait_until

pytestmark = pytest.mark.privileged

SECRET = "torch-ddp-test-secret-0123456789"
JOB = "ddp"
GRAD_MB = 8.0  # the script's defaults: ~0.15-0.3 s per iteration on a 2-core machine
BATCH = 1280
DURATION_S = 14.0
CONTROL_PORT = 47811  # a flow from outside the job's cgroup
CONTROL_BYTES = 2_000_000
ETH_P_IP = 0x0800


def _torch() -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed: run `make torch` (the optional extra; CI has it)")


@pytest.fixture()
def cgroups() -> Iterator[tuple[Path, Path]]:
    """Two fresh cgroups (rank 0, rank 1), removed at the end."""
    with fresh_cgroup("leveller-ddp-r0") as cg0, fresh_cgroup("leveller-ddp-r1") as cg1:
        yield cg0, cg1


def leveller(out: Path, *args: str) -> Proc:
    return leveller_proc(out, *args, env={"LEVELLER_SECRET": SECRET})


def rank_proc(out: Path, cgroup: Path, ns: str, *args: str) -> Proc:
    """A training rank that joins ``cgroup`` before anything opens a socket, then enters ``ns``."""
    join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
    return Proc(out, ["sh", "-c", join, str(cgroup), "ip", "netns", "exec", ns,
                      sys.executable, "-m", "leveller.jobs.torch_ddp", *args])


class Wire(threading.Thread):
    """AF_PACKET capture on the receiver: (arrival time, dscp, payload bytes, sport, dport) of TCP from src."""

    def __init__(self, ns: str, ifname: str, src: str) -> None:
        from leveller.testbed.vethpair import VethPair

        super().__init__(daemon=True)
        self.src = socket.inet_aton(src)
        self.sock = VethPair.socket(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.settimeout(0.2)
        self.packets: list[tuple[float, int, int, int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        buf = bytearray(128)
        while not self.stop.is_set():
            try:
                size = self.sock.recv_into(buf, len(buf), socket.MSG_TRUNC)  # real frame size, even if GSO
            except TimeoutError:
                continue
            except OSError:
                return
            if size < 54 or buf[23] != socket.IPPROTO_TCP or bytes(buf[26:30]) != self.src:
                continue
            ihl = (buf[14] & 0x0F) * 4
            sport, dport = struct.unpack_from("!HH", buf, 14 + ihl)
            payload = size - 14 - ihl - (buf[14 + ihl + 12] >> 4) * 4
            if payload > 0:
                self.packets.append((time.time(), buf[15] >> 2, payload, sport, dport))

    def __enter__(self) -> Wire:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=2)
        self.sock.close()


def _summary(proc: Proc) -> dict[str, Any]:
    m = re.search(r"leveller-ddp-done (\{.*\})", proc.output())
    assert m, f"no summary from the rank: {proc.output()}"
    return json.loads(m.group(1))


def _agent_iterations(agent: Proc) -> int:
    best = -1
    for line in agent.output().splitlines():
        if line.startswith("{"):
            best = max(best, json.loads(line).get("jobs", {}).get(JOB, -1))
    return best


@pytest.mark.timeout(120)
def test_real_ddp_job_is_counted_attributed_by_cgroup_and_marked(tmp_path: Path,
                                                                 cgroups: tuple[Path, Path]) -> None:
    _torch()
    from leveller.rpc.transport import ControllerClient
    from leveller.testbed.vethpair import VethPair

    started = time.monotonic()
    top = default_level_map(2).dscp[1]  # a job alone gets the top level of K=2
    assert top != 0
    cg0, cg1 = cgroups
    log1 = tmp_path / "rank1.log"
    port, master_port = free_port(), 29000 + secrets.randbelow(1000)
    address = f"127.0.0.1:{port}"
    with VethPair(prefix="lvd") as pair, Wire(pair.ns_b, pair.if_b, str(pair.ip_a)) as wire, \
            leveller(tmp_path / "controller.out", "controller", "--listen", address, "--tau", "0.3",
                     "--lease", "1.5") as ctl, \
            leveller(tmp_path / "agent.out", "agent", "--controller", address, "--host", "ha",
                     "--log", str(log1), "--job-cgroup", f"{JOB}={cg1}", "--ideal-time", f"{JOB}=0.2",
                     "--dev", pair.if_a, "--netns", pair.ns_a, "--interval", "0.2", "--json") as agent:
        # the agent reports (so its datapath is attached) before any training traffic
        wait_until(lambda: '"ok": true' in agent.output(), 40,
              lambda: f"the agent reports; agent: {agent.output()} controller: {ctl.output()}")
        common = ["--world-size", "2", "--master", f"{pair.ip_b}:{master_port}", "--job", JOB,
                  "--duration", str(DURATION_S), "--grad-mb", str(GRAD_MB), "--batch", str(BATCH)]
        with rank_proc(tmp_path / "rank0.out", cg0, pair.ns_b, "--rank", "0", "--log", str(tmp_path / "rank0.log"),
                       *common) as r0, \
                rank_proc(tmp_path / "rank1.out", cg1, pair.ns_a, "--rank", "1", "--log", str(log1),
                          *common) as r1:
            # the controller's level reaches the job's packets
            wait_until(lambda: any(p[1] == top for p in wire.packets), 40,
                  lambda: f"a packet of the job with DSCP {top} on the wire; agent: {agent.output()} "
                  f"rank1: {r1.output()} controller: {ctl.output()}")
            marked_at = next(p[0] for p in wire.packets if p[1] == top)
            # a flow from outside the job's cgroup, while the job is marked
            with VethPair.socket(pair.ns_b) as listener, VethPair.socket(pair.ns_a) as sender:
                listener.bind((str(pair.ip_b), CONTROL_PORT))
                listener.listen(1)
                sender.connect((str(pair.ip_b), CONTROL_PORT))
                conn, _ = listener.accept()
                with conn:
                    pusher = threading.Thread(target=sender.sendall, args=(b"c" * CONTROL_BYTES,), daemon=True)
                    pusher.start()
                    conn.settimeout(10)
                    got = 0
                    while got < CONTROL_BYTES:
                        got += len(conn.recv(1 << 20))
                    pusher.join(10)
                time.sleep(0.5)  # the agent reports the control flow's counters too (if it attributed it)
                control = f"{pair.ip_a}:{sender.getsockname()[1]}>{pair.ip_b}:{CONTROL_PORT}"
            assert r0.p.wait(DURATION_S + 40) == 0, r0.output()
            assert r1.p.wait(20) == 0, r1.output()
        s0, s1 = _summary(r0), _summary(r1)

        # (1) training really progressed
        assert s0["iterations"] == s1["iterations"] >= 15, (s0, s1)
        for s in (s0, s1):
            assert s["last_loss"] < 0.85 * s["first_loss"], s
        # each rank trains on its own data: the replicas stay equal only through the gradient all-reduces
        assert s0["param_checksum"] == s1["param_checksum"], (s0, s1)
        iterations, grad_bytes = s1["iterations"], s1["grad_bytes"]
        assert abs(grad_bytes - GRAD_MB * 1e6) < 0.01 * GRAD_MB * 1e6

        # (2) the agent counted the iterations from the hook's log lines
        wait_until(lambda: _agent_iterations(agent) == iterations, 10,
              lambda: f"agent reports {iterations} iterations of {JOB}; agent: {agent.output()}")

        # (3) flows attributed to the job by the kernel's cgroup id, bytes consistent with the gradients
        with ControllerClient(address, SECRET.encode()) as client:
            def job_flows() -> list[dict[str, Any]]:
                return [f for f in client.status()["flows"] if f["job"] == JOB]

            def final_flows() -> list[dict[str, Any]] | None:  # a report with the final counters arrived
                flows = job_flows()
                return flows if sum(f["bytes"] for f in flows) >= 0.95 * iterations * grad_bytes else None
            wait_until(final_flows, 10, lambda: f"{iterations} x {grad_bytes} B in the flows of {JOB} at the "
                  f"controller: {client.status()}")
            time.sleep(0.5)
            status = client.status()
            flows = [f for f in status["flows"] if f["job"] == JOB]
        assert all(f["host"] == "ha" and f["flow"].startswith(f"tcp {pair.ip_a}:") for f in flows), flows
        assert not any(control in f["flow"] for f in status["flows"]), f"control flow attributed: {status}"
        sent = sum(f["bytes"] for f in flows)
        # gloo's ring all-reduce with 2 ranks: each rank sends its half of the gradients in the
        # reduce-scatter and again in the all-gather, i.e. one gradient's worth per iteration;
        # on top: IP/TCP headers, ACKs, rendezvous and the per-iteration stop flag (a few %)
        assert 0.95 * iterations * grad_bytes <= sent <= 1.15 * iterations * grad_bytes + 2e6, \
            (sent, iterations, grad_bytes, flows)

        # (4) on the wire: the job's bytes carry the top DSCP once marked; the control flow's do not
        ctrl = [p for p in wire.packets if p[4] == CONTROL_PORT]
        job = [p for p in wire.packets if p[4] != CONTROL_PORT and p[0] > marked_at + 1.0]
        assert ctrl and all(p[1] == 0 for p in ctrl), f"control flow DSCPs: {sorted({p[1] for p in ctrl})}"
        job_bytes = sum(p[2] for p in job)
        assert job_bytes >= 5 * grad_bytes, f"only {job_bytes} job bytes captured after marking"
        marked_bytes = sum(p[2] for p in job if p[1] == top)
        assert marked_bytes >= 0.95 * job_bytes, (marked_bytes, job_bytes)
    print(f"\nddp: {iterations} iterations, {s1['mean_iteration_s']:.3f} s/iteration, grad {grad_bytes} B, "
          f"rank1 sent {sent} B ({sent / iterations / grad_bytes:.3f} x grad/iteration), "
          f"wire: {marked_bytes / job_bytes:.3f} of job bytes at DSCP {top}; test {time.monotonic() - started:.1f} s")
