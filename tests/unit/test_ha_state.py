"""The controller state kept in etcd (leveller.controller.hastate) and the leader's term
(leveller.controller.leadership): encoding round trips, bounds, batching, and a leader that stops
deciding before its lease can expire, whatever the keep-alives do."""

from __future__ import annotations

import json

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
    read_leader,
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


# ---- records that do not fit one value (a CASSINI plan of ~450 jobs, ~800 weights) -------------------

def long_names(n: int, tag: str = "j") -> list[str]:
    return [f"{tag}{i:05d}-" + "x" * 57 for i in range(n)]  # 64 characters, the most a name may have


def test_a_big_plan_and_many_weights_are_written_in_parts_and_read_back_whole() -> None:
    layout = Layout()
    jobs = long_names(450)
    plan = PlanRecord(7, 1.7e9, {j: 0.123456789 + i for i, j in enumerate(jobs)},
                      {j: 1.23456789 + i for i, j in enumerate(jobs)})
    weights = {w: 1.0 + i / 7 for i, w in enumerate(long_names(800, "w"))}
    state = HaState({"j1": JobRecord(0.5)}, weights, {}, plan)
    pairs = encode(state, layout)
    assert all(len(v) <= MAX_VALUE_BYTES for v in pairs.values())
    assert {k for k in pairs if k.startswith("/leveller/state/cassini")} == {
        "/leveller/state/cassini/0000", "/leveller/state/cassini/0001"}
    assert "/leveller/state/weights/0000" in pairs and "/leveller/state/weights" not in pairs
    assert decode(pairs, layout) == state
    assert encode(state, layout) == pairs  # the same state cuts the same way: nothing rewritten


def test_small_records_keep_the_format_older_controllers_read() -> None:
    layout = Layout()
    pairs = encode(HaState({}, {"a": 2.0}, {}, PlanRecord(1, 5.0, {"a": 0.5}, {"a": 1.0})), layout)
    assert pairs == {"/leveller/state/weights": b'{"a":2.0}',
                     "/leveller/state/cassini": b'{"anchor":5.0,"periods":{"a":1.0},"plan":1,"shifts":{"a":0.5}}'}


def test_parts_of_different_plans_are_never_joined() -> None:
    layout = Layout()
    jobs = long_names(600)
    parts = [encode(HaState(plan=PlanRecord(k, 1.7e9, dict.fromkeys(jobs, 0.5), dict.fromkeys(jobs, 1.0))), layout)
             for k in (1, 2)]
    mixed = {"/leveller/state/cassini/0000": parts[0]["/leveller/state/cassini/0000"],
             "/leveller/state/cassini/0001": parts[1]["/leveller/state/cassini/0001"]}
    with pytest.raises(StateError, match="not every part of one plan"):
        decode(mixed, layout)
    errors: list[str] = []
    assert decode(mixed, layout, errors).plan is None and len(errors) == 1
    missing = {"/leveller/state/cassini/0001": parts[1]["/leveller/state/cassini/0001"]}
    assert decode(missing, layout, []).plan is None
    # a whole record and parts (a write between the two formats): the newer plan
    whole = encode(HaState(plan=PlanRecord(3, 1.0, {"a": 0.5}, {"a": 1.0})), layout)
    assert decode({**parts[1], **whole}, layout).plan == PlanRecord(3, 1.0, {"a": 0.5}, {"a": 1.0})
    assert decode({**parts[1], **encode(HaState(plan=PlanRecord(1, 1.0, {}, {})), layout)}, layout).plan.plan == 2


@settings(max_examples=25)
@given(st.integers(0, 3000), st.integers(0, 1500), st.integers(1, 2**62))
def test_weights_and_plans_of_any_size_round_trip_in_records_that_fit(n_weights: int, n_jobs: int, plan: int) -> None:
    layout = Layout("/lv/")
    jobs = long_names(n_jobs)
    state = HaState({}, {w: 0.5 + i for i, w in enumerate(long_names(n_weights, "w"))}, {},
                    PlanRecord(plan, 1.7e9, {j: i / 3 for i, j in enumerate(jobs)}, {j: 1 + i / 3 for i, j in
                                                                                       enumerate(jobs[::2])}))
    pairs = encode(state, layout)
    assert all(len(v) <= MAX_VALUE_BYTES for v in pairs.values())
    assert decode(pairs, layout) == state


