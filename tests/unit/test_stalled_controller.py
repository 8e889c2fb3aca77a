"""A controller that answers but no longer decides must not keep agents' levels alive (issue 10, High 3).

The controller runs its real decision loop and serves real gRPC on loopback; its policy hangs on demand,
as the decision step did on 20k flows of one job (the path provider, once the stand-in, is asked only
about new flows now). The agent runs its real
loop (reports every 0.1 s, Watch push on). Reports keep being answered, but with a decision that ages:
the agent must drop its marks once the decision is older than the lease, and take levels again when
the loop decides again. No root needed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import JobView, make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.push import LevelsWatcher
from leveller.rpc.transport import ControllerClient, serve
from tests.helpers.fakes import RecordingEnforcer
from tests.helpers.wait import wait_until

SECRET = b"stalled-controller-secret-01"
FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
TOP = default_level_map(2).dscp[1]
LEASE_S = 1.0


class StallingPolicy:
    """The leveller policy, hanging (like a decision step on a huge report) while ``stalled`` is set."""

    def __init__(self) -> None:
        self.inner = make_policy("leveller")
        self.name, self.tau = self.inner.name, self.inner.tau
        self.stalled = threading.Event()
        self.go = threading.Event()
        self.stalled_at: float | None = None

    def order(self, jobs: Sequence[JobView]) -> list[str] | None:
        if self.stalled.is_set():
            self.stalled_at = self.stalled_at or time.monotonic()
            self.go.wait(30)
        return self.inner.order(jobs)


class OneFlow:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {FA: FlowSample(4096)}


def test_marks_end_one_lease_after_the_last_decision_while_reports_are_answered(tmp_path: Path) -> None:
    policy = StallingPolicy()
    ctl = Controller(SingleLinkPaths(), policy, default_level_map(2), tau_s=0.1, lease_s=LEASE_S)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    address = f"127.0.0.1:{port}"
    log = tmp_path / "a.log"
    log.write_text(format_line("a", 0, time.time() - 10) + "\n" + format_line("a", 5, time.time() - 1) + "\n")
    enforcer = RecordingEnforcer()
    agent = Agent("h1", [(LogTailer(str(log), from_start=True), RateTracker())], ControllerClient(address, SECRET),
                  enforcer, flows=OneFlow(), classifier=Classifier(ports=(parse_port_rule("a=47000"),)),
                  ideal_times={"a": 1.0})
    stop = threading.Event()
    threads = [threading.Thread(target=ctl.run, args=(stop,)), threading.Thread(target=agent.run, args=(0.1, stop))]
    watcher = LevelsWatcher(address, SECRET, "h1", agent.apply_pushed, lambda: agent.known_jobs, wait_s=0.5)
    try:
        watcher.start()
        for t in threads:
            t.start()
        wait_until(lambda: enforcer.marks == {FA: TOP}, 10, "the agent marks the job's flow")
        epoch = ctl.epoch
        policy.stalled.set()
        wait_until(lambda: policy.stalled_at is not None, 5, "the decision loop to stall")
        assert policy.stalled_at is not None
        last_decision = policy.stalled_at  # the stalled step started after the last decision published
        wait_until(lambda: enforcer.marks == {}, 10, lambda: f"marks dropped: {enforcer.marks}")
        cleared = time.monotonic()
        # within the lease of the last decision (+ one report interval and scheduling slack), not later
        assert cleared - last_decision < LEASE_S + 1.0
        assert ctl.epoch == epoch  # no decision since
        assert agent.last_error is None  # the controller kept answering every report meanwhile
        time.sleep(0.5)
        assert enforcer.marks == {}  # answered reports do not bring stale levels back

        policy.go.set()
        policy.stalled.clear()
        wait_until(lambda: enforcer.marks == {FA: TOP}, 10, "levels back once the loop decides again")
        assert ctl.epoch > epoch
    finally:
        stop.set()
        policy.go.set()
        watcher.close()
        for t in threads:
            t.join(10)
        server.stop(grace=None)
