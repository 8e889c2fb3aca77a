"""What the live demo relies on to re-rank at iteration ends (the paper's tau = 0): the agent
reports as soon as its job log shows a finished iteration, the controller decides as soon as a
report shows one, and Crux ranks by the job shapes it is given."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.service import Agent
from leveller.controller.decide import JobInput, JobShape, decide
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.errors import UserError
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.model.shape import parse_job_shape
from leveller.rpc.schema import JobReport, LevelsReply, Report
from tests.helpers.wait import wait_until

F1 = flow_key("10.0.0.1", "10.0.0.4", 40000, 21000)
F2 = flow_key("10.0.0.2", "10.0.0.4", 40001, 21010)


class NoMarks:
    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        pass

    def clear(self) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.times: list[float] = []

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        self.times.append(time.monotonic())
        return LevelsReply(1, 5.0, (0, 8), ())


def test_agent_reports_at_once_when_an_iteration_ends(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    log.write_text(format_line("j", 0, time.time()) + "\n")
    client = Recorder()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, NoMarks())
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(5.0, stop), kwargs={"poll_s": 0.01})
    thread.start()
    try:
        wait_until(lambda: client.times, 5, "the agent's first report")
        assert len(client.times) == 1  # the first report; the next one is 5 s away
        written = time.monotonic()
        with open(log, "a") as fh:
            fh.write(format_line("j", 1, time.time()) + "\n")
        wait_until(lambda: len(client.times) >= 2, 2, "a report at the iteration's end")
        assert len(client.times) == 2 and client.times[1] - written < 0.5
    finally:
        stop.set()
        thread.join(timeout=5)


def test_without_poll_the_agent_waits_for_its_interval(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    log.write_text(format_line("j", 0, time.time()) + "\n")
    client = Recorder()
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], client, NoMarks())
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(5.0, stop))
    thread.start()
    try:
        wait_until(lambda: client.times, 5, "the agent's first report")
        with open(log, "a") as fh:
            fh.write(format_line("j", 1, time.time()) + "\n")
        time.sleep(0.5)  # the window in which no second report may come
        assert len(client.times) == 1
    finally:
        stop.set()
        thread.join(timeout=5)


def _report(iters: int, start: float) -> Report:
    return Report("h1", (JobReport("j1", iters, start, 0.5, ()),), ())


@pytest.mark.parametrize("on_iteration, expect_fast", [(True, True), (False, False)])
def test_controller_decides_when_a_report_shows_progress(on_iteration: bool, expect_fast: bool) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=5.0,
                     on_iteration=on_iteration)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,))
    start = time.time() - 10
    ctl.report(_report(3, start), time.time())
    thread.start()
    try:
        # the first step, and on iteration ends a second one at once (the report above showed progress);
        # the next periodic one is tau = 5 s later
        first = 2 if on_iteration else 1
        wait_until(lambda: ctl.epoch >= first, 5, "the controller's first steps")
        base = ctl.epoch
        assert base == first
        ctl.report(_report(3, start), time.time())  # no progress: no decision
        time.sleep(0.3)  # the window in which no decision may come
        assert ctl.epoch == base
        ctl.report(_report(4, start), time.time())
        if expect_fast:  # well before the periodic step, tau = 5 s after the first ones
            wait_until(lambda: ctl.epoch > base, 2, "a decision at the reported iteration's end")
        else:
            time.sleep(0.3)  # the window in which no decision may come
        assert (ctl.epoch == base + 1) is expect_fast
    finally:
        stop.set()
        ctl._wake.set()
        thread.join(timeout=10)


def test_crux_ranks_by_the_given_shapes() -> None:
    jobs = [JobInput("j1", 10, 0.0, 0.5), JobInput("j2", 10, 0.0, 0.75)]
    flows = {F1: "j1", F2: "j2"}
    links = {F1: ("s1>h4",), F2: ("s1>h4",)}
    crux = make_policy("crux")
    # j2 computes a lot per byte (2:1) -> higher GPU intensity -> top level
    d = decide(jobs, flows, links, crux, 2, 20.0, {"j1": JobShape(0.25, 0.5), "j2": JobShape(0.5, 0.25)})
    assert d.order == ["j2", "j1"] and d.levels == {F2: 1, F1: 0}
    # GPUs count: 8 GPUs on j1 outweigh j2's compute ratio
    d = decide(jobs, flows, links, crux, 2, 20.0, {"j1": JobShape(0.25, 0.5, 8), "j2": JobShape(0.5, 0.25)})
    assert d.order == ["j1", "j2"]


def test_parse_shape() -> None:
    assert parse_job_shape("j1=0.25:0.5") == ("j1", JobShape(0.25, 0.5, 1))
    assert parse_job_shape("j1=1:2:4") == ("j1", JobShape(1.0, 2.0, 4))
    for bad in ("j1", "j1=1", "j1=1:0", "j1=a:b", "j1=1:2:0", "bad name=1:2"):
        with pytest.raises(UserError):
            parse_job_shape(bad)
