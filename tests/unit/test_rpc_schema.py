"""RPC schema (leveller.rpc.schema): well-formed messages round-trip; every malformed field is refused by
name.

Also: flows_dscp entries refused by the full checks with the exact field and message (and never
let through by the plain loop), CASSINI shifts and shadow mode both ways, operator weights, IPv6 texts with
a dotted quad, and the memory of ReportDecoder / ReplyEncoder (limits, least-recent eviction, accounting)
giving the codec's results. Every bound from both sides is in test_rpc_schema_bounds.py.
"""

from __future__ import annotations

import copy
import json
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leveller.rpc.schema as schema
from leveller.codec import MAX_MESSAGE_BYTES, SchemaError, decode, encode
from leveller.model.flow import FlowKey, flow_key
from leveller.model.limits import MAX_COUNTER, MAX_JOBS
from leveller.rpc.schema import (
    FlowLevel,
    FlowReport,
    JobReport,
    JobShift,
    LevelsReply,
    ReplyEncoder,
    Report,
    ReportDecoder,
    encode_reply,
    job_to_wire,
    reply_from_wire,
    reply_to_wire,
    report_from_wire,
    report_to_wire,
)
from tests.helpers.rpc import mutate

KEY = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000, "tcp")


def good_report() -> dict[str, Any]:
    return report_to_wire(Report("h1", (JobReport("j1", 7, 1000.0, 0.5, ((6, 1003.0), (7, 1003.5))),
                                        JobReport("j2", 0, 1001.0)),
                                 (FlowReport(KEY, "j1", 123456),), run="5f0c3a1e9b7d2468", seq=12))


def good_reply() -> dict[str, Any]:
    return reply_to_wire(LevelsReply(3, 1.5, (0, 8), (FlowLevel(KEY, "j1", 1),), 0.25))


def test_report_round_trip() -> None:
    r = report_from_wire(decode(encode(good_report())))
    assert r.host == "h1"
    assert r.jobs[0] == JobReport("j1", 7, 1000.0, 0.5, ((6, 1003.0), (7, 1003.5)))
    assert r.jobs[1].ideal_time is None
    assert r.flows == (FlowReport(KEY, "j1", 123456),)
    assert (r.run, r.seq) == ("5f0c3a1e9b7d2468", 12)


def test_reply_round_trip() -> None:
    r = reply_from_wire(decode(encode(good_reply())), known_jobs={"j1"})
    assert r == LevelsReply(3, 1.5, (0, 8), (FlowLevel(KEY, "j1", 1),), 0.25)


@pytest.mark.parametrize("path,value,field", [
    (("jobs", 0, "iterations"), -1, "jobs[0].iterations"),
    (("jobs", 0, "iterations"), 1.5, "jobs[0].iterations"),
    (("jobs", 0, "iterations"), True, "jobs[0].iterations"),
    (("jobs", 0, "start_time"), float("inf"), "jobs[0].start_time"),
    (("jobs", 0, "ideal_time"), 0, "jobs[0].ideal_time"),
    (("jobs", 0, "ideal_time"), float("nan"), "jobs[0].ideal_time"),
    (("jobs", 0, "recent", 0), [9, 1003.0], "jobs[0].recent[0][0]"),
    (("jobs", 0, "recent", 0), [6, 10.0], "jobs[0].recent[0][1]"),
    (("jobs", 0, "job"), "has space", "jobs[0].job"),
    (("jobs", 1, "job"), "j1", "jobs[1].job"),
    (("jobs", 0, "extra"), 1, "jobs[0].extra"),
    (("jobs", 0, "start_time"), KeyError, "jobs[0].start_time"),
    (("flows", 0, "job"), "ghost", "flows[0].job"),
    (("flows", 0, "dport"), 70000, "flows[0].dport"),
    (("flows", 0, "src"), "10.0.0.300", "flows[0]"),
    (("flows", 0, "proto"), "icmp", "flows[0].proto"),
    (("flows", 0, "bytes"), -5, "flows[0].bytes"),
    (("host",), "", "host"),
    (("run",), "", "run"),
    (("run",), "5F0C3A1E9B7D2468", "run"),
    (("run",), 7, "run"),
    (("run",), KeyError, "run"),
    (("seq",), 0, "seq"),
    (("seq",), 1.5, "seq"),
    (("seq",), True, "seq"),
    (("seq",), 2**63, "seq"),
    (("v",), 2, "v"),
    (("jobs",), {}, "jobs"),
])
def test_report_rejects(path: tuple[Any, ...], value: Any, field: str) -> None:
    with pytest.raises(SchemaError) as info:
        report_from_wire(mutate(good_report(), path, value))
    assert info.value.field == field


