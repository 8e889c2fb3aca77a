"""A job's user serving the shim's socket must not stall the root agent (issue 41, finding 2).

The user's process answers ``list`` and ``set_tc`` at once and never ``lease``: the agent waited
5 s for every lease inside ``ShimEnforcer.apply``, holding its lock, with no backoff kept (the
``list`` before each apply cleared it), and every other job's levels on the host lapsed. Here FAKE
shim clients (and real unix sockets that never answer, for the listing) check each mechanism: every
exchange bounded far below tau, the backoff doubling across listings, ``apply`` and the agent's
step never waiting for a shim, latest wins per shim, one listing bounded by its deadline overall,
and the metric that says a shim was left alone.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from leveller.agent.enforce_shim import (
    EXCHANGE_TIMEOUT_S,
    LIST_TIMEOUT_S,
    SET_TIMEOUT_S,
    ShimEnforcer,
    ShimFlows,
    add_shim,
)
from leveller.agent.metrics import AgentMetrics
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.reports import Classifier
from leveller.agent.service import Agent
from leveller.agent.shim_control import QpInfo, ShimError, TcResult
from leveller.agent.shim_worker import Backoff, ShimWorkers
from leveller.jobs.logline import format_line
from leveller.model.flow import FlowKey
from tests.helpers.agents import FakeClient
from tests.helpers.fakes import RecordingEnforcer

TAU_S = 1.0  # the controller's default decision period
PID = os.getpid()


def qp(n: int, job: str = "gpt") -> QpInfo:
    return QpInfo(pid=PID, job=job, qp=n, state="RTS", tc=0, connected=True,
                  local={"qpn": n, "port": 1, "gid": f"::ffff:10.0.{n}.1"},
                  remote={"qpn": n + 1000, "lid": 0, "gid": "::ffff:10.0.0.2"}, resurrections=0, failures=0,
                  last_pause_us=0.0, last_error=None)


class FakeShims:
    """FAKE shim clients, one QP per socket (QP n on socket n). ``hold[n]``: an Event the lease (or the
    set_tc) of shim n waits for before it answers; with ``honour_timeout`` it raises ShimError after
    the timeout the agent gave, as the real client does; ``lease_fails``: shims whose lease never
    answers (ShimError at once, a timeout the real client already waited for)."""

    def __init__(self, tmp_path: Path, n: int) -> None:
        self.paths = []
        for i in range(1, n + 1):
            p = tmp_path / f"s{i}" / f"leveller-shim-{PID}.sock"
            p.parent.mkdir()
            p.touch()
            self.paths.append(p)
        self.qps = {p: qp(i) for i, p in enumerate(self.paths, start=1)}
        self.hold_lease: dict[Path, threading.Event] = {}
        self.hold_set: dict[Path, threading.Event] = {}
        self.lease_fails: set[Path] = set()
        self.honour_timeout = True
        self.calls: list[tuple[str, Path, Any, float]] = []  # (op, socket, argument, timeout given)
        self.tc: dict[Path, int] = {p: 0 for p in self.paths}
        self._lock = threading.Lock()

    def _wait(self, events: dict[Path, threading.Event], path: Path, timeout: float) -> None:
        event = events.get(path)
        if event is not None and not event.wait(timeout if self.honour_timeout else 30):
            raise ShimError(f"shim socket {path}: no complete reply within {timeout:g} s")

    def client(self, path: Path, timeout: float) -> Any:
        shims = self

        class Client:
            def list_qps(self) -> list[QpInfo]:
                with shims._lock:
                    shims.calls.append(("list", path, None, timeout))
                return [shims.qps[path]]

            def lease(self, ms: int) -> bool:
                with shims._lock:
                    shims.calls.append(("lease", path, ms, timeout))
                if path in shims.lease_fails:
                    raise ShimError(f"shim socket {path}: no complete reply within {timeout:g} s")
                shims._wait(shims.hold_lease, path, timeout)
                return True

            def set_traffic_class(self, tc: int, *, qp: int | None = None, job: str | None = None,
                                  lease_ms: int | None = None) -> list[TcResult]:
                with shims._lock:
                    shims.calls.append(("set_tc", path, tc, timeout))
                shims._wait(shims.hold_set, path, timeout)
                old, shims.tc[path] = shims.tc[path], tc
                assert qp is not None
                return [TcResult(PID, qp, True, old, tc, old != tc, False, 1.0, 0.5)]
        return Client()

    def ops(self, op: str, path: Path) -> list[Any]:
        with self._lock:
            return [arg for o, p, arg, _ in self.calls if o == op and p == path]


def setup(tmp_path: Path, n: int, now: list[float] | None = None) -> tuple[FakeShims, ShimFlows, ShimEnforcer]:
    shims = FakeShims(tmp_path, n)
    clock = (lambda: now[0]) if now is not None else time.monotonic
    flows = ShimFlows(sockets=lambda: shims.paths, client=shims.client, monotonic=clock)
    return shims, flows, ShimEnforcer(flows)


def keys(flows: ShimFlows) -> dict[Path, FlowKey]:
    return {ref.socket: k for k, ref in flows.qps.items()}


def wait_for(cond: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_every_exchange_is_bounded_far_below_tau(tmp_path: Path) -> None:
    """list and lease touch no QP: a quarter of tau at most; a set_tc (a QP rebuild) at most tau."""
    shims, flows, enf = setup(tmp_path, 1)
    flows.refresh()
    (k,) = flows.qps
    enf.apply({k: 8}, 3.0)
    assert enf.wait_idle(5)
    enf.apply({k: 16}, 3.0)
    assert enf.wait_idle(5)
    given = {op: max(t for o, _, _, t in shims.calls if o == op) for op, *_ in shims.calls}
    assert set(given) == {"list", "set_tc", "lease"}
    assert given["list"] <= TAU_S / 4 and given["lease"] <= TAU_S / 4, given  # main: 1 s and 5 s
    assert given["set_tc"] <= TAU_S, given  # main: 5 s
    assert EXCHANGE_TIMEOUT_S <= TAU_S / 4 and SET_TIMEOUT_S <= TAU_S and LIST_TIMEOUT_S <= TAU_S / 2


def test_a_shim_that_answers_list_but_never_lease_is_left_alone_longer_each_time(tmp_path: Path) -> None:
    """The issue's sequence on a fake clock: list (answered), apply (lease fails), again and again. The
    listing's success must not reset the delay (main: it stayed 2 s, so the agent waited every 2 s)."""
    now = [1000.0]
    shims, flows, enf = setup(tmp_path, 1, now)
    (path,) = shims.paths
    shims.lease_fails.add(path)
    flows.refresh()
    enf.apply({keys(flows)[path]: 8}, 3.0)  # the first change arms the lease with set_tc: answered
    assert enf.wait_idle(5) and flows.backoff.delay_s(path) == 0
    delays = []
    for _ in range(6):
        assert flows.usable(path)
        flows.refresh()  # list answers at once
        assert keys(flows), "a shim whose backoff ended is listed again"
        enf.apply({keys(flows)[path]: 8}, 3.0)  # lease renewal: never answered
        assert enf.wait_idle(5)
        delays.append(flows.backoff.delay_s(path))
        assert not flows.usable(path)
        flows.refresh()  # while left alone: not asked, its QPs not reported
        assert flows.qps == {} and "skipped" in flows.errors[0]
        now[0] += delays[-1]
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert len(shims.ops("list", path)) == 7 and len(shims.ops("lease", path)) == 6  # never while left alone