def test_what_cannot_be_written_is_left_out_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import leveller.controller.hastate as hastate

    monkeypatch.setattr(hastate, "MAX_JOBS", 3)
    layout = Layout()
    state = HaState({f"j{i}": JobRecord(0.5) for i in range(5)}, {"ok": 1.0, "bad name": 2.0})
    left: list[str] = []
    pairs = encode(state, layout, left)
    assert sorted(pairs) == ["/leveller/state/jobs/j0", "/leveller/state/jobs/j1", "/leveller/state/jobs/j2",
                             "/leveller/state/weights"]
    assert left == ["/leveller/state/: 2 of 5 jobs left out (at most 3)",
                    "/leveller/state/weights: 'bad name' is not a name (1-64 of A-Z a-z 0-9 _ . : -)"]
    with pytest.raises(StateError, match="2 of 5 jobs left out"):
        encode(state, layout)


# ---- values read back that are not records (corrupt, hostile) --------------------------------------

BIG = "1" + "0" * 400
DEEP = "[" * 30000 + "]" * 30000  # under the record size limit, past the JSON parser's recursion limit
HOSTILE = {
    "/leveller/state/jobs/j": [
        f'{{"ideal":{BIG},"in_use":null,"work_base":0,"iter_base":0,"first_seen":0}}',
        f'{{"ideal":null,"in_use":-{BIG},"work_base":0,"iter_base":0,"first_seen":0}}',
        f'{{"ideal":null,"in_use":null,"work_base":0,"iter_base":{BIG},"first_seen":0}}',
        '{"ideal":NaN,"in_use":null,"work_base":0,"iter_base":0,"first_seen":0}',
        '{"ideal":1e400,"in_use":null,"work_base":0,"iter_base":0,"first_seen":0}',
        '{"ideal":' + "9" * 5000 + ',"in_use":null,"work_base":0,"iter_base":0,"first_seen":0}', DEEP],
    "/leveller/state/replay/h": [f'{{"run":"abababababababab","seq":1,"sent_at":{BIG}}}', DEEP,
                                 '{"run":' + DEEP[:20000] + ',"seq":1,"sent_at":0}'],
    "/leveller/state/weights": [f'{{"j":{BIG}}}', DEEP, "[1]", '{"j":"x"}'],
    "/leveller/state/weights/0000": [f'{{"weights":{{"j":{BIG}}}}}', DEEP],
    "/leveller/state/cassini": [f'{{"plan":1,"anchor":{BIG},"shifts":{{}},"periods":{{}}}}',
                                f'{{"plan":1,"anchor":0,"shifts":{{"a":{BIG}}},"periods":{{}}}}', DEEP],
    "/leveller/state/cassini/0000": [f'{{"plan":1,"anchor":0,"part":0,"parts":{BIG},"shifts":{{}},"periods":{{}}}}',
                                     '{"plan":1,"anchor":0,"part":[],"parts":1,"shifts":{},"periods":{}}', DEEP],
}


@pytest.mark.parametrize("key", sorted(HOSTILE))
def test_a_hostile_value_is_refused_as_a_state_error_naming_its_key(key: str) -> None:
    for raw in HOSTILE[key]:
        with pytest.raises(StateError, match=f"^{key}: ") as exc:
            decode({key: raw.encode()}, Layout())
        assert len(str(exc.value)) < 400  # the message names the field, not the whole value
    with pytest.raises(StateError, match="^/leveller/leader: "):
        read_leader(DEEP.encode(), "/leveller/leader")
    with pytest.raises(StateError, match="^/leveller/leader: "):
        read_leader(b'{"name":"a","address":"b","v":' + BIG.encode() + b',"leading":1}', "/leveller/leader")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)
record_keys = st.sampled_from(sorted(HOSTILE) + ["/leveller/state/jobs/bad name", "/leveller/state/cassini/0001"])


@settings(max_examples=300)
@given(st.dictionaries(record_keys, json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=64),
                       max_size=4))
def test_any_value_decodes_or_is_refused_as_a_state_error(pairs: dict[str, bytes]) -> None:
    try:
        decode(pairs, Layout())
    except StateError:
        pass
    errors: list[str] = []
    decode(pairs, Layout(), errors)  # with a list: never raises, the good records are kept
