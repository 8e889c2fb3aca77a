"""Closed-loop verification: marked bytes per switch port and level against queue counters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from leveller.agent.rate_tracker import JobProgress
from leveller.agent.reports import Classifier, FlowSample, build_report, parse_port_rule
from leveller.codec import SchemaError
from leveller.controller.enforcement import EnforcementMonitor
from leveller.core.enforcement import Tolerance, compare, egress_ports, expected_bytes
from leveller.core.qos import default_level_map, dscp_levels
from leveller.model.flow import flow_key
from leveller.rpc.schema import FlowReport, JobReport, Report, report_from_wire, report_to_wire

LEVELS = dscp_levels(default_level_map(2))  # DSCP 8 -> level 1, everything else level 0
FA = flow_key("10.0.0.1", "10.0.0.4", 40000, 47000)
FB = flow_key("10.0.0.2", "10.0.0.4", 40001, 48000)
PATHS = {FA: ("h1>s1", "s1>h4"), FB: ("h2>s1", "s1>h4")}
PORTS = {"s1>h4": ("s1", 4), "s1>h1": ("s1", 1), "s1>h2": ("s1", 2)}
TOL = Tolerance(min_bytes=1000)


def test_egress_ports_only_for_links_leaving_a_switch() -> None:
    ports = egress_ports(["h1>s1", "s1>h4", "s1>s2", "s2>s1"], ["s1", "s2"],
                         {("s1", "h4"): 4, ("s1", "s2"): 5, ("s2", "s1"): 1})
    assert ports == {"s1>h4": ("s1", 4), "s1>s2": ("s1", 5), "s2>s1": ("s2", 1)}


def test_expected_bytes_sum_flows_per_port_and_level() -> None:
    got = expected_bytes([(PATHS[FA], 8, 100), (PATHS[FB], 0, 30), (PATHS[FB], 46, 5), (PATHS[FA], 8, 0)],
                         PORTS, LEVELS)
    assert got == {("s1", 4, 1): 100, ("s1", 4, 0): 35}  # DSCP 46 is no level's: level 0, as switches map it


def test_compare_raises_below_half_and_clears_above_eighty_percent() -> None:
    key = ("s1", 4, 1)
    checks, alarmed = compare({key: 10_000}, {key: 4_000}, TOL)
    assert alarmed == {key} and checks[0].ratio == 0.4
    _, alarmed = compare({key: 10_000}, {key: 7_000}, TOL, alarmed)  # between the thresholds: stays
    assert alarmed == {key}
    _, alarmed = compare({key: 10_000}, {key: 10_400}, TOL, alarmed)
    assert alarmed == frozenset()
    checks, alarmed = compare({key: 500}, {key: 0}, TOL)  # too few bytes to judge
    assert checks == [] and alarmed == frozenset()
    with pytest.raises(ValueError):
        Tolerance(raise_below=0.9, clear_above=0.8)


@settings(max_examples=300)
@given(st.integers(1000, 10**9), st.floats(1.0, 1.1), st.integers(0, 10**6))
def test_a_healthy_queue_never_alarms(expected: int, overhead: float, unmanaged: int) -> None:
    # a healthy queue counts frames (headers included) plus traffic nobody marked
    key = ("s1", 4, 1)
    _, alarmed = compare({key: expected}, {key: int(expected * overhead) + unmanaged}, TOL)
    assert not alarmed


class FakeQueues:
    """Stands in for the switch counters (the live test reads the real ones)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, int], int] = {("s1", 4, 0): 0, ("s1", 4, 1): 0}

    def egress_ports(self) -> dict[str, tuple[str, int]]:
        return PORTS

    def arrived(self) -> dict[tuple[str, int, int], int]:
        return dict(self.counts)


def report(host: str, flow: object, seq: int, by_dscp: dict[int, int], run: str = "a" * 16) -> Report:
    return Report(host, (JobReport("j", 1, 1.0),), (FlowReport(flow, "j", sum(by_dscp.values())),),  # type: ignore[arg-type]
                  run, seq, tuple((0, d, b) for d, b in sorted(by_dscp.items())))