def test_report_rejects_duplicate_flow_and_too_many_jobs() -> None:
    msg = good_report()
    msg["flows"].append(dict(msg["flows"][0]))
    with pytest.raises(SchemaError, match="twice"):
        report_from_wire(msg)
    msg = good_report()
    msg["jobs"] = [dict(msg["jobs"][1], job=f"j{i}") for i in range(1025)]
    msg["flows"] = []
    with pytest.raises(SchemaError, match="at most 1024"):
        report_from_wire(msg)


@pytest.mark.parametrize("path,value,field", [
    (("flows", 0, "level"), 2, "flows[0].level"),
    (("flows", 0, "level"), -1, "flows[0].level"),
    (("flows", 0, "job"), "other", "flows[0].job"),  # unknown job for a level
    (("lease_s",), 0, "lease_s"),
    (("lease_s",), float("inf"), "lease_s"),
    (("dscp_by_level",), [0, 64], "dscp_by_level[1]"),
    (("dscp_by_level",), [8, 8], "dscp_by_level"),
    (("dscp_by_level",), [], "dscp_by_level"),
    (("epoch",), -1, "epoch"),
    (("decision_age_s",), -0.5, "decision_age_s"),  # a decision from the future: a broken controller
    (("decision_age_s",), float("nan"), "decision_age_s"),
    (("decision_age_s",), KeyError, "decision_age_s"),  # without it an agent cannot tell stale levels
])
def test_reply_rejects(path: tuple[Any, ...], value: Any, field: str) -> None:
    with pytest.raises(SchemaError) as info:
        reply_from_wire(mutate(good_reply(), path, value), known_jobs={"j1"})
    assert info.value.field == field


@pytest.mark.parametrize("body,msg", [
    (b'{"v": NaN}', "NaN"), (b'{"v": Infinity}', "Infinity"), (b'{"v": 1, "v": 1}', "duplicate"),
    (b"[1]", "JSON object"), (b"\xff", "UTF-8"), (b"{", "not JSON"),
    (b"[" * 100_000, "nested too deeply"), (b'{"a": ' + b"[" * 100_000, "nested too deeply"),
    (b'{"v": ' + b"7" * 5000 + b"}", "longer than"),
])
def test_codec_rejects(body: bytes, msg: str) -> None:
    with pytest.raises(SchemaError, match=msg):
        decode(body)


def test_codec_rejects_oversize_and_never_emits_nan() -> None:
    with pytest.raises(SchemaError, match="exceeds"):
        decode(b'{"a": "' + b"x" * 100 + b'"}', max_bytes=50)
    with pytest.raises(ValueError):
        encode({"x": float("nan")})


# ---- the controller's fast paths give exactly what the full checks give ------------------------------

FLOW_VALUES = {
    "src": st.sampled_from(["10.0.0.1", "10.0.0.256", "010.0.0.1", "10.0.0", "10.0.0.1\x00", "fd00::1", 7, None]),
    "dst": st.sampled_from(["10.0.0.3", "192.168.1.1", "1.2.3.4 ", "", ["10.0.0.3"]]),
    "sport": st.sampled_from([0, 1, 65535, 65536, -1, True, 1.0, "80"]),
    "dport": st.sampled_from([4791, 0, 70000, False, None]),
    "proto": st.sampled_from([6, 17, "tcp", "udp", "icmp", 1, True, 6.0, "TCP"]),
    "job": st.sampled_from(["j1", "j2", "ghost", "bad name", 3, ["j1"]]),
    "bytes": st.sampled_from([0, 5, 2**63 - 1, 2**63, -1, True, 1.5]),
}


@st.composite
def flow_entries(draw):
    entry = {k: draw(v) for k, v in FLOW_VALUES.items()}
    for name in draw(st.lists(st.sampled_from(list(FLOW_VALUES) + ["extra"]), max_size=2, unique=True)):
        if name == "extra":
            entry["extra"] = 1
        else:
            del entry[name]
    return entry


