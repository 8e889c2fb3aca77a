"""What must be equal in every process is computed in two other processes and compared.

The SDN app, the controller and the agents each compute a flow's ECMP path, its OpenFlow cookie
and its label on their own; they agree only if none of it depends on per-process state such as
Python's salted ``hash()``. A comparison inside one process cannot see that, so the values are
computed in subprocesses with different hash seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from leveller.core.paths import choose_path
from leveller.core.topology import preset
from leveller.model.flow import flow_key, stable_hash

FLOWS = [("10.0.0.1", "10.0.0.6", 40000 + i, 5201, "tcp") for i in range(24)] + [
    ("10.0.0.2", "10.0.0.5", 0, 0, "icmp"), ("10.0.0.3", "10.0.0.6", 5353, 53, "udp")]

PROGRAM = """
import json, sys
from leveller.core.paths import choose_path
from leveller.model.flow import flow_key, stable_hash
from leveller.core.topology import preset
topo = preset("leafspine")
out = []
for f in json.loads(sys.argv[1]):
    key = flow_key(*f)
    out.append([stable_hash(key), key.cookie(), key.label(), list(choose_path(topo, key).nodes)])
print(json.dumps(out))
"""


def compute_here() -> list[list[object]]:
    topo = preset("leafspine")
    out = []
    for f in FLOWS:
        key = flow_key(*f)
        out.append([stable_hash(key), key.cookie(), key.label(), list(choose_path(topo, key).nodes)])
    return out


def compute_in_subprocess(seed: str) -> list[list[object]]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    res = subprocess.run([sys.executable, "-c", PROGRAM, json.dumps(FLOWS)], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(res.stdout)


def test_ecmp_path_cookie_and_label_are_the_same_in_every_process() -> None:
    here = compute_here()
    one, two = compute_in_subprocess("1"), compute_in_subprocess("2")
    assert one == here
    assert two == here
    # The comparison has power: the flows spread over both spines and the cookies are distinct.
    assert {tuple(nodes)[2] for _, _, _, nodes in here[:24]} == {"spine1", "spine2"}
    assert len({cookie for _, cookie, _, _ in here}) == len(FLOWS)
    assert all(0 <= cookie < 2**63 for _, cookie, _, _ in here)  # OpenFlow cookies: no flag bit used


SIM = """
import json, sys
from leveller.cli import main
sys.argv = ["leveller", "bench", "network-sim", "--gpus", "1024", "--trace", "contended",
            "--fabric", "nics_per_host=1,gbps=100,oversub=2", "--policy", "crux", "--duration", "600",
            "--json"]
main()
"""


def test_the_network_simulators_crux_run_is_the_same_under_every_hash_seed() -> None:
    # Crux's levels came from a set of job-name pairs: seeds 1 and 2 gave 16,192 and 16,316 events
    # on this case. A sweep's points run in worker processes, each with its own seed.
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run([sys.executable, "-c", SIM], env=env, capture_output=True, text=True,
                             timeout=300, check=True)
        row = json.loads(res.stdout)["1024"]["crux"]
        runs.append((row["events"], row["iterations"], row["min"]))
    assert runs[0] == runs[1]
    assert runs[0][0] > 10_000  # the case has power: thousands of events, many re-rankings
