"""Controllers on etcd under faults, with real processes end to end: three etcd members in a network
namespace of their own (leveller.experiments.chaos.ha.EtcdNetns), two `leveller controller --etcd`, an agent
marking a real job's packets with its eBPF datapath (DSCP captured on the wire) and a second agent
without a datapath (both log every leader epoch they apply, leveller.agent.fencing).

(a) partition: the leader is cut from etcd (not from the agents): it stops deciding within its TTL,
    the standby decides only after it stopped, and no agent goes back to the older epoch;
(b) the raft leader of the three etcd members SIGKILLed: the same controller leads at the same epoch,
    the standby never decides, the marks stay on the wire;
(c) all three members SIGKILLed: the leader stops deciding within its TTL, the agents keep their levels
    to the end of their lease and then mark nothing; restarted members bring the marks back;
(d) the leader SIGKILLed: the standby decides within TTL + 2 tau, and no stretch of the job's packets
    on the wire goes unmarked for longer than that.

The four share one run (building it takes seconds: three etcd members, an election, two controllers,
two agents, one compiling its BPF program); before each, what the one before broke is started again or
healed, and the test waits until a controller leads, the marks are on the wire and both agents are answered
on one leader epoch. What each test asserts about epochs and decisions counts from its own fault on.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from leveller.agent.fencing import APPLIED_FORMAT
from leveller.experiments.chaos.ha import EtcdNetns

from .support import DSCP_TOP, ENV, JOB_PORT, Proc, free_port, job_on_the_wire, json_lines, leveller_proc, wait_until

pytestmark = pytest.mark.privileged
TAU, LEASE, TTL = 1.0, 2.0, 1  # TTL at most half the lease; TTL + 2 tau = 3 s, above the lease
APPLIED = re.compile(APPLIED_FORMAT.replace("%d", r"(\d+)").replace("%.6f", r"([0-9.]+)"))


def applied_epochs(out: Path) -> list[tuple[float, int]]:
    """(time, epoch) of every change of the leader epoch an agent applied (its log lines)."""
    return [(float(t), int(e)) for e, t in APPLIED.findall(out.read_text(errors="replace"))]


def decisions(out: Path, after: float = 0.0) -> list[float]:
    """Times of a controller's decisions (--json lines) after ``after`` that give the job's flow a level."""
    return [ln["t"] for ln in json_lines(out) if ln["t"] > after and ln.get("levels")]


def unmarked(changes: list[tuple[float, int]], since: float, until: float) -> list[float]:
    """Lengths of the stretches in [since, until] whose packets did not carry DSCP_TOP (wire changes)."""
    gaps, start, dscp = [], None, DSCP_TOP
    for t, d in changes:
        if t < since:
            dscp = d
            continue
        if t > until:
            break
        if d != DSCP_TOP and dscp == DSCP_TOP:
            start = max(t, since)
        elif d == DSCP_TOP and dscp != DSCP_TOP:
            gaps.append(t - (start if start is not None else since))
            start = None
        dscp = d
    if dscp != DSCP_TOP:
        gaps.append(until - (start if start is not None else since))
    return gaps


@dataclass
class HaRun:
    etcd: EtcdNetns
    wire: Any
    addrs: list[str]
    outs: list[Path]
    ctls: list[Proc]
    agent_outs: list[Path] = field(default_factory=list)

    def leader(self) -> int:
        found = self.etcd.leader()
        assert found is not None, "no controller leads"
        return self.addrs.index(found[1])

    def output(self) -> str:
        return " | ".join(f"{o.name}: {o.read_text(errors='replace')[-600:]}" for o in self.outs + self.agent_outs
                          if o.exists())

    def start(self, i: int) -> None:
        """Start controller i (again: appending to its output file)."""
        proc = leveller_proc(self.outs[i], "controller", "--listen", self.addrs[i], "--tau", str(TAU),
                             "--lease", str(LEASE), "--json", *self.etcd.ha_args(i, self.addrs[i], TTL), env=ENV)
        if i < len(self.ctls):
            self.ctls[i] = proc
        else:
            self.ctls.append(proc)

    def agent_epochs(self) -> list[list[tuple[float, int]]]:
        return [applied_epochs(o) for o in self.agent_outs]


@contextlib.contextmanager
def ha_run(tmp: Path, prefix: str, job_s: float) -> Iterator[HaRun]:
    """The job on the wire (for ``job_s`` seconds), etcd, two controllers (c0 first: it leads), two agents;
    marks on the wire."""
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (scripts/setup-system.sh installs etcd-server)")
    with job_on_the_wire(tmp, prefix, job_s) as (pair, wire, log), EtcdNetns(tmp / "etcd") as etcd, \
            contextlib.ExitStack() as stack:
        addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        run = HaRun(etcd, wire, addrs, [tmp / "c0.out", tmp / "c1.out"], [])

        def stop_controllers() -> None:
            for proc in run.ctls:
                proc.__exit__()
        stack.callback(stop_controllers)
        run.start(0)
        wait_until(lambda: etcd.leader() is not None, 40, lambda: f"c0 leads: {run.output()}")
        run.start(1)
        common = ["agent", "--controller", ",".join(addrs), "--log", str(log), "--ideal-time", "live=0.2",
                  "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}", "--interval", "0.2", "--json"]
        run.agent_outs = [tmp / "agent-ha.out", tmp / "agent-hb.out"]
        stack.enter_context(leveller_proc(run.agent_outs[0], *common, "--host", "ha", "--dev", pair.if_a,
                                          "--netns", pair.ns_a, env=ENV))
        stack.enter_context(leveller_proc(run.agent_outs[1], *common, "--host", "hb", env=ENV))
        wait_until(lambda: wire.last_dscp == DSCP_TOP and all(run.agent_epochs()), 40,
                   lambda: f"marks on the wire, both agents on an epoch: {run.output()}")
        yield run


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaRun]:
    """The module's one run; its job sends long enough for every test (about 60 s here in all)."""
    with ha_run(tmp_path_factory.mktemp("ha"), "lvpe", job_s=600.0) as run:
        yield run


