"""Re-profiling on the live testbed: a job whose compute time grows mid-run (0.25 s -> 1.0 s per
iteration, its time alone 0.5 s -> 1.25 s) is profiled by the controller at its start, found to have
drifted (--reprofile-drift) and profiled again; its R stays meaningful (near 1 for a job alone)
instead of sinking towards 0.5 / 1.25 as with the first ideal time."""

from __future__ import annotations

import uuid

import pytest

from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.policy_run import LiveSettings, run_policy

pytestmark = pytest.mark.privileged

CHANGE_AT, NEW_COMPUTE, RUN_S = 18.0, 1.0, 55.0


def test_a_drifting_job_is_profiled_again_and_keeps_a_meaningful_r(tmp_path) -> None:
    from pyroute2 import netns

    name = "rp" + uuid.uuid4().hex[:8]
    settings = LiveSettings(seconds=RUN_S, tau_s=1.0, interval_s=0.25, lease_s=3.0, stale_after_s=3.0)
    job = plan("pair")[0].live(settings.unit_s)  # j1: C:M = 1:1 at 0.25 s per unit, alone on the testbed
    with DemoCluster(name, tmp_path / "run") as cluster:
        out = run_policy(cluster, "reprofile", "leveller", [job], {"j1": 0.5}, settings, declare_ideal=False,
                         compute_changes={"j1": ((CHANGE_AT, NEW_COMPUTE),)},
                         controller_args=["--reprofile-drift", "0.25"])
    t0 = out.t_start
    seen = [(d["t"] - t0, d["jobs"]["j1"]["ideal"], d["rates"].get("j1")) for d in out.decisions
            if "j1" in d.get("jobs", {})]
    ideals = sorted({round(i, 3) for _, i, _ in seen if i is not None})
    print(f"ideal times seen {ideals}; R at the end {[round(r, 3) for t, _, r in seen if t > RUN_S - 8 and r][-3:]}")
    before = [i for t, i, _ in seen if 8 < t < CHANGE_AT and i is not None]
    assert before and all(0.48 <= i <= 0.6 for i in before)  # profiled at the start: 0.5 s + TCP
    after = [i for t, i, _ in seen if t > RUN_S - 12 and i is not None]
    assert after and all(1.2 <= i <= 1.45 for i in after)  # profiled again: 1.25 s + TCP
    late = [r for t, _, r in seen if t > RUN_S - 8 and r is not None]
    assert late and all(0.85 <= r <= 1.1 for r in late), late
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
