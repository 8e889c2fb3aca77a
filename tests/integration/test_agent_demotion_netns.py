"""Phase-aligned demotion on the real datapath: a demoted TCP flow keeps its DSCP while its byte counter
grows, and gets the lower one as soon as it stops sending."""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leveller.agent.demotion import FlowActivity, PhaseDemotion
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, parse_port_rule
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, LevelsReply, Report

from .support import wait_until

pytestmark = pytest.mark.privileged

DSCP = (0, 8, 16, 24)


@pytest.fixture()
def pair() -> Iterator[Any]:
    from leveller.testbed.vethpair import VethPair

    assert shutil.which("ip"), "the `ip` program (iproute2) is needed"
    with VethPair(prefix="lvd") as p:
        yield p


class Client:
    def __init__(self) -> None:
        self.level, self.epoch = 3, 0

    def reply(self, flows: Iterable[FlowKey]) -> LevelsReply:
        self.epoch += 1
        return LevelsReply(self.epoch, 30.0, DSCP, tuple(FlowLevel(k, "j", self.level) for k in flows))

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        return self.reply(f.key for f in report.flows)


@pytest.mark.timeout(90)
def test_a_demotion_waits_for_the_flow_to_stop_sending(pair: Any, tmp_path: Path) -> None:
    from leveller.agent.datapath import Datapath
    from leveller.agent.enforce_bpf import BpfEnforcer, BpfFlowSource

    p = pair
    sport, dport = 20000 + secrets.randbelow(20000), 47000
    key = flow_key(p.ip_a, p.ip_b, sport, dport)
    log = tmp_path / "j.log"
    log.write_text(format_line("j", 0, time.time() - 5) + "\n")
    listener = p.socket(p.ns_b)
    listener.bind((str(p.ip_b), dport))
    listener.listen(1)
    sending, stop = threading.Event(), threading.Event()

    with Datapath(p.if_a, netns=p.ns_a, max_flows=1024) as dp:
        sender = p.socket(p.ns_a)
        sender.bind((str(p.ip_a), sport))
        sender.connect((str(p.ip_b), dport))
        conn, _ = listener.accept()
        conn.settimeout(0.2)

        def drain() -> None:
            while not stop.is_set():
                try:
                    if not conn.recv(1 << 20):
                        return
                except TimeoutError:
                    continue

        def send() -> None:
            while not stop.is_set():
                if sending.wait(0.05):
                    sender.sendall(b"x" * 65536)

        threads = [threading.Thread(target=drain, daemon=True), threading.Thread(target=send, daemon=True)]
        for t in threads:
            t.start()
        client = Client()
        agent = Agent("h1", [(LogTailer(str(log), from_start=True), RateTracker())], client, BpfEnforcer(dp),
                      flows=BpfFlowSource(dp), classifier=Classifier(ports=(parse_port_rule(f"j={dport}"),)),
                      demotion=PhaseDemotion(5.0), activity=FlowActivity(0.1))
        try:
            sending.set()
            wait_until(lambda: key in dp.read_stats(), 10, "the flow counted")
            assert agent.step().ok and dp.read_dscp() == {key: 24}
            client.level = 0
            agent.apply_pushed(client.reply([key]))
            for _ in range(4):  # 0.4 s of sending: the flow keeps its level
                time.sleep(0.1)
                assert agent.poll_demotions()
                assert dp.read_dscp() == {key: 24}
            sending.clear()
            stopped = time.monotonic()
            wait_until(lambda: not agent.poll_demotions(), 3, "the demotion applied once the flow is idle",
                       step_s=0.02)
            assert time.monotonic() - stopped < 1.5  # within a few quiet intervals, far from the 5 s bound
            assert dp.read_dscp() == {key: 0}
        finally:
            stop.set()
            for t in threads:
                t.join(5)
            sender.close()
            conn.close()
    listener.close()
