"""Watch (leveller.rpc.push) over real gRPC on loopback: a new decision reaches a watching agent
without its next report; unauthenticated or malformed watches are refused; a stale report reply
never overrides a newer pushed decision."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path

import grpc
import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, parse_port_rule
from leveller.agent.service import Agent
from leveller.codec import encode
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.jobs.logline import format_line
from leveller.rpc import auth
from leveller.rpc.push import WATCH, LevelsWatcher
from leveller.rpc.schema import FlowLevel, LevelsReply, Report
from leveller.rpc.transport import serve
from tests.helpers.agents import FA, FB_H1, SECRET, TwoFlows, two_job_agent
from tests.helpers.fakes import RecordingEnforcer
from tests.helpers.wait import wait_until


def test_a_decision_is_pushed_to_a_watching_agent_without_a_report(tmp_path: Path) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0, lease_s=60)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    agent, enf, log = two_job_agent(tmp_path, f"127.0.0.1:{port}")
    try:
        agent.step()  # the controller learns both flows; no decision yet
        assert enf.marks == {}
        with LevelsWatcher(f"127.0.0.1:{port}", SECRET, "h1", agent.apply_pushed, lambda: agent.known_jobs,
                           wait_s=20):
            ctl.step(time.time())  # equal R: job order a, b -> a's flow on top
            wait_until(lambda: enf.marks == {FA: 8, FB_H1: 0})
            with log.open("a") as f:  # b falls behind: a decision must now favour b
                f.write(format_line("a", 5, time.time()) + "\n")
            agent.step()  # carries the progress; the reply still has the old decision
            assert enf.marks == {FA: 8, FB_H1: 0}
            ctl.step(time.time())
            wait_until(lambda: enf.marks == {FA: 0, FB_H1: 8})  # no agent.step() in between: pushed
    finally:
        server.stop(grace=None)


def test_watch_without_a_valid_signature_or_with_bad_fields_is_refused() -> None:
    rejected: list[str] = []
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET, on_reject=rejected.append)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.unary_unary(WATCH)
            body = encode({"v": 1, "host": "h1", "epoch": 0, "wait_s": 0.1})
            with pytest.raises(grpc.RpcError) as err:
                call(body, metadata=auth.metadata(b"not-the-secret-0123456789", WATCH, time.time(), body), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            bad = encode({"v": 1, "host": "h1", "epoch": -1, "wait_s": 0.1})
            with pytest.raises(grpc.RpcError) as err:
                call(bad, metadata=auth.metadata(SECRET, WATCH, time.time(), bad), timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "epoch" in err.value.details()
            with pytest.raises(grpc.RpcError) as err:  # never reported: nothing to push
                call(body, metadata=auth.metadata(SECRET, WATCH, time.time(), body), timeout=5)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert rejected == ["auth", "invalid"]
    finally:
        server.stop(grace=None)


class SlowClient:
    """Report replies carry epoch 1 and arrive only after ``release`` is set (a report in flight)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sent = threading.Event()

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        self.sent.set()
        self.release.wait(10)
        return LevelsReply(1, 5.0, (0, 8), (FlowLevel(FA, "a", 1),))


def test_a_stale_report_reply_does_not_undo_a_newer_pushed_decision(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(format_line("a", 0, time.time() - 10) + "\n")
    enf, client = RecordingEnforcer(), SlowClient()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, enf, flows=TwoFlows(),
                  classifier=Classifier(ports=(parse_port_rule("a=47000"),)))
    stepping = threading.Thread(target=agent.step)
    stepping.start()
    assert client.sent.wait(10)
    agent.apply_pushed(LevelsReply(2, 5.0, (0, 8), (FlowLevel(FA, "a", 0),)))  # decision 2 while 1 in flight
    client.release.set()
    stepping.join(10)
    assert enf.marks == {FA: 0}
    assert agent.lease.valid(time.monotonic())


def test_the_controller_wakes_watch_calls_on_the_event_loop_without_a_waiting_thread(tmp_path: Path) -> None:
    """The controller is a PushSource: a Watch waits as a future of the server's loop, not in its pool."""
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0, lease_s=60)
    server, port = serve(ctl, "127.0.0.1:0", SECRET, threads=5)  # a blocking pool of 5 threads
    agent, enf, _log = two_job_agent(tmp_path, f"127.0.0.1:{port}")
    watchers: list[LevelsWatcher] = []
    try:
        agent.step()
        got: list[int] = []
        watcher = LevelsWatcher(f"127.0.0.1:{port}", SECRET, "h1", lambda r: got.append(r.epoch),
                                lambda: agent.known_jobs, wait_s=20)
        watchers.append(watcher)
        watcher.start()
        time.sleep(0.3)  # the call is waiting now
        busy = [t for t in threading.enumerate() if t.name.startswith("grpc-blocking")]
        assert busy == []  # no pool thread holds the waiting call
        ctl.step(time.time())
        wait_until(lambda: got == [ctl.epoch])
    finally:
        for w in watchers:
            w.close()
        server.stop(grace=None)
