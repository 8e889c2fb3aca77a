"""Where each flow goes: path providers the controller asks every tau.

The live provider is the SDN app's HTTP API (the app installs the paths, so
it is the source of truth). The topology provider computes the same
deterministic ECMP choice from a topology file without the app; the single
link provider is for one shared bottleneck (loopback, simple testbeds).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from leveller.core.paths import FlowKey, Router
from leveller.core.topology import Topology
from leveller.errors import UserError

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
    """Paths from the SDN app's API (sdn.client.SdnClient.paths: POST /paths)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def links(self, flows: Sequence[FlowKey]) -> Mapping[FlowKey, Links | None]:
        if not flows:
            return {}
        answers = self.client.paths([f.to_dict() for f in flows])
        if len(answers) != len(flows):
            raise RuntimeError(f"SDN app answered {len(answers)} paths for {len(flows)} flows")
        return {f: (None if a is None else tuple(a["links"])) for f, a in zip(flows, answers)}


def path_provider(spec: str) -> PathProvider:
    """``single[:LINK]``, ``topology:PRESET_OR_FILE`` or ``sdn:URL`` (or ``sdn:RUN_DIR``)."""
    kind, _, arg = spec.partition(":")
    if kind == "single":
        return SingleLinkPaths(arg or "bottleneck")
    if kind == "topology" and arg:
        from leveller.testbed.topofile import load_topology
        return TopologyPaths(load_topology(arg))
    if kind == "sdn" and arg:
        from sdn.client import SdnClient
        return SdnPaths(SdnClient(arg) if "://" in arg else SdnClient.for_run_dir(arg))
    raise UserError(f"--paths {spec!r}: use single[:LINK], topology:PRESET_OR_FILE or sdn:URL|RUN_DIR")
