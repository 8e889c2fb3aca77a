"""Testbed up/down on real namespaces and a real private OVS: queues exist, and `down`
leaves nothing behind, also after a crashed `up`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from leveller.core.topology import preset
from leveller.testbed.cluster import Testbed
from tests.integration.support import wait_listening

pytestmark = pytest.mark.privileged
LEVELLER = [sys.executable, "-m", "leveller.cli"]
OVS_SYSTEM_DIRS = ("/var/run/openvswitch", "/run/openvswitch", "/var/log/openvswitch", "/etc/openvswitch")


def netns_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def procs_mentioning(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return [p for p in pids if p != os.getpid()]


def snapshot_system_dirs() -> set[str]:
    files = set()
    for d in OVS_SYSTEM_DIRS:
        if os.path.isdir(d):
            files |= {str(p) for p in Path(d).rglob("*")}
    return files


def assert_gone(name: str, run_dir: Path) -> None:
    assert netns_with(f"lvtb-{name}-") == []
    assert procs_mentioning(str(run_dir)) == []
    assert not run_dir.exists()


@pytest.fixture
def names(tmp_path):
    name = "t" + uuid.uuid4().hex[:8]
    run_dir = tmp_path / "run"
    yield name, run_dir
    Testbed(name, run_dir).down()


def test_up_builds_queues_and_down_removes_everything(names):
    name, run_dir = names
    before = snapshot_system_dirs()
    # the default `up` starts the SDN app and returns once the switches forward
    out = subprocess.run([*LEVELLER, "testbed", "up", "--topology", "dumbbell", "--name", name,
                          "--run-dir", str(run_dir), "--json"], capture_output=True, text=True, check=True).stdout
    status = json.loads(out)
    assert set(status["hosts"]) == {"h1", "h2", "h3", "h4"}
    assert status["hosts"]["h3"] == {**status["hosts"]["h3"], "ip": "10.0.0.3", "switch": "s2",
                                     "netns": f"lvtb-{name}-h3"}
    assert status["switches"] == ["s1", "s2"]
    assert {"a": "s1", "b": "s2", "rate_mbps": 50.0} in status["links"]
    assert all(status["processes"][d] for d in ("ovsdb-server", "ovs-vswitchd", "sdn"))
    # the emulated switch is served before the hosts' load: every ovs-vswitchd thread at SWITCH_NICE
    from leveller.testbed.ovs import SWITCH_NICE, OvsInstance
    pid = OvsInstance(run_dir / "ovs", f"lvtb-{name}-sw").pid("ovs-vswitchd")
    assert pid is not None
    threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    assert len(threads) >= 2 and {os.getpriority(os.PRIO_PROCESS, t) for t in threads} == {SWITCH_NICE} != {0}
    assert status["forwarding"]["on"] is True
    assert all(s["connected"] and s["flows"] > 0 for s in status["forwarding"]["switches"].values())
    # hosts on different switches reach each other over the bottleneck: ping, and TCP both ways
    tb = Testbed(name, run_dir)
    assert subprocess.run(tb.exec_argv("h1", ["ping", "-c", "1", "-W", "5", "10.0.0.3"]),
                          capture_output=True).returncode == 0
    echo = "import socket; c, _ = socket.create_server(('0.0.0.0', 5001)).accept(); c.sendall(c.recv(64).upper())"
    with subprocess.Popen(tb.exec_argv("h3", [sys.executable, "-c", echo])) as server:
        wait_listening(tb, "h3", 5001)
        ask = "import socket; c = socket.create_connection(('10.0.0.3', 5001), timeout=10); c.sendall(b'hi'); " \
              "print(c.recv(64).decode())"
        reply = subprocess.run(tb.exec_argv("h1", [sys.executable, "-c", ask]), capture_output=True, text=True,
                               timeout=30)
        assert reply.stdout.strip() == "HI", reply.stderr
        server.wait(timeout=10)
    # 4 strict-priority HTB classes on the bottleneck port, highest queue served first, and above them the
    # control queue (TCP's ACKs, class 1:5, served before every level); 50 Mbit/s ceiling
    tc = subprocess.run(["ip", "netns", "exec", f"lvtb-{name}-sw", "tc", "class", "show", "dev", "s1-p1"],
                        capture_output=True, text=True, check=True).stdout
    classes = {line.split()[2]: line for line in tc.splitlines() if "parent 1:fffe" in line}
    assert set(classes) == {"1:1", "1:2", "1:3", "1:4", "1:5"}
    assert "prio 0" in classes["1:5"] and "prio 1" in classes["1:4"] and "prio 4" in classes["1:1"]
    assert all("ceil 50Mbit" in line for line in classes.values())
    # a host's egress has the same queues at its link rate, filled by DSCP (not the FIFO hosts had)
    host = subprocess.run(tb.exec_argv("h1", ["tc", "class", "show", "dev", "eth0"]),
                          capture_output=True, text=True, check=True).stdout
    mine = {line.split()[2]: line for line in host.splitlines() if "parent 1:fffe" in line}
    assert set(mine) == set(classes) and "prio 0" in mine["1:5"] and "prio 4" in mine["1:1"], host
    rate = next(lk["rate_mbps"] for lk in status["links"] if "h1" in (lk["a"], lk["b"]))
    shown = f"{rate / 1000:g}Gbit" if rate >= 1000 else f"{rate:g}Mbit"  # as tc prints it
    assert all(f"ceil {shown}" in line for line in mine.values()), host
    filters = subprocess.run(tb.exec_argv("h1", ["tc", "filter", "show", "dev", "eth0", "parent", "1:"]),
                             capture_output=True, text=True, check=True).stdout
    assert filters.count("flowid") == 2 * 4 + 2, filters
    # a second `up` with the same topology reuses it (`--sdn`, the old opt-in, is still accepted);
    # with another topology it refuses
    again = subprocess.run([*LEVELLER, "testbed", "up", "--topology", "dumbbell", "--name", name,
                            "--run-dir", str(run_dir), "--sdn"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "forwarding: on" in again.stdout
    other = subprocess.run([*LEVELLER, "testbed", "up", "--topology", "leafspine", "--name", name,
                            "--run-dir", str(run_dir)], capture_output=True, text=True)
    assert other.returncode == 2 and "already exists" in other.stderr

    for _ in range(2):  # down works twice
        subprocess.run([*LEVELLER, "testbed", "down", "--name", name, "--run-dir", str(run_dir)], check=True,
                       capture_output=True)
        assert_gone(name, run_dir)
    assert snapshot_system_dirs() == before


def test_no_sdn_leaves_forwarding_off_and_status_says_so(names):
    name, run_dir = names
    subprocess.run([*LEVELLER, "testbed", "up", "--topology", "dumbbell", "--name", name, "--run-dir", str(run_dir),
                    "--no-sdn", "--json"], capture_output=True, check=True)
    status = subprocess.run([*LEVELLER, "testbed", "status", "--name", name, "--run-dir", str(run_dir)],
                            capture_output=True, text=True, check=True).stdout
    assert "forwarding: OFF" in status and "no SDN app attached" in status, status
    fwd = json.loads(subprocess.run([*LEVELLER, "testbed", "status", "--name", name, "--run-dir", str(run_dir),
                                     "--json"], capture_output=True, text=True, check=True).stdout)["forwarding"]
    assert fwd["on"] is False
    assert fwd["switches"] == {"s1": {"connected": False, "flows": 0}, "s2": {"connected": False, "flows": 0}}
    # and indeed: fail-secure switches drop the packets
    tb = Testbed(name, run_dir)
    assert subprocess.run(tb.exec_argv("h1", ["ping", "-c", "1", "-W", "1", "10.0.0.3"]),
                          capture_output=True).returncode != 0


def test_down_after_a_crashed_up(names):
    name, run_dir = names
    # `up` dies abruptly (os._exit, no cleanup) after OVS started and while switches are configured
    code = ("import os, sys\n"
            "from leveller.core.topology import preset\n"
            "from leveller.testbed.cluster import Testbed\n"
            "def crash(msg):\n"
            "    if msg == 'configuring switch spine1': os._exit(9)\n"
            f"Testbed.up(preset('leafspine'), {name!r}, {str(run_dir)!r}, progress=crash)\n")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert len(netns_with(f"lvtb-{name}-")) == 7 and procs_mentioning(str(run_dir))
    subprocess.run([*LEVELLER, "testbed", "down", "--name", name, "--run-dir", str(run_dir)], check=True,
                   capture_output=True)
    assert_gone(name, run_dir)


def test_failed_up_removes_what_it_made(names):
    name, run_dir = names

    def fail(msg):
        if msg == "starting Open vSwitch":
            raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        Testbed.up(preset("dumbbell"), name, run_dir, progress=fail)
    assert_gone(name, run_dir)


@pytest.mark.parametrize("body, needle", [
    ('preset = "torus"', "preset"),
    ('[[switches]]\nname="s1"\n[[hosts]]\nname="h1"\n[[links]]\na="h1"\nb="s7"\nrate_mbps=10', "links[0].b"),
    ('[[switches]]\nname="s1"\n[[hosts]]\nname="h1"\n[[links]]\na="h1"\nb="s1"\nrate_mbps=0', "rate_mbps"),
    ('[[switches]]\nname="s1"\n[[hosts]]\nname="s1"\n[[links]]\na="s1"\nb="s1"\nrate_mbps=1', "unique"),
])
def test_bad_topology_files_are_rejected_before_anything_is_created(names, tmp_path, body, needle):
    name, run_dir = names
    f = tmp_path / "bad.toml"
    f.write_text(body)
    res = subprocess.run([*LEVELLER, "testbed", "up", "--topology", str(f), "--name", name,
                          "--run-dir", str(run_dir)], capture_output=True, text=True)
    assert res.returncode == 2 and needle in res.stderr
    assert_gone(name, run_dir)


BIDIR_S = 15
FIG9 = Path(__file__).resolve().parents[2] / "examples" / "topologies" / "dumbbell-fig9.toml"


def test_the_bottleneck_carries_its_rate_both_ways_at_once(names):
    """Two bulk TCP flows in opposite directions over Figure 9's 25 Mbit/s bottleneck (iperf3 --bidir): each
    direction's ACKs share the link with the other's data. Behind 100 data packets (48 ms) in one FIFO they
    came in bunches and the two directions got 22.3 / 18.7 and 20.9 / 19.6 Mbit/s; with the control queue
    about 23.5 each, the payload's share of the rate (1448 of 1514 bytes: 23.9)."""
    name, run_dir = names
    subprocess.run([*LEVELLER, "testbed", "up", "--topology", str(FIG9), "--name", name, "--run-dir",
                    str(run_dir), "--json"], capture_output=True, text=True, check=True)
    tb = Testbed(name, run_dir)
    with subprocess.Popen(tb.exec_argv("h4", ["iperf3", "-s", "-1", "-p", "5301"]), stdout=subprocess.DEVNULL):
        wait_listening(tb, "h4", 5301)
        out = subprocess.run(tb.exec_argv("h1", ["iperf3", "-c", "10.0.0.4", "-p", "5301", "--bidir", "-t",
                                                 str(BIDIR_S), "-J"]),
                             capture_output=True, text=True, timeout=BIDIR_S + 30, check=True).stdout
    end = json.loads(out)["end"]
    mbps = [end[k]["bits_per_second"] / 1e6 for k in ("sum_received", "sum_received_bidir_reverse")]
    assert min(mbps) >= 0.88 * 25, mbps  # 22 Mbit/s each way


