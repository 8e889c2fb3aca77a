"""Networks, derived data tables and traces of the network simulator."""

import math

import pytest

from leveller.errors import UserError
from leveller.model.job import JobSpec
from leveller.sim.network import catalog, lingjun
from leveller.sim.network.catalog_data import MODELS
from leveller.sim.network.runjob import ring_flows
from leveller.sim.network.topology import load_network
from leveller.sim.network.trace import make_placer, synthetic


def test_fabric_is_rail_style() -> None:
    net = load_network("fabric:gpus=64,gpus_per_host=4,hosts_per_leaf=2,spines=3,gbps=100")
    assert len(net.nics) == 16 and net.total_gpus == 64
    assert net.nics["h5"] == ("h5r0", "h5r1", "h5r2", "h5r3")
    # 8 groups x 4 rails = 32 leaves; NIC links + leaf-spine links, both directions
    assert len(net.links) == 2 * (64 + 32 * 3)
    assert net.capacity[net.index["h5r2>l2r2"]] == pytest.approx(100e9 / 8)
    # same group, same rail: through the leaf only; other group: one path per spine
    assert net.candidates("h4r1", "h5r1") == [(net.index["h4r1>l2r1"], net.index["l2r1>h5r1"])]
    assert len(net.candidates("h0r1", "h5r1")) == 3


def test_fabric_ring_stripes_over_rails() -> None:
    net = load_network("fabric:gpus=32,gpus_per_host=4,hosts_per_leaf=2,spines=2,gbps=100")
    spec = JobSpec("j", ("h0", "h3", "h6"), 1.0, 3e9, size=3)
    flows = ring_flows(spec, spec.hosts, net)
    assert len(flows) == 3 * 4
    assert {(f.src, f.dst) for f in flows if f.src.startswith("h3")} == {(f"h3r{r}", f"h6r{r}") for r in range(4)}
    assert all(f.volume == pytest.approx(2 * 2 / 3 * 3e9 / 4) for f in flows)


