"""The 1,000-agent emulation of `leveller bench controller`: byte-for-byte the agents' encoding, report
ticks as an agent keeps them, and a measured window that refuses the start's backlog."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.bench.controller_scale import (
    EMULATION_NICE,
    _agent_flows,
    _agents_child,
    _ReportBody,
    _spawn,
    machine_load,
    next_tick,
    start_backlog,
    steal_seconds,
)
from leveller.codec import encode
from leveller.rpc.schema import FlowReport, JobReport, Report, report_to_wire

FLOWS = _agent_flows(4, 6, 1)


@settings(max_examples=50)
@given(agent=st.integers(0, 3), keep=st.integers(0, 6), nbytes=st.integers(0, 2**63 - 1),
       iterations=st.integers(0, 10**6))
def test_an_emulated_report_is_the_real_encoding(agent: int, keep: int, nbytes: int, iterations: int) -> None:
    flows = FLOWS[agent][:keep]  # none to all of an agent's flows
    jobs = tuple(JobReport(j, iterations, 1000.0, 1.0) for j in sorted({j for _, j in flows}))
    head = Report(f"agent{agent:04d}", jobs, (), "ab" * 8, 3)
    full = Report(head.host, jobs, tuple(FlowReport(k, j, nbytes) for k, j in flows), "ab" * 8, 3)
    assert _ReportBody(head.host, flows)(head, nbytes) == encode(report_to_wire(full))


def test_a_late_agent_reports_at_its_next_tick_not_the_missed_ones() -> None:
    assert next_tick(10.0, 1.0, 10.2) == 11.0  # on time
    assert next_tick(10.0, 1.0, 11.5) == 11.0  # late by half a period: that tick is still due
    assert next_tick(10.0, 1.0, 15.2) == 15.0  # late by five: ticks 11-14 are skipped, 15 is due now
    assert next_tick(10.0, 0.5, 10.99) == 10.5


def test_a_window_whose_first_tau_holds_the_backlog_is_refused() -> None:
    sent = [100.0 + i / 200 for i in range(400)]  # 200 reports a second from t = 100
    quick = [3.0] * 400
    assert start_backlog(quick, sent, 100.0, 1.0) is None
    slow = [1500.0 if t < 100.5 else 3.0 for t in sent]  # the first half second still answered late
    assert start_backlog(slow, sent, 100.0, 1.0) == "100 of the 200 reports of the window's first tau took longer " \
                                                    "than tau"
    assert start_backlog(slow, sent, 101.0, 1.0) is None  # a window from t = 101 is clear
    two = [1500.0 if i in (0, 1) else 3.0 for i in range(400)]  # 1% of 200: tolerated; one more is not
    assert start_backlog(two, sent, 100.0, 1.0) is None
    three = [1500.0 if i in (0, 1, 2) else 3.0 for i in range(400)]
    assert start_backlog(three, sent, 100.0, 1.0) is not None


def test_steal_is_the_eighth_count_of_the_cpu_line_in_seconds_and_none_without_it() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice (jiffies, all CPUs)
    assert steal_seconds("cpu  1004473 0 478546 3374137 1751 0 58027 29302 0 0\n") == 29302 / tick
    assert steal_seconds("cpu  10 0 5 30 1 0 2\n") is None  # a kernel without the steal column
    assert steal_seconds("cpu0 1 2 3 4 5 6 7 8 9 10\n") is None  # one CPU's line, not the total
    assert steal_seconds() is not None  # this machine's /proc/stat has it


def test_the_emulated_agents_yield_the_cpu_to_the_controller() -> None:
    """The emulating processes run niced: on a cluster the agents are other hosts, here they would take
    the CPU the measured controller needs (its report p50 went from 20-106 ms to 505-691 ms)."""
    ctx = _spawn()
    parent, child = ctx.Pipe(duplex=False)
    # no agent and a window already over: the child only sets itself up and answers
    proc = ctx.Process(target=_agents_child, args=("127.0.0.1:9", [], 1, 1, 1, 0.0, 1.0, 0.0, child))
    proc.start()
    child.close()
    try:
        assert parent.poll(60), "the emulating process did not answer"
        status, out = parent.recv()
    finally:
        proc.join(10)
    assert status == "ok", out
    assert out["nice"] == min(19, os.nice(0) + EMULATION_NICE) and out["nice"] > os.nice(0)
    assert os.nice(0) < 19  # this process is not the niced one


def test_an_invalid_run_says_how_busy_the_machine_was() -> None:
    said = machine_load(0.86, 10.8, 20.0, 2)
    assert "0.86 cores" in said and "stole 10.8 of 2 x 20 CPU s" in said and "--agents" in said
    assert machine_load(0.5, None, 20.0, 2) == " (the controller used 0.50 cores in the window)"