def test_monitor_raises_names_the_port_and_clears(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="leveller.controller")
    queues = FakeQueues()
    reg = CollectorRegistry()
    mon = EnforcementMonitor(queues, default_level_map(2), window_s=2.0, tolerance=TOL, registry=reg)
    sent = {8: 0}
    mon.observe(report("h1", FA, 1, sent))  # baseline
    healthy, broken = ("s1", 4, 1), ("s1", 4, 0)
    t, seq = 0.0, 2
    for step in range(12):
        t += 1.0
        sent = {8: sent[8] + 100_000}
        mon.observe(report("h1", FA, seq, sent))
        seq += 1
        # steps 0-4 healthy; 5-8 the port maps DSCP 8 to queue 0; 9- repaired
        target = broken if 5 <= step <= 8 else healthy
        queues.counts[target] += 104_000  # frames are a little larger than IP packets
        mon.check(t, PATHS)
        if step == 4:
            assert mon.mismatches() == []
        if step == 6:  # within two checks of the break (window 2 s)
            [m] = mon.mismatches()
            assert (m.switch, m.port, m.level) == ("s1", 4, 1) and m.counted < m.expected / 2
            assert b'leveller_enforcement_mismatch{level="1",port="4",switch="s1"} 1.0' in generate_latest(reg)
            assert "switch s1 port 4 level 1" in caplog.text
    assert mon.mismatches() == []  # cleared after the repair
    assert b'leveller_enforcement_mismatch{level="1",port="4",switch="s1"} 0.0' in generate_latest(reg)
    assert "cleared: switch s1 port 4 level 1" in caplog.text


def test_monitor_takes_no_news_from_new_flows_or_first_reports() -> None:
    queues = FakeQueues()
    mon = EnforcementMonitor(queues, default_level_map(2), window_s=1.0, tolerance=TOL, registry=CollectorRegistry())
    mon.observe(report("h1", FA, 1, {8: 10**9}))  # the first report: baseline
    mon.observe(report("h2", FB, 1, {}))
    mon.observe(report("h2", FB, 2, {8: 10**9}))  # a flow first seen with a big count: may predate the window
    mon.check(1.0, PATHS)
    mon.check(2.0, PATHS)
    assert mon.mismatches() == [] and mon.checks == []
    # a known flow on a new DSCP counts all of it; a new agent run counts from zero
    mon.observe(report("h1", FA, 2, {8: 10**9, 0: 50_000}))
    mon.observe(report("h2", FB, 3, {8: 70_000}, run="b" * 16))
    mon.check(3.0, PATHS)
    assert {(c.level, c.expected) for c in mon.checks} == {(0, 50_000), (1, 70_000)}


def test_monitor_reads_a_hosts_latest_counters_once_per_check() -> None:
    mon = EnforcementMonitor(FakeQueues(), default_level_map(2), window_s=1.0, tolerance=TOL,
                             registry=CollectorRegistry())
    mon.observe(report("h1", FA, 1, {8: 1_000}))
    mon.check(1.0, PATHS)  # baseline
    for seq, total in ((2, 5_000), (3, 9_000), (4, 12_000)):  # cumulative: only the last one counts
        mon.observe(report("h1", FA, seq, {8: total}))
    mon.check(2.0, PATHS)
    assert {(c.level, c.expected) for c in mon.checks} == {(1, 11_000)}


def test_the_report_path_does_no_per_flow_work() -> None:
    class Untouchable:
        """A report whose flows and counters must not be read when it arrives."""

        host, run = "h1", "a" * 16

        @property
        def flows(self) -> tuple[()]:
            raise AssertionError("flows read on the report path")

        @property
        def dscp_bytes(self) -> tuple[()]:
            raise AssertionError("dscp_bytes read on the report path")

    mon = EnforcementMonitor(FakeQueues(), default_level_map(2), window_s=1.0, tolerance=TOL,
                             registry=CollectorRegistry())
    mon.observe(Untouchable())  # type: ignore[arg-type]
    mon.forget("h1")
    mon.check(1.0, PATHS)  # a forgotten host's report is not read either


def test_monitor_reads_the_switches_at_most_once_per_interval() -> None:
    class Counting(FakeQueues):
        reads = 0

        def arrived(self) -> dict[tuple[str, int, int], int]:
            Counting.reads += 1
            return super().arrived()

    mon = EnforcementMonitor(Counting(), default_level_map(2), window_s=1.0, tolerance=TOL,
                             registry=CollectorRegistry(), interval_s=0.5)
    for t in (0.0, 0.1, 0.2, 0.49, 0.5, 0.7, 1.1):  # steps at every iteration end: checks at 0, 0.5, 1.1
        mon.check(t, PATHS)
    assert Counting.reads == 3


