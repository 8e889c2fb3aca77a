"""etcd restored from an older snapshot under running agents: a `leveller controller --etcd` on one real etcd
member, an agent marking a real job's packets with its eBPF datapath (DSCP captured on the wire). The
snapshot is taken before the controller starts and 40 keys are written after it, so the leader's epoch is
above 40; then etcd is killed and restored (etcdctl snapshot restore): its revisions start again near 1,
and so do the new leader's epochs. The agent, not restarted, must apply the new leader's levels within a
lease of its first decision, and the marks come back on the wire (leveller.agent.fencing)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from leveller.agent.fencing import APPLIED_FORMAT

from .etcd_member import EtcdMember
from .support import DSCP_TOP, ENV, JOB_PORT, free_port, job_on_the_wire, json_lines, leveller_proc, wait_until

pytestmark = pytest.mark.privileged
TAU, LEASE, TTL = 1.0, 2.0, 1
APPLIED = re.compile(APPLIED_FORMAT.replace("%d", r"(\d+)").replace("%.6f", r"([0-9.]+)"))


def applied_epochs(out: Path) -> list[tuple[float, int]]:
    return [(float(t), int(e)) for e, t in APPLIED.findall(out.read_text(errors="replace"))]


def test_agents_follow_the_leader_of_an_etcd_restored_from_an_older_snapshot(tmp_path: Path) -> None:
    with job_on_the_wire(tmp_path, "lvrs", 60.0) as (pair, wire, log), EtcdMember(tmp_path) as etcd:
        snapshot = tmp_path / "early.db"
        etcd.snapshot(snapshot)
        for i in range(40):
            etcd.put(f"/filler/{i}", "x")
        address = f"127.0.0.1:{free_port()}"
        ctl_out, agent_out = tmp_path / "c0.out", tmp_path / "agent.out"
        with leveller_proc(ctl_out, "controller", "--listen", address, "--tau", str(TAU), "--lease", str(LEASE),
                           "--json", "--etcd", etcd.url, "--etcd-ttl", str(TTL), "--name", "c0", env=ENV) as ctl, \
                leveller_proc(agent_out, "agent", "--controller", address, "--log", str(log), "--ideal-time",
                              "live=0.2", "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}", "--interval", "0.2",
                              "--json", "--host", "ha", "--dev", pair.if_a, "--netns", pair.ns_a, env=ENV) as agent:
            def output() -> str:
                return f"controller: {ctl.output()[-800:]} | agent: {agent.output()[-800:]}"
            wait_until(lambda: wire.last_dscp == DSCP_TOP and applied_epochs(agent_out), 40,
                       lambda: f"marks on the wire: {output()}")
            old = applied_epochs(agent_out)[-1][1]
            assert old > 40, old

            etcd.restore(snapshot)
            back = time.time()
            new = wait_until(lambda: next(((t, e) for t, e in applied_epochs(agent_out) if e < old), None), 20,
                             lambda: f"the agent applies the new leader's epoch: {output()}")
            first = min(ln["t"] for ln in json_lines(ctl_out) if ln["t"] > back)  # the new leader's first step
            assert new[0] - first <= LEASE, (new, first)
            # a lease after it, any levels of before the restore have run out: the marks are the new leader's
            wait_until(lambda: time.time() > new[0] + LEASE, 5, "a lease")
            assert wire.last_dscp == DSCP_TOP, f"marks did not come back: {output()}"
            assert agent.alive() and ctl.alive()
            fenced = [ln for ln in json_lines(agent_out) if ln["t"] > new[0] + 0.5 and ln.get("ok")]
            assert fenced and all(ln["leader_epoch"] == new[1] for ln in fenced[-3:])
            print(f"\nepoch {old} before the restore, {new[1]} after: the new leader decided {first - back:.2f} s "
                  f"after etcd was back, the agent applied its levels {new[0] - first:.2f} s after that "
                  f"(lease {LEASE:g} s), marks on the wire a lease later")