def _full_checks(msg: dict[str, Any]) -> Report:
    """report_from_wire with the tight loop switched off: the generic, field-naming path only."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schema, "_plain_report_flows", lambda items, jobs: None)
        return report_from_wire(msg)


@settings(max_examples=400)
@given(st.lists(st.one_of(flow_entries(), st.just(dict(good_report()["flows"][0]))), max_size=4))
def test_fast_report_validation_equals_the_full_checks(entries: list[dict[str, Any]]) -> None:
    msg = good_report()
    msg["flows"] = entries
    try:
        want: Any = _full_checks(copy.deepcopy(msg))
    except SchemaError as exc:
        want = ("error", exc.field, str(exc))
    try:
        got: Any = report_from_wire(copy.deepcopy(msg))
    except SchemaError as exc:
        got = ("error", exc.field, str(exc))
    assert got == want


def test_many_plain_flows_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = good_report()
    msg["flows"] = [dict(msg["flows"][0], sport=i) for i in range(100)]
    slow = []
    real = schema._flow_entries
    monkeypatch.setattr(schema, "_flow_entries", lambda *a: slow.append(1) or real(*a))
    assert len(report_from_wire(msg).flows) == 100 and not slow


@settings(max_examples=200)
@given(st.lists(st.tuples(st.builds("10.{}.{}.{}".format, st.integers(0, 255), st.integers(0, 255),
                                    st.integers(0, 255)), st.integers(0, 65535),
                          st.sampled_from([6, 17]), st.sampled_from(["j1", "a.b:c-d_9", "J"]), st.integers(0, 7)),
                max_size=20),
       st.integers(0, 2**63 - 1), st.floats(0.001, 86400), st.floats(0, 1e6),
       st.lists(st.builds(JobShift, st.sampled_from(["j1", "a.b:c-d_9", "J"]), st.integers(0, 2**63 - 1),
                          st.floats(0, 10), st.floats(10.001, 86400)), max_size=3, unique_by=lambda s: s.job))
def test_encode_reply_is_byte_for_byte_the_codec(
        flows, epoch, lease, age, shifts) -> None:
    levels = tuple(FlowLevel(flow_key("10.0.0.1", dst, port, 4791, proto), job, lvl)
                   for dst, port, proto, job, lvl in flows)
    reply = LevelsReply(epoch, lease, (0, 8, 16, 24, 32, 40, 10, 18), levels, age, tuple(shifts))
    assert encode_reply(reply) == encode(reply_to_wire(reply))  # CASSINI's shift orders too


def test_codec_names_a_duplicate_key_at_any_depth() -> None:
    with pytest.raises(SchemaError) as info:
        decode(b'{"v": 1, "flows": [{"src": "a", "dport": 1, "src": "b"}]}')
    assert info.value.field == "src"


# ---- messages built from dicts: flows_dscp, shifts and shadow mode, weights, IPv6, the memory ----------

RUN = "5f0c3a1e9b7d2468"
V6 = flow_key("2001:db8::1", "2001:db8::2", 40000, 4791, "udp")


def report_msg(flows: int = 3, **over: Any) -> dict[str, Any]:
    """A valid report of job j1 with ``flows`` IPv4 flows (bytes 100 each); ``over`` replaces top-level fields."""
    msg: dict[str, Any] = {
        "v": 1, "host": "h1", "run": RUN, "seq": 1,
        "jobs": [{"job": "j1", "iterations": 7, "start_time": 1000.0, "recent": []}],
        "flows": [{"src": "10.0.0.1", "dst": "10.0.0.3", "sport": 40000 + i, "dport": 4791, "proto": "udp",
                   "job": "j1", "bytes": 100} for i in range(flows)]}
    msg.update(over)
    return msg


def error_of(fn: Any, *args: Any) -> tuple[str, str]:
    """The field and the whole text of the SchemaError ``fn(*args)`` raises (any other outcome fails)."""
    with pytest.raises(SchemaError) as exc:
        fn(*args)
    return exc.value.field, str(exc.value)


# ---- flows_dscp ------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [[0, 1], [0, 1, 2, 3], [], 5, None, "abc", {"a": 1, "b": 2, "c": 3}])
def test_a_flows_dscp_entry_that_is_not_three_values_is_refused_by_its_index(entry: Any) -> None:
    """Any entry but a list of three is refused as a SchemaError naming it (never a bare ValueError or
    TypeError), after the entries before it were accepted at their lowest bounds (flow 0, DSCP 0, 0 bytes)."""
    msg = report_msg(flows_dscp=[[0, 0, 0], entry])
    assert error_of(report_from_wire, msg) == (
        "flows_dscp[1]", f"flows_dscp[1]: {entry!r} is invalid; [flow index, DSCP, bytes]")


@pytest.mark.parametrize("entry", [[0, 1], [0, 1, 2, 3], 5, None])
def test_a_lone_flows_dscp_entry_of_another_shape_is_refused(entry: Any) -> None:
    """The same when the odd entry is the first one (the plain loop meets it before anything else)."""
    assert error_of(report_from_wire, report_msg(flows_dscp=[entry])) == (
        "flows_dscp[0]", f"flows_dscp[0]: {entry!r} is invalid; [flow index, DSCP, bytes]")


def test_the_full_checks_accept_every_bound_then_name_the_repeated_flow_and_dscp() -> None:
    """Flow 0 and the last flow, DSCP 0 and 63, 0 and 2**63-1 bytes all pass; the entry repeating a
    (flow, DSCP) is the one named, with both values."""
    dscp = [[0, 0, 0], [2, 63, MAX_COUNTER], [1, 46, 5], [2, 63, 7]]
    assert error_of(report_from_wire, report_msg(flows_dscp=dscp)) == (
        "flows_dscp[3]", "flows_dscp[3]: flow 2 with DSCP 63 appears twice")
    twice = [[0, 46, 10], [0, 46, 11]]
    assert error_of(report_from_wire, report_msg(flows_dscp=twice)) == (
        "flows_dscp[1]", "flows_dscp[1]: flow 0 with DSCP 46 appears twice")


@pytest.mark.parametrize("entry,field,text", [
    ([3, 0, 1], "flows_dscp[0][0]", "3 is invalid; an integer in 0..2"),
    ([-1, 0, 1], "flows_dscp[0][0]", "-1 is invalid; an integer in 0..2"),
    ([True, 0, 1], "flows_dscp[0][0]", "True is invalid; an integer in 0..2"),
    ([0.0, 0, 1], "flows_dscp[0][0]", "0.0 is invalid; an integer in 0..2"),
    ([0, 64, 1], "flows_dscp[0][1]", "64 is invalid; an integer in 0..63"),
    ([0, -1, 1], "flows_dscp[0][1]", "-1 is invalid; an integer in 0..63"),
    ([0, True, 1], "flows_dscp[0][1]", "True is invalid; an integer in 0..63"),
    ([0, 0, 2**63], "flows_dscp[0][2]", f"{2**63} is invalid; an integer in 0..{MAX_COUNTER}"),
    ([0, 0, -1], "flows_dscp[0][2]", f"-1 is invalid; an integer in 0..{MAX_COUNTER}"),
    ([0, 0, 1.5], "flows_dscp[0][2]", f"1.5 is invalid; an integer in 0..{MAX_COUNTER}"),
    ([0, 0, False], "flows_dscp[0][2]", f"False is invalid; an integer in 0..{MAX_COUNTER}"),
])
def test_a_flows_dscp_value_out_of_range_or_not_an_integer_is_named(entry: list[Any], field: str, text: str) -> None:
    """Each of the three values is checked for its type (no bool, no float) and range, by its position."""
    assert error_of(report_from_wire, report_msg(flows_dscp=[entry])) == (field, f"{field}: {text}")


def test_flows_dscp_needs_flows_and_a_list() -> None:
    """Without flows no entry can index one; a flows_dscp that is no list is named as the whole field."""
    assert error_of(report_from_wire, report_msg(flows=0, flows_dscp=[[0, 0, 1]])) == (
        "flows_dscp[0][0]", "flows_dscp[0][0]: the report has no flows to index")
    assert error_of(report_from_wire, report_msg(flows_dscp={"0": [0, 1]})) == (
        "flows_dscp", "flows_dscp: expected a list, got dict")
    assert report_from_wire(report_msg(flows=0, flows_dscp=[])).dscp_bytes == ()


class Dscp(IntEnum):
    """DSCP classes as a caller's own int subclass (not JSON's int: the plain loop passes them on)."""

    CS0 = 0
    EF = 46
    CS7 = 56


def test_int_subclass_dscp_values_are_read_by_the_full_checks() -> None:
    """A report built in Python with IntEnum DSCPs (and a list subclass entry) gives the same counters
    as plain ints: the full checks, not only the plain loop, return the entries."""

    class Entry(list[Any]):
        pass

    dscp = [[0, Dscp.EF, 10], Entry([1, Dscp.CS0, 0]), [2, Dscp.CS7, MAX_COUNTER]]
    got = report_from_wire(report_msg(flows_dscp=dscp)).dscp_bytes
    assert got == ((0, 46, 10), (1, 0, 0), (2, 56, MAX_COUNTER))
    assert report_from_wire(report_msg(flows_dscp=[[2, 56, MAX_COUNTER], [0, 46, 10]])).dscp_bytes == (
        (2, 56, MAX_COUNTER), (0, 46, 10))


# ---- weights, shifts and shadow mode, both ways --------------------------------------------------------

def test_a_report_with_weights_ipv6_flows_and_dscp_bytes_round_trips() -> None:
    """Every optional job field survives report_to_wire -> bytes -> report_from_wire (and ReportDecoder);
    a job without a weight sends no weight at all."""
    v6b = flow_key("2001:db8::1", "2001:db8::2", 40001, 4791, "udp")
    report = Report("h1", (JobReport("j1", 7, 1000.0, 0.5, ((7, 1003.5),), 2.5), JobReport("j2", 0, 1001.0)),
                    (FlowReport(V6, "j1", 10), FlowReport(v6b, "j2", 2**63 - 1)), RUN, 4,
                    ((0, 46, 10), (1, 0, 3)))
    body = encode(report_to_wire(report))
    assert report_from_wire(decode(body)) == report
    dec = ReportDecoder()
    assert dec(body) == report and dec(body) == report and (dec.full, dec.fast) == (1, 1)
    assert "weight" not in job_to_wire(JobReport("j2", 0, 1001.0))
    assert job_to_wire(JobReport("j1", 1, 1000.0, weight=0.001))["weight"] == 0.001


def shadow_reply(shifts: tuple[JobShift, ...] | None = None) -> LevelsReply:
    """A shadow-mode reply with IPv6 and IPv4 flows and CASSINI shifts of two jobs."""
    v4 = flow_key("10.0.0.1", "10.0.0.3", 40000, 4791, "tcp")
    if shifts is None:
        shifts = (JobShift("j1", 0, 0.0, 2.0), JobShift("j2", MAX_COUNTER, 0.5, 1.0))
    return LevelsReply(7, 3.0, (0, 8, 46), (FlowLevel(V6, "j1", 2), FlowLevel(v4, "j2", 0)), 0.25, shifts,
                       "shadow")


def test_a_shadow_reply_with_shifts_round_trips_through_every_encoder() -> None:
    """reply_to_wire, encode_reply and ReplyEncoder all write what reply_from_wire reads back as the
    same reply: shifts (plan 0 and 2**63-1, start 0 and a fraction of the period) and the mode."""
    reply = shadow_reply()
    body = encode(reply_to_wire(reply))
    assert reply_from_wire(decode(body), known_jobs=("j1", "j2")) == reply
    assert reply_from_wire(decode(body)) == reply
    assert encode_reply(reply) == body and ReplyEncoder()("h1", reply) == body
    assert reply_from_wire(decode(encode_reply(reply))) == reply
    enforcing = LevelsReply(7, 3.0, (0, 8), (FlowLevel(V6, "j1", 1),), 0.0)
    assert "mode" not in reply_to_wire(enforcing) and "shifts" not in reply_to_wire(enforcing)
    assert reply_from_wire(decode(encode_reply(enforcing))) == enforcing


def reply_with(shifts: Any) -> dict[str, Any]:
    wire = reply_to_wire(shadow_reply(()))
    wire["shifts"] = shifts
    return wire


def shift(**over: Any) -> dict[str, Any]:
    return {"job": "j1", "plan": 3, "start_in_s": 0.5, "period_s": 2.0, **over}


@pytest.mark.parametrize("shifts,field,text", [
    ({"j1": 1}, "shifts", "expected a list, got dict"),
    ([shift()] * (MAX_JOBS + 1), "shifts", f"{MAX_JOBS + 1} entries; at most {MAX_JOBS} are allowed"),
    ([5], "shifts[0]", "expected an object, got int"),
    ([shift(), {"job": "j2", "plan": 1, "period_s": 1.0}], "shifts[1].start_in_s", "missing"),
    ([shift(extra=1)], "shifts[0].extra", "unknown field; allowed: job, period_s, plan, start_in_s"),
    ([shift(job="j 1")], "shifts[0].job", "'j 1' is invalid"),
    ([shift(), shift(plan=4)], "shifts[1].job", "'j1' appears twice"),
    ([shift(plan=-1)], "shifts[0].plan", f"-1 is invalid; an integer in 0..{MAX_COUNTER}"),
    ([shift(plan=2**63)], "shifts[0].plan", f"{2**63} is invalid; an integer in 0..{MAX_COUNTER}"),
    ([shift(period_s=0)], "shifts[0].period_s", "0 is invalid; a finite number > 0 and <= 86400"),
    ([shift(start_in_s=-0.5)], "shifts[0].start_in_s", "-0.5 is invalid; a finite number >= 0"),
    ([shift(start_in_s=2.0)], "shifts[0].start_in_s", "2.0 is invalid; in [0, period_s=2.0)"),
    ([shift(start_in_s=3)], "shifts[0].start_in_s", "3.0 is invalid; in [0, period_s=2.0)"),
])
def test_a_bad_shift_is_refused_with_its_field(shifts: Any, field: str, text: str) -> None:
    """Every rule of a shift, by the field it breaks (with or without the host's jobs known)."""
    for known in (None, ("j1", "j2")):
        got_field, got = error_of(reply_from_wire, reply_with(shifts), known)
        assert got_field == field and got.startswith(f"{field}: {text}"), got


def test_a_shift_for_a_job_the_host_does_not_run_is_refused() -> None:
    """With the host's jobs known, a shift of any other job is named; without them it is taken."""
    assert error_of(reply_from_wire, reply_with([shift(job="j9")]), ["j2", "j1"]) == (
        "shifts[0].job", "shifts[0].job: 'j9' is not a job of this host (known: ['j1', 'j2'])")
    assert reply_from_wire(reply_with([shift(job="j9")])).shifts == (JobShift("j9", 3, 0.5, 2.0),)
    assert reply_from_wire(reply_with([])).shifts == ()


def test_an_unknown_mode_is_refused_with_the_modes_allowed() -> None:
    wire = reply_to_wire(shadow_reply())
    wire["mode"] = "bogus"
    assert error_of(reply_from_wire, wire) == ("mode", "mode: 'bogus': expected one of enforce, shadow")
    wire["mode"] = "enforce"
    assert reply_from_wire(wire).mode == "enforce"


# ---- IPv6 text with a dotted quad ------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("::1.2.3.4", "::ffff:10.0.0.1"), ("::ffff:10.0.0.1", "2001:db8::9"),
                                     ("64:ff9b::1.2.3.4", "::1.2.3.5")])
