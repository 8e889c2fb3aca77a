"""Exact outputs of the core's data builders: tc commands, queue configs, DSCP tables, flow keys, the
flow's dictionaries the SDN API serves, and every refusal's message (Crux, CASSINI, the cycle bound,
the profiler included), with the values at each bound accepted.

These are what other programs read (tc, OVSDB, the HTTP API's clients, a user reading an error),
so they are pinned as literal values written from the contracts, not recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction as F
from typing import Any

import pytest

from leveller.core import crux
from leveller.core.bound import cycle_bound, fraction_lcm
from leveller.core.cassini import CircleJob, compatibility, link_rotations, unified_period
from leveller.core.paths import choose_path, flow_from_mapping, graph, shortest_paths
from leveller.core.profiling import IdealTimeProfiler, estimate_ideal_time, next_reprofile_time
from leveller.core.qos import (
    LevelMap,
    QueueConfig,
    default_level_map,
    dscp_levels,
    htb_classid,
    level_map_from_dict,
    queue_configs,
    tc_dscp_filters,
)
from leveller.core.topology import preset
from leveller.model.errors import UserError
from leveller.model.flow import flow_key, stable_hash
from leveller.model.shape import JobShape


def test_tc_filters_for_two_levels() -> None:
    lm = LevelMap(dscp=(0, 46), queue=(0, 1))
    assert tc_dscp_filters("s1-p1", lm) == [
        ["tc", "filter", "del", "dev", "s1-p1", "parent", "1:"],  # a flush (the kernel refuses one naming a protocol)
        # TCP shorter than 128 bytes (IPv4 total length at offset 2, IPv6 payload length at 4): the control queue 2
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
         "protocol", "6", "0xff", "match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "1:3"],
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ipv6", "prio", "2", "u32", "match", "ip6",
         "protocol", "6", "0xff", "match", "u16", "0x0000", "0xff80", "at", "4", "flowid", "1:3"],
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ip", "prio", "3", "u32", "match", "ip",
         "dsfield", "0x00", "0xfc", "flowid", "1:1"],
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ip", "prio", "4", "u32", "match", "ip",
         "dsfield", "0xb8", "0xfc", "flowid", "1:2"],
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ipv6", "prio", "5", "u32", "match",
         "ip6", "priority", "0x00", "0xfc", "flowid", "1:1"],
        ["tc", "filter", "add", "dev", "s1-p1", "parent", "1:", "protocol", "ipv6", "prio", "6", "u32", "match",
         "ip6", "priority", "0xb8", "0xfc", "flowid", "1:2"],
    ]


def test_htb_class_of_a_queue_is_hex() -> None:
    assert [htb_classid(q) for q in (0, 1, 9, 15)] == ["1:1", "1:2", "1:a", "1:10"]


def test_queue_configs_priorities_and_rates() -> None:
    # burst: 10 ms of the ceiling (100 Mbit/s -> 1,000,000 bits); no rate, no burst (the switch's default);
    # floor 0 (pure strict priority): every queue a token guaranteed rate, a thousandth of the link
    # the control queue (after the levels) is served first (HTB priority 0) and guaranteed 5 % of the link
    assert queue_configs(3, 100.0, floor=0.0) == [QueueConfig(0, 3, 100_000, 100_000_000, 1_000_000),
                                       QueueConfig(1, 2, 100_000, 100_000_000, 1_000_000),
                                       QueueConfig(2, 1, 100_000, 100_000_000, 1_000_000),
                                       QueueConfig(3, 0, 5_000_000, 100_000_000, 1_000_000)]
    assert queue_configs(2, 1.0, floor=0.0) == [QueueConfig(0, 2, 12_000, 1_000_000, 10_000),
                                     QueueConfig(1, 1, 12_000, 1_000_000, 10_000),
                                     QueueConfig(2, 0, 50_000, 1_000_000, 10_000)]
    # with a floor the control queue's 5 % comes out of the top's share: 100 - 2 x 10 - 5 = 75 Mbit/s
    assert [q.min_rate_bps for q in queue_configs(3, 100.0, floor=0.1)] == [10_000_000, 10_000_000, 75_000_000,
                                                                            5_000_000]
    # the floors leave 4 Mbit/s: the control queue takes at most half of it
    assert [q.min_rate_bps for q in queue_configs(2, 100.0, floor=0.96)] == [96_000_000, 2_000_000, 2_000_000]
    assert queue_configs(1, None) == [QueueConfig(0, 1, 12_000, None, None), QueueConfig(1, 0, 12_000, None, None)]
    assert queue_configs(1, 50.5)[0].max_rate_bps == 50_500_000 and queue_configs(1, 50.5)[0].min_rate_bps == 50_500


def test_dscp_table_covers_every_value() -> None:
    table = dscp_levels(LevelMap(dscp=(10, 20, 46), queue=(0, 1, 2)))
    assert len(table) == 64
    assert (table[10], table[20], table[46]) == (0, 1, 2)
    assert [d for d in range(64) if table[d] != 0] == [20, 46]
    assert dscp_levels(default_level_map(4)) == tuple({8: 1, 16: 2, 24: 3}.get(d, 0) for d in range(64))


def test_level_map_lookups_and_dict() -> None:
    lm = LevelMap(dscp=(0, 8, 16), queue=(0, 1, 2))
    assert [lm.dscp_for_level(level) for level in range(3)] == [0, 8, 16]
    for bad in (-1, 3):
        with pytest.raises(UserError) as exc:
            lm.dscp_for_level(bad)
        assert str(exc.value) == f"level = {bad} is invalid; 0..2"
    assert lm.queue_for_dscp(16) == 2 and lm.queue_for_dscp(46) == 0
    assert lm.to_dict() == {"levels": 3, "dscp": [0, 8, 16], "queue": [0, 1, 2]}
    assert default_level_map(2) == LevelMap(dscp=(0, 8), queue=(0, 1))


@pytest.mark.parametrize("levels", [0, 9, True, 2.0, "4"])
def test_default_level_map_refuses(levels: object) -> None:
    with pytest.raises(UserError) as exc:
        default_level_map(levels)  # type: ignore[arg-type]
    assert str(exc.value) == f"levels = {levels!r} is invalid; an integer 1..8"


@pytest.mark.parametrize("data,message", [
    ({}, "qos: dscp = None is invalid; a list of 1..8 values, index = level"),
    ({"dscp": "0,8"}, "qos: dscp = '0,8' is invalid; a list of 1..8 values, index = level"),
    ({"dscp": []}, "qos: dscp = [] is invalid; a list of 1..8 values, index = level"),
    ({"dscp": list(range(9))}, "qos: dscp = [0, 1, 2, 3, 4, 5, 6, 7, 8] is invalid; a list of 1..8 values, "
                               "index = level"),
    ({"dscp": [0, 64]}, "qos: dscp value 64 is invalid; integers 0..63"),
    ({"dscp": [0, -1]}, "qos: dscp value -1 is invalid; integers 0..63"),
    ({"dscp": [0, True]}, "qos: dscp value True is invalid; integers 0..63"),
    ({"dscp": [8, 8]}, "qos: dscp = [8, 8] is invalid; values must be distinct"),
    ({"dscp": [0, 8], "queue": [0]}, "qos: queue = [0] is invalid; one queue per level (2)"),
    ({"dscp": [0, 8], "queue": 5}, "qos: queue = 5 is invalid; one queue per level (2)"),
    ({"dscp": [0, 8], "queue": [0, 2]}, "qos: queue value 2 is invalid; integers 0..1"),
    ({"dscp": [0, 8], "queue": [0, -1]}, "qos: queue value -1 is invalid; integers 0..1"),
    ({"dscp": [0, 8], "queue": [False, 1]}, "qos: queue value False is invalid; integers 0..1"),
    ({"dscp": [0, 8], "queue": [1, 0]}, "qos: queue = [1, 0] is invalid; a higher level may not get a lower queue"),
])
def test_level_map_from_dict_refuses_with_its_message(data: dict, message: str) -> None:
    with pytest.raises(UserError) as exc:
        level_map_from_dict(data)
    assert str(exc.value) == message


def test_level_map_from_dict_accepts() -> None:
    assert level_map_from_dict({"dscp": [0, 46]}) == LevelMap(dscp=(0, 46), queue=(0, 1))
    assert level_map_from_dict({"dscp": [0, 10, 46], "queue": [0, 0, 2]}) == LevelMap((0, 10, 46), (0, 0, 2))
    assert level_map_from_dict({"dscp": [63] * 1 + list(range(7))}).levels == 8


@pytest.mark.parametrize("args,message", [
    (("10.0.0.1", "10.0.0.2", 0, 0, 256), "flow: proto = 256 is invalid; tcp, udp, icmp or 0..255"),
    (("10.0.0.1", "10.0.0.2", 0, 0, -1), "flow: proto = -1 is invalid; tcp, udp, icmp or 0..255"),
    (("10.0.0.1", "10.0.0.2", 0, 0, "sctp"), "flow: proto = 'sctp' is invalid; tcp, udp, icmp or 0..255"),
    (("10.0.0.1", "10.0.0.2", 65536, 0), "flow: sport = 65536 is invalid; an integer 0..65535"),
    (("10.0.0.1", "10.0.0.2", 0, -1), "flow: dport = -1 is invalid; an integer 0..65535"),
    (("10.0.0.1", "10.0.0.2", 0, "http"), "flow: dport = 'http' is invalid; an integer 0..65535"),
    (("10.0.0.1", "10.0.0.2", True, 0), "flow: sport = True is invalid; an integer 0..65535"),
    (("10.0.0.1", "10.0.0.2", 1.5, 0), "flow: sport = 1.5 is invalid; an integer 0..65535"),
    (("10.0.0.256", "10.0.0.2"), "flow: src = '10.0.0.256' is invalid; an IPv4 or IPv6 address"),
    (("10.0.0.1", "host"), "flow: dst = 'host' is invalid; an IPv4 or IPv6 address"),
])
def test_flow_key_refuses_with_its_message(args: tuple, message: str) -> None:
    with pytest.raises(UserError) as exc:
        flow_key(*args)
    assert str(exc.value) == message


def test_flow_key_edges_are_accepted() -> None:
    assert flow_key("10.0.0.1", "10.0.0.2", 65535, 0, 0).proto == 0
    assert flow_key("10.0.0.1", "10.0.0.2", 65535, 65535, 255).proto == 255
    assert flow_key("10.0.0.1", "10.0.0.2", 65535, 65535, "udp") == flow_key("10.0.0.1", "10.0.0.2", 65535, 65535, 17)
    assert flow_key("10.0.0.1", "10.0.0.2", "80", "443", "6") == flow_key("10.0.0.1", "10.0.0.2", 80, 443, "TCP")


def test_flow_from_a_query_mapping() -> None:
    assert flow_from_mapping({"src": "10.0.0.1", "dst": "10.0.0.2"}) == flow_key("10.0.0.1", "10.0.0.2", 0, 0, "tcp")
    full = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": "5", "dport": "6", "proto": "udp"}
    assert flow_from_mapping(full) == flow_key("10.0.0.1", "10.0.0.2", 5, 6, 17)
    for missing in ("src", "dst"):
        with pytest.raises(UserError) as exc:
            flow_from_mapping({k: v for k, v in full.items() if k != missing})
        assert str(exc.value) == f"flow: missing {missing!r}; give src, dst, sport, dport, proto"


def test_reversed_flow_and_dicts() -> None:
    f = flow_key("10.0.0.1", "10.0.0.6", 40000, 5201, "udp")
    assert f.reversed() == flow_key("10.0.0.6", "10.0.0.1", 5201, 40000, "udp")
    assert f.to_dict() == {"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 40000, "dport": 5201, "proto": 17}
    p = choose_path(preset("dumbbell"), flow_key("10.0.0.1", "10.0.0.3", 5000, 5201))
    assert p.to_dict() == {
        "flow": {"src": "10.0.0.1", "dst": "10.0.0.3", "sport": 5000, "dport": 5201, "proto": 6},
        "src_host": "h1", "dst_host": "h3", "nodes": ["h1", "s1", "s2", "h3"], "links": ["h1>s1", "s1>s2", "s2>h3"],
        "hops": [{"switch": "s1", "dpid": 1, "in_port": 2, "out_port": 1},
                 {"switch": "s2", "dpid": 2, "in_port": 1, "out_port": 2}],
        "choices": 1}


def test_hashes_are_64_bit_and_cookies_leave_the_top_bit_clear() -> None:
    keys = [flow_key("10.0.0.1", "10.0.0.2", sport, 80) for sport in range(1000, 1400)]
    hashes = [stable_hash(k) for k in keys]
    assert all(0 <= h < 2**64 for h in hashes) and max(hashes) >= 2**63  # the full 64 bits are used
    assert len(set(hashes)) == len(keys)
    for k, h in zip(keys, hashes):
        assert k.cookie() == h & (2**63 - 1) and k.cookie() < 2**63
    assert any(k.cookie() != h for k, h in zip(keys, hashes))  # some had the top bit set, now cleared


def test_shortest_paths_index_bounds_and_unreachable() -> None:
    ls = preset("leafspine")
    g = graph(ls)
    sp = shortest_paths(g, "leaf1", "leaf3")
    assert sp.count == 2 and sorted(sp.first(5)) == [("leaf1", "spine1", "leaf3"), ("leaf1", "spine2", "leaf3")]
    assert [sp.nth(i) for i in range(2)] == sorted(sp.first(2))
    for bad in (-1, 2):
        with pytest.raises(IndexError) as exc:
            sp.nth(bad)
        assert str(exc.value) == f"path index {bad} outside 0..1"
    g.add_node("island")
    lonely = shortest_paths(g, "leaf1", "island")
    assert lonely.count == 0 and lonely.first(3) == []
    assert (lonely.src, lonely.dst, dict(lonely.next_hops), dict(lonely.paths_to_dst)) == ("leaf1", "island", {}, {})


def test_flow_key_defaults_are_tcp_without_ports() -> None:
    from leveller.model.flow import FlowKey

    assert flow_key("10.0.0.1", "10.0.0.2") == FlowKey("10.0.0.1", "10.0.0.2", 0, 0, 6)
    assert flow_key("10.0.0.1", "10.0.0.2", 5) == FlowKey("10.0.0.1", "10.0.0.2", 5, 0, 6)


# ---- refusals of the scheduling core (Crux, CASSINI, the cycle bound, the profiler) ----------------

J = crux.CruxJob
A, B = J("a", JobShape(2.0, 1.0)), J("b", JobShape(1.0, 1.0, 2))
CA = CircleJob("a", 1.0, ((0.0, 0.5, 1.0),))


@pytest.mark.parametrize("call,exc,message", [
    (lambda: J("", JobShape(1.0, 1.0)), UserError, "job name must be a non-empty string"),
    (lambda: J("a", JobShape(1.0, 1.0, 0)), ValueError, "GPUs G must be >= 1, got 0"),  # the shape's rule
    (lambda: J("a", JobShape(-1.0, 1.0)), ValueError, "compute time C must be > 0, got -1.0"),
    (lambda: J("a", JobShape(1.0, 0.0)), ValueError, "communication time M must be > 0, got 0.0"),
    (lambda: J("a", JobShape(1.0, 1.0, 1, 1.5)), ValueError, "slack S must be in 0..C (1.0), got 1.5"),
    (lambda: J("a", JobShape(1.0, 1.0, 1, -0.1)), ValueError, "slack S must be in 0..C (1.0), got -0.1"),
    (lambda: J("a", JobShape(1.0, 1.0), traffic=-1), UserError, "job 'a': traffic must be >= 0, got -1"),
    (lambda: crux.gpu_intensity(0, 1.0, 1.0), UserError, "gpus must be >= 1, got 0"),
    (lambda: crux.link_times(A, B, 0), UserError, "window_s must be > 0, got 0"),
    (lambda: crux.correction_factors([A, J("a", JobShape(1.0, 1.0))]), UserError,
     "job names must be unique, repeated: ['a']"),
    (lambda: crux.correction_factors([A, B, A, B, J("c", JobShape(1.0, 1.0))]), UserError,
     "job names must be unique, repeated: ['a', 'b']"),
    (lambda: crux.reference_job([]), UserError, "need at least one job"),
    (lambda: crux.correction_factors([A, B], window_iterations=0), UserError,
     "window_iterations must be >= 1, got 0"),
    (lambda: crux.correction_factors([A, B], k_max=0.5), UserError, "k_max must be >= 1, got 0.5"),
    (lambda: crux.least_congested_path([], {}, {"l": 1.0}), UserError, "need at least one candidate path"),
    (lambda: crux.least_congested_path([["l"]], {}, {"l": 1.0}, demand=-1), UserError, "demand must be >= 0, got -1"),
    (lambda: crux.least_congested_path([["m"]], {}, {"l": 1.0}), UserError, "link 'm' has no capacity"),
    (lambda: crux.least_congested_path([["l"]], {}, {"l": 0.0}), UserError,
     "capacity of link 'l' must be > 0, got 0.0"),
    (lambda: crux.assign_paths([("r", [["l"]], 1.0), ("r", [["l"]], 1.0)], {"l": 10.0}), UserError,
     "request 'r' appears twice"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {}, 0), UserError, "levels k must be >= 1, got 0"),
    (lambda: crux.max_k_cut_dp(["a", "a"], {}, 1), UserError, "order repeats a node: ['a', 'a']"),
    (lambda: crux.max_k_cut_dp(["a"], {("a", "z"): 1.0}, 1), UserError, "edge ('a', 'z') has a node outside the order"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {("b", "a"): 1.0}, 1), UserError,
     "edge ('b', 'a') goes backwards: the order is not topological"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {("a", "b"): -1.0}, 1), UserError,
     "edge ('a', 'b') weight must be >= 0, got -1.0"),
    (lambda: crux.contention_dag({"a": 1.0}, {"a": 1.0, "b": 1.0}, [("a", "b")]), UserError,
     "contending job 'b' has no priority"),
    (lambda: crux.contention_dag({"a": 1.0, "b": 1.0}, {"a": 1.0}, [("a", "b")]), UserError,
     "contending job 'b' has no intensity"),
    (lambda: crux.compress_levels({"a": 1.0}, {"a": 1.0}, [], 0), UserError, "levels k must be >= 1, got 0"),
    (lambda: crux.compress_levels({"a": 1.0}, {"a": 1.0}, [], 1, samples=0), UserError,
     "samples must be >= 1, got 0"),
    (lambda: CircleJob("", 1.0, ()), UserError, "circle job name must be a non-empty string"),
    (lambda: CircleJob("a", 0.0, ()), UserError, "job 'a': period_s must be > 0, got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5),)), UserError,
     "job 'a': an arc is (start_s, duration_s, demand_fraction), got (0.0, 0.5)"),
    (lambda: CircleJob("a", 1.0, ((1.0, 0.5, 1.0),)), UserError,
     "job 'a': arc start_s must be in [0, period_s), got 1.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.0, 1.0),)), UserError,
     "job 'a': arc duration_s must be in (0, period_s], got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 1.5, 1.0),)), UserError,
     "job 'a': arc duration_s must be in (0, period_s], got 1.5"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5, 0.0),)), UserError,
     "job 'a': arc demand_fraction must be in (0, 1], got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5, 1.5),)), UserError,
     "job 'a': arc demand_fraction must be in (0, 1], got 1.5"),
    (lambda: unified_period([1.0], 0.0, 10.0), UserError, "quantum_s must be > 0, got 0.0"),
    (lambda: unified_period([1.0], 0.1, 0.0), UserError, "lcm_cap must be > 0, got 0.0"),
    (lambda: unified_period([], 0.1, 10.0), UserError, "need at least one period"),
    (lambda: unified_period([1.0, 0.0], 0.1, 10.0), UserError, "periods must be > 0, got 0.0"),
    (lambda: compatibility([], {}, 0.1, 10.0), UserError, "need at least one job on the link"),
    (lambda: compatibility([CA, CA], {}, 0.1, 10.0), UserError,
     "a job appears twice on one link (merge its arcs): ['a', 'a']"),
    (lambda: compatibility([CA], {"z": 0.1}, 0.1, 10.0), UserError, "rotations given for jobs not on the link: ['z']"),
    (lambda: link_rotations([CA], 0.1, 10.0, angles=0), UserError, "angles must be >= 1, got 0"),
    (lambda: link_rotations([CA], 0.1, 10.0, sweeps=-1), UserError, "sweeps must be >= 0, got -1"),
    (lambda: fraction_lcm([]), ValueError, "need positive values, got []"),
    (lambda: fraction_lcm([F(1), F(0)]), ValueError, "need positive values, got [Fraction(1, 1), Fraction(0, 1)]"),
    (lambda: cycle_bound([]), ValueError, "need at least one job"),
    (lambda: estimate_ideal_time([]), ValueError, "no iteration durations measured; need at least one"),
    (lambda: estimate_ideal_time([1.0, 0.0]), ValueError, "iteration durations must be > 0, got 0.0"),
    (lambda: next_reprofile_time(0, 0, 0.5), ValueError, "mean_interval must be > 0, got 0"),
    (lambda: next_reprofile_time(0, 10, 1.0), ValueError, "u must be in [0, 1), got 1.0"),
    (lambda: next_reprofile_time(0, 10, -0.1), ValueError, "u must be in [0, 1), got -0.1"),
    (lambda: IdealTimeProfiler(samples=0), ValueError, "samples must be >= 1, got 0"),
])
def test_refusal_message(call: Callable[[], Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


def test_values_at_the_bounds_are_accepted() -> None:
    assert crux.gpu_intensity(1, 0.0, 1e-9) == 0.0  # no compute, tiny communication
    assert J("a", JobShape(2.0, 0.5, 3)).intensity == 12.0  # G * C / M from the shape
    assert J("a", JobShape(2.0, 1.0, 1, 2.0)).ideal_s == 2.0  # all communication hidden
    assert J("a", JobShape(2.0, 3.0, 1, 1.0)).ideal_s == 4.0
    assert J("a", JobShape(1.0, 1.0), traffic=0).volume == 0 and J("a", JobShape(1.0, 2.0)).volume == 2.0
    assert crux.correction_factors([A, B], window_iterations=1, k_max=1.0) == {"a": 1.0, "b": 1.0}
    assert CircleJob("a", 1.0, ((0.999, 1.0, 1.0),)).arcs == ((0.999, 1.0, 1.0),)
    assert next_reprofile_time(100, 10, 0.0) == 105 and next_reprofile_time(100, 10, 0.5) == 110
    assert estimate_ideal_time([3.0, 1.0, 2.0, 100.0]) == 2.5
    assert fraction_lcm([F(1, 2), F(1, 3)]) == F(1) and fraction_lcm([F(2, 3), F(3, 4)]) == F(6)
    b = cycle_bound([(F(1), F(1)), (F(1), F(2))])
    assert (b.lcm, b.iterations, b.comm_total, b.work_min, b.work_max) == (F(6), (3, 2), F(7), F(2), F(3))
    assert b.guaranteed == F(6, 9) and b.optimum_ceiling == F(6, 7)


def test_least_congested_path_prefers_the_lowest_busiest_link_then_the_lowest_sum() -> None:
    cap = {"a": 10.0, "b": 10.0, "c": 10.0, "d": 20.0}
    assert crux.least_congested_path([["a"], ["b"]], {"a": 5.0}, cap) == 1
    # same max, lower sum
    assert crux.least_congested_path([["a", "b"], ["c"]], {"a": 1.0, "b": 1.0, "c": 1.0}, cap) == 1
    assert crux.least_congested_path([["a"], ["d"]], {"a": 4.0, "d": 9.0}, cap, demand=1.0) == 0  # 0.5 vs 0.5: first
    assert crux.least_congested_path([["a"]], {}, cap) == 0
    chosen, load = crux.assign_paths([("x", [["a"], ["b"]], 3.0), ("y", [["a"], ["b"]], 2.0)], cap, {"a": 1.0})
    assert chosen == {"x": 1, "y": 0} and load == {"a": 3.0, "b": 3.0}


def test_max_k_cut_edges_ties_and_the_empty_order() -> None:
    with pytest.raises(UserError, match=r"^edge \('a', 'a'\) goes backwards: the order is not topological$"):
        crux.max_k_cut_dp(["a"], {("a", "a"): 1.0}, 2)
    assert crux.max_k_cut_dp(["a", "b"], {("a", "b"): 0.0}, 2) == (0.0, {"a": 1, "b": 1})  # zero weight: no cut
    assert crux.max_k_cut_dp(["a", "b"], {("a", "b"): 0.5}, 2) == (0.5, {"a": 1, "b": 0})
    assert crux.max_k_cut_dp([], {}, 3) == (0.0, {})
    # a split that cuts nothing more is not made: c stays in b's group (ties keep fewer groups)
    assert crux.max_k_cut_dp(["a", "b", "c"], {("a", "b"): 2.0}, 3) == (2.0, {"a": 2, "b": 1, "c": 1})


def test_rate_is_exact_for_exact_inputs_and_float_otherwise() -> None:
    from fractions import Fraction

    from leveller.core.rate import progress_rate

    at_start = progress_rate(3, 2, 7, 7)
    assert at_start == 0 and isinstance(at_start, Fraction)
    at_start_f = progress_rate(3, 2.0, 7.0, 7.0)
    assert at_start_f == 0.0 and isinstance(at_start_f, float)
    assert progress_rate(3, 0.5, 0, 2) == 0.75
