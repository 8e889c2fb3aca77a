"""On the leaf-spine testbed, the path the app reports for a flow is the path its packets
took, read back from the switches' own per-rule packet counters; ECMP uses both spines."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
import uuid

import pytest

from leveller.controller.paths import SdnPaths
from leveller.core.topology import preset
from leveller.model.flow import flow_key
from leveller.testbed.cluster import Testbed
from leveller.testbed.traffic import host_python
from sdn.client import SdnClient

from .support import wait_listening

pytestmark = pytest.mark.privileged
SINK_PORT = 9000
RULE_RE = re.compile(r"cookie=(0x[0-9a-f]+).*table=1, n_packets=(\d+).*in_port=(\d+).*actions=output:(\d+)")


def counted_hops(tb: Testbed, topo) -> dict[int, set[tuple[str, int, int]]]:
    """cookie -> {(switch, in_port, out_port)} of per-flow rules that forwarded packets."""
    seen: dict[int, set[tuple[str, int, int]]] = {}
    for sw in topo.switches:
        for line in tb.ovs.ofctl(sw.name, "dump-flows", "table=1").splitlines():
            m = RULE_RE.search(line)
            if m and int(m.group(2)) > 0:
                seen.setdefault(int(m.group(1), 16), set()).add((sw.name, int(m.group(3)), int(m.group(4))))
    return seen


def test_reported_paths_match_switch_counters_and_ecmp_spreads(tmp_path):
    topo = preset("leafspine")
    tb = Testbed.up(topo, "l" + uuid.uuid4().hex[:8], tmp_path / "run")
    procs = []
    try:
        tb.start_sdn()
        client = SdnClient.for_run_dir(tb.run_dir)
        deadline = time.monotonic() + 20
        while not all(client.health()["switches"].values()):
            assert time.monotonic() < deadline, client.health()
            time.sleep(0.2)
        for h in topo.hosts:
            procs.append(subprocess.Popen(host_python(tb, h.name, "sink", SINK_PORT), start_new_session=True))
        for h in topo.hosts:
            wait_listening(tb, h.name, SINK_PORT)
        rng = random.Random(4)
        flows: dict[str, list] = {}
        for i in range(20):
            src, dst = rng.sample([h.name for h in topo.hosts], 2)
            flows.setdefault(src, []).append((dst, 20000 + i))
        senders = []
        for src, items in flows.items():
            for dst, sport in items:  # one sender process per flow, all at once
                senders.append(subprocess.Popen(host_python(tb, src, "send", topo.host(dst).ip, SINK_PORT,
                                                            sport, 200_000), start_new_session=True))
        for p in senders:
            assert p.wait(timeout=60) == 0
        # the userspace datapath credits OpenFlow rules with packets in its revalidator
        # rounds (every 500 ms): read the counters once they stopped changing
        counters, previous = counted_hops(tb, topo), None
        while counters != previous:
            time.sleep(1.5)
            previous, counters = counters, counted_hops(tb, topo)
        spines: set[str] = set()
        per_spine: dict[str, int] = {}
        inter_leaf = 0
        for src, items in flows.items():
            for dst, sport in items:
                key = flow_key(topo.host(src).ip, topo.host(dst).ip, sport, SINK_PORT, "tcp")
                reported = client.path(key.src, key.dst, key.sport, key.dport, "tcp")
                assert reported["installed"]
                hops = {(h["switch"], h["in_port"], h["out_port"]) for h in reported["hops"]}
                assert counters.get(key.cookie()) == hops, (src, dst, sport)
                # the ACK direction is a flow of its own, also where the app says
                back = client.path(key.dst, key.src, key.dport, key.sport, "tcp")
                assert counters.get(key.reversed().cookie()) == {
                    (h["switch"], h["in_port"], h["out_port"]) for h in back["hops"]}
                if reported["choices"] == 2:
                    inter_leaf += 1
                    spines |= {h["switch"] for h in reported["hops"] if h["switch"].startswith("spine")}
                    for h in reported["hops"]:
                        if h["switch"].startswith("spine"):
                            per_spine[h["switch"]] = per_spine.get(h["switch"], 0) + 1
        # the controller's batch question (POST /links) answers the links the rules carry
        keys = [flow_key(topo.host(src).ip, topo.host(dst).ip, sport, SINK_PORT, "tcp")
                for src, items in flows.items() for dst, sport in items]
        batch = SdnPaths(client).links(keys)
        assert all(batch[k] == tuple(client.path(*k[:4], "tcp")["links"]) for k in keys)
        print(f"20 flows, {inter_leaf} between leaves, per spine {per_spine}; all paths match counters")
        assert inter_leaf >= 10 and spines == {"spine1", "spine2"}
        # per-host query lists that host's flows (sender or receiver side)
        some = next(iter(flows))
        listed = {(p["flow"]["src"], p["flow"]["sport"]) for p in client.host_paths(some)}
        assert all((topo.host(some).ip, sport) in listed for _, sport in flows[some])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        tb.down()
