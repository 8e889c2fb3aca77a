"""The live experiments' default cluster: senders h1, h2, h3 and receiver h4 on one switch s1. Pure.

Every link LINK_MBPS, two strict-priority levels. A job whose sender is h1, h2 or h3 and whose
receiver is h4 crosses the switch port towards h4 and nothing else, so jobs of different senders meet
there: the paper's single bottleneck (the demo's pair and trio, chaos, soak, recovery).
"""

from __future__ import annotations

from typing import Any

LINK_MBPS = 100.0
LEVELS = 2
RECEIVER = "h4"
SENDERS = ("h1", "h2", "h3")


def topology_dict() -> dict[str, Any]:
    """The star: h1..h4 on s1 (input for leveller.core.topology.topology_from_dict)."""
    hosts = [*SENDERS, RECEIVER]
    return {"switches": [{"name": "s1"}], "hosts": [{"name": h} for h in hosts],
            "links": [{"a": h, "b": "s1", "rate_mbps": LINK_MBPS} for h in hosts], "levels": LEVELS}
