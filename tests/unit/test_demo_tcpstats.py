"""nstat's JSON read into the run's TCP counters (leveller.experiments.shared.tcpstats)."""

from __future__ import annotations

from leveller.experiments.shared.tcpstats import difference, parse_nstat


def test_parse_nstat_names_the_two_counters_and_zero_fills() -> None:
    text = '{"kernel":{"TcpRetransSegs":1502,"TcpExtTCPTimeouts":130}}'
    assert parse_nstat(text) == {"retrans_segs": 1502, "timeouts": 130}
    assert parse_nstat('{"kernel":{"TcpRetransSegs":7}}') == {"retrans_segs": 7, "timeouts": 0}


def test_difference_is_after_minus_before() -> None:
    assert difference({"retrans_segs": 10, "timeouts": 3}, {"retrans_segs": 4, "timeouts": 3}) == \
        {"retrans_segs": 6, "timeouts": 0}
