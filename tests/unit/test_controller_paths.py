"""leveller.controller.paths: the path providers the controller asks every tau, and their specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.controller.paths import SdnPaths, SingleLinkPaths, TopologyPaths, path_provider
from leveller.core.paths import choose_path
from leveller.core.topology import preset
from leveller.errors import UserError
from leveller.model.flow import flow_key


class ShortAnswers:
    """An SDN client fake that loses one answer: the provider must notice, not misalign flows."""

    def links(self, flows: list[list[object]]) -> list[tuple[str, ...] | None]:
        return [("l",)] * (len(flows) - 1)


def test_sdn_paths_refuses_an_answer_of_the_wrong_length() -> None:
    keys = [flow_key("10.0.0.1", "10.0.0.2", i, 2) for i in range(3)]
    with pytest.raises(RuntimeError, match="answered 2 paths for 3 flows"):
        SdnPaths(ShortAnswers()).links(keys)


def test_path_provider_specs(tmp_path: Path) -> None:
    key = flow_key("10.0.0.1", "10.0.0.6", 40000, 5201)
    assert path_provider("single").links([key]) == {key: ("bottleneck",)}
    assert path_provider("single:s1-s2").links([key]) == {key: ("s1-s2",)}
    topo = path_provider("topology:leafspine")
    assert isinstance(topo, TopologyPaths)
    # the same ECMP choice as the SDN app makes (choose_path), for flows spread over both spines
    ls = preset("leafspine")
    keys = [flow_key("10.0.0.1", "10.0.0.6", sport, 5201) for sport in range(40000, 40016)]
    got = topo.links(keys + [flow_key("10.0.0.1", "10.9.9.9", 1, 2), flow_key("10.0.0.1", "10.0.0.1", 1, 2)])
    assert [got[k] for k in keys] == [choose_path(ls, k).links for k in keys]
    assert len({got[k][1] for k in keys}) == 2
    assert got[flow_key("10.0.0.1", "10.9.9.9", 1, 2)] is None and got[flow_key("10.0.0.1", "10.0.0.1", 1, 2)] is None
    assert isinstance(path_provider("sdn:http://127.0.0.1:1/"), SdnPaths)
    assert isinstance(path_provider("single"), SingleLinkPaths)
    for bad in ("", "topology", "topology:", "sdn:", "ecmp:leafspine", "Single"):
        with pytest.raises(UserError, match="use single\\[:LINK\\], topology:PRESET_OR_FILE or sdn:URL"):
            path_provider(bad)
    with pytest.raises(UserError, match="neither a preset"):
        path_provider(f"topology:{tmp_path / 'missing.toml'}")


def test_the_level_map_is_the_sdn_apps_and_must_have_the_levels_asked_for() -> None:
    from leveller.controller.paths import level_map_for
    from leveller.core.qos import default_level_map

    class App:  # the one call the controller makes of the app for its map (sdn.client.SdnClient.levels)
        def levels(self) -> dict:
            return {"dscp": [0, 10, 18], "queue": [0, 1, 2]}

    assert level_map_for(SdnPaths(App()), 3).dscp == (0, 10, 18)  # not the default 0, 8, 16
    with pytest.raises(UserError, match="--levels 4: the SDN app is configured for 3 levels"):
        level_map_for(SdnPaths(App()), 4)
    assert level_map_for(SingleLinkPaths(), 2) == default_level_map(2)
