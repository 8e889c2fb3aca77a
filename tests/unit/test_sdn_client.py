"""sdn.client.SdnClient against the real API app served over loopback HTTP (wsgiref, no switch)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveller.controller.paths import path_provider
from leveller.model.flow import flow_key
from sdn.client import SdnClient
from tests.helpers.sdn import api_app, serving_http


@pytest.fixture
def served() -> Iterator[tuple[str, list[str]]]:
    """URL of the real sdn.api app on 127.0.0.1 and the list of request paths it saw."""
    _, logic, app = api_app()
    seen: list[str] = []

    def recording(environ, start):
        seen.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")
        return app(environ, start)

    with serving_http(recording) as url:
        yield url, seen


def test_a_path_and_a_flow_outside_the_topology(served: tuple[str, list[str]]) -> None:
    url, _ = served
    c = SdnClient(url)
    p = c.path("10.0.0.1", "10.0.0.2", 1, 2)
    assert p is not None and p["nodes"] == ["h1", "leaf1", "h2"] and p["installed"] is False
    assert c.path("10.0.0.1", "10.9.9.9") is None  # 404: not a host of the topology
    assert c.host_paths("nobody") is None  # 404: unknown host
    assert c.host_paths("h1") == []
    assert c.levels()["levels"] == 4 and c.health() == {"ok": True}


def test_other_errors_raise_with_the_servers_reason(served: tuple[str, list[str]]) -> None:
    url, _ = served
    with pytest.raises(RuntimeError, match=r"400 .*sport = '99999' is invalid"):
        SdnClient(url).path("10.0.0.1", "10.0.0.2", sport=99999)


def test_many_paths_go_in_batches_and_come_back_in_order(served: tuple[str, list[str]]) -> None:
    url, seen = served
    flows = [{"src": "10.0.0.1", "dst": dst} for dst in ("10.0.0.2", "10.9.9.9", "10.0.0.6", "10.0.0.3", "10.0.0.2")]
    out = SdnClient(url).paths(flows, batch=2)
    assert seen.count("POST /paths") == 3
    assert [None if p is None else p["nodes"][-1] for p in out] == ["h2", None, "h6", "h3", "h2"]


def test_links_decode_the_shared_link_names(served: tuple[str, list[str]]) -> None:
    url, _ = served
    flows = [list(flow_key("10.0.0.1", "10.0.0.2", 1, 2)), list(flow_key("10.0.0.9", "10.0.0.2", 1, 2)),
             list(flow_key("10.0.0.2", "10.0.0.1", 2, 1))]
    assert SdnClient(url).links(flows) == [("h1>leaf1", "leaf1>h2"), None, ("h2>leaf1", "leaf1>h1")]


def test_for_run_dir_reads_the_api_address_the_app_wrote(served: tuple[str, list[str]], tmp_path: Path) -> None:
    url, _ = served
    (tmp_path / "sdn.json").write_text(json.dumps({"api": url}))
    assert SdnClient.for_run_dir(tmp_path).levels()["levels"] == 4
    provider = path_provider(f"sdn:{tmp_path}")
    key = flow_key("10.0.0.1", "10.0.0.2", 1, 2)
    assert provider.links([key]) == {key: ("h1>leaf1", "leaf1>h2")}
