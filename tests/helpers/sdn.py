"""The SDN app's side: packet frames, a fake OpenFlow datapath, and the HTTP API app called directly
or served on loopback."""

from __future__ import annotations

import contextlib
import io
import json
import struct
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from os_ken.base import app_manager  # noqa: F401  (os-ken's import order: app_manager first)
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from leveller.core.qos import default_level_map
from leveller.core.topology import Topology, preset
from leveller.model.flow import FlowKey
from sdn.api import make_app
from sdn.logic import PathController


def frame(flow: FlowKey, tos: int = 0) -> bytes:
    """An Ethernet/IPv4/TCP frame of ``flow`` (IPv4 addresses) with TOS byte ``tos``."""
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 40, 0, 0, 64, flow.proto, 0,
                     bytes(int(x) for x in flow.src.split(".")), bytes(int(x) for x in flow.dst.split(".")))
    return eth + ip + struct.pack("!HHIIBBHHH", flow.sport, flow.dport, 0, 0, 5 << 4, 0, 0, 0, 0)  # TCP, 20 bytes


class FakeDatapath:
    """What os-ken's Datapath offers a sender: ids, protocol modules and send_msg (each message serialized)."""

    def __init__(self, dpid: int, address: tuple[str, int] = ("127.0.0.1", 40000)) -> None:
        self.id = dpid
        self.address = address  # where the switch connected from (os-ken: the peer's address)
        self.ofproto = ofp
        self.ofproto_parser = parser
        self.sent: list[Any] = []
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def send_msg(self, msg: Any) -> None:
        msg.set_xid(len(self.sent) + 1)
        msg.serialize()  # must encode
        self.sent.append(msg)


def api_app() -> tuple[Topology, PathController, Any]:
    """The SDN HTTP API (WSGI) over a real PathController of the leafspine preset with 4 levels, no switch:
    (topology, logic, app)."""
    topo = preset("leafspine")
    logic = PathController(topo, default_level_map(4))
    view = SimpleNamespace(logic=logic, health=lambda: {"ok": True}, queues=lambda: [{"queue": 0}])
    return topo, logic, make_app(view)


def call(app: Any, method: str, path: str, query: str = "", body: bytes = b"") -> tuple[int, Any]:
    """One request to a WSGI app called directly: (HTTP status, the JSON body)."""
    out = {}

    def start(status: str, headers: object) -> None:
        out["status"] = int(status.split()[0])

    data = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
                         "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}, start))
    return out["status"], json.loads(data)


class QuietHandler(WSGIRequestHandler):
    """wsgiref's request handler without its line on stderr per request."""

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving_http(app: Any) -> Iterator[str]:
    """``app`` served over HTTP on 127.0.0.1 (wsgiref, a daemon thread): its URL, with the trailing slash."""
    server = make_server("127.0.0.1", 0, app, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
