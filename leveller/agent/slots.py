"""Slots of flow_mark_egress: which marked flow holds which element of the mmap'd mark array.

bpf/flow_marker.c finds a flow's mark in two steps: flow_dscp_egress (hash) gives the flow's slot,
flow_mark_egress (array, mapped into the agent's memory) the mark in that slot. The agent hands
out the slots: ``SlotPool`` is the free list, ``SlotTable`` the flow <-> slot record the datapath
(leveller.agent.datapath.Datapath) keeps next to the kernel's maps. Pure: numpy, no I/O.

Free slots are reused first freed, first reused (FIFO): a slot a flow just left is handed out again
only after every slot that was free before it, and the datapath has twice as many slots as marked
flows, so a freed slot waits for at least max_marked_flows other new flows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np

from leveller.agent.flow_structs import KEY_DTYPE
from leveller.model.flow import FlowKey


class SlotsExhausted(Exception):
    """More slots were asked for than are free."""


class SlotPool:
    """The free slots of ``capacity`` (0..capacity-1), in a ring: ``take`` hands out the oldest free
    ones, ``give`` puts slots back behind every slot already free. ``taken[s]``: slot s is out."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: a pool holds at least one slot")
        self.capacity = capacity
        self._ring = np.arange(capacity, dtype=np.int64)
        self._head = 0  # the ring's oldest free slot; the free ones are _ring[_head:_head + free] (mod)
        self.free = capacity
        self.taken = np.zeros(capacity, dtype=bool)

    def take(self, n: int) -> np.ndarray:
        """The ``n`` oldest free slots (int64); SlotsExhausted, nothing taken, if fewer are free."""
        if n < 0 or n > self.free:
            raise SlotsExhausted(f"{n} slots wanted, {self.free} of {self.capacity} free")
        out = self._ring[np.arange(self._head, self._head + n) % self.capacity]
        self._head = (self._head + n) % self.capacity
        self.free -= n
        self.taken[out] = True
        return out

    def give(self, slots: np.ndarray) -> None:
        """Put taken slots back (after every free one); ValueError, nothing changed, for a slot out of
        range, not taken, or given twice."""
        slots = np.asarray(slots, dtype=np.int64)
        n = len(slots)
        if not n:
            return
        if slots.ndim != 1 or slots.min() < 0 or slots.max() >= self.capacity or not self.taken[slots].all() \
                or np.unique(slots).size != n:
            raise ValueError("a slot given back is out of range, not taken, or given twice")
        tail = self._head + self.free
        self._ring[np.arange(tail, tail + n) % self.capacity] = slots
        self.free += n
        self.taken[slots] = False


class SlotTable:
    """Which flow holds which slot: ``slot_of`` (flow -> slot), ``key_at`` (slot -> flow), and per slot
    the struct flow_key record of its flow (``records``, what a delete batch needs) and whether one
    holds it (``bound``). ``version`` changes whenever a flow gets or loses a slot, so a caller may keep the
    slots it looked up while the version stays."""

    def __init__(self, capacity: int) -> None:
        self.pool = SlotPool(capacity)
        self.capacity = capacity
        self.slot_of: dict[FlowKey, int] = {}
        self.key_at: dict[int, FlowKey] = {}
        self.records = np.zeros(capacity, dtype=KEY_DTYPE)
        self.bound = np.zeros(capacity, dtype=bool)
        self.version = 0

    def __len__(self) -> int:
        return len(self.slot_of)

    def lookup(self, keys: Iterable[FlowKey], count: int) -> np.ndarray:
        """The slot of each of ``count`` keys (int64), -1 for a flow without one."""
        return np.fromiter(map(self.slot_of.get, keys, repeat(-1)), dtype=np.int64, count=count)

    def check_new(self, keys: Sequence[FlowKey]) -> None:
        """ValueError unless these flows are distinct and hold no slot (what ``bind`` takes)."""
        if keys and (len(set(keys)) != len(keys) or not self.slot_of.keys().isdisjoint(keys)):
            raise ValueError("a new flow is named twice or already holds a slot")

    def bind(self, keys: Sequence[FlowKey], records: np.ndarray, slots: np.ndarray) -> None:
        """Record that these flows (struct flow_key ``records``) now hold these taken, free-of-flows slots;
        the flows must pass ``check_new`` (the caller checked it before writing the kernel's maps)."""
        if len(keys) != len(records) or len(keys) != len(slots):
            raise ValueError("bind: keys, records and slots differ in length")
        if not len(slots):
            return
        if not self.pool.taken[slots].all() or self.bound[slots].any():
            raise ValueError("bind: a slot is not taken or already held")
        slot_list = slots.tolist()
        self.slot_of.update(zip(keys, slot_list))
        self.key_at.update(zip(slot_list, keys))
        self.records[slots] = records
        self.bound[slots] = True
        self.version += 1

    def release(self, slots: np.ndarray) -> None:
        """Forget the flows holding these slots and give the slots back to the pool."""
        if not len(slots):
            return
        if not self.bound[slots].all() or np.unique(slots).size != len(slots):
            raise ValueError("release: a slot is held by no flow, or named twice")
        for slot in slots.tolist():
            del self.slot_of[self.key_at.pop(slot)]
        self.bound[slots] = False
        self.pool.give(slots)
        self.version += 1
