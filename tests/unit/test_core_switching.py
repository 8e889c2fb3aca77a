"""The switching rule (leveller.core.switching): hysteresis and dwell on a policy's order, and its
bound against the single-link fluid model."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from leveller.core.policies import JobView, LevellerPolicy
from leveller.core.switching import PAPER, SwitchMemory, SwitchRule, forget, switch_order, top_changed
from leveller.model.shape import JobShape
from leveller.sim.link import simulate_link

NAMES = ("a", "b", "c", "d", "e")


def views(rates: dict[str, float]) -> list[JobView]:
    return [JobView(name, rate=r) for name, r in rates.items()]


def by_rate(rates: dict[str, float]) -> list[str]:
    return LevellerPolicy().order(views(rates))


def test_paper_rule_passes_the_order_through() -> None:
    rates = {"a": 0.5, "b": 0.49}
    memory = SwitchMemory(("a", "b"), {"a": 10.0})
    order, after = switch_order(["b", "a"], views(rates), memory, 10.0, PAPER)
    assert order == ["b", "a"]
    assert after.order == ("b", "a")


def test_hysteresis_keeps_the_top_within_delta_and_yields_beyond() -> None:
    rule = SwitchRule(delta=0.05)
    memory = SwitchMemory(("a", "b"))
    close = {"a": 0.60, "b": 0.56}  # b lower by 0.04 <= delta: a stays on top
    order, memory = switch_order(by_rate(close), views(close), memory, 1.0, rule)
    assert order == ["a", "b"]
    far = {"a": 0.60, "b": 0.54}  # lower by 0.06 > delta: b passes
    order, _ = switch_order(by_rate(far), views(far), memory, 2.0, rule)
    assert order == ["b", "a"]


def test_dwell_protects_a_job_that_just_moved_up() -> None:
    rule = SwitchRule(dwell=5.0)
    memory = SwitchMemory(("a", "b"))
    order, memory = switch_order(["b", "a"], views({"a": 0.6, "b": 0.5}), memory, 10.0, rule)
    assert order == ["b", "a"] and memory.promoted["b"] == 10.0
    # 4.9 s later a is far behind in R, but b moved up less than the dwell ago
    order, memory = switch_order(["a", "b"], views({"a": 0.3, "b": 0.5}), memory, 14.9, rule)
    assert order == ["b", "a"]
    order, _ = switch_order(["a", "b"], views({"a": 0.3, "b": 0.5}), memory, 15.0, rule)
    assert order == ["a", "b"]


def test_profiling_jobs_stay_first_and_new_jobs_enter_where_the_policy_puts_them() -> None:
    rule = SwitchRule(delta=0.1, dwell=100.0)
    memory = SwitchMemory(("a", "b"))
    jobs = [JobView("p", profiling=True), JobView("a", rate=0.5), JobView("b", rate=0.45), JobView("n", rate=0.1)]
    order, memory = switch_order(LevellerPolicy().order(jobs), jobs, memory, 0.0, rule)
    assert order == ["p", "n", "a", "b"]
    assert set(memory.order) == {"p", "n", "a", "b"}


def test_none_passes_through_and_forget_drops_gone_jobs_and_old_promotions() -> None:
    memory = SwitchMemory(("a", "b", "c"), {"a": 0.0, "b": 9.0})
    assert switch_order(None, [], memory, 1.0, SwitchRule(0.1, 1.0)) == (None, memory)
    kept = forget(memory, {"a", "b"}, 10.0, SwitchRule(dwell=5.0))
    assert kept.order == ("a", "b") and dict(kept.promoted) == {"b": 9.0}


@pytest.mark.parametrize("field,value", [("delta", -0.1), ("dwell", float("inf")), ("delta", float("nan"))])
def test_rule_refuses_bad_values(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SwitchRule(**{field: value})


def test_a_memory_of_many_groups_keeps_every_group_place() -> None:
    """The network simulator orders one contention group at a time against one memory."""
    rule = SwitchRule(delta=0.01)
    memory = SwitchMemory(("x", "a", "y", "b"))
    order, memory = switch_order(["b", "a"], views({"a": 0.5, "b": 0.3}), memory, 1.0, rule)
    assert order == ["b", "a"]
    assert memory.order == ("x", "b", "y", "a")


def test_top_changed_counts_only_reorderings_of_the_same_jobs() -> None:
    assert top_changed(["a", "b"], ["b", "a"])
    assert not top_changed(["a", "b"], ["a", "b"])
    assert not top_changed(["a"], ["b", "a"])  # a job came: no re-ranking of the same jobs
    assert not top_changed(None, ["a", "b"])


rates_st = st.dictionaries(st.sampled_from(NAMES), st.floats(0, 1), min_size=2, max_size=5)


@given(before=rates_st, data=st.data(), delta=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
       dwell=st.sampled_from([0.0, 1.0, 5.0]))
def test_every_job_passed_was_passed_by_more_than_delta(before: dict[str, float], data: st.DataObject,
                                                       delta: float, dwell: float) -> None:
    rule = SwitchRule(delta, dwell)
    assume(not rule.is_paper)  # the paper's rule follows the policy: ties go by job order
    first, memory = switch_order(by_rate(before), views(before), SwitchMemory(), 0.0, rule)
    after = {n: data.draw(st.floats(0, 1)) for n in before}
    order, _ = switch_order(by_rate(after), views(after), memory, 10.0, rule)
    assert sorted(order) == sorted(first)
    for i, ahead in enumerate(order):
        for behind in order[i + 1:]:
            if first.index(behind) < first.index(ahead):  # ``ahead`` overtook ``behind``
                assert after[ahead] < after[behind] - delta


@given(steps=st.lists(st.dictionaries(st.sampled_from(NAMES[:3]), st.floats(0, 1), min_size=3, max_size=3),
                      min_size=2, max_size=30),
       dwell=st.sampled_from([0.5, 2.0, 7.0]), delta=st.sampled_from([0.0, 0.02]))
def test_the_top_changes_at_most_once_per_dwell(steps: list[dict[str, float]], dwell: float, delta: float) -> None:
    rule = SwitchRule(delta, dwell)
    memory, top_since, last = SwitchMemory(), None, None
    for t, rates in enumerate(steps):
        now = t * 0.5
        order, memory = switch_order(by_rate(rates), views(rates), memory, now, rule)
        assert order is not None
        if last is not None and order[0] != last:
            assert top_since is None or now - top_since >= dwell
            top_since = now
        last = order[0]


jobs_st = st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=2, max_size=4)


@settings(max_examples=40)
@given(jobs=jobs_st, delta=st.sampled_from([0.0, 0.01, 0.05, 0.1]), dwell=st.sampled_from([0, 1, 5, 20]),
       tau=st.sampled_from([0, 1, 3]))
def test_bound_of_the_rule_in_the_fluid_model(jobs: list[tuple[int, int]], delta: float, dwell: int,
                                              tau: int) -> None:
    """min R >= R_lb - delta - (tau + dwell + 2 T_max) / t on one link, where R_lb = 1 / (sum M/T + min C/T)
    is the rate the paper's Theorem 1 guarantees lowest-R-first (the makespan bound C_total + W_min)."""
    link_jobs = [JobShape(Fraction(c), Fraction(m)) for c, m in jobs]
    result = simulate_link(link_jobs, LevellerPolicy(tau=tau), cycles=200, switching=SwitchRule(delta, dwell))
    r_lb = min(1.0, 1 / (sum(float(j.comm / j.ideal) for j in link_jobs)
                         + min(float(j.compute / j.ideal) for j in link_jobs)))
    t_max = float(max(j.ideal for j in link_jobs))
    assert float(result.min) >= r_lb - delta - (tau + dwell + 2 * t_max) / float(result.horizon)


