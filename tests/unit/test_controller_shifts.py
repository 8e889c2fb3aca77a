"""CASSINI on the live controller: circles from live inputs, shifts from leveller.core.cassini, plans
that settle, replies that carry each host's shift orders, and the wire format of those orders."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, parse_port_rule
from leveller.agent.service import Agent
from leveller.agent.shifts import ShiftFiles
from leveller.codec import SchemaError
from leveller.controller.decide import JobInput, JobShape
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.controller.shifts import ShiftPlanner, circle, job_links
from leveller.core.cassini import link_rotations, shift_overlap
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.errors import UserError
from leveller.jobs.control import ShiftFollower, shift_path
from leveller.jobs.logline import format_line
from leveller.model.flow import flow_key
from leveller.model.shape import parse_job_shape
from leveller.rpc.schema import FlowLevel, JobShift, LevelsReply, reply_from_wire, reply_to_wire
from tests.helpers.fakes import RecordingEnforcer

F1 = flow_key("10.0.0.1", "10.0.0.4", 40000, 21000)
F1_ACK = flow_key("10.0.0.4", "10.0.0.1", 21000, 40000)
F2 = flow_key("10.0.0.2", "10.0.0.4", 40001, 21010)
F3 = flow_key("10.0.0.3", "10.0.0.5", 40002, 21020)
HALF = JobShape(0.5, 0.5)


def jobs(*names_periods: tuple[str, float]) -> list[JobInput]:
    return [JobInput(n, 10, 1000.0, p) for n, p in names_periods]


def test_two_complementary_jobs_get_shifts_that_remove_their_overlap() -> None:
    planner = ShiftPlanner(settle_s=0.0)
    flows = {F1: ("j1", 10_000_000), F2: ("j2", 9_000_000)}
    links = {F1: ("h1>s1", "s1>h4"), F2: ("h2>s1", "s1>h4")}
    assert planner.update(jobs(("j1", 1.0), ("j2", 1.0)), {"j1": HALF, "j2": HALF}, flows, links, now=5.0)
    plan = planner.plan
    assert plan is not None and plan.plan == 1 and plan.anchor == 5.0
    c1, c2 = circle("j1", 1.0, HALF), circle("j2", 1.0, HALF)
    assert c1 is not None and c2 is not None
    assert shift_overlap(c1, 0.0, c2, 0.0, 10.0) == pytest.approx(5.0, abs=0.05)  # aligned: all of it
    assert shift_overlap(c1, plan.shifts["j1"], c2, plan.shifts["j2"], 10.0, 0.001) < 0.1
    assert abs(plan.shifts["j2"] - plan.shifts["j1"]) % 1.0 == pytest.approx(0.5, abs=0.02)


def test_shifts_on_a_chain_of_links_follow_the_bfs_formula() -> None:
    # a and b share L1, b and c share L2 (a different shape so the rotation on L2 is not trivial)
    shapes = {"a": JobShape(0.6, 0.4), "b": JobShape(0.7, 0.3), "c": JobShape(0.5, 0.5, slack=0.2)}
    fa, fb, fc = (flow_key(f"10.0.0.{i}", "10.0.0.9", 40000 + i, 20000 + i) for i in (1, 2, 3))
    flows = {fa: ("a", 1_000_000), fb: ("b", 1_000_000), fc: ("c", 1_000_000)}
    links = {fa: ("L1",), fb: ("L1", "L2"), fc: ("L2",)}
    ideal = jobs(("a", 1.0), ("b", 1.0), ("c", 2.0))
    planner = ShiftPlanner(settle_s=0.0)
    assert planner.update(ideal, shapes, flows, links, now=0.0)
    shifts = planner.plan.shifts  # type: ignore[union-attr]
    circles = {n: circle(n, p, shapes[n]) for n, p in (("a", 1.0), ("b", 1.0), ("c", 2.0))}
    q = 0.01 * 1.0  # the planner's grid: 1% of the shortest period, LCM capped at 20 x the longest
    _, r1 = link_rotations([circles["a"], circles["b"]], q, 40.0)  # type: ignore[list-item]
    _, r2 = link_rotations([circles["b"], circles["c"]], q, 40.0)  # type: ignore[list-item]
    assert shifts["a"] == 0.0  # BFS root: the first job of the first link
    assert shifts["b"] == pytest.approx((shifts["a"] - r1["a"] + r1["b"]) % 1.0)
    assert shifts["c"] == pytest.approx((shifts["b"] - r2["b"] + r2["c"]) % 2.0)


def test_ack_streams_put_no_job_on_a_link_and_unknown_shapes_get_no_shift() -> None:
    flows = {F1: ("j1", 1_000_000), F1_ACK: ("j1", 30_000), F2: ("j2", 1_000_000)}
    links = {F1: ("h1>s1", "s1>h4"), F1_ACK: ("h4>s1", "s1>h1"), F2: ("h2>s1", "s1>h4")}
    assert job_links(flows, links) == {"j1": {"h1>s1", "s1>h4"}, "j2": {"h2>s1", "s1>h4"}}
    assert job_links({F2: ("j2", 10_000)}, links) == {}  # a job that moved next to nothing yet
    planner = ShiftPlanner(settle_s=0.0)
    assert planner.update(jobs(("j1", 1.0), ("j2", 1.0)), {"j1": HALF}, flows, links, now=0.0)
    assert planner.plan is not None and planner.plan.shifts == {}  # j2 has no shape: nothing is shared


def test_a_plan_waits_for_the_picture_to_settle_and_follows_arrivals_and_departures() -> None:
    planner = ShiftPlanner(settle_s=1.0)
    shapes = {"j1": HALF, "j2": HALF, "j3": HALF}
    two = ({F1: ("j1", 1_000_000), F2: ("j2", 1_000_000)}, {F1: ("s1>h4",), F2: ("s1>h4",)})
    assert not planner.update(jobs(("j1", 1.0), ("j2", 1.0)), shapes, *two, now=0.0)
    assert not planner.update(jobs(("j1", 1.0), ("j2", 1.0)), shapes, *two, now=0.9)
    assert planner.update(jobs(("j1", 1.0), ("j2", 1.0)), shapes, *two, now=1.0)
    assert not planner.update(jobs(("j1", 1.0), ("j2", 1.0)), shapes, *two, now=5.0)  # nothing new
    assert planner.plan is not None and planner.plan.plan == 1
    # j3 arrives on the same link: a new plan for three, once it held for settle_s
    three = ({**two[0], F3: ("j3", 1_000_000)}, {**two[1], F3: ("s1>h4",)})
    assert not planner.update(jobs(("j1", 1.0), ("j2", 1.0), ("j3", 1.0)), shapes, *three, now=6.0)
    assert planner.update(jobs(("j1", 1.0), ("j2", 1.0), ("j3", 1.0)), shapes, *three, now=7.0)
    assert planner.plan.plan == 2 and set(planner.plan.shifts) == {"j1", "j2", "j3"}
    # j2 and j3 leave: j1 alone shares nothing, the plan is empty
    one = ({F1: ("j1", 1_000_000)}, {F1: ("s1>h4",)})
    planner.update(jobs(("j1", 1.0)), shapes, *one, now=8.0)
    assert planner.update(jobs(("j1", 1.0)), shapes, *one, now=9.0)
    assert planner.plan.plan == 3 and planner.plan.shifts == {}
    assert planner.replies(["j1"], 9.5) == ()


def test_replies_point_at_the_plans_phase_from_any_instant() -> None:
    planner = ShiftPlanner(settle_s=0.0)
    flows = {F1: ("j1", 1_000_000), F2: ("j2", 1_000_000)}
    links = {F1: ("s1>h4",), F2: ("s1>h4",)}
    planner.update(jobs(("j1", 1.0), ("j2", 1.5)), {"j1": HALF, "j2": JobShape(1.0, 0.5)}, flows, links, now=10.0)
    assert planner.plan is not None and planner.plan.shifts
    plan = planner.plan
    for now in (10.0, 10.3, 17.77):
        for s in planner.replies(["j1", "j2", "other"], now):
            assert 0 <= s.start_in_s < s.period_s and s.plan == plan.plan
            target = plan.anchor + plan.shifts[s.job]
            phase = (now + s.start_in_s - target) % s.period_s
            assert min(phase, s.period_s - phase) < 1e-9


def test_shift_orders_on_the_wire_are_validated() -> None:
    reply = LevelsReply(3, 1.0, (0, 8), (FlowLevel(F1, "j1", 0),), 0.1, (JobShift("j1", 2, 0.25, 1.0),))
    wire = reply_to_wire(reply)
    assert reply_from_wire(wire, ["j1"]) == reply
    assert "shifts" not in reply_to_wire(LevelsReply(3, 1.0, (0, 8), (), 0.1))  # other policies: unchanged
    for bad, field in (({"job": "j9"}, "shifts[0].job"), ({"start_in_s": 1.0}, "shifts[0].start_in_s"),
                       ({"period_s": 0}, "shifts[0].period_s"), ({"plan": -1}, "shifts[0].plan")):
        broken = dict(wire, shifts=[dict(wire["shifts"][0], **bad)])
        with pytest.raises(SchemaError) as err:
            reply_from_wire(broken, ["j1"])
        assert err.value.field == field
    with pytest.raises(SchemaError, match="twice"):
        reply_from_wire(dict(wire, shifts=wire["shifts"] * 2), ["j1"])


def test_job_shape_takes_an_optional_slack() -> None:
    assert parse_job_shape("j=1:0.5") == ("j", JobShape(1.0, 0.5, 1, 0.0))
    assert parse_job_shape("j=1:0.5:4:0.25") == ("j", JobShape(1.0, 0.5, 4, 0.25))
    with pytest.raises(UserError, match="S <= C"):
        parse_job_shape("j=1:0.5:4:2")


class Flows:
    def __init__(self, key, nbytes: int) -> None:
        self.key, self.nbytes = key, nbytes

    def read_flows(self):
        from leveller.agent.reports import FlowSample
        return {self.key: FlowSample(self.nbytes)}


def test_controller_under_cassini_sends_each_host_its_jobs_shifts_and_the_agent_writes_them(tmp_path: Path) -> None:
    clock = [time.monotonic()]  # the controller's monotonic clock, moved on by hand: no sleep
    ctl = Controller(SingleLinkPaths(), make_policy("cassini"), default_level_map(2), tau_s=0.1, lease_s=5.0,
                     stale_after_s=5.0,
                     shapes={"j1": HALF, "j2": HALF}, monotonic=lambda: clock[0])
    agents = []
    for host, job, key, port in (("h1", "j1", F1, 21000), ("h2", "j2", F2, 21010)):
        log = tmp_path / f"{job}.log"
        log.write_text(format_line(job, 0, time.time() - 5) + "\n")
        (tmp_path / host).mkdir()

        class Direct:
            def report(self, report, known_jobs=None):
                return reply_from_wire(reply_to_wire(ctl.report(report, time.time())), known_jobs)

        agents.append(Agent(host, [(LogTailer(str(log)), RateTracker())], Direct(), RecordingEnforcer(),
                            flows=Flows(key, 5_000_000), classifier=Classifier(ports=(parse_port_rule(
                                f"{job}={port}-{port + 1}"),)), ideal_times={job: 1.0},
                            shift_files=ShiftFiles(tmp_path / host)))
    for a in agents:
        assert a.step().ok
    ctl.step(time.time())
    assert ctl.shift_planner is not None and ctl.shift_planner.plan is None  # the flows have not settled yet
    clock[0] += 0.55  # past the planner's settle time: max(0.5 s, 2 tau)
    decision = ctl.step(time.time())
    assert decision.order is None and set(decision.levels.values()) == {0}  # no priorities under CASSINI
    for a in agents:
        assert a.step().ok
    orders = {}
    for host, job in (("h1", "j1"), ("h2", "j2")):
        assert [p.name for p in (tmp_path / host).iterdir()] == [f"{job}.shift"]  # only the host's own job
        follower = ShiftFollower(shift_path(tmp_path / host, job), job)
        orders[job] = follower._read()
    o1, o2 = orders["j1"], orders["j2"]
    assert o1 is not None and o2 is not None and o1.plan == o2.plan == 1
    assert abs(o1.start_at - o2.start_at) % 1.0 == pytest.approx(0.5, abs=0.05)  # half a period apart
    agents[0].shift_files.close()  # type: ignore[union-attr]
    assert not list((tmp_path / "h1").iterdir())
