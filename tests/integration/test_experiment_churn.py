"""`leveller experiment churn`, short (about 60 s): jobs of the catalog arrive on the live leaf-spine
(OVS + SDN app, controller, an agent per host with its registration socket and no job flag), register
by themselves, are ranked and marked, and leave; the JSON contract, the checks, the plot, and that
nothing of the run is left afterwards (namespaces, processes, files, the jobs' cgroups)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.support import cgroup2_mount, demo_leftovers

pytestmark = pytest.mark.privileged


def test_short_churn_ranks_every_job_and_unmarks_the_ones_that_left(tmp_path: Path) -> None:
    name = "ch" + uuid.uuid4().hex[:8]
    proc = subprocess.run([sys.executable, "-m", "leveller.cli", "experiment", "churn", "--duration", "30",
                           "--mean-arrival", "5", "--iterations", "10", "--policies", "leveller", "--name", name,
                           "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("{"), proc.stderr[-5000:]
    doc = json.loads(proc.stdout)
    p = doc["policies"]["leveller"]
    print(json.dumps({k: v for k, v in p.items() if k != "jobs"}), doc["checks"])
    assert proc.returncode == (0 if all(doc["checks"].values()) else 1)
    assert set(doc["checks"]) == {"every_job_ranked", "first_level_in_time", "no_mark_past_lease", "jobs_finished"}
    assert p["jobs_arrived"] == len(doc["arrivals"]) >= 3 and p["jobs_started"] >= 3
    # jobs named by no flag were reported by the agents (their flows), ranked, and finished
    assert p["never_ranked"] == [] and p["jobs_finished"] >= 1
    ranked = [j for j in p["jobs"].values() if j["ranked"]]
    assert len(ranked) == p["jobs_started"] and all(j["levels"] for j in ranked)
    # the jobs that left lost their marks within the lease (2 s)
    gone = [j["marks_gone_s"] for j in p["jobs"].values() if "marks_gone_s" in j]
    assert gone and all(g is not None and g <= 2.0 for g in gone), gone
    assert 0 < p["min"] <= p["mean"] <= 1.5
    assert (tmp_path / "churn.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "churn.json").read_text())["policies"]["leveller"]["jobs_finished"] == \
        p["jobs_finished"]
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}
    assert not [c for c in cgroup2_mount().iterdir() if c.name.startswith(f"leveller-churn-{name}")]