def test_the_rule_cuts_top_changes_at_a_small_cost_on_the_paper_pair() -> None:
    """Fig. 3's pair: the paper's rule changes the top at almost every iteration end; delta 0.02 and a
    dwell of 5 units cut that twentyfold and keep both jobs within 0.02 of 6/7."""
    pair = [JobShape(Fraction(1), Fraction(1)), JobShape(Fraction(1), Fraction(2))]
    paper = simulate_link(pair, LevellerPolicy(), cycles=600)
    sticky = simulate_link(pair, LevellerPolicy(), cycles=600, switching=SwitchRule(0.02, 5))
    assert paper.top_job_changes > 20 * sticky.top_job_changes > 0
    assert all(abs(float(r) - 6 / 7) < 0.02 for r in sticky.rates)


def test_floor_in_the_link_model_gives_a_demoted_job_its_share() -> None:
    """Two 1:1 jobs, job 1 on top (static Crux by job order), floor 1/10: at t = 1 both send; job 1 at
    9/10 ends its communication at 1 + 10/9 = 19/9, job 2 has sent 1/9 and ends at 19/9 + 8/9 = 3.
    Without the floor job 2 waits ([1, 2)) and job 1 ends at 2."""
    from leveller.core.policies import CruxPolicy

    pair = [JobShape(Fraction(1), Fraction(1)), JobShape(Fraction(1), Fraction(1))]
    floor = simulate_link(pair, CruxPolicy(), cycles=2, record_ends=True, floor=Fraction(1, 10),
                          record_until=Fraction(3))
    assert floor.ends[0][0] == Fraction(19, 9) and floor.ends[1][0] == 3
    kinds = {(s.job, s.start): s.kind for s in floor.segments}
    assert kinds[(1, Fraction(1))] == "share"
    strict = simulate_link(pair, CruxPolicy(), cycles=2, record_ends=True, record_until=Fraction(3))
    assert strict.ends[0][0] == 2 and strict.ends[1][0] == 3
    assert {(s.job, s.start): s.kind for s in strict.segments}[(1, Fraction(1))] == "wait"
    with pytest.raises(ValueError, match="floor"):
        simulate_link(pair, CruxPolicy(), cycles=2, floor=Fraction(1))


