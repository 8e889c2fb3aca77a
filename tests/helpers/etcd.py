"""An in-memory etcd for the controllers behind an election (leveller.controller.ha) on fake clocks, one
that loses requests or answers where a test says, and a pair of controllers on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from leveller.controller.ha import HaController
from leveller.controller.hastate import Holder, Op
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.rpc.replay import ReplayGuard


class FakeEtcd:
    """etcd as the controllers see it: keys with create and mod revisions, leases that expire on a fake
    monotonic clock, and an outage switch."""

    def __init__(self, now: list[float]) -> None:
        self.now, self.rev, self.down = now, 1, False
        self.kv: dict[str, tuple[bytes, int, int, int]] = {}  # key -> (value, create rev, mod rev, lease)
        self.leases: dict[int, tuple[float, int]] = {}  # id -> (expires at, ttl)
        self._ids = 100

    def _tick(self) -> None:
        if self.down:
            raise ConnectionError("etcd down")
        for lease, (until, _) in list(self.leases.items()):
            if self.now[0] >= until:
                self._drop(lease)

    def _drop(self, lease: int) -> None:
        del self.leases[lease]
        for k in [k for k, v in self.kv.items() if v[3] == lease]:
            del self.kv[k]
            self.rev += 1

    def _holder(self, key: str) -> Holder | None:
        if key not in self.kv:
            return None
        return Holder(*self.kv[key])

    def _put(self, key: str, value: bytes, lease: int) -> None:
        self.rev += 1
        created = self.kv[key][1] if key in self.kv else self.rev
        self.kv[key] = (value, created, self.rev, lease)

    def grant(self, ttl_s: int) -> tuple[int, int]:
        self._tick()
        self._ids += 1
        self.leases[self._ids] = (self.now[0] + ttl_s, ttl_s)
        return self._ids, ttl_s

    def keepalive(self, lease: int) -> int:
        self._tick()
        if lease not in self.leases:
            return -1
        ttl = self.leases[lease][1]
        self.leases[lease] = (self.now[0] + ttl, ttl)
        return ttl

    def revoke(self, lease: int) -> None:
        self._tick()
        if lease in self.leases:
            self._drop(lease)

    def campaign(self, key: str, value: bytes, lease: int) -> tuple[bool, Holder | None]:
        self._tick()
        if key in self.kv:
            return False, self._holder(key)
        self._put(key, value, lease)
        return True, self._holder(key)

    def holder(self, key: str) -> Holder | None:
        self._tick()
        return self._holder(key)

    def mark(self, key: str, created: int, value: bytes, lease: int) -> bool:
        self._tick()
        if key not in self.kv or self.kv[key][1] != created or self.kv[key][3] != lease:
            return False
        self._put(key, value, lease)
        return True

    def depose(self, key: str, created: int, modified: int, value: bytes, lease: int) -> bool:
        self._tick()
        if key not in self.kv or self.kv[key][1:3] != (created, modified):
            return False
        self._put(key, value, lease)
        return True

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        self._tick()
        return {k: v[0] for k, v in self.kv.items() if k.startswith(prefix)}

    def put(self, key: str, value: bytes, lease: int | None = None) -> None:
        self._tick()
        self._put(key, value, lease or 0)

    def guarded_write(self, guard_key: str, epoch: int, ops: Sequence[Op]) -> bool:
        self._tick()
        if guard_key not in self.kv or self.kv[guard_key][1] != epoch:
            return False
        for op in ops:
            if op.value is None:
                self.kv.pop(op.key, None)
            else:
                self._put(op.key, op.value, 0)
        return True


OPS = ("grant", "keepalive", "revoke", "campaign", "holder", "mark", "depose", "get_prefix", "put", "guarded_write")
MODES = ("lost", "answer", "retried")  # the request lost; applied, its answer lost; applied twice (a retry)


class FaultyEtcd:
    """A FakeEtcd whose n-th call (counted over every caller) fails as ``faults[n]`` says: ``lost`` (never
    reaches etcd), ``answer`` (applied, the answer lost: the caller sees an error) or ``retried`` (applied,
    the answer lost, and the call sent again, as EtcdStore does to the next member: the caller gets the
    second answer). ``calls`` lists (op, caller's clock) of every call; ``down_until`` fails every call
    before that time."""

    def __init__(self, etcd: FakeEtcd, faults: dict[int, str] | None = None) -> None:
        self.etcd, self.faults = etcd, dict(faults or {})
        self.calls: list[tuple[str, float]] = []
        self.down_until = -1.0

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op not in OPS:
            raise AttributeError(op)
        real = getattr(self.etcd, op)

        def call(*args: Any) -> Any:
            n = len(self.calls)
            self.calls.append((op, self.etcd.now[0]))
            mode = self.faults.get(n)
            if mode == "lost" or self.etcd.now[0] < self.down_until:
                raise ConnectionError(f"etcd {op}: no answer (call {n})")
            out = real(*args)
            if mode == "answer":
                raise ConnectionError(f"etcd {op}: answer lost (call {n})")
            if mode == "retried":
                out = real(*args)
            return out
        return call


def pair(ttl: int = 2, store: Callable[[FakeEtcd], Any] | None = None
         ) -> tuple[FakeEtcd, list[float], list[float], list[HaController], list[ReplayGuard]]:
    """etcd, its monotonic and wall clocks, controllers a and b on it (through ``store(etcd)`` if given:
    a FaultyEtcd), their replay memories."""
    mono, wall = [0.0], [1000.0]
    etcd = FakeEtcd(mono)
    served = etcd if store is None else store(etcd)
    has, guards = [], []
    for name in ("a", "b"):
        ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=2 * ttl,
                         monotonic=lambda: mono[0])
        guard = ReplayGuard()
        has.append(HaController(ctl, served, name, f"{name}:50051", ttl, replay=guard, clock=lambda: wall[0],
                                monotonic=lambda: mono[0]))
        guards.append(guard)
    return etcd, mono, wall, has, guards


