"""The HTTP API's answers (WSGI app called directly, real PathController, no switch)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from leveller.model.flow import FlowKey
from sdn.api import make_app
from tests.helpers.sdn import api_app, call, frame


def test_path_query_before_and_after_the_flow_starts():
    topo, logic, app = api_app()
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
    _, _, app = api_app()
    body = json.dumps([{"src": "10.0.0.1", "dst": "10.0.0.2"}, {"src": "10.0.0.1", "dst": "10.9.9.9"}]).encode()
    status, res = call(app, "POST", "/paths", body=body)
    assert status == 200 and res["paths"][0]["nodes"] == ["h1", "leaf1", "h2"] and res["paths"][1] is None
    assert call(app, "GET", "/paths", "src=10.0.0.1&dst=10.0.0.2&sport=99999")[0] == 400
    assert call(app, "GET", "/paths", "src=10.0.0.1")[0] == 400
    assert call(app, "GET", "/paths", "src=10.0.0.1&dst=10.1.1.1")[0] == 404
    assert call(app, "GET", "/hosts/nobody/paths")[0] == 404
    assert call(app, "GET", "/levels")[1] == {"levels": 4, "dscp": [0, 8, 16, 24], "queue": [0, 1, 2, 3]}
    assert call(app, "GET", "/queues")[1] == {"queues": [{"queue": 0}]}


# ---- malformed bodies (issue 10, low 11): a 400 naming the field, never a 500 ------------------------------

OK_FLOW = {"src": "10.0.0.1", "dst": "10.0.0.6"}


@pytest.mark.parametrize("body,field", [
    (b"[1]", "body[0]"),
    (b"[null]", "body[0]"),
    (b"[true]", "body[0]"),
    (b"[NaN]", "NaN"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 1e400}]', "body[0].sport"),
    (b"[" * 100_000, "nested too deeply"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 1.5}]', "body[0].sport"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "dport": -1}]', "body[0].dport"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "proto": true}]', "body[0].proto"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "proto": 256}]', "body[0].proto"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "proto": "sctpx"}]', "body[0].proto"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "sport": ' + b"9" * 5000 + b"}]", "digits"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "colour": 1}]', "body[0].colour"),
    (b'[{"src": 10, "dst": "10.0.0.6"}]', "body[0].src"),
    (b'[{"dst": "10.0.0.6"}]', "body[0].src"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.300"}]', "body[0]"),
    (b'{"src": "10.0.0.1", "dst": "10.0.0.6"}', "body"),
    (b"\xff[]", "UTF-8"),
    (json.dumps([OK_FLOW, OK_FLOW, dict(OK_FLOW, sport="80")]).encode(), "body[2].sport"),
])
def test_malformed_bodies_are_400_naming_the_field(body: bytes, field: str) -> None:
    _, _, app = api_app()
    status, res = call(app, "POST", "/paths", body=body)
    assert status == 400 and field in res["error"], res


def test_content_length_must_be_a_byte_count() -> None:
    _, _, app = api_app()
    for length in ("1e12", "-1", "12a", "1" * 30):
        status, res = call_raw(app, "POST", "/paths", b"[]", length)
        assert status == 400 and "Content-Length" in res["error"], (length, res)


def test_heavy_requests_go_through_offload() -> None:
    topo, logic, _ = api_app()
    ran: list[str] = []

    def offload(work):
        ran.append("offloaded")
        return work()

    view = SimpleNamespace(logic=logic, health=lambda: {"ok": True}, queues=lambda: [])
    app = make_app(view, offload=offload)
    status, res = call(app, "POST", "/paths", body=json.dumps([OK_FLOW] * 3).encode())
    assert status == 200 and len(res["paths"]) == 3 and ran == ["offloaded"]
    assert call(app, "GET", "/flows")[0] == 200 and call(app, "GET", "/hosts/h1/paths")[0] == 200
    assert call(app, "GET", "/health")[0] == 200 and ran == ["offloaded"] * 3  # /health stays on the loop


def call_raw(app, method, path, body, length):
    out = {}

    def start(status, headers):
        out["status"] = int(status.split()[0])

    data = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "",
                         "CONTENT_LENGTH": length, "wsgi.input": io.BytesIO(body)}, start))
    return out["status"], json.loads(data)


def test_links_batch_names_each_link_once_and_matches_the_single_queries():
    topo, logic, app = api_app()
    ips = [h.ip for h in topo.hosts]
    flows = [[a, b, 40000 + i, 4791, "udp"] for i, (a, b) in enumerate((a, b) for a in ips for b in ips)]
    flows.append(["10.0.0.1", "10.9.9.9", 1, 2, 17])
    logic.packet_in(0x101, 5, frame(FlowKey("10.0.0.1", "10.0.0.6", 40005, 4791, 17)), now=0.0)  # one installed
    status, res = call(app, "POST", "/links", body=json.dumps({"flows": flows}).encode())
    assert status == 200 and len(res["paths"]) == len(flows) and len(set(res["links"])) == len(res["links"])
    for (src, dst, sport, dport, proto), path in zip(flows, res["paths"]):
        one = call(app, "GET", "/paths", f"src={src}&dst={dst}&sport={sport}&dport={dport}&proto={proto}")
        if one[0] == 404 or src == dst:
            assert path is None
        else:
            assert [res["links"][i] for i in path] == one[1]["links"]


def test_links_batch_errors_name_the_entry():
    _, _, app = api_app()
    bad = {"flows": [["10.0.0.1", "10.0.0.2", 1, 2, "udp"], ["10.0.0.1", "10.0.0.2", 70000, 2, "udp"]]}
    status, res = call(app, "POST", "/links", body=json.dumps(bad).encode())
    assert status == 400 and res["error"].startswith("flows[1]") and "sport" in res["error"]
    assert call(app, "POST", "/links", body=b'[1]')[0] == 400
    assert call(app, "POST", "/links", body=json.dumps({"flows": [[1, 2]]}).encode())[0] == 400
