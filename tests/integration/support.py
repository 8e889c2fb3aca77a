"""Shared pieces of the live tests: processes, polling with a deadline, ports, cgroups, the dumbbell testbed,
and a job on a veth pair marked by a live controller and agent (``job_on_the_wire``)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond: Callable[[], Any], timeout_s: float, what: str | Callable[[], str],
               step_s: float = 0.05) -> Any:
    """``tests.helpers.wait.wait_until`` in the live tests' spelling (``step_s``, polled every 50 ms)."""
    return wait.wait_until(cond, timeout_s, what, interval=step_s)


class Proc:
    """A subprocess with its output in a file; stopped (SIGINT, then SIGKILL) on exit."""

    def __init__(self, out: Path, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        self.out = out
        with out.open("ab") as f:
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))

    def output(self) -> str:
        """The last 3,000 characters of the output (for failure messages)."""
        return self.out.read_text(errors="replace")[-3000:]

    def text(self) -> str:
        """All the output: what an assertion searches (a --json process pushes its first log lines out
        of ``output()`` within seconds)."""
        return self.out.read_text(errors="replace")

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self) -> None:
        self.p.kill()
        self.p.wait(10)

    def interrupt(self, timeout_s: float = 20) -> int:
        """SIGINT and wait; a process that does not stop fails the test with its threads' stacks."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            return self.p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.p.send_signal(signal.SIGUSR1)  # `leveller agent` dumps every thread's stack
            time.sleep(1)
            raise AssertionError(f"still running {timeout_s:g} s after SIGINT:\n{self.output()}") from None

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def reset_datapath(dp: Any) -> Any:
    """A module-shared loaded Datapath made as good as freshly loaded: no flow marked or counted, every
    slot free (the ring full: a slot freed now comes back after all the others), the mark array zeroed, no
    lease. Checked, so a test never starts on a program the last test left dirty."""
    dp.clear_dscp(list(dp.slots.slot_of))
    dp.forget_flows(list(dp.read_stats()))
    dp.set_lease(0)
    assert dp.read_dscp() == {} and not dp.read_mark_array().any()
    assert len(dp.slots) == 0 and dp.slots.pool.free == dp.mark_slots
    return dp


def leveller_proc(out: Path, *args: str, env: Mapping[str, str] | None = None) -> Proc:
    """`leveller ARGS...` run by this interpreter."""
    return Proc(out, [sys.executable, "-m", "leveller.cli", *args], env)


def cgroup2_mount() -> Path:
    """Where cgroup v2 is mounted (discovered: /sys/fs/cgroup, /sys/fs/cgroup/unified, ...)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    pytest.fail("no cgroup2 file system mounted (needed for bpf_skb_cgroup_id)")


@contextlib.contextmanager
def fresh_cgroup(prefix: str) -> Iterator[Path]:
    """A new, uniquely named cgroup v2; removed at the end (fails the test if it cannot be)."""
    path = cgroup2_mount() / f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
    path.mkdir()
    try:
        yield path
    finally:
        wait.wait_until(lambda: _removed(path), 5.0, f"could not remove the test cgroup {path}", interval=0.1)