def test_the_rule_leaves_policies_that_do_not_order_by_rate_alone() -> None:
    """Crux's order is static by GPU intensity: the rule, which reorders by R, must not touch it (it
    once turned a live Crux run into a levelled one: 27 top changes, every job at 0.48)."""
    from leveller.core.policies import CruxPolicy, FairPolicy
    from leveller.core.switching import applies_to

    assert applies_to(LevellerPolicy()) and not applies_to(CruxPolicy()) and not applies_to(FairPolicy())
    pair = [JobShape(Fraction(1), Fraction(1)), JobShape(Fraction(1), Fraction(2))]
    plain = simulate_link(pair, CruxPolicy(), cycles=100)
    ruled = simulate_link(pair, CruxPolicy(), cycles=100, switching=SwitchRule(0.02, 2))
    assert ruled.rates == plain.rates and ruled.top_job_changes == 0


def test_a_crux_controller_keeps_its_static_order_under_the_default_rule() -> None:
    from leveller.controller.paths import SingleLinkPaths
    from leveller.controller.service import Controller
    from leveller.core.policies import CruxPolicy
    from leveller.core.qos import default_level_map
    from leveller.core.switching import DEFAULT

    crux = Controller(SingleLinkPaths(), CruxPolicy(), default_level_map(2), 0.1, switching=DEFAULT)
    assert crux.switching.is_paper
    assert Controller(SingleLinkPaths(), LevellerPolicy(), default_level_map(2), 0.1,
                      switching=DEFAULT).switching == DEFAULT


@pytest.mark.parametrize("field", ["delta", "dwell"])
@pytest.mark.parametrize("value", [True, "1", None])
def test_rule_refuses_non_numbers_naming_the_field(field: str, value: object) -> None:
    """A bool or a non-number is a ValueError naming the field (not a TypeError, not accepted)."""
    with pytest.raises(ValueError) as info:
        SwitchRule(**{field: value})  # type: ignore[arg-type]
    assert str(info.value) == f"switching {field} = {value!r} is invalid; a finite number >= 0"


def test_forget_drops_a_promotion_exactly_dwell_old() -> None:
    """A promotion protects for less than the dwell: at exactly the dwell it no longer does (and
    _passes lets the job be passed), so forget drops it."""
    memory = SwitchMemory(("a", "b"), {"a": 5.0, "b": 5.5})
    kept = forget(memory, {"a", "b"}, 10.0, SwitchRule(dwell=5.0))
    assert dict(kept.promoted) == {"b": 5.5}


def test_a_job_lower_by_exactly_delta_does_not_pass() -> None:
    """Hysteresis is strict: R lower by more than delta (0.25, exact in binary) moves a job ahead."""
    rule = SwitchRule(delta=0.25)
    exact = {"a": 0.75, "b": 0.5}
    assert switch_order(["b", "a"], views(exact), SwitchMemory(("a", "b")), 1.0, rule)[0] == ["a", "b"]
    beyond = {"a": 0.75, "b": 0.4999}
    assert switch_order(["b", "a"], views(beyond), SwitchMemory(("a", "b")), 1.0, rule)[0] == ["b", "a"]


def test_a_job_far_behind_moves_up_past_every_job_it_beats() -> None:
    """One decision moves a job up as many places as its R allows (an insertion, not one swap)."""
    rates = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.05}
    order, memory = switch_order(by_rate(rates), views(rates), SwitchMemory(("a", "b", "c", "d")), 5.0,
                                 SwitchRule(delta=0.01))
    assert order == ["d", "a", "b", "c"]
    assert memory.promoted == {"d": 5.0}


def test_a_profiling_job_stays_pinned_at_the_front_even_with_a_rate() -> None:
    """A job whose ideal time is being measured is never re-ranked by R, and appears once."""
    jobs = [JobView("p", rate=0.9, profiling=True), JobView("a", rate=0.2), JobView("b", rate=0.5)]
    order, memory = switch_order(["p", "a", "b"], jobs, SwitchMemory(("a", "p", "b")), 1.0, SwitchRule(delta=0.01))
    assert order == ["p", "a", "b"]
    assert memory.order.count("p") == 1


def test_the_paper_rule_keeps_the_promotions_it_was_given() -> None:
    memory = SwitchMemory(("a", "b"), {"a": 3.0})
    _, after = switch_order(["b", "a"], views({"a": 0.5, "b": 0.4}), memory, 4.0, PAPER)
    assert after.promoted == {"a": 3.0}
