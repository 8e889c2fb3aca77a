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
exactly the time it can wait, and the agent's reaction time comes out of A's compute.

What is asserted, and why so: the mechanism is measured where it acts, at the switch (the bytes each
strict-priority queue of the port to h4 sent, per run), and the effect on R with margins taken from
30 s runs. R from two separate runs is noisy: B's TCP connection, starved while A sends on top,
recovers a little differently from run to run (20 s runs: B without the rule 0.61-0.71 here, once
0.805 in CI, where B with the rule then gained only 0.054); 30 s runs measured B 0.605-0.607 -> 0.776-0.808
quiet. A rule that does nothing on the wire fails the queue check whatever R does."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from leveller.core.topology import topology_from_dict
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.policy_run import LiveSettings, run_policy
from leveller.experiments.shared.star import RECEIVER, topology_dict
from leveller.model.shape import JobShape
from leveller.testbed.cluster import port_name
from sdn.client import SdnClient

pytestmark = pytest.mark.privileged

A = LiveJob("ja", ("h4", "h1"), JobShape(0.8, 0.3, slack=0.8), 21000)
B = LiveJob("jb", ("h4", "h2"), JobShape(0.5, 0.5), 21010)
IDEAL = {"ja": 0.8, "jb": 1.0}
LEVELS = 3
SECONDS = 30.0


def dscp_samples(agent_jsonl: Path, port: int) -> list[int]:
    """The DSCP the agent had written for A's flows at every report."""
    out = []
    for line in agent_jsonl.read_text().splitlines():
        rec = json.loads(line)
        out += [v for k, v in rec.get("marks", {}).items() if f":{port}" in k]
    return out


def level_bytes(client: SdnClient, port: str) -> dict[int, int]:
    """Bytes each level's queue of switch port ``port`` has sent so far."""
    return {q["level"]: q["tx_bytes"] for q in client.queues() if q["port_name"] == port and q["level"] is not None}


def classifiers(cluster: DemoCluster) -> dict[str, int]:
    """Switch port -> DSCP classifier rules under its HTB now (read from the kernel, not the app)."""
    import subprocess

    out = {}
    for port, _, _ in cluster.topology.switch_ports("s1"):
        name = port_name("s1", port)
        rules = subprocess.run(["ip", "netns", "exec", cluster.testbed.state.switch_netns, "tc", "filter", "show",
                                "dev", name, "parent", "1:"], capture_output=True, text=True).stdout
        out[name] = rules.count("flowid")
    return out


def test_a_job_with_slack_yields_in_its_window_keeps_its_rate_and_the_other_job_gains(tmp_path: Path) -> None:
    from pyroute2 import netns

    name = "ov" + uuid.uuid4().hex[:8]
    runs = {}
    star = topology_from_dict({**topology_dict(), "levels": LEVELS})
    with DemoCluster(name, tmp_path / "run", topology=star) as cluster:
        # the cluster is ready only once every port prioritises (an unready port made the first run fair)
        assert set(classifiers(cluster).values()) == {2 * LEVELS + 2}, classifiers(cluster)  # + TCP's control
        sdn = SdnClient.for_run_dir(cluster.run_dir)
        link = star.host_link(RECEIVER)
        bottleneck = port_name(link.b, link.b_port)
        for overlap in (False, True):
            tag = "overlap" if overlap else "plain"
            before = level_bytes(sdn, bottleneck)
            out = run_policy(cluster, tag, "crux", [A, B], IDEAL,
                             LiveSettings(seconds=SECONDS, interval_s=0.05, overlap=overlap, levels=LEVELS))
            after = level_bytes(sdn, bottleneck)
            sent = {lv: after[lv] - before.get(lv, 0) for lv in after}
            runs[tag] = (out.rates, dscp_samples(cluster.work_dir / tag / "agent-h1.jsonl", A.port), sent)
    (plain, plain_marks, plain_sent), (ovl, ovl_marks, ovl_sent) = runs["plain"], runs["overlap"]
    top = max(plain_marks)
    print(f"R plain {plain}, with the overlap rule {ovl}; A's DSCP samples: plain "
          f"{ {d: plain_marks.count(d) for d in set(plain_marks)} }, "
          f"overlap { {d: ovl_marks.count(d) for d in set(ovl_marks)} }; bytes per level to {RECEIVER}: "
          f"plain {plain_sent}, overlap {ovl_sent}")
    # crux keeps A on top all the time; with the rule A sits on the lowest level for its windows
    # (0.5 s of every 0.8 s iteration, ~60% of the samples)
    assert top > 0 and set(plain_marks) == {top}
    demoted = ovl_marks.count(0) / len(ovl_marks)
    assert set(ovl_marks) == {0, top} and 0.35 <= demoted <= 0.85
    # at the switch: without the rule the lowest queue is idle (A on 2, B on 1: measured 0-0.5% of the
    # port's bytes); with it, A sends part of its bytes on the lowest queue (measured 54-72% of A's)
    top_level = LEVELS - 1
    assert plain_sent[0] < 0.03 * sum(plain_sent.values()) and plain_sent[top_level] > 0
    assert ovl_sent[0] >= 0.35 * (ovl_sent[0] + ovl_sent[top_level])
    # A's communication still ends (nearly) within its compute: A's window is exactly the time it
    # can wait, so the agent's reaction time and TCP's ramp come out of A's compute (A lost 0.03-0.08
    # in 30 s runs). B gains what A yields: with the rule B measured 0.776-0.814 in every run (quiet, two
    # burners, hosts stealing an eighth to a third of the CPU), without it 0.605-0.71 mostly but 0.746,
    # 0.778 and 0.805 in single runs, so a fixed gain over the run without the rule (once +0.04) failed
    # by chance twice on stolen hosts (+0.037, +0.036). Asserted: B reaches what the rule gives and never
    # less than without it, and so does the minimum R, what LEVELLER levels; a rule that does nothing on the
    # wire fails the queue check above whatever R does.
    assert ovl["ja"] >= plain["ja"] - 0.15 and ovl["ja"] >= 0.80
    assert ovl["jb"] >= 0.72 and ovl["jb"] >= plain["jb"]
    assert min(ovl.values()) >= 0.72 and min(ovl.values()) >= min(plain.values())
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
