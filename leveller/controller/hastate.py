"""The controller state kept in etcd, and its key layout (pure: encoding, decoding, batching).

Every key lives under one prefix (``--etcd-prefix``, default ``/leveller/``)::

    <prefix>leader                 {"name", "address", "v", "leading"}    the election key, on the
                                                          leader's lease; its create revision is the
                                                          leader epoch. "leading" turns true once the
                                                          holder has read the state and decides; "v": 2
                                                          (absent from older controllers' records)
    <prefix>members/<name>         {"name", "address", "since"}    one per running controller, on its
                                                          own lease (gone within a TTL of its death)
    <prefix>state/jobs/<job>       {"ideal", "in_use", "work_base", "iter_base", "first_seen"}
                                   the job's profiled ideal time (null: never profiled here) and the
                                   progress accounting of leveller.controller.registry (ideal-seconds)
    <prefix>state/weights          {"<job>": weight}      the operator weights (--job-weight) in force
    <prefix>state/weights/<NNNN>   {"weights": {"<job>": weight}}   the same, in parts, when they do not
                                                          fit one record (about 800 jobs and more)
    <prefix>state/cassini          {"plan", "anchor", "shifts", "periods"}  the CASSINI plan (anchor as
                                                          a unix time)
    <prefix>state/cassini/<NNNN>   {"plan", "anchor", "part", "parts", "shifts", "periods"}   the same
                                                          plan in parts when it does not fit one record
                                                          (about 450 jobs and more): used only whole
    <prefix>state/replay/<host>    {"run", "seq", "sent_at"}   the newest report accepted from the host

Only the leader writes ``state/``, in transactions guarded by its election key (``create_revision``
of ``<prefix>leader`` equal to its epoch: a deposed leader's write fails and writes nothing), each
holding at most MAX_TXN_OPS operations (etcd's default ``--max-txn-ops`` is 128) and MAX_TXN_BYTES
(etcd's default request limit is 1.5 MiB), only for keys whose value changed, and at most
MAX_OPS_PER_WRITE operations per step (the rest follows at the next step). A record is at most
MAX_VALUE_BYTES: weights and plans that do not fit one record are cut into parts (an older controller
reads none of them, as it read nothing when they did not fit), and whatever still cannot be written (more
than MAX_JOBS jobs or MAX_HOSTS hosts) is left out and named, never the whole state refused. A value read
back that is not a record of this layout (corrupt, hostile: a 400-digit number, brackets nested thousands
deep) is refused with StateError naming its key, nothing else. Names (jobs, hosts, members) are the
wire's names (1-64 of ``A-Z a-z 0-9 _ . : -``), so they are key segments as they are. A new leader reads
``state/`` once, before its first decision.
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

    def weights_part(self, i: int) -> str:
        return f"{self.weights}/{i:04d}"

    def cassini_part(self, i: int) -> str:
        return f"{self.cassini}/{i:04d}"


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


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _dump(value: Mapping[str, Any], key: str) -> bytes:
    out = _dumps(value)
    if len(out) > MAX_VALUE_BYTES:
        raise StateError(f"{key}: {len(out)} bytes; a record is at most {MAX_VALUE_BYTES} bytes")
    return out


PART_SPARE = 256  # bytes of a part's record kept for its fields besides the entries


def _cut(sizes: Mapping[str, int]) -> list[list[str]]:
    """The names of ``sizes`` (sorted) in runs whose entries' JSON (``sizes[name]`` bytes each) fits a
    record with PART_SPARE bytes to spare; the same entries always give the same runs (no rewrite)."""
    runs: list[list[str]] = [[]]
    size = 0
    for name in sorted(sizes):
        n = sizes[name]
        if runs[-1] and size + n > MAX_VALUE_BYTES - PART_SPARE:
            runs.append([])
            size = 0
        runs[-1].append(name)
        size += n
    return runs


def _entry(name: str, value: float) -> int:
    """Bytes of ``"name":value,`` in a record (``{"name":value}`` is one more)."""
    return len(_dumps({name: value}))


def _weights(weights: Mapping[str, float], layout: Layout) -> dict[str, bytes]:
    one = _dumps(dict(weights))
    if len(one) <= MAX_VALUE_BYTES:
        return {layout.weights: one}
    return {layout.weights_part(i): _dump({"weights": {k: weights[k] for k in run}}, layout.weights_part(i))
            for i, run in enumerate(_cut({k: _entry(k, w) for k, w in weights.items()}))}


def _plan(p: PlanRecord, layout: Layout) -> dict[str, bytes]:
    one = _dumps({"plan": p.plan, "anchor": p.anchor, "shifts": p.shifts, "periods": p.periods})
    if len(one) <= MAX_VALUE_BYTES:
        return {layout.cassini: one}
    sizes = {k: _entry(k, v) for k, v in p.shifts.items()}
    for k, v in p.periods.items():
        sizes[k] = sizes.get(k, 0) + _entry(k, v)
    runs = _cut(sizes)
    return {layout.cassini_part(i): _dump({"plan": p.plan, "anchor": p.anchor, "part": i, "parts": len(runs),
                                           "shifts": {k: p.shifts[k] for k in run if k in p.shifts},
                                           "periods": {k: p.periods[k] for k in run if k in p.periods}},
                                          layout.cassini_part(i))
            for i, run in enumerate(runs)}


def encode(state: HaState, layout: Layout, left_out: list[str] | None = None) -> dict[str, bytes]:
    """Every key of ``state`` with its value (the whole ``state/`` subtree). What cannot be written (a
    bad name; the jobs past MAX_JOBS, the hosts past MAX_HOSTS) is left out and described in ``left_out``
    (without that list: StateError)."""
    left: list[str] = []
    out: dict[str, bytes] = {}
    for what, records, most in (("jobs", state.jobs, MAX_JOBS), ("hosts", state.replay, MAX_HOSTS)):
        if len(records) > most:
            left.append(f"{layout.state}: {len(records) - most} of {len(records)} {what} left out (at most {most})")
    for name, j in list(state.jobs.items())[:MAX_JOBS]:
        key = layout.job(name)
        if _named(name, key, left):
            out[key] = _dump({"ideal": j.ideal, "in_use": j.in_use, "work_base": j.work_base,
                              "iter_base": j.iter_base, "first_seen": j.first_seen}, key)
    for host, m in list(state.replay.items())[:MAX_HOSTS]:
        key = layout.replay(host)
        if _named(host, key, left):
            out[key] = _dump({"run": m.run, "seq": m.seq, "sent_at": m.sent_at}, key)
    weights = {k: w for k, w in state.weights.items() if _named(k, layout.weights, left)}
    if weights:
        out.update(_weights(weights, layout))
    if state.plan is not None:
        p = state.plan
        names = set(p.shifts) | set(p.periods)
        if all(_named(k, layout.cassini, left) for k in sorted(names)):
            out.update(_plan(p, layout))
    if left and left_out is None:
        raise StateError("; ".join(left))
    if left_out is not None:
        left_out.extend(left)
    return out


def _named(name: str, key: str, left: list[str]) -> bool:
    """True if ``name`` is a name; else False, with why in ``left``."""
    try:
        _name(name, key)
    except StateError as exc:
        left.append(str(exc))
        return False
    return True


def _name(name: str, key: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise StateError(f"{key}: {name!r} is not a name (1-64 of A-Z a-z 0-9 _ . : -)")
    return name


def _shown(value: Any) -> str:
    """``value`` for a message: at most 80 characters (a stored value may be anything)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 96:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _num(value: Any, key: str, what: str, lo: float = 0.0, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)  # an int of 400 digits: OverflowError
        except OverflowError:
            number = None
    if number is None or not math.isfinite(number) or number < lo:
        raise StateError(f"{key}: {what} = {_shown(value)}; expected a finite number >= {lo:g}"
                         + (" or null" if optional else ""))
    return number


