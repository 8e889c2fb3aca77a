"""Strict priority on real OVS driven by the real os-ken app: two TCP flows share the
dumbbell's 20 Mbit/s bottleneck; the DSCP marks (IP_TOS on the sender socket) decide
who gets the link. Also: forwarding and the queue mapping survive restarts.

20 Mbit/s, not 50: at 50 the bottom flow once carried 7.6 Mbit/s against 47.6 (a `make test` run);
the top queue ran dry while ovs-vswitchd waited for a CPU, as test_switch_config_ovs.py's docstring
measures, and a queue of the same packets lasts 2.5 times longer at 20. The restart test keeps the
dumbbell preset's 50 Mbit/s: its operator step, `leveller testbed up`, rebuilds that preset."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from leveller.core.qos import default_level_map

from .support import assert_top_takes_the_link, dumbbell_testbed, root_burst, run_pair, wait_until

pytestmark = pytest.mark.privileged
BOTTLENECK = 20.0
LEVELS = default_level_map(4)
TOP = LEVELS.dscp_for_level(3) << 2
BOTTOM = LEVELS.dscp_for_level(0) << 2
RESTART_MBPS = 50.0  # the dumbbell preset's bottleneck, which `leveller testbed up` builds


def queue_burst(mbps: float) -> int:
    """Bytes of the HTB root's burst: 10 ms of the bottleneck (leveller.core.qos.HTB_BURST_S)."""
    return int(mbps * 1e6 * 0.01 / 8)




def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a daemon killed outside our children may stay one)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.fixture
def dumbbell(tmp_path):
    # floor 0: the paper's pure strict priority, whose starvation of the bottom flow is asserted here
    with dumbbell_testbed(tmp_path, BOTTLENECK, floor=0.0) as (tb, client):
        yield tb, client


@pytest.fixture
def preset_dumbbell(tmp_path):
    with dumbbell_testbed(tmp_path, RESTART_MBPS, floor=0.0) as (tb, client):
        yield tb, client


def test_top_level_flow_takes_the_bottleneck(dumbbell):
    tb, client = dumbbell
    # the queues' burst came from OVSDB, the root's (one MTU from OVS) was widened to it by the app
    assert root_burst(tb) == queue_burst(BOTTLENECK)
    a, b = run_pair(tb, TOP, BOTTOM)
    print(f"A top / B bottom: A {a:.1f} B {b:.1f} Mbit/s")
    assert_top_takes_the_link(a, b, BOTTLENECK)
    a, b = run_pair(tb, BOTTOM, TOP)
    print(f"A bottom / B top: A {a:.1f} B {b:.1f} Mbit/s")
    assert_top_takes_the_link(b, a, BOTTLENECK)
    a, b = run_pair(tb, 0, 0)
    print(f"unmarked: A {a:.1f} B {b:.1f} Mbit/s")
    # unmarked, neither is starved (marked, the bottom flow got under 1% of the link): two TCP flows share
    # unevenly over a short run, 12.5 against 35.2 Mbit/s once on a host stealing an eighth of the CPU
    assert min(a, b) >= 0.15 * BOTTLENECK and a + b >= 0.8 * BOTTLENECK, (a, b)
    # the app reports both flows' paths over the bottleneck and counts bytes in the queues used
    flows = {(p["src_host"], p["dst_host"]): p for p in client.flows()}
    assert "s1>s2" in flows[("h1", "h3")]["links"] and "s1>s2" in flows[("h2", "h4")]["links"]
    def queue_bytes() -> dict[tuple[str, int, int], int] | None:
        # the app polls queue statistics every second: wait for a poll that saw the runs' bytes
        q = {(r["switch"], r["port"], r["queue"]): r["tx_bytes"] for r in client.queues()}
        return q if q.get(("s1", 1, 3), 0) > 20e6 and q.get(("s1", 1, 0), 0) > 20e6 else None

    q = wait_until(queue_bytes, 15, lambda: f"bytes on the top and bottom queues of s1 port 1: {client.queues()}")
    assert q[("s1", 1, 1)] < 1e6  # level 1 was never used
    # OVS sets the root's burst back to one MTU on any reconfiguration (ovs-vsctl returns once it has
    # reconfigured; the app is stopped meanwhile so that it cannot widen it first); the app widens it again
    tb.stop_sdn()
    tb.ovs.vsctl("set", "Bridge", "s1", "other-config:leveller-test=reconfigure")
    assert root_burst(tb) < queue_burst(BOTTLENECK)
    tb.start_sdn()
    wait_until(lambda: root_burst(tb) == queue_burst(BOTTLENECK), 15,
               lambda: f"root burst widened again: {root_burst(tb)}")


def test_forwarding_and_queue_mapping_recover_after_restarts(preset_dumbbell):
    tb, client = preset_dumbbell

    def kill_and_restart_vswitchd():
        time.sleep(2)  # the flows run a while first (part of the scenario, not a wait for readiness)
        pid = tb.ovs.pid("ovs-vswitchd")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _running(pid), 10, f"ovs-vswitchd (pid {pid}) gone after SIGKILL")
        # the operator's only step: bring the daemon back (same as `leveller testbed up` again)
        subprocess.run([sys.executable, "-m", "leveller.cli", "testbed", "up", "--name", tb.name,
                        "--run-dir", str(tb.run_dir)], check=True,
                       capture_output=True)

    a, b = run_pair(tb, TOP, BOTTOM, seconds=16, window=(10.0, 16.0), during=kill_and_restart_vswitchd)
    print(f"after ovs-vswitchd restart: A {a:.1f} B {b:.1f} Mbit/s")
    # forwarding is back (the link carries A) and so is the queue mapping (B stays starved; without it the
    # two would share), and the root's burst (OVS rebuilt the qdisc). A lower floor than without a restart:
    # on a loaded machine the recovery can reach into the window (A 41.4, B 0.1 Mbit/s in a CI run)
    assert_top_takes_the_link(a, b, RESTART_MBPS, floor=0.6)
    assert root_burst(tb) == queue_burst(RESTART_MBPS)

    def restart_app():
        time.sleep(2)
        tb.stop_sdn()
        tb.start_sdn()

    a, b = run_pair(tb, BOTTOM, TOP, seconds=14, window=(8.0, 14.0), during=restart_app)
    print(f"after app restart: A {a:.1f} B {b:.1f} Mbit/s")
    assert_top_takes_the_link(b, a, RESTART_MBPS, floor=0.6)
