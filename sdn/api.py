"""HTTP JSON API of the SDN app (WSGI, served by an eventlet green thread).

All answers are JSON. Errors: 400 {"error": "<field>: ..."} for bad input (the field
named, e.g. ``body[3].sport``; never a traceback), 404 for unknown hosts / flows
outside the topology; the server (sdn.httpd) adds 408 (too slow), 413 (body too
large) and 503 (every connection busy).

GET  /health                 {"switches": {name: connected}, "flows": n, "queue_mode": str, "levels": {...}}
GET  /topology               the topology (hosts, switches, links, levels)
GET  /levels                 {"levels": K, "dscp": [per level], "queue": [per level]}
GET  /paths?src=&dst=&sport=&dport=&proto=   one flow's path (proto tcp|udp|icmp|number, default tcp)
POST /paths                  body [{"src":..,"dst":..,"sport":..,"dport":..,"proto":..}, ...]
                             -> {"paths": [path or null, ...]} (same order). src, dst: IPv4
                             strings; sport, dport: integers 0..65535 (default 0); proto: tcp,
                             udp, icmp or an integer 0..255 (default tcp); no other keys
POST /links                  body {"flows": [[src, dst, sport, dport, proto], ...]} (at most MAX_BATCH)
                             -> {"links": [name, ...], "paths": [[link index, ...] or null, ...]}:
                             the links of many flows at once, each name sent once (the controller
                             asks this for all its new flows in one request)
GET  /flows                  {"flows": [path, ...]} every flow with installed rules
GET  /hosts/<name>/paths     {"host": name, "flows": [path, ...]} installed flows from or to the host
GET  /metrics                Prometheus text: leveller_sdn_api_refused_total{reason} (requests and connections
                             the server refused: unauthenticated, header_timeout, body_timeout, too_large,
                             bad_request, evicted, busy) and leveller_sdn_api_connections
GET  /queues                 {"queues": [{"switch", "dpid", "port", "port_name", "queue", "level",
                               "tx_bytes", "tx_packets", "tx_errors", "drops", "backlog_bytes",
                               "source", "age_s"}, ...]}  source "tc": the port's HTB classes
                             read now (userspace datapath); "openflow": queue stats, polled
A path is {"flow": {src,dst,sport,dport,proto}, "src_host", "dst_host", "nodes": [...],
"links": ["h1>s1", ...] (directed), "hops": [{"switch","dpid","in_port","out_port"}],
"choices": number of equal-cost paths, "installed": bool}. A path is deterministic, so
asking before the flow starts gives the path it will take.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import parse_qs

from leveller.codec import SchemaError, loads
from leveller.core.paths import flow_from_mapping
from leveller.errors import UserError
from leveller.model.flow import PROTOCOLS, FlowKey, flow_key

Handler = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
T = TypeVar("T")
FLOW_FIELDS = ("src", "dst", "sport", "dport", "proto")
MAX_BODY_BYTES = 4 << 20


def _direct(work: Callable[[], T]) -> T:
    return work()


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (for error messages: null, not NoneType)."""
    for kind, name in ((bool, "true/false"), (type(None), "null"), (dict, "an object"), (list, "an array"),
                       (str, "a string"), (int, "an integer"), (float, "a number")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def flow_from_json(value: Any, field: str) -> FlowKey:
    """A flow given as JSON (strict types: a port is an integer, not 1.5 or true); SchemaError names the field."""
    if not isinstance(value, dict):
        raise SchemaError(field, f"expected an object with {', '.join(FLOW_FIELDS)}; got {json_type(value)}")
    for key in value:
        if key not in FLOW_FIELDS:
            raise SchemaError(f"{field}.{key}", f"unknown field; allowed: {', '.join(FLOW_FIELDS)}")
    for key in ("src", "dst"):
        if not isinstance(value.get(key), str):
            raise SchemaError(f"{field}.{key}", f"{value.get(key)!r} is invalid; an IPv4 address string")
    for key in ("sport", "dport"):
        port = value.get(key, 0)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise SchemaError(f"{field}.{key}", f"{port!r} is invalid; an integer 0..65535")
    proto = value.get("proto", "tcp")
    if not ((isinstance(proto, str) and proto.lower() in PROTOCOLS) or
            (isinstance(proto, int) and not isinstance(proto, bool) and 0 <= proto <= 255)):
        raise SchemaError(f"{field}.proto", f"{proto!r} is invalid; tcp, udp, icmp or an integer 0..255")
    try:
        return flow_key(value["src"], value["dst"], value.get("sport", 0), value.get("dport", 0), proto)
    except UserError as exc:
        raise SchemaError(field, str(exc)) from None


def flows_from_body(body: bytes, max_bytes: int = MAX_BODY_BYTES) -> list[FlowKey]:
    """The flows of a POST /paths body (empty body: none); SchemaError names the first bad field."""
    value = loads(body, max_bytes) if body.strip() else []
    if not isinstance(value, list):
        raise SchemaError("body", f"expected a JSON list of flows; got {json_type(value)}")
    return [flow_from_json(item, f"body[{i}]") for i, item in enumerate(value)]


MAX_BATCH = 100_000  # flows in one POST /links (about 5 MB of answer)


def batch_links(logic: Any, body: bytes, max_bytes: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The answer of POST /links: link names once, each flow's path as indices into them."""
    value = loads(body, max_bytes) if body.strip() else None
    if not isinstance(value, dict) or "flows" not in value:
        raise SchemaError("body", 'expected {"flows": [[src, dst, sport, dport, proto], ...]}; '
                                  f"got {json_type(value)}")
    for key in value:
        if key != "flows":
            raise SchemaError(key, "unknown field; allowed: flows")
    flows = value["flows"]
    if not isinstance(flows, list):
        raise SchemaError("flows", f"expected a list of [src, dst, sport, dport, proto]; got {json_type(flows)}")
    if len(flows) > MAX_BATCH:
        raise SchemaError("flows", f"{len(flows)} entries; at most {MAX_BATCH} per request")
    names: dict[str, int] = {}
    paths: list[list[int] | None] = []
    for i, entry in enumerate(flows):
        if not isinstance(entry, list) or len(entry) != len(FLOW_FIELDS):
            raise SchemaError(f"flows[{i}]", f"{entry!r} is invalid; [src, dst, sport, dport, proto]")
        links = logic.links(flow_from_json(dict(zip(FLOW_FIELDS, entry)), f"flows[{i}]"))
        paths.append(None if links is None else [names.setdefault(n, len(names)) for n in links])
    return {"links": list(names), "paths": paths}


def read_body(environ: dict[str, Any], max_bytes: int) -> bytes:
    """A request's body, after its Content-Length is checked against ``max_bytes``."""
    length = environ.get("CONTENT_LENGTH") or "0"
    if not length.isascii() or not length.isdigit() or len(length) > 18 or int(length) > max_bytes:
        raise SchemaError("Content-Length", f"{length[:40]!r} is invalid; 0..{max_bytes} bytes")
    return environ["wsgi.input"].read(int(length))


def make_app(view: Any, offload: Callable[[Callable[[], Any]], Any] = _direct,
             max_body_bytes: int = MAX_BODY_BYTES, metrics: Callable[[], bytes] | None = None) -> Handler:
    """WSGI app over `view`, which provides `logic` (PathController), `health()` and `queues()`;
    ``metrics()`` gives GET /metrics (Prometheus text, the server's refusals: sdn.httpd.ApiStats).

    Work that grows with the request or with the installed flows (POST /paths, GET /flows,
    GET /hosts/*/paths) runs through ``offload(work)``: the SDN app passes eventlet's thread
    pool, so the server's event loop keeps answering (e.g. /health) meanwhile."""

    def reply(start: Callable[..., Any], code: str, body: Any) -> list[bytes]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        start(code, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def heavy(work: Callable[[], Any]) -> bytes:
        """``work()`` encoded as JSON, both through ``offload`` (a big answer takes long to encode too)."""
        return offload(lambda: json.dumps(work()).encode())

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/").rstrip("/") or "/"
        # Blank values are kept (sport= is an error, not the default) and unknown keys refused.
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}
        logic = view.logic
        try:
            if method == "GET" and path == "/health":
                return reply(start, "200 OK", view.health())
            if method == "GET" and path == "/metrics" and metrics is not None:
                data = metrics()
                start("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                                 ("Content-Length", str(len(data)))])
                return [data]
            if method == "GET" and path == "/topology":
                return reply(start, "200 OK", logic.topo.to_dict())
            if method == "GET" and path == "/levels":
                return reply(start, "200 OK", logic.level_map.to_dict())
            if method == "GET" and path == "/paths":
                for key in query:
                    if key not in FLOW_FIELDS:
                        raise SchemaError(key, f"unknown query parameter; allowed: {', '.join(FLOW_FIELDS)}")
                described = logic.describe(flow_from_mapping(query))
                if described is None:
                    return reply(start, "404 Not Found", {"error": "src/dst are not hosts of the topology"})
                return reply(start, "200 OK", described)
            if method == "POST" and path == "/paths":
                body = read_body(environ, max_body_bytes)
                return reply(start, "200 OK", heavy(lambda: {"paths": [
                    logic.describe(f) for f in flows_from_body(body, max_body_bytes)]}))
            if method == "POST" and path == "/links":
                body = read_body(environ, max_body_bytes)
                return reply(start, "200 OK", heavy(lambda: batch_links(logic, body, max_body_bytes)))
            if method == "GET" and path == "/flows":
                installed = list(logic.flows)  # a snapshot: the switch handlers change the dict meanwhile
                return reply(start, "200 OK", heavy(lambda: {"flows": [logic.describe(f) for f in sorted(installed)]}))
            parts = path.split("/")
            if method == "GET" and len(parts) == 4 and parts[1] == "hosts" and parts[3] == "paths":
                host = parts[2]
                if host not in {h.name for h in logic.topo.hosts}:
                    return reply(start, "404 Not Found", {"error": f"unknown host {host!r}"})
                return reply(start, "200 OK", heavy(
                    lambda: {"host": host, "flows": [logic.describe(p.flow) for p in logic.flows_of_host(host)]}))
            if method == "GET" and path == "/queues":  # tc mode runs `tc` per port: off the event loop
                return reply(start, "200 OK", heavy(lambda: {"queues": view.queues()}))
            return reply(start, "404 Not Found", {"error": f"no endpoint {method} {path}"})
        except (UserError, ValueError) as exc:
            return reply(start, "400 Bad Request", {"error": str(exc)})

    return app
