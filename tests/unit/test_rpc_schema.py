"""RPC schema: well-formed messages round-trip; every malformed field is refused by name."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leveller.rpc.schema as schema
from leveller.codec import SchemaError, decode, encode
from leveller.model.flow import flow_key
from leveller.rpc.schema import (
    FlowLevel,
    FlowReport,
    JobReport,
    JobShift,
    LevelsReply,
    Report,
    encode_reply,
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
