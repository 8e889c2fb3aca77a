"""The shim's control-channel JSON reader (shim/json.c) on tricky input, through tests/shim/json_probe.c;
then the control socket itself on the requests the old strstr reader got wrong."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveller.agent import shim_control
from leveller.bench.shim import StreamRun

Parsed = dict[str, tuple[str, Any]]  # key -> (type, value)


def probe_many(shim_build: Path, docs: list[bytes]) -> list[Parsed | str]:
    """Each document parsed by the shim's reader: {key: (type, value)}, or the error text."""
    out = subprocess.run([str(shim_build / "json_probe")], input=b"".join(d + b"\0" for d in docs),
                         capture_output=True, timeout=60, check=True).stdout.decode().splitlines()
    assert len(out) == len(docs)
    results: list[Parsed | str] = []
    for line in out:
        rec = json.loads(line)
        if not rec["ok"]:
            results.append(bytes.fromhex(rec["error"]).decode())
            continue
        parsed: Parsed = {}
        for key, kind, number, text in rec["fields"]:
            value = number if kind in ("integer", "boolean") else \
                bytes.fromhex(text).decode() if kind == "string" else None
            parsed[bytes.fromhex(key).decode()] = (kind, value)
        results.append(parsed)
    return results


def probe(shim_build: Path, doc: str | bytes) -> Parsed | str:
    return probe_many(shim_build, [doc.encode() if isinstance(doc, str) else doc])[0]


ACCEPTED: list[tuple[str, Parsed]] = [
    ('{"job":"tc","tc":5}', {"job": ("string", "tc"), "tc": ("integer", 5)}),
    ('{"job":"a\\"b","tc":5}', {"job": ("string", 'a"b'), "tc": ("integer", 5)}),
    ('{"job":"tc\\":9,","tc":7}', {"job": ("string", 'tc":9,'), "tc": ("integer", 7)}),
    (' \t\r\n{ "op" :\n"list" }\n ', {"op": ("string", "list")}),
    ('{"a":{"tc":1,"b":[1,2,{"c":[]}]},"tc":3}', {"a": ("object", None), "tc": ("integer", 3)}),
    ('{"s":"\\u00e9\\ud83d\\ude00\\/\\\\\\n"}', {"s": ("string", "\u00e9\U0001F600/\\\n")}),
    ('{"t":true,"f":false,"n":null}', {"t": ("boolean", 1), "f": ("boolean", 0), "n": ("null", None)}),
    ('{"tc":5.5,"e":1e2,"neg":-1,"zero":-0}', {"tc": ("number", None), "e": ("number", None),
                                              "neg": ("integer", -1), "zero": ("integer", 0)}),
    ('{"big":9223372036854775807,"small":-9223372036854775808,"over":9223372036854775808}',
     {"big": ("integer", 2**63 - 1), "small": ("integer", -2**63), "over": ("number", None)}),
    ('{"tc":"5"}', {"tc": ("string", "5")}),
    ("{}", {}),
]


@pytest.mark.parametrize("doc,expected", ACCEPTED)
def test_valid_json_is_read_as_json_means_it(shim_build: Path, doc: str, expected: Parsed) -> None:
    assert probe(shim_build, doc) == expected


REFUSED: list[tuple[str, str]] = [
    ('{"tc":5,"tc":6}', "duplicate key 'tc' at byte 8"),
    ('{"tc":5', "truncated input: expected ',' or '}'"),
    ('{"job":"gp', "unterminated string"),
    ('{"tc":', "truncated input: expected a value"),
    ('{"tc"', "truncated input: expected ':'"),
    ("{", "truncated input: expected a key"),
    ("", "expected a JSON object"),
    ('["op","list"]', "expected a JSON object"),
    ('{"tc":05}', "leading zero"),
    ('{"tc":5.}', "digits must follow '.'"),
    ('{"tc":1e}', "digits must follow the exponent"),
    ('{"tc":+5}', "unexpected character '+'"),
    ('{"tc":5,}', "expected a string key"),
    ("{'tc':5}", "expected a string key"),
    ('{"tc":5} x', "unexpected text after the object"),
    ('{"tc":5}{"tc":6}', "unexpected text after the object"),
    ('{"s":"\\x"}', "bad escape \\x"),
    ('{"s":"\\ud83d"}', "without its low half"),
    ('{"s":"\\ude00"}', "lone low surrogate"),
    ('{"s":"\\u0000"}', "\\u0000 in a string"),
    ('{"s":"a\tb"}', "control character 0x09"),
    ('{"t":tru}', "unexpected character"),
    ('{"a":' + "[" * 20 + "]" * 20 + "}", "nested deeper than 16"),
    ('{"s":"' + "x" * 256 + '"}', "string longer than 255 bytes"),
    ("{" + ",".join(f'"k{i}":{i}' for i in range(17)) + "}", "more than 16 fields"),
]


