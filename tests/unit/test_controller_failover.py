"""Two controllers fed the same reports make the same decision (what makes a standby a standby):
the decision is a function of the agents' latest reports, not of which controller got them or in
which order. Hypothesis draws clusters of reports (jobs with progress and ideal times, flows on a
leaf-spine fabric, ties in R included) and arrival orders; both controllers' replies must agree."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.controller.paths import TopologyPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.core.topology import preset
from leveller.model.flow import flow_key
from leveller.rpc.schema import FlowReport, JobReport, LevelsReply, Report

NOW = 1_000_000.0
TOPO = preset("leafspine")
HOSTS = [h.name for h in TOPO.hosts]
IPS = {h.name: h.ip for h in TOPO.hosts}


def controller(policy: str = "leveller") -> Controller:
    return Controller(TopologyPaths(TOPO), make_policy(policy), default_level_map(4), tau_s=1.0, lease_s=3.0,
                      stale_after_s=30.0, monotonic=lambda: 50.0)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Report], int]:
    """Reports of 2-5 hosts about 1-4 jobs; every job has an ideal time (profiling is each controller's
    own measurement); several jobs may share iterations and start (tied R). Plus a shuffle seed."""
    n_jobs = draw(st.integers(1, 4))
    iters = draw(st.lists(st.sampled_from([10, 20, 20, 35]), min_size=n_jobs, max_size=n_jobs))
    starts = draw(st.lists(st.sampled_from([NOW - 100, NOW - 100, NOW - 60]), min_size=n_jobs, max_size=n_jobs))
    ideal = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n_jobs, max_size=n_jobs))
    jobs = [JobReport(f"j{i}", iters[i], starts[i], ideal[i]) for i in range(n_jobs)]
    hosts = draw(st.lists(st.sampled_from(HOSTS), min_size=2, max_size=5, unique=True))
    reports = []
    for host in hosts:
        mine = draw(st.lists(st.integers(0, n_jobs - 1), min_size=1, max_size=n_jobs, unique=True))
        flows = []
        for j in mine:
            for k in range(draw(st.integers(1, 3))):
                dst = draw(st.sampled_from([h for h in HOSTS if h != host]))
                flows.append(FlowReport(flow_key(IPS[host], IPS[dst], 40000 + 10 * j + k, 47000 + j), f"j{j}", 1000))
        reports.append(Report(host, tuple(jobs[j] for j in mine), tuple(flows)))
    return reports, draw(st.integers(0, 2**16))


def levels(reply: LevelsReply) -> dict[object, int]:
    return {f.key: f.level for f in reply.flows}


def feed(ctl: Controller, reports: list[Report]) -> None:
    """The reports arrive one after the other (10 ms apart), in the order given."""
    for i, r in enumerate(reports):
        ctl.report(r, NOW - 1 + 0.01 * i)


@settings(max_examples=60)
@given(clusters(), st.sampled_from(["leveller", "crux", "fair"]))
def test_two_controllers_fed_the_same_reports_answer_the_same_levels(cluster: tuple[list[Report], int],
                                                                      policy: str) -> None:
    reports, seed = cluster
    active, standby = controller(policy), controller(policy)
    shuffled = reports[:]
    random.Random(seed).shuffle(shuffled)  # agents reach the standby in any order
    feed(active, reports)
    feed(standby, shuffled)
    a, b = active.step(NOW), standby.step(NOW)
    assert a.order == b.order
    for r in reports:  # every agent's next report: the same levels, whoever answers
        ra, rb = active.report(r, NOW + 0.1), standby.report(r, NOW + 0.1)
        assert levels(ra) == levels(rb) and ra.dscp_by_level == rb.dscp_by_level and ra.lease_s == rb.lease_s
        assert len(ra.flows) == len(r.flows)  # every flow got a level


def test_tied_jobs_rank_by_what_the_agents_report_not_by_arrival() -> None:
    """Two jobs at the same R: the standby, reached by the agents in the other order, ranks them the same."""
    j1, j2 = JobReport("j1", 20, NOW - 100, 1.0), JobReport("j2", 20, NOW - 100, 1.0)
    f1 = FlowReport(flow_key(IPS["h1"], IPS["h3"], 40000, 47000), "j1", 1000)
    f2 = FlowReport(flow_key(IPS["h2"], IPS["h3"], 40001, 47001), "j2", 1000)
    r1, r2 = Report("h1", (j1,), (f1,)), Report("h2", (j2,), (f2,))
    active, standby = controller(), controller()
    feed(active, [r1, r2])
    feed(standby, [r2, r1])
    assert active.step(NOW).order == standby.step(NOW).order
    assert levels(active.report(r1, NOW)) == levels(standby.report(r1, NOW))
