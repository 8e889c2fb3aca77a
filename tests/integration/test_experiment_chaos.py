"""`leveller experiment chaos`, short: the live pair (OVS + SDN app, controller, agents with eBPF
markers) for 30 s undisturbed, then 30 s while the controller and h1's agent are SIGKILLed and
restarted. The system recovers from both, no rewritten DSCP outlives a lease on the wire, and the
teardown leaves nothing (namespaces, processes, /run/leveller, marker BPF programs).

The run leaves each fault more time after its restart than the bar allows for the recovery: the agent's
fault waits for h1 to carry a mark, so a controller slow to come back delays it. Once, on a host whose
hypervisor stole a sixth of the CPU over the suite, the controller decided again 8.1 s after its restart
(1.6 s quiet) and pushed the agent's fault from 15 s to 17.5 s; with 25 s runs its restart then left
4.5 s, and "not recovered" was the run's end, not the agent's."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from leveller.experiments.chaos.run import marker_programs
from tests.integration.support import demo_leftovers

pytestmark = pytest.mark.privileged
RECOVERY_S = {"controller": 10.0, "agent:h1": 10.0}  # longest wait, from the restart, for everything to be back


def test_short_chaos_recovers_from_each_fault_without_stale_marks_and_leaves_nothing(tmp_path: Path) -> None:
    name = "ch" + uuid.uuid4().hex[:8]
    before = marker_programs()
    proc = subprocess.run([sys.executable, "-m", "leveller.cli", "experiment", "chaos", "--duration", "30",
                           "--schedule", "controller@5+3,agent@14+3", "--name", name, "--out", str(tmp_path),
                           "--json"], capture_output=True, text=True, timeout=240)
    assert proc.stdout.startswith("{"), proc.stderr[-5000:]
    doc = json.loads(proc.stdout)
    print(json.dumps({k: doc[k] for k in ("baseline", "chaos", "min_r_ratio", "faults", "stale_marks", "packets",
                                          "verdict")}))
    assert proc.returncode == (0 if doc["verdict"] == "ok" else 1)
    assert [f["fault"] for f in doc["faults"]] == ["controller", "agent:h1"]
    for f in doc["faults"]:
        assert 2.5 < f["down_s"] < 4.0, f
        # back within a few seconds: decisions, both jobs iterating, marks on the wire. The agent's marks
        # come back once it has started again (Python, the BPF program compiled and attached) and its
        # host's job next holds the top level: 3.0 s quiet, 4.85-6.22 s in three runs under two CPU burners.
        # The controller: 1.8 s quiet, 8.4 s on the host stealing a sixth of the CPU (see above). An agent
        # that never reconnects, or a controller that never decides again, fails whatever the bar
        assert f["recovered_s"] is not None and f["recovered_s"] < RECOVERY_S[f["fault"]], f
        assert f["outage_s"] == pytest.approx(f["down_s"] + f["recovered_s"], abs=0.05)
    assert doc["stale_marks"] == [] and doc["marked_packets_seen"] and doc["packets"] > 10_000
    assert doc["fault_errors"] == []
    # both runs measured R; the faults cost the pair something, not everything
    assert set(doc["baseline"]["rates"]) == set(doc["chaos"]["rates"]) == {"j1", "j2"}
    assert doc["min_r_ratio"] == pytest.approx(doc["chaos"]["min"] / doc["baseline"]["min"], abs=1e-3)
    assert 0.5 < doc["min_r_ratio"] < 1.3
    assert doc["qp"]["checked"] is False and "TCP" in doc["qp"]["why"]
    assert doc["cleanup"] == {"clean": True, "namespaces": [], "processes": [], "files": [], "bpf_programs": []}
    assert doc["verdict"] == "ok"
    assert demo_leftovers(name) == {"namespaces": [], "processes": [], "files": []}
    assert marker_programs() <= before
    assert json.loads((tmp_path / "chaos.json").read_text()) == doc
    assert (tmp_path / "chaos.png").read_bytes()[:4] == b"\x89PNG" and doc["plot"] == str(tmp_path / "chaos.png")
