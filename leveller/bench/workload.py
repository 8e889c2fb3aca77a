"""A generated 1,024-GPU training cluster: rail-style leaf-spine, scattered jobs, their flows.

128 hosts x 8 NICs (one NIC per GPU, NIC r on rail r), 16 leaves (2 per
rail, each serving NIC r of 64 hosts), 8 spines linked to every leaf. 37
jobs of at least 2 hosts each are placed on scattered hosts (a seeded
shuffle). Every job runs ring all-reduce on every rail (host i -> host i+1,
``channels`` UDP/RoCE flows per ring edge and rail); every other job also
runs all-to-all (one flow per ordered host pair and rail, MoE style). The
channel count is chosen so the cluster has at least the asked number of
flows, and exactly that many are kept, spread evenly over the list.
Deterministic for a seed. Paths are the topology's ECMP choice
(leveller.core.paths.Router), i.e. what the controller's topology provider
and the SDN app compute.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from leveller.core.paths import Router
from leveller.core.topology import Topology, topology_from_dict
from leveller.model.flow import FlowKey

HOSTS, RAILS, LEAVES, SPINES, JOBS = 128, 8, 16, 8, 37
ROCE_PORT = 4791
RING_SPORT, A2A_SPORT = 10000, 50000  # source port = base + channel (distinct flows per NIC pair)
MAX_FLOWS = 2_000_000


@dataclass(frozen=True)
class Workload:
    topology: Topology
    flows: list[tuple[FlowKey, str]]  # (flow, job), in generation order
    hosts: dict[str, list[int]]  # job -> host numbers, in ring order
    rates: dict[str, float]  # job -> progress rate R (deterministic, ties possible)

    def by_host(self) -> dict[str, list[tuple[FlowKey, str]]]:
        """Flows grouped by the host whose NIC sends them (what that host's agent reports)."""
        owner = {h.ip: h.name.split("n")[0] for h in self.topology.hosts}
        out: dict[str, list[tuple[FlowKey, str]]] = {}
        for key, job in self.flows:
            out.setdefault(owner[key.src], []).append((key, job))
        return out


def nic(host: int, rail: int) -> str:
    return f"h{host}n{rail}"


def rail_topology(hosts: int = HOSTS, rails: int = RAILS, leaves: int = LEAVES, spines: int = SPINES) -> Topology:
    """The rail-style leaf-spine: NIC r of host h on leaf ``r * leaves/rails + h // (hosts*rails/leaves)``."""
    per_rail = leaves // rails
    switches = [{"name": f"leaf{i + 1}", "dpid": 0x100 + i + 1} for i in range(leaves)]
    switches += [{"name": f"spine{i + 1}", "dpid": 0x200 + i + 1} for i in range(spines)]
    links = [{"a": f"leaf{i + 1}", "b": f"spine{s + 1}", "rate_mbps": 100_000}
             for i in range(leaves) for s in range(spines)]
    nics = []
    for h in range(hosts):
        for r in range(rails):
            nics.append({"name": nic(h, r)})
            leaf = r * per_rail + h * per_rail // hosts
            links.append({"a": nic(h, r), "b": f"leaf{leaf + 1}", "rate_mbps": 100_000})
    return topology_from_dict({"switches": switches, "hosts": nics, "links": links, "levels": 8,
                               "subnet": "10.0.0.0/20"})


def _job_sizes(rng: random.Random, hosts: int, jobs: int) -> list[int]:
    sizes = [2] * jobs
    for _ in range(hosts - 2 * jobs):
        sizes[rng.randrange(jobs)] += 1
    return sizes


def generate(flows: int, seed: int = 1, topology: Topology | None = None) -> Workload:
    """The cluster's flows, exactly ``flows`` of them (see the module doc)."""
    if isinstance(flows, bool) or not isinstance(flows, int) or not 1 <= flows <= MAX_FLOWS:
        raise ValueError(f"flows={flows!r}: allowed is an integer in 1..{MAX_FLOWS}")
    topo = topology or rail_topology()
    rng = random.Random(seed)
    order = list(range(HOSTS))
    rng.shuffle(order)
    hosts: dict[str, list[int]] = {}
    at = 0
    for j, size in enumerate(_job_sizes(rng, HOSTS, JOBS)):
        hosts[f"job{j + 1:02d}"] = order[at:at + size]
        at += size
    # R in [0.30, 1.00] on a 0.01 grid: 37 jobs on 71 values, so some tie (the order then decides)
    rates = {job: rng.randrange(30, 101) / 100 for job in hosts}
    ip = {h.name: h.ip for h in topo.hosts}
    a2a_jobs = [job for j, job in enumerate(hosts) if j % 2 == 1]
    a2a = sum(len(hosts[job]) * (len(hosts[job]) - 1) for job in a2a_jobs) * RAILS
    ring_per_channel = sum(len(h) for h in hosts.values()) * RAILS
    channels = max(1, math.ceil((flows - a2a) / ring_per_channel))
    if channels > A2A_SPORT - RING_SPORT:
        raise ValueError(f"flows={flows}: needs {channels} ring channels, at most {A2A_SPORT - RING_SPORT}")
    out: list[tuple[FlowKey, str]] = []
    for job, members in hosts.items():
        for r in range(RAILS):
            for i, a in enumerate(members):
                b = members[(i + 1) % len(members)]
                src, dst = ip[nic(a, r)], ip[nic(b, r)]
                out += [(FlowKey(src, dst, RING_SPORT + c, ROCE_PORT, 17), job) for c in range(channels)]
            if job in a2a_jobs:
                out += [(FlowKey(ip[nic(a, r)], ip[nic(b, r)], A2A_SPORT, ROCE_PORT, 17), job)
                        for a in members for b in members if a != b]
    keep = np.linspace(0, len(out) - 1, flows).round().astype(np.int64) if flows > 1 else np.zeros(1, np.int64)
    return Workload(topo, [out[i] for i in keep.tolist()], hosts, rates)


def levels_input(workload: Workload) -> dict[str, Any]:
    """The workload as a `leveller levels --input` FILE (paths from the topology's ECMP choice)."""
    router = Router(workload.topology)
    flows = {}
    for key, job in workload.flows:
        links = router.links(key) or ("?unknown-path",)  # never: both ends are NICs of the topology
        flows[key.label()] = {"job": job, "links": list(links)}
    return {"jobs": {job: {"rate": rate} for job, rate in workload.rates.items()}, "flows": flows}


def write_levels_input(path: str, flows: int, seed: int) -> None:
    """Write the generated cluster of ``flows`` flows as a `leveller levels --input` FILE (OSError as is)."""
    import json

    with open(path, "w") as f:
        json.dump(levels_input(generate(flows, seed)), f)
