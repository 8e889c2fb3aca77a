"""The single-link simulator's recorded timeline and counts, checked against hand-derived runs.

Two jobs 1:1 (C = M = 1) under fair sharing on one link: both compute [0, 1), both share the link
for [1, 3) (each at half rate needs 2 units), and so on: every iteration takes 3 units, so R = 2/3.
Under strict priority (leveller, lowest R first) the first job sends [1, 2) alone while the other
waits, then the other sends [2, 3): each iteration of the slower one takes 3.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from leveller.core.policies import make_policy
from leveller.sim.link import LinkJob, event_bound, simulate_link

PAIR = [LinkJob(F(1), F(1)), LinkJob(F(1), F(1))]


def by_job(result, job: int) -> list[tuple[str, F, F]]:  # type: ignore[no-untyped-def]
    return [(s.kind, s.start, s.end) for s in result.segments if s.job == job]


def test_fair_pair_timeline_is_compute_then_a_shared_link() -> None:
    res = simulate_link(PAIR, make_policy("fair"), cycles=3, record_until=F(6))
    for j in (0, 1):
        assert by_job(res, j) == [("compute", F(0), F(1)), ("share", F(1), F(3)), ("compute", F(3), F(4)),
                                  ("share", F(4), F(6))]
    assert res.policy == "fair" and res.horizon == F(6) and res.iterations == (2, 2)
    assert res.rates == (F(2, 3), F(2, 3)) and res.min == res.avg == F(2, 3)


def test_priority_pair_timeline_has_one_sender_and_one_waiter() -> None:
    res = simulate_link(PAIR, make_policy("leveller"), cycles=2, record_until=F(3))
    kinds = {j: by_job(res, j) for j in (0, 1)}
    first = 0 if kinds[0][1][0] == "send" else 1
    other = 1 - first
    assert kinds[first][:2] == [("compute", F(0), F(1)), ("send", F(1), F(2))]
    assert kinds[other][:3] == [("compute", F(0), F(1)), ("wait", F(1), F(2)), ("send", F(2), F(3))]


def test_segments_are_recorded_only_before_record_until_and_are_contiguous() -> None:
    res = simulate_link(PAIR, make_policy("fair"), cycles=4, record_until=F(4))
    assert res.segments and all(s.start < 4 for s in res.segments)
    assert max(s.start for s in res.segments) == F(3)  # the segment starting at 3 is kept (3 < 4)
    for j in (0, 1):
        segs = by_job(res, j)
        assert segs[0][1] == 0
        for (k1, _, end), (k2, start, _) in zip(segs, segs[1:]):
            assert end == start and k1 != k2  # contiguous, and a kind never repeats back to back
    assert simulate_link(PAIR, make_policy("fair"), cycles=4).segments == ()  # nothing recorded by default


def test_events_count_phase_ends_and_stay_under_the_bound() -> None:
    one = simulate_link([LinkJob(F(1), F(1))], make_policy("fair"), cycles=3)
    assert one.iterations == (3,) and one.events == 6  # compute end + send end, per iteration
    pair = simulate_link(PAIR, make_policy("fair"), cycles=3)
    assert pair.events <= event_bound(PAIR, 3, None)
    assert event_bound([LinkJob(F(1), F(1))], 3, None) == 2 * (3 + 1) + 1
    assert event_bound([LinkJob(F(1), F(1))], 3, F(2)) == 2 * (3 + 1) + 1 + 3
    assert event_bound(PAIR, 3, None) == 2 * (2 * (3 + 1)) + 1


@pytest.mark.parametrize("compute,comm,gpus,message", [
    (0, 1, 1, "compute time C must be > 0, got 0"),
    (1, 0, 1, "communication time M must be > 0, got 0"),
    (1, -1, 1, "communication time M must be > 0, got -1"),
    (1, 1, 0, "GPUs G must be >= 1, got 0"),
])
def test_bad_jobs_are_refused_with_the_parameter_named(compute: int, comm: int, gpus: int, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        LinkJob(F(compute), F(comm), gpus)
    assert str(exc.value) == message


def test_bad_runs_are_refused_with_their_message() -> None:
    with pytest.raises(ValueError, match="^need at least one job$"):
        simulate_link([], make_policy("fair"))
    with pytest.raises(ValueError, match="^cycles must be >= 1, got 0$"):
        simulate_link(PAIR, make_policy("fair"), cycles=0)
    with pytest.raises(ValueError, match="^levels K must be >= 1, got 0$"):
        simulate_link(PAIR, make_policy("fair"), levels=0)


def test_defaults_are_the_papers_1500_cycles() -> None:
    res = simulate_link([LinkJob(F(1), F(1))], make_policy("fair"))
    assert res.horizon == 1500 * 2 and res.iterations == (1500,)
