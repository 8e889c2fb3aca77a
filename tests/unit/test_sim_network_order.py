"""The simulator's ranking shortcut for LEVELLER (policies.leveller_order) against the core path it
stands in for: ``LevellerPolicy().order(job_views(now, jobs))``."""

from fractions import Fraction
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.policies import LevellerPolicy
from leveller.sim.network.policies import RankedPolicy, job_views, leveller_order, make_net_policy
from leveller.sim.network.runjob import RunJob


def stub(name: str, iterations: int, ideal: object, start: float) -> RunJob:
    """A RunJob with only what the ranking reads (explicit state: iterations_at gives ``iterations``)."""
    j = RunJob.__new__(RunJob)
    j.name, j.iterations, j.ideal, j.start = name, iterations, ideal, start
    j.analytic, j.history, j.gpus, j.comm_alone = False, [(start, 0)], 8, 0.5
    j.spec = SimpleNamespace(compute=1.0, iterations=None)
    return j


jobs_st = st.lists(st.tuples(st.integers(0, 50), st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0]),
                             st.sampled_from([0.0, 0.0, 1.0, 2.5, 7.0])), min_size=1, max_size=12)


@settings(max_examples=500)
@given(jobs_st, st.sampled_from([0.0, 1.0, 2.5, 7.0, 10.0, 33.3]))
def test_the_shortcut_is_the_core_order(rows, now) -> None:  # type: ignore[no-untyped-def]
    # small integers and a few ideal times: many equal R (ties keep the jobs' order) and R = 0 at the start
    jobs = [stub(f"j{i}", n, ideal, min(start, now)) for i, (n, ideal, start) in enumerate(rows)]
    want = LevellerPolicy().order(job_views(now, jobs))
    assert leveller_order(now, jobs) == want
    assert make_net_policy("leveller").order(now, jobs) == want


def test_the_shortcut_leaves_exact_or_odd_inputs_to_the_core() -> None:
    now = 4.0
    assert leveller_order(now, [stub("a", 1, Fraction(1, 2), 0.0)]) is None  # exact ideal time
    assert leveller_order(now, [stub("a", 1, 2, 0.0)]) is None  # an int
    assert leveller_order(now, [stub("a", 1, 1.0, 0.0), stub("a", 2, 1.0, 0.0)]) is None  # two names
    with pytest.raises(ValueError):  # the core's refusal, reached through the fallback
        make_net_policy("leveller").order(now, [stub("a", 1, 1.0, 0.0), stub("a", 2, 1.0, 0.0)])
    assert leveller_order(now, [stub("a", 1, 0.0, 0.0)]) is None  # not > 0: the core raises
    policy = make_net_policy("leveller", rate_window=10.0)
    assert isinstance(policy, RankedPolicy) and policy.rate_window == 10.0  # windowed R: the core path
    jobs = [stub("a", 3, 1.0, 0.0), stub("b", 1, 1.0, 0.0)]
    assert policy.order(now, jobs) == ["b", "a"]