def test_a_shim_that_answers_again_is_forgiven_only_for_what_it_answered() -> None:
    now = [0.0]
    seen: list[str] = []
    b = Backoff(lambda: now[0], on_failed=seen.append)
    p = Path("/x")
    assert b.failed(p, "lease") == 2.0 and b.failed(p, "list") == 4.0 and seen == ["lease", "list"]
    b.answered(p, "list")
    assert b.delay_s(p) == 4.0 and b.left_alone() == 1  # still failing its lease
    b.answered(p, "lease")
    assert b.delay_s(p) == 0 and b.usable(p) and b.left_alone() == 0
    assert b.failed(p, "set_tc") == 2.0  # a new run of failures starts again at 2 s
    b.keep_only([])
    assert b.delay_s(p) == 0


def test_apply_and_the_agents_step_never_wait_for_a_shim(tmp_path: Path) -> None:
    """A shim that holds its lease reply: the agent's report and apply go on (main: apply waited the
    full timeout, 5 s, inside the agent's lock)."""
    shims, flows, _ = setup(tmp_path, 1)
    (path,) = shims.paths
    log = tmp_path / "gpt.log"
    log.write_text(format_line("gpt", 0, time.time() - 10) + "\n")
    other = RecordingEnforcer()
    merged, split, _ = add_shim(_NoFlows(), other, Classifier(), sockets=lambda: shims.paths)
    split.shim.flows.client = shims.client
    agent = Agent("h1", [(LogTailer(str(log)), RateTracker())], FakeClient(), split, flows=merged,
                  classifier=split.shim.flows)
    assert agent.step().ok and split.shim.wait_idle(5)  # QP set (lease armed by set_tc)
    hold = shims.hold_lease[path] = threading.Event()
    shims.honour_timeout = False  # the shim holds the reply as long as this test likes
    try:
        for _ in range(3):
            done = threading.Event()

            def step(done: threading.Event = done) -> None:
                agent.step()
                done.set()

            threading.Thread(target=step, daemon=True).start()
            assert done.wait(2), "the agent's step waited for the shim's lease reply"
            assert len(other.valid_for) >= 2  # the other jobs' levels were renewed meanwhile
        assert not hold.is_set() and len(shims.ops("lease", path)) == 1  # one exchange in flight, no queue
    finally:
        hold.set()
        split.close()


