"""`leveller bench fuzz-marker`: scapy-built frames through the real loaded marker.

The CI run: 20,000 frames through bpf/flow_marker.c with every invariant holding,
every kind of frame exercised, rewrites seen under a running lease and none after
it ended. Then the fuzz must catch broken markers: copies of flow_marker.c with
one deliberate defect each (the kind a real change could bring) are fuzzed and
the matching invariant must be reported broken.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leveller.bench.fuzz_oracle import CHECKS
from leveller.bench.fuzz_packets import FRESH_KINDS, KINDS

pytestmark = pytest.mark.privileged

SOURCE = Path(__file__).resolve().parents[2] / "bpf" / "flow_marker.c"


def test_twenty_thousand_frames_break_no_invariant() -> None:
    proc = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "fuzz-marker", "--packets", "20000",
                           "--seed", "17", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["packets"] == 20000 and doc["violations"] == 0, doc["examples"]
    assert isinstance(doc["packets_per_s"], float) and doc["packets_per_s"] > 0
    assert set(doc["by_kind"]) == set(KINDS)
    assert sum(t["packets"] for t in doc["by_kind"].values()) == 20000
    assert set(doc["by_check"]) == set(CHECKS) and not any(doc["by_check"].values())
    kinds = doc["by_kind"]
    for kind in KINDS:
        assert kinds[kind]["packets"] > 0, kind
    # the program really rewrote and counted frames of mapped flows, of every family and of GSO packets
    for kind in ("ipv4-tcp", "ipv4-udp", "ipv6-tcp", "ipv6-udp", "gso", "truncated", "mutated"):
        assert kinds[kind]["marked"] > 0 and kinds[kind]["counted"] > 0, kind
    # and left alone what it must not parse
    for kind in ("ipv4-icmp", "ipv6-icmp", "ipv4-other", "ipv6-other", "ipv4-options", "ipv6-ext",
                 "ipv6-fragment", "vlan", "non-ip"):
        assert kinds[kind]["marked"] == 0 and kinds[kind]["counted"] == 0, kind
    assert kinds["truncated"]["refused"] > 0  # cuts inside the IP header never reach the program
    ended = doc["by_lease"]["ended"]
    assert ended["packets"] >= 4000 and ended["counted"] > 0 and ended["marked"] == 0
    assert doc["by_lease"]["running"]["marked"] > 1000
    assert doc["flows"] == {"mapped_ipv4": 160, "mapped_ipv6": 160, "invalid_marks": 16}
    assert set(FRESH_KINDS) < set(KINDS)


# (what the defect is, text in flow_marker.c, its replacement, the invariant that must break)
DEFECTS = [
    ("ECN bits overwritten", "(old_tos & 0x03) | (__u8)(dscp << 2);", "(__u8)(dscp << 2);", "ecn"),
    ("IPv4 checksum not updated",
     "bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, bpf_htons(old_tos), bpf_htons(new_tos), 2);", "", "ipv4_checksum"),
    ("lease ignored", "if (!lease_valid())\n\t\treturn -1;", "", "changed_lease_ended"),
    ("Ethernet header counted", "__u64 bytes = skb->len - ETH_HLEN;", "__u64 bytes = skb->len;", "counters"),
    ("GSO segments not counted", "skb->gso_segs ? skb->gso_segs : 1", "1", "counters"),
    ("bytes per DSCP counted before the rewrite", "count_packet(skb, &key, new_tos >> 2);",
     "count_packet(skb, &key, old_tos >> 2);", "dscp_counters"),
    ("IPv4 options parsed as if absent", "iph->ihl != 5", "iph->ihl < 5", "changed_not_understood"),
    ("IPv4 fragments not skipped", "if (iph->frag_off & bpf_htons(IP_FRAG_MASK))\n\t\treturn;", "",
     "changed_not_understood"),
    ("IPv6 flow label clobbered", "(old_word & 0xf00f)", "(old_word & 0xf000)", "outside_dscp"),
    ("invalid marks honoured", "(mark & ~(FLOW_DSCP_SET | FLOW_DSCP_MASK)) || ", "", "changed_unmapped"),
    ("mark read from the next flow's slot", "slot = s->slot;", "slot = s->slot + 1;", "dscp"),
    ("large frames dropped", "\t\thandle_ipv6(skb, data, data_end);\n\treturn TC_ACT_OK;",
     "\t\thandle_ipv6(skb, data, data_end);\n\treturn skb->len > 1000 ? TC_ACT_SHOT : TC_ACT_OK;", "verdict"),
]


@pytest.mark.parametrize("defect,old,new,invariant", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_a_defective_marker_is_caught(defect: str, old: str, new: str, invariant: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from leveller.agent import bpfsource
    from leveller.bench.fuzz_marker import run_fuzz

    text = SOURCE.read_text()
    assert text.count(old) == 1, f"{defect}: the text to break is no longer in flow_marker.c; update the test"
    (tmp_path / "flow_marker.c").write_text(text.replace(old, new))
    shutil.copyfile(SOURCE.with_name("flow_marker.h"), tmp_path / "flow_marker.h")
    # the agent's sources are now the edited ones, with no CO-RE object built from them: bcc compiles them
    monkeypatch.setattr(bpfsource, "bpf_dir", lambda: tmp_path)
    result = run_fuzz(6000, seed=5)
    assert result.loader == "bcc"
    assert result.by_check[invariant] > 0, (defect, result.to_json()["by_check"])
    assert result.violations > 0


@pytest.mark.parametrize("loader", ["libbpf", "bcc"])
def test_the_real_marker_passes_the_same_short_fuzz(loader: str) -> None:
    from leveller.bench.fuzz_marker import run_fuzz

    result = run_fuzz(6000, seed=5, loader=loader)
    assert result.violations == 0 and result.loader == loader, result.examples
