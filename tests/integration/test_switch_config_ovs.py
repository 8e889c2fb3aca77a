"""`leveller switch-config --vendor ovs` applied to a testbed switch that has no queues yet gives
strict priority: real OVS (userspace datapath), real TCP, the SDN app only forwarding.

The testbed emulates link rates with the queues' ceiling, so port s1-p1 starts as a plain
fast veth port with no queues at all. After running the rendered script (ovs-vsctl QoS rows with
a 50 Mbit/s ceiling + tc classifiers) on the switch, the flow marked with the top level's DSCP
takes nearly all of the 50 Mbit/s, whichever host sends it: swapping the marks swaps the shares,
so the priority follows the mark, not a host or a port. (No throughput is compared before the
config: two TCP flows on an unshaped veth port are limited by the CPU, and their shares there
are arbitrary on a loaded 2-core machine -- CI once saw 952 vs 34 Mbit/s with no queues.)
The app runs with --queue-mode set_queue, whose flows the userspace datapath ignores, so the
rendered script is the only thing that maps DSCP to queues here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from leveller.core.qos import default_level_map
from leveller.testbed.cluster import Testbed

from .support import assert_top_takes_the_link, dumbbell_testbed, root_burst, run_pair

pytestmark = pytest.mark.privileged
BOTTLENECK = 50.0
LEVELS = default_level_map(4)
TOP = LEVELS.dscp_for_level(3) << 2
BOTTOM = LEVELS.dscp_for_level(0) << 2


@pytest.fixture
def bare_dumbbell(tmp_path):
    # the app forwards only: its set_queue rules do nothing on the userspace datapath
    with dumbbell_testbed(tmp_path, BOTTLENECK, qos=False, sdn_args=("--queue-mode", "set_queue")) as (tb, _):
        yield tb


def switch_netns_run(tb: Testbed, argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """Run in the switch namespace against the testbed's own OVS (OVS_RUNDIR -> its db.sock)."""
    return subprocess.run(["ip", "netns", "exec", tb.state.switch_netns, *argv], env=tb.ovs.env,
                          capture_output=True, text=True, timeout=60, **kw)


def switch_config(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "leveller.cli", "switch-config", "--vendor", "ovs", "--levels",
                           str(LEVELS.levels), *args], capture_output=True, text=True, check=True).stdout


def test_rendered_ovs_config_gives_strict_priority(bare_dumbbell):
    tb = bare_dumbbell
    port = "s1-p1"  # s1's port to s2, shared by h1->h3 and h2->h4
    assert "htb" not in switch_netns_run(tb, ["tc", "qdisc", "show", "dev", port]).stdout

    assert "flowid" not in switch_netns_run(tb, ["tc", "filter", "show", "dev", port]).stdout

    # the set_queue rendering's flows replace s1's table 0 (the app's own): real ovs-ofctl must accept
    # them, and forwarding below goes through their goto_table:1 (the datapath ignores set_queue)
    rendered = json.loads(switch_config("--ports", port, "--queue-mode", "set_queue", "--bridge", "s1", "--json"))
    assert switch_netns_run(tb, ["ovs-ofctl", "-O", "OpenFlow13", "del-flows", "s1", "table=0"]).returncode == 0
    for cmd in rendered["commands"]:
        if cmd["argv"][0] == "ovs-ofctl":
            done = switch_netns_run(tb, cmd["argv"])
            assert done.returncode == 0, done.stderr
    table0 = switch_netns_run(tb, ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", "s1", "table=0"]).stdout
    assert sorted(re.findall(r"(ipv6|ip),nw_tos=(\d+) actions=set_queue:(\d)", table0)) == \
        sorted((ip, str(d << 2), str(q)) for d, q in zip(LEVELS.dscp, LEVELS.queue) for ip in ("ip", "ipv6"))

    script = switch_config("--ports", port, "--rate-mbps", str(BOTTLENECK), "--queue-mode", "tc")
    applied = switch_netns_run(tb, ["sh", "-c", script])
    assert applied.returncode == 0, applied.stderr
    assert switch_netns_run(tb, ["tc", "filter", "show", "dev", port, "parent", "1:"]).stdout.count("flowid") \
        == 2 * LEVELS.levels  # IPv4 and IPv6 per level
    assert root_burst(tb) == 62_500  # the HTB root's burst widened to the queues' (10 ms of 50 Mbit/s)

    a, b = run_pair(tb, TOP, BOTTOM)
    print(f"rendered config applied: A top {a:.1f} B bottom {b:.1f} Mbit/s")
    assert_top_takes_the_link(a, b, BOTTLENECK)
    a, b = run_pair(tb, BOTTOM, TOP)
    print(f"marks swapped: A bottom {a:.1f} B top {b:.1f} Mbit/s")
    assert_top_takes_the_link(b, a, BOTTLENECK)
