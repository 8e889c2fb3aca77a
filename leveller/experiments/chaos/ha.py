"""Controllers on etcd under faults: three etcd members in a network namespace of their own, and the
faults the chaos experiment (and the live tests) strike them with.

The members run in a fresh namespace ``lvha-<tag>`` joined to the host's by a veth pair on
10.215.N.0/24 (N random, one not in use on the host): the host side is .1, the namespace side .2, and
controller i reaches etcd at 10.215.N.(10+i) only (another address of the namespace side). Dropping
what arrives for that one address inside the namespace (iptables INPUT there) cuts controller i
from every etcd member while it keeps talking to the agents on the host's loopback: the partition
of issue 28, with no rule on the host. The faults:

  leader     SIGKILL the leader controller (the election key names it); restarted later, it joins
             as a standby
  etcd       SIGKILL one etcd member of three (the raft leader: the harsher case), restarted later on
             its data directory
  partition  cut the leader from etcd but not from the agents, healed later

On exit every member is killed and the namespace deleted (with its rules and the veth pair).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.policy_run import LiveSettings

CLIENT_PORT, PEER_PORT = 2379, 2380  # member j: CLIENT_PORT + 10 j (the namespace is ours: no clash)
PREFIX = "/leveller/"


def _run(argv: Sequence[str]) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def _free_net() -> int:
    """A third octet N with 10.215.N.0/24 unused on the host."""
    used = _run(["ip", "-4", "-o", "addr", "show"])
    for _ in range(64):
        n = random.randrange(1, 255)
        if f" 10.215.{n}." not in used:
            return n
    raise RuntimeError("no free 10.215.N.0/24 network for the etcd namespace")


class EtcdNetns:
    """``members`` etcd members in their own namespace, reachable by ``controllers`` controllers (each
    through its own address); a context manager. Data and logs go to ``work``."""

    def __init__(self, work: Path, controllers: int = 2, members: int = 3) -> None:
        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed (scripts/setup-system.sh installs etcd-server)")
        self.work, self.controllers, self.members = Path(work), controllers, members
        tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.ns = f"lvha-{tag}"
        self.host_if, self.ns_if = f"lvha{tag}h"[:15], f"lvha{tag}n"[:15]
        self.net = 0
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self._cut: set[int] = set()
        self._created = False

    # ---- addresses ---------------------------------------------------------------------------------
    def address(self, i: int) -> str:
        """The address controller i reaches etcd at (10.215.N.(10+i))."""
        return f"10.215.{self.net}.{10 + i}"

    def urls(self, i: int) -> str:
        """``--etcd`` of controller i: every member at its address."""
        return ",".join(f"http://{self.address(i)}:{CLIENT_PORT + 10 * j}" for j in range(self.members))

    @property
    def admin_urls(self) -> str:
        """For this process's own reads (the namespace side's first address, never cut)."""
        return ",".join(f"http://10.215.{self.net}.2:{CLIENT_PORT + 10 * j}" for j in range(self.members))

    def ha_args(self, i: int, listen: str, ttl_s: int) -> list[str]:
        """The `leveller controller` options of controller i (named ``c<i>``, advertising ``listen``)."""
        return ["--etcd", self.urls(i), "--etcd-ttl", str(ttl_s), "--name", f"c{i}", "--advertise", listen]

    # ---- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> EtcdNetns:
        try:
            self._create()
            for j in range(self.members):
                self.start(j)
            self.wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        self.net = _free_net()
        self.work.mkdir(parents=True, exist_ok=True)
        _run(["ip", "netns", "add", self.ns])
        self._created = True
        _run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        _run(["ip", "link", "set", self.ns_if, "netns", self.ns])
        _run(["ip", "addr", "add", f"10.215.{self.net}.1/24", "dev", self.host_if])
        _run(["ip", "link", "set", self.host_if, "up"])
        inside = ["ip", "netns", "exec", self.ns]
        for host in [2] + [10 + i for i in range(self.controllers)]:
            _run([*inside, "ip", "addr", "add", f"10.215.{self.net}.{host}/24", "dev", self.ns_if])
        _run([*inside, "ip", "link", "set", self.ns_if, "up"])
        _run([*inside, "ip", "link", "set", "lo", "up"])

    def _argv(self, j: int) -> list[str]:
        cluster = ",".join(f"e{k}=http://127.0.0.1:{PEER_PORT + 10 * k}" for k in range(self.members))
        return ["ip", "netns", "exec", self.ns, "etcd", "--name", f"e{j}", "--data-dir", str(self.work / f"etcd{j}"),
                "--listen-client-urls", f"http://0.0.0.0:{CLIENT_PORT + 10 * j}",
                "--advertise-client-urls", f"http://10.215.{self.net}.2:{CLIENT_PORT + 10 * j}",
                "--listen-peer-urls", f"http://127.0.0.1:{PEER_PORT + 10 * j}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{PEER_PORT + 10 * j}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"leveller-{self.ns}", "--heartbeat-interval", "50",
                "--election-timeout", "500", "--logger", "zap", "--log-level", "warn"]

    def start(self, j: int) -> None:
        """Start member j (again: on its data directory, it rejoins the cluster)."""
        with open(self.work / f"etcd{j}.log", "ab") as log:
            self.procs[j] = subprocess.Popen(self._argv(j), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self, j: int) -> None:
        """SIGKILL member j and wait for it."""
        proc = self.procs[j]
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"etcd member e{j} is not running")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def status(self, j: int, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """Member j's maintenance status (member_id in header, the raft leader), None if it does not answer."""
        url = f"http://10.215.{self.net}.2:{CLIENT_PORT + 10 * j}/v3/maintenance/status"
        try:
            req = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return dict(json.loads(resp.read()))
        except (OSError, ValueError):
            return None

    def healthy(self) -> bool:
        """Every member answers and they agree on a raft leader."""
        found = [self.status(j) for j in range(self.members)]
        return all(s is not None for s in found) and len({s.get("leader") for s in found if s}) == 1

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if time.monotonic() > deadline:
                tail = (self.work / "etcd0.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"etcd members not healthy within {timeout_s:g} s: {tail}")
            time.sleep(0.2)

    def raft_leader(self) -> int:
        """The index of the member that is etcd's raft leader now."""
        for j in range(self.members):
            s = self.status(j)
            if s is not None and s.get("leader") == s.get("header", {}).get("member_id"):
                return j
        raise RuntimeError("no etcd member is the raft leader")

    def leader(self) -> tuple[str, str] | None:
        """(name, address) of the controller the election key names now; None if no controller leads (or
        no member answers). Plain HTTP to etcd's gateway: the controllers' client (etcd3gw) imports eventlet,
        which warns at every later fork of this process and takes seconds to import on a loaded machine."""
        from leveller.controller.hastate import Layout, read_address

        key = Layout(PREFIX).leader
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        for j in range(self.members):
            url = f"http://10.215.{self.net}.2:{CLIENT_PORT + 10 * j}/v3/kv/range"
            try:
                req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=1.0) as resp:
                    kvs = json.loads(resp.read()).get("kvs") or []
            except (OSError, ValueError):
                continue
            return read_address(base64.b64decode(kvs[0]["value"]), key) if kvs else None
        return None

    # ---- the partition ------------------------------------------------------------------------------
    def _rule(self, op: str, i: int) -> None:
        _run(["ip", "netns", "exec", self.ns, "iptables", "-w", op, "INPUT", "-d", f"{self.address(i)}/32",
              "-j", "DROP"])

    def cut(self, i: int) -> None:
        """Drop everything controller i sends to etcd (its agents are not on this path)."""
        self._rule("-I", i)
        self._cut.add(i)

    def heal(self, i: int) -> None:
        if i in self._cut:
            self._rule("-D", i)
            self._cut.discard(i)

    def close(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        if self._created:
            with contextlib.suppress(RuntimeError):
                _run(["ip", "netns", "del", self.ns])  # the veth pair and the rules go with it
            self._created = False
        with contextlib.suppress(RuntimeError):  # normally gone with the namespace's end
            if self.host_if in _run(["ip", "-o", "link", "show"]):
                _run(["ip", "link", "del", self.host_if])


# ---- the chaos experiment's controllers on etcd --------------------------------------------------------
HA_TTL_S = 1  # the leader's etcd lease: at most half the demo's 2 s agent lease


@dataclass
class HaSet:
    """One run's controllers on etcd: ``c0`` is the run's own controller
    (leveller.experiments.shared.policy_run.run_policy, given :meth:`controller_args` and ``ports[0]``),
    ``c1`` a standby started here; ``outs`` their output files (decision lines)."""

    etcd: EtcdNetns
    ports: list[int]
    outs: dict[str, Path]
    ttl_s: int = HA_TTL_S

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def controller_args(self, i: int) -> list[str]:
        return self.etcd.ha_args(i, self.addresses[i], self.ttl_s)

    def settings(self, settings: LiveSettings) -> LiveSettings:
        """The run's settings with every controller given to the agents (the last --controller wins)."""
        return dataclasses.replace(settings, agent_args=(*settings.agent_args, "--controller",
                                                         ",".join(self.addresses)))

    def decisions(self) -> dict[str, list[float]]:
        """Decision times per controller name, from their output files."""
        return {name: decision_times(path.read_text(errors="replace").splitlines()) if path.exists() else []
                for name, path in self.outs.items()}


def decision_times(lines: Sequence[str]) -> list[float]:
    """Times of the decisions among a controller's --json lines (steps that failed left out)."""
    out = []
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "t" in d and not d.get("error"):
            out.append(float(d["t"]))
    return sorted(out)


def controller_argv(cluster: DemoCluster, settings: LiveSettings, jobs: Sequence[LiveJob], port: int) -> list[str]:
    """A controller's command line as leveller.experiments.shared.policy_run.run_policy writes it, on ``port``."""
    argv = [sys.executable, "-m", "leveller.cli", "controller", "--listen", f"127.0.0.1:{port}",
            "--secret-file", str(cluster.work_dir / "secret"), "--policy", "leveller", "--levels",
            str(settings.levels), "--tau", str(settings.tau_s), "--lease", str(settings.lease_s), "--stale-after",
            str(settings.stale_after_s), "--paths", f"sdn:{cluster.run_dir}", "--on-iteration", "--json",
            "--duration", str(settings.seconds + 60)]
    for j in jobs:
        argv += ["--job-shape", j.shape_arg]
    return argv + [*settings.controller_args]


@contextlib.contextmanager
def ha_controllers(cluster: DemoCluster, tag: str, settings: LiveSettings, jobs: Sequence[LiveJob]) -> Iterator[HaSet]:
    """Three etcd members (fresh for the run: no state of another run) and the standby ``c1``; c0 is
    run_policy's controller, started with :meth:`HaSet.controller_args` (0)."""
    from leveller.experiments.shared.policy_run import _process, free_port, run_work

    work, _secret = run_work(cluster, tag)  # c1 reads the secret file run_policy's controller reads
    with EtcdNetns(work / "etcd") as etcd:
        outs = {"c0": work / "controller.jsonl", "c1": work / "controller-c1.jsonl"}
        ha = HaSet(etcd, [free_port(), free_port()], outs)
        argv = controller_argv(cluster, settings, jobs, ha.ports[1]) + ha.controller_args(1)
        with _process(argv, ha.outs["c1"], cluster.work_dir):
            yield ha
