"""Level -> DSCP -> queue mapping and the strict-priority queue/tc configuration built from it."""

from __future__ import annotations

import pytest

from leveller.core.qos import (
    RESERVED_DSCP,
    default_level_map,
    htb_classid,
    level_map_from_dict,
    queue_configs,
    tc_dscp_filters,
    tc_host_queues,
)
from leveller.errors import UserError


@pytest.mark.parametrize("k", range(1, 9))
def test_defaults_avoid_reserved_dscp_and_keep_unmarked_lowest(k):
    m = default_level_map(k)
    assert m.levels == k and m.dscp[0] == 0
    assert not set(m.dscp) & set(RESERVED_DSCP)
    assert len(set(m.dscp)) == k
    assert [m.queue_for_dscp(m.dscp_for_level(lv)) for lv in range(k)] == list(range(k))


def test_unknown_dscp_goes_to_lowest_queue():
    assert default_level_map(4).queue_for_dscp(46) == 0


def test_more_than_8_levels_rejected():
    with pytest.raises(UserError, match="levels"):
        default_level_map(9)
    with pytest.raises(UserError, match="dscp"):
        level_map_from_dict({"dscp": list(range(9))})
    with pytest.raises(UserError, match="distinct"):
        level_map_from_dict({"dscp": [0, 0]})
    with pytest.raises(UserError, match="0..63"):
        level_map_from_dict({"dscp": [0, 64]})


def test_explicit_map_may_use_ef():
    m = level_map_from_dict({"dscp": [0, 46]})
    assert m.queue_for_dscp(46) == 1


def test_higher_queue_has_higher_htb_priority():
    *qs, control = queue_configs(4, 50, floor=0.0)  # the paper's pure strict priority: token guaranteed rates
    assert [q.htb_priority for q in qs] == [4, 3, 2, 1]
    assert all(q.max_rate_bps == 50_000_000 and 0 < q.min_rate_bps < 1_000_000 for q in qs)
    # the control queue (TCP's ACKs) after the levels, served before all of them, 5 % of 50 Mbit/s guaranteed
    assert (control.queue, control.htb_priority, control.min_rate_bps) == (4, 0, 2_500_000)


def test_tc_filters_map_each_dscp_to_its_htb_class():
    cmds = tc_dscp_filters("s1-p1", default_level_map(4))
    assert cmds[0][:3] == ["tc", "filter", "del"]
    # the control filters first: TCP shorter than 128 bytes -> queue 4 (class 1:5), IPv4 then IPv6
    control = [(c[c.index("protocol") + 1], c[c.index("flowid") + 1]) for c in cmds[1:3]]
    assert control == [("ip", "1:5"), ("ipv6", "1:5")]
    for field, adds in (("dsfield", cmds[3:7]), ("priority", cmds[7:])):  # IPv4 TOS, IPv6 traffic class
        # DSCP 24 (level 3) -> TOS 0x60 -> queue 3 -> class 1:4
        assert {(c[c.index(field) + 1], c[c.index("flowid") + 1]) for c in adds} == \
            {("0x00", "1:1"), ("0x20", "1:2"), ("0x40", "1:3"), ("0x60", "1:4")}
    assert htb_classid(10) == "1:b"


def test_default_level_map_has_four_levels() -> None:
    """Without an argument: 4 levels on CS0..CS3, queue L for level L."""
    m = default_level_map()
    assert m.levels == 4 and m.dscp == (0, 8, 16, 24) and m.queue == (0, 1, 2, 3)


def test_a_single_level_map_is_valid() -> None:
    """One DSCP (one level, one queue) is the smallest valid mapping; none at all is not."""
    m = level_map_from_dict({"dscp": [8]})
    assert m.levels == 1 and m.queue == (0,)
    with pytest.raises(UserError):
        level_map_from_dict({"dscp": []})


def test_queue_min_rate_is_a_whole_thousandth_of_the_port_rate() -> None:
    """12.0015 Mb/s: the guaranteed rate is 12,001 b/s (integer bits, never 12,001.5), at least 12,000."""
    q, _control = queue_configs(1, 12.0015)
    assert q.min_rate_bps == 12_001 and isinstance(q.min_rate_bps, int)
    assert q.max_rate_bps == 12_001_500
    assert [c.min_rate_bps for c in queue_configs(2, None, floor=0.0)] == [12_000, 12_000, 12_000]


def _arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("floor", [0.0, 0.05])
def test_host_queues_are_a_switch_ports_under_the_link_rate(k, floor):
    """A host's egress: root class 1:fffe at the link rate, one HTB class per queue of queue_configs (the
    same guaranteed rates and priorities, ceilinged at the link rate), a FIFO in each, then the DSCP
    filters without their flush; unclassified packets in the lowest level's class."""
    cmds = tc_host_queues("eth0", default_level_map(k), 25.0, floor if k > 1 else 0.0, fifo_packets=77)
    assert cmds[0][:5] == ["tc", "qdisc", "replace", "dev", "eth0"] and _arg(cmds[0], "default") == "1"
    assert _arg(cmds[1], "classid") == "1:fffe" and _arg(cmds[1], "rate") == _arg(cmds[1], "ceil") == "25000000bit"
    classes = [c for c in cmds[2:] if c[:2] == ["tc", "class"]]
    fifos = [c for c in cmds[2:] if c[:2] == ["tc", "qdisc"]]
    filters = [c for c in cmds if c[:2] == ["tc", "filter"]]
    want = queue_configs(k, 25.0, floor if k > 1 else 0.0)
    assert [(_arg(c, "classid"), _arg(c, "parent"), int(_arg(c, "rate")[:-3]), int(_arg(c, "prio")))
            for c in classes] == [(htb_classid(q.queue), "1:fffe", q.min_rate_bps, q.htb_priority) for q in want]
    assert all(_arg(c, "ceil") == "25000000bit" for c in classes)
    assert sum(q.min_rate_bps for q in want) <= 25_000_000  # the guarantees fit in the link
    assert [(_arg(c, "parent"), c[-3:]) for c in fifos] == [(htb_classid(q.queue), ["pfifo", "limit", "77"])
                                                            for q in want]
    assert filters == tc_dscp_filters("eth0", default_level_map(k))[1:]
    assert all(c[0] != "tc" or "del" not in c for c in cmds)  # nothing to flush on a fresh root


@pytest.mark.parametrize(("kwargs", "needle"), [({"rate_mbps": 0.0}, "rate_mbps = 0.0"),
                                                ({"rate_mbps": -5.0}, "rate_mbps = -5.0"),
                                                ({"fifo_packets": 0}, "fifo_packets = 0"),
                                                ({"floor": 0.5}, "floor = 0.5")])
def test_host_queues_refuse_bad_input_naming_it(kwargs, needle):
    args = {"rate_mbps": 25.0, "floor": 0.05, "fifo_packets": 100, **kwargs}
    with pytest.raises(UserError, match=needle.replace(".", r"\.")):
        tc_host_queues("eth0", default_level_map(4), **args)
