"""Network simulator engine: the paper's worked examples on a dumbbell, invariants on random networks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.policies import make_policy
from leveller.model.job import JobSpec
from leveller.sim.link import simulate_link
from leveller.sim.network.engine import Simulation
from leveller.sim.network.group import Group
from leveller.sim.network.jobs import parse_jobs
from leveller.sim.network.policies import make_net_policy
from leveller.sim.network.topology import load_network
from leveller.sim.presets import PRESETS

TOL = 0.01


def dumbbell_jobs(shapes, hosts_per_side):
    """Job i on (h_i, h_{i+n}) across the bottleneck: compute C s, bytes = M s x bottleneck rate."""
    net = load_network(f"dumbbell:hosts_per_side={hosts_per_side}")
    rate = net.capacity[net.index["s1>s2"]]
    jobs = [{"name": f"j{i + 1}", "hosts": [f"h{i + 1}", f"h{i + 1 + hosts_per_side}"], "compute": c,
             "bytes": m * rate} for i, (c, m) in enumerate(shapes)]
    return net, parse_jobs({"jobs": jobs}, list(net.nics))


def network_rates(preset: str, policy: str, levels: int) -> list[float]:
    shapes = [(float(j.compute), float(j.comm)) for j in PRESETS[preset]]
    net, jobs = dumbbell_jobs(shapes, len(shapes))
    horizon = 1500 * max(c + m for c, m in shapes)
    result = Simulation(net, jobs, make_net_policy(policy, 0.0), levels, duration=horizon).run()
    return [j.rate for j in result.jobs]


@pytest.mark.parametrize("preset,policy,expected", [
    ("fig3", "fair", [0.75, 0.75]),
    ("fig3", "crux", [1.0, 0.75]),
    ("fig3", "leveller", [0.857, 0.857]),
    ("fig1-trio", "fair", [0.5, 0.5, 0.667]),
    ("fig1-trio", "crux", [1.0, 0.0, 1.0]),
    ("fig1-trio", "leveller", [0.6, 0.6, 0.6]),
])
def test_dumbbell_reproduces_the_paper_and_simulate_link(preset: str, policy: str, expected: list) -> None:
    got = network_rates(preset, policy, levels=len(expected))
    assert got == pytest.approx(expected, abs=TOL)
    link = simulate_link(PRESETS[preset], make_policy(policy, 0))
    assert got == pytest.approx([float(r) for r in link.rates], abs=TOL)


def test_cassini_interleaves_two_complementary_jobs() -> None:
    """Compute 1, all-reduce 1 each: shifted by half a period, their communication never overlaps."""
    net, jobs = dumbbell_jobs([(1.0, 1.0), (1.0, 1.0)], 2)
    fair = Simulation(net, jobs, make_net_policy("fair"), 2, duration=600).run()
    sim = Simulation(net, jobs, make_net_policy("cassini"), 2, duration=600)
    shifted = sim.run()
    assert max(fair.rates) < 0.9  # without shifts both send at once and share the link
    assert shifted.rates == pytest.approx([1.0, 1.0], abs=0.01)
    # one iteration lost to the one-shot delay at most: the rest ran at the ideal period
    assert min(j.iterations for j in shifted.jobs) >= 600 / 2 - 1


def test_one_level_makes_leveller_fair() -> None:
    assert network_rates("fig3", "leveller", levels=1) == pytest.approx([0.75, 0.75], abs=TOL)


def test_ideal_time_is_compute_plus_communication_alone() -> None:
    net, jobs = dumbbell_jobs([(1.0, 2.0)], 1)
    result = Simulation(net, jobs, make_net_policy("fair"), 2, duration=30).run()
    assert result.jobs[0].ideal == pytest.approx(3.0)
    assert result.jobs[0].iterations == 10
    assert result.jobs[0].rate == pytest.approx(1.0)


def test_slack_overlaps_communication_with_compute() -> None:
    net, _ = dumbbell_jobs([(1.0, 2.0)], 1)
    rate = net.capacity[net.index["s1>s2"]]
    jobs = parse_jobs({"jobs": [{"name": "a", "hosts": ["h1", "h2"], "compute": 1, "bytes": 2 * rate,
                                 "slack": 0.5}]}, list(net.nics))
    result = Simulation(net, jobs, make_net_policy("leveller"), 2, duration=25).run()
    assert result.jobs[0].ideal == pytest.approx(2.5)  # all-reduce starts 0.5 s before compute ends
    assert result.jobs[0].iterations == 10


def test_iterations_limit_finishes_and_frees_hosts_for_the_queue() -> None:
    net = load_network("dumbbell")
    first = JobSpec("a", None, 1.0, 1e6, 0.0, 5, 0.0, size=4)
    second = JobSpec("b", None, 1.0, 1e6, 0.5, 3, 0.0, size=4)
    def placer(free, size):
        return tuple(free[:size]) if len(free) >= size else None

    result = Simulation(net, [first, second], make_net_policy("fair"), 2, placer=placer).run()
    a, b = result.jobs
    assert a.iterations == 5 and b.iterations == 3
    assert b.start == pytest.approx(a.finish)  # queued until the four hosts were free
    assert result.sim_seconds == pytest.approx(b.finish)


@st.composite
def scenarios(draw):
    kind = draw(st.sampled_from(["leafspine", "dumbbell:hosts_per_side=3", "fabric:gpus=32,gpus_per_host=2,"
                                 "hosts_per_leaf=4,spines=2,gbps=1"]))
    net = load_network(kind)
    hosts = list(net.nics)
    n = draw(st.integers(2, 4))
    jobs = []
    for i in range(n):
        size = draw(st.integers(2, min(4, len(hosts))))
        chosen = draw(st.permutations(hosts))[:size]
        jobs.append({"name": f"j{i}", "hosts": chosen, "compute": draw(st.floats(0.1, 2.0)),
                     "bytes": draw(st.floats(1e5, 5e6)), "arrival": draw(st.floats(0, 3)),
                     "slack": 0.0, "iterations": draw(st.one_of(st.none(), st.integers(1, 20)))})
    policy = draw(st.sampled_from(["fair", "crux", "cassini", "leveller"]))
    levels = draw(st.integers(1, 4))
    tau = draw(st.sampled_from([0.0, 0.7]))
    return net, parse_jobs({"jobs": jobs}, hosts), policy, levels, tau


def check_capacity(t: float, sim: Simulation) -> None:
    load = np.zeros(len(sim.net.links))
    for g in sim.groups:
        if not g.analytic and len(g.link_ids):
            load[g.link_ids] += g.inc.links_flows @ np.where(g.active, g.rate, 0.0)
    assert np.all(load <= sim.net.capacity * (1 + 1e-7)), f"a link is above capacity at t={t}"


@settings(max_examples=25)
@given(scenarios())
def test_random_networks_never_exceed_capacity(case) -> None:
    net, jobs, policy, levels, tau = case
    Simulation(net, jobs, make_net_policy(policy, tau), levels, duration=20, on_rates=check_capacity).run()


@settings(max_examples=25)
@given(scenarios())
def test_fast_forward_of_lone_jobs_is_exact(case) -> None:
    """Closed-form advance of a job alone on its links gives what the event loop gives."""
    net, jobs, policy, levels, tau = case
    fast = Simulation(net, jobs, make_net_policy(policy, tau), levels, duration=20).run()
    original = Group.try_analytic
    try:
        Group.try_analytic = lambda self, t: False  # type: ignore[method-assign]
        slow = Simulation(net, jobs, make_net_policy(policy, tau), levels, duration=20).run()
    finally:
        Group.try_analytic = original  # type: ignore[method-assign]
    assert [j.iterations for j in fast.jobs] == [j.iterations for j in slow.jobs]
    assert [j.finish for j in fast.jobs] == pytest.approx([j.finish for j in slow.jobs], abs=1e-6)
    assert fast.gpu_utilization == pytest.approx(slow.gpu_utilization, rel=1e-6)


def test_jobs_seen_too_briefly_are_reported_but_not_summarised() -> None:
    net, _ = dumbbell_jobs([(1.0, 1.0)], 2)
    rate = net.capacity[net.index["s1>s2"]]
    jobs = parse_jobs({"jobs": [{"name": "long", "hosts": ["h1", "h3"], "compute": 1, "bytes": rate},
                                {"name": "late", "hosts": ["h2", "h4"], "compute": 1, "bytes": rate,
                                 "arrival": 95.5}]}, list(net.nics))
    result = Simulation(net, jobs, make_net_policy("fair"), 2, duration=100).run()
    late = result.jobs[1]
    assert late.rate is not None and late.rate < 0.9 and not late.measured  # 4.5 s = 2 ideal iterations
    assert result.rates == [result.jobs[0].rate]
    assert result.summary()["measured"] == 1


def test_leveller_with_tau_matches_simulate_link() -> None:
    net, jobs = dumbbell_jobs([(1.0, 1.0), (1.0, 2.0)], 2)
    got = Simulation(net, jobs, make_net_policy("leveller", 4.0), 2, duration=4500).run()
    link = simulate_link(PRESETS["fig3"], make_policy("leveller", 4))
    assert [j.rate for j in got.jobs] == pytest.approx([float(r) for r in link.rates], abs=1e-3)


def overlap_runs(shapes):
    """Static priority (core CruxPolicy, by G*C/M) with and without the overlap rule on dumbbell
    jobs (compute s, comm s, slack s): the first job always holds the top level."""
    from leveller.core.policies import CruxPolicy
    from leveller.sim.network.policies import RankedPolicy

    net, _ = dumbbell_jobs([(c, m) for c, m, _ in shapes], len(shapes))
    rate = net.capacity[net.index["s1>s2"]]
    n = len(shapes)
    jobs = parse_jobs({"jobs": [{"name": f"j{i + 1}", "hosts": [f"h{i + 1}", f"h{i + 1 + n}"], "compute": c,
                                 "bytes": m * rate, "slack": s} for i, (c, m, s) in enumerate(shapes)]},
                      list(net.nics))
    with_rule = Simulation(net, jobs, RankedPolicy(CruxPolicy(), overlap=True), 3, duration=900).run()
    without = Simulation(net, jobs, RankedPolicy(CruxPolicy(), overlap=False), 3, duration=900).run()
    return [j.rate for j in with_rule.jobs], [j.rate for j in without.jobs]


def test_overlap_rule_yields_the_link_while_the_all_reduce_can_wait() -> None:
    # j1 (top priority): an all-reduce of 1 s that may start 2 s before compute ends, so it can
    # wait 1 s for free; j2 sends 0.5 s every second. Demoted while it can wait, j1 leaves j2 the
    # link and still finishes in time: both run at their ideal speed instead of j2 at half.
    with_rule, without = overlap_runs([(2.0, 1.0, 2.0), (0.5, 0.5, 0.0)])
    assert without == pytest.approx([1.0, 0.5], abs=0.01)
    assert with_rule == pytest.approx([1.0, 1.0], abs=0.01)


def test_overlap_rule_does_not_demote_an_all_reduce_that_cannot_wait() -> None:
    # slack 0.5 s < the all-reduce's 2 s alone: any wait delays the iteration, so no demotion.
    with_rule, without = overlap_runs([(2.0, 1.0, 0.5), (0.5, 0.5, 0.0)])
    assert with_rule == pytest.approx(without, abs=1e-9)



def contended_cassini(monkeypatch: pytest.MonkeyPatch, cache: bool = True):  # type: ignore[no-untyped-def]
    """A 128-GPU contended run under CASSINI (a coarse grid, for speed) and the links it searched;
    ``cache`` False: every re-plan searches every shared link again (the simulator before the cache)."""
    from leveller.core import cassini
    from leveller.sim.network.baselines import CassiniNet
    from leveller.sim.network.trace import synthetic

    searched: list[tuple[str, ...]] = []
    link_rotations, shared_link_shifts = cassini.link_rotations, cassini.shared_link_shifts

    def spy(jobs, *args, **kwargs):  # type: ignore[no-untyped-def]
        searched.append(tuple(j.name for j in jobs))
        return link_rotations(jobs, *args, **kwargs)

    monkeypatch.setattr(cassini, "link_rotations", spy)
    if not cache:
        monkeypatch.setattr(cassini, "shared_link_shifts",
                            lambda links, qf, lp, cache, **kw: shared_link_shifts(links, qf, lp, **kw))
    net = load_network("fabric:gpus=128,nics_per_host=1,gbps=100,oversub=2")
    jobs, placer = synthetic("contended:jobs=10,seed=2,max_hosts=4,min_s=30,max_s=120", net)
    result = Simulation(net, jobs, CassiniNet(quantum_fraction=0.05, lcm_periods=2.0), 2, 150, placer=placer).run()
    monkeypatch.undo()
    return result.summary() | {"wall_seconds": 0}, searched


def test_cassini_searches_a_link_once_and_gets_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache of searched links changes nothing in the run, and each link content is searched once."""
    cached, once = contended_cassini(monkeypatch)
    plain, again = contended_cassini(monkeypatch, cache=False)
    assert cached == plain
    assert len(set(again)) < len(again)  # re-plans meet the same links again
    assert len(once) < len(again)


def test_cassini_cache_is_emptied_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    from leveller.sim.network import baselines

    cached, once = contended_cassini(monkeypatch)
    monkeypatch.setattr(baselines, "CACHE", 1)
    small, more = contended_cassini(monkeypatch)
    assert small == cached
    assert len(once) < len(more)
