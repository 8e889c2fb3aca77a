"""The controller's memory of each host's wire text (ReportDecoder, ReplyEncoder) never changes a result:
a report decoded from memory equals report_from_wire(decode(body)), errors included, whatever changed
in the body; a reply encoded from memory is byte for byte the codec's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.codec import SchemaError, decode, encode
from leveller.model.flow import flow_key
from leveller.rpc.schema import (
    FlowLevel,
    FlowReport,
    JobReport,
    LevelsReply,
    ReplyEncoder,
    Report,
    ReportDecoder,
    reply_to_wire,
    report_from_wire,
    report_to_wire,
)

RUN = "5f0c3a1e9b7d2468"


def body_of(host: str, flows: list[tuple[int, str, int]], jobs: tuple[str, ...] = ("j1", "j2"), seq: int = 1,
            dscp: tuple[tuple[int, int, int], ...] = ()) -> bytes:
    """The codec's encoding of a report of (sport, job, bytes) flows (the form an agent sends), with
    ``dscp``: (flow index, DSCP, bytes) entries (flows_dscp)."""
    report = Report(host, tuple(JobReport(j, 5, 1000.0, 0.5) for j in jobs),
                    tuple(FlowReport(flow_key("10.0.0.1", "10.0.0.3", sport, 4791, 17), job, n)
                          for sport, job, n in flows), RUN, seq, dscp)
    return encode(report_to_wire(report))


def full(body: bytes) -> Any:
    """What the full checks give: the Report, or the error's field and message."""
    try:
        return report_from_wire(decode(body))
    except SchemaError as exc:
        return ("error", exc.field, str(exc))


def memory(decoder: ReportDecoder, body: bytes) -> Any:
    try:
        return decoder(body)
    except SchemaError as exc:
        return ("error", exc.field, str(exc))


FIRST = [(40000 + i, "j1" if i % 2 else "j2", 1000 * i) for i in range(4)]


def test_a_repeated_report_with_new_byte_counts_is_decoded_from_memory() -> None:
    dec = ReportDecoder()
    assert dec(body_of("h1", FIRST)) == full(body_of("h1", FIRST)) and (dec.fast, dec.full) == (0, 1)
    later = [(p, j, n + 7 * 2**40) for p, j, n in reversed(FIRST[1:])]  # fewer flows, reordered, more bytes
    got = dec(body_of("h1", later, seq=2))
    assert got == full(body_of("h1", later, seq=2)) and (dec.fast, dec.full) == (1, 1)
    assert [f.bytes for f in got.flows] == [n for _, _, n in later]
    dec(body_of("h2", FIRST))  # another host: its own memory
    assert (dec.fast, dec.full) == (1, 2)


def test_a_report_with_bytes_per_dscp_is_decoded_from_memory_too() -> None:
    # what a real agent sends: every flow's bytes per DSCP ride along (flows_dscp sorts after flows)
    dec = ReportDecoder()
    dec(body_of("h1", FIRST, dscp=((0, 46, 10), (1, 0, 20))))
    body = body_of("h1", FIRST, seq=2, dscp=((0, 46, 15), (0, 8, 1), (3, 0, 30)))
    got = dec(body)
    assert got == full(body) and got.dscp_bytes == ((0, 46, 15), (0, 8, 1), (3, 0, 30)) and dec.fast == 1
    bad = body_of("h1", FIRST, seq=3, dscp=((4, 46, 1),))  # no flow 4: the full checks name the field
    assert memory(dec, bad) == full(bad) and full(bad)[1] == "flows_dscp[0][0]"


def test_a_remembered_entry_is_checked_against_the_reports_jobs_and_for_duplicates() -> None:
    dec = ReportDecoder()
    dec(body_of("h1", FIRST))
    no_j1 = body_of("h1", FIRST, jobs=("j2",), seq=2)  # the entries are remembered, their job j1 is gone
    assert memory(dec, no_j1) == full(no_j1) == ("error", "flows[1].job", memory(dec, no_j1)[2])
    twice = body_of("h1", FIRST[:1], seq=3).replace(b"}]", b"}," + body_of("h1", FIRST[:1])[10:].split(b"]")[0]
                                                       + b"]", 1)
    assert memory(dec, twice) == full(twice) and full(twice)[0] == "error"
    assert dec.fast == 0


@pytest.mark.parametrize("count", [b"-1", b"01", b"1.0", b"1e3", b" 1", b"9223372036854775808", b"", b"true"])
def test_a_byte_count_the_codec_would_refuse_or_read_otherwise_takes_the_full_checks(count: bytes) -> None:
    dec = ReportDecoder()
    dec(body_of("h1", FIRST))
    body = body_of("h1", FIRST, seq=2).replace(b'"bytes":2000,', b'"bytes":' + count + b",")
    assert memory(dec, body) == full(body) and dec.fast == 0


