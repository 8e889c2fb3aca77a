"""The HTTP API's answers (WSGI app called directly, real PathController, no switch)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from leveller.core.paths import FlowKey
from leveller.core.qos import default_level_map
from leveller.core.topology import preset
from sdn.api import make_app
from sdn.logic import PathController
from tests.unit.test_sdn_logic import frame


def call(app, method, path, query="", body=b""):
    out = {}

    def start(status, headers):
        out["status"] = int(status.split()[0])

    data = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
                         "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}, start))
    return out["status"], json.loads(data)


def make():
    topo = preset("leafspine")
    logic = PathController(topo, default_level_map(4))
    view = SimpleNamespace(logic=logic, health=lambda: {"ok": True}, queues=lambda: [{"queue": 0}])
    return topo, logic, make_app(view)


def test_path_query_before_and_after_the_flow_starts():
    topo, logic, app = make()
    status, body = call(app, "GET", "/paths", "src=10.0.0.1&dst=10.0.0.6&sport=1234&dport=80&proto=tcp")
    assert status == 200 and body["installed"] is False and body["nodes"][0] == "h1" and body["nodes"][-1] == "h6"
    flow = FlowKey("10.0.0.1", "10.0.0.6", 1234, 80, 6)
    logic.packet_in(0x101, 5, frame(flow), now=0.0)
    status, after = call(app, "GET", "/paths", "src=10.0.0.1&dst=10.0.0.6&sport=1234&dport=80&proto=6")
    assert after["installed"] is True and after["hops"] == body["hops"]
    assert call(app, "GET", "/hosts/h6/paths")[1]["flows"][0]["flow"]["sport"] == 1234
    assert call(app, "GET", "/hosts/h2/paths")[1]["flows"] == []
    assert len(call(app, "GET", "/flows")[1]["flows"]) == 1


def test_batch_and_errors():
    _, _, app = make()
    body = json.dumps([{"src": "10.0.0.1", "dst": "10.0.0.2"}, {"src": "10.0.0.1", "dst": "10.9.9.9"}]).encode()
    status, res = call(app, "POST", "/paths", body=body)
    assert status == 200 and res["paths"][0]["nodes"] == ["h1", "leaf1", "h2"] and res["paths"][1] is None
    assert call(app, "GET", "/paths", "src=10.0.0.1&dst=10.0.0.2&sport=99999")[0] == 400
    assert call(app, "GET", "/paths", "src=10.0.0.1")[0] == 400
    assert call(app, "GET", "/paths", "src=10.0.0.1&dst=10.1.1.1")[0] == 404
    assert call(app, "GET", "/hosts/nobody/paths")[0] == 404
    assert call(app, "GET", "/levels")[1] == {"levels": 4, "dscp": [0, 8, 16, 24], "queue": [0, 1, 2, 3]}
    assert call(app, "GET", "/queues")[1] == {"queues": [{"queue": 0}]}
