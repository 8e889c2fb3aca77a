"""Python client for the SDN app's HTTP API (see sdn.api); no os-ken import needed."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


class SdnClient:
    def __init__(self, url: str, timeout: float = 5.0, token: bytes | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.token = token  # bearer token of an app bound beyond loopback (sdn.token)

    @classmethod
    def for_run_dir(cls, run_dir: Path | str) -> SdnClient:
        """Client for the app started for a testbed (it writes RUN_DIR/sdn.json)."""
        info = json.loads((Path(run_dir) / "sdn.json").read_text())
        token = Path(info["token_file"]).read_bytes().strip() if info.get("token_file") else None
        return cls(info["api"], token=token)

    def _get(self, path: str, **query: Any) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        return self._open(urllib.request.Request(url))

    def _open(self, req: urllib.request.Request) -> Any:
        if self.token is not None:
            req.add_header("Authorization", "Bearer " + self.token.decode())
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise RuntimeError(f"{req.full_url}: {exc.code} {exc.read().decode(errors='replace')}") from None

    def health(self) -> dict[str, Any]:
        return self._get("/health")

    def path(self, src: str, dst: str, sport: int = 0, dport: int = 0,
             proto: str | int = "tcp") -> dict[str, Any] | None:
        return self._get("/paths", src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def paths(self, flows: list[dict[str, Any]], batch: int = 8192) -> list[dict[str, Any] | None]:
        """Paths of many flows, in order; sent ``batch`` flows per request (~0.8 MB), well under the
        app's body limit (--api-max-body, default 4 MiB)."""
        out: list[dict[str, Any] | None] = []
        for i in range(0, len(flows), batch):
            req = urllib.request.Request(self.url + "/paths", data=json.dumps(flows[i:i + batch]).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
            out += self._open(req)["paths"]
        return out

    def links(self, flows: list[tuple[str, str, int, int, int]]) -> list[tuple[str, ...] | None]:
        """Links of many flows in one request (POST /links); None for a flow outside the topology."""
        req = urllib.request.Request(self.url + "/links", data=json.dumps({"flows": flows}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        res = self._open(req)
        names = res["links"]
        return [None if p is None else tuple(names[i] for i in p) for p in res["paths"]]

    def flows(self) -> list[dict[str, Any]]:
        return self._get("/flows")["flows"]

    def host_paths(self, host: str) -> list[dict[str, Any]] | None:
        res = self._get(f"/hosts/{urllib.parse.quote(host)}/paths")
        return None if res is None else res["flows"]

    def queues(self) -> list[dict[str, Any]]:
        return self._get("/queues")["queues"]

    def levels(self) -> dict[str, Any]:
        return self._get("/levels")

    def topology(self) -> dict[str, Any]:
        return self._get("/topology")