def _removed(cgroup: Path) -> bool:
    """Remove an empty cgroup; False while a just-exited process lingers a moment in its cgroup.procs."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def send_report(address: str, body: bytes, secret: bytes | None,
                metadata: tuple[tuple[str, str], ...] | None = None) -> tuple[Any, str]:
    """One raw Report call: ``body`` signed now with ``secret`` (none if None), or sent with the given
    ``metadata`` (a captured signature); returns (grpc.StatusCode, details)."""
    import grpc

    from leveller.rpc import auth
    from leveller.rpc.transport import REPORT

    if metadata is None:
        metadata = auth.metadata(secret, REPORT, time.time(), body) if secret is not None else ()
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        try:
            ch.unary_unary(REPORT).with_call(body, timeout=10, metadata=metadata)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def wait_connected(client: Any, timeout: float = 20.0, queues: bool = True) -> None:
    """Wait until the SDN app (an sdn.client.SdnClient) reports every switch connected and, with
    ``queues``, their egress ports prioritising by DSCP (health's queues.ready)."""
    def ready() -> bool:
        try:
            health = client.health()
        except OSError:
            return False
        return all(health["switches"].values()) and (not queues or bool(health["queues"]["ready"]))

    wait.wait_until(ready, timeout, lambda: f"switches did not connect (or their queues are not ready): "
                                            f"{client.health()}", interval=0.1)


def listening(tb: Any, host: str, port: int) -> bool:
    """True once a TCP socket listens on ``port`` in the testbed host's namespace."""
    res = subprocess.run(tb.exec_argv(host, ["ss", "-Hltn", f"sport = :{port}"]), capture_output=True, text=True)
    return res.returncode == 0 and bool(res.stdout.strip())


def wait_listening(tb: Any, host: str, port: int, timeout_s: float = 20.0) -> None:
    """Wait until a server in ``host``'s namespace listens on ``port`` (not "probably up after a sleep")."""
    wait_until(lambda: listening(tb, host, port), timeout_s, f"a listener on {host}:{port}")


def run_pair(tb: Any, tos_a: int, tos_b: int, seconds: int = 8, window: tuple[float, float] = (2.0, 8.0),
             during: Callable[[], None] | None = None) -> list[float]:
    """On a dumbbell testbed: iperf3 flow A h1->h3 and flow B h2->h4 at the same time, with IP_TOS
    ``tos_a`` / ``tos_b``; receiver Mbit/s of each over ``window`` seconds of the run."""
    from leveller.testbed.traffic import iperf_client, iperf_server, received_mbps

    procs: list[subprocess.Popen[str]] = []
    try:
        servers = [iperf_server(tb, "h3", 5301), iperf_server(tb, "h4", 5302)]
        procs += servers
        wait_listening(tb, "h3", 5301)
        wait_listening(tb, "h4", 5302)
        clients = [iperf_client(tb, "h1", "10.0.0.3", 5301, seconds, tos_a),
                   iperf_client(tb, "h2", "10.0.0.4", 5302, seconds, tos_b)]
        procs += clients
        if during:
            during()
        outs = [p.communicate(timeout=seconds + 30) for p in clients + servers]
        for p, (out, err) in zip(clients + servers, outs):
            assert p.returncode == 0, err or out[-500:]
        return [received_mbps(out, *window) for out, _ in outs[2:]]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def assert_top_takes_the_link(top: float, bottom: float, bottleneck: float, floor: float = 0.7) -> None:
    """Strict priority on a ``bottleneck`` Mbit/s link: the bottom flow is starved (under a tenth of the top
    one's rate) while the top one carries most of the link (``floor``). Without the queue mapping both get
    about half; without forwarding, nothing. ``floor`` is not the quiet figure (0.95): a loaded CI machine
    delivered 0.74-0.78 of the link to the top flow (the bottom one at 0.01) before the HTB root's burst
    was widened (sdn.tcmap)."""
    assert top >= floor * bottleneck and bottom <= 0.1 * top, (top, bottom)


def root_burst(tb: Any, port: str = "s1-p1") -> int:
    """The burst (bytes) of a switch port's HTB root class, the one OVS sets to one MTU."""
    from leveller.core.qos import HTB_ROOT_MINOR
    from sdn.tcmap import parse_htb_classes

    out = subprocess.run(["ip", "netns", "exec", tb.state.switch_netns, "tc", "-d", "class", "show", "dev", port],
                         capture_output=True, text=True, check=True).stdout
    root = parse_htb_classes(out)[HTB_ROOT_MINOR]
    return min(root.burst, root.cburst)


@contextlib.contextmanager
def dumbbell_testbed(tmp: Path, bottleneck_mbps: float, qos: bool = True,
                     sdn_args: tuple[str, ...] = (), floor: float | None = None) -> Iterator[tuple[Any, Any]]:
    """A dumbbell testbed (h1, h2 - s1 - bottleneck - s2 - h3, h4) with the SDN app running and every
    switch connected: (Testbed, SdnClient). ``qos=False`` leaves the switch ports without queues;
    ``floor``: the queues' floor (None: the testbed's default, 0: pure strict priority)."""
    import uuid

    from leveller.core.qos import DEFAULT_FLOOR
    from leveller.core.topology import preset
    from leveller.testbed.cluster import Testbed
    from sdn.client import SdnClient

    tb = Testbed.up(preset("dumbbell", {"bottleneck_mbps": bottleneck_mbps}), "p" + uuid.uuid4().hex[:8],
                    tmp / "run", qos=qos, floor=DEFAULT_FLOOR if floor is None else floor)
    try:
        tb.start_sdn(extra=list(sdn_args))
        client = SdnClient.for_run_dir(tb.run_dir)
        wait_connected(client, queues=qos)
        yield tb, client
    finally:
        tb.down()


def stop_gracefully(proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    """SIGINT a long run that is still going (it tears down what it built), kill it if it does not end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def argvs_mentioning(text: str) -> list[list[str]]:
    """The command lines of the running processes that contain ``text``."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                argv = (p / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if text in " ".join(argv):
                out.append(argv)
    return out


def demo_leftovers(name: str) -> dict[str, list[str]]:
    """What a demo-style run named ``name`` left behind: namespaces, processes, its run and work dirs."""
    from leveller.experiments.shared.procstat import leftovers

    run_dir = Path("/run/leveller") / name
    return leftovers(name, [run_dir, run_dir.parent / f"{name}.work"])


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines a process printed so far (--json), skipping a line being written."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # being written
    return out


class TcpCapture(threading.Thread):
    """A thread reading one TCP flow's IPv4 frames (sport -> dport) from an AF_PACKET socket until
    ``stop`` is set; ``seen`` gets each frame with its header fields."""

    def __init__(self, sock: socket.socket, sport: int, dport: int) -> None:
        super().__init__(daemon=True)
        self.sock, self.sport, self.dport = sock, sport, dport
        self.stop = threading.Event()

    def seen(self, seq: int, flags: int, payload: int, dscp: int) -> None:
        raise NotImplementedError

    def run(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(65535)
            except (TimeoutError, OSError):
                continue
            if frame[12:14] != b"\x08\x00" or frame[23] != 6:  # IPv4, TCP
                continue
            ihl = (frame[14] & 0x0F) * 4
            tcp = frame[14 + ihl:]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            if (sport, dport) == (self.sport, self.dport):
                total_len = struct.unpack("!H", frame[16:18])[0]
                self.seen(seq, tcp[13], total_len - ihl - (tcp[12] >> 4) * 4, frame[15] >> 2)


# ---- a job on a veth pair, its packets captured, marked by a live controller and agent --------------------

SECRET = "live-faults-secret-0123456789"
ENV = {"LEVELLER_SECRET": SECRET}
JOB_PORT = 47700
DSCP_TOP = 8  # level 1 of the default K=2 map; level 0 is DSCP 0 (unmarked)


def controller(tmp: Path, port: int, *extra: str) -> Proc:
    """`leveller controller` on 127.0.0.1:``port`` (the secret from ENV, tau 0.3 s, lease 1.5 s), its output in
    ``tmp``/controller.out; ``extra`` flags come after those (a later --tau wins)."""
    return leveller_proc(tmp / "controller.out", "controller", "--listen", f"127.0.0.1:{port}", "--tau", "0.3",
                         "--lease", "1.5", *extra, env=ENV)


def wait_accepting(port: int, proc: Proc, timeout_s: float = 30.0) -> None:
    """Wait until 127.0.0.1:``port`` accepts TCP connections (a server ``proc`` started and listens)."""
    def accepts() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    wait_until(accepts, timeout_s, lambda: f"nothing listens on port {port}: {proc.output()}")


def agent(tmp: Path, port: int, log: Path, dev: str, netns: str, name: str = "agent") -> Proc:
    """`leveller agent` of host "ha" marking job `live` (``log``) on ``dev`` in ``netns``, reporting to the
    controller on ``port`` every 0.2 s; its output in ``tmp``/``name``.out."""
    return leveller_proc(tmp / f"{name}.out", "agent", "--controller", f"127.0.0.1:{port}", "--host", "ha",
                         "--log", str(log), "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}", "--ideal-time",
                         "live=0.2", "--dev", dev, "--netns", netns, "--interval", "0.2", env=ENV)


@contextlib.contextmanager
def job_on_the_wire(tmp: Path, prefix: str, job_s: float = 90.0) -> Iterator[tuple[Any, Any, Path]]:
    """A veth pair between two namespaces, job `live` sending across it for ``job_s`` seconds (its log at
    the path yielded) and a capture of its packets at the receiver: (pair, wire, log)."""
    from leveller.bench.levels_latency import WireWatch
    from leveller.jobs.launcher import JobRun
    from leveller.jobs.spec import RunConfig, WorkerPlace
    from leveller.testbed.vethpair import VethPair

    log = tmp / "job.log"
    with VethPair(prefix=prefix) as pair, \
            WireWatch(pair.ns_b, pair.if_b, str(pair.ip_a), JOB_PORT, proto=socket.IPPROTO_TCP) as wire:
        spec = RunConfig("live", (WorkerPlace(str(pair.ip_b), pair.ns_b), WorkerPlace(str(pair.ip_a), pair.ns_a)),
                         compute_s=0.05, comm_s=0.05, rate_bps=100e6, port=JOB_PORT, duration_s=job_s, pace=True)
        with JobRun(spec, log=str(log)):
            yield pair, wire, log
