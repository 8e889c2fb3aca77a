"""Faults with real processes: `leveller controller` and `leveller agent` killed, restarted, fed garbage.

(a) controller SIGKILLed mid-run: the agent clears its marks once the lease
    runs out (seen on the wire: the job's packets lose their DSCP), the job
    keeps iterating, and a restarted controller ranks again from the agents'
    reports (the DSCP comes back on the wire).
(b) agent SIGKILLed: its tc filter and program stay behind; a restarted agent
    removes them and runs alone; a clean stop (SIGINT) leaves nothing of ours
    on the interface; a second agent on the same interface is refused.
(c) a live controller process refuses unauthenticated and malformed reports
    (wrong secret, no signature, negative iterations, NaN, flow of an unknown
    job, start far in the future, oversize) with an error naming the problem,
    and its state (status, levels) is unchanged; the rejections are counted.
(d) agent SIGKILLed while the job's packets carry its level: the BPF program
    it leaves behind stops rewriting by itself when the agent's lease ends (a
    deadline in a map, compared with the kernel clock): no rewritten DSCP on
    the wire later than the lease + 1 s, while the job keeps sending.
Unit tests cover the schema and transport pieces; this checks the assembled processes.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from leveller.codec import encode
from leveller.model.limits import MAX_MESSAGE_BYTES
from leveller.rpc.transport import ControllerClient

from .support import DSCP_TOP, SECRET, agent, controller, free_port, job_on_the_wire, send_report, wait_until


def max_iteration(log: Path) -> int:
    return max((int(m) for m in re.findall(r" iter=(\d+)", log.read_text())), default=-1)


# ---- (a) controller killed ---------------------------------------------------------------------

@pytest.mark.privileged
def test_controller_killed_agents_fall_back_jobs_continue_restart_resumes(tmp_path: Path) -> None:
    port = free_port()
    with job_on_the_wire(tmp_path, "lvf") as (pair, wire, log):
        with controller(tmp_path, port) as ctl, agent(tmp_path, port, log, pair.if_a, pair.ns_a) as ag:
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                  f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} controller: {ctl.output()}")

            ctl.kill()
            killed_at = time.time()
            cleared_at = wire.first_after(killed_at, 0, timeout_s=15)
            assert cleared_at is not None, f"marks never cleared after the controller died: {ag.output()}"
            # the lease (1.5 s after the last decision, at most a tau = 0.3 s before the kill) is honoured:
            # an agent that dropped its levels at the first failed report would clear within 0.2 s
            assert cleared_at - killed_at > 0.5
            assert ag.alive()
            iterations = max_iteration(log)
            wait_until(lambda: max_iteration(log) >= iterations + 5, 20, "the job keeps iterating without a controller")
            time.sleep(0.5)
            assert wire.last_dscp == 0  # no stale level comes back while the controller is away

            with controller(tmp_path, port) as ctl2:
                restarted_at = time.time()
                back = wire.first_after(restarted_at, DSCP_TOP, timeout_s=20)
                assert back is not None, f"levels did not come back: {ctl2.output()} {ag.output()}"
                with ControllerClient(f"127.0.0.1:{port}", SECRET.encode()) as client:
                    status = client.status()
                jobs = {j["job"]: j for j in status["jobs"]}
                assert jobs["live"]["iterations"] >= iterations + 5  # ranked from the agent's reports
                assert any(f["job"] == "live" and f["level"] == 1 for f in status["flows"])
                assert ag.interrupt() == 0


# ---- (b) agent killed ----------------------------------------------------------------------------

def _our_programs(ns: str, ifname: str) -> list[int]:
    """BPF program ids of leveller filters on ifname's egress hook (as `tc -j filter show` lists them)."""
    from leveller.agent.datapath import FILTER_PRIO, PROGRAM_NAME

    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-j", "filter", "show", "dev", ifname, "egress"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():  # no clsact qdisc: nothing attached
        return []
    return [int(f["options"]["prog"]["id"]) for f in json.loads(out.stdout)
            if f.get("pref") == FILTER_PRIO and f.get("kind") == "bpf"
            and f.get("options", {}).get("bpf_name") == PROGRAM_NAME]


