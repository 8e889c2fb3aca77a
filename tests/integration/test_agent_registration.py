"""Jobs that register themselves on the agent's socket (issue 37, items 1 and 3).

Real parts: a real Unix socket served by the agent's RegistrationServer, clients in real processes
placed in real cgroup v2 directories (some run as an unprivileged uid through setpriv), their
identity taken by the agent from SO_PEERCRED and /proc, a real controller on loopback gRPC ranking
the job the agent reports. The flows are given by a fake flow source carrying the job cgroup's real
id (the eBPF datapath is exercised in the Slurm test and tests/integration/test_bpf_flow_marker.py).
Every refusal of item 3 has a test here; each fails on the code before (there was no socket).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from leveller.agent.jobtable import JobTable
from leveller.agent.metrics import AgentMetrics, Rejections
from leveller.agent.regserver import Limits, RegistrationServer
from leveller.agent.reports import FlowSample
from leveller.agent.service import Agent
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.agentlink import AgentLink
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.transport import ControllerClient, serve
from tests.integration.support import fresh_cgroup, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, setpriv)")
SECRET = b"registration-test-secret-01"
FLOW = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
NOBODY = 65534
OTHER = 65533
# a client: connects, sends each argv line, prints every reply line; waits for stdin to close
CLIENT = textwrap.dedent("""
    import json, socket, sys, time
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    for line in sys.argv[2:]:
        s.sendall(line.encode() + b"\\n")
    s.settimeout(3)
    buf = b""
    try:
        while b"\\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    sys.stdout.write(buf.decode()); sys.stdout.flush()
    sys.stdin.read()
