"""The switching rule in the network simulator: the same leveller.core rule the controller applies,
per contention group, with top_job_changes counted."""

from __future__ import annotations

from leveller.core.switching import SwitchRule
from leveller.core.topology import preset
from leveller.model.job import JobSpec
from leveller.sim.network.engine import Simulation
from leveller.sim.network.policies import make_net_policy
from leveller.sim.network.topology import Network


def fig9_like(switching: SwitchRule, policy: str = "leveller") -> dict:
    """Three 2-host jobs across the dumbbell's 25 Mbit/s bottleneck (Figure 9's shape), 60 s, tau 0.1 s."""
    topo = preset("dumbbell", {"hosts_per_side": 3, "host_mbps": 1000.0, "bottleneck_mbps": 25.0, "levels": 2})
    net = Network("dumbbell", topo, {h.name: (h.name,) for h in topo.hosts}, 1)
    specs = [JobSpec("j1", ("h1", "h4"), 0.276, 1.76e6), JobSpec("j2", ("h2", "h5"), 0.267, 0.69e6),
             JobSpec("j3", ("h3", "h6"), 0.380, 1.76e6)]
    return Simulation(net, specs, make_net_policy(policy, 0.1, switching=switching), 2, 60.0).run().summary()


def test_the_rule_cuts_top_changes_in_the_network_model_at_a_small_cost() -> None:
    paper = fig9_like(SwitchRule())
    sticky = fig9_like(SwitchRule(0.02, 2.0))
    assert paper["top_job_changes"] > 100  # levelled jobs: the top changes about every iteration
    assert sticky["top_job_changes"] * 4 < paper["top_job_changes"]
    assert sticky["min"] > paper["min"] - 0.03


def test_policies_without_priorities_count_no_changes() -> None:
    assert fig9_like(SwitchRule(), "fair")["top_job_changes"] == 0
    assert fig9_like(SwitchRule(), "crux")["top_job_changes"] == 0