def test_ipv6_text_with_a_dotted_quad_decodes_to_the_models_key(src: str, dst: str) -> None:
    """inet_ntop keeps a dotted quad that ipaddress writes in hex: no short cut may keep such a text."""
    want = flow_key(src, dst, 40000, 4791, "udp")
    flow = {"src": src, "dst": dst, "sport": 40000, "dport": 4791, "proto": "udp", "job": "j1"}
    msg = report_msg(flows=0)
    msg["flows"] = [{**flow, "bytes": 1}]
    assert [f.key for f in report_from_wire(msg).flows] == [want]
    wire = reply_to_wire(shadow_reply(()))
    wire["flows"] = [{**flow, "level": 1}]
    assert [f.key for f in reply_from_wire(wire).flows] == [want]


def test_a_reply_flow_address_that_is_no_string_is_named() -> None:
    """A number or list as an address is a SchemaError for that address, never a TypeError."""
    for addr in ("src", "dst"):
        for value in (10, ["10.0.0.1"]):
            wire = reply_to_wire(shadow_reply(()))
            wire["flows"][1][addr] = value
            field, text = error_of(reply_from_wire, wire)
            assert field == f"flows[1].{addr}" and "an IPv4 or IPv6 address string" in text


# ---- ReportDecoder's memory ------------------------------------------------------------------------------

