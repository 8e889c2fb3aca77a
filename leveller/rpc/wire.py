"""What both ends of leveller.v1.Controller share, and nothing else: a leaf of leveller.rpc.

The method paths (one SERVICE name), the gRPC channel options of servers and clients, the Watch
request's JSON codec, and the peer checks a server makes under mutual TLS. The server side
(leveller.rpc.transport), the Watch method and watcher (leveller.rpc.push) and the protobuf form
(leveller.rpc.protowire) import it; it imports none of them, so they need not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from leveller.model.checks import check_int, check_name, check_number, check_object
from leveller.model.limits import MAX_COUNTER
from leveller.rpc.loopserver import Refused
from leveller.rpc.schema import check_version
from leveller.rpc.tls import PeerMismatch, check_admin, check_host

SERVICE = "leveller.v1.Controller"  # the service of leveller/rpc/leveller.proto
REPORT = f"/{SERVICE}/Report"
REPORT_STREAM = f"/{SERVICE}/ReportStream"
STATUS = f"/{SERVICE}/Status"
WATCH = f"/{SERVICE}/Watch"
MAX_WAIT_S = 30.0  # the longest a Watch call waits for a new decision


def server_options(max_bytes: int) -> list[tuple[str, int]]:
    """Channel options of the server (and the base of the clients'): message limits."""
    return [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)]


def client_options(max_bytes: int) -> list[tuple[str, int]]:
    """Channel options of the agent's calls: message limits, and reconnection attempts at least every
    second (gRPC's default backoff grows to 2 minutes: a controller back after a long outage, or a
    standby turned to after one, would be refused as unreachable all that time)."""
    return server_options(max_bytes) + [("grpc.initial_reconnect_backoff_ms", 100),
                                        ("grpc.min_reconnect_backoff_ms", 100),
                                        ("grpc.max_reconnect_backoff_ms", 1000)]


def watch_request_from_wire(msg: dict[str, Any]) -> tuple[str, int, float]:
    """(host, epoch, wait_s) of a Watch request in its JSON form; SchemaError names a bad field.

        Watch request  {"v": 1, "host": str, "epoch": int, "wait_s": float}
    """
    check_object(msg, "", ("v", "host", "epoch", "wait_s"))
    check_version(msg)
    return (check_name(msg["host"], "host"), check_int(msg["epoch"], "epoch", 0, MAX_COUNTER),
            check_number(msg["wait_s"], "wait_s", 0, MAX_WAIT_S))


def check_peer(context: grpc.ServicerContext, host: str, on_reject: Callable[[str], None]) -> None:
    """Refuse PERMISSION_DENIED unless the TLS peer's certificate names ``host`` (a host, not a role)."""
    try:
        check_host(context, host)
    except PeerMismatch as exc:
        on_reject("identity")
        raise Refused(grpc.StatusCode.PERMISSION_DENIED, str(exc)) from None


def check_admin_peer(context: grpc.ServicerContext, on_reject: Callable[[str], None]) -> None:
    """Refuse PERMISSION_DENIED unless the TLS peer is the admin (Status under mutual TLS)."""
    try:
        check_admin(context)
    except PeerMismatch as exc:
        on_reject("identity")
        raise Refused(grpc.StatusCode.PERMISSION_DENIED, str(exc)) from None
