"""Closed-loop check that marks become queues: the bytes that should be on each switch queue vs counted.

Hosts count, per flow, the bytes their packets left with each DSCP (the eBPF
counters, after the rewrite); the controller knows each flow's path. So for a
switch egress port and a level, the bytes that should have entered that
level's queue are the sum over the flows crossing the port of their bytes
with that level's DSCP (any other DSCP goes to level 0, as the switches map
it). The switch counts what its queues took (sent + queued + dropped). Over
the same window, a level whose queue counted much less than it should have
means the DSCP -> queue mapping of that port is wrong (the bytes went to
another queue): LEVELLER is silently off there.

Tolerances, for noisy machines: only a window where a level should carry at
least ``min_bytes`` is judged (trickles and idle levels are "unknown"); a
mismatch is raised when the queue counted less than ``raise_below`` of what it
should (switches count frames with their Ethernet header, hosts IP packets, so
a healthy queue counts a little more, never half); it clears only at or above
``clear_above`` (hysteresis: no flapping around one threshold). Extra bytes on
a queue are not an error: traffic LEVELLER does not manage lands there too.

Pure: counters in, verdicts out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Port = tuple[str, int]  # (switch, egress port number)
QueueKey = tuple[str, int, int]  # (switch, port, level)


@dataclass(frozen=True)
class Tolerance:
    raise_below: float = 0.5
    clear_above: float = 0.8
    min_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not 0 < self.raise_below < self.clear_above <= 1:
            raise ValueError(f"need 0 < raise_below ({self.raise_below}) < clear_above ({self.clear_above}) <= 1")
        if self.min_bytes < 1:
            raise ValueError(f"min_bytes must be >= 1, got {self.min_bytes}")


@dataclass(frozen=True)
class QueueCheck:
    """One (switch, port, level) over one window."""

    switch: str
    port: int
    level: int
    expected: int  # bytes that should have entered the level's queue
    counted: int  # bytes the queue took

    @property
    def ratio(self) -> float | None:
        return None if self.expected <= 0 else self.counted / self.expected


def egress_ports(links: Iterable[str], switches: Iterable[str], port_towards: Mapping[tuple[str, str], int]
                 ) -> dict[str, Port]:
    """Directed link name ``a>b`` -> (switch a, its port towards b), for links that leave a switch."""
    names = set(switches)
    out: dict[str, Port] = {}
    for link in links:
        a, sep, b = link.partition(">")
        if sep and a in names and (a, b) in port_towards:
            out[link] = (a, port_towards[(a, b)])
    return out


def expected_bytes(flow_bytes: Iterable[tuple[Sequence[str], int, int]], ports: Mapping[str, Port],
                   level_of_dscp: Sequence[int]) -> dict[QueueKey, int]:
    """(links of a flow, DSCP, bytes) -> bytes per (switch, port, level) over every switch egress crossed."""
    out: dict[QueueKey, int] = {}
    for links, dscp, nbytes in flow_bytes:
        if nbytes <= 0:
            continue
        level = level_of_dscp[dscp]
        for link in links:
            port = ports.get(link)
            if port is not None:
                key = (port[0], port[1], level)
                out[key] = out.get(key, 0) + nbytes
    return out


def compare(expected: Mapping[QueueKey, int], counted: Mapping[QueueKey, int], tolerance: Tolerance,
            alarmed: frozenset[QueueKey] = frozenset()) -> tuple[list[QueueCheck], frozenset[QueueKey]]:
    """Checks of every (switch, port, level) with enough expected bytes, and the mismatches after this
    window: raised below ``raise_below``, kept until at or above ``clear_above``; a level not judged this
    window (too few bytes, or its port not counted at all) keeps its previous state."""
    checks = []
    now_alarmed = set(alarmed)
    for key in sorted(expected):
        want = expected[key]
        if want < tolerance.min_bytes or key not in counted:
            continue
        check = QueueCheck(key[0], key[1], key[2], want, counted[key])
        checks.append(check)
        ratio = check.ratio
        assert ratio is not None
        if ratio < tolerance.raise_below:
            now_alarmed.add(key)
        elif ratio >= tolerance.clear_above:
            now_alarmed.discard(key)
    return checks, frozenset(now_alarmed)