def test_monitor_records_a_failed_read() -> None:
    class Down(FakeQueues):
        def arrived(self) -> dict[tuple[str, int, int], int]:
            raise OSError("connection refused")

    mon = EnforcementMonitor(Down(), default_level_map(2), window_s=1.0, registry=CollectorRegistry())
    with pytest.raises(OSError):
        mon.check(1.0, PATHS)
    assert mon.status()["error"] == "OSError: connection refused"


def test_dscp_bytes_on_the_wire() -> None:
    r = Report("h1", (JobReport("j", 1, 1.0),), (FlowReport(FA, "j", 10), FlowReport(FB, "j", 5)), "a" * 16, 1,
               ((0, 8, 7), (0, 0, 3), (1, 0, 5)))
    assert report_from_wire(report_to_wire(r)) == r
    base = report_to_wire(r)
    for bad, field in (([[2, 0, 1]], "flows_dscp[0][0]"), ([[0, 64, 1]], "flows_dscp[0][1]"),
                       ([[0, 8, -1]], "flows_dscp[0][2]"), ([[0, 8, 1], [0, 8, 2]], "flows_dscp[1]"),
                       ([[0, 8]], "flows_dscp[0]"), ("x", "flows_dscp")):
        with pytest.raises(SchemaError) as info:
            report_from_wire(base | {"flows_dscp": bad})
        assert info.value.field == field


ODD = st.sampled_from([-1, 64, 2, 2**63, True, False, 1.5, "0", None])  # out of range or not an int
DSCP_ENTRY = st.one_of(
    st.tuples(st.one_of(st.integers(0, 1), ODD), st.one_of(st.sampled_from([0, 8, 46, 63]), ODD),
              st.one_of(st.sampled_from([0, 7, 2**63 - 1]), ODD)).map(list),
    st.lists(st.integers(0, 8), max_size=4).filter(lambda e: len(e) != 3),
    st.sampled_from(["x", {"a": 1}, 7, (0, 8, 1)]))


@settings(max_examples=300)
@given(st.lists(DSCP_ENTRY, max_size=5), st.booleans())
def test_fast_dscp_bytes_validation_equals_the_full_checks(entries: list, with_flows: bool) -> None:
    import copy

    import leveller.rpc.schema as schema

    flows = (FlowReport(FA, "j", 10), FlowReport(FB, "j", 5)) if with_flows else ()
    msg = report_to_wire(Report("h1", (JobReport("j", 1, 1.0),), flows, "a" * 16, 1)) | {"flows_dscp": entries}

    def outcome(full: bool) -> object:
        with pytest.MonkeyPatch.context() as mp:
            if full:
                mp.setattr(schema, "_plain_dscp_bytes", lambda items, n: None)
            try:
                return report_from_wire(copy.deepcopy(msg)).dscp_bytes
            except SchemaError as exc:
                return ("error", exc.field, str(exc))

    assert outcome(full=False) == outcome(full=True)


def test_plain_dscp_bytes_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import leveller.rpc.schema as schema

    flows = tuple(FlowReport(flow_key("10.0.0.1", "10.0.0.2", 1000 + i, 5201), "j", 10) for i in range(100))
    r = Report("h1", (JobReport("j", 1, 1.0),), flows, "a" * 16, 1, tuple((i, 46, 7) for i in range(100)))
    slow: list[str] = []
    real = schema._int
    monkeypatch.setattr(schema, "_int", lambda value, field, *a: (slow.append(field) if field.startswith("flows_dscp")
                                                                  else None) or real(value, field, *a))
    assert report_from_wire(report_to_wire(r)).dscp_bytes == r.dscp_bytes
    assert not slow


def test_agent_reports_dscp_bytes_of_the_flows_it_reports() -> None:
    progress = {"j": JobProgress("j", iterations=1, start_time=1.0)}
    flows = {FA: FlowSample(100, 0, ((0, 40), (8, 60))), FB: FlowSample(9, 0, ((8, 9),))}
    rep = build_report("h1", progress, flows, Classifier(ports=(parse_port_rule("j=47000"),)), {}, 2.0)
    assert [f.key for f in rep.flows] == [FA]  # FB is no job's
    assert rep.dscp_bytes == ((0, 0, 40), (0, 8, 60))