def body_of(host: str = "h1", sports: range = range(3), nbytes: int = 100, seq: int = 1) -> bytes:
    """The codec's bytes of a report of ``host``: one flow per source port, each of ``nbytes`` bytes."""
    report = Report(host, (JobReport("j1", 5, 1000.0, 0.5),),
                    tuple(FlowReport(flow_key("10.0.0.1", "10.0.0.3", 40000 + p, 4791, 17), "j1", nbytes)
                          for p in sports), RUN, seq)
    return encode(report_to_wire(report))


def outcome(fn: Any, *args: Any) -> Any:
    """The result of ``fn(*args)``, or the SchemaError's field and text."""
    try:
        return fn(*args)
    except SchemaError as exc:
        return ("error", exc.field, str(exc))


def test_the_decoders_byte_limit_holds_on_the_memory_path() -> None:
    """A body over max_bytes is refused even when its flows are remembered; one of exactly max_bytes is
    decoded from memory (and every such report counts as one fast decode)."""
    first = body_of(nbytes=1)
    dec = ReportDecoder(max_bytes=len(first))
    assert dec(first) == report_from_wire(decode(first))
    same_size = body_of(nbytes=2, seq=2)
    assert len(same_size) == len(first) and dec(same_size) == report_from_wire(decode(same_size))
    assert dec(body_of(nbytes=3, seq=3)).flows[0].bytes == 3 and (dec.full, dec.fast) == (1, 2)
    larger = body_of(nbytes=10**18, seq=4)
    assert outcome(dec, larger) == outcome(lambda b: report_from_wire(decode(b, len(first))), larger)
    assert outcome(dec, larger)[:2] == ("error", "(body)")


