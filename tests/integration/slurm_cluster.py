"""A real Slurm cluster of two nodes on one machine: munged, slurmctld and two slurmd (Debian's packages).

Node ``a`` runs in network namespace ns_a, node ``b`` in ns_b (a veth pair joins them); slurmctld runs
in ns_a, munged in the root namespace (its Unix socket reaches every namespace). Plugins that need
neither systemd nor a pure cgroup v2 layout (this machine is hybrid: Slurm's cgroup/v2 plugin refuses
it, "Hybrid mode is not supported"; slurmd still initialises its cgroup plugin, which finds the v1
mounts): ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
JobAcctGatherType=jobacct_gather/none. Each slurmd runs in a mount namespace of its own in which its
node's directory is bound over /run/leveller: the tasks of a node find that node's agent socket at
the default path /run/leveller/agent.sock, as on a real cluster where each host has its own /run.
Everything runs as root from a fresh directory and is stopped and removed at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NODES = ("a", "b")


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    netns: dict[str, str]  # node -> network namespace
    addr: dict[str, str]  # node -> IPv4 address
    run_dirs: dict[str, Path]  # node -> what its tasks see at /run/leveller

    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def cmd(self, argv: list[str], timeout: float = 30, check: bool = True) -> str:
        """A Slurm client command (sbatch, squeue, scancel, ...) in node a's namespace."""
        res = subprocess.run(["ip", "netns", "exec", self.netns["a"], *argv], capture_output=True, text=True,
                             env=self.env(), timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"{argv}: {res.stderr or res.stdout}")
        return res.stdout

    def sbatch(self, *args: str) -> int:
        out = self.cmd(["sbatch", "--parsable", *args])
        return int(out.strip().split(";")[0])

    def state(self, job: int) -> str:
        out = self.cmd(["squeue", "-h", "-j", str(job), "-o", "%T"], check=False)
        return out.strip() or "GONE"

    def log(self, name: str) -> str:
        path = self.dir / "log" / name
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(d: Path, addr: dict[str, str], ctld_port: int, slurmd_port: int) -> str:
    nodes = "\n".join(f"NodeName={n} NodeAddr={addr[n]} CPUs=2 State=UNKNOWN" for n in NODES)
    return f"""ClusterName=lv{secrets.token_hex(3)}
SlurmctldHost={socket.gethostname()}({addr['a']})
AuthType=auth/munge
AuthInfo=socket={d}/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/ctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/ctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=2
InactiveLimit=0
SlurmdTimeout=30
{nodes}
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@contextmanager
def slurm_cluster(netns: dict[str, str], addr: dict[str, str], timeout_s: float = 30) -> Iterator[SlurmCluster]:
    """munged, slurmctld and one slurmd per node in ``netns`` (node -> namespace); stopped at the end."""
    d = Path(tempfile.mkdtemp(prefix="lvslurm-", dir="/tmp"))
    os.chmod(d, 0o755)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for sub in ("munge", "state", "log", "spool/a", "spool/b", "run/a", "run/b"):
            (d / sub).mkdir(parents=True)
            os.chmod(d / sub, 0o755)
        key = d / "munge" / "key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        conf = d / "slurm.conf"
        conf.write_text(_conf(d, addr, _free_port(), _free_port()))
        logs = (d / "log" / "daemons.out").open("ab")
        procs.append(subprocess.Popen(["munged", "-F", f"--socket={d}/munge/sock", f"--key-file={key}",
                                       f"--log-file={d}/log/munge.log", f"--pid-file={d}/munge/pid",
                                       f"--seed-file={d}/munge/seed"], stdout=logs, stderr=logs))
        _wait(lambda: (d / "munge" / "sock").exists(), 10, "munged did not start")
        env = dict(os.environ, SLURM_CONF=str(conf))  # also what finds their slurmstepd processes at the end
        procs.append(subprocess.Popen(["ip", "netns", "exec", netns["a"], "slurmctld", "-D", "-i", "-f", str(conf)],
                                      stdout=logs, stderr=logs, env=env))
        Path("/run/leveller").mkdir(parents=True, exist_ok=True)
        for node in NODES:
            # nsenter, not `ip netns exec`: that remounts /sys, where slurmd looks for the cgroup mounts
            script = f'mount --bind {d}/run/{node} /run/leveller && exec slurmd -D -f {conf} -N {node}'
            procs.append(subprocess.Popen(["nsenter", f"--net=/run/netns/{netns[node]}", "unshare", "--mount",
                                           "--propagation", "slave", "sh", "-c", script],
                                          stdout=logs, stderr=logs, env=env))
        cluster = SlurmCluster(d, conf, netns, addr, {n: d / "run" / n for n in NODES})

        def idle() -> bool:
            out = cluster.cmd(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return all(states.get(n) == "idle" for n in NODES)

        _wait(idle, timeout_s, lambda: f"the Slurm nodes did not come up: "
              f"{cluster.cmd(['sinfo', '-N'], check=False)}\n{cluster.log('slurmd-a.log')[-600:]}\n"
              f"{cluster.log('slurmd-b.log')[-600:]}\n{cluster.log('daemons.out')[-600:]}")
        yield cluster
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        _kill_stepds(d)
        shutil.rmtree(d, ignore_errors=True)


def _kill_stepds(d: Path) -> None:
    """slurmstepd processes the test's slurmd left (they outlive slurmd by design)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if (p / "comm").read_text().strip() == "slurmstepd" and str(d) in \
                    (p / "environ").read_bytes().decode(errors="replace"):
                os.kill(int(p.name), 9)
        except OSError:
            continue


def _wait(cond: object, timeout_s: float, what: object) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(what() if callable(what) else what)