def _float(value: Any, key: str, what: str, lo: float = 0.0) -> float:
    number = _num(value, key, what, lo)
    assert number is not None
    return number


def _int(value: Any, key: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise StateError(f"{key}: {what} = {_shown(value)}; expected an integer 0..2^63-1")
    return value


def _loads(raw: bytes, key: str) -> Any:
    """JSON of a stored value; StateError for anything that is not (bad UTF-8 or syntax, a number of over
    4,300 digits, nesting deeper than the parser's recursion limit)."""
    if len(raw) > MAX_VALUE_BYTES:
        raise StateError(f"{key}: {len(raw)} bytes; a record is at most {MAX_VALUE_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
        raise StateError(f"{key}: not JSON ({type(exc).__name__}: {str(exc)[:100]})") from None


def _record(key: str, raw: bytes, fields: Iterable[str]) -> dict[str, Any]:
    value = _loads(raw, key)
    want = set(fields)
    if not isinstance(value, dict) or set(value) != want:
        got = _shown(sorted(value)) if isinstance(value, dict) else type(value).__name__
        raise StateError(f"{key}: fields {got}; expected exactly {sorted(want)}")
    return value


def _floats(value: Any, key: str, what: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise StateError(f"{key}: {what} = {_shown(value)}; expected an object of name -> number")
    return {_name(k, key): _float(v, key, f"{what}[{k!r}]") for k, v in value.items()}


def decode(pairs: Mapping[str, bytes], layout: Layout, errors: list[str] | None = None) -> HaState:
    """The state in ``pairs`` (keys under ``layout.state``). A bad record raises StateError naming its key;
    with ``errors``, it is left out and described there instead, and the rest is read. Keys of a later
    layout (unknown names under ``state/``) are ignored, so an older controller can read them."""
    state = HaState()
    parts: dict[int, tuple[int, float, int, dict[str, float], dict[str, float]]] = {}
    count = 0
    for key in sorted(pairs):
        try:
            count += _decode_one(key, pairs[key], layout, state, parts)
        except StateError as exc:
            if errors is None:
                raise
            errors.append(str(exc))
        if count > MAX_JOBS + MAX_HOSTS:  # a hostile store: stop reading, keep what was read
            message = f"{layout.state}: more than {MAX_JOBS} jobs and {MAX_HOSTS} hosts stored; the rest not read"
            if errors is None:
                raise StateError(message)
            errors.append(message)
            break
    if parts:
        _join_plan(state, parts, layout, errors)
    return state


def _decode_one(key: str, raw: bytes, layout: Layout, state: HaState,
                parts: dict[int, tuple[int, float, int, dict[str, float], dict[str, float]]]) -> int:
    """Read one record into ``state`` (plan parts into ``parts``); 1 if it was a job or host record."""
    jobs, replay = layout.state + "jobs/", layout.state + "replay/"
    if key.startswith(jobs):
        name = _name(key[len(jobs):], key)
        v = _record(key, raw, ("ideal", "in_use", "work_base", "iter_base", "first_seen"))
        ideal = _num(v["ideal"], key, "ideal", optional=True)
        in_use = _num(v["in_use"], key, "in_use", optional=True)
        state.jobs[name] = JobRecord(ideal, in_use, _float(v["work_base"], key, "work_base"),
                                     _int(v["iter_base"], key, "iter_base"), _float(v["first_seen"], key, "first_seen"))
        return 1
    if key.startswith(replay):
        host = _name(key[len(replay):], key)
        v = _record(key, raw, ("run", "seq", "sent_at"))
        if not isinstance(v["run"], str) or not 0 < len(v["run"]) <= 64:
            raise StateError(f"{key}: run = {str(v['run'])[:80]!r}; expected the agent's run id (1-64 characters)")
        state.replay[host] = ReplayMark(v["run"], _int(v["seq"], key, "seq"), _float(v["sent_at"], key, "sent_at"))
        return 1
    if key == layout.weights:
        weights = _floats(_loads(raw, key), key, "weight")
    elif _part(key, layout.weights) is not None:
        weights = _floats(_record(key, raw, ("weights",))["weights"], key, "weight")
    elif key == layout.cassini:
        v = _record(key, raw, ("plan", "anchor", "shifts", "periods"))
        plan = PlanRecord(_int(v["plan"], key, "plan"), _float(v["anchor"], key, "anchor"),
                          _floats(v["shifts"], key, "shifts"), _floats(v["periods"], key, "periods"))
        if state.plan is None or plan.plan >= state.plan.plan:  # whole plans, also when parts exist
            state.plan = plan
        return 0
    elif (i := _part(key, layout.cassini)) is not None:
        v = _record(key, raw, ("plan", "anchor", "part", "parts", "shifts", "periods"))
        n = _int(v["parts"], key, "parts")
        if v["part"] != i or not 0 <= i < n:
            raise StateError(f"{key}: part = {v['part']!r} of parts = {n}; expected {i} of more than {i}")
        parts[i] = (_int(v["plan"], key, "plan"), _float(v["anchor"], key, "anchor"), n,
                    _floats(v["shifts"], key, "shifts"), _floats(v["periods"], key, "periods"))
        return 0
    else:
        return 0  # a key of a later layout
    state.weights.update({k: w for k, w in weights.items() if w > 0})
    return 0


def _part(key: str, base: str) -> int | None:
    """``i`` if ``key`` is ``base/NNNN`` (four digits); else None."""
    tail = key[len(base) + 1:] if key.startswith(base + "/") else ""
    return int(tail) if len(tail) == 4 and tail.isascii() and tail.isdigit() else None


def _join_plan(state: HaState, parts: Mapping[int, tuple[int, float, int, dict[str, float], dict[str, float]]],
               layout: Layout, errors: list[str] | None) -> None:
    """The plan of ``parts`` if they are every part of one plan (and newer than a whole one read)."""
    plan, anchor, n = parts[min(parts)][:3]
    if set(parts) != set(range(n)) or any(p[:3] != (plan, anchor, n) for p in parts.values()):
        message = (f"{layout.cassini}/: parts {sorted(parts)} of plans {sorted({p[0] for p in parts.values()})} "
                   "are not every part of one plan; no plan read")
        if errors is None:
            raise StateError(message)
        errors.append(message)
        return
    if state.plan is not None and state.plan.plan >= plan:
        return
    shifts: dict[str, float] = {}
    periods: dict[str, float] = {}
    for i in range(n):
        shifts.update(parts[i][3])
        periods.update(parts[i][4])
    state.plan = PlanRecord(plan, anchor, shifts, periods)


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


LEADER_VERSION = 2  # leader records that say whether their holder leads (older ones have no "v")


@dataclass(frozen=True)
class Holder:
    """The election key as etcd has it: its value, create revision (the epoch), last modification and
    lease (0: none)."""

    value: bytes
    created: int
    modified: int
    lease: int


@dataclass(frozen=True)
class LeaderRecord:
    name: str
    address: str
    version: int = 0  # 0: a controller that does not say whether it leads
    leading: bool = False


def leader_record(name: str, address: str, leading: bool = False) -> bytes:
    """The election key's value: the campaign writes it with ``leading`` false, the winner rewrites it
    true once it has taken the state over (a standby deposes a holder that never does,
    leveller.controller.ha)."""
    return _dump({"name": name, "address": address, "v": LEADER_VERSION, "leading": leading}, "leader")


def read_leader(raw: bytes, key: str) -> LeaderRecord:
    """The election key's value; StateError if it is not a leader record."""
    name, address = read_address(raw, key)
    value = _loads(raw, key)
    version, leading = value.get("v", 0), value.get("leading", False)
    if isinstance(version, bool) or not isinstance(version, int) or not isinstance(leading, bool):
        raise StateError(f"{key}: v = {_shown(version)}, leading = {_shown(leading)}; expected an integer "
                         "and true or false")
    return LeaderRecord(name, address, version, leading)


def read_address(raw: bytes, key: str) -> tuple[str, str]:
    """(name, address) of a leader or member record."""
    value = _loads(raw, key)
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) \
            or not isinstance(value.get("address"), str):
        raise StateError(f"{key}: {raw[:100]!r}; expected {{\"name\": str, \"address\": str, ...}}")
    return value["name"], value["address"]
