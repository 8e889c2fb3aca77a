"""leveller.agent.slots: the free list of mark slots (FIFO) and the flow <-> slot record."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.agent.flow_structs import key_records
from leveller.agent.slots import SlotPool, SlotsExhausted, SlotTable
from leveller.model.flow import FlowKey, flow_key

# an operation: ("take", n) or ("give", picks): picks choose taken slots by position (mod how many)
ops = st.lists(st.one_of(st.tuples(st.just("take"), st.integers(0, 12)),
                         st.tuples(st.just("give"), st.lists(st.integers(0, 1000), max_size=6))), max_size=60)


@given(st.integers(1, 10), ops)
def test_the_pool_hands_out_the_oldest_free_slot_and_never_one_twice(capacity: int,
                                                                     steps: list[tuple[str, object]]) -> None:
    pool = SlotPool(capacity)
    free: deque[int] = deque(range(capacity))  # the model: a FIFO of the free slots
    out: list[int] = []
    for op, arg in steps:
        if op == "take":
            n = arg
            assert isinstance(n, int)
            if n > len(free):
                with pytest.raises(SlotsExhausted):
                    pool.take(n)
            else:
                got = pool.take(n).tolist()
                assert got == [free.popleft() for _ in range(n)]  # oldest first
                assert not set(got) & set(out)  # never a slot that is out already
                out += got
        else:
            assert isinstance(arg, list)
            picks = list(dict.fromkeys(out[i % len(out)] for i in arg)) if out else []
            pool.give(np.array(picks, dtype=np.int64))
            for s in picks:
                out.remove(s)
                free.append(s)  # behind every slot already free
        assert pool.free == len(free) and pool.free + len(out) == capacity
        assert sorted(np.flatnonzero(pool.taken).tolist()) == sorted(out)


def test_a_bad_give_is_refused_and_changes_nothing() -> None:
    pool = SlotPool(4)
    taken = pool.take(2)
    for bad in ([2], [0, 0], [4], [-1], [[0]]):
        with pytest.raises(ValueError):
            pool.give(np.array(bad, dtype=np.int64))
        assert pool.free == 2 and pool.taken.tolist() == [True, True, False, False]
    pool.give(taken[::-1])
    assert pool.take(4).tolist() == [2, 3, 1, 0]
    with pytest.raises(SlotsExhausted):
        pool.take(1)
    with pytest.raises(ValueError):
        SlotPool(0)


def keys(n: int, start: int = 0) -> list[FlowKey]:
    return [flow_key("10.0.0.1", "10.0.0.2", 1000 + i, 80) for i in range(start, start + n)]


def test_the_table_records_flows_records_and_versions() -> None:
    table = SlotTable(6)
    flows = keys(4)
    slots = table.pool.take(4)
    table.bind(flows, key_records(flows), slots)
    assert table.slot_of == dict(zip(flows, slots.tolist())) and len(table) == 4 and table.version == 1
    assert table.lookup(flows[::-1] + keys(1, 9), 5).tolist() == slots[::-1].tolist() + [-1]
    assert table.records[slots].tobytes() == key_records(flows).tobytes()
    assert table.bound.tolist() == [True] * 4 + [False] * 2
    table.release(slots[[1, 3]])
    assert table.slot_of == {flows[0]: 0, flows[2]: 2} and table.version == 2
    assert table.key_at == {0: flows[0], 2: flows[2]}
    assert table.pool.take(4).tolist() == [4, 5, 1, 3]  # the released ones after the never used ones


def test_the_table_refuses_what_would_corrupt_it() -> None:
    table = SlotTable(4)
    flows = keys(2)
    slots = table.pool.take(2)
    table.bind(flows, key_records(flows), slots)
    with pytest.raises(ValueError):
        table.check_new([flows[0]])  # holds a slot already
    with pytest.raises(ValueError):
        table.check_new(keys(1, 5) * 2)  # named twice
    table.check_new(keys(2, 5))
    with pytest.raises(ValueError):
        table.bind(keys(1, 5), key_records(keys(1, 5)), np.array([2]))  # slot not taken from the pool
    with pytest.raises(ValueError):
        table.bind(keys(1, 5), key_records(keys(1, 5)), slots[:1])  # slot held
    with pytest.raises(ValueError):
        table.release(np.array([2]))  # held by no flow
    with pytest.raises(ValueError):
        table.release(np.array([0, 0]))
    assert table.slot_of == {flows[0]: 0, flows[1]: 1} and table.version == 1 and table.pool.free == 2


@given(st.lists(st.sets(st.integers(0, 11), max_size=8), min_size=1, max_size=30))
def test_flows_coming_and_going_keep_one_slot_each_and_reuse_freed_ones_last(rounds: list[set[int]]) -> None:
    """Calls as the datapath makes them (new flows take slots before the leaving ones free theirs):
    every flow holds exactly one slot, no two flows share one, and a freed slot goes to a new flow
    only after every slot that was free before it."""
    universe = keys(12)
    table = SlotTable(2 * 8)
    for wanted in rounds:
        now = {universe[i] for i in wanted}
        new = [k for k in universe if k in now and k not in table.slot_of]
        gone = np.array([s for k, s in table.slot_of.items() if k not in now], dtype=np.int64)
        before_free = table.pool.free
        fresh = table.pool.take(len(new))
        assert not set(fresh.tolist()) & set(gone.tolist())
        table.bind(new, key_records(new), fresh)
        table.release(gone)
        assert set(table.slot_of) == now
        assert len(set(table.slot_of.values())) == len(now)
        assert table.key_at == {s: k for k, s in table.slot_of.items()}
        assert table.pool.free == before_free - len(new) + len(gone) == table.capacity - len(now)