def test_memory_is_bounded() -> None:
    dec = ReportDecoder(max_entries=6)
    for host in ("h1", "h2", "h3"):
        dec(body_of(host, FIRST[:3]))
    dec(body_of("h1", FIRST[:3], seq=2))  # h1 was forgotten first (least recent), h2 then h3 kept
    dec(body_of("h3", FIRST[:3], seq=2))
    assert (dec.full, dec.fast) == (4, 1)


# ---- property: any change to a remembered body gives exactly what the full checks give -----------------

TOKENS = [b"0", b"5", b"9223372036854775807", b"9223372036854775808", b"-1", b"05", b"1.5", b"true", b"null",
          b'"x"', b"{}", b"[]", b"}", b"]", b",", b":", b'"', b"\\", b" ", b'"bytes":1', b'"job":"j1"',
          b'"src":"10.0.0.9"', b'"proto":"tcp"', b'"sport":40001', b"\xff", b"\\u0062"]


@st.composite
def edited(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` with a few edits: a token or a byte inserted, a span deleted or replaced."""
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        token = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=2))
        span = draw(st.integers(1, 12))
        if kind == "insert":
            body = body[:at] + token + body[at:]
        elif kind == "delete":
            body = body[:at] + body[at + span:]
        else:
            body = body[:at] + token + body[at + span:]
    return body


flows_st = st.lists(st.tuples(st.integers(40000, 40007), st.sampled_from(["j1", "j2", "j3"]),
                              st.integers(0, 2**63 - 1)), max_size=5)


@settings(max_examples=600)
@given(first=flows_st, data=st.data())
def test_decoding_from_memory_equals_the_full_checks(first: list[tuple[int, str, int]], data: st.DataObject) -> None:
    dec = ReportDecoder()
    memory(dec, body_of("h1", first))  # remembered if valid (no flow twice, jobs of the report)
    # the next report: some of the same flows (new counters, any order, maybe twice), maybe new ones,
    # maybe other jobs or another host, then maybe edited anywhere
    later = data.draw((st.lists(st.sampled_from(first), max_size=6) if first else st.just([])) | flows_st)
    later = [(p, j, data.draw(st.integers(0, 2**63 - 1))) for p, j, _ in later]
    jobs = data.draw(st.sampled_from([("j1", "j2"), ("j1", "j2", "j3"), ("j2",)]))
    dscp = tuple(data.draw(st.lists(st.tuples(st.integers(0, len(later)), st.sampled_from([0, 8, 46, 64]),
                                              st.integers(0, 2**63 - 1)), max_size=3)))
    body = body_of(data.draw(st.sampled_from(["h1", "h1", "h2"])), later, jobs, seq=2, dscp=dscp)
    if data.draw(st.booleans()):
        body = data.draw(edited(body))
    assert memory(dec, body) == full(body)


@settings(max_examples=600)
@given(first=flows_st, data=st.data())
def test_the_same_entries_in_the_same_order_decode_from_memory_as_the_full_checks(
        first: list[tuple[int, str, int]], data: st.DataObject) -> None:
    """The one-pass path (the host's entries, same order, new counts): any edit anywhere, counts of
    any size, jobs dropped from the report, gives exactly what the full checks give."""
    dec = ReportDecoder()
    memory(dec, body_of("h1", first))
    counts = data.draw(st.lists(st.integers(0, 2**64), min_size=len(first), max_size=len(first)))
    jobs = data.draw(st.sampled_from([("j1", "j2", "j3"), ("j1", "j2"), ("j2",)]))
    later = [(p, j, c) for (p, j, _), c in zip(first, counts)]
    body = body_of("h1", [f for f in later if f[2] < 2**63], jobs, seq=2) if any(c >= 2**63 for c in counts) \
        else body_of("h1", later, jobs, seq=2)
    if data.draw(st.booleans()):
        body = data.draw(edited(body))
    assert memory(dec, body) == full(body)


def test_a_counts_only_change_takes_the_one_pass_path_and_a_reordered_list_the_per_entry_one() -> None:
    dec = ReportDecoder()
    dec(body_of("h1", FIRST))
    later = [(p, j, n + 7) for p, j, n in FIRST]
    assert dec(body_of("h1", later, seq=2)) == full(body_of("h1", later, seq=2))
    assert (dec.full, dec.fast, dec.same) == (1, 1, 1)
    assert dec(body_of("h1", later[::-1], seq=3)) == full(body_of("h1", later[::-1], seq=3))
    assert (dec.fast, dec.same) == (2, 1)  # by each entry's text
    # the reordered list is now the one remembered in order: the next report like it is one pass again
    assert dec(body_of("h1", later[::-1], seq=4)) == full(body_of("h1", later[::-1], seq=4))
    assert (dec.full, dec.fast, dec.same) == (1, 3, 2)
    # a count slot moved to another entry's position is no longer the remembered list
    body = body_of("h1", later[::-1], seq=5)
    moved = body.replace(b'{"bytes":7,', b'{', 1).replace(b'"src":"10.0.0.1"}', b'"src":"10.0.0.1",{"bytes":7,}', 1)
    assert memory(dec, moved) == full(moved) and dec.same == 2


def test_the_property_above_does_take_the_memory_path() -> None:
    dec = ReportDecoder()
    dec(body_of("h1", FIRST))
    dec(body_of("h1", FIRST[::-1], seq=2))
    assert dec.fast == 1  # so the equality above is not only full checks against themselves


# ---- replies -------------------------------------------------------------------------------------------

def levels(n: int, level: int, job: str = "j1") -> tuple[FlowLevel, ...]:
    return tuple(FlowLevel(flow_key("10.0.0.1", "10.0.0.3", 40000 + i, 4791, 17), job, level) for i in range(n))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["h1", "h2"]), st.sampled_from(["same", "equal", "other"]),
                          st.integers(0, 2**40), st.floats(0, 100)), max_size=8))
def test_a_reply_encoded_from_memory_is_the_codecs(steps: list[tuple[str, str, int, float]]) -> None:
    enc = ReplyEncoder()
    last: dict[str, tuple[FlowLevel, ...]] = {}
    for host, how, epoch, age in steps:
        if how == "same" and host in last:
            flows = last[host]  # the very same tuple: its encoding is reused
        elif how == "equal" and host in last:
            flows = tuple(last[host])
        else:
            flows = levels(epoch % 4, epoch % 8, job=host)
        last[host] = flows
        reply = LevelsReply(epoch, 3.0, (0, 8, 16, 24, 32, 40, 10, 18), flows, age)
        assert enc(host, reply) == encode(reply_to_wire(reply))


def test_a_changed_level_is_encoded_anew_and_memory_is_bounded() -> None:
    enc = ReplyEncoder(max_bytes=600)
    first = LevelsReply(1, 3.0, (0, 8), levels(3, 0), 0.0)
    assert enc("h1", first) == encode(reply_to_wire(first))
    changed = LevelsReply(2, 3.0, (0, 8), levels(3, 1), 0.0)
    assert b'"level":1' in enc("h1", changed) and enc("h1", changed) == encode(reply_to_wire(changed))
    for host in ("h2", "h3", "h4"):
        enc(host, first)
    assert sum(len(v[1]) for v in enc._hosts.values()) <= 600 and "h1" not in enc._hosts


# ---- IPv6 flows (issue 13): any text form on the wire, one canonical key -------------------------------------

def _v6_forms(n: int) -> st.SearchStrategy[str]:
    import ipaddress

    addr = ipaddress.IPv6Address(n)
    return st.sampled_from([str(addr), addr.exploded, str(addr).upper(), addr.exploded.upper()])


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 2**128 - 1)), min_size=1, max_size=8,
                unique_by=lambda t: t[0]), st.data())
def test_ipv6_flows_decode_to_the_models_keys_on_every_path(pairs: list[tuple[int, int]], data: st.DataObject) -> None:
    """The plain loop, the full checks and the memory path all give flow_key's canonical key, whatever the
    address text (a non-canonical one never takes a short cut that would keep it)."""
    texts = [(data.draw(_v6_forms(a)), data.draw(_v6_forms(b))) for a, b in pairs]
    flows = [{"src": s, "dst": d, "sport": 1000 + i, "dport": 4791, "proto": "udp", "job": "j", "bytes": i}
             for i, (s, d) in enumerate(texts)]
    msg = {"v": 1, "host": "h6", "run": "ab" * 8, "seq": 1, "flows": flows,
           "jobs": [{"job": "j", "iterations": 1, "start_time": 1.7e9, "recent": []}]}
    want = [flow_key(s, d, 1000 + i, 4791, "udp") for i, (s, d) in enumerate(texts)]
    assert [f.key for f in report_from_wire(decode(encode(msg))).flows] == want
    decoder = ReportDecoder()
    assert [f.key for f in decoder(encode(msg)).flows] == want
    msg["seq"] = 2
    assert [f.key for f in decoder(encode(msg)).flows] == want and decoder.fast == 1