""")


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory every uid may enter (pytest's tmp_path is root's alone), removed at the end."""
    d = Path(tempfile.mkdtemp(prefix="lvreg-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def sock_path(shared_dir: Path) -> Path:
    return shared_dir / "agent.sock"


@pytest.fixture()
def server(sock_path: Path) -> Iterator[tuple[RegistrationServer, JobTable, Rejections]]:
    metrics = AgentMetrics()
    rejected = Rejections(metrics)
    table = JobTable(max_jobs=3, max_entries=5)
    with RegistrationServer(str(sock_path), table, rejected, Limits(registrations_per_s=50, iterations_per_s=20,
                                                                    hello_s=0.5)) as srv:
        yield srv, table, rejected


def in_cgroup(cgroup: Path, argv: list[str], uid: int | None = None) -> subprocess.Popen[str]:
    """``argv`` started inside ``cgroup`` (as ``uid`` through setpriv), stdin a pipe that holds it open."""
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
    script = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
    return subprocess.Popen(["sh", "-c", script, "sh", *drop, *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def client(cgroup: Path, sock: Path, *messages: dict[str, Any] | str, uid: int | None = None) \
        -> subprocess.Popen[str]:
    lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
    return in_cgroup(cgroup, [sys.executable, "-c", CLIENT, str(sock), *lines], uid)


def reply(p: subprocess.Popen[str]) -> dict[str, Any]:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, p.stderr.read() if p.stderr else ""
    return json.loads(line)  # type: ignore[no-any-return]


def finish(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.stdin:
            p.stdin.close()
        p.kill()
        p.wait(5)


@pytest.fixture()
def cg() -> Iterator[Path]:
    with fresh_cgroup("lvreg") as path:
        yield path


@pytest.fixture()
def cg2() -> Iterator[Path]:
    with fresh_cgroup("lvreg2") as path:
        yield path


def test_a_registration_takes_pid_uid_and_cgroup_from_the_kernel(server: Any, sock_path: Path, cg: Path) -> None:
    srv, table, rejected = server
    p = client(cg, sock_path, {"op": "register", "job": "gpt", "rank": 1, "ideal_time": 0.5})
    try:
        r = reply(p)
        assert r["ok"] and r["job"] == "gpt" and r["cgroup"] == str(cg), r
        (entry,) = table.entries.values()
        assert entry.uid == 0 and entry.cgroup == str(cg) and entry.rank == 1 and entry.ideal == 0.5
        assert table.job_of(FLOW, FlowSample(1, os.stat(cg).st_ino)) == "gpt"  # the flows of its cgroup
        assert table.job_of(FLOW, FlowSample(1, os.stat(cg).st_ino + 1)) is None
        assert table.ideal_times.get("gpt") == 0.5
    finally:
        finish(p)
    wait_until(lambda: not table.entries, 3, "the registration did not end with its connection")
    assert table.ended == {"closed": 1} and rejected.total == 0


def test_a_client_naming_its_own_cgroup_is_refused(server: Any, sock_path: Path, cg: Path) -> None:
    srv, table, rejected = server
    p = client(cg, sock_path, {"op": "register", "job": "gpt", "cgroup": "/sys/fs/cgroup/other"})
    try:
        r = reply(p)
        assert not r["ok"] and r["reason"] == "garbage" and "cgroup" in r["error"], r
    finally:
        finish(p)
    assert not table.entries and rejected.reasons == {"garbage": 1}


@pytest.mark.parametrize("message,field", [
    ("not json at all", "JSON"),
    ("[1, 2]", "JSON"),
    (json.dumps({"op": "register"}), "job"),
    (json.dumps({"op": "register", "job": "a/b"}), "job"),
    (json.dumps({"op": "register", "job": "j", "rank": -1}), "rank"),
    (json.dumps({"op": "register", "job": "j", "weight": 1e9}), "weight"),
    (json.dumps({"op": "iter", "n": 3}), "before register"),
    (json.dumps({"op": "dance"}), "op"),
    ("x" * 5000, "longer than"),
])
def test_garbage_is_refused_and_named(server: Any, sock_path: Path, cg: Path, message: str, field: str) -> None:
    srv, table, rejected = server
    p = client(cg, sock_path, message)
    try:
        r = reply(p)
        assert not r["ok"] and r["reason"] == "garbage" and field in r["error"], r
    finally:
        finish(p)
    assert not table.entries and rejected.reasons == {"garbage": 1}


def test_a_silent_client_is_timed_out(server: Any, sock_path: Path) -> None:
    srv, table, rejected = server
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock_path))
    s.settimeout(5)
    started = time.monotonic()
    r = json.loads(s.recv(4096).split(b"\n")[0])
    assert s.recv(4096) == b""  # closed by the agent
    assert not r["ok"] and r["reason"] == "silent" and 0.4 < time.monotonic() - started < 3, r
    s.close()
    assert rejected.reasons == {"silent": 1}


def test_another_users_cgroup_cannot_be_registered(server: Any, sock_path: Path, cg: Path) -> None:
    """uid 65533 runs in the cgroup; uid 65534 joins it and tries to register its flows: refused."""
    srv, table, rejected = server
    victim = in_cgroup(cg, ["sleep", "30"], uid=OTHER)
    try:
        wait_until(lambda: str(victim.pid) in (cg / "cgroup.procs").read_text(), 3, "victim not in its cgroup")
        p = client(cg, sock_path, {"op": "register", "job": "steal"}, uid=NOBODY)
        try:
            r = reply(p)
            assert not r["ok"] and r["reason"] == "foreign_cgroup" and "65534" in r["error"], r
        finally:
            finish(p)
    finally:
        finish(victim)
    assert not table.entries and rejected.reasons == {"foreign_cgroup": 1}
    assert table.job_of(FLOW, FlowSample(1, os.stat(cg).st_ino)) is None  # no flow of that cgroup is anyone's


def test_an_unprivileged_user_registers_its_own_cgroup(server: Any, sock_path: Path, cg: Path) -> None:
    srv, table, rejected = server
    p = client(cg, sock_path, {"op": "register", "job": "mine"}, uid=NOBODY)
    try:
        r = reply(p)
        assert r["ok"], r
        assert [e.uid for e in table.entries.values()] == [NOBODY]
    finally:
        finish(p)


def test_the_root_cgroup_is_refused(server: Any, sock_path: Path) -> None:
    srv, table, rejected = server
    from leveller.agent.peers import cgroup2_mount

    p = client(Path(cgroup2_mount()), sock_path, {"op": "register", "job": "everyone"}, uid=NOBODY)
    try:
        r = reply(p)
        assert not r["ok"] and r["reason"] == "root_cgroup", r
    finally:
        finish(p)


def test_the_same_name_from_two_users_is_refused(server: Any, sock_path: Path, cg: Path, cg2: Path) -> None:
    srv, table, rejected = server
    first = client(cg, sock_path, {"op": "register", "job": "shared"}, uid=NOBODY)
    try:
        assert reply(first)["ok"]
        second = client(cg2, sock_path, {"op": "register", "job": "shared"}, uid=OTHER)
        try:
            r = reply(second)
            assert not r["ok"] and r["reason"] == "name_taken" and "65534" in r["error"], r
        finally:
            finish(second)
        assert [e.uid for e in table.entries.values()] == [NOBODY]  # the first goes on
    finally:
        finish(first)
    assert rejected.reasons == {"name_taken": 1}


def test_bounded_jobs_and_registrations_per_host(server: Any, sock_path: Path) -> None:
    """max_jobs=3, max_entries=5: the 4th job name and the 6th registration are refused."""
    srv, table, rejected = server
    with fresh_cgroup("lvregA") as a, fresh_cgroup("lvregB") as b, fresh_cgroup("lvregC") as c, \
            fresh_cgroup("lvregD") as d:
        procs = []
        try:
            for group, job in ((a, "j1"), (b, "j2"), (c, "j3")):
                procs.append(client(group, sock_path, {"op": "register", "job": job}))
                assert reply(procs[-1])["ok"]
            procs.append(client(d, sock_path, {"op": "register", "job": "j4"}))
            r = reply(procs[-1])
            assert not r["ok"] and r["reason"] == "jobs" and "at most 3" in r["error"], r
            for _ in range(2):  # more ranks of j1: registrations 4 and 5
                procs.append(client(a, sock_path, {"op": "register", "job": "j1"}))
                assert reply(procs[-1])["ok"]
            procs.append(client(a, sock_path, {"op": "register", "job": "j1"}))
            r = reply(procs[-1])
            assert not r["ok"] and r["reason"] == "registrations", r
            assert len(table.entries) == 5
        finally:
            finish(*procs)
    assert rejected.reasons == {"jobs": 1, "registrations": 1}


def test_registrations_per_second_are_bounded(sock_path: Path, cg: Path) -> None:
    rejected = Rejections()
    table = JobTable()
    with RegistrationServer(str(sock_path), table, rejected, Limits(registrations_per_s=3)):
        # one process, many connections: 3 pass (the burst), the rest within the same second are refused
        script = textwrap.dedent(f"""
            import json, socket
            out = []
            for i in range(8):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect({str(sock_path)!r})
                s.sendall(json.dumps({{"op": "register", "job": "r"}}).encode() + b"\\n")
                out.append(json.loads(s.makefile().readline())); s.close()
            print(json.dumps([o.get("reason", "ok") for o in out]))
        """)
        p = in_cgroup(cg, [sys.executable, "-c", script])
        out, err = p.communicate(input="", timeout=20)
    reasons = json.loads(out)
    assert reasons[:3] == ["ok"] * 3 and reasons.count("rate") >= 4, (reasons, err)
    assert rejected.reasons["rate"] == reasons.count("rate")


def test_a_flood_of_iteration_ends_is_dropped_and_counted(server: Any, sock_path: Path, cg: Path) -> None:
    """20 per second allowed (40 in a burst): of 500 sent at once, at most the allowance over the time they
    took to arrive is taken, the rest is dropped and counted; the job keeps its registration."""
    srv, table, rejected = server
    floods = [json.dumps({"op": "iter", "n": i}) for i in range(1, 501)]
    p = client(cg, sock_path, {"op": "register", "job": "loud"}, *floods)
    try:
        assert reply(p)["ok"]
        started = time.monotonic()
        ((tailer, tracker),) = table.logs()
        taken: list[str] = []

        def all_seen() -> bool:
            taken.extend(tailer.poll())
            return rejected.reasons.get("flood", 0) + len(taken) - 1 >= 500  # the first line is the start

        wait_until(all_seen, 10, lambda: f"flood: {rejected.reasons}, taken {len(taken)}")
        elapsed = time.monotonic() - started
        accepted = len(taken) - 1
        assert 40 <= accepted <= 40 + 20 * (elapsed + 0.5), (accepted, elapsed)
        assert rejected.reasons["flood"] == 500 - accepted
        tracker.feed_all(taken, time.time())
        assert tracker.jobs["loud"].iterations >= 40
        assert len(table.entries) == 1  # still registered
    finally:
        finish(p)
    assert set(rejected.reasons) == {"flood"}


def test_a_log_the_user_may_not_read_or_a_symlink_is_refused(server: Any, sock_path: Path, cg: Path,
                                                             shared_dir: Path) -> None:
    srv, table, rejected = server
    tmp_path = shared_dir
    secret = tmp_path / "secret.log"
    secret.write_text("leveller-iter job=x iter=0 t=1\n")
    os.chmod(secret, 0o600)  # root's
    link = tmp_path / "link.log"
    mine = tmp_path / "mine.log"
    mine.write_text("")
    os.chown(mine, NOBODY, NOBODY)
    link.symlink_to(mine)
    for path, words in ((secret, "may not read"), (link, "symbolic link"), (tmp_path / "none.log", "no such")):
        p = client(cg, sock_path, {"op": "register", "job": "x", "log": str(path)}, uid=NOBODY)
        try:
            r = reply(p)
            assert not r["ok"] and r["reason"] == "log" and words in r["error"], r
        finally:
            finish(p)
    p = client(cg, sock_path, {"op": "register", "job": "x", "log": str(mine)}, uid=NOBODY)
    try:
        assert reply(p)["ok"]
    finally:
        finish(p)
    assert rejected.reasons == {"log": 3}


def test_the_agent_goes_on_after_every_refusal(server: Any, sock_path: Path, cg: Path) -> None:
    """After garbage, a silent client and a flood, a good client still registers within a moment."""
    srv, table, rejected = server
    bad = [client(cg, sock_path, "garbage"), client(cg, sock_path, "{\"op\": \"register\"")]
    try:
        good = client(cg, sock_path, {"op": "register", "job": "fine"})
        try:
            assert reply(good)["ok"]
        finally:
            finish(good)
    finally:
        finish(*bad)


class CgroupFlow:
    """The flow source of a host whose one flow is sent from ``cgroup`` (its real cgroup id)."""

    def __init__(self, cgroup: Path) -> None:
        self.id = os.stat(cgroup).st_ino

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {FLOW: FlowSample(4096, self.id)}


class Marks:
    def __init__(self) -> None:
        self.marks: dict[FlowKey, int] = {}

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self.marks = dict(marks)

    def clear(self) -> None:
        self.marks = {}


def test_a_hooked_job_with_no_flag_is_ranked_marked_and_forgotten_when_it_ends(sock_path: Path, cg: Path) -> None:
    """The hook registers (no agent flag names the job); the controller ranks it and its flow is marked;
    when its process exits the job leaves the reports, the marks go, the controller forgets it."""
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.2, lease_s=3.0,
                     stale_after_s=1.0)
    grpc_server, port = serve(ctl, "127.0.0.1:0", SECRET, on_reject=ctl.reject)
    table = JobTable()
    marks = Marks()
    agent = Agent("h1", [], ControllerClient(f"127.0.0.1:{port}", SECRET), marks, flows=CgroupFlow(cg),
                  classifier=table, jobs=table, ideal_times=table.ideal_times, weights=table.weights)
    hooked = textwrap.dedent("""
        import sys, time
        from leveller.jobs.hook import iteration_done
        for _ in range(int(sys.argv[1])):
            time.sleep(0.1); iteration_done()
    """)
    stop = threading.Event()
    try:
        with RegistrationServer(str(sock_path), table, Rejections()):
            env = dict(os.environ, LEVELLER_AGENT_SOCK=str(sock_path), LEVELLER_JOB="hooked",
                       LEVELLER_ITER_LOG=os.devnull)
            p = subprocess.Popen(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", sys.executable,
                                  "-c", hooked, "30"], env=env, stderr=subprocess.PIPE, text=True)
            runner = threading.Thread(target=agent.run, args=(0.2, stop), kwargs={"poll_s": 0.05}, daemon=True)
            ticker = threading.Thread(target=lambda: [ctl.step(time.time()) or stop.wait(0.2)
                                                      for _ in iter(lambda: stop.is_set(), True)], daemon=True)
            runner.start()
            ticker.start()
            wait_until(lambda: marks.marks.get(FLOW), 10, lambda: f"never marked; status {ctl.status(time.time())}")
            assert [j["job"] for j in ctl.status(time.time())["jobs"]] == ["hooked"]
            p.wait(20)
            assert p.returncode == 0, p.stderr.read() if p.stderr else ""
            wait_until(lambda: not table.entries, 3, "the job did not leave when its process exited")
            wait_until(lambda: not marks.marks, 3, "the ended job's flow kept its mark")
            wait_until(lambda: not ctl.status(time.time())["jobs"], 5, "the controller did not forget the job")
    finally:
        stop.set()
        grpc_server.stop(grace=None)


def test_a_job_registered_while_its_agent_was_down_is_reported_when_it_comes_back(sock_path: Path,
                                                                                 cg: Path) -> None:
    """The link retries: an agent started after the job gets its registration and its count so far."""
    link = AgentLink(str(sock_path), "early", 0, retry_s=0.1)
    try:
        for n in range(1, 6):
            link.iteration(n)
        time.sleep(0.3)
        assert link.registered is None  # nobody there yet
        table = JobTable()
        from leveller.agent.peers import cgroup2_mount, cgroup_of

        home = Path(cgroup2_mount() + cgroup_of(os.getpid()))
        (cg / "cgroup.procs").write_text(str(os.getpid()))  # this test process registers: its cgroup is the job's
        try:
            with RegistrationServer(str(sock_path), table, Rejections()):
                assert link.wait_registered(5)
                ((tailer, tracker),) = table.logs()
                wait_until(lambda: tracker.feed_all(tailer.poll(), time.time()) or
                           tracker.jobs.get("early") and tracker.jobs["early"].iterations == 5, 3,
                           "the count so far did not arrive")
                assert tracker.jobs["early"].start_time is not None
        finally:
            (home / "cgroup.procs").write_text(str(os.getpid()))
    finally:
        link.close()


@contextlib.contextmanager
def inside(cgroup: Path) -> Iterator[None]:
    """This test process (and so what it starts) in ``cgroup`` for a while; put back after."""
    from leveller.agent.peers import cgroup2_mount, cgroup_of

    home = Path(cgroup2_mount() + cgroup_of(os.getpid()))
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (home / "cgroup.procs").write_text(str(os.getpid()))


def test_the_rdma_shim_registers_its_job_when_it_starts(shim_build: Path, sock_path: Path, cg: Path,
                                                        tmp_path: Path) -> None:
    """The shim (FAKE verbs provider: no RDMA NIC here) registers LEVELLER_JOB and LEVELLER_RANK at its
    first QP, keeps the registration while the program runs, and its end ends it."""
    from leveller.bench.shim import StreamRun

    table, rejected = JobTable(), Rejections()
    with RegistrationServer(str(sock_path), table, rejected):
        with inside(cg):
            run = StreamRun(shim_build, tmp_path, mode="linked", job="roce-job",
                            extra_env={"LEVELLER_AGENT_SOCK": str(sock_path), "LEVELLER_RANK": "3"})
        try:
            wait_until(lambda: table.entries, 5, lambda: f"the shim did not register ({rejected.reasons})")
            (entry,) = table.entries.values()
            assert (entry.job, entry.rank, entry.cgroup, entry.source) == ("roce-job", 3, str(cg), "socket")
        finally:
            run.stop()
        wait_until(lambda: not table.entries, 5, "the registration outlived the program")
    assert rejected.total == 0 and table.ended == {"closed": 1}


def test_connections_beyond_the_bound_are_refused(sock_path: Path) -> None:
    rejected = Rejections()
    with RegistrationServer(str(sock_path), JobTable(), rejected, Limits(max_connections=2, hello_s=5)):
        held = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(sock_path))
            held.append(s)
        time.sleep(0.3)  # the server accepted both
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.connect(str(sock_path))
        extra.settimeout(5)
        r = json.loads(extra.recv(4096).split(b"\n")[0])
        assert not r["ok"] and r["reason"] == "connections" and "at most 2" in r["error"], r
        for s in (*held, extra):
            s.close()
    assert rejected.reasons == {"connections": 1}
