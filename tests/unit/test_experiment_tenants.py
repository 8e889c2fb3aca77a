"""The tenants experiment's pure parts: the catalog scaled to the emulated links, seeded placements
on the leaf-spine, the JSON contract, and the CLI's refusals before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.errors import UserError
from leveller.experiments.tenants.plan import (
    MAX_HOSTS,
    MAX_S,
    MIN_HOSTS,
    MIN_S,
    PolicyRun,
    Repeat,
    catalog,
    check_tenants,
    comm_time,
    comparisons,
    contract,
    draw_tenants,
    fig9_tenants,
    host_leaves,
    leafspine,
    place,
    scale_model,
)

TOPO = leafspine(4)


def test_catalog_jobs_keep_their_compute_to_communication_ratio_and_land_in_the_iteration_band() -> None:
    for entry in catalog():
        for ranks in (2, 3, 4):
            m = scale_model(entry, ranks)
            real_m = 2 * (ranks - 1) / ranks * entry["bytes"] * 8 / 100e9
            assert m.real_comm_s == pytest.approx(real_m)
            assert m.compute_s / m.comm_s == pytest.approx(entry["compute_s"] / real_m)  # ratio kept
            ideal = m.compute_s + max(0.0, m.comm_s - m.slack_s)
            assert MIN_S - 1e-9 <= ideal <= MAX_S + 1e-9
    # the gradient all-reduce over 4 ranks moves 1.5x the bytes per rank of 2 ranks
    assert comm_time(1e9, 4, 100) == pytest.approx(1.5 * comm_time(1e9, 2, 100))


@settings(max_examples=40)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_placements_fit_the_testbed_and_cross_the_spines(n: int, seed: int) -> None:
    groups = place(n, TOPO, np.random.default_rng(seed))
    leaves = host_leaves(TOPO)
    hosts = [h for g in groups for h in g]
    assert len(groups) == n and len(hosts) == len(set(hosts)) <= len(TOPO.hosts)
    assert all(MIN_HOSTS <= len(g) <= MAX_HOSTS for g in groups)
    assert all(len({leaves[h] for h in g}) >= 2 for g in groups)


def test_draws_are_seeded_per_tenant_count_and_repeat() -> None:
    a = draw_tenants(3, TOPO, seed=5, repeat=1)
    assert a == draw_tenants(3, TOPO, seed=5, repeat=1)
    assert a != draw_tenants(3, TOPO, seed=5, repeat=2)
    assert [t.port for t in a] == [22000, 22010, 22020]
    job = a[0].job(100.0)
    assert job.pattern == "ring" and job.shape.gpus == len(a[0].hosts) and job.hosts == a[0].hosts


def test_fig9_jobs_share_the_dumbbells_bottleneck() -> None:
    jobs = fig9_tenants()
    assert [len(j.hosts) for j in jobs] == [2, 2, 2]
    assert all(h[0] in ("h1", "h2", "h3") and h[1] in ("h4", "h5", "h6") for h in (j.hosts for j in jobs))
    periods = [j.model.compute_s + max(0, j.model.comm_s - j.model.slack_s) for j in jobs]
    assert periods[1] < 0.6 * min(periods[0], periods[2])  # one job runs about twice as many iterations


def test_too_many_tenants_are_refused() -> None:
    check_tenants([2, 3, 6], TOPO)
    with pytest.raises(UserError, match="--tenants 7"):
        check_tenants([7], TOPO)


def test_contract_and_comparisons() -> None:
    reps = []
    for r, (lev, crux) in enumerate(((0.6, 0.4), (0.7, 0.5))):
        rep = Repeat(3, r, [])
        rep.runs = [PolicyRun("leveller", {"a": lev, "b": lev + 0.1}, {}, 60.0, switches=7 + r,
                              tcp={"retrans_segs": 30, "timeouts": 2}, model={"a": 0.7, "b": 0.72}),
                    PolicyRun("crux", {"a": crux, "b": 0.95}, {}, 60.0)]
        reps.append(rep)
    doc = contract(reps)
    assert {k: v for k, v in doc["3"]["leveller"].items()} == {
        "min": [0.6, 0.7], "avg": [0.65, 0.75], "top_job_changes": [7, 8], "retrans_segs": [30, 30],
        "timeouts": [2, 2], "model": [{"a": 0.7, "b": 0.72}] * 2, "model_min": [0.7, 0.7]}
    assert doc["3"]["crux"]["min"] == [0.4, 0.5] and doc["3"]["crux"]["avg"] == [0.675, 0.725]
    assert doc["3"]["crux"]["model_min"] == [None, None] and doc["3"]["crux"]["timeouts"] == [None, None]
    cmp = comparisons(doc)["3"]
    assert cmp["min_vs_crux"] == pytest.approx(0.65 / 0.45 - 1, abs=1e-4)
    assert cmp["avg_vs_crux"] == pytest.approx(0.70 / 0.70 - 1, abs=1e-4)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveller.cli", "experiment", "tenants", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (("--policies", "fair,fifo"), "unknown policy 'fifo'"),
    (("--tenants", "2,9"), "--tenants 9"),
    (("--repeats", "0"), "--repeats 0"),
    (("--duration", "1"), "--duration 1"),
    (("--tenants", "two"), "--tenants 'two'"),
])
def test_bad_input_is_refused_before_anything_starts(args: tuple[str, ...], message: str) -> None:
    p = cli(*args, "--plan")
    assert p.returncode == 2 and message in p.stderr and p.stdout == ""


def test_plan_prints_the_jobs_of_every_repeat() -> None:
    p = cli("--plan", "--json", "--tenants", "2,4", "--repeats", "2", "--seed", "3")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) == {"2", "4"} and [len(r) for r in doc["4"]] == [4, 4]
    job = doc["2"][0][0]
    assert job["job"] == "t1" and {"hosts", "model", "emulated", "real", "scale"} <= set(job)
