"""Controller failover with real processes: two `leveller controller`s (same secret), an agent given
both (`--controller A,B`) marking a real job's packets with its eBPF datapath. The active controller
is SIGKILLed mid-run: the agent reports to the standby within one lease (its --json lines and its
metrics name it), the standby's replay protection accepts the run it has never seen, and the job's
packets never go unmarked for longer than the lease (seen on the wire)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import (
    DSCP_TOP,
    ENV,
    JOB_PORT,
    Proc,
    controller,
    free_port,
    job_on_the_wire,
    json_lines,
    leveller_proc,
    wait_accepting,
    wait_until,
)

LEASE_S = 1.5  # test_live_faults.controller passes --lease 1.5 (and --tau 0.3)
pytestmark = pytest.mark.privileged


@contextlib.contextmanager
def started(ctl_a: Proc, port_a: int, ctl_b: Proc, port_b: int) -> Iterator[None]:
    """Both controllers listen before the agent starts: it reports to the first of its list that answers,
    and the test kills the first (an agent started while A was still importing reported to B)."""
    wait_accepting(port_a, ctl_a)
    wait_accepting(port_b, ctl_b)
    yield


def _metrics(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_agents_follow_the_standby_within_a_lease_and_no_flow_loses_its_level(tmp_path: Path) -> None:
    port_a, port_b, metrics_port = free_port(), free_port(), free_port()
    a, b = f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"
    standby_dir = tmp_path / "standby"
    standby_dir.mkdir()
    with job_on_the_wire(tmp_path, "lvo") as (pair, wire, log):
        with controller(tmp_path, port_a) as ctl_a, controller(standby_dir, port_b) as ctl_b, \
                started(ctl_a, port_a, ctl_b, port_b), \
                leveller_proc(tmp_path / "agent.out", "agent", "--controller", f"{a},{b}", "--host", "ha",
                              "--log", str(log), "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}",
                              "--ideal-time", "live=0.2", "--dev", pair.if_a, "--netns", pair.ns_a,
                              "--interval", "0.2", "--metrics-port", str(metrics_port), "--json",
                              env=ENV) as ag:
            out = tmp_path / "agent.out"
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl_a.output()}")
            assert {line["controller"] for line in json_lines(out) if line["ok"]} == {a}  # the first answers
            time.sleep(1.0)  # the standby runs idle meanwhile (its decisions know no agent)

            ctl_a.kill()
            killed_at = time.time()
            moved = wait_until(lambda: next((line for line in json_lines(out) if line["t"] > killed_at
                                             and line["ok"] and line["controller"] == b), None), 10,
                               lambda: f"the agent moves to {b}: {ag.output()}")
            assert moved["t"] - killed_at < LEASE_S, moved  # within one lease
            # the standby decides with the agent's flow: marks from b, same level as a gave
            wait_until(lambda: any(line["t"] > moved["t"] and line["controller"] == b and not line["waiting"]
                                   and list(line["marks"].values()) == [DSCP_TOP] for line in json_lines(out)), 10,
                       lambda: f"levels from the standby: {ag.output()} standby: {ctl_b.output()}")
            packets = wire.packets
            wait_until(lambda: time.time() > killed_at + 3 * LEASE_S and wire.packets > packets + 50, 30,
                       "the job's packets well past the lease")
            # the wire: from the kill on, any stretch without the level is shorter than the lease
            changes = [(t, d) for t, d in list(wire.changes) if t >= killed_at - LEASE_S]
            gaps, since = [], None
            for t, dscp in changes:
                if dscp != DSCP_TOP and since is None:
                    since = t
                elif dscp == DSCP_TOP and since is not None:
                    gaps.append(t - since)
                    since = None
            print(f"moved after {moved['t'] - killed_at:.3f} s; unmarked stretches after the kill: {gaps}")
            assert since is None and wire.last_dscp == DSCP_TOP, changes
            assert all(g < LEASE_S for g in gaps), gaps
            # every report the standby got was accepted: its replay protection took the run it had not seen
            after = [line for line in json_lines(out) if line["t"] > moved["t"]]
            assert after and all(line["ok"] and line["controller"] == b for line in after), after[-3:]
            text = _metrics(metrics_port)
            assert re.search(rf'leveller_agent_controller{{address="{re.escape(b)}"}} 1\.0', text), text
            assert re.search(rf'leveller_agent_controller{{address="{re.escape(a)}"}} 0\.0', text)
            assert "leveller_agent_failovers_total 1.0" in text
            shown = subprocess.run([sys.executable, "-m", "leveller.cli", "status", "--controller", f"{a},{b}",
                                    "--json"], capture_output=True, text=True, timeout=30, env={**os.environ, **ENV})
            assert shown.returncode == 0, shown.stderr
            status = json.loads(shown.stdout)
            assert status["controller"] == b and any(agent["host"] == "ha" for agent in status["agents"])
            assert ag.interrupt() == 0
