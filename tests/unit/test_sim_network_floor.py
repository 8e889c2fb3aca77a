"""The queue floor in the network simulator: every level below the top keeps a share of each link.

Expected rates are worked out by hand in each test (capacity 10 unless said otherwise)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.cli import main
from leveller.errors import UserError
from leveller.sim.network.engine import Simulation
from leveller.sim.network.fluid import Incidence, link_load, max_min_rates
from leveller.sim.network.jobs import parse_jobs
from leveller.sim.network.policies import make_net_policy
from leveller.sim.network.topology import load_network


def rates(paths, cap, levels, floor, top=None):
    inc = Incidence.from_paths(paths, len(cap))
    return max_min_rates(inc, np.asarray(cap, dtype=float), np.asarray(levels), np.ones(len(paths), dtype=bool),
                         floor=floor, top=top).tolist()


def test_demoted_flow_gets_exactly_its_floor_and_nothing_without_one() -> None:
    # a top-level flow that wants the whole link and a demoted one: 5% of 10 is 0.5, the top keeps 9.5
    assert rates([[0], [0]], [10.0], [1, 0], floor=0.05, top=1) == pytest.approx([9.5, 0.5])
    assert rates([[0], [0]], [10.0], [1, 0], floor=0.0, top=1) == pytest.approx([10.0, 0.0])


def test_only_levels_with_demand_reserve_their_floor() -> None:
    # K = 4 (top 3): levels 2 and 1 send nothing, so only level 0 reserves; then levels 1 and 0 both do
    assert rates([[0], [0]], [10.0], [3, 0], floor=0.05, top=3) == pytest.approx([9.5, 0.5])
    assert rates([[0], [0], [0]], [10.0], [3, 1, 0], floor=0.05, top=3) == pytest.approx([9.0, 0.5, 0.5])


def test_a_level_splits_its_floor_max_min_among_its_flows() -> None:
    assert rates([[0], [0], [0]], [10.0], [1, 0, 0], floor=0.05, top=1) == pytest.approx([9.5, 0.25, 0.25])


def test_a_level_limited_elsewhere_reserves_only_its_demand() -> None:
    # the demoted flow also crosses link 1 (capacity 0.2): it takes 0.2 of its 0.5 on link 0, the top 9.8
    assert rates([[0], [0, 1]], [10.0, 0.2], [1, 0], floor=0.05, top=1) == pytest.approx([9.8, 0.2])


def test_what_the_top_cannot_use_still_goes_down_by_priority() -> None:
    # the top flow is held to 3 by link 1: the demoted one gets its 0.5 and the 6.5 the top left
    assert rates([[0, 1], [0]], [10.0, 3.0], [1, 0], floor=0.05, top=1) == pytest.approx([3.0, 7.0])


def test_a_middle_level_keeps_the_floors_below_it() -> None:
    # levels 2 (top), 1, 0 on one link with floor 0.1: 1 and 0 reserve 1 each; the top gets 8, level 1
    # its 1 (nothing left above it), level 0 its 1
    assert rates([[0], [0], [0]], [10.0], [2, 1, 0], floor=0.1, top=2) == pytest.approx([8.0, 1.0, 1.0])


def test_one_level_alone_is_not_affected() -> None:
    # link 0 (cap 10) carries a, b; link 1 (cap 4) carries b, c: max-min a = 8, b = c = 2, floor or not
    assert rates([[0], [0, 1], [1]], [10.0, 4.0], [0, 0, 0], floor=0.2, top=3) == pytest.approx([8.0, 2.0, 2.0])


def test_without_top_the_highest_active_level_is_the_top() -> None:
    assert rates([[0], [0]], [10.0], [2, 1], floor=0.05) == pytest.approx([9.5, 0.5])


@st.composite
def networks(draw: st.DrawFn):
    n_links = draw(st.integers(1, 5))
    n_flows = draw(st.integers(1, 7))
    paths = [draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=3, unique=True))
             for _ in range(n_flows)]
    cap = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
    levels = draw(st.lists(st.integers(0, 3), min_size=n_flows, max_size=n_flows))
    active = draw(st.lists(st.booleans(), min_size=n_flows, max_size=n_flows))
    return paths, np.asarray(cap), np.asarray(levels), np.asarray(active, dtype=bool)


@settings(max_examples=150)
@given(networks(), st.sampled_from([0.01, 0.05, 0.2, 0.33]))
def test_floors_never_overload_a_link_and_zero_is_the_paper(net, floor) -> None:
    paths, cap, levels, active = net
    inc = Incidence.from_paths(paths, len(cap))
    plain = max_min_rates(inc, cap, levels, active)
    assert np.array_equal(max_min_rates(inc, cap, levels, active, floor=0.0, top=3), plain)
    got = max_min_rates(inc, cap, levels, active, floor=floor, top=3)
    assert np.all(link_load(inc, got) <= cap * (1 + 1e-9) + 1e-9)
    assert np.all(got[~active] == 0) and np.all(got[active] >= 0)
    # every active flow below the top gets at least its floor share on every link it crosses, as the
    # only flow of its level there can claim: floor x capacity / (its level's flows on that link)
    for f in np.flatnonzero(active & (levels < 3)):
        same = active & (levels == levels[f])
        bound = min(floor * cap[lk] / sum(1 for g in np.flatnonzero(same) if lk in paths[g]) for lk in paths[f])
        assert got[f] >= bound * (1 - 1e-9) - 1e-12


def trio():
    """Paper Figure 1's trio on a dumbbell (compute 1 / send 2, twice, and compute 2 / send 1)."""
    net = load_network("dumbbell:hosts_per_side=3")
    rate = net.capacity[net.index["s1>s2"]]
    jobs = [{"name": f"j{i + 1}", "hosts": [f"h{i + 1}", f"h{i + 4}"], "compute": c, "bytes": m * rate}
            for i, (c, m) in enumerate([(1.0, 2.0), (1.0, 2.0), (2.0, 1.0)])]
    return net, parse_jobs({"jobs": jobs}, list(net.nics))


