"""The chaos experiment's schedule parsing and verdicts on literal timelines (leveller.experiments.chaos.check)."""

from __future__ import annotations

import pytest

from leveller.errors import UserError
from leveller.experiments.chaos.check import (
    DEFAULT_SCHEDULE,
    Fault,
    Segment,
    Struck,
    epoch_regressions,
    parse_schedule,
    recovery,
    stale_marks,
    takeover,
)

HOSTS = ("h1", "h2", "h4")


def test_schedule_items_in_time_order_with_the_default_agent_host() -> None:
    faults = parse_schedule("controller@30+2,ovs@10+3,agent:h2@45+1.5,agent@60+2", 80, HOSTS, "h1")
    assert faults == [Fault("ovs", 10, 3), Fault("controller", 30, 2), Fault("agent", 45, 1.5, "h2"),
                      Fault("agent", 60, 2, "h1")]
    assert [f.label for f in faults] == ["ovs", "controller", "agent:h2", "agent:h1"]
    assert len(parse_schedule(DEFAULT_SCHEDULE, 90, HOSTS, "h1")) == 4


@pytest.mark.parametrize("text,needle", [
    ("switch@10+2", "'switch@10+2' is not TARGET@AT+DOWN"),
    ("ovs@10", "'ovs@10' is not"),
    ("ovs:h1@10+2", "only agent takes a host"),
    ("agent:h9@10+2", "no agent runs on host 'h9'"),
    ("ovs@10+0", "DOWN must be in (0, 60]"),
    ("ovs@2+1", "at least 5 s after the start"),
    ("ovs@10+3,sdn@14+2", "before the next fault (sdn@14)"),
    ("ovs@10+3,sdn@55+2", "before the end of the run (60 s)"),
    ("ovs@1.2.3+1", "AT and DOWN are seconds"),
    ("leader:h1@10+2", "only agent takes a host"),
    ("controller@10+2,leader@30+2", "controller does not go with leader, etcd, partition"),
])
def test_bad_schedules_are_named(text: str, needle: str) -> None:
    with pytest.raises(UserError) as info:
        parse_schedule(text, 60, HOSTS, "h1")
    assert needle in str(info.value)


def seg(host: str, dscp: int, start: float, end: float) -> Segment:
    return Segment(host, dscp, start, end)


def test_marks_within_a_lease_of_a_decision_are_fine_and_later_ones_are_stale() -> None:
    decisions = [100.0, 100.1, 100.2, 105.0]
    lease = 2.0
    ok = [seg("h1", 8, 100.0, 102.4), seg("h2", 0, 100.0, 110.0), seg("h1", 8, 105.0, 106.0)]
    assert stale_marks(ok, decisions, [], lease) == []
    late = stale_marks([seg("h1", 8, 101.0, 103.0)], decisions, [], lease)  # 100.2 + 2 + 0.3 = 102.5
    assert len(late) == 1 and late[0]["host"] == "h1" and late[0]["t"] == pytest.approx(102.5)
    assert "last one 2.30 s earlier" in str(late[0]["why"])
    assert stale_marks([seg("h2", 8, 99.0, 99.5)], decisions, [], lease)[0]["why"].endswith("(none yet)")


def test_a_killed_agents_host_may_not_mark_past_its_lease_although_the_controller_decides() -> None:
    decisions = [100.0 + 0.1 * i for i in range(200)]  # the controller never stops
    killed = Struck(Fault("agent", 10, 3, "h1"), 101.0, 104.0)
    assert stale_marks([seg("h1", 8, 100.0, 103.2), seg("h2", 8, 100.0, 110.0)], decisions, [killed], 2.0) == []
    late = stale_marks([seg("h1", 8, 100.0, 103.5)], decisions, [killed], 2.0)
    assert [(v["host"], v["t"]) for v in late] == [("h1", pytest.approx(103.3))]
    assert stale_marks([seg("h1", 8, 104.2, 106.0)], decisions, [killed], 2.0) == []  # the new agent marks


