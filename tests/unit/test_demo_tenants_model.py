"""The fluid model of a live tenants run (leveller.experiments.tenants.model): same jobs, same links."""

from __future__ import annotations

import pytest

from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.tenants.plan import dumbbell, fig9_tenants
from leveller.model.shape import JobShape


def test_a_live_ring_alone_takes_compute_plus_its_communication_in_the_model() -> None:
    """A 2-host ring sends M x rate / 8 bytes per rank per iteration: alone at 25 Mbit/s its iteration
    is C + M (0.3 + 0.5 s), so the model's bytes undo the ring's 2(W-1)/W factor exactly."""
    from leveller.core.topology import Topology
    from leveller.model.job import JobSpec
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import Network

    topo: Topology = dumbbell(25.0)
    job = LiveJob("a", ("h1", "h4"), JobShape(0.3, 0.5), 22000, pattern="ring", rate_mbps=25.0)
    volume = 0.5 * 25e6 / 8
    net = Network("t", topo, {h.name: (h.name,) for h in topo.hosts}, 1)
    res = Simulation(net, [JobSpec("a", job.hosts, 0.3, volume)], make_net_policy("fair"), 2, 20.0).run()
    assert res.jobs[0].ideal == pytest.approx(0.8, rel=1e-6)  # the bytes as given: 2(W-1)/W = 1 for W = 2
    from leveller.experiments.tenants.model import model_rates

    assert model_rates(topo, [job], "fair", 2, 20.0) == {"a": pytest.approx(1.0, abs=0.05)}


def test_a_three_host_ring_gives_the_simulator_bytes_that_put_the_live_volume_on_each_link() -> None:
    """Live: every rank sends M x rate / 8 = 0.6 x 25e6 / 8 = 1,875,000 bytes to its successor; the
    simulator's ring all-reduce puts 2(W-1)/W = 4/3 x bytes on each link, so bytes = 1,406,250."""
    from leveller.experiments.shared.jobs import model_specs

    job = LiveJob("b", ("h1", "h2", "h4"), JobShape(0.2, 0.6, slack=0.2), 22000, pattern="ring", rate_mbps=25.0)
    spec = model_specs([job])[0]
    assert spec.bytes == pytest.approx(1_406_250)
    assert spec.hosts == ("h1", "h2", "h4") and spec.compute == 0.2
    assert spec.slack == 0.2
    # the worker starts the exchange at most its compute before the compute ends: the shape's rule
    with pytest.raises(ValueError, match="slack S must be in 0..C"):
        LiveJob("b", ("h1", "h2", "h4"), JobShape(0.2, 0.6, slack=0.5), 22000)


def test_figure_9_in_the_model_levels_the_jobs_above_fair_and_crux() -> None:
    from leveller.experiments.tenants.model import model_rates

    topo = dumbbell(25.0)
    jobs = [t.job(25.0) for t in fig9_tenants()]
    lev = model_rates(topo, jobs, "leveller", 2, 60.0)
    fair = model_rates(topo, jobs, "fair", 2, 60.0)
    crux = model_rates(topo, jobs, "crux", 2, 60.0)
    assert set(lev) == {"j1", "j2", "j3"}
    assert min(lev.values()) > min(fair.values()) > min(crux.values())
    assert max(lev.values()) - min(lev.values()) < 0.02  # levelled
