"""The controller state kept in etcd, and its key layout (pure: encoding, decoding, batching).

Every key lives under one prefix (``--etcd-prefix``, default ``/leveller/``)::

    <prefix>leader                 {"name", "address"}    the election key, on the leader's lease;
                                                          its create revision is the leader epoch
    <prefix>members/<name>         {"name", "address", "since"}    one per running controller, on its
                                                          own lease (gone within a TTL of its death)
    <prefix>state/jobs/<job>       {"ideal", "in_use", "work_base", "iter_base", "first_seen"}
                                   the job's profiled ideal time (null: never profiled here) and the
                                   progress accounting of leveller.controller.registry (ideal-seconds)
    <prefix>state/weights          {"<job>": weight}      the operator weights (--job-weight) in force
    <prefix>state/cassini          {"plan", "anchor", "shifts", "periods"}  the CASSINI plan (anchor as
                                                          a unix time)
    <prefix>state/replay/<host>    {"run", "seq", "sent_at"}   the newest report accepted from the host

Only the leader writes ``state/``, in transactions guarded by its election key (``create_revision``
of ``<prefix>leader`` equal to its epoch: a deposed leader's write fails and writes nothing), each
holding at most MAX_TXN_OPS operations (etcd's default ``--max-txn-ops`` is 128) and MAX_TXN_BYTES
(etcd's default request limit is 1.5 MiB), only for keys whose value changed, and at most
MAX_OPS_PER_WRITE operations per step (the rest follows at the next step). A record is at most
MAX_VALUE_BYTES. Names (jobs, hosts, members) are the wire's names (1-64 of ``A-Z a-z 0-9 _ . : -``),
so they are key segments as they are. A new leader reads ``state/`` once, before its first decision.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leveller.model.limits import NAME_PATTERN

DEFAULT_PREFIX = "/leveller/"
MAX_TXN_OPS = 120
MAX_TXN_BYTES = 512 * 1024
MAX_OPS_PER_WRITE = 4096
MAX_VALUE_BYTES = 64 * 1024  # the CASSINI plan of many jobs; a job or replay record is ~150 bytes
MAX_JOBS = 100_000
MAX_HOSTS = 100_000


class StateError(ValueError):
    """A stored record that cannot be read: names the key, the value and what is allowed."""


def check_prefix(prefix: str) -> str:
    """``prefix`` if it is a usable key prefix: starts and ends with '/', printable ASCII, <= 128 chars."""
    ok = 2 <= len(prefix) <= 128 and prefix.startswith("/") and prefix.endswith("/") and prefix.isascii() \
        and prefix.isprintable() and " " not in prefix
    if not ok:
        raise ValueError(f"--etcd-prefix {prefix!r}: a key prefix like /leveller/ (starts and ends with '/', "
                         "printable ASCII without spaces, at most 128 characters)")
    return prefix


@dataclass(frozen=True)
class Layout:
    """The keys under one prefix."""

    prefix: str = DEFAULT_PREFIX

    @property
    def leader(self) -> str:
        return self.prefix + "leader"

    @property
    def members(self) -> str:
        return self.prefix + "members/"

    @property
    def state(self) -> str:
        return self.prefix + "state/"

    def member(self, name: str) -> str:
        return self.members + name

    def job(self, name: str) -> str:
        return self.state + "jobs/" + name

    def replay(self, host: str) -> str:
        return self.state + "replay/" + host

    @property
    def weights(self) -> str:
        return self.state + "weights"

    @property
    def cassini(self) -> str:
        return self.state + "cassini"


@dataclass(frozen=True)
class JobRecord:
    """What a new leader needs of a job not to profile it again and to keep its R where it was."""

    ideal: float | None  # profiled here (None: never; an agent may report one)
    in_use: float | None = None  # the ideal time progress is valued at
    work_base: float = 0.0
    iter_base: int = 0
    first_seen: float = 0.0  # unix time


@dataclass(frozen=True)
class ReplayMark:
    run: str
    seq: int
    sent_at: float


@dataclass(frozen=True)
class PlanRecord:
    plan: int
    anchor: float  # unix time
    shifts: dict[str, float]
    periods: dict[str, float]


@dataclass
class HaState:
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    replay: dict[str, ReplayMark] = field(default_factory=dict)
    plan: PlanRecord | None = None


def _dump(value: Mapping[str, Any], key: str) -> bytes:
    out = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    if len(out) > MAX_VALUE_BYTES:
        raise StateError(f"{key}: {len(out)} bytes; a record is at most {MAX_VALUE_BYTES} bytes")
    return out


def encode(state: HaState, layout: Layout) -> dict[str, bytes]:
    """Every key of ``state`` with its value (the whole ``state/`` subtree)."""
    if len(state.jobs) > MAX_JOBS or len(state.replay) > MAX_HOSTS:
        raise StateError(f"{layout.state}: {len(state.jobs)} jobs, {len(state.replay)} hosts; at most "
                         f"{MAX_JOBS} and {MAX_HOSTS}")
    out: dict[str, bytes] = {}
    for name, j in state.jobs.items():
        key = layout.job(_name(name, layout.job(name)))
        out[key] = _dump({"ideal": j.ideal, "in_use": j.in_use, "work_base": j.work_base, "iter_base": j.iter_base,
                          "first_seen": j.first_seen}, key)
    for host, m in state.replay.items():
        key = layout.replay(_name(host, layout.replay(host)))
        out[key] = _dump({"run": m.run, "seq": m.seq, "sent_at": m.sent_at}, key)
    if state.weights:
        out[layout.weights] = _dump(dict(state.weights), layout.weights)
    if state.plan is not None:
        p = state.plan
        out[layout.cassini] = _dump({"plan": p.plan, "anchor": p.anchor, "shifts": p.shifts, "periods": p.periods},
                                    layout.cassini)
    return out


def _name(name: str, key: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise StateError(f"{key}: {name!r} is not a name (1-64 of A-Z a-z 0-9 _ . : -)")
    return name


def _num(value: Any, key: str, what: str, lo: float = 0.0, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < lo:
        raise StateError(f"{key}: {what} = {value!r}; expected a finite number >= {lo:g}"
                         + (" or null" if optional else ""))
    return value


def _int(value: Any, key: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise StateError(f"{key}: {what} = {value!r}; expected an integer 0..2^63-1")
    return value


def _record(key: str, raw: bytes, fields: Iterable[str]) -> dict[str, Any]:
    if len(raw) > MAX_VALUE_BYTES:
        raise StateError(f"{key}: {len(raw)} bytes; a record is at most {MAX_VALUE_BYTES} bytes")
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise StateError(f"{key}: not JSON ({exc})") from None
    want = set(fields)
    if not isinstance(value, dict) or set(value) != want:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise StateError(f"{key}: fields {got}; expected exactly {sorted(want)}")
    return value


def _floats(value: Any, key: str, what: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise StateError(f"{key}: {what} = {value!r}; expected an object of name -> number")
    return {_name(k, key): float(_num(v, key, f"{what}[{k!r}]")) for k, v in value.items()}


def decode(pairs: Mapping[str, bytes], layout: Layout) -> HaState:
    """The state in ``pairs`` (keys under ``layout.state``); StateError naming the first bad key. Keys of
    a later layout (unknown names under ``state/``) are ignored, so an older controller can read them."""
    state = HaState()
    jobs, replay = layout.state + "jobs/", layout.state + "replay/"
    for key in sorted(pairs):
        raw = pairs[key]
        if key.startswith(jobs):
            name = _name(key[len(jobs):], key)
            v = _record(key, raw, ("ideal", "in_use", "work_base", "iter_base", "first_seen"))
            ideal = _num(v["ideal"], key, "ideal", optional=True)
            in_use = _num(v["in_use"], key, "in_use", optional=True)
            state.jobs[name] = JobRecord(
                None if ideal is None else float(ideal), None if in_use is None else float(in_use),
                float(_num(v["work_base"], key, "work_base")), _int(v["iter_base"], key, "iter_base"),
                float(_num(v["first_seen"], key, "first_seen")))
        elif key.startswith(replay):
            host = _name(key[len(replay):], key)
            v = _record(key, raw, ("run", "seq", "sent_at"))
            if not isinstance(v["run"], str) or not 0 < len(v["run"]) <= 64:
                raise StateError(f"{key}: run = {v['run']!r}; expected the agent's run id (1-64 characters)")
            state.replay[host] = ReplayMark(
                v["run"], _int(v["seq"], key, "seq"), float(_num(v["sent_at"], key, "sent_at")))
        elif key == layout.weights:
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise StateError(f"{key}: not JSON ({exc})") from None
            state.weights = {k: w for k, w in _floats(value, key, "weight").items() if w > 0}
        elif key == layout.cassini:
            v = _record(key, raw, ("plan", "anchor", "shifts", "periods"))
            state.plan = PlanRecord(_int(v["plan"], key, "plan"), float(_num(v["anchor"], key, "anchor")),
                                    _floats(v["shifts"], key, "shifts"), _floats(v["periods"], key, "periods"))
        if len(state.jobs) > MAX_JOBS or len(state.replay) > MAX_HOSTS:
            raise StateError(f"{layout.state}: more than {MAX_JOBS} jobs or {MAX_HOSTS} hosts stored")
    return state


@dataclass(frozen=True)
class Op:
    """One write: a put (``value`` bytes) or a delete (``value`` None)."""

    key: str
    value: bytes | None


def changes(stored: Mapping[str, bytes], wanted: Mapping[str, bytes],
            limit: int = MAX_OPS_PER_WRITE) -> list[Op]:
    """The writes that turn ``stored`` into ``wanted``: puts of new or changed values, deletes of keys
    gone; at most ``limit`` of them (keys in sorted order; the rest waits for the next write)."""
    ops = [Op(k, v) for k, v in sorted(wanted.items()) if stored.get(k) != v]
    ops += [Op(k, None) for k in sorted(stored) if k not in wanted]
    return ops[:limit]


def batches(ops: Iterable[Op], max_ops: int = MAX_TXN_OPS, max_bytes: int = MAX_TXN_BYTES) -> list[list[Op]]:
    """``ops`` cut into transactions of at most ``max_ops`` operations and ``max_bytes`` of keys and values."""
    if max_ops < 1 or max_bytes < MAX_VALUE_BYTES + 256:
        raise ValueError(f"max_ops must be >= 1 and max_bytes >= {MAX_VALUE_BYTES + 256}, got {max_ops}, {max_bytes}")
    out: list[list[Op]] = []
    size = 0
    for op in ops:
        n = len(op.key) + (len(op.value) if op.value is not None else 0)
        if not out or len(out[-1]) >= max_ops or size + n > max_bytes:
            out.append([])
            size = 0
        out[-1].append(op)
        size += n
    return out


def member_record(name: str, address: str, since: float) -> bytes:
    return _dump({"name": name, "address": address, "since": since}, "members/" + name)


def leader_record(name: str, address: str) -> bytes:
    return _dump({"name": name, "address": address}, "leader")


def read_address(raw: bytes, key: str) -> tuple[str, str]:
    """(name, address) of a leader or member record."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise StateError(f"{key}: not JSON ({exc})") from None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) \
            or not isinstance(value.get("address"), str):
        raise StateError(f"{key}: {raw[:100]!r}; expected {{\"name\": str, \"address\": str, ...}}")
    return value["name"], value["address"]
