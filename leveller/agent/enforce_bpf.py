"""Adapters from the eBPF datapath (leveller.agent.datapath.Datapath) to the agent's Protocols.

The datapath speaks its own FlowKey (ipaddress objects, IPv4 or IPv6); the
agent, RPC and controller speak leveller.core.paths.FlowKey (IPv4 strings).
This module converts between them and computes the minimal map update.
"""

from __future__ import annotations

from typing import Any, Mapping

from leveller.agent.reports import FlowSample
from leveller.core.paths import FlowKey, flow_key


def to_datapath_key(key: FlowKey) -> Any:
    from leveller.agent.flow_structs import FlowKey as DpKey
    return DpKey(key.src, key.dst, key.sport, key.dport, key.proto)


def from_datapath_key(key: Any) -> FlowKey | None:
    """The agent's key for a datapath key, or None for flows the RPC cannot carry (IPv6)."""
    if key.src.version != 4:
        return None
    return flow_key(str(key.src), str(key.dst), key.sport, key.dport, key.proto)


class BpfEnforcer:
    """Enforcer over an attached Datapath: ``apply`` writes only the marks that changed, then the kernel's
    lease deadline (a failed map update leaves the old deadline to run out); ``clear`` ends the lease
    first (one write stops every rewrite), then empties the map."""

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath
        self.current: dict[FlowKey, int] = {}

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        changed = {to_datapath_key(k): d for k, d in marks.items() if self.current.get(k) != d}
        gone = [to_datapath_key(k) for k in self.current if k not in marks]
        if changed:
            self.datapath.set_dscp(changed)
        if gone:
            self.datapath.clear_dscp(gone)
        self.current = dict(marks)
        self.datapath.set_lease(valid_for_s)

    def clear(self) -> None:
        self.datapath.set_lease(0)
        if self.current:
            self.datapath.clear_dscp([to_datapath_key(k) for k in self.current])
        self.current = {}


class BpfFlowSource:
    """FlowSource over an attached Datapath's per-flow counters."""

    def __init__(self, datapath: Any) -> None:
        self.datapath = datapath

    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        out: dict[FlowKey, FlowSample] = {}
        for key, stats in self.datapath.read_stats().items():
            k = from_datapath_key(key)
            if k is not None:
                out[k] = FlowSample(stats.bytes, stats.cgroup_id)
        return out
