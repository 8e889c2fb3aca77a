"""The paper's testbed experiments on the emulated cluster: 2-4 tenants on a leaf-spine (Figure 10)
and three jobs on one bottleneck with 2 levels (Figure 9). Pure parts here: the job catalog scaled
to the emulated links, the random placement, the runs plan and the summaries; the runs themselves
go through leveller.experiments (DemoCluster, profile_alone, run_policy).

**Jobs.** The catalog of the network simulator (leveller.sim.network.catalog_data, derived from
real H200 profiles): per model the compute time of one iteration, the bytes of its gradient
all-reduce and the overlap slack. On the reference network (``ref_gbps``, default 100 Gbit/s) a
ring all-reduce over W ranks puts 2(W-1)/W x bytes on every rank's link: the communication time M.
The emulated job keeps the model's C : M (and slack) and runs at the emulated link rate; its
times are the model's times scaled so that the catalog's median iteration lasts ``target_s``
(default 0.8 s), each job then clamped to [``min_s``, ``max_s``] (0.4-1.2 s) so that a run of a
minute holds tens of iterations of every job, also when contention halves its pace. The scale of every job is reported.

**Placement.** Per tenant count and repeat (seeded by ``(seed, tenants, repeat)``): tenant sizes
2-4 hosts (at most the testbed's hosts in total), hosts drawn at random, every tenant on at least
two leaves so that its ring crosses the spines, where tenants meet; ring order random; models
drawn from the catalog. The default leaf-spine is the ``leafspine`` preset with 4 hosts per
leaf: 12 hosts, as the paper's 12 GPUs with one NIC each, on 3 leaves x 2 spines; every link
LINK_MBPS (see there why not 100 Mbit/s).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leveller.core.topology import Topology, preset
from leveller.errors import UserError
from leveller.experiments.shared.jobs import LiveJob
from leveller.model.shape import JobShape

FIG9_POLICIES = ("crux", "cassini", "leveller")
LEAFSPINE_OPTIONS = {"hosts_per_leaf": 4}  # 12 hosts: the paper's 12 GPUs, one NIC each
DUMBBELL_OPTIONS = {"hosts_per_side": 3, "host_mbps": 1000.0}
# Emulated link rate: every packet crosses up to three OVS userspace bridges, all forwarded by one
# ovs-vswitchd thread; at 100 Mbit/s a single 4-rank ring kept it at 100% of a core (its iteration
# 1.8x the model's alone), at 25 Mbit/s the switch keeps up and the links are the bottleneck.
LINK_MBPS = 25.0
MIN_HOSTS, MAX_HOSTS = 2, 4  # hosts (GPUs) per tenant, as in the paper
REF_GBPS = 100.0
TARGET_S, MIN_S, MAX_S = 0.8, 0.4, 1.2
BASE_PORT, PORT_STRIDE = 22000, 10  # below the ephemeral range: a port names its job
FIG9_MODELS = ("bert_large/b8", "vit_b_16/b64", "bert_large/b16")  # ~1 s, 0.5 s, ~1 s: as the paper's 14/27/14
# The paper's numbers (digest, section 5) for the README and the reports
PAPER_FIG9: dict[str, dict[str, Any]] = {"leveller": {"iterations": [14, 27, 14], "min": 0.69},
              "cassini": {"iterations": [13, 26, 15], "min": 0.63},
              "crux": {"iterations": [12, 23, 17], "min": 0.61}}


@dataclass(frozen=True)
class ScaledModel:
    """A catalog model on the emulated cluster: real times on the reference network and emulated ones."""

    model: str
    ranks: int
    real_compute_s: float
    real_comm_s: float
    real_slack_s: float
    scale: float  # emulated seconds per real second

    @property
    def compute_s(self) -> float:
        return self.real_compute_s * self.scale

    @property
    def comm_s(self) -> float:
        return self.real_comm_s * self.scale

    @property
    def slack_s(self) -> float:
        return min(self.real_slack_s, self.real_compute_s) * self.scale

    @property
    def real_ideal_s(self) -> float:
        return self.real_compute_s + max(0.0, self.real_comm_s - min(self.real_slack_s, self.real_compute_s))

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "ranks": self.ranks, "scale": round(self.scale, 4),
                "real": {"compute_s": round(self.real_compute_s, 5), "comm_s": round(self.real_comm_s, 5),
                         "slack_s": round(self.real_slack_s, 5)},
                "emulated": {"compute_s": round(self.compute_s, 4), "comm_s": round(self.comm_s, 4),
                             "slack_s": round(self.slack_s, 4)},
                "compute_to_comm": round(self.real_compute_s / self.real_comm_s, 3)}


def catalog() -> tuple[dict[str, Any], ...]:
    """The model catalog (the network simulator's, derived from the H200 profiles)."""
    from leveller.sim.network.catalog_data import MODELS

    return MODELS


def comm_time(nbytes: float, ranks: int, ref_gbps: float) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` over ``ranks`` at ``ref_gbps`` per rank."""
    return 2 * (ranks - 1) / ranks * nbytes * 8 / (ref_gbps * 1e9)


def time_scale(ref_gbps: float = REF_GBPS, target_s: float = TARGET_S) -> float:
    """Emulated seconds per real second that put the catalog's median iteration (2 ranks) at ``target_s``."""
    ideals = []
    for m in catalog():
        comm = comm_time(m["bytes"], 2, ref_gbps)
        ideals.append(m["compute_s"] + max(0.0, comm - min(m["slack_s"], m["compute_s"])))
    return target_s / statistics.median(ideals)


def scale_model(entry: Mapping[str, Any], ranks: int, ref_gbps: float = REF_GBPS, target_s: float = TARGET_S,
                min_s: float = MIN_S, max_s: float = MAX_S) -> ScaledModel:
    """``entry`` of the catalog as a job of ``ranks`` workers on the emulated cluster (see the module doc)."""
    base = ScaledModel(entry["model"], ranks, float(entry["compute_s"]), comm_time(entry["bytes"], ranks, ref_gbps),
                       float(entry["slack_s"]), 1.0)
    ideal = base.real_ideal_s
    scaled = min(max_s, max(min_s, ideal * time_scale(ref_gbps, target_s)))
    return ScaledModel(base.model, ranks, base.real_compute_s, base.real_comm_s, base.real_slack_s, scaled / ideal)


def model_by_name(name: str) -> Mapping[str, Any]:
    for m in catalog():
        if m["model"] == name:
            return m
    raise UserError(f"model {name!r} is not in the catalog; known: {', '.join(m['model'] for m in catalog())}")


# ---- topologies and placement -----------------------------------------------------------------

def leafspine(levels: int, link_mbps: float = LINK_MBPS) -> Topology:
    """3 leaves x 2 spines, 4 hosts per leaf, every link ``link_mbps``, ``levels`` priority queues."""
    return preset("leafspine", {**LEAFSPINE_OPTIONS, "levels": levels, "host_mbps": link_mbps,
                                "fabric_mbps": link_mbps})


def dumbbell(link_mbps: float = LINK_MBPS) -> Topology:
    """3 hosts per side, one ``link_mbps`` bottleneck between the switches, 2 priority levels."""
    return preset("dumbbell", {**DUMBBELL_OPTIONS, "bottleneck_mbps": link_mbps, "levels": 2})


def host_leaves(topo: Topology) -> dict[str, str]:
    """host -> the switch it hangs on."""
    return {h.name: topo.host_link(h.name).b for h in topo.hosts}


def max_tenants(topo: Topology) -> int:
    """How many tenants of at least MIN_HOSTS hosts the testbed can place."""
    return len(topo.hosts) // MIN_HOSTS


def check_tenants(counts: Sequence[int], topo: Topology) -> None:
    """Refuse tenant counts the testbed cannot place (names the flag and the limit)."""
    most = max_tenants(topo)
    for n in counts:
        if not 1 <= n <= most:
            raise UserError(f"--tenants {n}: the testbed has {len(topo.hosts)} hosts and a tenant needs at least "
                            f"{MIN_HOSTS}: allowed is 1..{most}")


def place(n: int, topo: Topology, rng: np.random.Generator, attempts: int = 1000) -> list[tuple[str, ...]]:
    """Hosts of ``n`` tenants (rank order): sizes MIN_HOSTS..MAX_HOSTS fitting the testbed (drawn in
    turn, each uniform in what leaves room for the rest), hosts at random with every tenant on at
    least two leaves (its ring crosses the spines)."""
    hosts = sorted(h.name for h in topo.hosts)
    leaves = host_leaves(topo)
    if n * MIN_HOSTS > len(hosts):
        raise UserError(f"{n} tenants of at least {MIN_HOSTS} hosts do not fit on {len(hosts)} hosts")
    sizes, free = [], len(hosts)
    for i in range(n):  # each size uniform in what still leaves MIN_HOSTS for every later tenant
        most = min(MAX_HOSTS, free - MIN_HOSTS * (n - i - 1))
        sizes.append(int(rng.integers(MIN_HOSTS, most + 1)))
        free -= sizes[-1]
    for _ in range(attempts):
        order = [hosts[i] for i in rng.permutation(len(hosts))]
        groups, at = [], 0
        for size in sizes:
            groups.append(tuple(order[at:at + size]))
            at += size
        if all(len({leaves[h] for h in g}) >= 2 for g in groups) or len(set(leaves.values())) < 2:
            return groups
    raise UserError(f"no placement of {n} tenants on {len(hosts)} hosts with every tenant on two leaves "
                    f"found in {attempts} draws")


@dataclass(frozen=True)
class Tenant:
    name: str
    model: ScaledModel
    hosts: tuple[str, ...]
    port: int

    def job(self, link_mbps: float) -> LiveJob:
        m = self.model
        shape = JobShape(round(m.compute_s, 4), round(m.comm_s, 4), len(self.hosts), round(m.slack_s, 4))
        return LiveJob(self.name, self.hosts, shape, self.port, pattern="ring", rate_mbps=link_mbps)

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), **self.model.to_dict()}


def draw_tenants(n: int, topo: Topology, seed: int, repeat: int, ref_gbps: float = REF_GBPS) -> list[Tenant]:
    """The tenants of one repeat: placement and models drawn from ``(seed, n, repeat)``."""
    rng = np.random.default_rng([seed, n, repeat])
    groups = place(n, topo, rng)
    models = catalog()
    out = []
    for i, hosts in enumerate(groups):
        entry = models[int(rng.integers(len(models)))]
        out.append(Tenant(f"t{i + 1}", scale_model(entry, len(hosts), ref_gbps), hosts, BASE_PORT + PORT_STRIDE * i))
    return out


def fig9_tenants(ref_gbps: float = REF_GBPS) -> list[Tenant]:
    """Three 2-host jobs, each from a left host to a right host of the dumbbell: one bottleneck."""
    topo = dumbbell()
    left = [h.name for h in topo.hosts if topo.host_link(h.name).b == "s1"]
    right = [h.name for h in topo.hosts if topo.host_link(h.name).b == "s2"]
    return [Tenant(f"j{i + 1}", scale_model(model_by_name(name), 2, ref_gbps), (left[i], right[i]),
                   BASE_PORT + PORT_STRIDE * i) for i, name in enumerate(FIG9_MODELS)]


# ---- summaries --------------------------------------------------------------------------------

@dataclass
class PolicyRun:
    """One policy run of one repeat: R per job, iterations in the common window."""

    policy: str
    rates: dict[str, float]
    iterations: dict[str, int]
    window_s: float
    switches: int = 0  # re-rankings that changed the controller's first job
    plans: int = 0  # CASSINI plans the controller made (policy cassini)
    tcp: dict[str, int] = field(default_factory=dict)  # retransmissions and timeouts (shared.tcpstats)
    model: dict[str, float] = field(default_factory=dict)  # R per job in the fluid model (tenants.model)
    link_busy: dict[str, float] = field(default_factory=dict)  # share of each fabric direction's rate used

    @property
    def model_min(self) -> float | None:
        return min(self.model.values()) if self.model else None

    @property
    def min(self) -> float:
        return min(self.rates.values())

    @property
    def avg(self) -> float:
        return sum(self.rates.values()) / len(self.rates)


@dataclass
class Repeat:
    tenants: int
    repeat: int
    jobs: list[Tenant]
    ideal: dict[str, float] = field(default_factory=dict)
    runs: list[PolicyRun] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the repeat (cluster up to down)


def contract(repeats: Sequence[Repeat]) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """``{"<tenants>": {"<policy>": {"min": [R per repeat], "avg": [R per repeat], "top_job_changes": [...],
    "retrans_segs": [...], "timeouts": [...], "model": [{job: R} per repeat], "model_min": [...]}}}``
    (docs/api.md)."""
    out: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for rep in sorted(repeats, key=lambda r: (r.tenants, r.repeat)):
        for run in rep.runs:
            entry = out.setdefault(str(rep.tenants), {}).setdefault(run.policy, {
                "min": [], "avg": [], "top_job_changes": [], "retrans_segs": [], "timeouts": [], "model": [],
                "model_min": []})
            entry["min"].append(round(run.min, 4))
            entry["avg"].append(round(run.avg, 4))
            entry["top_job_changes"].append(run.switches)
            entry["retrans_segs"].append(run.tcp.get("retrans_segs"))
            entry["timeouts"].append(run.tcp.get("timeouts"))
            entry["model"].append({k: round(v, 4) for k, v in run.model.items()})
            entry["model_min"].append(None if run.model_min is None else round(run.model_min, 4))
    return out


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def comparisons(doc: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]]) -> dict[str, dict[str, float]]:
    """Per tenant count: LEVELLER's mean min R and mean avg R relative to Crux's and CASSINI's."""
    out: dict[str, dict[str, float]] = {}
    for n, pols in doc.items():
        if "leveller" not in pols:
            continue
        lev_min, lev_avg = mean_sd(pols["leveller"]["min"])[0], mean_sd(pols["leveller"]["avg"])[0]
        row = {}
        for other in ("crux", "cassini", "fair"):
            if other in pols:
                o_min, o_avg = mean_sd(pols[other]["min"])[0], mean_sd(pols[other]["avg"])[0]
                row[f"min_vs_{other}"] = round(lev_min / o_min - 1, 4) if o_min > 0 else float("inf")
                row[f"avg_vs_{other}"] = round(lev_avg / o_avg - 1, 4) if o_avg > 0 else float("inf")
        out[n] = row
    return out
