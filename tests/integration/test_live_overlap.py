"""The overlap rule on the live system. Job A computes 0.8 s per iteration and starts its 0.3 s of
communication at once (slack 0.8 s: it can wait 0.5 s without stalling); job B computes 0.5 s and
then communicates 0.5 s. Crux gives A the top level for good (GPU intensity 2.7 vs 1). With the
agents' overlap rule A announces every communication phase in its log and its flows drop to the
lowest level for the 0.5 s they can wait: A keeps its R, B gains. Measured on the demo's star
(h1, h2 -> h4) with three strict-priority levels (A on 2, B on 1, A's windows on 0): real eBPF
marks, real strict-priority queues on OVS, real TCP.

Why three: with the demo's two levels B is itself on the lowest level, and A's demoted flows share
it with B's instead of yielding. B then gains only what A's traffic moved into B's compute: a fluid
model of these shapes gives B 0.805 without the rule and 0.812 with it, and live runs measured
0.66-0.81 without against 0.81 with (under two CPU burners 0.61 against 0.61-0.71), so no margin
told the rule from luck. On three levels the same model gives 0.805 -> 0.916, and live runs
measured B 0.71 -> 0.91 (quiet) and 0.61 -> 0.81 (two burners), A 0.97 -> 0.89-0.94: A's window is
exactly the time it can wait, and the agent's reaction time comes out of A's compute."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from leveller.core.topology import topology_from_dict
from leveller.demo.cluster import DemoCluster
from leveller.demo.live import LiveSettings, run_policy
from leveller.demo.scenario import LiveJob, topology_dict

pytestmark = pytest.mark.privileged

A = LiveJob("ja", ("h4", "h1"), 0.8, 0.3, 21000, slack_s=0.8)
B = LiveJob("jb", ("h4", "h2"), 0.5, 0.5, 21010)
IDEAL = {"ja": 0.8, "jb": 1.0}
LEVELS = 3


def dscp_samples(agent_jsonl: Path, port: int) -> list[int]:
    """The DSCP the agent had written for A's flows at every report."""
    out = []
    for line in agent_jsonl.read_text().splitlines():
        rec = json.loads(line)
        out += [v for k, v in rec.get("marks", {}).items() if f":{port}" in k]
    return out


def test_a_job_with_slack_yields_in_its_window_keeps_its_rate_and_the_other_job_gains(tmp_path: Path) -> None:
    from pyroute2 import netns

    name = "ov" + uuid.uuid4().hex[:8]
    runs = {}
    star = topology_from_dict({**topology_dict(), "levels": LEVELS})
    with DemoCluster(name, tmp_path / "run", topology=star) as cluster:
        for overlap in (False, True):
            tag = "overlap" if overlap else "plain"
            out = run_policy(cluster, tag, "crux", [A, B], IDEAL,
                             LiveSettings(seconds=20.0, interval_s=0.05, overlap=overlap, levels=LEVELS))
            runs[tag] = (out.rates, dscp_samples(cluster.work_dir / tag / "agent-h1.jsonl", A.port))
    (plain, plain_marks), (ovl, ovl_marks) = runs["plain"], runs["overlap"]
    top = max(plain_marks)
    print(f"R plain {plain}, with the overlap rule {ovl}; A's DSCP samples: plain "
          f"{ {d: plain_marks.count(d) for d in set(plain_marks)} }, "
          f"overlap { {d: ovl_marks.count(d) for d in set(ovl_marks)} }")
    # crux keeps A on top all the time; with the rule A sits on the lowest level for its windows
    # (0.5 s of every 0.8 s iteration, ~60% of the samples)
    assert top > 0 and set(plain_marks) == {top}
    demoted = ovl_marks.count(0) / len(ovl_marks)
    assert set(ovl_marks) == {0, top} and 0.35 <= demoted <= 0.85
    # A's communication still ends (nearly) within its compute: A's window is exactly the time it
    # can wait, so the agent's reaction time and TCP's ramp come out of A's compute (A lost 0.038-0.041
    # in three runs whose figures I kept, once 0.087). B gains what A yields (+0.15 to +0.25 measured,
    # quiet and under two burners), and the minimum R, what LEVELLER levels, rises.
    assert ovl["ja"] >= plain["ja"] - 0.15 and ovl["ja"] >= 0.80
    assert ovl["jb"] >= plain["jb"] + 0.08
    assert min(ovl.values()) >= min(plain.values()) + 0.05
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
