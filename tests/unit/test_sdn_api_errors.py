"""Every malformed request to the SDN app's API is a 400 naming the field, never a 500 or a silent default.

The WSGI app is called directly over a real PathController (no switch); what the client sees is
the status and the error text.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.sdn import api_app, call

GOOD = "src=10.0.0.1&dst=10.0.0.6"


def names(error: str, field: str) -> bool:
    """The error is about ``field``: it starts with ``field:`` or says ``field = value``
    (a JSON-level problem such as "not JSON" is matched as text)."""
    return error.startswith(f"{field}:") or f" {field} = " in error or f"{field!r}" in error or (
        " " in field or field in ("NaN", "UTF-8", "duplicate key")) and field in error


@pytest.mark.parametrize("query,field", [
    ("src=10.0.0.1", "dst"),
    ("dst=10.0.0.6", "src"),
    ("src=&dst=10.0.0.6", "src"),  # blank is not absent: no silent default
    (GOOD + "&sport=", "sport"),
    (GOOD + "&proto=", "proto"),
    (GOOD + "&sport=abc", "sport"),
    (GOOD + "&sport=1.5", "sport"),
    (GOOD + "&sport=99999", "sport"),
    (GOOD + "&dport=-1", "dport"),
    (GOOD + "&sport=1_000", "sport"),  # Python's int() reads this as 1000
    (GOOD + "&sport=%20443", "sport"),  # " 443"
    (GOOD + "&sport=%EF%BC%91", "sport"),  # a full-width digit one, also read by int()
    (GOOD + "&dport=%ff", "dport"),
    (GOOD + "&proto=999", "proto"),
    (GOOD + "&proto=-1", "proto"),
    (GOOD + "&proto=6.0", "proto"),
    (GOOD + "&proto=sctpx", "proto"),
    (GOOD + "&dprt=80", "dprt"),  # a typo must not give the path of port 0
    ("src=::1&dst=10.0.0.6", "src"),
    ("src=10.0.0.1/24&dst=10.0.0.6", "src"),
    ("src=10.0.0.1%00&dst=10.0.0.6", "src"),
    ("src=10.0.0.1&dst=10.0.0.300", "dst"),
])
def test_bad_path_queries_are_400_naming_the_field(query: str, field: str) -> None:
    _, _, app = api_app()
    status, res = call(app, "GET", "/paths", query)
    assert status == 400, (query, res)
    assert names(res["error"], field), (query, res)


def test_good_path_queries_still_answer() -> None:
    _, _, app = api_app()
    status, res = call(app, "GET", "/paths", GOOD + "&sport=40000&dport=5201&proto=TCP")
    assert status == 200 and res["flow"] == {"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 40000,
                                             "dport": 5201, "proto": 6}
    status, res = call(app, "GET", "/paths", GOOD + "&proto=1&sport=7")
    assert status == 200 and res["flow"]["sport"] == 0 and res["nodes"][0] == "h1"  # ICMP: no ports


OK = ["10.0.0.1", "10.0.0.6", 1, 2, "tcp"]


@pytest.mark.parametrize("body,field", [
    (b"", "body"),
    (b"[]", "body"),
    (b"{}", "body"),
    (b'{"flows": 1}', "flows"),
    (b'{"flows": "abc"}', "flows"),
    (b'{"flows": null}', "flows"),
    (json.dumps({"flows": [OK], "x": 1}).encode(), "x"),
    (b'{"flows": [1]}', "flows[0]"),
    (b'{"flows": [null]}', "flows[0]"),
    (b'{"flows": [[]]}', "flows[0]"),
    (json.dumps({"flows": [OK[:4]]}).encode(), "flows[0]"),
    (json.dumps({"flows": [OK + [7]]}).encode(), "flows[0]"),
    (json.dumps({"flows": [{"src": "10.0.0.1", "dst": "10.0.0.6"}]}).encode(), "flows[0]"),
    (json.dumps({"flows": [OK, [1, "10.0.0.6", 1, 2, "tcp"]]}).encode(), "flows[1].src"),
    (json.dumps({"flows": [["10.0.0.1", "10.0.0.6", -1, 2, "tcp"]]}).encode(), "flows[0].sport"),
    (json.dumps({"flows": [["10.0.0.1", "10.0.0.6", 1, 1.0, "tcp"]]}).encode(), "flows[0].dport"),
    (json.dumps({"flows": [["10.0.0.1", "10.0.0.6", True, 2, "tcp"]]}).encode(), "flows[0].sport"),
    (json.dumps({"flows": [["10.0.0.1", "10.0.0.6", 1, 2, "sctpx"]]}).encode(), "flows[0].proto"),
    (json.dumps({"flows": [["10.0.0.1", "10.0.0.6", 1, 2, None]]}).encode(), "flows[0].proto"),
    (json.dumps({"flows": [["::1", "10.0.0.6", 1, 2, 6]]}).encode(), "flows[0]"),
    (b'{"flows": [["10.0.0.1","10.0.0.6",1,2,6]]', "not JSON"),
    (b'{"flows": [], "flows": []}', "duplicate key"),
    (b'{"flows": [NaN]}', "NaN"),
    (b"\xff{}", "UTF-8"),
])
def test_malformed_links_bodies_are_400_naming_the_field(body: bytes, field: str) -> None:
    _, _, app = api_app()
    status, res = call(app, "POST", "/links", body=body)
    assert status == 400, (body, res)
    assert names(res["error"], field), (body, res)


def test_links_answer_names_each_link_once_in_flow_order() -> None:
    _, _, app = api_app()
    flows = [["10.0.0.1", "10.0.0.6", 1, 2, 6], ["10.0.0.1", "10.0.0.9", 1, 2, 6], ["10.0.0.1", "10.0.0.2", 0, 0, 1]]
    status, res = call(app, "POST", "/links", body=json.dumps({"flows": flows}).encode())
    assert status == 200
    names = res["links"]
    assert len(names) == len(set(names))
    paths = [None if p is None else [names[i] for i in p] for p in res["paths"]]
    assert paths[0][0] == "h1>leaf1" and paths[0][-1] == "leaf3>h6" and len(paths[0]) == 4
    assert paths[1] is None  # 10.0.0.9 is no host of the topology
    assert paths[2] == ["h1>leaf1", "leaf1>h2"]


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/hosts/h1/x/paths", 404),  # not the paths of h1
    ("GET", "/hosts//paths", 404),
    ("GET", "/hosts/nobody/paths", 404),
    ("DELETE", "/paths", 404),
    ("GET", "/links", 404),
    ("POST", "/health", 404),
])
def test_unknown_endpoints_and_hosts_are_404(method: str, path: str, status: int) -> None:
    _, _, app = api_app()
    got, res = call(app, method, path)
    assert got == status and "error" in res and res["error"], (path, res)
