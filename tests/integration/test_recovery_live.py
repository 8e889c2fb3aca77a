"""`leveller experiment recovery --where testbed`, short: the paper's pair on the live system, j1
starved for 10 s by an unmanaged UDP flood (strict priority on its host's egress). With the paper's
cumulative R the controller keeps j1 first long after the flood (it repays j1's whole deficit);
with a decayed R (half-life 2 s) it forgets the deficit and the jobs alternate again much sooner.

How long cumulative R keeps j1 first depends on the gap of R the flood left, which varies with the
machine's load: j1 held the top level 12.5 s after the flood in one run and the whole 30 s left in
another (both under two CPU burners; the crossing would be about 2 x 10 s x R after a 10 s flood in the
fluid model). So the cumulative run is checked over the 10 s after the flood (j1 first in every
decision measured there), the decayed one over 8-18 s after it, where it alternates (j1 first in
0.59-0.70 of the decisions measured there, half-life 5 s and 2 s).

Why half-life 2 s: 8 s after the flood a half-life of 5 s still weighs the flood's 10 s at a quarter of R's
decayed time, 2 s at 6 %. On a host whose hypervisor stole a third of the CPU, j1 stayed first in 0.81 and
0.845 of 8-18 s with 5 s (two failures); with 2 s the window measures the forgotten deficit, not what is
left of it (a run at 22 % steal: 0.56 with 2 s, 0.64 with 5 s; cumulative 1.00)."""

from __future__ import annotations

import uuid

import pytest

from leveller.bench.recovery import RateMode
from leveller.experiments.recovery.run import STARVED_JOB, LiveRecoverySetup, live_recovery, summary

pytestmark = pytest.mark.privileged


def test_cumulative_r_repays_the_deficit_decayed_r_forgets_it() -> None:
    from pyroute2 import netns

    name = "rc" + uuid.uuid4().hex[:8]
    setup = LiveRecoverySetup(at_s=20.0, seconds=10.0, run_s=50.0, warmup_s=8.0, alone_s=6.0)
    runs, ideal = live_recovery([RateMode(), RateMode(half_life_s=2.0)], setup, name=name)
    rows = summary(runs)
    print(f"ideal {ideal}; " + "; ".join(f"{r['mode']}: steady {r['steady_min']:.3f}, starved iterations "
                                          f"{r['starved_iterations']}, j1 first before "
                                          f"{run.top_share(STARVED_JOB, setup.warmup_s, run.flood[0]):.2f}, "
                                          f"after {r['j1_first_after']:.2f}" for run, r in zip(runs, rows)))
    cum, dec = runs
    for run, row in zip(runs, rows):
        # the flood really starved j1 (about 17 iterations else; 0-1 quiet, 3 once on a host stealing an
        # eighth of the CPU, where the flood's sender itself waited for the CPU)
        assert row["starved_iterations"] <= 4
        # before the flood the pair runs, neither job stalled (0.857 in the model; live 0.63-0.80 under two
        # CPU burners, 0.75 quiet), and LEVELLER takes turns (j1 first in 0.57-0.60 of the decisions):
        # neither job holds the top level throughout, as a static priority (Crux) or a stuck ranking would
        assert row["steady_min"] > 0.5
        flood_start, _ = run.flood
        assert 0.15 <= run.top_share(STARVED_JOB, setup.warmup_s, flood_start) <= 0.85
    _, end = cum.flood
    assert cum.top_share(STARVED_JOB, end + 1, end + 10) >= 0.9
    _, end = dec.flood
    assert dec.top_share(STARVED_JOB, end + 8, end + 18) <= 0.75
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