def _program_loaded(prog_id: int) -> bool:
    return subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)], capture_output=True).returncode == 0


@pytest.mark.privileged
def test_agent_killed_restart_removes_the_stale_filter_and_clean_stop_leaves_nothing(tmp_path: Path) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact
    from leveller.testbed.vethpair import VethPair

    log = tmp_path / "job.log"
    log.write_text("")
    port = free_port()  # no controller: reports fail, the datapath is attached regardless
    with VethPair(prefix="lvk") as pair:
        dev, ns = pair.if_a, pair.ns_a
        assert not has_clsact(dev, ns) and attached_filters(dev, ns) == []
        with agent(tmp_path, port, log, dev, ns, "agent1") as first:
            old = wait_until(lambda: _our_programs(ns, dev), 40, "the first agent's filter")
            assert len(old) == 1
            with agent(tmp_path, port, log, dev, ns, "agent-twin") as twin:  # one agent per interface
                assert twin.p.wait(40) == 2
                assert "another leveller agent" in twin.text()
            assert _our_programs(ns, dev) == old
            first.kill()
        assert _our_programs(ns, dev) == old and _program_loaded(old[0])  # a crash leaves them behind

        with agent(tmp_path, port, log, dev, ns, "agent2") as second:
            new = wait_until(lambda: [p for p in _our_programs(ns, dev) if p not in old], 40,
                        f"the restarted agent's filter: {second.output()}")
            assert _our_programs(ns, dev) == new  # the stale filter is gone, only the new one is there
            wait_until(lambda: not _program_loaded(old[0]), 10, "the stale program to be unloaded")
            assert second.alive()
            assert second.interrupt() == 0
        assert attached_filters(dev, ns) == [] and not has_clsact(dev, ns)
        wait_until(lambda: not _program_loaded(new[0]), 10, "the program to be unloaded after a clean stop")
        tc = subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", dev, "egress"],
                            capture_output=True, text=True)
        assert "leveller" not in tc.stdout + tc.stderr


# ---- (c) bad reports to a live controller ----------------------------------------------------------

RUN, _SEQ = "c0ffee00c0ffee00", itertools.count(1)  # this test's "agent run": reports numbered in order

def _report(iterations: Any = 3, ideal: Any = 0.5, flow_job: str = "j1", start: float | None = None,
            pad: int = 0) -> dict[str, Any]:
    msg: dict[str, Any] = {"v": 1, "host": "h1", "run": RUN, "seq": next(_SEQ),
                           "jobs": [{"job": "j1", "iterations": iterations,
                                     "start_time": start if start is not None else time.time() - 10,
                                     "ideal_time": ideal}],
                           "flows": [{"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 40000, "dport": 47000,
                                      "proto": "tcp", "job": flow_job, "bytes": 1000}]}
    if pad:
        msg["pad"] = "x" * pad
    return msg


def _stable(status: dict[str, Any]) -> Any:
    """The parts of a status that a report may change (ages and clocks removed)."""
    return ({j["job"]: (j["iterations"], j["start_time"], j["ideal_time"]) for j in status["jobs"]},
            sorted(a["host"] for a in status["agents"]),
            sorted((f["flow"], f["job"], f["bytes"], f["level"]) for f in status["flows"]))


def _rejected(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(r'leveller_requests_rejected_total\{reason="(\w+)"\} (\S+)', text)}


