"""TCP's own account of a live run: retransmitted segments and retransmission timeouts, counted by
the kernel in the job hosts' network namespaces (`nstat`: TcpRetransSegs, TcpExtTCPTimeouts).

Strict priority starves a demoted TCP flow; when it waits longer than its retransmission timeout
the kernel counts a timeout and sends its window again. These counters say how often that happened
in a run, next to how often the top job changed (leveller.experiments.shared.measure.top_job_changes).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping

COUNTERS = {"TcpRetransSegs": "retrans_segs", "TcpExtTCPTimeouts": "timeouts"}


def parse_nstat(text: str) -> dict[str, int]:
    """``nstat --json`` output -> {our name: value} for COUNTERS (absent counters count 0)."""
    kernel = json.loads(text).get("kernel", {})
    return {ours: int(kernel.get(theirs, 0)) for theirs, ours in COUNTERS.items()}


def read_counters(netns: Iterable[str]) -> dict[str, int]:
    """The COUNTERS summed over the namespaces ``netns`` (absolute values since each was created)."""
    total = dict.fromkeys(COUNTERS.values(), 0)
    for ns in netns:
        out = subprocess.run(["ip", "netns", "exec", ns, "nstat", "--ignore", "--noupdate", "--zeros", "--json",
                              *COUNTERS], capture_output=True, text=True, check=True, timeout=10).stdout
        for name, value in parse_nstat(out).items():
            total[name] += value
    return total


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """What happened between two readings."""
    return {name: after[name] - before.get(name, 0) for name in after}
