"""The arrivals of the churn experiment, drawn from a seed. Pure.

Inter-arrival times are exponential with mean ``mean_arrival_s`` (a Poisson process) over the
first ``duration_s`` seconds; each job draws a model uniformly from the network simulator's catalog
(leveller.sim.network.catalog_data, from real H200 profiles), 2-3 hosts of the leaf-spine on at least
two leaves (its ring all-reduce crosses the spines, where jobs meet), and a length in iterations
uniform in [mean/2, 3 mean/2]. The model's compute and ring all-reduce times on a ``ref_gbps``
network keep their ratio on the emulated links, scaled so that the catalog's median iteration
takes TARGET_S seconds, each job clamped to [MIN_S, MAX_S] (as the tenants experiment scales it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leveller.core.topology import Topology, preset
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.measure import JobLog
from leveller.model.shape import JobShape

# Half the tenants experiment's 25 Mbit/s: up to ten jobs run at once here, and at 25 Mbit/s the one
# ovs-vswitchd thread that forwards all of them fell behind (a job profiled at the top of the order
# measured up to 2.3x its time alone, median 1.15x; at 12.5 Mbit/s 1.00-1.20x, median 1.08x, what
# the queues' floors leave the top)
LINK_MBPS = 12.5
HOSTS_PER_LEAF = 4
REF_GBPS = 100.0
TARGET_S, MIN_S, MAX_S = 0.8, 0.4, 1.2
MIN_HOSTS, MAX_HOSTS = 2, 3
BASE_PORT, PORT_STRIDE = 23000, 10


@dataclass(frozen=True)
class Arrival:
    """One job of the run: when it arrives (seconds after the start), where, what, for how long."""

    name: str
    at: float
    hosts: tuple[str, ...]
    model: str
    compute_s: float
    comm_s: float
    slack_s: float
    iterations: int
    port: int

    @property
    def ideal_s(self) -> float:
        """The model's iteration time alone at the emulated link rate (overlap counted)."""
        return self.compute_s + max(0.0, self.comm_s - self.slack_s)

    def job(self, link_mbps: float = LINK_MBPS) -> LiveJob:
        return LiveJob(self.name, self.hosts, JobShape(self.compute_s, self.comm_s, len(self.hosts), self.slack_s),
                       self.port, pattern="ring", rate_mbps=link_mbps)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "at": round(self.at, 3), "hosts": list(self.hosts), "model": self.model,
                "compute_s": self.compute_s, "comm_s": self.comm_s, "slack_s": self.slack_s,
                "iterations": self.iterations}


def leafspine(levels: int, link_mbps: float = LINK_MBPS) -> Topology:
    """The `leafspine` preset with 4 hosts per leaf (12 hosts, 3 leaves x 2 spines), every link ``link_mbps``."""
    return preset("leafspine", {"hosts_per_leaf": HOSTS_PER_LEAF, "levels": levels, "host_mbps": link_mbps,
                                "fabric_mbps": link_mbps})


def _catalog() -> tuple[Mapping[str, Any], ...]:
    from leveller.sim.network.catalog_data import MODELS

    return MODELS


def _comm(nbytes: float, ranks: int, ref_gbps: float) -> float:
    return 2 * (ranks - 1) / ranks * nbytes * 8 / (ref_gbps * 1e9)


def _real_ideal(m: Mapping[str, Any], ranks: int, ref_gbps: float) -> float:
    return float(m["compute_s"]) + max(0.0, _comm(m["bytes"], ranks, ref_gbps) - min(m["slack_s"], m["compute_s"]))


def scaled(m: Mapping[str, Any], ranks: int, ref_gbps: float = REF_GBPS) -> tuple[float, float, float]:
    """(compute, communication, slack) seconds of catalog model ``m`` over ``ranks`` on the emulated links."""
    median = statistics.median(_real_ideal(x, 2, ref_gbps) for x in _catalog())
    ideal = _real_ideal(m, ranks, ref_gbps)
    scale = min(MAX_S, max(MIN_S, ideal * TARGET_S / median)) / ideal
    compute = float(m["compute_s"])
    return (round(compute * scale, 4), round(_comm(m["bytes"], ranks, ref_gbps) * scale, 4),
            round(min(float(m["slack_s"]), compute) * scale, 4))


def leaves(topo: Topology) -> dict[str, list[str]]:
    """leaf switch -> its hosts."""
    out: dict[str, list[str]] = {}
    for h in topo.hosts:
        out.setdefault(topo.host_link(h.name).b, []).append(h.name)
    return out


def draw(duration_s: float, mean_arrival_s: float, mean_iterations: int, seed: int, topo: Topology,
         ref_gbps: float = REF_GBPS) -> list[Arrival]:
    """The arrivals of one run (see the module doc); the same arguments give the same arrivals."""
    rng = np.random.default_rng(seed)
    models = _catalog()
    by_leaf = leaves(topo)
    out: list[Arrival] = []
    t = float(rng.exponential(mean_arrival_s))
    while (at := max(round(t, 3), 0.001)) < duration_s:  # rounded first: 299.9996 s is no arrival of a 300 s run
        k = len(out)
        n = int(rng.integers(MIN_HOSTS, MAX_HOSTS + 1))
        picked = rng.choice(sorted(by_leaf), size=2, replace=False)  # two leaves at least
        hosts = [str(rng.choice(by_leaf[leaf])) for leaf in picked]
        rest = sorted(h.name for h in topo.hosts if h.name not in hosts)
        hosts += [str(h) for h in rng.choice(rest, size=n - 2, replace=False)]
        rng.shuffle(hosts)
        m = models[int(rng.integers(len(models)))]
        compute, comm, slack = scaled(m, n, ref_gbps)
        lo, hi = max(1, mean_iterations // 2), max(1, (3 * mean_iterations) // 2)
        iterations = int(rng.integers(lo, hi + 1))
        short = str(m["model"]).split("/")[0].replace("_", "")[:12]
        out.append(Arrival(f"c{k:03d}-{short}", at, tuple(hosts), str(m["model"]), compute, comm, slack,
                           iterations, BASE_PORT + PORT_STRIDE * (k % 3000)))
        t += float(rng.exponential(mean_arrival_s))
    return out


def shape_args(arrivals: Sequence[Arrival]) -> list[str]:
    """The controller's --job-shape flags of every job of the run (the operator knows its catalog)."""
    out = []
    for a in arrivals:
        out += ["--job-shape", a.job().shape_arg]
    return out


@dataclass(frozen=True)
class ChurnSettings:
    duration_s: float = 600.0
    mean_arrival_s: float = 20.0
    mean_iterations: int = 60
    seed: int = 0
    levels: int = 4
    tau_s: float = 0.2
    interval_s: float = 0.2
    poll_s: float = 0.02
    lease_s: float = 2.0
    stale_after_s: float = 1.0
    link_mbps: float = LINK_MBPS


@dataclass
class PolicyRecord:
    """What one policy's run left: per job its log, the controller's decisions, the agents' report lines."""

    policy: str
    t_start: float
    t_end: float
    logs: dict[str, JobLog] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    agent_lines: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # job -> why it did not run
    exits: dict[str, float] = field(default_factory=dict)  # job -> when its last worker process had exited