def test_a_decoder_with_a_limit_above_the_codecs_default_uses_it_on_the_memory_path_too() -> None:
    """A body over the codec's default limit but within the decoder's own is decoded from memory."""
    def padded(seq: int) -> bytes:  # JSON whitespace after the flows: the entries stay those remembered
        body = body_of(seq=seq)
        return body[:-1] + b" " * (MAX_MESSAGE_BYTES + 1) + b"}"

    dec = ReportDecoder(max_bytes=2 * MAX_MESSAGE_BYTES)
    assert dec(padded(1)) == report_from_wire(decode(padded(1), 2 * MAX_MESSAGE_BYTES))
    assert dec(padded(2)).seq == 2 and (dec.full, dec.fast) == (1, 1)


def test_counters_of_19_digits_and_an_empty_flow_list_are_decoded_from_memory() -> None:
    """The memory path takes every counter up to 2**63-1 and a report whose flows all ended."""
    dec = ReportDecoder()
    dec(body_of())
    big = body_of(nbytes=2**63 - 1, seq=2)
    assert dec(big) == report_from_wire(decode(big)) and dec.fast == 1
    empty = body_of(sports=range(0), seq=3)
    assert dec(empty) == report_from_wire(decode(empty)) and dec(empty).flows == () and dec.fast == 3


