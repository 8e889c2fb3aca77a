"""Reading the simulator's JSON inputs (jobs files, sweep grids, Philly job logs) with one kind of error.

Every failure is a UserError naming the input (``--grid``, ``--jobs``, ``philly cluster_job_log``) and
the path: a missing file, text that is not UTF-8, invalid JSON, JSON nested deeper than Python's parser
goes (RecursionError), an integer longer than Python converts (``sys.get_int_max_str_digits``, 4300
digits), a file over the reader's size bound. :func:`iter_json_list` reads a top-level list one
element at a time, so a caller that needs the first N elements stops after N: the stdlib decoder
(``raw_decode``) on a growing buffer, so an element is exactly what ``json.loads`` would give. ijson
was measured and not taken: its C backend (yajl2_c 3.6) refuses integers above 2**63, and its
prefixed events take memory quadratic in the depth (30,000 nested lists: MemoryError at 2 GiB).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from leveller.errors import UserError

CHUNK_CHARS = 1 << 20  # text read at a time by iter_json_list
_WS = " \t\n\r"


def _why(exc: ValueError | RecursionError) -> str:
    """What is wrong with the JSON text, for the message after ``not valid JSON``."""
    if isinstance(exc, RecursionError):
        return "nested deeper than the parser goes"
    if isinstance(exc, json.JSONDecodeError):
        return str(exc)
    if "integer string conversion" in str(exc):  # int() refuses over sys.get_int_max_str_digits() digits
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return str(exc)


def read_json(path: str, what: str, max_bytes: int | None = None) -> Any:
    """The JSON value in file ``path``; UserError naming ``what`` (e.g. ``--grid``) and the path when the
    file is missing, larger than ``max_bytes``, or not valid JSON."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} {path!r}: no such file")
    try:
        with p.open("rb") as fh:
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except OSError as exc:
        raise UserError(f"{what} {path!r}: cannot read it ({exc.strerror})") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise UserError(f"{what} {path!r}: larger than {max_bytes} bytes; allowed: at most {max_bytes}")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path!r}: not UTF-8 text ({exc.reason})") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise UserError(f"{what} {path!r}: not valid JSON ({_why(exc)})") from None


class _Text:
    """A growing window on a text file: ``buf[pos:]`` is unread; ``line`` counts the newlines dropped."""

    def __init__(self, fh: Any, what: str, path: str) -> None:
        self.fh, self.what, self.path = fh, what, path
        self.buf, self.pos, self.line, self.eof = "", 0, 1, False

    def more(self) -> bool:
        """Read another chunk (keeping the unread text); False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = self.fh.read(max(CHUNK_CHARS, len(self.buf) - self.pos))  # doubles for a long element
        except UnicodeDecodeError as exc:
            raise UserError(f"{self.what} {self.path!r}: not UTF-8 text ({exc.reason})") from None
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0
        self.eof = not chunk
        return bool(chunk)

    def skip_ws(self) -> str:
        """The next character that is not white space ('' at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def bad(self, why: str, at: int | None = None) -> UserError:
        at = self.pos if at is None else at
        line = self.line + self.buf.count("\n", 0, at)
        return UserError(f"{self.what} {self.path!r}: not valid JSON ({why} at line {line})")


def iter_json_list(path: str, what: str) -> Iterator[Any]:
    """The elements of the JSON list in file ``path``, one at a time (memory: one element and a chunk).
    UserError as :func:`read_json`, also ``expected a JSON list`` when the value is not a list. Text
    after an element the caller did not ask for is not read."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} {path!r}: no such file")
    decoder = json.JSONDecoder()
    with p.open(encoding="utf-8", newline="") as fh:
        text = _Text(fh, what, path)
        c = text.skip_ws()
        if c != "[":
            if not c:
                raise text.bad("the file is empty")
            raise UserError(f"{what} {path!r}: expected a JSON list")
        text.pos += 1
        first = True
        while True:
            c = text.skip_ws()
            if c == "]":
                text.pos += 1
                if text.skip_ws():
                    raise text.bad("text after the list")
                return
            if not first:
                if c != ",":
                    raise text.bad("expected ',' or ']'" if c else "the list is not closed")
                text.pos += 1
                c = text.skip_ws()
            if not c:
                raise text.bad("the list is not closed")
            yield _element(text, decoder)
            first = False


def _element(text: _Text, decoder: json.JSONDecoder) -> Any:
    """Decode the element at ``text.pos``, reading more while it may be cut by the buffer's end."""
    while True:
        try:
            value, end = decoder.raw_decode(text.buf, text.pos)
        except json.JSONDecodeError as exc:
            if text.more():
                continue  # maybe cut by the end of the buffer: read more and decode again
            raise text.bad(exc.msg, exc.pos) from None
        except (ValueError, RecursionError) as exc:
            raise text.bad(_why(exc)) from None
        if end == len(text.buf) and text.more():
            continue  # a number at the buffer's end may go on ("12" of "123"): decode again with more
        text.pos = end
        return value
