"""The enforcement check reads the control queue (TCP's ACKs of every level, leveller.core.qos) as part
of each level of its port: hosts count a flow's ACKs with its DSCP, the switch serves them apart."""

from __future__ import annotations

from typing import Any

from leveller.controller.enforcement import SdnQueues
from leveller.core.enforcement import Tolerance, compare


class FakeSdnClient:
    """Stands in for sdn.client.SdnClient: /queues rows as the SDN app serves them."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def queues(self) -> list[dict[str, Any]]:
        return self.rows


def row(switch: str, port: int, queue: int, level: int | None, tx_bytes: int) -> dict[str, Any]:
    return {"switch": switch, "port": port, "queue": queue, "level": level, "tx_bytes": tx_bytes,
            "tx_packets": max(1, tx_bytes // 1500), "drops": 0, "backlog_bytes": 0}


def test_the_control_queue_counts_toward_every_level_of_its_own_port_only() -> None:
    rows = [row("s1", 1, 0, 0, 1_000_000), row("s1", 1, 1, 1, 5_000_000), row("s1", 1, 2, None, 60_000),
            row("s1", 2, 0, 0, 2_000_000), row("s1", 2, 1, 1, 0), row("s1", 2, 2, None, 0)]
    got = SdnQueues(FakeSdnClient(rows)).arrived()
    assert got == {("s1", 1, 0): 1_060_000, ("s1", 1, 1): 5_060_000, ("s1", 2, 0): 2_000_000, ("s1", 2, 1): 0}


def test_a_level_whose_acks_went_to_the_control_queue_is_fine_and_a_misrouted_one_still_alarms() -> None:
    tol = Tolerance(raise_below=0.5, clear_above=0.8, min_bytes=1 << 20)
    # level 1 of port 1 is one direction's ACKs only (2 MB marked by the receiving host), all served by the
    # control queue; level 1 of port 2 carries 10 MB of data that went to queue 0 (a wrong DSCP map)
    rows = [row("s1", 1, 0, 0, 0), row("s1", 1, 1, 1, 0), row("s1", 1, 2, None, 2_000_000),
            row("s1", 2, 0, 0, 10_000_000), row("s1", 2, 1, 1, 0), row("s1", 2, 2, None, 300_000)]
    counted = SdnQueues(FakeSdnClient(rows)).arrived()
    expected = {("s1", 1, 1): 2_000_000, ("s1", 2, 1): 10_000_000}
    _, alarmed = compare(expected, counted, tol)
    assert alarmed == frozenset({("s1", 2, 1)})
