"""Controller -> agent -> RDMA shim: a job's level change becomes a traffic-class change of its QPs.

The verbs program streams between two QPs under LD_PRELOAD=libleveller_shim.so
against the FAKE verbs provider (no RDMA NIC here). The agent lists the QPs
through the shim's control socket and reports them as RoCEv2 flows of job
"gpt"; the controller (real gRPC, leveller policy, K=2) ranks gpt against job
"bert" of another host; the agent's ShimEnforcer rebuilds the QPs at the
traffic class of each new level, as the fake provider's wire log shows. When
the agent stops, the QPs get their original class back. No root needed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from leveller.agent import shim_control
from leveller.agent.enforce_shim import ROCE_V2_PORT, ShimEnforcer, ShimFlows, roce_source_port
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.bench.shim import StreamRun, parse_fake_log
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.transport import ControllerClient, serve
from tests.helpers.fakes import RecordingEnforcer

SECRET = b"agent-shim-test-secret-0123"
BERT_FLOW = flow_key("10.0.0.2", "127.0.0.1", 41000, 48000)  # another host's flow on the same link


class FakeOtherHostFlows:
    """Stands in for a second host's datapath: job bert's one TCP flow, contending on the single link."""

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {BERT_FLOW: FlowSample(10_000)}


def wire_tc(log: Path, qpn: int) -> int | None:
    """Traffic class of the last message of QP qpn the fake provider carried (A sends, B receives)."""
    wire = [ln for ln in parse_fake_log(log) if ln.kind == "WIRE" and int(ln.fields["qpn"], 16) == qpn]
    return int(wire[-1].fields["tc"]) if wire else None


def wait_wire(log: Path, qpns: list[int], tc: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(wire_tc(log, q) != tc for q in qpns):
        assert time.monotonic() < deadline, f"QPs {qpns} carry {[wire_tc(log, q) for q in qpns]}, not class {tc}"
        time.sleep(0.01)


def test_level_changes_reach_the_qps_as_traffic_class_changes(shim_build: Path, tmp_path: Path) -> None:
    level_map = default_level_map(2)  # level 0 -> DSCP 0, level 1 -> DSCP 8 (traffic class 32)
    top_tc = level_map.dscp[1] << 2
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), level_map, tau_s=1.0, lease_s=30)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    run = StreamRun(shim_build, tmp_path, mode="dlopen", job="gpt")
    gpt_log, bert_log = tmp_path / "gpt.log", tmp_path / "bert.log"
    t0 = time.time() - 100
    gpt_log.write_text(format_line("gpt", 0, t0 - 1) + "\n")  # gpt started first: it wins the tie below
    bert_log.write_text(format_line("bert", 0, t0) + "\n")
    try:
        a, b = run.ids["qp_a"], run.ids["qp_b"]
        flows = ShimFlows(sockets=lambda: [run.sock])
        enforcer = ShimEnforcer(flows)
        h1 = Agent("h1", [(LogTailer(str(gpt_log)), RateTracker())],
                   ControllerClient(f"127.0.0.1:{port}", SECRET), enforcer, flows=flows, classifier=flows,
                   ideal_times={"gpt": 1.0})
        h2 = Agent("h2", [(LogTailer(str(bert_log)), RateTracker())],
                   ControllerClient(f"127.0.0.1:{port}", SECRET), RecordingEnforcer(), flows=FakeOtherHostFlows(),
                   classifier=Classifier(ports=(parse_port_rule("bert=48000"),)), ideal_times={"bert": 1.0})

        def cycle() -> None:
            """Both agents report, the controller decides, both agents apply."""
            h1.step(), h2.step()
            ctl.step(time.time())
            assert h1.step().ok and h2.step().ok
            assert enforcer.wait_idle(10)  # the shims are told from the enforcer's own threads

        wait_wire(run.log, [a], 0)  # streaming at the application's class
        cycle()  # equal R: gpt (earlier start, the registry's tie-break) ranks first -> level 1
        reported = {f["flow"]: f for f in ctl.status(time.time())["flows"]}
        qp_flows = {f"udp 127.0.0.1:{roce_source_port(q)}>127.0.0.1:{ROCE_V2_PORT}" for q in (a, b)}
        assert qp_flows <= set(reported), reported  # the QPs are reported as RoCEv2 flows of gpt
        assert all(reported[f]["job"] == "gpt" and reported[f]["host"] == "h1" for f in qp_flows)
        assert all(reported[f]["level"] == 1 for f in qp_flows)
        client = shim_control.ShimClient(run.sock)
        assert {q.qp: q.tc for q in client.list_qps()} == {a: top_tc, b: top_tc}
        wait_wire(run.log, [a], top_tc)

        with gpt_log.open("a") as f:  # gpt gets ahead: bert is now the lowest R -> gpt drops to level 0
            f.write(format_line("gpt", 50, time.time()) + "\n")
        cycle()
        assert ctl.decision is not None and ctl.decision.order == ["bert", "gpt"]
        assert {q.qp: q.tc for q in client.list_qps()} == {a: 0, b: 0}
        wait_wire(run.log, [a], 0)

        with bert_log.open("a") as f:  # bert overtakes: gpt back on top
            f.write(format_line("bert", 80, time.time()) + "\n")
        cycle()
        assert {q.qp: q.tc for q in client.list_qps()} == {a: top_tc, b: top_tc}
        wait_wire(run.log, [a], top_tc)
        assert enforcer.errors == []

        h1.enforcer.clear()  # what Agent.run does on the way out (and the lease expiry)
        assert enforcer.wait_idle(10)
        assert {q.qp: q.tc for q in client.list_qps()} == {a: 0, b: 0}
        wait_wire(run.log, [a], 0)
        qps = {q.qp: q for q in client.list_qps()}
        assert qps[a].resurrections == qps[b].resurrections == 4 and qps[a].failures == 0
        summary = run.stop()
    finally:
        run.kill()
        server.stop(grace=None)
    assert summary["errors"] == 0 and summary["in_order"] is True
    assert summary["received"] == summary["posted"] > 0  # no message lost across four rebuilds
    wire = [int(ln.fields["tc"]) for ln in parse_fake_log(run.log) if ln.kind == "WIRE"
            and int(ln.fields["qpn"], 16) == a]
    changes = [tc for i, tc in enumerate(wire) if i == 0 or wire[i - 1] != tc]
    assert changes == [0, top_tc, 0, top_tc, 0]


def test_qps_of_an_agent_that_stops_talking_fall_back_when_its_lease_ends(shim_build: Path, tmp_path: Path) -> None:
    """The agent dies (it never clears): the shim's own lease timer gives the QPs their class back."""
    lease_s = 1.0
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0, lease_s=lease_s)
    top_tc = default_level_map(2).dscp[1] << 2
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    run = StreamRun(shim_build, tmp_path, mode="linked", job="gpt")
    log = tmp_path / "gpt.log"
    log.write_text(format_line("gpt", 0, time.time() - 100) + "\n")
    try:
        a, b = run.ids["qp_a"], run.ids["qp_b"]
        flows = ShimFlows(sockets=lambda: [run.sock])
        enforcer = ShimEnforcer(flows)
        agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], ControllerClient(f"127.0.0.1:{port}", SECRET),
                      enforcer, flows=flows, classifier=flows, ideal_times={"gpt": 1.0})
        assert agent.step().ok
        ctl.step(time.time())
        decided = time.monotonic()
        assert agent.step().ok
        assert enforcer.wait_idle(10)
        client = shim_control.ShimClient(run.sock)
        assert {q.qp: q.tc for q in client.list_qps()} == {a: top_tc, b: top_tc}
        # from here on the agent is gone: no report, no clear
        deadline = decided + 20
        while {q.tc for q in client.list_qps()} != {0}:
            assert time.monotonic() < deadline, "the QPs kept the dead agent's class"
            time.sleep(0.01)
        assert time.monotonic() - decided < lease_s + 1.0
        wait_wire(run.log, [a], 0)
        summary = run.stop()
    finally:
        run.kill()
        server.stop(grace=None)
    assert summary["errors"] == 0 and summary["received"] == summary["posted"] > 0