def test_a_changed_entry_head_or_another_layout_takes_the_full_checks() -> None:
    """A remembered entry whose "bytes" key is misspelt is refused as the full checks refuse it; a body in
    another JSON layout is decoded (nothing remembered from it)."""
    dec = ReportDecoder()
    dec(body_of())
    bad = body_of(seq=2).replace(b'{"flows":[{"bytes":', b'{"flows":[{"bytez":', 1)
    assert outcome(dec, bad) == outcome(lambda b: report_from_wire(decode(b)), bad)
    assert outcome(dec, bad)[:2] == ("error", "flows[0].bytez")
    spaced = json.dumps(json.loads(body_of(host="h2")), indent=1).encode()
    assert dec(spaced) == dec(spaced) == report_from_wire(decode(spaced)) and dec.fast == 0
    # the flows first, as the codec puts them, but each entry's keys in another order
    msg = json.loads(body_of(host="h3"))
    entries = [{"dport": e["dport"], **{k: v for k, v in e.items() if k != "dport"}} for e in msg["flows"]]
    reordered = json.dumps({"flows": entries, **{k: v for k, v in msg.items() if k != "flows"}},
                           separators=(",", ":")).encode()
    assert reordered.startswith(b'{"flows":[{"dport":')
    assert dec(reordered) == dec(reordered) == report_from_wire(decode(reordered)) and dec.fast == 0


def test_memory_forgets_the_least_recently_reporting_host() -> None:
    """A host decoded from memory counts as recent; the host that reported longest ago goes first, and
    only as many hosts go as the bound needs."""
    dec = ReportDecoder(max_entries=6)  # two hosts of three flows
    dec(body_of("h1"))
    dec(body_of("h2"))
    dec(body_of("h1", seq=2))  # from memory: h1 is now the most recent
    assert (dec.full, dec.fast) == (2, 1)
    dec(body_of("h3"))  # h2 goes
    dec(body_of("h1", seq=3))
    dec(body_of("h3", seq=2))
    assert (dec.full, dec.fast) == (3, 3)
    dec(body_of("h2", seq=2))  # forgotten: the full checks; h1 goes (least recent)
    dec(body_of("h3", seq=3))
    dec(body_of("h2", seq=3))
    assert (dec.full, dec.fast) == (4, 5)
    dec(body_of("h4", sports=range(2)))  # 8 entries: h3 goes, h2 + h4 = 5 stay
    dec(body_of("h2", seq=4))
    dec(body_of("h4", seq=2, sports=range(2)))
    assert (dec.full, dec.fast) == (5, 7)
    dec(body_of("h3", seq=4))  # gone above: the full checks
    dec(body_of("h1", seq=4))  # gone before: the full checks
    assert (dec.full, dec.fast) == (7, 7)


def test_a_hosts_new_entries_replace_its_old_ones_in_the_bound() -> None:
    """A host whose flows changed is remembered by its new entries only: its old ones do not count."""
    dec = ReportDecoder(max_entries=6)
    dec(body_of("h1"))
    dec(body_of("h1", sports=range(10, 13), seq=2))  # new flows: full checks, h1's 3 entries replaced
    dec(body_of("h2"))
    dec(body_of("h1", sports=range(10, 13), seq=3))
    dec(body_of("h2", seq=2))
    assert (dec.full, dec.fast) == (3, 2)


# ---- ReplyEncoder's memory ---------------------------------------------------------------------------------

def flow_levels(n: int, level: int, job: str = "j1") -> tuple[FlowLevel, ...]:
    return tuple(FlowLevel(FlowKey("10.0.0.1", "10.0.0.3", 40000 + i, 4791, 17), job, level) for i in range(n))


