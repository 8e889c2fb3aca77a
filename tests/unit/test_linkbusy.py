"""The fabric links' busy share of a live run (leveller.experiments.shared.linkbusy): which ports are
sampled, and the arithmetic over a window between samples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.core.topology import preset
from leveller.experiments.shared.linkbusy import LinkSampler, busy_share, bytes_between, fabric_directions
from leveller.experiments.tenants.plan import dumbbell
from leveller.testbed.cluster import port_name


def test_the_dumbbell_has_its_bottleneck_in_both_directions_and_no_host_link() -> None:
    dirs = fabric_directions(dumbbell(25.0), port_name)
    assert [(d.label, d.port, d.rate_mbps) for d in dirs] == [("s1->s2", "s1-p1", 25.0), ("s2->s1", "s2-p1", 25.0)]


def test_a_leaf_spine_samples_every_leaf_spine_link_both_ways() -> None:
    topo = preset("leafspine", {"leaves": 3, "spines": 2, "hosts_per_leaf": 4, "levels": 4})
    dirs = fabric_directions(topo, port_name)
    assert len(dirs) == 3 * 2 * 2 and len({d.port for d in dirs}) == 12
    assert all(("leaf" in d.label) and ("spine" in d.label) for d in dirs)


def test_bytes_between_interpolates_inside_a_sample_interval() -> None:
    times, counts = [0.0, 1.0, 2.0], [0, 1000, 1000]
    assert bytes_between(times, counts, 0.5, 1.5) == pytest.approx(500.0)
    assert bytes_between(times, counts, 0.0, 2.0) == 1000.0
    assert bytes_between(times, counts, 1.0, 2.0) == 0.0


@pytest.mark.parametrize("t0,t1", [(-0.1, 1.0), (0.0, 2.1), (1.5, 1.0)])
def test_a_window_outside_the_samples_is_refused(t0: float, t1: float) -> None:
    with pytest.raises(ValueError, match="outside the samples"):
        bytes_between([0.0, 1.0, 2.0], [0, 10, 20], t0, t1)


@given(st.lists(st.floats(0.01, 2.0), min_size=2, max_size=30), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
       st.floats(1e3, 1e7))
def test_a_counter_growing_at_a_constant_rate_gives_that_rate_over_any_window(
        gaps: list[float], a: float, b: float, bytes_per_s: float) -> None:
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g)
    counts = [round(t * bytes_per_s) for t in times]
    t0, t1 = sorted((a * times[-1], b * times[-1]))
    assert bytes_between(times, counts, t0, t1) == pytest.approx((t1 - t0) * bytes_per_s, abs=2.0)


def test_busy_share_of_a_full_25_mbit_link() -> None:
    assert busy_share(25e6 / 8 * 60, 25.0, 60.0) == pytest.approx(1.0)
    assert busy_share(25e6 / 8 * 30, 25.0, 60.0) == pytest.approx(0.5)
    assert busy_share(100.0, 25.0, 0.0) == 0.0


def test_a_sampler_that_never_sampled_reports_nothing() -> None:
    sampler = LinkSampler("lvtb-none-sw", fabric_directions(dumbbell(25.0), port_name))
    assert sampler.busy(0.0, 1.0) == {}
