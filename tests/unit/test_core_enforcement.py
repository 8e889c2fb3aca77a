"""Edges of the closed-loop check (leveller.core.enforcement): which ports count, which bytes are expected,
where a verdict flips, and which tolerances are valid."""

from __future__ import annotations

import pytest

from leveller.core.enforcement import QueueCheck, QueueKey, Tolerance, compare, egress_ports, expected_bytes
from leveller.core.qos import default_level_map, dscp_levels

LEVELS = dscp_levels(default_level_map(2))  # DSCP 8 -> level 1, anything else level 0
PORTS = {"s1>s2": ("s1", 3), "s2>h4": ("s2", 4)}
TOL = Tolerance(raise_below=0.5, clear_above=0.8, min_bytes=1000)


def _alarmed(expected: int, counted: int, before: frozenset[QueueKey] = frozenset()) -> bool:
    key = ("s1", 3, 1)
    _, after = compare({key: expected}, {key: counted}, TOL, before)
    return key in after


# ---------------------------------------------------------------------------------------------
# egress ports


def test_only_links_leaving_a_switch_with_a_known_port_are_egress_ports() -> None:
    """A host's own link (even with a port number) and a switch link without one are not judged."""
    ports = egress_ports(["h1>s1", "s1>h1", "s1>s2", "s2>h9", "bogus"], ["s1", "s2"],
                         {("h1", "s1"): 7, ("s1", "h1"): 1, ("s1", "s2"): 2})
    assert ports == {"s1>h1": ("s1", 1), "s1>s2": ("s1", 2)}


def test_egress_ports_of_no_links_is_empty() -> None:
    """Nothing to check on a topology without switch links."""
    assert egress_ports([], ["s1"], {}) == {}
    assert egress_ports(["h1>h2"], [], {("h1", "h2"): 1}) == {}


# ---------------------------------------------------------------------------------------------
# expected bytes


def test_expected_bytes_add_every_flow_on_every_switch_port_it_crosses() -> None:
    """Two flows on level 1 through s1 port 3 add up; the second also counts on s2 port 4."""
    flows = [(("h1>s1", "s1>s2"), 8, 300), (("h2>s1", "s1>s2", "s2>h4"), 8, 1), (("h3>s1", "s1>s2"), 0, 50)]
    assert expected_bytes(flows, PORTS, LEVELS) == {("s1", 3, 1): 301, ("s2", 4, 1): 1, ("s1", 3, 0): 50}


def test_flows_without_bytes_expect_nothing_and_do_not_stop_the_others() -> None:
    """0 (or negative) bytes make no entry at all; flows after them still count."""
    flows = [(("s1>s2",), 8, 0), (("s1>s2",), 0, -5), (("s2>h4",), 8, 2)]
    assert expected_bytes(flows, PORTS, LEVELS) == {("s2", 4, 1): 2}
    assert expected_bytes([], PORTS, LEVELS) == {}


# ---------------------------------------------------------------------------------------------
# compare


def test_a_check_records_the_queue_and_both_byte_counts() -> None:
    """Each judged (switch, port, level) comes back as a QueueCheck with its expected and counted bytes."""
    checks, alarmed = compare({("s2", 4, 1): 2000, ("s1", 3, 0): 5000}, {("s2", 4, 1): 900, ("s1", 3, 0): 5000}, TOL)
    assert checks == [QueueCheck("s1", 3, 0, 5000, 5000), QueueCheck("s2", 4, 1, 2000, 900)]  # sorted by key
    assert alarmed == frozenset({("s2", 4, 1)})
    assert [c.ratio for c in checks] == [1.0, 0.45]


def test_exactly_min_bytes_is_judged_one_less_is_not() -> None:
    """A level carrying exactly ``min_bytes`` is judged; below that it is unknown."""
    key = ("s1", 3, 1)
    checks, alarmed = compare({key: 1000}, {key: 0}, TOL)
    assert [c.expected for c in checks] == [1000] and alarmed == {key}
    checks, alarmed = compare({key: 999}, {key: 0}, TOL)
    assert checks == [] and alarmed == frozenset()


