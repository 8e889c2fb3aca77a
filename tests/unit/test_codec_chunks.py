"""leveller.codec.encode_in_chunks: the same bytes as encode, the list encoded a chunk at a time with a
call in between (the Status of 10,000 flows hands the interpreter lock to reports between chunks)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from leveller.codec import encode, encode_in_chunks

_text = st.text(max_size=8)
_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                      max_leaves=12)


@given(st.dictionaries(_text, _value, max_size=5), st.lists(_value, max_size=40), st.integers(1, 9))
def test_the_same_bytes_as_one_encode(rest: dict[str, Any], items: list[Any], chunk: int) -> None:
    message = {**rest, "flows": items}
    calls: list[int] = []
    assert encode_in_chunks(message, "flows", lambda: calls.append(1), chunk) == encode(message)
    assert len(calls) == (0 if len(items) <= chunk else -(-len(items) // chunk))


def test_a_long_list_calls_between_after_every_chunk() -> None:
    message = {"agents": [{"flows": 3}], "flows": [{"flow": f"f{i}", "level": i % 4} for i in range(1000)], "z": 1}
    seen: list[int] = []
    out = encode_in_chunks(message, "flows", lambda: seen.append(len(seen)), chunk=256)
    assert out == encode(message) and len(seen) == 4


def test_no_list_or_a_string_holding_the_place_holder_is_encoded_whole() -> None:
    calls: list[int] = []
    for message in ({"flows": 5}, {"other": [1] * 600},
                    {"flows": list(range(600)), "job": "\u0000leveller-chunks\u0000"}):
        assert encode_in_chunks(message, "flows", lambda: calls.append(1), chunk=256) == encode(message)
    assert calls == []  # each encoded in one piece (the place holder twice: no substitution in the wrong place)
