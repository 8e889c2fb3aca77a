"""The fluid model of a live tenants run: the network simulator on the same placement and jobs.

Every live policy run of `leveller experiment tenants` gets a ``model`` beside its measurement: the
R per job that the flow-level simulator (leveller.sim.network) gives the same jobs (the scaled
compute, communication and slack of the live jobs), on the same topology (the testbed's links and
rates), under the same policy, levels, tau and switching options. The live ring sends
``M x rate / 8`` bytes per rank per iteration to its successor; the simulator's ring all-reduce puts
``2(W-1)/W x bytes`` on each rank's link, so its ``bytes`` are the live volume divided by that factor.
Model R is measured from the common start against each job's iteration time alone in the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from leveller.core.switching import PAPER, SwitchRule
from leveller.core.topology import Topology
from leveller.experiments.shared.jobs import LiveJob, model_specs


def model_rates(topo: Topology, jobs: Sequence[LiveJob], policy: str, levels: int, seconds: float,
                tau_s: float = 0.1, switching: SwitchRule = PAPER, floor: float = 0.0) -> dict[str, float]:
    """R per job in the fluid network model of a live run (see the module doc)."""
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import Network

    net = Network("testbed", topo, {h.name: (h.name,) for h in topo.hosts}, 1)
    sim = Simulation(net, model_specs(jobs), make_net_policy(policy, tau_s, switching=switching), levels, seconds,
                     floor=floor)
    result = sim.run()
    return {o.name: float(o.rate) for o in result.jobs if o.rate is not None}