def test_an_unjudged_level_does_not_stop_the_ones_after_it() -> None:
    """Keys are visited in order: a trickle on the first key, or a first key the switch does not count,
    leaves the later ones judged."""
    low, high = ("s1", 3, 0), ("s1", 3, 1)
    checks, alarmed = compare({low: 10, high: 5000}, {low: 0, high: 100}, TOL)
    assert [(c.level, c.counted) for c in checks] == [(1, 100)] and alarmed == {high}
    checks, alarmed = compare({low: 5000, high: 5000}, {high: 100}, TOL)
    assert [(c.level, c.counted) for c in checks] == [(1, 100)] and alarmed == {high}


def test_a_level_the_switch_does_not_count_keeps_its_state() -> None:
    """No counter for a key: not judged, an earlier alarm stays and no new one is raised."""
    key = ("s1", 3, 1)
    checks, alarmed = compare({key: 5000}, {}, TOL, frozenset({key}))
    assert checks == [] and alarmed == {key}
    checks, alarmed = compare({key: 5000}, {}, TOL)
    assert checks == [] and alarmed == frozenset()


def test_raised_strictly_below_raise_below() -> None:
    """Ratio exactly 0.5 is not a mismatch; 0.4999 is."""
    assert not _alarmed(10_000, 5_000)
    assert _alarmed(10_000, 4_999)


def test_cleared_from_clear_above_on_kept_below_it() -> None:
    """An alarm clears at a ratio of exactly 0.8 (and above), and stays at 0.7999."""
    before = frozenset({("s1", 3, 1)})
    assert not _alarmed(10_000, 8_000, before)
    assert _alarmed(10_000, 7_999, before)
    assert not _alarmed(10_000, 7_999)  # between the thresholds nothing new is raised


def test_alarms_of_other_queues_pass_through_untouched() -> None:
    """Raising or clearing one key leaves another alarmed key as it was."""
    other = ("s9", 1, 0)
    key = ("s1", 3, 1)
    _, alarmed = compare({key: 10_000}, {key: 1_000}, TOL, frozenset({other}))
    assert alarmed == {other, key}
    _, alarmed = compare({key: 10_000}, {key: 10_000}, TOL, frozenset({other, key}))
    assert alarmed == {other}


# ---------------------------------------------------------------------------------------------
# tolerance


@pytest.mark.parametrize(("raise_below", "clear_above"), [(0.0, 0.8), (0.8, 0.8), (0.5, 1.5), (0.9, 0.8), (-0.1, 0.5)])
def test_tolerance_needs_0_lt_raise_below_lt_clear_above_le_1(raise_below: float, clear_above: float) -> None:
    """The thresholds must be ordered inside (0, 1]; the error shows both values."""
    message = rf"^need 0 < raise_below \({raise_below}\) < clear_above \({clear_above}\) <= 1$"
    with pytest.raises(ValueError, match=message):
        Tolerance(raise_below=raise_below, clear_above=clear_above)


def test_tolerance_edges_that_are_valid() -> None:
    """clear_above = 1 (a queue must count all it should to clear) and min_bytes = 1 are valid."""
    tol = Tolerance(raise_below=0.99, clear_above=1.0, min_bytes=1)
    assert (tol.clear_above, tol.min_bytes) == (1.0, 1)
    assert Tolerance(min_bytes=2).min_bytes == 2


@pytest.mark.parametrize("min_bytes", [0, -1])
def test_tolerance_needs_at_least_one_byte(min_bytes: int) -> None:
    """min_bytes < 1 would judge idle levels: refused, naming the value."""
    with pytest.raises(ValueError, match=rf"^min_bytes must be >= 1, got {min_bytes}$"):
        Tolerance(min_bytes=min_bytes)