# Receiver: one listener per port, each connection's window clamped before listen (accepted sockets
# inherit it), reading until the sender closes. Sender: IP_TOS, sends for the given seconds.
_SINK = """
import socket, sys, threading
def serve(port):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, int(sys.argv[1])); ls.bind(("", port)); ls.listen()
    c, _ = ls.accept()
    while c.recv(1 << 16):
        pass
ts = [threading.Thread(target=serve, args=(int(p),)) for p in sys.argv[2:]]
[t.start() for t in ts]; [t.join() for t in ts]
"""
_SOURCE = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[3]) << 2)
buf, end = bytes(1 << 16), time.time() + float(sys.argv[4])
while time.time() < end:
    s.sendall(buf)
s.close()
"""
CLAMP_BYTES = 64 * 1024  # the live experiments' window per flow (policy_run.WINDOW_BYTES): 45 full frames
FLOW_S = 10


def _retransmitted(tb: Testbed, host: str) -> int:
    snmp = subprocess.run(tb.exec_argv(host, ["cat", "/proc/net/snmp"]), capture_output=True, text=True,
                          check=True).stdout.splitlines()
    head, values = [line.split() for line in snmp if line.startswith("Tcp:")][:2]
    return int(values[head.index("RetransSegs")])


def test_the_switch_queues_more_than_its_default_send_buffer_without_losing_a_packet(names):
    """Three TCP flows into h4's switch port, each with at most 64 KB in flight: the top level's flow (DSCP 8)
    holds up to 45 packets in its queue, the two starved ones up to 90 in theirs, so no queue overflows.
    The userspace switch sends every port's packets through one socket; with the machine's default send
    buffer (about 92 queued frames in all) it dropped the packets past that, whatever their queue, counted by
    neither tc nor OVS: here the top flow resent 233 segments. With the buffer sized to the queues it loses
    none; the starved flows still resend a few on timeouts (strict priority, not loss)."""
    from leveller.core.topology import topology_from_dict
    from leveller.experiments.shared.star import topology_dict

    name, run_dir = names
    tb = Testbed.up(topology_from_dict(topology_dict()), name, run_dir)
    tb.start_sdn(wait_forwarding=True)
    ports = ["5401", "5402", "5403"]
    with subprocess.Popen(tb.exec_argv("h4", [sys.executable, "-c", _SINK, str(CLAMP_BYTES), *ports])) as sink:
        for p in ports:
            wait_listening(tb, "h4", int(p))
        before = {h: _retransmitted(tb, h) for h in ("h1", "h2", "h3")}
        senders = [subprocess.Popen(tb.exec_argv(h, [sys.executable, "-c", _SOURCE, "10.0.0.4", p, dscp,
                                                     str(FLOW_S)]))
                   for h, p, dscp in (("h1", "5401", "8"), ("h2", "5402", "0"), ("h3", "5403", "0"))]
        for s in senders:
            assert s.wait(timeout=FLOW_S + 30) == 0
        sink.wait(timeout=30)
    resent = {h: _retransmitted(tb, h) - n for h, n in before.items()}
    assert resent["h1"] <= 5, resent  # the top level's flow: 233 resent before (its packets dropped)
    assert sum(resent.values()) <= 200, resent  # the starved ones resend on timeouts only: 44 (412 before)