def test_recovery_is_the_last_of_decision_iterations_and_marks_after_the_restart() -> None:
    k = Struck(Fault("controller", 10, 3), 110.0, 113.0)
    decisions = [109.9, 113.4, 113.5]
    ends = {"j1": [109.0, 112.0, 113.8], "j2": [111.0, 114.1]}
    segments = [seg("h1", 8, 105.0, 111.0), seg("h2", 8, 113.6, 114.0)]
    out = recovery(k, 130.0, decisions, ends, segments)
    assert out["recovered_s"] == pytest.approx(1.1) and out["outage_s"] == pytest.approx(4.1)
    assert out["decision_s"] == pytest.approx(0.4) and out["marks_s"] == pytest.approx(0.6)
    assert out["missing"] is None


def test_an_agent_fault_recovers_with_marks_from_its_own_host_and_never_is_reported() -> None:
    k = Struck(Fault("agent", 10, 3, "h1"), 110.0, 113.0)
    decisions = [113.1]
    ends = {"j1": [113.5]}
    others = [seg("h2", 8, 112.0, 120.0)]
    out = recovery(k, 120.0, decisions, ends, others)
    assert out["recovered_s"] is None and out["missing"] == "marks"
    out = recovery(k, 120.0, decisions, ends, others + [seg("h1", 8, 115.0, 116.0)])
    assert out["recovered_s"] == pytest.approx(2.0)
    assert recovery(k, 114.0, decisions, ends, others + [seg("h1", 8, 115.0, 116.0)])["missing"] == "marks"


def test_the_faults_on_controllers_on_etcd_parse() -> None:
    faults = parse_schedule("partition@40+4,leader@10+4,etcd@25+4", 60, HOSTS, "h1")
    assert faults == [Fault("leader", 10, 4), Fault("etcd", 25, 4), Fault("partition", 40, 4)]


def test_takeover_of_a_killed_leader() -> None:
    decisions = {"c0": [99.0, 99.5, 100.0], "c1": [101.6, 102.0, 102.5]}
    k = Struck(Fault("leader", 10, 4), 100.2, 104.2)
    marks = [seg("h1", 8, 99.0, 101.0), seg("h2", 0, 99.0, 105.0), seg("h1", 8, 101.9, 106.0)]
    out = takeover(k, 110.0, decisions, "c0", marks)
    assert out["leader_before"] == "c0" and out["leader_after"] == "c1"
    assert out["takeover_s"] == pytest.approx(1.4)  # 101.6 - 100.2
    assert out["decision_gap_s"] == pytest.approx(7.5)  # 102.5 .. 110: nothing more was decided
    assert out["unmarked_s"] == pytest.approx(4.0)  # 106 .. 110 (101 .. 101.9 is shorter)
    assert "cut_leader_decided_s" not in out
    # no other controller ever decides: no takeover
    assert takeover(k, 110.0, {"c0": decisions["c0"], "c1": []}, "c0", marks)["takeover_s"] is None


def test_takeover_of_a_partition_reports_how_long_the_cut_leader_went_on() -> None:
    decisions = {"c0": [99.0, 100.0, 100.5, 100.9], "c1": [101.8, 102.3]}
    k = Struck(Fault("partition", 10, 4), 100.1, 104.1)
    out = takeover(k, 104.0, decisions, "c0", [seg("h1", 8, 99.0, 104.0)])
    assert out["cut_leader_decided_s"] == pytest.approx(0.8) and out["takeover_s"] == pytest.approx(1.7)
    assert out["decision_gap_s"] == pytest.approx(1.7) and out["unmarked_s"] == 0
    assert takeover(k, 104.0, {"c0": [99.0], "c1": [101.8]}, "c0", [])["cut_leader_decided_s"] == 0.0


def test_epoch_regressions_name_the_host_and_the_step() -> None:
    assert epoch_regressions({"h1": [(1.0, 0), (2.0, 3), (3.0, 3), (4.0, 9)], "h2": []}) == []
    assert epoch_regressions({"h1": [(1.0, 3), (2.0, 9), (3.0, 3), (4.0, 9)]}) == [
        {"host": "h1", "t": 3.0, "epoch": 3, "after": 9}]