class _NoFlows:
    def read_flows(self) -> dict[FlowKey, Any]:
        return {}


def test_one_slow_shim_does_not_delay_another_and_only_its_latest_work_waits(tmp_path: Path) -> None:
    shims, flows, enf = setup(tmp_path, 2)
    slow, fast = shims.paths
    flows.refresh()
    k = keys(flows)
    enf.apply({k[slow]: 8, k[fast]: 8}, 3.0)
    assert enf.wait_idle(5)
    shims.honour_timeout = False
    hold = shims.hold_lease[slow] = threading.Event()
    try:
        for dscp in (16, 24, 32):  # three decisions while the slow shim holds its first lease renewal
            enf.apply({k[slow]: dscp, k[fast]: dscp}, 3.0)
            assert wait_for(lambda d=dscp: shims.tc[fast] == d << 2), f"the fast shim waited: {shims.tc}"
        assert shims.ops("set_tc", slow) == [32]  # nothing more while it holds the lease
    finally:
        hold.set()
    assert enf.wait_idle(5)
    assert shims.ops("set_tc", slow) == [32, 128]  # then only the latest decision: DSCP 32
    assert len(shims.ops("lease", slow)) == 2  # the held one, and the latest's


def test_workers_run_one_piece_per_shim_at_a_time_latest_wins() -> None:
    ran: list[tuple[str, int]] = []
    gate = threading.Event()
    running = threading.Event()

    def run(path: Path, work: int) -> None:
        if path.name == "a" and work == 0:
            running.set()
            gate.wait(5)
        ran.append((path.name, work))

    workers: ShimWorkers[int] = ShimWorkers(run, workers=2)
    workers.post(Path("a"), 0)
    assert running.wait(5)
    for i in range(1, 5):
        workers.post(Path("a"), i)
    workers.post(Path("b"), 7)
    assert wait_for(lambda: ("b", 7) in ran)  # b ran while a was busy
    assert not workers.wait_idle(0.05)
    gate.set()
    assert workers.wait_idle(5)
    assert [w for name, w in ran if name == "a"] == [0, 4] and workers.superseded == 3
    assert workers.close(1)
    workers.post(Path("a"), 9)  # after close: dropped
    assert [w for name, w in ran if name == "a"] == [0, 4]


