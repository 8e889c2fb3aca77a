"""Issue 14 item 1: a client that knows nothing of our code calls a live `leveller controller`.

The client below imports no leveller module and no generated code: it lists the services through
server reflection, builds every request from the reflected descriptors (DescriptorPool over
ProtoReflectionDescriptorDatabase, message_factory), signs it with the HMAC scheme documented in
leveller.proto (hashlib only), and calls Status, Report and grpc.health.v1's Check.
Needs no privileges: one controller process on loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from .support import free_port, leveller_proc, wait_until

SECRET = "reflection-secret-0123456789"


def signed(path: str, body: bytes) -> tuple[tuple[str, str], ...]:
    """x-leveller-time / x-leveller-mac as leveller.proto's comment says."""
    sent = f"{time.time():.6f}"
    mac = hmac.new(SECRET.encode(), f"{path}\n{sent}\n".encode() + body, hashlib.sha256).hexdigest()
    return (("x-leveller-time", sent), ("x-leveller-mac", mac))


class ReflectedClient:
    """Calls any unary method by name, with messages built from the server's own descriptors."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.db = ProtoReflectionDescriptorDatabase(channel)
        self.pool = descriptor_pool.DescriptorPool(self.db)

    def services(self) -> list[str]:
        return list(self.db.get_services())

    def call(self, service: str, method: str, fields: dict[str, Any], sign: bool = True) -> Any:
        m = self.pool.FindServiceByName(service).methods_by_name[method]
        request_cls = message_factory.GetMessageClass(m.input_type)
        reply_cls = message_factory.GetMessageClass(m.output_type)
        request = request_cls(**fields)
        path = f"/{service}/{method}"
        stub = self.channel.unary_unary(path, request_serializer=request_cls.SerializeToString,
                                        response_deserializer=reply_cls.FromString)
        return stub(request, timeout=10, metadata=signed(path, request.SerializeToString()) if sign else None)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReflectedClient]:
    tmp: Path = tmp_path_factory.mktemp("reflect")
    port = free_port()
    with leveller_proc(tmp / "controller.out", "controller", "--listen", f"127.0.0.1:{port}", "--tau", "0.3",
                       env={"LEVELLER_SECRET": SECRET}) as proc, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            grpc.channel_ready_future(ch).result(timeout=30)
        except grpc.FutureTimeoutError:
            pytest.fail(f"controller not listening within 30 s: {proc.output()}")
        yield ReflectedClient(ch)
        assert proc.alive(), proc.output()


def report(dport: int, seq: int) -> dict[str, Any]:
    now = time.time()
    return {"host": "r1", "run": "0123456789abcdef", "seq": seq,
            "jobs": [{"job": "rj", "iterations": 10, "start_time": now - 20, "ideal_time": 1.0}],
            "flows": [{"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 40000, "dport": dport, "proto": 6,
                       "job": "rj", "bytes": 5000}]}


def test_reflection_lists_the_services_and_health_is_serving(client: ReflectedClient) -> None:
    assert {"leveller.v1.Controller", "grpc.health.v1.Health"} <= set(client.services()), client.services()
    for service in ("", "leveller.v1.Controller"):
        reply = client.call("grpc.health.v1.Health", "Check", {"service": service}, sign=False)  # open, no HMAC
        assert reply.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[reply.status].name == "SERVING"


def test_status_report_and_a_bad_field_through_reflection(client: ReflectedClient) -> None:
    with pytest.raises(grpc.RpcError) as err:
        client.call("leveller.v1.Controller", "Report", report(70000, seq=1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("flows[0].dport: 70000 is invalid"), err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        client.call("leveller.v1.Controller", "Status", {}, sign=False)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED  # HMAC auth unchanged

    reply = client.call("leveller.v1.Controller", "Report", report(47000, seq=2))
    assert reply.mode == "enforce" and len(reply.dscp_by_level) >= 2

    def rated() -> Any:
        status = client.call("leveller.v1.Controller", "Status", {})
        client.call("leveller.v1.Controller", "Report", report(47000, seq=int(time.time() * 1000)))
        jobs = {j.job: j for j in status.jobs}
        return status if "rj" in jobs and jobs["rj"].HasField("rate") and status.flows else None

    status = wait_until(rated, 20, "a decision that rates job rj")
    assert [a.host for a in status.agents] == ["r1"] and status.policy == "leveller" and status.epoch >= 1
    assert status.flows[0].flow == "tcp 10.0.0.1:40000>10.0.0.2:47000" and status.flows[0].HasField("level")
