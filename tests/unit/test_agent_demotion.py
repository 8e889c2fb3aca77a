"""Phase-aligned demotion: promotions at once, demotions when the flow's phase ended (pure planner, idle
test from byte counters, and the agent's apply path with a fake clock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.agent.demotion import DEADLINE, PHASE_END, FlowActivity, PhaseDemotion, Waiting
from leveller.agent.metrics import AgentMetrics
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey, flow_key
from leveller.rpc.schema import FlowLevel, LevelsReply, Report
from tests.helpers.fakes import RecordingEnforcer
from tests.helpers.wait import wait_until

# ---- the planner, literal inputs ------------------------------------------------------------------


def test_a_promotion_a_new_flow_and_an_unchanged_level_apply_at_once() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    plan = d.plan({"up": 1, "same": 2}, {"up": 3, "same": 2, "new": 0}, {"up": True, "same": True, "new": True},
                  10.0)
    assert plan.levels == {"up": 3, "same": 2, "new": 0}
    assert plan.waiting == {} and d.waiting == {} and not plan.started


def test_a_demotion_of_a_busy_flow_waits_and_keeps_the_level_in_force() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    plan = d.plan({"f": 3}, {"f": 1}, {"f": True}, 10.0)
    assert plan.levels == {"f": 3}
    assert plan.waiting == {"f": Waiting(1, 10.0, 11.0)} and plan.started == {"f"}
    assert d.next_deadline() == 11.0
    # still busy: still waiting, nothing new started
    plan = d.plan(plan.levels, {"f": 1}, {"f": True}, 10.5)
    assert plan.levels == {"f": 3} and not plan.started and not plan.released
    # the phase ended: applied
    plan = d.plan(plan.levels, {"f": 1}, {"f": False}, 10.6)
    assert plan.levels == {"f": 1} and plan.released == {"f": PHASE_END} and d.waiting == {}


def test_a_demotion_of_an_idle_flow_applies_at_once() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    plan = d.plan({"f": 3}, {"f": 0}, lambda key: False, 10.0)
    assert plan.levels == {"f": 0} and plan.immediate == {"f"} and not plan.released and d.waiting == {}


def test_a_flow_that_never_goes_idle_is_demoted_at_the_wait_bound() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(0.5)
    levels = d.plan({"f": 3}, {"f": 1}, {"f": True}, 10.0).levels
    assert d.plan(levels, {"f": 1}, {"f": True}, 10.49).levels == {"f": 3}
    plan = d.plan(levels, {"f": 1}, {"f": True}, 10.5)
    assert plan.levels == {"f": 1} and plan.released == {"f": DEADLINE}


def test_the_hold_never_outlives_the_lease_of_the_level_in_force() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    plan = d.plan({"f": 3}, {"f": 1}, {"f": True}, 10.0, hold_until=10.2)
    assert plan.waiting["f"].deadline == 10.2
    assert d.plan(plan.levels, {"f": 1}, {"f": True}, 10.2).levels == {"f": 1}
    # a lease that already ended: no hold at all
    d2: PhaseDemotion[str] = PhaseDemotion(1.0)
    assert d2.plan({"f": 3}, {"f": 1}, {"f": True}, 10.0, hold_until=10.0).levels == {"f": 1}


def test_a_newer_decision_replaces_the_waiting_one() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    levels = d.plan({"f": 3, "g": 3}, {"f": 1, "g": 1}, {"f": True, "g": True}, 10.0).levels
    # f: another demotion keeps its deadline (the bound counts from the first wait); g: promoted back
    plan = d.plan(levels, {"f": 2, "g": 3}, {"f": True, "g": True}, 10.4)
    assert plan.levels == {"f": 3, "g": 3}
    assert plan.waiting == {"f": Waiting(2, 10.0, 11.0)}
    # a promotion above the level in force cancels the wait and applies at once
    plan = d.plan(plan.levels, {"f": 4}, {"f": True}, 10.5)
    assert plan.levels == {"f": 4} and d.waiting == {}


def test_flows_the_decision_drops_lose_their_level_and_their_wait() -> None:
    d: PhaseDemotion[str] = PhaseDemotion(1.0)
    levels = d.plan({"f": 3, "g": 2}, {"f": 1, "g": 2}, {"f": True}, 10.0).levels
    plan = d.plan(levels, {"g": 2}, {}, 10.1)
    assert plan.levels == {"g": 2} and d.waiting == {}


def test_the_planner_refuses_a_bad_bound() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="wait_max_s"):
            PhaseDemotion(bad)
    with pytest.raises(ValueError, match="quiet_s"):
        FlowActivity(0.0)


# ---- the idle test ----------------------------------------------------------------------------------


def test_a_flow_is_idle_when_its_counter_did_not_grow_over_the_quiet_interval() -> None:
    a: FlowActivity[str] = FlowActivity(0.02)
    assert not a.idle("f", 10.0)  # never read
    a.observe({"f": 100, "g": 5}, 10.0)
    assert not a.idle("f", 10.0)  # read once: unknown whether it grows
    a.observe({"f": 100, "g": 9}, 10.03)
    assert a.idle("f", 10.03) and not a.idle("g", 10.03)
    assert a.idle("gone", 10.03)  # not in the counters: sends nothing
    assert not a.idle("f", 10.06)  # the reading is older than the quiet interval: may send again
    a.observe({"f": 100, "g": 9}, 10.04)
    assert not a.idle("g", 10.04)  # unchanged for 0.01 s only
    a.observe({"f": 100, "g": 9}, 10.05)
    assert a.idle("g", 10.05)


# ---- properties --------------------------------------------------------------------------------------

FLOWS = ("a", "b", "c")
LEVEL = st.integers(0, 3)
STEP = st.tuples(
    st.floats(0.0, 0.4),  # time since the previous plan
    st.one_of(st.none(), st.fixed_dictionaries({}, optional={f: LEVEL for f in FLOWS})),  # a new decision?
    st.fixed_dictionaries({f: st.booleans() for f in FLOWS}),  # busy flags
)


@settings(max_examples=300)
@given(wait_max=st.floats(0.0, 1.0), first=st.fixed_dictionaries({f: LEVEL for f in FLOWS}),
       steps=st.lists(STEP, max_size=25))
def test_properties_of_phase_aligned_demotion(
        wait_max: float, first: dict[str, int],
        steps: list[tuple[float, dict[str, int] | None, dict[str, bool]]]) -> None:
    d: PhaseDemotion[str] = PhaseDemotion(wait_max)
    now = 0.0
    wanted = dict(first)
    current = d.plan({}, wanted, {}, now).levels
    assert current == wanted  # nothing in force: everything at once
    waiting_since: dict[str, float] = {}  # when each flow's current wait began (our own bookkeeping)
    for dt, decision, busy in steps:
        now += dt
        if decision is not None:
            wanted = decision
        plan = d.plan(current, wanted, busy, now)
        assert set(plan.levels) == set(wanted)
        for f, level in plan.levels.items():
            old = current.get(f)
            if old is None or wanted[f] >= old:
                assert level == wanted[f]  # a promotion is never delayed
            else:
                assert level in (old, wanted[f])  # a held flow keeps its level, never anything else
            if f in plan.waiting:
                since = waiting_since.setdefault(f, now)
                assert busy[f]  # only a busy flow waits
                assert now < since + wait_max  # and never past the bound
                assert level == old and plan.waiting[f].level == wanted[f]
            else:
                waiting_since.pop(f, None)
                assert level == wanted[f]
        current = plan.levels
    # once every flow is idle, the levels in force are the latest decision
    assert d.plan(current, wanted, {}, now).levels == wanted
    assert d.waiting == {}


# ---- the agent's apply path ----------------------------------------------------------------------------

A = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
B = flow_key("10.0.0.1", "10.0.0.4", 40001, 48000)
DSCP = (0, 8, 16, 24)


class Client:
    """Answers ``levels`` (flow -> level) for the reported flows."""

    def __init__(self) -> None:
        self.levels: dict[FlowKey, int] = {A: 3, B: 0}
        self.epoch = 0

    def reply(self, flows: Iterable[FlowKey]) -> LevelsReply:
        self.epoch += 1
        return LevelsReply(self.epoch, 3.0, DSCP, tuple(FlowLevel(k, "a" if k == A else "b", self.levels[k])
                                                        for k in flows))

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        return self.reply(f.key for f in report.flows)


class Counters:
    def __init__(self) -> None:
        self.bytes = {A: 1000, B: 1000}
        self.reads = 0

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        self.reads += 1
        return {k: FlowSample(n) for k, n in self.bytes.items()}


def make(tmp_path: Path, demotion: bool = True, wait_max: float = 1.0) -> tuple[Agent, Client, RecordingEnforcer,
                                                                                 Counters, list[float], Path]:
    log = tmp_path / "jobs.log"
    log.write_text(format_line("a", 0, 100.0) + "\n" + format_line("b", 0, 100.0) + "\n")
    now = [101.0]
    client, enforcer, counters = Client(), RecordingEnforcer(), Counters()
    agent = Agent("h1", [(LogTailer(str(log), from_start=True), RateTracker())], client, enforcer, flows=counters,
                  classifier=Classifier(ports=(parse_port_rule("a=47000"), parse_port_rule("b=48000"))),
                  clock=lambda: now[0], monotonic=lambda: now[0], metrics=AgentMetrics(),
                  demotion=PhaseDemotion(wait_max) if demotion else None,
                  activity=FlowActivity(0.02) if demotion else None)
    return agent, client, enforcer, counters, now, log


def swap(client: Client) -> None:
    """The top job changes: A goes down to 0, B up to 3."""
    client.levels = {A: 0, B: 3}


def demotions(agent: Agent, outcome: str) -> float:
    assert agent.metrics is not None
    return agent.metrics.demotions.labels(outcome)._value.get()


def test_a_pushed_demotion_waits_while_the_flow_sends_then_applies_when_it_goes_idle(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path)
    assert agent.step().ok and enforcer.marks == {A: 24, B: 0}
    swap(client)
    now[0] = 101.3
    agent.apply_pushed(client.reply([A, B]))
    assert enforcer.marks == {A: 24, B: 24}  # B promoted at once; A keeps its level (no fresh reading)
    assert set(agent.demotion.waiting) == {A} and demotions(agent, "deferred") == 1  # type: ignore[union-attr]
    counters.bytes[A] += 50_000  # A still sends
    now[0] = 101.32
    assert agent.poll_demotions() and enforcer.marks[A] == 24
    now[0] = 101.35  # A's counter did not grow over the quiet interval: its phase ended
    assert not agent.poll_demotions()
    assert enforcer.marks == {A: 0, B: 24} and demotions(agent, PHASE_END) == 1
    assert enforcer.valid_for[-1] == pytest.approx(104.3 - 101.35)  # what is left of the lease, never a new one


def test_a_flow_that_never_goes_idle_is_demoted_after_the_wait_bound(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path, wait_max=0.1)
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    for t in (101.02, 101.04, 101.06, 101.08):
        now[0] = t
        counters.bytes[A] += 10_000
        agent.poll_demotions()
        assert enforcer.marks[A] == 24
    assert agent._wake_in() == pytest.approx(0.02)  # the run loop looks again within the quiet interval
    now[0] = 101.1
    counters.bytes[A] += 10_000
    agent.poll_demotions()
    assert enforcer.marks[A] == 0 and demotions(agent, DEADLINE) == 1


def test_an_iteration_end_in_the_log_ends_the_phase(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, log = make(tmp_path)
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    assert enforcer.marks[A] == 24
    with open(log, "a") as f:
        f.write(format_line("a", 1, 101.0) + "\n")
    agent.poll_logs(now[0])  # no counter reading at all: the log says the iteration is over
    assert enforcer.marks[A] == 0 and demotions(agent, PHASE_END) == 1


def test_an_idle_flow_is_demoted_with_the_reply_of_the_report_that_read_its_counter(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path)
    agent.step()  # reading at 101.0
    swap(client)
    now[0] = 101.5
    agent.step()  # reading at 101.5, unchanged since 101.0, fresh when the reply comes
    assert enforcer.marks == {A: 0, B: 24} and demotions(agent, "immediate") == 1
    assert agent.demotion is not None and agent.demotion.waiting == {}


def test_a_promotion_during_the_wait_cancels_it(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path)
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    client.levels = {A: 3, B: 0}  # back: A's level in force, B's demotion waits in turn
    now[0] = 101.01
    agent.apply_pushed(client.reply([A, B]))
    assert enforcer.marks == {A: 24, B: 24}
    assert agent.demotion is not None and set(agent.demotion.waiting) == {B}


def test_the_hold_ends_with_the_lease_of_the_level_it_keeps(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path, wait_max=5.0)
    agent.step()  # lease until 104.0
    swap(client)
    now[0] = 103.9
    agent.apply_pushed(client.reply([A, B]))  # new lease until 106.9; A's old level only until 104.0
    assert agent.demotion is not None and agent.demotion.waiting[A].deadline == 104.0
    now[0] = 104.0
    counters.bytes[A] += 1
    agent.poll_demotions()
    assert enforcer.marks[A] == 0


def test_the_run_loop_applies_a_waiting_demotion_between_reports(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path)
    agent.monotonic = time.monotonic  # the loop sleeps for real here
    agent.activity = FlowActivity(0.01)
    agent.demotion = PhaseDemotion(0.2)
    stop = threading.Event()
    steps: list[object] = []

    def on_step(result: object) -> None:
        steps.append(result)
        if len(steps) == 1:
            swap(client)
            agent.apply_pushed(client.reply([A, B]))

    def keep_sending() -> None:  # A never goes idle: its demotion comes with the bound
        while not stop.is_set():
            counters.bytes[A] += 1
            stop.wait(0.002)

    sender = threading.Thread(target=keep_sending)
    sender.start()
    runner = threading.Thread(target=agent.run, args=(5.0, stop, on_step, None))
    runner.start()
    try:
        wait_until(lambda: enforcer.marks.get(A) == 0, 3.0, lambda: f"A demoted by the agent's loop: {enforcer.marks}")
        assert len(steps) == 1  # no report in between: the loop did it
    finally:
        stop.set()
        runner.join(5)
        sender.join(5)


def test_without_phase_demotion_every_level_applies_at_once(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path, demotion=False)
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    assert enforcer.marks == {A: 0, B: 24}
    assert agent.poll_demotions() is False and counters.reads == 1  # no extra counter readings
    assert agent._tick(None) is None and agent._tick(0.02) == 0.02


def test_the_lease_running_out_clears_the_waiting_demotions(tmp_path: Path) -> None:
    agent, client, enforcer, counters, now, _ = make(tmp_path, wait_max=60.0)
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    assert agent.demotion is not None and agent.demotion.waiting
    now[0] = 104.5  # the pushed decision's lease ran out at 104.0
    assert not agent.poll_demotions()
    assert agent.demotion.waiting == {} and agent._wake_in() is None


def test_the_idle_test_reads_only_the_byte_counters_where_the_source_has_them(tmp_path: Path) -> None:
    class BytesToo(Counters):
        def __init__(self) -> None:
            super().__init__()
            self.byte_reads = 0

        def read_bytes(self) -> dict[FlowKey, int]:
            self.byte_reads += 1
            return dict(self.bytes)

    agent, client, enforcer, _, now, _ = make(tmp_path)
    counters = BytesToo()
    agent.flows = counters
    agent.step()
    swap(client)
    agent.apply_pushed(client.reply([A, B]))
    now[0] = 101.05
    assert not agent.poll_demotions()  # unchanged since the report's reading: idle, applied
    assert (counters.reads, counters.byte_reads) == (1, 1) and enforcer.marks[A] == 0
