"""The election under etcd errors (leveller.controller.ha): after any failed call, a controller finds out
whether it holds the election key and leads or lets go, and a standby deposes a holder that never leads.
Two controllers on an in-memory etcd with fake clocks, their elector rounds and decision steps run as
their threads would run them; one (or several) etcd calls lose the request, lose the answer, or are
applied twice (EtcdStore's retry on the next member). The property, for every such fault: never two
controllers that may decide at once, and from TTL + 2 tau after etcd answers again to the end, exactly one."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.controller.ha import HaController
from leveller.controller.hastate import leader_record
from tests.helpers.etcd import MODES, FakeEtcd, FaultyEtcd, pair

TTL, TAU = 2, 0.5  # pair(): TTL + 2 tau = 3 s
SAMPLE_S = 0.05


@dataclass
class Run:
    etcd: FakeEtcd
    store: FaultyEtcd
    mono: list[float]
    has: list[HaController]
    deciding: list[tuple[float, tuple[bool, ...]]] = field(default_factory=list)  # (t, may_decide per controller)

    def deciders(self, since: float, until: float = math.inf) -> set[int]:
        """How many controllers may decide, over the samples in [since, until]."""
        return {sum(d) for t, d in self.deciding if since <= t <= until}


def simulate(faults: dict[int, str] | None = None, until: float = 8.0, b_from: float = 0.1,
             a_dies_at: float = math.inf, down: tuple[float, float] | None = None) -> Run:
    """Controllers a (from 0) and b (from ``b_from``) on one etcd, until ``until``: each elector round when
    its thread would run it (HaController.elect_round says when the next one is), each decision step (a
    state write) every HaController.period while it may decide, a sample every SAMPLE_S. ``a_dies_at``:
    a stops there (SIGKILL: no more calls, its lease runs out at etcd). ``down``: etcd answers nothing in
    [start, end)."""
    store_box: list[FaultyEtcd] = []

    def faulty(etcd: FakeEtcd) -> FaultyEtcd:
        store_box.append(FaultyEtcd(etcd, faults))
        return store_box[0]
    etcd, mono, _, has, _ = pair(TTL, store=faulty)
    store = store_box[0]
    for ha in has:  # something to write: the leader's first step writes it (a guarded write)
        ha.controller.registry.weights["j"] = 2.0
    run = Run(etcd, store, mono, has)
    rounds, steps = [0.0, b_from], [math.inf, math.inf]
    sample = 0.0
    while True:
        t = min(*rounds, *steps, sample)
        if t > until:
            return run
        mono[0] = t
        if down is not None:
            store.down_until = down[1] if down[0] <= t < down[1] else -1.0
        alive = [t < a_dies_at, True]
        for i, ha in enumerate(has):
            if not alive[i]:
                rounds[i] = steps[i] = math.inf
                continue
            if rounds[i] == t:
                rounds[i] = t + ha.elect_round()
            if steps[i] == t:
                if ha.may_decide():
                    try:
                        ha.save()
                    except ConnectionError:
                        pass  # HaController.run keeps it in last_error; the next step writes again
                steps[i] = t + ha.period(ha.may_decide())
            elif steps[i] == math.inf and ha.may_decide():
                steps[i] = t  # run() steps at once when it turns leader (within poll_s in the real loop)
        if sample == t:
            sample = round(t + SAMPLE_S, 6)
        run.deciding.append((t, tuple(alive[i] and ha.may_decide() for i, ha in enumerate(has))))


def baseline_calls(**kw: object) -> list[tuple[str, float]]:
    return simulate(**kw).store.calls  # type: ignore[arg-type]


def check(run: Run, healthy_from: float) -> None:
    """Never two deciders; exactly one from ``healthy_from`` + TTL + 2 tau on."""
    assert run.deciders(0.0) <= {0, 1}, [(t, d) for t, d in run.deciding if sum(d) > 1][:3]
    late = [(t, d) for t, d in run.deciding if t >= healthy_from + TTL + 2 * TAU and sum(d) != 1]
    assert not late, (late[:3], run.store.calls[-12:])


# ---- the two sequences of the issue -------------------------------------------------------------------

def test_a_read_that_fails_right_after_a_won_campaign_is_retried_and_the_winner_leads() -> None:
    """The read of the state that follows a won campaign times out: the winner holds the key and knows it
    at its next round (the key is on its lease), reads again and leads; the standby names it."""
    calls = baseline_calls()
    read = next(n for n, (op, _) in enumerate(calls) if op == "get_prefix")
    assert calls[read - 1][0] == "campaign"
    run = simulate({read: "lost"}, until=20 * TTL)
    a, b = run.has
    assert a.may_decide() and not b.may_decide() and b.leadership.leader == "a:50051"
    first = min(t for t, d in run.deciding if d[0])
    assert first - calls[read][1] <= a.poll_s + 1e-9  # at a's next round
    check(run, calls[read][1])


def test_a_campaign_applied_whose_answer_was_lost_is_found_on_the_lease_and_the_winner_leads() -> None:
    calls = baseline_calls()
    campaign = next(n for n, (op, _) in enumerate(calls) if op == "campaign")
    for mode in ("answer", "retried"):  # an error; or EtcdStore's retry at the next member, which says "taken"
        run = simulate({campaign: mode}, until=20 * TTL)
        a, b = run.has
        assert a.may_decide() and not b.may_decide() and b.leadership.leader == "a:50051", mode
        assert a.leadership.epoch == run.etcd.kv["/leveller/leader"][1]  # the key's create revision
        check(run, calls[campaign][1])


# ---- one failure at every call of an election ---------------------------------------------------------

FIRST = baseline_calls(until=4.0)
KILLED_AT = 3.0
HANDOVER = baseline_calls(until=KILLED_AT + TTL + 3.0, a_dies_at=KILLED_AT)


@pytest.mark.parametrize("mode", MODES)
def test_one_failure_at_any_call_of_the_first_election(mode: str) -> None:
    assert len(FIRST) > 20 and {op for op, _ in FIRST} >= {"grant", "put", "campaign", "get_prefix", "mark",
                                                             "keepalive", "holder", "guarded_write"}
    for n, (op, t) in enumerate(FIRST):
        run = simulate({n: mode}, until=t + TTL + 2 * TAU + 3.0)
        try:
            check(run, t)
        except AssertionError as exc:
            raise AssertionError(f"{mode} at call {n} ({op} at {t:.2f} s): {exc}") from None


@pytest.mark.parametrize("mode", MODES)
def test_one_failure_at_any_call_of_a_handover_after_the_leader_died(mode: str) -> None:
    """a leads and is killed at 3 s: b, elected once a's lease ran out, decides within TTL + 2 tau of the
    kill, or of etcd answering again when one of its calls fails."""
    after = [(n, op, t) for n, (op, t) in enumerate(HANDOVER) if t >= KILLED_AT]
    assert {op for _, op, _ in after} >= {"campaign", "get_prefix", "mark", "keepalive", "holder"}
    for n, op, t in after:
        run = simulate({n: mode}, until=max(t, KILLED_AT) + TTL + 2 * TAU + 3.0, a_dies_at=KILLED_AT)
        try:
            check(run, max(t, KILLED_AT))
            assert run.has[1].may_decide()
        except AssertionError as exc:
            raise AssertionError(f"{mode} at call {n} ({op} at {t:.2f} s): {exc}") from None


@settings(max_examples=60)
@given(st.dictionaries(st.integers(0, len(FIRST) - 1), st.sampled_from(MODES), max_size=5),
       st.none() | st.tuples(st.floats(0.0, 3.0), st.floats(0.05, 3.0)))
def test_any_few_failures_and_an_outage_end_in_one_leader(faults: dict[int, str],
                                                          outage: tuple[float, float] | None) -> None:
    down = None if outage is None else (outage[0], outage[0] + outage[1])
    last = max([FIRST[n][1] for n in faults] + [down[1] if down else 0.0])
    run = simulate(faults, until=last + TTL + 2 * TAU + 4.0, down=down)
    check(run, last)


# ---- the standby's side ------------------------------------------------------------------------------

def test_a_standby_deposes_a_holder_that_never_leads_and_takes_over() -> None:
    """a wins the key but cannot take over (its state read fails for a reason of its own, every time):
    b deposes it after depose_after_s and leads; no two ever decide."""
    etcd, mono, _, (a, b), _ = pair(TTL)

    def broken(*args: object) -> None:
        raise RuntimeError("a bug in a's take-over")
    a.load = broken  # type: ignore[method-assign]
    deciding = []
    t = 0.0
    while t < 3 * a.depose_after_s:
        mono[0] = t
        a.elect_round()
        b.elect_round()
        deciding.append((t, a.may_decide(), b.may_decide()))
        t = round(t + 0.25, 6)
    assert not any(x for _, x, _ in deciding)
    became = min(t for t, _, y in deciding if y)
    assert a.depose_after_s <= became <= a.depose_after_s + TTL  # b deposed, then won
    assert a.leadership.role == "standby" and a.leadership.leader == "b:50051"


def test_a_holder_of_an_older_version_is_never_deposed() -> None:
    """A leader record without "v" (a controller of an older release, which never says it leads) is left
    alone however long it stays: it may be deciding."""
    etcd, mono, _, (_, b), _ = pair(TTL)
    lease, _ = etcd.grant(TTL)
    etcd.campaign("/leveller/leader", b'{"address":"old:50051","name":"old"}', lease)
    for k in range(int(4 * b.depose_after_s / 0.25)):
        mono[0] = k * 0.25
        etcd.keepalive(lease)
        b.elect_round()
        assert not b.may_decide() and b.leadership.leader == "old:50051"
    assert "/leveller/leader" in etcd.kv


def test_a_leader_whose_key_is_deleted_stops_at_its_next_round() -> None:
    etcd, mono, _, (a, b), _ = pair(TTL)
    a.elect_once()
    b.elect_once()
    del etcd.kv["/leveller/leader"]  # an operator's etcdctl del
    mono[0] = 0.5
    a.elect_once()
    assert not a.may_decide()
    b.elect_once()
    a.elect_once()
    assert (a.may_decide(), b.may_decide()) in ((True, False), (False, True))


def test_the_election_key_says_whether_its_holder_leads() -> None:
    etcd, mono, _, (a, _), _ = pair(TTL)
    a.elect_once()
    assert etcd.kv["/leveller/leader"][0] == leader_record("a", "a:50051", leading=True)
