"""HTTP JSON API of the SDN app (WSGI, served by an eventlet green thread).

All answers are JSON. Errors: 400 {"error": "..."} for bad input, 404 for unknown
hosts / flows outside the topology.

GET  /health                 {"switches": {name: connected}, "flows": n, "queue_mode": str, "levels": {...}}
GET  /topology               the topology (hosts, switches, links, levels)
GET  /levels                 {"levels": K, "dscp": [per level], "queue": [per level]}
GET  /paths?src=&dst=&sport=&dport=&proto=   one flow's path (proto tcp|udp|icmp|number, default tcp)
POST /paths                  body [{"src":..,"dst":..,"sport":..,"dport":..,"proto":..}, ...]
                             -> {"paths": [path or null, ...]} (same order)
GET  /flows                  {"flows": [path, ...]} every flow with installed rules
GET  /hosts/<name>/paths     {"host": name, "flows": [path, ...]} installed flows from or to the host
GET  /queues                 {"queues": [{"switch", "dpid", "port", "port_name", "queue", "level",
                               "tx_bytes", "tx_packets", "tx_errors", "age_s"}, ...]}
A path is {"flow": {src,dst,sport,dport,proto}, "src_host", "dst_host", "nodes": [...],
"links": ["h1>s1", ...] (directed), "hops": [{"switch","dpid","in_port","out_port"}],
"choices": number of equal-cost paths, "installed": bool}. A path is deterministic, so
asking before the flow starts gives the path it will take.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs

from leveller.core.paths import flow_from_mapping
from leveller.errors import UserError

Handler = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_app(view: Any) -> Handler:
    """WSGI app over `view`, which provides `logic` (PathController), `health()` and `queues()`."""

    def reply(start: Callable[..., Any], code: str, body: Any) -> list[bytes]:
        data = json.dumps(body).encode()
        start(code, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/").rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        logic = view.logic
        try:
            if method == "GET" and path == "/health":
                return reply(start, "200 OK", view.health())
            if method == "GET" and path == "/topology":
                return reply(start, "200 OK", logic.topo.to_dict())
            if method == "GET" and path == "/levels":
                return reply(start, "200 OK", logic.level_map.to_dict())
            if method == "GET" and path == "/paths":
                described = logic.describe(flow_from_mapping(query))
                if described is None:
                    return reply(start, "404 Not Found", {"error": "src/dst are not hosts of the topology"})
                return reply(start, "200 OK", described)
            if method == "POST" and path == "/paths":
                size = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(size) or b"[]")
                if not isinstance(body, list):
                    raise UserError("body must be a JSON list of flows")
                return reply(start, "200 OK", {"paths": [logic.describe(flow_from_mapping(f)) for f in body]})
            if method == "GET" and path == "/flows":
                return reply(start, "200 OK", {"flows": [logic.describe(f) for f in sorted(logic.flows)]})
            if method == "GET" and path.startswith("/hosts/") and path.endswith("/paths"):
                host = path.split("/")[2]
                if host not in {h.name for h in logic.topo.hosts}:
                    return reply(start, "404 Not Found", {"error": f"unknown host {host!r}"})
                flows = [logic.describe(p.flow) for p in logic.flows_of_host(host)]
                return reply(start, "200 OK", {"host": host, "flows": flows})
            if method == "GET" and path == "/queues":
                return reply(start, "200 OK", {"queues": view.queues()})
            return reply(start, "404 Not Found", {"error": f"no endpoint {method} {path}"})
        except (UserError, ValueError) as exc:
            return reply(start, "400 Bad Request", {"error": str(exc)})

    return app