def answered_epochs(run: HaRun, since: float) -> list[int] | None:
    """The leader epoch of each agent's last answered report after ``since``; None until both have one."""
    last = [[ln["leader_epoch"] for ln in json_lines(out) if ln.get("ok") and ln["t"] > since]
            for out in run.agent_outs]
    return [epochs[-1] for epochs in last] if all(last) else None


@pytest.fixture
def run(shared: HaRun) -> HaRun:
    """The shared run as the test before left it, repaired: the cut controller healed, the killed etcd
    members and controller started again; then every member healthy, a controller leading, the marks on
    the wire and both agents answered on the same leader epoch."""
    for i in range(len(shared.addrs)):
        shared.etcd.heal(i)
        if not shared.ctls[i].alive():
            shared.start(i)
    for j, proc in enumerate(shared.etcd.procs):
        if proc is None or proc.poll() is not None:
            shared.etcd.start(j)
    shared.etcd.wait_healthy()
    since = time.time()

    def settled() -> bool:
        epochs = answered_epochs(shared, since)
        return shared.etcd.leader() is not None and shared.wire.last_dscp == DSCP_TOP and epochs is not None \
            and len(set(epochs)) == 1
    wait_until(settled, 40, lambda: f"a leader, marks on the wire, both agents on one epoch: {shared.output()}")
    return shared


def check_monotone(run: HaRun) -> None:
    """Every agent's applied epochs only grow (log lines), and so does the epoch of its levels in hand
    in every --json line."""
    for out, epochs in zip(run.agent_outs, run.agent_epochs()):
        seq = [e for _, e in epochs]
        assert seq == sorted(set(seq)), (out.name, epochs)
        held = [ln["leader_epoch"] for ln in json_lines(out) if ln.get("ok")]
        assert held == sorted(held), (out.name, held)


def test_partition_the_cut_leader_stops_within_its_ttl_and_no_agent_obeys_two_epochs(run: HaRun) -> None:
    old = run.leader()
    epoch = run.agent_epochs()[0][-1][1]
    time.sleep(1.0)
    run.etcd.cut(old)
    cut_at = time.time()
    new = 1 - old
    first = wait_until(lambda: next(iter(decisions(run.outs[new], cut_at)), None), 15,
                       lambda: f"the standby decides: {run.output()}")
    new_epoch = wait_until(lambda: next((e for _, e in run.agent_epochs()[0] if e > epoch), None), 10,
                           lambda: f"the agent applies a newer epoch: {run.output()}")
    time.sleep(2 * TAU)
    old_last = max(decisions(run.outs[old]))
    # the cut leader stopped deciding within its TTL, before the new one started
    assert old_last - cut_at <= TTL, (old_last - cut_at, run.output())
    assert old_last < first, (old_last, first)
    # no agent applied levels of the old epoch once it had the new one, nor of the new one before
    # the old leader stopped
    for epochs in run.agent_epochs():
        assert [e for _, e in epochs][-2:] == [epoch, new_epoch], epochs
        assert min(t for t, e in epochs if e == new_epoch) > old_last
    check_monotone(run)
    print(f"\ncut c{old} (epoch {epoch}) at 0: its last decision {old_last - cut_at:.2f} s, c{new} decided "
          f"from {first - cut_at:.2f} s (epoch {new_epoch}); TTL {TTL} s")

    # healed, the old leader joins as a standby and decides nothing
    run.etcd.heal(old)
    healed_at = time.time()
    time.sleep(3 * TTL)
    assert not decisions(run.outs[old], healed_at) and run.leader() == new
    assert wait_until(lambda: run.wire.last_dscp == DSCP_TOP, 5, "marks on the wire")
    check_monotone(run)


