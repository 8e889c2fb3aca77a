"""Strict JSON codec of every message (RPC, the SDN app's REST API): no NaN/Infinity, no duplicate keys,
objects at the top level, size-bounded.

Whatever the bytes, parsing ends in a value or a SchemaError: nesting too deep
for the parser and integers longer than Python converts (4300 digits) are
refused like any other malformed body, never raised as RecursionError or a bare
ValueError (which the RPC layer would answer as UNKNOWN).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from leveller.model.errors import FieldError

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


SchemaError = FieldError  # a message that does not follow the schema; ``field`` is a path such as ``flows[2].dport``


def _no_constant(name: str) -> Any:
    raise SchemaError("(body)", f"{name} is not allowed; numbers must be finite")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # C speed; a repeated key shows as a shorter dict
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise SchemaError(key, "duplicate key")
            seen.add(key)
    return out


def encode(message: dict[str, Any]) -> bytes:
    """Serialize a message (allow_nan=False: a NaN that slipped through is a bug, not data)."""
    return _dumps(message)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), sort_keys=True).encode()


_HOLE = "\u0000leveller-chunks\u0000"  # no message string holds a NUL: a unique place holder


def encode_in_chunks(message: dict[str, Any], key: str, between: Callable[[], None], chunk: int = 256) -> bytes:
    """``encode(message)``, byte for byte, with the list ``message[key]`` encoded ``chunk`` items at a time and
    ``between()`` called after each chunk. One json.dumps holds the interpreter lock for all of it (about
    0.1 s for a status of 10,000 flows, a stall for every other thread of the process); ``between`` can
    hand the lock over (``time.sleep(0)``)."""
    items = message.get(key)
    if not isinstance(items, list) or len(items) <= chunk:
        return encode(message)
    head, hole = encode({**message, key: _HOLE}), _dumps(_HOLE)
    if head.count(hole) != 1:
        return encode(message)
    parts = []
    for i in range(0, len(items), chunk):
        parts.append(_dumps(items[i:i + chunk])[1:-1])
        between()
    at = head.index(hole)
    return head[:at] + b"[" + b",".join(parts) + b"]" + head[at + len(hole):]


def loads(body: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    """Parse any strict JSON value (see the module doc); SchemaError("(body)", ...) if it is not one."""
    if len(body) > max_bytes:
        raise SchemaError("(body)", f"{len(body)} bytes exceeds the limit of {max_bytes}")
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise SchemaError("(body)", "not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise SchemaError("(body)", f"not JSON: {exc.msg} at offset {exc.pos}") from None
    except RecursionError:
        raise SchemaError("(body)", "arrays or objects nested too deeply") from None
    except ValueError as exc:  # an integer literal longer than int() accepts (sys.get_int_max_str_digits)
        if isinstance(exc, SchemaError):
            raise
        raise SchemaError("(body)", f"an integer longer than {sys.get_int_max_str_digits()} digits") from None


def decode(body: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """Parse a message body into a dict; SchemaError for anything else."""
    value = loads(body, max_bytes)
    if not isinstance(value, dict):
        raise SchemaError("(body)", f"expected a JSON object, got {type(value).__name__}")
    return value