@pytest.fixture
def encodings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many flow lists were encoded (one entry per call of encode_flow_levels, its flow count)."""
    calls: list[int] = []
    real = schema.encode_flow_levels

    def counting(flows: Any) -> bytes:
        flows = tuple(flows)
        calls.append(len(flows))
        return real(flows)

    monkeypatch.setattr(schema, "encode_flow_levels", counting)
    return calls


def reply_of(flows: tuple[FlowLevel, ...], epoch: int = 1) -> LevelsReply:
    return LevelsReply(epoch, 3.0, (0, 8), flows, 0.5)


def test_a_hosts_same_flows_are_encoded_once(encodings: list[int]) -> None:
    """While a host's reply carries the very same flows tuple, its entries are not encoded again; an
    equal but new tuple is. Every reply is the codec's bytes."""
    enc = ReplyEncoder()
    flows = flow_levels(3, 1)
    for epoch in (1, 2, 3):
        assert enc("h1", reply_of(flows, epoch)) == encode(reply_to_wire(reply_of(flows, epoch)))
    assert encodings == [3]
    assert enc("h1", reply_of(tuple(list(flows)), 4)) == encode(reply_to_wire(reply_of(flows, 4)))
    assert enc("h2", reply_of(flows)) == encode(reply_to_wire(reply_of(flows)))
    assert encodings == [3, 3, 3]


def test_the_encoders_bound_is_inclusive_and_forgets_the_least_recent_host(encodings: list[int]) -> None:
    """Hosts whose entries fill max_bytes exactly are all kept; a host served from memory counts as
    recent; a host whose flows changed is counted by its new entries only."""
    a, b, c = flow_levels(2, 0, "j1"), flow_levels(2, 0, "j2"), flow_levels(2, 0, "j3")
    size = len(schema.encode_flow_levels(a))  # the three encode to the same length
    encodings.clear()
    enc = ReplyEncoder(max_bytes=2 * size)
    enc("h1", reply_of(a))
    enc("h2", reply_of(b))
    enc("h1", reply_of(a, 2))
    enc("h2", reply_of(b, 2))
    assert len(encodings) == 2  # both kept at exactly the bound
    enc("h1", reply_of(a, 3))  # h1 most recent
    enc("h3", reply_of(c))  # h2 goes
    enc("h1", reply_of(a, 4))
    enc("h3", reply_of(c, 2))
    assert len(encodings) == 3
    enc("h2", reply_of(b, 3))  # forgotten: encoded again; h1 goes
    assert len(encodings) == 4
    a2 = flow_levels(2, 1, "j1")
    enc("h3", reply_of(a2, 3))  # h3's flows change: its old entries no longer count
    enc("h2", reply_of(b, 4))
    enc("h3", reply_of(a2, 4))
    enc("h2", reply_of(b, 5))
    assert len(encodings) == 5


def test_hosts_one_byte_over_the_encoders_bound_do_not_stay_together(encodings: list[int]) -> None:
    """Two hosts whose entries exceed max_bytes by one byte are not both kept: the older one goes."""
    a, b = flow_levels(2, 0, "j1"), flow_levels(2, 0, "j2")
    enc = ReplyEncoder(max_bytes=len(schema.encode_flow_levels(a)) + len(schema.encode_flow_levels(b)) - 1)
    encodings.clear()
    enc("h1", reply_of(a))
    enc("h2", reply_of(b))  # h1 goes
    enc("h2", reply_of(b, 2))
    assert len(encodings) == 2
    enc("h1", reply_of(a, 2))  # encoded again; h2 goes
    enc("h1", reply_of(a, 3))
    assert len(encodings) == 3


def test_a_leader_epoch_round_trips_through_every_encoder() -> None:
    """An elected leader's epoch (7) is written by reply_to_wire, encode_reply and ReplyEncoder under
    "leader_epoch" and read back by reply_from_wire; a lone controller's 0 is not written at all."""
    reply = LevelsReply(3, 1.5, (0, 8), (FlowLevel(KEY, "j1", 1),), 0.25, leader_epoch=7)
    wire = reply_to_wire(reply)
    assert wire["leader_epoch"] == 7
    assert reply_from_wire(wire) == reply and reply_from_wire(wire).leader_epoch == 7
    assert decode(encode_reply(reply))["leader_epoch"] == 7
    assert reply_from_wire(decode(encode_reply(reply))) == reply
    assert reply_from_wire(decode(ReplyEncoder()("h1", reply))) == reply
    lone = LevelsReply(3, 1.5, (0, 8), (FlowLevel(KEY, "j1", 1),), 0.25)
    assert "leader_epoch" not in reply_to_wire(lone) and b"leader_epoch" not in encode_reply(lone)


@pytest.mark.parametrize("epoch", [-1, MAX_COUNTER + 1, "7"])
def test_a_bad_leader_epoch_is_refused_naming_the_field(epoch: Any) -> None:
    wire = reply_to_wire(LevelsReply(3, 1.5, (0, 8), (FlowLevel(KEY, "j1", 1),), 0.25))
    wire["leader_epoch"] = epoch
    with pytest.raises(SchemaError) as info:
        reply_from_wire(wire)
    assert info.value.field == "leader_epoch"
