"""Shared-secret message authentication (HMAC-SHA256 over method, time and body).

The time is part of the MAC and must be within ``MAX_SKEW_S`` of the
receiver's clock, which bounds how long a captured message can be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Mapping

from leveller.errors import UserError
from leveller.files import MAX_SECRET_FILE_BYTES, read_small_file

SIGNATURE_KEY = "x-leveller-mac"
TIME_KEY = "x-leveller-time"
MAX_SKEW_S = 300.0
MIN_SECRET_BYTES = 16


class AuthError(Exception):
    """A message without a valid signature."""


def sign(secret: bytes, method: str, sent_at: float, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``method``, ``sent_at`` and ``body``."""
    msg = b"%s\n%.6f\n" % (method.encode(), sent_at) + body
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def metadata(secret: bytes | None, method: str, sent_at: float, body: bytes) -> tuple[tuple[str, str], ...]:
    """gRPC metadata pairs that authenticate ``body`` (none without a secret: mutual TLS only)."""
    if secret is None:
        return ()
    return ((TIME_KEY, f"{sent_at:.6f}"), (SIGNATURE_KEY, sign(secret, method, sent_at, body)))


def verify(secret: bytes | None, method: str, body: bytes, md: Mapping[str, str | bytes], now: float) -> float:
    """The signed send time if ``md`` carries a fresh, valid signature of ``body``; else AuthError.
    Without a secret (mutual TLS authenticates the peer instead) nothing is checked: ``now``.
    ``md``: gRPC metadata, whose values are text except under keys ending in -bin (not ours)."""
    if secret is None:
        return now
    mac, when = md.get(SIGNATURE_KEY), md.get(TIME_KEY)
    if not isinstance(mac, str) or not isinstance(when, str) or not mac or not when:
        raise AuthError(f"missing {SIGNATURE_KEY}/{TIME_KEY} metadata: the shared secret is required")
    try:
        sent_at = float(when)
    except ValueError:
        raise AuthError(f"{TIME_KEY} = {when!r} is not a number") from None
    if not math.isfinite(sent_at) or abs(now - sent_at) > MAX_SKEW_S:
        raise AuthError(f"{TIME_KEY} = {when!r} is more than {MAX_SKEW_S:.0f} s from this host's clock")
    if not hmac.compare_digest(mac, sign(secret, method, float(when), body)):
        raise AuthError("signature does not match: wrong shared secret or altered message")
    return sent_at


def load_secret(path: str | None, env: dict[str, str] | None = None, optional: bool = False) -> bytes | None:
    """The shared secret from a file (preferred) or LEVELLER_SECRET; UserError if absent or short.
    ``optional`` (mutual TLS is on): None when neither is given."""
    env = dict(os.environ) if env is None else env
    if path:
        secret = read_small_file(path, "--secret-file", MAX_SECRET_FILE_BYTES, private=True).strip()
        where = f"--secret-file {path!r}"
    else:
        secret = env.get("LEVELLER_SECRET", "").encode()
        where = "LEVELLER_SECRET"
        if not secret and optional:
            return None
        if not secret:
            raise UserError("no shared secret: give --secret-file FILE or set LEVELLER_SECRET "
                            "(the same value on the controller and every agent)")
    if len(secret) < MIN_SECRET_BYTES:
        raise UserError(f"{where}: the secret has {len(secret)} bytes; at least {MIN_SECRET_BYTES} are required")
    return secret
