"""CASSINI on the live system: two jobs on one bottleneck (the demo's star, h1 and h2 -> h4) run
under `controller --policy cassini`; the controller's plan shifts them half a period apart, the
agents write the shift files, the job emulator delays one iteration start to the plan's phase, and
the eBPF counters show the jobs taking turns on the link. Without shifts (`fair`, same jobs, same
start) their communication overlaps for as long as TCP's own drift leaves it so.

The star's links run at 25 Mbit/s here, not the demo's 100: at 100 every byte costs ovs-vswitchd's
one forwarding thread and the kernel four times the CPU, and under two CPU burners the jobs'
iterations stretched from 1.0 s to 1.4 s and jittered, drifting out of the plan's phase within a
few iterations (overlap fair 0.31, cassini 0.27). At 25 Mbit/s alone it was still 0.37 vs 0.28;
what made the shifts hold under load is the testbed's ovs-vswitchd at nice -10
(leveller.testbed.ovs.SWITCH_NICE): 0.24-0.28 vs 0.084-0.088. CASSINI's shifts need periodic jobs;
the bottleneck should be the link, not the machine's CPU."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from leveller.core.topology import topology_from_dict
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.measure import job_bytes, overlap_share, sending
from leveller.experiments.shared.policy_run import LiveSettings, run_policy
from leveller.experiments.shared.star import topology_dict
from leveller.model.shape import JobShape

pytestmark = pytest.mark.privileged

LINK_MBPS = 25.0
# two jobs that each communicate half of the time: together they fit the link exactly when they alternate
JOBS = [LiveJob("j1", ("h4", "h1"), JobShape(0.5, 0.5), 21000, rate_mbps=LINK_MBPS),
        LiveJob("j2", ("h4", "h2"), JobShape(0.5, 0.5), 21010, rate_mbps=LINK_MBPS)]
IDEAL = {"j1": 1.0, "j2": 1.0}
BIN_S = 0.05
SENDING_BPS = 0.1 * LINK_MBPS * 1e6  # a job sends in a bin when its counter grew faster than 10% of the link


def overlap(work: Path, t0: float, t1: float) -> float:
    series = {j.name: job_bytes((work / f"agent-{j.hosts[1]}.jsonl").read_text().splitlines())[j.name]
              for j in JOBS}
    a, b = (sending(series[j.name], t0, t1, BIN_S, SENDING_BPS) for j in JOBS)
    assert a.mean() > 0.3 and b.mean() > 0.3  # both jobs communicated a good part of the window
    return overlap_share(a, b)


def test_cassini_shifts_make_two_jobs_take_turns_on_the_bottleneck(tmp_path: Path) -> None:
    from pyroute2 import netns

    name = "cs" + uuid.uuid4().hex[:8]
    settings = LiveSettings(seconds=16.0, interval_s=0.05)
    star = topology_dict()
    star["links"] = [{**link, "rate_mbps": LINK_MBPS} for link in star["links"]]
    with DemoCluster(name, tmp_path / "run", topology=topology_from_dict(star)) as cluster:
        fair = run_policy(cluster, "fair", "fair", JOBS, IDEAL, settings)
        fair_overlap = overlap(cluster.work_dir / "fair", fair.t_start + 3, fair.t_start + 15)
        cas = run_policy(cluster, "cassini", "cassini", JOBS, IDEAL, settings)
        work = cluster.work_dir / "cassini"
        cas_overlap = overlap(work, cas.t_start + 3, cas.t_start + 15)
        logs = {j.name: (work / f"{j.name}.log").read_text() for j in JOBS}
    plans = [d["shifts"] for d in cas.decisions if d.get("shifts")]
    print(f"overlap fair {fair_overlap:.3f}, cassini {cas_overlap:.3f}; last plans {plans[-3:]}; "
          f"R fair {fair.rates}, cassini {cas.rates}")
    # the controller's plan: the two jobs half a period apart (CASSINI's best rotation on the link).
    # The last plan of both jobs: once the jobs stop at the end of the run, a plan without them may follow.
    last = [p["s"] for p in plans if {"j1", "j2"} <= set(p["s"])][-1]
    assert abs(last["j1"] - last["j2"]) % 1.0 == pytest.approx(0.5, abs=0.05)
    assert all(d.get("shifts") is None for d in fair.decisions)  # no plans under other policies
    # every worker of both jobs delayed an iteration start for the plan, once per plan
    for job, text in logs.items():
        applied = re.findall(rf"leveller-shift job={job} rank=(\d) plan=(\d+) ", text)
        assert {r for r, _ in applied} == {"0", "1"}
        assert len(applied) == len(set(applied))
    # measured from the eBPF counters: the jobs take turns with shifts, not without. Quiet machine:
    # fair 0.24-0.63, cassini 0.11-0.18; two CPU burners and a busy process: fair 0.460, cassini
    # 0.374 (CPU waits make the iterations drift out of their shifted phase within the window).
    # Jobs that ignore their shift overlap as under fair sharing.
    assert cas_overlap <= 0.4
    assert cas_overlap <= 0.85 * fair_overlap
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
