"""Every bound of the wire validation, from both sides: the last value inside is accepted, the first
value outside is refused with the field named and the allowed range said.

Reports go through two validators (a fast path for plain entries and the full checks that name the
field); a value just outside a bound must be refused whichever path it takes.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from leveller.codec import SchemaError
from leveller.model.flow import flow_key
from leveller.model.limits import MAX_FLOWS, MAX_IDEAL_S, MAX_JOBS, MAX_LEVELS, MAX_RECENT
from leveller.rpc.schema import check_not_future, check_time, reply_from_wire, report_from_wire

RUN = "5f0c3a1e9b7d2468"


def report(**over: Any) -> dict[str, Any]:
    msg = {"v": 1, "host": "h1", "run": RUN, "seq": 1,
           "jobs": [{"job": "j1", "iterations": 7, "start_time": 1000.0, "ideal_time": 0.5,
                     "recent": [[6, 1003.0], [7, 1003.5]]}],
           "flows": [{"src": "10.0.0.1", "dst": "10.0.0.3", "sport": 40000, "dport": 47000, "proto": "tcp",
                      "job": "j1", "bytes": 100}]}
    msg.update(over)
    return msg


def reply(**over: Any) -> dict[str, Any]:
    msg = {"v": 1, "epoch": 3, "lease_s": 1.5, "decision_age_s": 0.25, "dscp_by_level": [0, 8],
           "flows": [{"src": "10.0.0.1", "dst": "10.0.0.3", "sport": 40000, "dport": 47000, "proto": 6,
                      "job": "j1", "level": 1}]}
    msg.update(over)
    return msg


def with_flow(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    msg = copy.deepcopy(base)
    msg["flows"][0].update(fields)
    return msg


def with_job(**fields: Any) -> dict[str, Any]:
    msg = report()
    msg["jobs"][0].update(fields)
    return msg


def refused(fn: Any, msg: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SchemaError) as exc:
        fn(msg)
    assert exc.value.field == field, str(exc.value)
    assert words in str(exc.value), str(exc.value)


@pytest.mark.parametrize("name", ["sport", "dport"])
def test_ports_0_to_65535(name: str) -> None:
    for value in (0, 65535):
        assert getattr(report_from_wire(with_flow(report(), **{name: value})).flows[0].key, name) == value
        assert getattr(reply_from_wire(with_flow(reply(), **{name: value})).flows[0].key, name) == value
    for value in (-1, 65536):
        refused(report_from_wire, with_flow(report(), **{name: value}), f"flows[0].{name}", "an integer in 0..65535")
        refused(reply_from_wire, with_flow(reply(), **{name: value}), f"flows[0].{name}", "an integer in 0..65535")


def test_flow_bytes_0_to_2_63_minus_1() -> None:
    for value in (0, 2**63 - 1):
        assert report_from_wire(with_flow(report(), bytes=value)).flows[0].bytes == value
    for value in (-1, 2**63):
        refused(report_from_wire, with_flow(report(), bytes=value), "flows[0].bytes",
                f"{value} is invalid; an integer in 0..{2**63 - 1}")


@pytest.mark.parametrize("proto,number", [("tcp", 6), ("udp", 17), (6, 6), (17, 17)])
def test_tcp_and_udp_only(proto: Any, number: int) -> None:
    assert report_from_wire(with_flow(report(), proto=proto)).flows[0].key.proto == number


@pytest.mark.parametrize("proto", ["icmp", 1, True, "TCP", None, 6.0])
def test_other_protocols_are_refused(proto: Any) -> None:
    refused(report_from_wire, with_flow(report(), proto=proto), "flows[0].proto",
            f"{proto!r} is invalid; tcp, udp, 6 or 17")
    refused(reply_from_wire, with_flow(reply(), proto=proto), "flows[0].proto",
            f"{proto!r} is invalid; tcp, udp, 6 or 17")


@pytest.mark.parametrize("addr", [10, "10.0.0.256", "010.0.0.1", "10.0.0", "::1"])
def test_addresses_are_dotted_quads(addr: Any) -> None:
    field = "flows[0].src" if not isinstance(addr, str) else "flows[0]"
    refused(report_from_wire, with_flow(report(), src=addr), field, repr(addr) if not isinstance(addr, str) else addr)


def test_a_flow_twice_and_unknown_fields() -> None:
    msg = report()
    msg["flows"].append(dict(msg["flows"][0]))
    refused(report_from_wire, msg, "flows[1]", "flow tcp 10.0.0.1:40000>10.0.0.3:47000 appears twice")
    refused(report_from_wire, with_flow(report(), colour=1), "flows[0].colour",
            "unknown field; allowed: bytes, dport, dst, job, proto, sport, src")
    no_bytes = report()
    del no_bytes["flows"][0]["bytes"]
    refused(report_from_wire, no_bytes, "flows[0].bytes", "missing")
    refused(report_from_wire, with_flow(report(), job="j9"), "flows[0].job",
            "'j9' is not one of this report's jobs ['j1']")
    refused(reply_from_wire, with_flow(reply(), job="bad name"), "flows[0].job",
            "'bad name' is invalid; 1-64 characters")
    refused(report_from_wire, report(flows=[1]), "flows[0]", "expected an object, got int")
    refused(report_from_wire, report(flows={}), "flows", "expected a list, got dict")


def test_seq_1_to_2_63_minus_1_and_the_run_id() -> None:
    assert report_from_wire(report(seq=1)).seq == 1 and report_from_wire(report(seq=2**63 - 1)).seq == 2**63 - 1
    for bad in (0, 2**63, True):
        refused(report_from_wire, report(seq=bad), "seq", f"{bad!r} is invalid; an integer in 1..{2**63 - 1}")
    for bad in ("5F0C3A1E9B7D2468", "5f0c3a1e9b7d246", "x" * 16, 7):
        refused(report_from_wire, report(run=bad), "run", "16-64 lowercase hex digits")
    assert report_from_wire(report(run="a" * 64)).run == "a" * 64
    refused(report_from_wire, report(run="a" * 65), "run", "16-64 lowercase hex digits")


def test_recent_iterations_1_to_the_count_and_times_from_the_start() -> None:
    ok = report_from_wire(with_job(iterations=7, recent=[[1, 1000.0], [7, 1003.5]])).jobs[0]
    assert ok.recent == ((1, 1000.0), (7, 1003.5))
    refused(report_from_wire, with_job(recent=[[0, 1003.0]]), "jobs[0].recent[0][0]", "an integer in 1..7")
    refused(report_from_wire, with_job(recent=[[8, 1003.0]]), "jobs[0].recent[0][0]", "an integer in 1..7")
    refused(report_from_wire, with_job(recent=[[7, 999.5]]), "jobs[0].recent[0][1]",
            "999.5 is invalid; a finite number >= 1000.0")
    refused(report_from_wire, with_job(recent=[[7]]), "jobs[0].recent[0]", "[7] is invalid; [iteration, unix time]")
    refused(report_from_wire, with_job(recent=(7, 1003.0)), "jobs[0].recent", "expected a list")
    refused(report_from_wire, with_job(recent="x"), "jobs[0].recent", "expected a list, got str")
    refused(report_from_wire, with_job(recent=[[7, 1003.0]] * (MAX_RECENT + 1)), "jobs[0].recent",
            f"{MAX_RECENT + 1} entries; at most {MAX_RECENT} are allowed")
    assert len(report_from_wire(with_job(iterations=300, recent=[[7, 1003.0]] * MAX_RECENT)).jobs[0].recent) \
        == MAX_RECENT
    no_recent = report()
    del no_recent["jobs"][0]["recent"]
    assert report_from_wire(no_recent).jobs[0].recent == ()


def test_ideal_time_above_0_up_to_one_day() -> None:
    assert report_from_wire(with_job(ideal_time=MAX_IDEAL_S)).jobs[0].ideal_time == MAX_IDEAL_S
    assert report_from_wire(with_job(ideal_time=1e-9)).jobs[0].ideal_time == 1e-9
    for bad in (0, 0.0, -1.0, MAX_IDEAL_S + 1, float("nan"), float("inf"), "1", True):
        refused(report_from_wire, with_job(ideal_time=bad), "jobs[0].ideal_time",
                f"{bad!r} is invalid; a finite number > 0 and <= 86400")


def test_start_time_after_1970() -> None:
    assert report_from_wire(with_job(start_time=1e-3, recent=[])).jobs[0].start_time == 1e-3
    for bad in (0, -5.0):
        refused(report_from_wire, with_job(start_time=bad), "jobs[0].start_time", f"{bad!r} is invalid; a finite "
                "number > 0")
    assert check_time(5.0, "t", not_before=5.0) == 5.0
    with pytest.raises(SchemaError, match=r"t: 4.5 is invalid; a finite number >= 5.0"):
        check_time(4.5, "t", not_before=5.0)
    with pytest.raises(SchemaError, match=r"t: 0.0 is invalid; a finite number > 0"):
        check_time(0.0, "t")
    assert check_time(1e-9, "t") == 1e-9


def test_not_in_the_future_beyond_300_s() -> None:
    now = time.time()
    assert check_not_future(now + 300.0, "t", now) == now + 300.0
    with pytest.raises(SchemaError) as exc:
        check_not_future(now + 300.5, "t", now)
    assert exc.value.field == "t" and "more than 300 s in the future" in str(exc.value)


def test_jobs_at_most_1024_and_no_job_twice() -> None:
    jobs = [{"job": f"j{i}", "iterations": 0, "start_time": 1000.0} for i in range(MAX_JOBS)]
    assert len(report_from_wire(report(jobs=jobs, flows=[])).jobs) == MAX_JOBS
    refused(report_from_wire, report(jobs=jobs + [{"job": "x", "iterations": 0, "start_time": 1.0}], flows=[]),
            "jobs", f"{MAX_JOBS + 1} entries; at most {MAX_JOBS} are allowed")
    refused(report_from_wire, report(jobs=jobs[:1] * 2, flows=[]), "jobs[1].job", "'j0' appears twice")


def test_flows_at_most_65536() -> None:
    flows = [{"src": "10.0.0.1", "dst": "10.0.0.3", "sport": i, "dport": 1, "proto": 6, "job": "j1", "bytes": 1}
             for i in range(MAX_FLOWS)]
    assert len(report_from_wire(report(flows=flows)).flows) == MAX_FLOWS
    flows.append(dict(flows[0], dport=2))
    refused(report_from_wire, report(flows=flows), "flows", f"{MAX_FLOWS + 1} entries; at most {MAX_FLOWS} are "
            "allowed")


def test_top_level_fields_and_version() -> None:
    refused(report_from_wire, report(extra=1), "extra",
            "unknown field; allowed: flows, flows_dscp, host, jobs, run, seq, v")
    msg = report()
    del msg["host"]
    refused(report_from_wire, msg, "host", "missing")
    refused(report_from_wire, report(v=2), "v", "2 is not a supported version; this build speaks 1")
    refused(reply_from_wire, reply(v=None), "v", "None is not a supported version; this build speaks 1")
    refused(reply_from_wire, reply(extra=1), "extra", "unknown field")


def test_reply_lease_epoch_age_and_levels() -> None:
    assert reply_from_wire(reply(lease_s=86400)).lease_s == 86400.0
    assert reply_from_wire(reply(lease_s=1e-6)).lease_s == 1e-6
    for bad in (0, 86400.5, -1):
        refused(reply_from_wire, reply(lease_s=bad), "lease_s", f"{bad!r} is invalid; a finite number > 0 and "
                "<= 86400")
    assert reply_from_wire(reply(epoch=2**63 - 1)).epoch == 2**63 - 1 and reply_from_wire(reply(epoch=0)).epoch == 0
    for bad in (-1, 2**63):
        refused(reply_from_wire, reply(epoch=bad), "epoch", f"an integer in 0..{2**63 - 1}")
    assert reply_from_wire(reply(decision_age_s=0)).decision_age_s == 0.0
    refused(reply_from_wire, reply(decision_age_s=-0.001), "decision_age_s", "-0.001 is invalid; a finite number >= 0")
    assert reply_from_wire(with_flow(reply(), level=0)).flows[0].level == 0
    for bad in (-1, 2):
        refused(reply_from_wire, with_flow(reply(), level=bad), "flows[0].level", f"{bad} is invalid; an integer "
                "in 0..1")
    eight = list(range(0, 64, 8))
    assert len(reply_from_wire(reply(dscp_by_level=eight)).dscp_by_level) == MAX_LEVELS
    refused(reply_from_wire, reply(dscp_by_level=eight + [63]), "dscp_by_level",
            f"{MAX_LEVELS + 1} entries; at most {MAX_LEVELS} are allowed")
    refused(reply_from_wire, reply(dscp_by_level=[]), "dscp_by_level", "empty; one DSCP per level is required")
    refused(reply_from_wire, reply(dscp_by_level=[8, 8]), "dscp_by_level",
            "[8, 8] has duplicates; one distinct DSCP per level")
    refused(reply_from_wire, reply(dscp_by_level=[0, 64]), "dscp_by_level[1]", "64 is invalid; an integer in 0..63")
    with pytest.raises(SchemaError) as exc:
        reply_from_wire(reply(), known_jobs=["j2"])
    assert exc.value.field == "flows[0].job" and "'j1' is not a job of this host (known: ['j2'])" in str(exc.value)
    with pytest.raises(SchemaError, match=r"known: \[\]"):
        reply_from_wire(reply(), known_jobs=[])  # an agent with no jobs takes no levels
    assert reply_from_wire(reply(), known_jobs=None).flows[0].job == "j1"


def test_flow_labels() -> None:
    assert flow_key("10.0.0.1", "10.0.0.3", 1, 2, "tcp").label() == "tcp 10.0.0.1:1>10.0.0.3:2"
    assert flow_key("10.0.0.1", "10.0.0.3", 1, 2, "udp").label() == "udp 10.0.0.1:1>10.0.0.3:2"
    assert flow_key("10.0.0.1", "10.0.0.3", 1, 2, "icmp").label() == "1 10.0.0.1:0>10.0.0.3:0"
    assert flow_key("10.0.0.1", "10.0.0.3", 1, 2, 7).label() == "7 10.0.0.1:0>10.0.0.3:0"


def exactly(fn: Any, msg: dict[str, Any], text: str) -> None:
    with pytest.raises(SchemaError) as exc:
        fn(msg)
    assert str(exc.value) == text


def test_messages_whole() -> None:
    msg = report()
    del msg["host"]
    exactly(report_from_wire, msg, "host: missing")
    exactly(reply_from_wire, reply(decision_age_s=-0.5), "decision_age_s: -0.5 is invalid; a finite number >= 0")
    exactly(reply_from_wire, reply(dscp_by_level=[]), "dscp_by_level: empty; one DSCP per level is required")
    exactly(reply_from_wire, reply(flows={}), "flows: expected a list, got dict")
    exactly(reply_from_wire, reply(flows="x"), "flows: expected a list, got str")
    exactly(report_from_wire, report(seq=0), f"seq: 0 is invalid; an integer in 1..{2**63 - 1}")
    exactly(report_from_wire, with_job(ideal_time=0), "jobs[0].ideal_time: 0 is invalid; a finite number > 0 and "
            "<= 86400")


def test_not_before_between_0_and_1_is_still_a_lower_bound() -> None:
    assert check_time(0.7, "t", not_before=0.5) == 0.7
    with pytest.raises(SchemaError, match=r"^t: 0.3 is invalid; a finite number >= 0.5$"):
        check_time(0.3, "t", not_before=0.5)


def test_a_message_that_is_not_an_object_names_no_field() -> None:
    for fn in (report_from_wire, reply_from_wire):
        with pytest.raises(SchemaError) as exc:
            fn([1])  # type: ignore[arg-type]
        assert exc.value.field == "" and str(exc.value) == ": expected an object, got list"
