"""etcd v3 for the controllers: leases, the election transaction, guarded writes, prefix reads.

The client is ``etcd3gw`` (HTTP/JSON to etcd's gRPC gateway, ``/v3/``: etcd >= 3.4, Debian's
``etcd-server``); it needs no protobuf runtime of its own, so it cannot clash with the one the
controller's gRPC service uses. ``--etcd`` takes every member's client URL; a call goes to the member
that answered last and moves on to the next when one fails (connection refused, timeout, an error
status), so one member down changes nothing. Every call is bounded by ``timeout_s``. With TLS
(``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``) the URLs are ``https://``.

``on_call(op, seconds, error)`` is told of every call (leveller.controller.ha turns it into metrics).
"""

from __future__ import annotations

import base64
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from leveller.controller.hastate import Holder, Op

API_PATH = "/v3/"
MAX_ENDPOINTS = 16


class EtcdError(Exception):
    """No etcd member answered a call (the message names each member's error)."""


@dataclass(frozen=True)
class EtcdTls:
    cacert: str
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_endpoints(text: str, option: str = "--etcd") -> tuple[Endpoint, ...]:
    """``URL[,URL...]`` (``http://HOST:PORT`` or ``https://...``) -> endpoints; ValueError naming
    ``option``, the bad item and what is allowed."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not 1 <= len(items) <= MAX_ENDPOINTS:
        raise ValueError(f"{option} {text!r}: give 1 to {MAX_ENDPOINTS} etcd client URLs, "
                         "http://HOST:PORT[,http://HOST:PORT...]")
    out = []
    for item in items:
        try:
            url = urlsplit(item)
            port = url.port
        except ValueError:
            port, url = None, None
        if url is None or url.scheme not in ("http", "https") or not url.hostname or port is None \
                or url.path not in ("", "/") or url.query or url.username:
            raise ValueError(f"{option} {text!r}: {item!r} is not an etcd client URL; expected http://HOST:PORT "
                             "or https://HOST:PORT (e.g. http://127.0.0.1:2379)")
        out.append(Endpoint(url.scheme, url.hostname, port))
    if len(set(out)) != len(out):
        raise ValueError(f"{option} {text!r}: a URL is given twice")
    if len({e.scheme for e in out}) != 1:
        raise ValueError(f"{option} {text!r}: mixes http:// and https://; use one for every member")
    return tuple(out)


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


def _holder(kv: dict[str, Any]) -> Holder:
    return Holder(_unb64(kv.get("value", "")), int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)),
                  int(kv.get("lease", 0)))


def _range_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


class EtcdStore:
    """The calls the controllers make, over the members in ``endpoints``; thread-safe (one requests
    session per member; etcd3gw's client holds no other state)."""

    def __init__(self, endpoints: Sequence[Endpoint], timeout_s: float = 1.0, tls: EtcdTls | None = None,
                 on_call: Callable[[str, float, str | None], None] | None = None) -> None:
        with warnings.catch_warnings():  # futurist (etcd3gw's dependency) probes eventlet, which warns
            warnings.simplefilter("ignore")
            import etcd3gw

        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        if tls is not None and any(e.scheme != "https" for e in endpoints):
            raise ValueError("--etcd-cacert needs https:// URLs in --etcd")
        self.endpoints = tuple(endpoints)
        self.timeout_s = timeout_s
        self.on_call = on_call or (lambda op, seconds, error: None)
        self._clients = [etcd3gw.client(host=e.host, port=e.port, protocol=e.scheme, timeout=timeout_s,
                                        api_path=API_PATH, ca_cert=tls.cacert if tls else None,
                                        cert_cert=tls.cert if tls else None, cert_key=tls.key if tls else None)
                         for e in self.endpoints]
        self._index = 0

    @property
    def active(self) -> str:
        return str(self.endpoints[self._index])

    def _post(self, op: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the member that answered last, else the next ones in turn."""
        errors = []
        start = self._index
        for k in range(len(self._clients)):
            i = (start + k) % len(self._clients)
            client = self._clients[i]
            began = time.perf_counter()
            try:
                out = client.post(client.get_url(path), json=body)
            except Exception as exc:  # etcd3gw's Etcd3Exception family, requests' errors
                self.on_call(op, time.perf_counter() - began, type(exc).__name__)
                errors.append(f"{self.endpoints[i]}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            self.on_call(op, time.perf_counter() - began, None)
            self._index = i
            return out if isinstance(out, dict) else {}
        raise EtcdError(f"etcd {op}: no member answered ({'; '.join(errors)})")

    # ---- leases -----------------------------------------------------------------------------------------
    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (id, granted TTL in seconds)."""
        out = self._post("grant", "/lease/grant", {"TTL": int(ttl_s), "ID": 0})
        if out.get("error"):
            raise EtcdError(f"etcd grant: {out['error']}")
        return int(out["ID"]), int(out.get("TTL", ttl_s))

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``: its TTL, or <= 0 if it has expired (then it is gone for good)."""
        out = self._post("keepalive", "/lease/keepalive", {"ID": lease})
        return int(out.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        """End ``lease`` now (its keys are deleted: a leader stepping down frees the election at once)."""
        self._post("revoke", "/kv/lease/revoke", {"ID": lease})

    # ---- keys -------------------------------------------------------------------------------------------
    def campaign(self, key: str, value: bytes, lease: int) -> tuple[bool, Holder | None]:
        """Create ``key`` on ``lease`` if it does not exist: (won, the key as it is now: ours if won, the
        holder's otherwise, None if it was deleted in between). The holder's lease tells a controller
        whose earlier campaign etcd applied but whose answer was lost that the key is its own."""
        k = _b64(key)
        out = self._post("campaign", "/kv/txn", {
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}],
            "success": [{"request_put": {"key": k, "value": _b64(value), "lease": str(lease)}}],
            "failure": [{"request_range": {"key": k}}]})
        if out.get("succeeded"):
            revision = int(out["header"]["revision"])
            return True, Holder(value, revision, revision, lease)
        kvs = (out.get("responses") or [{}])[0].get("response_range", {}).get("kvs", [])
        return False, _holder(kvs[0]) if kvs else None

    def holder(self, key: str) -> Holder | None:
        """``key`` as etcd has it (value, create and mod revision, lease); None if absent."""
        kvs = self._post("get", "/kv/range", {"key": _b64(key)}).get("kvs", [])
        return _holder(kvs[0]) if kvs else None

    def mark(self, key: str, created: int, value: bytes, lease: int) -> bool:
        """Rewrite ``key`` with ``value`` if it is still the one created at ``created`` and on ``lease``
        (the holder rewriting its own election key; never creates it)."""
        k = _b64(key)
        out = self._post("mark", "/kv/txn", {
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": str(created)},
                        {"key": k, "result": "EQUAL", "target": "LEASE", "lease": str(lease)}],
            "success": [{"request_put": {"key": k, "value": _b64(value), "lease": str(lease)}}], "failure": []})
        return bool(out.get("succeeded"))

    def depose(self, key: str, created: int, modified: int, value: bytes, lease: int) -> bool:
        """Take ``key`` over if it is still the one created at ``created`` and unchanged since
        ``modified``: it gets ``value`` on ``lease`` and keeps its create revision (the epoch)."""
        k = _b64(key)
        out = self._post("depose", "/kv/txn", {
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": str(created)},
                        {"key": k, "result": "EQUAL", "target": "MOD", "mod_revision": str(modified)}],
            "success": [{"request_put": {"key": k, "value": _b64(value), "lease": str(lease)}}], "failure": []})
        return bool(out.get("succeeded"))

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every key under ``prefix`` with its value."""
        out = self._post("range", "/kv/range", {"key": _b64(prefix), "range_end": _range_end(prefix)})
        return {_unb64(kv["key"]).decode(): _unb64(kv.get("value", "")) for kv in out.get("kvs", [])}

    def put(self, key: str, value: bytes, lease: int | None = None) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease is not None:
            body["lease"] = str(lease)
        self._post("put", "/kv/put", body)

    def guarded_write(self, guard_key: str, epoch: int, ops: Sequence[Op]) -> bool:
        """Apply ``ops`` in one transaction if ``guard_key`` still has create revision ``epoch`` (this
        controller still holds the election); False (nothing written) otherwise."""
        success = [{"request_delete_range": {"key": _b64(op.key)}} if op.value is None
                   else {"request_put": {"key": _b64(op.key), "value": _b64(op.value)}} for op in ops]
        out = self._post("write", "/kv/txn", {
            "compare": [{"key": _b64(guard_key), "result": "EQUAL", "target": "CREATE",
                         "create_revision": str(epoch)}],
            "success": success, "failure": []})
        return bool(out.get("succeeded"))

    def cluster(self) -> list[dict[str, Any]]:
        """The etcd members (name, client URLs), as the member list says."""
        members = self._post("members", "/cluster/member/list", {}).get("members", [])
        return [{"name": m.get("name", ""), "client_urls": m.get("clientURLs", [])} for m in members]
