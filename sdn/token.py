"""Bearer-token check for the SDN app's HTTP API when it listens beyond loopback.

`leveller sdn --api HOST:PORT` binds 127.0.0.1 by default; bound to any other address it
needs --api-token-file, and every request must then carry ``Authorization: Bearer TOKEN``
(401 otherwise, nothing else answered; the API server, sdn.httpd, checks it as soon as the headers are
in, before any of the body is read). Clients: ``sdn.client.SdnClient(url, token=...)``,
`leveller controller --sdn-token-file`.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Callable, Iterable
from typing import Any

from leveller.errors import UserError
from leveller.files import MAX_SECRET_FILE_BYTES, read_small_file

MIN_TOKEN_BYTES = 16


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (what needs no token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(path: str, option: str = "--api-token-file") -> bytes:
    """The token in ``path`` (stripped); UserError if unreadable, not a regular file of at most 64 KiB or
    shorter than MIN_TOKEN_BYTES; a warning on stderr if group or others may read it (mode 0644)."""
    token = read_small_file(path, option, MAX_SECRET_FILE_BYTES, private=True).strip()
    if len(token) < MIN_TOKEN_BYTES or not token.isascii() or any(c <= 32 for c in token):
        raise UserError(f"{option} {path!r}: the token must be at least {MIN_TOKEN_BYTES} printable ASCII "
                        "characters without spaces (e.g. `openssl rand -hex 24 > FILE`)")
    return token


def bearer_ok(given: str, token: bytes) -> bool:
    """Whether an Authorization header value is ``Bearer <token>`` (a constant-time compare)."""
    return hmac.compare_digest(given.encode("latin-1", errors="replace"), b"Bearer " + token)


def require_bearer(app: Callable[..., Iterable[bytes]], token: bytes) -> Callable[..., Iterable[bytes]]:
    """WSGI middleware: 401 unless the request carries ``Authorization: Bearer <token>``. For WSGI servers
    other than sdn.httpd, which checks the token itself as soon as the headers are in (before the body)."""

    def guarded(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if bearer_ok(environ.get("HTTP_AUTHORIZATION", ""), token):
            return app(environ, start)
        body = json.dumps({"error": "missing or wrong bearer token (Authorization: Bearer TOKEN)"}).encode()
        start("401 Unauthorized", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                   ("WWW-Authenticate", 'Bearer realm="leveller-sdn"')])
        return [body]

    return guarded
