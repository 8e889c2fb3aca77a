"""Parsing the HTB class counters of a switch port (`tc -s class show`), as OVS linux-htb lays them out."""

from sdn.tcmap import parse_class_stats

# iproute2 6.1 output on a testbed switch port (OVS linux-htb: root 1:fffe, queue q = class 1:(q+1))
SAMPLE = """class htb 1:1 parent 1:fffe prio 1 rate 100Kbit ceil 100Mbit burst 1564b cburst 1562b 
 Sent 28782039 bytes 19052 pkt (dropped 3, overlimits 19016 requeues 0) 
 backlog 62074b 41p requeues 0
 lended: 39 borrowed: 19013 giants: 0
 tokens: -894669 ctokens: -1683

class htb 1:fffe root rate 100Mbit ceil 100Mbit burst 1500b cburst 1500b 
 Sent 28782039 bytes 19052 pkt (dropped 0, overlimits 19007 requeues 0) 
 backlog 0b 0p requeues 0
 lended: 19013 borrowed: 0 giants: 0
 tokens: -1763 ctokens: -1763

class htb 1:2 parent 1:fffe prio 0 rate 100Kbit ceil 100Mbit burst 1564b cburst 1562b 
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) 
 backlog 1Mb 700p requeues 0
 lended: 0 borrowed: 0 giants: 0
 tokens: 1955000 ctokens: 1955

class htb 1:a parent 1:fffe prio 0 rate 100Kbit ceil 100Mbit burst 1564b cburst 1562b 
 Sent 5 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) 
 backlog 1.5Kb 1p requeues 0
"""  # noqa: W291 (iproute2 ends these lines with a space; the sample keeps them)


def test_queues_are_the_htb_classes_below_the_root() -> None:
    stats = parse_class_stats(SAMPLE)
    assert sorted(stats) == [0, 1, 9]  # 1:1, 1:2, 1:a (hex); the root 1:fffe is not a queue
    assert stats[0] == {"bytes": 28782039, "packets": 19052, "drops": 3, "backlog_bytes": 62074,
                        "backlog_packets": 41}
    assert stats[1]["backlog_bytes"] == 1 << 20 and stats[1]["bytes"] == 0
    assert stats[9]["backlog_bytes"] == 1536


def test_no_htb_no_queues() -> None:
    assert parse_class_stats("") == {}
    assert parse_class_stats("class fq_codel 0:1 parent 0:\n Sent 1 bytes 1 pkt (dropped 0, overlimits 0)\n") == {}