@contextmanager
def silent_sockets(directory: Path, n: int) -> Iterator[list[Path]]:
    """``n`` unix sockets that accept connections (the kernel's backlog) and never answer."""
    socks, paths = [], []
    try:
        for i in range(n):
            p = directory / f"silent-{i}.sock"
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(p))
            s.listen(16)
            socks.append(s)
            paths.append(p)
        yield paths
    finally:
        for s in socks:
            s.close()


def test_a_listing_of_80_silent_sockets_ends_at_its_deadline(tmp_path: Path) -> None:
    """main: each silent socket had its own 1 s, 8 at a time: 10 s for one listing (10 x its deadline)."""
    with silent_sockets(tmp_path, 80) as paths:
        flows = ShimFlows(sockets=lambda: paths)
        t0 = time.monotonic()
        assert flows.refresh() == {}
        took = time.monotonic() - t0
        assert took < 4 * LIST_TIMEOUT_S, f"one listing took {took:.1f} s, its deadline is {LIST_TIMEOUT_S} s"
        assert len(flows.errors) == 80
        failed = [p for p in paths if not flows.usable(p)]
        assert failed, "no silent socket was left alone"
        t0 = time.monotonic()
        flows.refresh()
        assert time.monotonic() - t0 < 4 * LIST_TIMEOUT_S


def test_shims_that_answered_are_listed_first_and_one_not_reached_keeps_its_qps(tmp_path: Path) -> None:
    shims = FakeShims(tmp_path, 2)
    good, late = shims.paths
    order: list[Path] = []
    base = shims.client

    def client(path: Path, timeout: float) -> Any:
        order.append(path)
        return base(path, timeout)

    flows = ShimFlows(sockets=lambda: [late, good], client=client, list_timeout_s=0.5)
    flows.refresh()
    assert set(keys(flows)) == {good, late}
    flows._answered = {good}  # good answered last time, late did not
    order.clear()
    flows.refresh()
    assert order[0] == good
    flows.list_timeout_s = 0.0  # no time left for anyone: the QPs stay as last listed, nobody left alone
    before = dict(flows.qps)
    assert flows.refresh() == before and all(flows.usable(p) for p in shims.paths)
    assert all("deadline" in e for e in flows.errors)


def test_a_shim_left_alone_is_counted_in_the_agents_metrics(tmp_path: Path) -> None:
    shims = FakeShims(tmp_path, 1)
    (path,) = shims.paths
    shims.lease_fails.add(path)
    metrics = AgentMetrics()
    _, split, flows = add_shim(_NoFlows(), RecordingEnforcer(), Classifier(), sockets=lambda: shims.paths,
                               metrics=metrics)
    flows.client = shims.client
    flows.refresh()
    (k,) = flows.qps
    split.apply({k: 8}, 3.0)
    assert split.shim.wait_idle(5)
    split.apply({k: 8}, 3.0)
    assert split.shim.wait_idle(5)
    sample = metrics.registry.get_sample_value
    assert sample("leveller_agent_shim_backoffs_total", {"op": "lease"}) == 1
    assert sample("leveller_agent_shims_left_alone") == 1
    assert any("left alone for 2 s" in e for e in split.shim.errors)
    split.close()


@pytest.mark.parametrize("bad", [0, -1])
def test_workers_need_a_thread(bad: int) -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        ShimWorkers(lambda p, w: None, workers=bad)
