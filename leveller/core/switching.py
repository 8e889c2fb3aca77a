"""When the order of jobs may change: hysteresis (delta) and dwell (D) on top of a policy's order.

PURE. Lowest-R-first ranks jobs whose R the policy has levelled, so their R are nearly equal and
noise decides the order at every tau: the top job changes about once per iteration. On a
lossless RDMA class that costs nothing; a TCP flow demoted by strict priority mid-transfer loses
its ACK clock and waits for a retransmission timeout. A :class:`SwitchRule` makes the order sticky:

- **hysteresis** ``delta``: a job moves ahead of a job it was behind only when its ranking key
  (R, or R / weight) is lower by more than ``delta``;
- **dwell** ``dwell`` (seconds): a job that moved ahead of another at ``t`` cannot be passed before
  ``t + dwell``, so the top of a contention group changes at most once per ``dwell``.

Bound (in the spirit of the paper's Corollary 1): the lowest-R job is kept below a job ahead of it
only while its R is within ``delta`` of that job's, or for at most ``dwell`` after that job moved
up; so it loses at most about ``delta`` of R plus ``(tau + dwell) / (t - t0)``:
``min_j R_j(t) >= R*/2 - delta - (tau + dwell) / (t - max_i t0_i)``. With ``delta = dwell = 0``
(:data:`PAPER`) the policy's order passes through unchanged: the paper's rule.

The rule sorts by neighbour swaps from the previous order (insertion sort: O(n) when little
changes, O(n^2) at worst), so every job that ends up ahead of one it was behind passed it
directly, under the condition. Jobs without a key (being profiled: the policy pins them first)
keep the policy's place; jobs new since the last order enter where the policy puts them. The
memory may hold more jobs than one call orders: the network simulator orders one contention
group at a time against one memory, and the memory keeps every job's place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from leveller.core.policies import JobView, weighted_rate


@dataclass(frozen=True)
class SwitchRule:
    """Hysteresis ``delta`` (in R) and dwell ``dwell`` (seconds) of the order; both 0: the paper."""

    delta: float = 0.0
    dwell: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("delta", self.delta), ("dwell", self.dwell)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"switching {name} = {value!r} is invalid; a finite number >= 0")

    @property
    def is_paper(self) -> bool:
        return self.delta == 0 and self.dwell == 0


PAPER = SwitchRule()
# the live controller's default, chosen by measurement on Figure 9 live (docs/switching.md)
DEFAULT = SwitchRule(delta=0.02, dwell=2.0)


@dataclass(frozen=True)
class SwitchMemory:
    """What the rule remembers between decisions: the last order (every job ever ordered, by its last
    place) and when each job last moved ahead of another."""

    order: tuple[str, ...] = ()
    promoted: Mapping[str, float] = field(default_factory=dict)


def applies_to(policy: object) -> bool:
    """Whether the rule changes ``policy``'s orders: only a policy that orders by R (``by_rate``, the
    leveller policy) has levelled jobs; Crux's static order and no priority pass through."""
    return bool(getattr(policy, "by_rate", False))


def switch_order(order: Sequence[str] | None, views: Sequence[JobView], memory: SwitchMemory, now: float,
                 rule: SwitchRule) -> tuple[list[str] | None, SwitchMemory]:
    """The order to apply at ``now`` and the memory after it, from an R-ordering policy's ``order`` of
    the jobs ``views`` (their R and weights; callers check :func:`applies_to`). ``None`` (no priority)
    passes through and leaves the memory as it is; under :data:`PAPER` the policy's order is applied
    as it is."""
    if order is None:
        return None, memory
    if rule.is_paper:
        return list(order), SwitchMemory(_merged(memory.order, order), memory.promoted)
    keys = {v.name: (None if v.profiling or v.rate is None else float(weighted_rate(v))) for v in views}
    policy_pos = {name: i for i, name in enumerate(order)}
    pinned = [name for name in order if keys.get(name) is None]
    free = [name for name in order if keys.get(name) is not None]
    seq = [name for name in memory.order if name in policy_pos and keys.get(name) is not None]
    known = set(seq)
    for name in free:  # new jobs enter where the policy puts them
        if name not in known:
            at = next((i for i, other in enumerate(seq) if policy_pos[other] > policy_pos[name]), len(seq))
            seq.insert(at, name)
    promoted = dict(memory.promoted)
    for i in range(1, len(seq)):
        j = i
        while j > 0 and _passes(seq[j], seq[j - 1], keys, promoted, now, rule):
            seq[j - 1], seq[j] = seq[j], seq[j - 1]
            promoted[seq[j - 1]] = now
            j -= 1
    out = pinned + seq
    return out, SwitchMemory(_merged(memory.order, out), promoted)


def _passes(behind: str, ahead: str, keys: Mapping[str, float | None], promoted: Mapping[str, float],
            now: float, rule: SwitchRule) -> bool:
    kb, ka = keys[behind], keys[ahead]
    assert kb is not None and ka is not None
    if not kb < ka - rule.delta:
        return False
    since = promoted.get(ahead)
    return since is None or now - since >= rule.dwell


def _merged(memory: Sequence[str], order: Sequence[str]) -> tuple[str, ...]:
    """``memory`` with the places of ``order``'s jobs rewritten in ``order``'s order (they keep the
    slots they held), and jobs new to it appended."""
    wanted, seen = set(order), set(memory)
    slots = [i for i, name in enumerate(memory) if name in wanted]
    merged = list(memory)
    for slot, name in zip(slots, [name for name in order if name in seen]):
        merged[slot] = name
    merged += [name for name in order if name not in seen]
    return tuple(merged)


def forget(memory: SwitchMemory, alive: Sequence[str] | set[str], now: float, rule: SwitchRule) -> SwitchMemory:
    """``memory`` without the jobs not in ``alive`` (finished or gone) and without promotions older than
    the dwell (they protect nobody any more): what a long-running caller keeps."""
    keep = set(alive)
    return SwitchMemory(tuple(name for name in memory.order if name in keep),
                        {name: t for name, t in memory.promoted.items()
                         if name in keep and now - t < rule.dwell})


def top_changed(before: Sequence[str] | None, after: Sequence[str] | None) -> bool:
    """A re-ranking of the same jobs that changed the first one (the count `top_job_changes` sums)."""
    return bool(before) and bool(after) and set(before or ()) == set(after or ()) \
        and (before or ())[0] != (after or ())[0]