def test_the_raft_leader_of_three_etcd_members_killed_changes_nothing(run: HaRun) -> None:
    leader = run.leader()
    epoch = run.agent_epochs()[0][-1][1]
    member = run.etcd.raft_leader()
    run.etcd.kill(member)
    killed_at = time.time()
    time.sleep(6.0)
    done = time.time()
    made = decisions(run.outs[leader], killed_at)
    gaps = [b - a for a, b in zip([killed_at, *made], [*made, done])]
    assert len(made) >= 6 / TAU - 2 and max(gaps) < LEASE, gaps  # decisions go on (etcd's election is short)
    assert not decisions(run.outs[1 - leader], killed_at)  # the standby never decided
    assert run.leader() == leader
    for out, epochs in zip(run.agent_outs, run.agent_epochs()):  # both still on the epoch, none applied since
        assert epochs[-1][1] == epoch and not [e for t, e in epochs if t >= killed_at], (out.name, epochs)
    stretches = unmarked(list(run.wire.changes), killed_at, done)
    assert not stretches, stretches
    print(f"\netcd member e{member} (raft leader) killed: c{leader} kept epoch {epoch}, {len(made)} decisions "
          f"in {done - killed_at:.1f} s, longest gap {max(gaps):.2f} s; no unmarked packet")


def test_all_etcd_members_killed_agents_fall_back_at_the_lease_end_and_resume(run: HaRun) -> None:
    leader = run.leader()
    for j in range(3):
        run.etcd.kill(j)
    killed_at = time.time()
    cleared_at = run.wire.first_after(killed_at, 0, timeout_s=15)
    assert cleared_at is not None, f"marks never cleared: {run.output()}"
    last = max(decisions(run.outs[leader]))
    assert last - killed_at <= TTL + TAU / 2, (last - killed_at)  # it stopped deciding within its TTL
    assert not decisions(run.outs[1 - leader], killed_at)
    # the levels in hand were kept to the end of their lease (counted from the last decision), not
    # dropped at the first failed report
    assert LEASE - 1.0 < cleared_at - last < LEASE + 0.5, (cleared_at - last)
    time.sleep(2.0)
    assert run.wire.last_dscp == 0 and run.wire.first_after(cleared_at + 0.05, DSCP_TOP, timeout_s=0.1) is None

    for j in range(3):
        run.etcd.start(j)
    back_at = time.time()
    marked = run.wire.first_after(back_at, DSCP_TOP, timeout_s=30)
    assert marked is not None, f"marks did not come back: {run.output()}"
    check_monotone(run)
    print(f"\nall etcd members killed: last decision {last - killed_at:.2f} s after, marks cleared "
          f"{cleared_at - last:.2f} s after it (lease {LEASE:g} s); restarted: marks back after "
          f"{marked - back_at:.2f} s")


def test_leader_killed_no_unmarked_stretch_longer_than_ttl_plus_two_tau(run: HaRun) -> None:
    old = run.leader()
    epoch = run.agent_epochs()[0][-1][1]
    time.sleep(1.0)
    run.ctls[old].kill()  # SIGKILL: etcd notices by the lease's end
    killed_at = time.time()
    new = 1 - old
    first = wait_until(lambda: next(iter(decisions(run.outs[new], killed_at)), None), 15,
                       lambda: f"the standby decides: {run.output()}")
    assert first - killed_at <= TTL + 2 * TAU, first - killed_at
    packets = run.wire.packets
    wait_until(lambda: time.time() > killed_at + 3 * LEASE and run.wire.packets > packets + 50, 30,
               "the job's packets well past the lease")
    done = time.time()
    stretches = unmarked(list(run.wire.changes), killed_at - LEASE, done)
    assert all(s <= TTL + 2 * TAU for s in stretches), stretches
    assert run.wire.last_dscp == DSCP_TOP
    for epochs in run.agent_epochs():
        assert epochs[-1][1] > epoch, epochs
    check_monotone(run)
    print(f"\nkilled c{old}: c{new} decided after {first - killed_at:.2f} s (TTL + 2 tau = {TTL + 2 * TAU:g} s); "
          f"unmarked stretches on the wire: {[round(s, 3) for s in stretches]}")
