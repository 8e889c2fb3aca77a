"""Live: a job's user serving the shim's socket costs the agent's other jobs nothing (issue 41, finding 2).

The short run of `leveller bench shim --hostile 1` (the 60 s run is the command's default): a host
agent, its report loop and push watcher over gRPC to a real controller (tau 1 s, lease 3 s), levels
an RDMA job (the real shim over the FAKE verbs provider) and a TCP job (a FAKE datapath recorder)
while a process serves a shim socket that answers `list` and `set_tc` at once and never `lease`.
main: the agent waited 5 s inside apply at each lease renewal (65 % of a 60 s run), reports came
4 s late, the TCP job's marks lapsed 23 s of 60 and the good shim's lease ran out 8 times. No root.
"""

from __future__ import annotations

import json
import subprocess
import sys


def test_one_hostile_shim_costs_the_other_jobs_no_level_and_no_late_report() -> None:
    res = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "shim", "--hostile", "1", "--duration", "12",
                          "--no-baseline", "--json"], capture_output=True, text=True, timeout=180)
    assert res.stdout, res.stderr
    out = json.loads(res.stdout)
    bad = out["phases"]["hostile"]
    assert res.returncode == 0 and out["ok"], out
    assert bad["reports"] >= 10 and bad["late_s"]["max"] <= out["tau_s"], bad
    assert bad["tcp_marks_lapsed_s"] == 0 and bad["rdma_lease_expiries"] == 0, bad
    assert bad["rdma_top_class_share"] == 1.0, bad  # the good QPs kept their class in every sample
    assert bad["apply_longest_s"] < 0.25 * out["tau_s"], bad  # apply never waited for a shim
    # the hostile shim was tried and left alone, longer each time (2 s, 4 s, ...)
    assert bad["shim_backoffs"].get("lease", 0) >= 2 and bad["hostile_left_alone_s"] >= 4, bad