def test_live_controller_refuses_bad_reports_and_changes_nothing(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    good = SECRET.encode()
    # tau 1 s: the good report stays live (3 tau) for the whole check
    with controller(tmp_path, port, "--tau", "1", "--lease", "30", "--metrics-port", str(metrics_port)) as ctl:
        wait_until(lambda: send_report(address, encode(_report()), good)[0] == grpc.StatusCode.OK, 20,
              f"the controller accepts a good report: {ctl.output()}")
        with ControllerClient(address, good) as client:
            wait_until(lambda: any(f["level"] == 1 for f in client.status()["flows"]), 10, "a decision for j1")
            assert send_report(address, encode(_report()), good)[0] == grpc.StatusCode.OK  # fresh: live for 3 s
            before = _stable(client.status())
            cases = [
                ("wrong secret", encode(_report(iterations=99)), b"wrong-secret-0123456789",
                 grpc.StatusCode.UNAUTHENTICATED, "signature"),
                ("no signature", encode(_report(iterations=99)), None, grpc.StatusCode.UNAUTHENTICATED,
                 "shared secret"),
                ("negative iterations", encode(_report(iterations=-1)), good, grpc.StatusCode.INVALID_ARGUMENT,
                 "jobs[0].iterations"),
                ("NaN ideal time", encode(_report(iterations=99)).replace(b'"ideal_time":0.5', b'"ideal_time":NaN'),
                 good, grpc.StatusCode.INVALID_ARGUMENT, "NaN"),
                ("flow of an unknown job", encode(_report(iterations=99, flow_job="ghost")), good,
                 grpc.StatusCode.INVALID_ARGUMENT, "flows[0].job"),
                ("start far in the future", encode(_report(iterations=99, start=time.time() + 3600)), good,
                 grpc.StatusCode.INVALID_ARGUMENT, "jobs[0].start_time"),
                ("oversize", encode(_report(iterations=99, pad=MAX_MESSAGE_BYTES + (1 << 20))), good,
                 grpc.StatusCode.RESOURCE_EXHAUSTED,
                 ""),
            ]
            for name, body, secret, code, needle in cases:
                got, details = send_report(address, body, secret)
                assert got == code, f"{name}: {got} {details}"
                assert needle in details, f"{name}: {details!r} does not mention {needle!r}"
            assert _stable(client.status()) == before  # a refused report moved nothing
        rejected = _rejected(metrics_port)
        assert rejected.get("auth") == 2 and rejected.get("invalid") == 4, rejected


# ---- (d) agent killed: the kernel ends its marks -------------------------------------------------

LEASE_S = 1.5  # what controller() passes as --lease


@pytest.mark.privileged
def test_agent_killed_its_marks_end_in_the_kernel_one_lease_later(tmp_path: Path) -> None:
    from leveller.agent.claim import lock_path

    port = free_port()
    with job_on_the_wire(tmp_path, "lvl") as (pair, wire, log):
        try:
            with controller(tmp_path, port) as ctl, agent(tmp_path, port, log, pair.if_a, pair.ns_a) as ag:
                wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                           lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                           f"controller: {ctl.output()}")
                ag.kill()  # SIGKILL: nothing of the agent runs any more, its tc filter and program stay
                killed_at = time.time()
                assert _our_programs(pair.ns_a, pair.if_a), "the killed agent's program is still attached"
                limit = killed_at + LEASE_S + 1.0
                cleared_at = wire.first_after(killed_at, 0, timeout_s=LEASE_S + 10)
                assert cleared_at is not None, "the dead agent's marks never ended"
                # watch the wire well past the limit: the job keeps sending, nothing is rewritten any more
                packets = wire.packets
                wait_until(lambda: time.time() > limit + 2.0 and wire.packets > packets + 50, 30,
                           "the job's packets after the limit")
                changes = list(wire.changes)
                late = [(round(t - killed_at, 3), d) for t, d in changes if t > limit and d != 0]
                assert cleared_at <= limit and not late, (cleared_at - killed_at, late)
                assert wire.last_dscp == 0
                assert ctl.alive()  # the controller went on deciding: only the kernel ended the marks
        finally:
            lock_path(pair.if_a, pair.ns_a).unlink(missing_ok=True)  # the killed agent's lock (nobody holds it)
