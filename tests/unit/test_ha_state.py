"""The controller state kept in etcd (leveller.controller.hastate) and the leader's term
(leveller.controller.leadership): encoding round trips, bounds, batching, and a leader that stops
deciding before its lease can expire, whatever the keep-alives do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.controller.hastate import (
    MAX_TXN_OPS,
    MAX_VALUE_BYTES,
    HaState,
    JobRecord,
    Layout,
    Op,
    PlanRecord,
    ReplayMark,
    StateError,
    batches,
    changes,
    check_prefix,
    decode,
    encode,
)
from leveller.controller.leadership import LEADER_IS, Leadership, NotLeader, guard_for, leader_in

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-", min_size=1,
                max_size=64)
times = st.floats(0, 4e9, allow_nan=False)
jobs = st.builds(JobRecord, st.none() | st.floats(1e-3, 1e4), st.none() | st.floats(1e-3, 1e4),
                 st.floats(0, 1e9), st.integers(0, 2**62), times)
marks = st.builds(ReplayMark, st.text(alphabet="0123456789abcdef", min_size=16, max_size=64),
                  st.integers(0, 2**62), times)
plans = st.none() | st.builds(PlanRecord, st.integers(0, 2**62), times,
                              st.dictionaries(names, st.floats(0, 100), max_size=5),
                              st.dictionaries(names, st.floats(0.001, 100), max_size=5))
states = st.builds(HaState, st.dictionaries(names, jobs, max_size=8),
                   st.dictionaries(names, st.floats(0.01, 100), max_size=4),
                   st.dictionaries(names, marks, max_size=8), plans)


@settings(max_examples=200)
@given(states)
def test_state_round_trips_through_its_keys(state: HaState) -> None:
    layout = Layout("/lv/")
    pairs = encode(state, layout)
    assert all(k.startswith("/lv/state/") for k in pairs)
    assert all(len(v) <= MAX_VALUE_BYTES for v in pairs.values())
    assert decode(pairs, layout) == state


@settings(max_examples=100)
@given(states, states)
def test_changes_turn_one_state_into_the_other(old: HaState, new: HaState) -> None:
    layout = Layout()
    stored, wanted = encode(old, layout), encode(new, layout)
    for batch in batches(changes(stored, wanted)):
        assert 1 <= len(batch) <= MAX_TXN_OPS
        for op in batch:
            if op.value is None:
                del stored[op.key]
            else:
                stored[op.key] = op.value
    assert stored == wanted
    assert changes(wanted, wanted) == []  # an unchanged state writes nothing


def test_the_key_layout() -> None:
    layout = Layout("/leveller/")
    state = HaState({"j1": JobRecord(0.5, 0.5, 10.0, 20, 1.7e9)}, {"big": 4.0},
                    {"h1": ReplayMark("ab" * 8, 7, 1.7e9)}, PlanRecord(3, 1.7e9, {"j1": 0.1}, {"j1": 0.5}))
    assert sorted(encode(state, layout)) == ["/leveller/state/cassini", "/leveller/state/jobs/j1",
                                             "/leveller/state/replay/h1", "/leveller/state/weights"]
    assert layout.leader == "/leveller/leader" and layout.member("c1") == "/leveller/members/c1"


def test_a_bad_record_names_its_key_and_what_is_allowed() -> None:
    layout = Layout()
    with pytest.raises(StateError, match=r"/leveller/state/jobs/j1: ideal = -1; expected a finite number >= 0"):
        decode({"/leveller/state/jobs/j1": b'{"ideal":-1,"in_use":null,"work_base":0,"iter_base":0,'
                                           b'"first_seen":0}'}, layout)
    with pytest.raises(StateError, match=r"replay/h1: fields \['run'\]; expected exactly"):
        decode({"/leveller/state/replay/h1": b'{"run":"x"}'}, layout)
    with pytest.raises(StateError, match="not JSON"):
        decode({"/leveller/state/cassini": b"{"}, layout)
    with pytest.raises(StateError, match="is not a name"):
        decode({"/leveller/state/jobs/bad name": b"{}"}, layout)
    with pytest.raises(StateError, match=f"at most {MAX_VALUE_BYTES} bytes"):
        decode({"/leveller/state/cassini": b" " * (MAX_VALUE_BYTES + 1)}, layout)
    # a key of a later layout is left alone
    assert decode({"/leveller/state/future": b"anything"}, layout) == HaState()


def test_writes_are_bounded() -> None:
    ops = [Op(f"/k/{i}", b"x" * 1000) for i in range(1000)]
    cut = batches(ops)
    assert sum(map(len, cut)) == 1000 and max(map(len, cut)) <= MAX_TXN_OPS
    assert len(changes({}, {f"/k/{i}": b"" for i in range(10)}, limit=4)) == 4
    big = [Op(f"/k/{i}", b"x" * MAX_VALUE_BYTES) for i in range(20)]
    assert all(sum(len(o.value or b"") for o in b) <= 512 * 1024 for b in batches(big))


def test_prefix_is_checked() -> None:
    assert check_prefix("/a/b/") == "/a/b/"
    for bad in ("a/", "/a", "/", "/a b/"):
        with pytest.raises(ValueError, match="--etcd-prefix"):
            check_prefix(bad)


# ---- the leader's term ------------------------------------------------------------------------------

def test_a_leader_decides_until_its_last_acknowledged_renewal_plus_ttl_minus_the_guard() -> None:
    ld = Leadership(2.0, guard_s=0.4)
    assert not ld.may_decide(0.0)
    ld.won(epoch=17, address="a:1", sent_at=10.0, granted_ttl=2)
    assert ld.may_decide(11.5) and not ld.may_decide(11.6)
    ld.renewed(sent_at=11.0, granted_ttl=2)
    assert ld.may_decide(12.5) and not ld.may_decide(12.6)
    ld.renewed(sent_at=10.5, granted_ttl=2)  # a late answer to an older keep-alive shortens nothing
    assert ld.may_decide(12.5)
    assert ld.check(12.0, "a:1") == 17
    with pytest.raises(NotLeader) as exc:
        ld.check(12.6, "a:1")  # in doubt: names no leader, not even itself
    assert exc.value.leader is None
    ld.renewed(sent_at=12.0, granted_ttl=-1)  # the lease is gone
    assert not ld.may_decide(12.1) and ld.role == "unknown"


def test_a_granted_ttl_longer_than_asked_does_not_lengthen_the_term() -> None:
    ld = Leadership(2.0, guard_s=0.4)
    ld.won(3, "a:1", 0.0, granted_ttl=5)
    assert not ld.may_decide(1.6)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.floats(0, 5), st.booleans(), st.floats(0, 0.5)), max_size=20), st.integers(1, 5))
def test_a_leader_never_decides_after_its_lease_can_have_expired(renewals: list[tuple[float, bool, float]],
                                                                 ttl: int) -> None:
    """etcd expires the lease no earlier than TTL after the last keep-alive it received, which left the
    controller no earlier than that keep-alive's ``sent_at``: with any keep-alives answered or lost, and
    any answer delay, may_decide is False from (last answered keep-alive sent) + TTL on."""
    ld = Leadership(float(ttl))
    t, last_sent = 0.0, 0.0
    ld.won(1, "a:1", 0.0, ttl)
    for gap, answered, _delay in renewals:
        t += gap
        if answered:
            ld.renewed(t, ttl)
            last_sent = max(last_sent, t)
    assert not ld.may_decide(last_sent + ttl)
    assert ld.may_decide(last_sent + ttl - guard_for(ttl) - 1e-6)


def test_standby_names_the_leader_and_the_message_is_read_back() -> None:
    ld = Leadership(2.0)
    ld.follower("b:50051", 9)
    with pytest.raises(NotLeader, match="not the leader; the leader is b:50051") as exc:
        ld.check(0.0, "a:50051")
    assert leader_in(str(exc.value)) == "b:50051"
    assert leader_in(str(NotLeader(None))) is None and leader_in("other") is None
    assert leader_in(LEADER_IS + "[::1]:50051") == "[::1]:50051"
    ld.follower("b:50051", 9)
    ld.won(12, "a:50051", 0.0, 2)
    ld.follower("b:50051", 9)  # a stale read while leading changes nothing
    assert ld.may_decide(0.5)


def test_bad_terms_are_refused() -> None:
    with pytest.raises(ValueError, match="ttl_s must be >= 1"):
        Leadership(0.5)
    with pytest.raises(ValueError, match="guard_s"):
        Leadership(2.0, guard_s=2.0)
    with pytest.raises(ValueError, match="epoch must be > 0"):
        Leadership(2.0).won(0, "a:1", 0.0, 2)
