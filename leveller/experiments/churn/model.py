"""The fluid model of a churn run: the network simulator on the same arrivals, per policy.

Beside each live policy run, `leveller experiment churn` reports what the flow-level simulator
(leveller.sim.network) gives the same jobs: each arrival's scaled compute, communication and slack
(shared.jobs.model_specs), arriving at its time for its number of iterations, on the same
leaf-spine at the same link rate, with the same levels and tau. The model's R of a job is against its
iteration time alone in the model; as live, only the jobs that finish within the run count.

LEVELLER's model has the live controller's profiling windows (leveller.controller.registry): a job's
first ``samples`` iterations after its window opens run at the unique top priority, one window at a
time, earliest arrival first; a job still waiting for its window ranks as R = 0 (leveller.controller.
decide). Those windows are what makes a newcomer "look fast" (the paper's limit) and cost the
lowest-R job its top priority meanwhile; the simulator's own LEVELLER knows every ideal time and has
no windows. Fair, CASSINI and Crux are the simulator's (no windows: fair and CASSINI give no
priority, and the model of Crux leaves them out, which flatters it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leveller.core.policies import JobView
from leveller.experiments.churn.plan import Arrival, ChurnSettings, leafspine
from leveller.sim.network.policies import RankedPolicy, job_views

PROFILE_SAMPLES = 5  # the controller's profiling window, in iterations (leveller.controller.registry)


@dataclass(frozen=True)
class ProfiledFirst(RankedPolicy):
    """A ranked policy with the live controller's profiling windows (see the module doc). Keeps the
    windows' state of one simulation: make one per run."""

    samples: int = PROFILE_SAMPLES
    period: float = 0.2  # decide every period (the live controller's tau), so that windows close
    opened: dict[str, int] = field(default_factory=dict)  # job -> its iterations when its window opened
    profiled: set[str] = field(default_factory=set)

    @property
    def tau(self) -> float | None:
        return self.period

    def views(self, now: float, jobs: Sequence[Any]) -> list[JobView]:
        """What the live controller's policy would see: the window's job profiling, waiting ones R = 0."""
        done = {j.name: j.iterations_at(now) for j in jobs}
        for name, at in list(self.opened.items()):
            if name not in done or done[name] - at >= self.samples:
                del self.opened[name]
                self.profiled.add(name)
        if not self.opened:
            waiting = sorted((j.start, j.name) for j in jobs if j.name not in self.profiled)
            if waiting:
                self.opened[waiting[0][1]] = done[waiting[0][1]]
        out = []
        for v in job_views(now, jobs, self.rate_window, self.rate_half_life):
            if v.name in self.opened:
                v = dataclasses.replace(v, profiling=True, rate=None)
            elif v.name not in self.profiled:
                v = dataclasses.replace(v, rate=0.0)
            out.append(v)
        return out

    def order(self, now: float, jobs: Sequence[Any]) -> list[str] | None:
        return self.core.order(self.views(now, jobs))


def _policy(name: str, settings: ChurnSettings) -> Any:
    from leveller.core.policies import LevellerPolicy
    from leveller.sim.network.policies import make_net_policy

    if name == "leveller":
        return ProfiledFirst(LevellerPolicy(tau=settings.tau_s), overlap=True, period=settings.tau_s)
    return make_net_policy(name, settings.tau_s)


def model_summary(arrivals: Sequence[Arrival], settings: ChurnSettings, policies: Sequence[str]
                  ) -> dict[str, dict[str, Any]]:
    """policy -> the model's jobs finished within the run and their min, p10 and mean R."""
    from leveller.experiments.churn.report import stats
    from leveller.experiments.shared.jobs import model_specs
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.topology import Network

    topo = leafspine(settings.levels, settings.link_mbps)
    net = Network("testbed", topo, {h.name: (h.name,) for h in topo.hosts}, 1)
    specs = [dataclasses.replace(s, arrival=a.at, iterations=a.iterations)
             for s, a in zip(model_specs([a.job(settings.link_mbps) for a in arrivals]), arrivals)]
    out: dict[str, dict[str, Any]] = {}
    for name in policies:
        if not specs:
            out[name] = {"jobs_finished": 0, **stats([])}
            continue
        result = Simulation(net, specs, _policy(name, settings), settings.levels, settings.duration_s).run()
        finished = finished_rates(result.jobs, settings.duration_s)
        out[name] = {"jobs_finished": len(finished), **stats(finished)}
    return out


def finished_rates(jobs: Sequence[Any], end: float) -> list[float]:
    """R of the model's jobs that finished by ``end`` (seconds from the run's start)."""
    return [float(o.rate) for o in jobs if o.rate is not None and o.finish is not None and o.finish <= end]

