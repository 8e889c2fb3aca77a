"""Jobs under a real Slurm are found, reported, ranked and marked with no agent flag naming them (issue 37, item 2).

A two-node Slurm (munged, slurmctld and two slurmd from Debian's packages: tests/integration/slurm_cluster.py)
runs on the two ends of a veth pair; each end has a real `leveller agent --slurm --socket ...` with its eBPF
datapath on the end's interface, both reporting to one real controller. Jobs are submitted with sbatch and
srun: the job emulator's workers and the real PyTorch DDP job (gloo), one rank per node. Each agent finds
the ranks on its node under their slurmstepd, names the job NAME.JOBID (the same on both nodes: no
configuration shared between them), gives it a cgroup and counts its flows; the controller ranks the one
job both hosts report; its packets leave with the level's DSCP, captured on the wire; scancel ends the
job and its marks within the lease. Slurm starts once for the module (about 5 s).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveller.bench.levels_latency import WireWatch
from leveller.rpc.transport import ControllerClient, RpcFailure
from leveller.testbed.vethpair import VethPair
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.integration.support import ENV, SECRET, Proc, free_port, json_lines, leveller_proc, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/slurmd").exists(),
                                reason="needs root and Slurm (scripts/setup-system.sh installs it)")
LEASE_S = 1.5
DSCP_TOP = 8  # level 1 of the default K=2 map


class Site:
    def __init__(self, pair: VethPair, cluster: SlurmCluster, port: int, agents: dict[str, Proc],
                 outs: dict[str, Path]) -> None:
        self.pair, self.cluster, self.port, self.agents, self.outs = pair, cluster, port, agents, outs

    def status(self) -> dict[str, Any]:
        with ControllerClient(f"127.0.0.1:{self.port}", SECRET.encode()) as client:
            return client.status()  # type: ignore[no-any-return]

    def answers(self) -> bool:
        try:
            self.status()
        except RpcFailure:
            return False
        return True

    def marks(self, node: str) -> list[tuple[float, dict[str, int]]]:
        return [(line["t"], line["marks"]) for line in json_lines(self.outs[node]) if "marks" in line]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("slurm")
    os.environ.pop("LEVELLER_AGENT_SOCK", None)
    with VethPair(prefix="sl") as pair:
        netns = {"a": pair.ns_a, "b": pair.ns_b}
        addr = {"a": str(pair.ip_a), "b": str(pair.ip_b)}
        dev = {"a": pair.if_a, "b": pair.if_b}
        with slurm_cluster(netns, addr) as cluster:
            port = free_port()
            ctl = leveller_proc(tmp / "controller.out", "controller", "--listen", f"127.0.0.1:{port}", "--tau",
                                "0.3", "--lease", str(LEASE_S), env=ENV)
            agents, outs = {}, {}
            try:
                for node in ("a", "b"):
                    outs[node] = tmp / f"agent-{node}.out"
                    agents[node] = leveller_proc(
                        outs[node], "agent", "--controller", f"127.0.0.1:{port}", "--host", node, "--slurm",
                        "--job-cgroup-root", f"lvslurm-{os.getpid()}-{node}",
                        "--socket", str(cluster.run_dirs[node] / "agent.sock"), "--dev", dev[node],
                        "--netns", netns[node], "--interval", "0.2", "--json", env=ENV)
                for node in ("a", "b"):
                    wait_until(lambda n=node: (cluster.run_dirs[n] / "agent.sock").exists(), 20,
                               lambda n=node: f"agent {n} did not start: {agents[n].output()}")
                site = Site(pair, cluster, port, agents, outs)
                wait_until(site.answers, 30, lambda: f"the controller did not answer: {ctl.output()}")
                yield site
            finally:
                for proc in (*agents.values(), ctl):
                    proc.interrupt()


@pytest.fixture(autouse=True)
def no_job_left(site: Site) -> Iterator[None]:
    """A test that fails mid-way leaves no job running into the next one (or into its own rerun)."""
    yield
    site.cluster.cmd(["scancel", "--user", "root"], check=False)
    wait_until(lambda: not site.cluster.cmd(["squeue", "-h"], check=False).strip(), 30, "jobs outlived scancel")


def reported_by_both(site: Site, job: str) -> bool:
    status = site.status()
    hosts = {f["host"] for f in status["flows"] if f["job"] == job}
    return any(j["job"] == job for j in status["jobs"]) and hosts == {"a", "b"}


def marks_gone_after(site: Site, t0: float, timeout_s: float) -> float:
    """Seconds after ``t0`` of the first report of each agent with no mark left (the later of the two)."""
    def gone() -> float | None:
        done = []
        for node in ("a", "b"):
            after = [t for t, marks in site.marks(node) if t >= t0 and not marks]
            if not after:
                return None
            done.append(after[0])
        return max(done) - t0

    return float(wait_until(gone, timeout_s, lambda: f"marks stayed: {site.marks('b')[-3:]}"))


def cancel(site: Site, job: int) -> float:
    """scancel, then wait until Slurm no longer runs the job; returns when it ended (wall clock)."""
    site.cluster.cmd(["scancel", str(job)])
    wait_until(lambda: site.cluster.state(job) in ("GONE", "CANCELLED", "COMPLETED"), 20, "the job did not end")
    return time.time()


def test_an_sbatch_job_of_the_emulator_is_found_ranked_marked_and_unmarked_after_scancel(site: Site) -> None:
    pair, port = site.pair, 47810
    worker = (f"exec {sys.executable} -m leveller.jobs.worker --job emu --rank $SLURM_PROCID "
              f"--endpoint {pair.ip_a}:{port} --endpoint {pair.ip_b}:{port + 1} --compute 0.05 --bytes 300000 "
              f"--pace 1e8 --deadline {time.time() + 120:.0f}")
    with WireWatch(pair.ns_a, pair.if_a, str(pair.ip_b), port, proto=socket.IPPROTO_TCP) as wire:
        submitted = time.time()
        jid = site.cluster.sbatch("-N2", "--ntasks-per-node=1", "-J", "emu", "-o", str(site.cluster.dir / "emu.out"),
                                  "--wrap", f"srun sh -c '{worker}'")
        job = f"emu.{jid}"
        wait_until(lambda: reported_by_both(site, job), 40,
                   lambda: f"{job} not reported by both hosts: {site.status()['jobs']} "
                           f"{site.cluster.log('daemons.out')} {site.agents['b'].output()[-800:]}")
        marked = wire.first_after(submitted, DSCP_TOP, timeout_s=20)
        assert marked is not None, f"no packet of {job} left b marked: {site.status()['flows']}"
        status = site.status()
        assert [j["job"] for j in status["jobs"]] == [job]  # one job, whatever name the ranks gave themselves
        assert any(f["job"] == job and f["host"] == "b" and f["level"] == 1 for f in status["flows"])
        ended = cancel(site, jid)
        gone_s = marks_gone_after(site, ended, 10)
        print(f"emulator job: marks gone {gone_s:.2f} s after its end (lease {LEASE_S} s)")
        assert gone_s <= LEASE_S, gone_s
        wait_until(lambda: not site.status()["jobs"], 30, "the controller kept the cancelled job")


class DscpCounter(threading.Thread):
    """Counts the DSCP of TCP packets with payload from ``src`` seen on ``ifname`` in ``ns``."""

    def __init__(self, ns: str, ifname: str, src: str) -> None:
        super().__init__(daemon=True)
        self.sock = VethPair.socket(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.bind((ifname, 0x0800))
        self.sock.settimeout(0.2)
        self.src, self.seen = socket.inet_aton(src), Counter[int]()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(256)
            except OSError:
                continue
            ip = frame[14:]
            if len(ip) > 40 and ip[9] == 6 and ip[12:16] == self.src:
                ihl = (ip[0] & 15) * 4
                total = int.from_bytes(ip[2:4], "big")
                if total - ihl - (ip[ihl + 12] >> 4) * 4 > 0:
                    self.seen[ip[1] >> 2] += 1

    def close(self) -> None:
        self.stop.set()
        self.join(2)
        self.sock.close()


def test_a_pytorch_ddp_job_under_srun_is_ranked_and_its_gloo_traffic_marked(site: Site) -> None:
    pytest.importorskip("torch", reason="the real DDP job needs `make torch`")
    pair, master = site.pair, f"{site.pair.ip_a}:{free_port()}"
    train = (f"exec {sys.executable} -m leveller.jobs.torch_ddp --rank $SLURM_PROCID --world-size 2 "
             f"--master {master} --job ddp --duration 120 --grad-mb 2 --batch 256")
    counter = DscpCounter(pair.ns_a, pair.if_a, str(pair.ip_b))
    counter.start()
    try:
        jid = site.cluster.sbatch("-N2", "--ntasks-per-node=1", "-J", "ddp", "-o",
                                  str(site.cluster.dir / "ddp.out"), "--wrap", f"srun sh -c '{train}'")
        job = f"ddp.{jid}"
        wait_until(lambda: reported_by_both(site, job), 90,
                   lambda: f"{job} not reported by both: {site.status()['jobs']} "
                           f"{(site.cluster.dir / 'ddp.out').read_text()[-1500:]}")
        wait_until(lambda: counter.seen[DSCP_TOP] >= 50, 30, lambda: f"gloo packets by DSCP: {counter.seen}")
        ended = cancel(site, jid)
        gone_s = marks_gone_after(site, ended, 10)
        print(f"ddp job: gloo packets by DSCP {dict(counter.seen)}; marks gone {gone_s:.2f} s after its end")
        assert gone_s <= LEASE_S, gone_s
    finally:
        counter.close()
    out = subprocess.run(["cat", str(site.cluster.dir / "ddp.out")], capture_output=True, text=True).stdout
    assert "leveller-iter" in out  # the ranks really trained (the hook's lines, in Slurm's output file)
