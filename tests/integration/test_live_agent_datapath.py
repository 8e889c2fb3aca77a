"""Live: job emulator between two namespaces, agent on the real eBPF datapath, controller over gRPC.

Checks that the agent reports the job's real flow with BPF byte counters, that
the controller's level lands in the kernel DSCP map, and that the map is
emptied once the controller is gone for longer than the lease.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, parse_port_rule
from leveller.agent.service import Agent
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.launcher import JobRun
from leveller.jobs.spec import RunConfig, WorkerPlace
from leveller.rpc.transport import ControllerClient, serve

SECRET = b"live-test-secret-0123456"
PORT = 47600


@pytest.mark.privileged
def test_levels_reach_the_kernel_map_and_lease_clears_them(tmp_path: Path) -> None:
    from leveller.agent.datapath import Datapath
    from leveller.agent.enforce_bpf import BpfEnforcer, BpfFlowSource
    from leveller.testbed.vethpair import VethPair

    log = tmp_path / "j.log"
    with VethPair() as pair, Datapath(pair.if_a, netns=pair.ns_a) as dp:
        spec = RunConfig("live", (WorkerPlace(str(pair.ip_b), pair.ns_b), WorkerPlace(str(pair.ip_a), pair.ns_a)),
                         compute_s=0.1, comm_s=0.1, rate_bps=100e6, port=PORT, duration_s=20.0, pace=True)
        ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.3, lease_s=1.0)
        server, port = serve(ctl, "127.0.0.1:0", SECRET)
        stop = threading.Event()
        loop = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
        loop.start()
        enforcer = BpfEnforcer(dp)
        client = ControllerClient(f"127.0.0.1:{port}", SECRET, timeout_s=2)
        agent = Agent("ha", [(LogTailer(str(log)), RateTracker())], client, enforcer, flows=BpfFlowSource(dp),
                      classifier=Classifier(ports=(parse_port_rule(f"live={PORT}-{PORT + 1}"),)),
                      ideal_times={"live": 0.2})
        try:
            with JobRun(spec, log=str(log)) as job:
                marked = {}
                deadline = time.time() + 15
                while time.time() < deadline:
                    result = agent.step()
                    marked = {k: v for k, v in dp.read_dscp().items() if v is not None}
                    if result.ok and marked:
                        break
                    time.sleep(0.3)
                assert marked, f"no DSCP entry in the kernel map; last report: {result.report}"
                flows = [f for f in result.report.flows if f.job == "live"]
                assert flows and max(f.bytes for f in flows) > 0  # BPF counters of the real flow
                data_flow = [k for k in marked if k.dport == PORT]  # rank 1 -> rank 0 (listens on PORT)
                assert data_flow and marked[data_flow[0]] == default_level_map(2).dscp[1]  # alone: top level
                # controller gone: marks stay within the lease, then the map is emptied
                stop.set()
                server.stop(grace=None)
                deadline = time.time() + 10
                while time.time() < deadline and any(v is not None for v in dp.read_dscp().values()):
                    agent.step()
                    time.sleep(0.2)
                assert not any(v is not None for v in dp.read_dscp().values())
                job.stop()
        finally:
            stop.set()
            server.stop(grace=None)
            client.close()
