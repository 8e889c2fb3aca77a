"""Shadow mode with real processes: a `leveller controller --mode shadow` and a `leveller agent` with
its eBPF datapath on a veth pair, a real job sending across it. While the controller is in shadow
mode, status shows the job's flow at its would-be level and the bytes it sent there, the metrics
too, yet the agent's BPF DSCP map stays empty and every packet on the wire keeps DSCP 0. The
controller is then restarted in enforce mode on the same port: the same agent process (not
restarted) marks the job's packets, and its BPF DSCP map holds the flow."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from leveller.rpc.transport import ControllerClient, RpcFailure

from .support import DSCP_TOP, SECRET, agent, controller, free_port, job_on_the_wire, wait_until

pytestmark = pytest.mark.privileged


def dscp_map_entries(netns: str, dev: str) -> list[Any]:
    """Entries of the DSCP map of the BPF program attached to ``dev`` (bpftool, the kernel's view)."""
    net = json.loads(subprocess.run(["ip", "netns", "exec", netns, "bpftool", "-j", "net", "show", "dev", dev],
                                    capture_output=True, text=True, check=True).stdout)
    progs = [f["id"] for entry in net for f in entry.get("tc", [])]
    assert len(progs) == 1, net
    prog = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(progs[0])],
                                     capture_output=True, text=True, check=True).stdout)
    for map_id in prog["map_ids"]:
        info = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(map_id)],
                                         capture_output=True, text=True, check=True).stdout)
        if info["name"].startswith("flow_dscp_egr"):
            return json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                                             capture_output=True, text=True, check=True).stdout)
    raise AssertionError(f"no flow_dscp_egress map among {prog['map_ids']}")


def _status(port: int) -> dict[str, Any] | None:
    try:
        with ControllerClient(f"127.0.0.1:{port}", SECRET.encode(), timeout_s=2) as client:
            return client.status()
    except RpcFailure:
        return None


def test_shadow_decides_and_counts_marks_nothing_then_enforce_marks_without_restarting_the_agent(
        tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    with job_on_the_wire(tmp_path, "lsh") as (pair, wire, log):
        with agent(tmp_path, port, log, pair.if_a, pair.ns_a) as ag:
            started = time.time()
            with controller(tmp_path, port, "--mode", "shadow", "--metrics-port", str(metrics_port)) as ctl:
                def shown() -> dict[str, Any] | None:
                    s = _status(port)
                    if s and [f["level"] for f in s["flows"] if f["job"] == "live"] == [1] \
                            and (s["shadow_bytes"] or {}).get("live", {}).get("1", 0) > 200_000:
                        return s
                    return None
                status = wait_until(shown, 40, lambda: f"status shows level 1 and bytes on it: {_status(port)} "
                                    f"agent: {ag.output()} controller: {ctl.output()}")
                assert status["mode"] == "shadow"
                metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
                assert "leveller_shadow_mode 1.0" in metrics
                assert 'leveller_shadow_bytes_total{job="live",level="1"}' in metrics
                assert dscp_map_entries(pair.ns_a, pair.if_a) == []  # the kernel was never told to mark
                packets = wire.packets
                wait_until(lambda: wire.packets > packets + 100, 20, "more of the job's packets")
                assert dscp_map_entries(pair.ns_a, pair.if_a) == []
                assert wire.packets > 0 and all(d == 0 for t, d in wire.changes if t >= started), wire.changes
            pid = ag.p.pid
            with controller(tmp_path, port) as ctl2:  # enforce mode (the default), same port
                wait_until(lambda: wire.last_dscp == DSCP_TOP, 30,
                           lambda: f"the same agent marks: {ag.output()} controller: {ctl2.output()}")
                assert ag.alive() and ag.p.pid == pid
                assert len(dscp_map_entries(pair.ns_a, pair.if_a)) == 1  # the flow's rewrite, in the kernel
                assert (_status(port) or {}).get("mode") == "enforce"