@pytest.mark.parametrize("doc,needle", REFUSED)
def test_invalid_json_is_refused_with_the_reason_and_place(shim_build: Path, doc: str, needle: str) -> None:
    result = probe(shim_build, doc)
    assert isinstance(result, str), result
    assert needle in result and "at byte" in result


# -- properties: agree with Python's json on what it accepts, refuse every truncation ---------------

keys = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=8)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(keys, inner, max_size=3)), max_leaves=8)
documents = st.dictionaries(keys.filter(lambda k: len(k.encode()) < 32), values, max_size=6)


def expected_of(doc: dict[str, Any]) -> Parsed:
    kinds: Parsed = {}
    for key, value in doc.items():
        if value is None:
            kinds[key] = ("null", None)
        elif isinstance(value, bool):
            kinds[key] = ("boolean", int(value))
        elif isinstance(value, int):
            kinds[key] = ("integer", value)
        elif isinstance(value, str):
            kinds[key] = ("string", value)
        else:
            kinds[key] = ("array" if isinstance(value, list) else "object", None)
    return kinds


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.tuples(documents, st.booleans(), st.sampled_from([None, 0, 2])), min_size=1, max_size=20))
def test_any_object_python_writes_is_read_back_the_same(shim_build: Path,
                                                         docs: list[tuple[dict[str, Any], bool, int | None]]) -> None:
    texts = [json.dumps(d, ensure_ascii=ascii_only, indent=indent).encode() for d, ascii_only, indent in docs]
    assert probe_many(shim_build, texts) == [expected_of(d) for d, _, _ in docs]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents.filter(bool), cut=st.floats(0, 1, exclude_max=True))
def test_every_truncation_is_refused(shim_build: Path, doc: dict[str, Any], cut: float) -> None:
    text = json.dumps(doc, ensure_ascii=True).encode()
    assert isinstance(probe(shim_build, text[:int(cut * len(text))]), str)


# -- the control socket: requests the old strstr reader misread -------------------------------------

def raw_request(sock: Path, line: bytes) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(shim_control.ShimClient(sock).request_line(line))
    return reply


def test_a_job_called_tc_and_other_tricky_requests_over_the_socket(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path, job='t"c')
    try:
        sock = run.sock
        # the job's name holds the key "tc" and a quote; the tc key comes after it
        reply = raw_request(sock, b'{"op":"set_tc","job":"t\\"c","tc":32}')
        assert reply["ok"] and reply["job_match"] and len(reply["results"]) == 2, reply
        reply = raw_request(sock, b'{ "tc" : 64 ,\t"job" : "t\\"c", "op" : "set_tc" }')
        assert reply["ok"] and {r["tc"] for r in reply["results"]} == {64}, reply
        # the example: read, and addressed to another job (the old reader refused it)
        assert raw_request(sock, b'{"op":"set_tc","job":"tc","tc":5}') == {"ok": True, "job_match": False,
                                                                           "results": []}
        bad = {
            b'{"op":"set_tc","job":"t\\"c","tc":5,"tc":6}': "duplicate key 'tc'",
            b'{"op":"set_tc","job":"t\\"c","tc":5.5}':
                "field 'tc' must be an integer traffic class 0..255, got a number",
            b'{"op":"set_tc","job":"t\\"c","tc":-1}': "0..255, got -1",
            b'{"op":"set_tc","job":"t\\"c","tc":"5"}': "0..255, got a string",
            b'{"op":"set_tc","job":"t\\"c","tc":99999999999999999999}': "0..255, got a number",
            b'{"op":"set_tc","job":"t\\"c","tc":5': "bad JSON: truncated input",
            b'{"op":"set_tc","job":"t\\"c","tc":5,"lease_m":100}': "unknown field 'lease_m' for op 'set_tc'",
            b'{"op":"list","verbose":true}': "unknown field 'verbose' for op 'list'",
            b'{"op":"lease","ms":100,"extra":{"a":[1]}}': "unknown field 'extra' for op 'lease'",
            b'{"op":["list"]}': "field 'op' (string) is required",
            b"x" * 5000: "request line longer than 4095 bytes",
        }
        for line, needle in bad.items():
            reply = raw_request(sock, line)
            assert reply["ok"] is False and needle in reply["error"], (line[:60], reply)
        client = shim_control.ShimClient(sock)
        assert {q.tc for q in client.list_qps()} == {64}  # no refused request changed anything
        summary = run.stop()
    finally:
        run.kill()
    assert summary["errors"] == 0 and summary["received"] == summary["posted"] > 0
