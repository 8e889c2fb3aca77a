"""Shared-secret authentication: valid signatures pass, anything else is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.errors import UserError
from leveller.rpc import auth

SECRET = b"0123456789abcdef-secret"


def md(secret: bytes = SECRET, method: str = "/m", t: float = 1000.0, body: bytes = b"{}") -> dict[str, str]:
    return dict(auth.metadata(secret, method, t, body))


def test_valid_signature_passes() -> None:
    auth.verify(SECRET, "/m", b"{}", md(), now=1001.0)


@pytest.mark.parametrize("kwargs,body,now,msg", [
    (dict(secret=b"another-secret-of-16b"), b"{}", 1000.0, "does not match"),
    (dict(), b"{ }", 1000.0, "does not match"),  # body altered
    (dict(method="/other"), b"{}", 1000.0, "does not match"),  # replayed on another method
    (dict(), b"{}", 1000.0 + auth.MAX_SKEW_S + 1, "clock"),  # stale
])
def test_bad_signatures_are_refused(kwargs: dict[str, object], body: bytes, now: float, msg: str) -> None:
    with pytest.raises(auth.AuthError, match=msg):
        auth.verify(SECRET, "/m", body, md(**kwargs), now=now)  # type: ignore[arg-type]


def test_missing_metadata_is_refused() -> None:
    with pytest.raises(auth.AuthError, match="missing"):
        auth.verify(SECRET, "/m", b"{}", {}, now=1000.0)
    bad = md()
    bad[auth.TIME_KEY] = "soon"
    with pytest.raises(auth.AuthError, match="not a number"):
        auth.verify(SECRET, "/m", b"{}", bad, now=1000.0)


def test_load_secret(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    f.write_text("0123456789abcdef\n")
    assert auth.load_secret(str(f), env={}) == b"0123456789abcdef"
    assert auth.load_secret(None, env={"LEVELLER_SECRET": "x" * 20}) == b"x" * 20
    with pytest.raises(UserError, match="no shared secret"):
        auth.load_secret(None, env={})
    with pytest.raises(UserError, match="at least 16"):
        auth.load_secret(None, env={"LEVELLER_SECRET": "short"})
    with pytest.raises(UserError, match="cannot read"):
        auth.load_secret(str(tmp_path / "missing"), env={})