def test_a_floor_lets_the_job_crux_starves_progress() -> None:
    net, jobs = trio()
    starved = Simulation(net, jobs, make_net_policy("crux"), 3, duration=600).run()
    paper = Simulation(net, jobs, make_net_policy("crux"), 3, duration=600, floor=0.0).run()
    floored = Simulation(net, jobs, make_net_policy("crux"), 3, duration=600, floor=0.05).run()
    assert starved.rates == paper.rates and starved.rates[1] == 0.0  # the paper's figure: j2 never finishes
    assert floored.rates[1] > 0.1  # with 5% of the link it completes iterations
    # one level for everyone (fair): nobody is below anyone, the floor changes nothing
    fair = Simulation(net, jobs, make_net_policy("fair"), 3, duration=600, floor=0.05).run()
    assert fair.rates == Simulation(net, jobs, make_net_policy("fair"), 3, duration=600).run().rates


@pytest.mark.parametrize("preset, policy, floor", [("fig1-trio", "crux", "1/20"), ("fig3", "crux", "1/10")])
def test_one_bottleneck_agrees_with_the_exact_link_model(preset, policy, floor) -> None:
    """On a dumbbell every job crosses one link: the network model with a floor gives the exact
    single-link simulator's R (leveller.sim.link, its own floor model), as it does without one."""
    from fractions import Fraction

    from leveller.core.policies import make_policy
    from leveller.sim.link import simulate_link
    from leveller.sim.presets import PRESETS

    shapes = [(float(j.compute), float(j.comm)) for j in PRESETS[preset]]
    net = load_network(f"dumbbell:hosts_per_side={len(shapes)}")
    rate = net.capacity[net.index["s1>s2"]]
    jobs = parse_jobs({"jobs": [{"name": f"j{i + 1}", "hosts": [f"h{i + 1}", f"h{i + 1 + len(shapes)}"],
                                 "compute": c, "bytes": m * rate} for i, (c, m) in enumerate(shapes)]},
                      list(net.nics))
    horizon = 1500 * max(c + m for c, m in shapes)
    got = Simulation(net, jobs, make_net_policy(policy, 0.0), len(shapes), duration=horizon,
                     floor=float(Fraction(floor))).run().rates
    exact = simulate_link(PRESETS[preset], make_policy(policy, 0), floor=Fraction(floor)).rates
    assert got == pytest.approx([float(r) for r in exact], abs=0.01)


@pytest.mark.parametrize("floor, levels", [(-0.1, 3), (0.5, 3), (float("nan"), 3), (1.0, 1)])
def test_simulation_refuses_a_bad_floor(floor, levels) -> None:
    net, jobs = trio()
    with pytest.raises(UserError, match=r"floor = .* is invalid; .*\(levels - 1\) x floor < 1|floor < 1"):
        Simulation(net, jobs, make_net_policy("crux"), levels, duration=10, floor=floor)


def test_cli_floor(tmp_path, capsys) -> None:
    net, _ = trio()
    rate = net.capacity[net.index["s1>s2"]]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [
        {"name": f"j{i + 1}", "hosts": [f"h{i + 1}", f"h{i + 4}"], "compute": c, "bytes": m * rate}
        for i, (c, m) in enumerate([(1.0, 2.0), (1.0, 2.0), (2.0, 1.0)])]}))
    base = ["simulate", "network", "--topology", "dumbbell:hosts_per_side=3", "--jobs", str(path),
            "--policy", "crux", "--levels", "3", "--duration", "600", "--json"]
    assert main(base) == 0
    paper = json.loads(capsys.readouterr().out)
    assert main([*base, "--floor", "0.05"]) == 0
    floored = json.loads(capsys.readouterr().out)
    assert paper["jobs"]["j2"]["rate"] == 0.0 and floored["jobs"]["j2"]["rate"] > 0.1
    assert main([*base, "--floor", "0.6"]) == 2
    err = capsys.readouterr().err
    assert "--floor = 0.6 is invalid" in err and "(levels - 1) x floor < 1" in err
