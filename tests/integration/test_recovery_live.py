"""`leveller experiment recovery --where testbed`, short: the paper's pair on the live system, j1
starved for 10 s by an unmanaged UDP flood (strict priority on its host's egress). With the paper's
cumulative R the controller keeps j1 first long after the flood (it repays j1's whole deficit);
with a decayed R (half-life 5 s) it forgets the deficit and the jobs alternate again much sooner."""

from __future__ import annotations

import uuid

import pytest

from leveller.bench.recovery import RateMode
from leveller.demo.recovery import STARVED_JOB, LiveRecoverySetup, live_recovery, summary

pytestmark = pytest.mark.privileged


def test_cumulative_r_repays_the_deficit_decayed_r_forgets_it() -> None:
    from pyroute2 import netns

    name = "rc" + uuid.uuid4().hex[:8]
    setup = LiveRecoverySetup(at_s=20.0, seconds=10.0, run_s=60.0, warmup_s=8.0, alone_s=6.0)
    runs, ideal = live_recovery([RateMode(), RateMode(half_life_s=5.0)], setup, name=name)
    rows = summary(runs)
    print(f"ideal {ideal}; " + "; ".join(f"{r['mode']}: steady {r['steady_min']:.3f}, starved iterations "
                                          f"{r['starved_iterations']}, j1 first after {r['j1_first_after']:.2f}"
                                          for r in rows))
    cum, dec = runs
    for _run, row in zip(runs, rows):
        assert row["starved_iterations"] <= 1  # the flood really starved j1 (about 17 iterations else)
        assert row["steady_min"] > 0.7  # leveller's pair before the flood (0.857 in the model)
    _, end = cum.flood
    assert cum.top_share(STARVED_JOB, end + 10, end + 25) >= 0.9
    _, end = dec.flood
    assert dec.top_share(STARVED_JOB, end + 10, end + 25) <= 0.75
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
