"""Controllers on a real etcd: three etcd members on loopback (started here, in a temp dir, killed at
the end), two `leveller controller --etcd` processes and a reporting client that follows the leader.
The leader is SIGKILLed once it has profiled the job: the standby decides with the job's flow within
TTL + 2 tau, with the ideal time the dead leader measured (read back from etcd, not profiled again),
every reply after carries the newer epoch, a replayed report is refused, and the killed controller
restarted joins as a standby. No root needed."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from leveller.controller.etcdstore import EtcdStore, parse_endpoints
from leveller.model.flow import flow_key
from leveller.model.messages import FlowReport, JobReport, LevelsReply, Report
from leveller.rpc.failover import FailoverClient
from leveller.rpc.transport import ControllerClient, RpcFailure

from .support import free_port, json_lines, leveller_proc, wait_until

TAU, TTL = 1.0, 1  # the default lease 3 x tau = 3 s; the TTL at most half of it
FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
SECRET = "etcd-failover-test-secret-0123456789"
ITERATION_S = 0.2


@contextmanager
def etcd_cluster(root: Path, members: int = 3, procs: list[subprocess.Popen] | None = None) -> Iterator[list[str]]:
    """``members`` etcd processes on loopback (fast elections: heartbeat 50 ms, election 500 ms); their
    client URLs (the processes go into ``procs`` if given). Killed at the end (the data is in ``root``)."""
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (scripts/setup-system.sh installs etcd-server)")
    ports = [(free_port(), free_port()) for _ in range(members)]
    cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
    procs = [] if procs is None else procs
    logs = []
    try:
        for i, (client, peer) in enumerate(ports):
            log = (root / f"etcd{i}.log").open("wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                ["etcd", "--name", f"e{i}", "--data-dir", str(root / f"etcd{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{client}",
                 "--advertise-client-urls", f"http://127.0.0.1:{client}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--initial-cluster-token", "leveller-test", "--heartbeat-interval", "50",
                 "--election-timeout", "500", "--logger", "zap", "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT))
        urls = [f"http://127.0.0.1:{c}" for c, _ in ports]

        def healthy() -> bool:
            try:
                return all(json.loads(urllib.request.urlopen(u + "/health", timeout=1).read())["health"] == "true"
                           for u in urls)
            except OSError:
                return False
        wait_until(healthy, 30, lambda: "etcd healthy: " + (root / "etcd0.log").read_text()[-2000:], step_s=0.2)
        yield urls
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)
        for log in logs:
            log.close()


class Reporter:
    """An agent's reports every 0.1 s (one job finishing an iteration every 0.2 s, no ideal time: the
    controller profiles it) through a FailoverClient; every reply kept with its arrival time."""

    def __init__(self, addresses: list[str]) -> None:
        self.client = FailoverClient(addresses, SECRET.encode(), timeout_s=1.0)
        self.replies: list[tuple[float, LevelsReply, str]] = []
        self.errors: list[str] = []
        self.start = time.time()
        self.first_sent = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            n = int((now - self.start) / ITERATION_S)
            recent = tuple((k, self.start + k * ITERATION_S) for k in range(max(1, n - 7), n + 1))
            report = Report("h1", (JobReport("j", n, self.start, None, recent),), (FlowReport(FA, "j", 1000 * n),))
            if not self.first_sent:
                self.first_sent = time.time()
            try:
                reply = self.client.report(report, known_jobs=("j",))
                self.replies.append((time.time(), reply, self.client.active))
            except RpcFailure as exc:
                self.errors.append(str(exc))
            self._stop.wait(0.1)

    def __enter__(self) -> Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


def controller_args(address: str, urls: list[str], name: str, secret: Path) -> list[str]:
    return ["controller", "--listen", address, "--secret-file", str(secret), "--tau", str(TAU),
            "--etcd", ",".join(urls), "--etcd-ttl", str(TTL), "--name", name, "--json"]


def decided(out: Path, after: float = 0.0) -> list[dict]:
    """The controller's decisions (--json lines) after ``after`` that give the job's flow a level."""
    return [line for line in json_lines(out) if line["t"] > after and FA.label() in line.get("levels", {})]


def test_a_new_leader_decides_within_ttl_plus_two_tau_without_reprofiling(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    with etcd_cluster(tmp_path) as urls:
        addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        outs = [tmp_path / "c0.out", tmp_path / "c1.out"]
        procs = [leveller_proc(outs[i], *controller_args(addrs[i], urls, f"c{i}", secret)) for i in (0, 1)]
        try:
            with Reporter(addrs) as rep:
                # the leader profiles the job and decides with its flow
                line = wait_until(lambda: next((ln for i in (0, 1) for ln in decided(outs[i])
                                                if ln["jobs"]["j"]["ideal"] is not None), None), 30,
                                  lambda: f"a profiled decision: {procs[0].output()} {procs[1].output()}")
                leader = next(i for i in (0, 1) if line in json_lines(outs[i]))
                ideal = line["jobs"]["j"]["ideal"]
                old_epoch = rep.replies[-1][1].leader_epoch
                assert old_epoch > 0 and rep.client.active == addrs[leader]
                state = EtcdStore(parse_endpoints(",".join(urls))).get_prefix("/leveller/state/")
                assert {"/leveller/state/jobs/j", "/leveller/state/replay/h1"} <= set(state)

                procs[leader].kill()  # SIGKILL: no lease revoked, etcd must notice
                killed_at = time.time()
                other = 1 - leader
                first = wait_until(lambda: next(iter(decided(outs[other], killed_at)), None), 15,
                                   lambda: f"the standby decides: {procs[other].output()}")
                took = first["t"] - killed_at
                assert took <= TTL + 2 * TAU, (took, first)
                assert first["jobs"]["j"]["profiling"] is False and first["jobs"]["j"]["ideal"] == ideal  # from etcd
                new = wait_until(lambda: next((r for t, r, a in rep.replies if t > killed_at and r.flows), None), 10,
                                 lambda: f"a reply of the new leader: {rep.errors[-3:]}")
                assert new.leader_epoch > old_epoch
                wait_until(lambda: rep.replies[-1][0] > first["t"] + 1.5, 10, "replies a second after")
                later = [r.leader_epoch for t, r, _ in rep.replies if t > first["t"] + 0.5]
                assert later and set(later) == {new.leader_epoch}
                print(f"\nkilled leader c{leader} (epoch {old_epoch}); c{other} decided after {took:.2f} s "
                      f"(TTL + 2 tau = {TTL + 2 * TAU:g} s) at epoch {new.leader_epoch}")

                # a report captured before the failover, replayed to the new leader, is refused
                with ControllerClient(addrs[other], SECRET.encode(), clock=lambda: rep.first_sent, run=rep.client.run,
                                      seq=iter([1])) as replayer:
                    with pytest.raises(RpcFailure, match="UNAUTHENTICATED"):
                        replayer.report(Report("h1", (), ()))

                # the killed controller, restarted, joins as a standby
                procs[leader] = leveller_proc(outs[leader], *controller_args(addrs[leader], urls, f"c{leader}",
                                                                             secret))
                def ha_when(address: str, ok: Callable[[dict], bool]) -> dict | None:
                    try:
                        with ControllerClient(address, SECRET.encode()) as admin:
                            ha = admin.status()["ha"]
                    except RpcFailure:  # not listening yet
                        return None
                    return ha if ok(ha) else None

                ha = wait_until(lambda: ha_when(addrs[other], lambda h: len(h["members"]) == 2), 15,
                                lambda: f"two members: {procs[leader].output()}")
                assert ha["role"] == "leader" and ha["epoch"] == new.leader_epoch
                back = wait_until(lambda: ha_when(addrs[leader], lambda h: h["role"] == "standby"), 15,
                                  lambda: f"the restarted controller is a standby: {procs[leader].output()}")
                assert back["leader"] == addrs[other]
        finally:
            for p in procs:
                if p.alive():
                    p.interrupt()


def test_one_etcd_member_of_three_killed_changes_nothing(tmp_path: Path) -> None:
    """The member the controllers talk to first is SIGKILLed: the leader keeps its epoch and decides every
    tau (its calls move to the next member), the standby stays a standby."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    members: list[subprocess.Popen] = []
    with etcd_cluster(tmp_path, procs=members) as urls:
        addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        outs = [tmp_path / "c0.out", tmp_path / "c1.out"]
        procs = [leveller_proc(outs[i], *controller_args(addrs[i], urls, f"c{i}", secret)) for i in (0, 1)]
        try:
            with Reporter(addrs) as rep:
                wait_until(lambda: any(r.flows for _, r, _ in rep.replies), 30,
                           lambda: f"levels: {procs[0].output()} {procs[1].output()}")
                epoch = rep.replies[-1][1].leader_epoch
                leader = addrs.index(rep.client.active)
                members[0].kill()
                killed_at = time.time()
                time.sleep(4 * TAU)
                decisions = [ln["t"] for ln in decided(outs[leader], killed_at)]
                assert len(decisions) >= 3 and max(b - a for a, b in zip([killed_at, *decisions], decisions)) < 2 * TAU
                assert not decided(outs[1 - leader], killed_at)  # the standby never decided
                after = [(r.leader_epoch, a) for t, r, a in rep.replies if t > killed_at]
                assert after and set(after) == {(epoch, addrs[leader])}
                print(f"\netcd member 0 killed: {len(decisions)} decisions in {4 * TAU:g} s, epoch {epoch} kept")
        finally:
            for p in procs:
                if p.alive():
                    p.interrupt()
