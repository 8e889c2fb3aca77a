"""A demoted TCP flow keeps its ACK clock with the queues' floor and loses it without (issue 25).

Dumbbell, 20 Mbit/s bottleneck, the SDN app's strict-priority queues. Flow B (h2 -> h4, the bottom
level's DSCP, a 16 KB window as a training job's clamped connection) sends alone for 2 s, then
flow A (h1 -> h3, the top level's DSCP) takes the link for 8 s: B is demoted. Without a floor B's
queue keeps only the token rate (a thousandth of the link: one packet every 0.6 s), so its next
ACK comes long after its retransmission timeout (the emulated hosts' 50 ms minimum) and the timer
fires (the kernel counts TcpExtTCPTimeouts in h2's namespace); then its RTO grows with the RTTs it
measures. With a 5 % floor B's queue drains at 1 Mbit/s, a packet every 12 ms, so ACKs keep coming
well inside the RTO and no timeout fires.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from leveller.core.qos import DEFAULT_FLOOR, default_level_map
from leveller.experiments.shared.tcpstats import read_counters
from leveller.testbed.traffic import iperf_client, iperf_server

from .support import dumbbell_testbed, wait_listening

pytestmark = pytest.mark.privileged
BOTTLENECK = 20.0
LEVELS = default_level_map(2)
TOP, BOTTOM = LEVELS.dscp_for_level(1) << 2, LEVELS.dscp_for_level(0) << 2
ALONE_S, SHARED_S = 2.0, 8


def timeouts_of_demoted_flow(tmp_path, floor: float) -> tuple[int, int]:
    """(timeouts, retransmitted segments) of B's host while A holds the top level."""
    with dumbbell_testbed(tmp_path, BOTTLENECK, floor=floor) as (tb, _):
        procs: list[subprocess.Popen[str]] = []
        try:
            procs += [iperf_server(tb, "h3", 5301), iperf_server(tb, "h4", 5302)]
            wait_listening(tb, "h3", 5301)
            wait_listening(tb, "h4", 5302)
            b = subprocess.Popen(tb.exec_argv("h2", ["iperf3", "-c", "10.0.0.4", "-p", "5302", "-t",
                                                     str(ALONE_S + SHARED_S + 1), "-S", str(BOTTOM), "-w", "16K",
                                                     "-J"]),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            procs.append(b)
            time.sleep(ALONE_S)
            before = read_counters([tb.netns("h2")])
            a = iperf_client(tb, "h1", "10.0.0.3", 5301, SHARED_S, TOP)
            procs.append(a)
            a.communicate(timeout=SHARED_S + 30)
            after = read_counters([tb.netns("h2")])
            assert a.returncode == 0
            return after["timeouts"] - before["timeouts"], after["retrans_segs"] - before["retrans_segs"]
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def test_the_floor_keeps_a_demoted_flow_out_of_retransmission_timeouts(tmp_path):
    strict = timeouts_of_demoted_flow(tmp_path / "strict", 0.0)
    floor = timeouts_of_demoted_flow(tmp_path / "floor", DEFAULT_FLOOR)
    print(f"timeouts / retransmitted segments of the demoted flow over {SHARED_S} s: "
          f"floor 0: {strict[0]} / {strict[1]}, floor {DEFAULT_FLOOR:g}: {floor[0]} / {floor[1]}")
    assert strict[0] >= 1  # the first ACK after demotion comes ~0.6 s later, past the RTO
    assert floor[0] == 0
