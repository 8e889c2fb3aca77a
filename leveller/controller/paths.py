"""Where each flow goes: path providers the controller asks every tau.

The live provider is the SDN app's HTTP API (the app installs the paths, so
it is the source of truth). The topology provider computes the same
deterministic ECMP choice from a topology file without the app; the single
link provider is for one shared bottleneck (loopback, simple testbeds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from leveller.core.paths import Router
from leveller.core.qos import LevelMap, default_level_map, level_map_from_dict
from leveller.core.topology import Topology
from leveller.errors import UserError
from leveller.model.flow import FlowKey

Links = tuple[str, ...]


class PathProvider(Protocol):
    """Links crossed by each flow (None: unknown, e.g. an address outside the topology)."""

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, Links | None]: ...


class SingleLinkPaths:
    """Every flow crosses one shared link."""

    def __init__(self, link: str = "bottleneck") -> None:
        self.link = link

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, Links | None]:
        return {f: (self.link,) for f in flows}


class TopologyPaths:
    """Deterministic ECMP paths over a topology (leveller.core.paths.choose_path)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.router = Router(topology)

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, Links | None]:
        return {f: self.router.links(f) for f in flows}


class SdnPaths:
    """Paths from the SDN app's API (sdn.client.SdnClient.links: POST /links, up to ``batch`` flows
    per request; the controller asks only for flows it has not routed yet)."""

    def __init__(self, client: Any, batch: int = 50_000) -> None:
        self.client, self.batch = client, batch

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, Links | None]:
        out: dict[FlowKey, Links | None] = {}
        for at in range(0, len(flows), self.batch):
            part = flows[at:at + self.batch]
            answers = self.client.links([list(f) for f in part])
            if len(answers) != len(part):
                raise RuntimeError(f"SDN app answered {len(answers)} paths for {len(part)} flows")
            out.update(zip(part, answers))
        return out


def path_provider(spec: str, sdn_token: bytes | None = None) -> PathProvider:
    """``single[:LINK]``, ``topology:PRESET_OR_FILE`` or ``sdn:URL`` (or ``sdn:RUN_DIR``; ``sdn_token``:
    the app's bearer token, sdn.token)."""
    kind, _, arg = spec.partition(":")
    if kind == "single":
        return SingleLinkPaths(arg or "bottleneck")
    if kind == "topology" and arg:
        from leveller.testbed.topofile import load_topology
        return TopologyPaths(load_topology(arg))
    if kind == "sdn" and arg:
        from sdn.client import SdnClient
        client = SdnClient(arg) if "://" in arg else SdnClient.for_run_dir(arg)
        if sdn_token is not None:
            client.token = sdn_token
        return SdnPaths(client)
    raise UserError(f"--paths {spec!r}: use single[:LINK], topology:PRESET_OR_FILE or sdn:URL|RUN_DIR")


def level_map_for(paths: PathProvider, levels: int) -> LevelMap:
    """The level map the controller decides with: the SDN app's own (the switches queue by it) when
    paths come from the app, which must have ``levels`` levels; else the default map of ``levels``."""
    if not isinstance(paths, SdnPaths):
        return default_level_map(levels)
    level_map = level_map_from_dict(paths.client.levels())
    if level_map.levels != levels:
        raise UserError(f"--levels {levels}: the SDN app is configured for {level_map.levels} levels")
    return level_map
