"""The election on a real etcd when one call fails right after a campaign: two `leveller controller --etcd`
processes, each talking to one etcd member on loopback through a proxy of this test's that makes one
request fail (tests/integration/etcd_member.py).

1. c0's campaign is applied by etcd but its answer lost: c0 holds the election key without knowing it.
   c0 must find the key on its own lease and decide within TTL + 2 tau of the fault; c1 (started after
   the fault) stays a standby and never decides.
2. c0 stops (SIGINT: its lease revoked); c1 wins, and the read of the state that follows its won
   campaign is dropped: c1 must read again and decide within TTL + 2 tau of the fault.

Before the fix, both left the winner holding the key with role `unknown` and nobody deciding."""

from __future__ import annotations

import time
from pathlib import Path

from .etcd_member import EtcdMember, EtcdProxy, b64, is_campaign, once, reads_under
from .support import ENV, Proc, free_port, json_lines, leveller_proc, wait_until

TAU, LEASE, TTL = 1.0, 2.0, 1
BOUND = TTL + 2 * TAU


def decisions(out: Path, after: float) -> list[float]:
    """Times of a controller's decisions (its --json lines, one per step while it leads) after ``after``."""
    return [ln["t"] for ln in json_lines(out) if ln["t"] > after]


def test_one_failed_call_right_after_a_campaign_still_ends_in_one_deciding_leader(tmp_path: Path) -> None:
    with EtcdMember(tmp_path) as etcd, \
            EtcdProxy(etcd.client, once(is_campaign, "lose_answer")) as p0, EtcdProxy(etcd.client) as p1:
        addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        outs = [tmp_path / "c0.out", tmp_path / "c1.out"]

        def start(i: int, proxy: EtcdProxy) -> Proc:
            return leveller_proc(outs[i], "controller", "--listen", addrs[i], "--tau", str(TAU), "--lease", str(LEASE),
                                 "--json", "--etcd", proxy.url, "--etcd-ttl", str(TTL), "--name", f"c{i}", env=ENV)
        c0 = start(0, p0)
        procs = [c0]
        try:
            fault = wait_until(lambda: p0.faults[0][0] if p0.faults else None, 30,
                               lambda: f"c0 campaigns: {c0.output()}")
            c1 = start(1, p1)
            procs.append(c1)
            first = wait_until(lambda: next(iter(decisions(outs[0], fault)), None), 15,
                               lambda: f"c0 decides: {c0.output()} | {c1.output()}")
            took0 = first - fault
            assert took0 <= BOUND, took0
            wait_until(lambda: etcd.call("/v3/kv/range", {"key": b64("/leveller/members/c1")}).get("kvs"), 30,
                       lambda: f"c1 registered: {c1.output()}")
            time.sleep(2 * TAU)  # c1 polls the key every 0.25 s meanwhile
            assert not decisions(outs[1], 0.0), "the standby decided while c0 led"
            gaps = [b - a for a, b in zip(decisions(outs[0], first)[:-1], decisions(outs[0], first)[1:])]
            assert gaps and max(gaps) < LEASE, gaps  # c0 kept deciding

            # 2: c0 steps down; c1 wins and the state read after its campaign is dropped
            p1.rule = once(reads_under("/leveller/state/"), "drop")
            c0.interrupt()
            stopped = time.time()
            fault1 = wait_until(lambda: p1.faults[0][0] if p1.faults else None, 15,
                                lambda: f"c1 reads the state: {c1.output()}")
            second = wait_until(lambda: next(iter(decisions(outs[1], fault1)), None), 15,
                                lambda: f"c1 decides: {c1.output()}")
            took1 = second - fault1
            assert took1 <= BOUND, took1
            assert not decisions(outs[0], stopped + 0.5)
            print(f"\ncampaign answer lost: c0 decided {took0:.2f} s after the fault; c1's state read dropped: "
                  f"c1 decided {took1:.2f} s after it (TTL + 2 tau = {BOUND:g} s)")
        finally:
            for p in procs:
                if p.alive():
                    p.interrupt()
