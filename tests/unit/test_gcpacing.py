"""The controller process's garbage collection (leveller.controller.gcpacing): young-only automatic
collection, the rest paced between decisions, frozen in between and thawed now and then."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from leveller.controller.gcpacing import NEVER, SWITCH_INTERVAL_S, YOUNG_THRESHOLD, GcPacer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Node:
    """Half of a reference cycle: reference counting alone never frees it."""

    def __init__(self) -> None:
        self.other: Node | None = None


def old_garbage_cycle() -> weakref.ref[Node]:
    """A cycle that outlived a young collection (so it sits in an older generation), then died."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    gc.collect(0)  # alive here: promoted out of the young generation
    return weakref.ref(a)


@pytest.fixture
def pacer_parts() -> Iterator[tuple[GcPacer, Clock]]:
    clock = Clock()
    pacer = GcPacer(every_s=60, thaw_every=3, clock=clock)
    before = gc.get_threshold(), sys.getswitchinterval()
    pacer.install()
    try:
        yield pacer, clock
    finally:
        pacer.uninstall()
        assert (gc.get_threshold(), sys.getswitchinterval()) == before
        assert gc.get_freeze_count() == 0


def test_install_collects_only_the_young_generation_automatically(pacer_parts: tuple[GcPacer, Clock]) -> None:
    assert gc.get_threshold() == (YOUNG_THRESHOLD, NEVER, NEVER)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    ref = old_garbage_cycle()
    for _ in range(50):
        [Node() for _ in range(YOUNG_THRESHOLD * 4)]  # young collections run, never reaching it
    assert ref() is not None


def test_nothing_runs_before_the_period_then_cycles_are_reclaimed(pacer_parts: tuple[GcPacer, Clock]) -> None:
    pacer, clock = pacer_parts
    ref = old_garbage_cycle()
    clock.t += 59.9
    assert pacer.after_step() is False and ref() is not None and pacer.collections == 0
    clock.t += 0.2
    assert pacer.after_step() is True
    assert ref() is None and pacer.collected >= 2
    assert gc.get_freeze_count() > 0  # what lived was frozen
    assert pacer.after_step() is False  # the next one is a period later
    clock.t += 60
    assert pacer.after_step() is True and pacer.collections == 2


def test_a_cycle_that_dies_frozen_is_reclaimed_at_the_next_thaw(pacer_parts: tuple[GcPacer, Clock]) -> None:
    pacer, clock = pacer_parts
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    clock.t += 60
    assert pacer.after_step()  # collection 1: the live cycle is frozen
    del a, b  # it dies while frozen
    clock.t += 60
    assert pacer.after_step() and ref() is not None  # collection 2 leaves the frozen heap alone
    clock.t += 60
    assert pacer.after_step() and ref() is None  # collection 3 (thaw_every = 3) thawed it first


def test_bad_periods_are_refused() -> None:
    with pytest.raises(ValueError, match="every_s must be > 0"):
        GcPacer(every_s=0)
    with pytest.raises(ValueError, match="thaw_every must be >= 1"):
        GcPacer(thaw_every=0)


def test_the_controller_paces_after_every_step_even_a_failed_one() -> None:
    from leveller.controller.service import Controller
    from leveller.core.policies import make_policy
    from leveller.core.qos import default_level_map

    class Failing:
        def links(self, flows: object) -> dict[object, object]:
            raise RuntimeError("paths unreachable")

    calls: list[str] = []

    class Recording(GcPacer):
        def after_step(self) -> bool:
            calls.append("paced")
            return False

    ctl = Controller(Failing(), make_policy("leveller"), default_level_map(2), tau_s=1.0,  # type: ignore[arg-type]
                     gc_pacer=Recording())
    ctl.step(1000.0)  # no flows: nothing to route, succeeds
    assert calls == ["paced"]
    from leveller.model.flow import flow_key
    from leveller.model.messages import FlowReport, JobReport, Report

    ctl.report(Report("h1", (JobReport("a", 1, 900.0, 1.0),), (FlowReport(flow_key("10.0.0.1", "10.0.0.2", 1, 2),
                                                                         "a", 10),)), 1000.5)
    with pytest.raises(RuntimeError, match="paths unreachable"):
        ctl.step(1001.0)
    assert calls == ["paced", "paced"]