@pytest.mark.parametrize("spec,message", [
    ("fabric:gpus=100", "multiple of gpus_per_host"),
    ("fabric:gpus=64,hosts_per_leaf=3", "multiple of hosts_per_leaf"),
    ("fabric:gbps=fast", "not a number"),
    ("fabric:racks=2", "unknown option"),
    ("dumbbell:hosts_per_side=0", "must be > 0"),
    ("torus", "not a preset"),
])
def test_bad_topologies_are_named(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_network(spec)


def test_lingjun_preset_is_the_committed_table() -> None:
    net = load_network("lingjun")
    assert len(net.nics) == 847 and net.total_gpus == 847 * 8
    assert len([s for s in net.topo.switches if s.name.startswith("t")]) == 119
    # a tree: one path between any two hosts, host -> ToR -> PSW -> DSW -> PSW -> ToR -> host
    path, = net.candidates("h0", "h846")
    assert len(path) == 6
    assert net.capacity[net.index["h0>tp8s1"]] == pytest.approx(200e9 / 8)
    assert net.capacity[net.index["tp8s1>p8"]] == pytest.approx(8 * 200e9 / 8 / 2)  # 8 hosts, 2:1
    assert "host 200 Gbit/s" in net.note


CSV = """ip,DSW,PSW,ASW
aa,G1,P2,S1
bb,G1,P2,S1
cc,G1,P10,S1
dd,G1,P2,S3
ee,G1,P10,S1
"""


def test_lingjun_csv_keys_tors_by_psw_and_asw() -> None:
    dsw, tors = lingjun.parse_topo_csv(CSV)
    assert dsw == "G1"
    assert tors == [("P2", "S1", 2), ("P2", "S3", 1), ("P10", "S1", 2)]
    namespace: dict = {}
    exec(lingjun.render_table(dsw, tors), namespace)
    assert namespace["DSW"] == "G1" and list(namespace["TORS"]) == tors


@pytest.mark.parametrize("text,message", [
    ("ip,DSW,PSW\naa,G1,P1\n", "header"),
    (CSV + "ff,G2,P2,S1\n", "one DSW"),
    (CSV + "aa,G1,P2,S1\n", "appears twice"),
    (CSV + "ff,G1,,S1\n", "not a switch name"),
])
def test_lingjun_csv_errors(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        lingjun.parse_topo_csv(text)


def test_catalog_slack_from_the_grad_ready_curve() -> None:
    curve = [[0.2, 0.1], [0.6, 0.5], [1.0, 1.0]]
    assert catalog.ready_fraction(curve, 0.5) == pytest.approx(0.6)
    assert catalog.ready_fraction(curve, 0.3) == pytest.approx(0.4)
    entry = catalog.derive_entry({"model": "m", "batch": 2, "iter_s_median": 0.3, "grad_bytes": 40,
                                  "grad_ready_curve": curve})
    # backward = 2/3 x 0.3 = 0.2 s; half the bytes ready at 60% of it: 0.08 s of slack
    assert entry == {"model": "m/b2", "compute_s": 0.3, "bytes": 40, "slack_s": pytest.approx(0.08)}


def test_committed_catalog_is_sane() -> None:
    assert len(MODELS) >= 5
    for m in MODELS:
        assert 0 < m["slack_s"] < m["compute_s"] < 1 and m["bytes"] > 1e7


def test_synthetic_trace_is_seeded_and_meets_the_load() -> None:
    net = load_network("fabric:gpus=256")
    a, _ = synthetic("synthetic:jobs=400,seed=3,load=0.5", net)
    b, _ = synthetic("synthetic:jobs=400,seed=3,load=0.5", net)
    c, _ = synthetic("synthetic:jobs=400,seed=4,load=0.5", net)
    assert a == b and a != c
    assert all(j.size in (1, 2, 4, 8, 16) and j.hosts is None for j in a)
    asked = sum(j.size * net.gpus_per_host * j.iterations * j.compute for j in a)
    span = a[-1].arrival
    assert asked / span / net.total_gpus == pytest.approx(0.5, rel=0.2)
    assert all(math.ceil(120 / j.compute) <= j.iterations <= math.ceil(1200 / j.compute) for j in a)


@pytest.mark.parametrize("spec,message", [
    ("synthetic:max_hosts=64", "cannot place a job"),
    ("synthetic:placement=diagonal", "placement"),
    ("synthetic:load=-1", "invalid"),
    ("synthetic:jobs=0", "invalid"),
    ("synthetic:min_hosts=8,max_hosts=2", "above max_hosts"),
    ("synthetic:colour=red", "unknown option"),
])
def test_synthetic_trace_errors(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        synthetic(spec, load_network("fabric:gpus=256"))


def test_placers() -> None:
    order = [f"h{i}" for i in range(8)]
    contiguous = make_placer("contiguous", order, 1)
    assert contiguous(["h0", "h2", "h3", "h4", "h7"], 3) == ("h2", "h3", "h4")
    assert contiguous(["h0", "h2", "h5"], 2) == ("h0", "h2")  # no run: lowest-numbered
    assert contiguous(["h0"], 2) is None
    scattered = make_placer("scattered", order, 1)
    picks = [scattered(order, 3) for _ in range(5)]
    assert all(len(set(p)) == 3 and set(p) <= set(order) for p in picks)
    assert len(set(picks)) > 1


def test_ecmp_is_the_sdn_apps_choice() -> None:
    from leveller.core.paths import choose_path
    from leveller.model.flow import flow_key

    net = load_network("leafspine:leaves=3,spines=4")
    for sport in range(40):
        key = flow_key(net.ip("h1"), net.ip("h5"), 40000 + sport, 29500)
        expected = choose_path(net.topo, key).links
        assert tuple(net.links[lk] for lk in net.ecmp("h1", "h5", key)) == expected
    assert len(net.candidates("h1", "h5")) == 4
