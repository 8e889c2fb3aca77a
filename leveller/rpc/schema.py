"""Messages between agents and the controller, validated field by field.

Every ``*_from_wire`` function takes the decoded JSON object and either
returns frozen dataclasses or raises SchemaError naming the field (e.g.
``jobs[1].iterations``), the value and what is allowed. Unknown keys are
refused too, so a typo never passes silently.

    Report (agent -> controller, every tau)
      {"v": 1, "host": str, "run": hex str, "seq": int,
       "jobs": [{"job", "iterations", "start_time", "ideal_time"?, "recent"?, "weight"?}],
       "flows": [{"src", "dst", "sport", "dport", "proto", "job", "bytes"}],
       "flows_dscp"?: [[flow index, DSCP, bytes], ...]}
      run/seq: the sending agent process's random id and the report's number in it
      (leveller.rpc.replay: the controller refuses a report that is not newer).
      flows_dscp: per flow of ``flows`` (by index), the bytes its packets left the host with
      each DSCP (eBPF counters, after the rewrite; cumulative like ``bytes``): what the
      controller checks switch queue counters against (leveller.core.enforcement). Its
      name sorts right after ``flows``, so the codec's layout keeps ``flows`` first and
      ReportDecoder's fast path applies to reports that carry it.
    LevelsReply (controller -> agent)
      {"v": 1, "epoch": int, "lease_s": float, "decision_age_s": float, "dscp_by_level": [int],
       "flows": [{flow..., "job", "level"}],
       "shifts"?: [{"job", "plan": int, "start_in_s": float, "period_s": float}]}
      shifts (policy cassini only): job should start an iteration start_in_s seconds after
      the reply left, or a whole number of period_s later; once per plan (leveller.jobs.control).
      leader_epoch (only with `leveller controller --etcd`): the elected leader's epoch; an agent
      applies levels of the newest epoch it has seen only (leveller.agent.fencing).

``decision_age_s`` is how old the decision behind the levels is, by the
controller's own clock, when the reply leaves: an agent keeps levels only
until ``lease_s`` after the decision was made (not after the reply came), so a
controller whose decision loop stalls cannot keep stale levels alive by
answering reports. An age rather than a time stamp needs no synchronised clocks.

This module only converts between the wire and leveller.model: the message
types, limits and field checks live there (the agent applies the same checks
to every log line it reads, so it never builds a report the controller would
refuse). Flow addresses are IPv4 or IPv6 strings, canonical once decoded.
"""

from __future__ import annotations

import json
import operator
import re
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from typing import Any, cast

from leveller.codec import SchemaError, decode, encode, loads
from leveller.model.checks import (
    check_ideal_time,
    check_int,
    check_iterations,
    check_list,
    check_name,
    check_not_future,
    check_number,
    check_object,
    check_time,
    check_weight,
    job_report,
)
from leveller.model.errors import UserError
from leveller.model.flow import PORT_PROTOCOLS, PROTOCOL_NAMES, FlowKey, flow_key
from leveller.model.limits import (
    DSCP_MAX,
    MAX_COUNTER,
    MAX_DSCP_BYTES,
    MAX_FLOWS,
    MAX_JOBS,
    MAX_LEASE_S,
    MAX_LEVELS,
    MAX_MESSAGE_BYTES,
    MAX_RECENT,
    MODES,
    NAME_PATTERN,
)
from leveller.model.messages import FlowLevel, FlowReport, JobReport, JobShift, LevelsReply, Report
from leveller.rpc.replay import MAX_SEQ, RUN_RE

__all__ = [  # the model's types and checks, re-exported for the wire's users
    "FlowLevel", "FlowReport", "JobReport", "JobShift", "LevelsReply", "Report", "check_ideal_time",
    "check_iterations", "check_name", "check_not_future", "check_time", "check_weight", "ReportDecoder",
    "ReplyEncoder", "check_version", "encode_flow_levels", "encode_reply", "job_from_wire", "job_to_wire",
    "reply_from_wire", "reply_to_wire", "report_from_wire", "report_to_wire",
]

VERSION = 1
DSCP_FIELD = "flows_dscp"  # the report's bytes per flow and DSCP (Report.dscp_bytes)
# protocols a flow entry may name: the ones with ports, by name or number (the wire's own spellings)
_PROTOS: dict[Any, int] = {**{PROTOCOL_NAMES[n]: n for n in PORT_PROTOCOLS}, **{n: n for n in PORT_PROTOCOLS}}
_NAME = NAME_PATTERN
_inet_pton, _inet_ntop, _AF6 = socket.inet_pton, socket.inet_ntop, socket.AF_INET6
_json_string = json.encoder.encode_basestring_ascii
FLOW_KEYS = ("src", "dst", "sport", "dport", "proto")
_obj, _list, _int, _num = check_object, check_list, check_int, check_number


def _canonical6(text: str) -> bool:
    """True if ``text`` is an IPv6 address written exactly as the model writes it (ipaddress's text, which
    inet_ntop matches for every address it writes without a dotted quad); OSError / ValueError if it is none."""
    return "." not in text and _inet_ntop(_AF6, _inet_pton(_AF6, text)) == text


def check_version(msg: Mapping[str, Any]) -> None:
    """The message's ``v`` is the version this build speaks."""
    if msg.get("v") != VERSION:
        raise SchemaError("v", f"{msg.get('v')!r} is not a supported version; this build speaks {VERSION}")


_version = check_version


def _flow(value: dict[str, Any], field: str) -> FlowKey:
    proto = value["proto"]
    if type(proto) not in (int, str) or proto not in _PROTOS:  # not True (== 1) nor 6.0 (== 6)
        raise SchemaError(f"{field}.proto", f"{proto!r} is invalid; tcp, udp, 6 or 17")
    for port in ("sport", "dport"):
        _int(value[port], f"{field}.{port}", 0, 65535)
    for addr in ("src", "dst"):
        if not isinstance(value[addr], str):
            raise SchemaError(f"{field}.{addr}", f"{value[addr]!r} is invalid; an IPv4 or IPv6 address string")
    try:
        return flow_key(value["src"], value["dst"], value["sport"], value["dport"], _PROTOS[proto])
    except UserError as exc:
        raise SchemaError(field, str(exc)) from None


# ---- Report ------------------------------------------------------------------------------------

def job_to_wire(j: JobReport) -> dict[str, Any]:
    """One entry of a report's ``jobs`` list."""
    entry: dict[str, Any] = {"job": j.job, "iterations": j.iterations, "start_time": j.start_time,
                             "recent": [[n, t] for n, t in j.recent]}
    if j.ideal_time is not None:
        entry["ideal_time"] = j.ideal_time
    if j.weight is not None:
        entry["weight"] = j.weight
    return entry


def job_from_wire(raw: Any, f: str) -> JobReport:
    """Validate one entry of a report's ``jobs`` list (``f`` is its field path, e.g. ``jobs[2]``)."""
    _obj(raw, f, ("job", "iterations", "start_time"), ("ideal_time", "recent", "weight"))
    recent = _list(raw.get("recent", []), f"{f}.recent", MAX_RECENT)  # a JSON list (the model also takes tuples)
    return job_report(raw["job"], raw["iterations"], raw["start_time"], raw.get("ideal_time"), recent,
                      raw.get("weight"), f)


def report_to_wire(report: Report) -> dict[str, Any]:
    flows = [{"src": k.src, "dst": k.dst, "sport": k.sport, "dport": k.dport, "proto": k.proto, "job": job,
              "bytes": nbytes} for k, job, nbytes in report.flows]
    out = {"v": VERSION, "host": report.host, "run": report.run, "seq": report.seq,
           "jobs": [job_to_wire(j) for j in report.jobs], "flows": flows}
    if report.dscp_bytes:
        out[DSCP_FIELD] = [list(e) for e in report.dscp_bytes]
    return out


def report_from_wire(msg: dict[str, Any]) -> Report:
    _obj(msg, "", ("v", "host", "run", "seq", "jobs", "flows"), (DSCP_FIELD,))
    _version(msg)
    host = check_name(msg["host"], "host")
    run = msg["run"]
    if not isinstance(run, str) or not RUN_RE.fullmatch(run):
        raise SchemaError("run", f"{run!r} is invalid; 16-64 lowercase hex digits (the agent run's random id)")
    seq = _int(msg["seq"], "seq", 1, MAX_SEQ)
    jobs: list[JobReport] = []
    seen: set[str] = set()
    for i, raw in enumerate(_list(msg["jobs"], "jobs", MAX_JOBS)):
        job = job_from_wire(raw, f"jobs[{i}]")
        if job.job in seen:
            raise SchemaError(f"jobs[{i}].job", f"{job.job!r} appears twice")
        seen.add(job.job)
        jobs.append(job)
    items = _list(msg["flows"], "flows", MAX_FLOWS)
    flows = _plain_report_flows(items, seen)
    if flows is None:  # some entry is unusual: the full checks, whose errors name the field
        flows = []
        for i, raw, key, owner in _flow_entries(items, ("bytes",), seen):
            if owner not in seen:
                raise SchemaError(f"flows[{i}].job", f"{owner!r} is not one of this report's jobs {sorted(seen)}")
            flows.append(FlowReport(key, owner, _int(raw["bytes"], f"flows[{i}].bytes", 0, MAX_COUNTER)))
    by_dscp = msg.get(DSCP_FIELD)
    return Report(host, tuple(jobs), tuple(flows), run, seq,
                  () if by_dscp is None else _dscp_bytes(by_dscp, len(flows)))


def _dscp_bytes(items: Any, flows: int) -> tuple[tuple[int, int, int], ...]:
    """A report's flows_dscp: [flow index, DSCP, bytes] entries, each (flow, DSCP) at most once."""
    items = _list(items, DSCP_FIELD, MAX_DSCP_BYTES)
    plain = _plain_dscp_bytes(items, flows)
    if plain is not None:
        return plain
    out: list[tuple[int, int, int]] = []
    seen: set[tuple[int, int]] = set()
    for i, entry in enumerate(items):
        f = f"{DSCP_FIELD}[{i}]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise SchemaError(f, f"{entry!r} is invalid; [flow index, DSCP, bytes]")
        if not flows:
            raise SchemaError(f"{f}[0]", "the report has no flows to index")
        index = _int(entry[0], f"{f}[0]", 0, flows - 1)
        dscp = _int(entry[1], f"{f}[1]", 0, DSCP_MAX)
        nbytes = _int(entry[2], f"{f}[2]", 0, MAX_COUNTER)
        if (index, dscp) in seen:
            raise SchemaError(f, f"flow {index} with DSCP {dscp} appears twice")
        seen.add((index, dscp))
        out.append((index, dscp, nbytes))
    return tuple(out)


def _plain_dscp_bytes(items: list[Any], flows: int) -> tuple[tuple[int, int, int], ...] | None:
    """flows_dscp whose every entry is plain (a list of three ints in range, no (flow, DSCP) twice), in
    one tight loop; None as soon as one is not (the full checks then name the field). An agent sends
    one entry per flow and DSCP used: as many as its flows, on the report hot path."""
    out: list[tuple[int, int, int]] = []
    seen: set[int] = set()
    for entry in items:
        if type(entry) is not list or len(entry) != 3:
            return None
        index, dscp, nbytes = entry
        if not (type(index) is int and type(dscp) is int and type(nbytes) is int and 0 <= index < flows
                and 0 <= dscp <= 63 and 0 <= nbytes < 2**63):
            return None
        slot = index * 64 + dscp
        if slot in seen:
            return None
        seen.add(slot)
        out.append((index, dscp, nbytes))
    return tuple(out)


_REPORT_FLOW_FIELDS = frozenset(FLOW_KEYS + ("job", "bytes"))


class ReportDecoder:
    """``report_from_wire(decode(body))``, remembering each host's flow entries as text.

    An agent reports the same flows every tau; only their byte counters grow. The
    controller keeps, per host, the flow entries of the host's last report that took
    the full checks, keyed by their exact text after the byte count
    (``{"bytes":N,<text>}``, the codec's sorted-key layout), with the flow key and job
    they validated to. A report whose every flow entry is such a text with a plain
    byte count is decoded without parsing or checking those entries again: the rest
    of the body (everything but the flow entries) still goes through the strict codec
    and the field checks, and the jobs of the remembered entries must be jobs of this
    report. Anything else (a new or changed entry, another layout, any error) takes
    the full path, so results and errors are exactly those of ``report_from_wire``.

    The common case, the very same entries in the same order as the host's last report,
    is told in one pass over the list (``_COUNT.split``, C code): the list with its byte
    counts cut out must equal the remembered one, with as many counts as entries.
    Otherwise each entry's text is looked up on its own.

    Why the text is enough: an entry that passed the checks holds only the seven field
    names, numbers, IPv4 or IPv6 addresses (no brackets) and job names, so none of ``{ } [ ] ,`` occurs inside
    its strings; a flow list made of such entries and plain integers is therefore
    valid JSON that parses to those entries, whatever surrounds it. Thread-safe;
    memory is bounded by ``max_entries`` remembered entries (least recent hosts go first).
    """

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES, max_entries: int = 1_000_000) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._hosts: OrderedDict[str, _Known] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()
        self.fast = self.full = 0  # reports decoded each way (tests, benchmarks)
        self.same = 0  # of the fast ones: the very same entries as the host's last report (one-pass path)

    def __call__(self, body: bytes) -> Report:
        report = self._fast(body) if len(body) <= self.max_bytes else None
        if report is not None:
            self.fast += 1
            return report
        report = report_from_wire(decode(body, self.max_bytes))
        self.full += 1
        self._remember(body, report)
        return report

    def _fast(self, body: bytes) -> Report | None:
        end = _flows_end(body)
        if end is None:
            return None
        inner = body[len(_FLOWS_HEAD):end]
        try:  # everything but the flow entries, through the strict codec and the field checks
            rest = loads(b'{"flows":[]' + body[end + 1:], self.max_bytes)  # starts with '{': an object or an error
            by_dscp = rest.pop(DSCP_FIELD, None)
            head = report_from_wire(rest)
        except SchemaError:
            return None
        known = self._hosts.get(head.host)
        if known is None:
            return None
        jobs = {j.job for j in head.jobs}
        flows = known.same(inner, jobs)
        if flows is not None:
            self.same += 1
        else:
            flows = known.by_text(inner, jobs)
            if flows is None:
                return None
            order = _order(inner, flows)
            with self._lock:
                known.order = order
        try:
            dscp = () if by_dscp is None else _dscp_bytes(by_dscp, len(flows))
        except SchemaError:
            return None
        with self._lock:
            if head.host in self._hosts:
                self._hosts.move_to_end(head.host)
        return Report(head.host, head.jobs, flows, head.run, head.seq, dscp)

    def _remember(self, body: bytes, report: Report) -> None:
        """Remember the entries of a report that passed the full checks, if its body has the codec's layout."""
        end = _flows_end(body)
        if end is None:  # another layout: nothing to remember
            return
        inner = body[len(_FLOWS_HEAD):end]
        split = _split_entries(inner)
        if split is None or len(split[1]) != len(report.flows):
            return
        digits, texts = split
        nbytes = _byte_counts(digits)
        if nbytes is None or nbytes != [f.bytes for f in report.flows]:
            return
        known = _Known(dict(zip(texts, map(_KEY_JOB, report.flows))), _order(inner, report.flows))
        with self._lock:
            old = self._hosts.pop(report.host, None)
            self._entries += len(known.texts) - (len(old.texts) if old else 0)
            self._hosts[report.host] = known
            while self._entries > self.max_entries and self._hosts:
                _, gone = self._hosts.popitem(last=False)
                self._entries -= len(gone.texts)


_Order = tuple[bytes, int, tuple[FlowKey, ...], tuple[str, ...], frozenset[str]]


def _order(inner: bytes, flows: tuple[FlowReport, ...] | list[FlowReport]) -> _Order:
    """A valid flow list ``inner`` (the codec's layout, between ``[`` and ``]``) as ReportDecoder's
    one-pass path compares it: the list with its byte counts cut out, the number of entries, and the
    keys and jobs of ``flows`` (its entries, decoded) in order."""
    keys, jobs = zip(*map(_KEY_JOB, flows)) if flows else ((), ())
    return _COUNT_SLOT.join(_COUNT.split(inner)[0::2]), len(flows), keys, jobs, frozenset(jobs)


class _Known:
    """What ReportDecoder remembers of a host: its validated entries' texts -> (key, job), and the order
    of its last decoded report's entries (``_order``)."""

    __slots__ = ("texts", "order")

    def __init__(self, texts: dict[bytes, tuple[FlowKey, str]], order: _Order) -> None:
        self.texts, self.order = texts, order

    def same(self, inner: bytes, jobs: set[str]) -> tuple[FlowReport, ...] | None:
        """The flows of ``inner`` if it is the remembered list in the same order with plain byte counts
        (one regex split in C), the entries' jobs among ``jobs``; else None.

        Exact: cutting every ``{"bytes":<digits>,`` down to ``{"bytes":,`` gave the remembered template,
        whose n slots are the only ``{"bytes":,`` in it (no ``{`` inside a valid entry's strings), and n
        counts were cut, so each slot held exactly one run of digits: ``inner`` is the remembered list
        with new counts (which _byte_counts checks as the codec would)."""
        template, n, keys, job_names, job_set = self.order
        parts = _COUNT.split(inner)
        if len(parts) != 2 * n + 1 or _COUNT_SLOT.join(parts[0::2]) != template or not job_set <= jobs:
            return None
        counts = _byte_counts(parts[1::2])
        if counts is None:
            return None
        return tuple(map(tuple.__new__, repeat(FlowReport), zip(keys, job_names, counts)))

    def by_text(self, inner: bytes, jobs: set[str]) -> tuple[FlowReport, ...] | None:
        """The flows of ``inner`` if every entry is a remembered text (any order, none twice) with a plain
        byte count and a job among ``jobs``; else None."""
        split = _split_entries(inner)
        if split is None:
            return None
        digits, texts = split
        hits = list(map(self.texts.get, texts))
        if None in hits or len(set(texts)) != len(texts):  # distinct texts of one valid report: distinct flows
            return None
        if not jobs.issuperset(map(_SECOND, cast(list[tuple[FlowKey, str]], hits))):  # no None: checked above
            return None
        nbytes = _byte_counts(digits)
        if nbytes is None:
            return None
        return tuple(map(tuple.__new__, repeat(FlowReport), map(operator.add, hits, zip(nbytes))))


_FLOWS_HEAD = b'{"flows":['
_ENTRY_HEAD = b'{"bytes":'
_ENTRY_SEP = b'},{"bytes":'
_COUNT = re.compile(rb'\{"bytes":(\d+),')  # an entry's byte count (ASCII digits: \d of a bytes pattern)
_COUNT_SLOT = b'{"bytes":,'
_SECOND = operator.itemgetter(1)
_KEY_JOB = operator.itemgetter(0, 1)


def _flows_end(body: bytes) -> int | None:
    """Where the flow list of a body that starts with ``{"flows":[`` ends (its first ``]``); None for any
    other body."""
    if not body.startswith(_FLOWS_HEAD):
        return None
    end = body.find(b"]", len(_FLOWS_HEAD))
    return None if end < 0 else end


def _split_entries(inner: bytes) -> tuple[list[bytes], list[bytes]] | None:
    """The D and the T of a flow list in the codec's layout, ``{"bytes":D,T},...`` (between ``[`` and ``]``),
    split at every ``},{"bytes":``; None for any other shape. The split is exact for a valid report (no
    ``{ } [ ] ,`` inside its entries' strings), and only texts remembered from one are ever trusted: any
    other T sends the report to the full checks."""
    if not inner:
        return [], []
    if not (inner.startswith(_ENTRY_HEAD) and inner.endswith(b"}")):
        return None
    parts = [p.partition(b",") for p in inner[len(_ENTRY_HEAD):-1].split(_ENTRY_SEP)]
    return [p[0] for p in parts], [p[2] for p in parts]


def _byte_counts(digits: list[bytes]) -> list[int] | None:
    """The byte counters as integers if every one is a plain JSON integer in 0..2**63-1, else None."""
    if not digits:
        return []
    joined = b"," + b",".join(digits) + b","
    if (not joined.replace(b",", b"").isdigit() or b",," in joined
            or joined.count(b",0") != joined.count(b",0,") or max(map(len, digits)) > 19):
        return None  # not digits, empty, a leading zero, or too long
    counts = list(map(int, digits))
    return counts if max(counts) < 2**63 else None


def _plain_report_flows(items: list[Any], jobs: set[str]) -> list[FlowReport] | None:
    """The flows of a report whose every entry is plain (exactly the fields, right types and ranges,
    a job of the report, no flow twice), in one tight loop; None as soon as one is not. This is the
    controller's hot path: 1,000 agents x 100 flows every second."""
    out: list[FlowReport] = []
    seen: set[FlowKey] = set()
    pton, af, protos, new = _inet_pton, socket.AF_INET, _PROTOS, tuple.__new__
    try:
        for raw in items:
            if raw.keys() != _REPORT_FLOW_FIELDS:
                return None
            src, dst, sport, dport = raw["src"], raw["dst"], raw["sport"], raw["dport"]
            proto, job, nbytes = raw["proto"], raw["job"], raw["bytes"]
            if not (type(sport) is int and type(dport) is int and type(nbytes) is int and type(src) is str
                    and type(dst) is str and (type(proto) is int or type(proto) is str) and 0 <= sport <= 65535
                    and 0 <= dport <= 65535 and 0 <= nbytes < 2**63 and job in jobs):
                return None
            number = protos.get(proto)
            if number is None:
                return None
            if ":" in src or ":" in dst:  # IPv6: canonical text only (any other goes to the full checks)
                if not (":" in src and ":" in dst and _canonical6(src) and _canonical6(dst)):
                    return None
            else:
                pton(af, src)  # exactly the dotted quads ipaddress takes (no leading zeros, 4 parts)
                pton(af, dst)
            key = new(FlowKey, (src, dst, sport, dport, number))
            if key in seen:
                return None
            seen.add(key)
            out.append(new(FlowReport, (key, job, nbytes)))
    except (AttributeError, OSError, TypeError, ValueError):  # not a dict, bad address, unhashable job
        return None
    return out


def _flow_entries(items: Any, extra: tuple[str, ...],
                  names: frozenset[str] | set[str] = frozenset()) -> Iterator[tuple[int, Any, FlowKey, str]]:
    """The entries of a ``flows`` list, each checked for its keys, its 5-tuple (no flow twice) and its
    job name (``names`` are known to be valid): (index, raw entry, flow key, job)."""
    keys: set[FlowKey] = set()
    fields = FLOW_KEYS + ("job",) + extra
    allowed = frozenset(fields)
    for i, raw in enumerate(_list(items, "flows", MAX_FLOWS)):
        key = _plain_flow(raw, allowed, names)
        if key is None:  # anything unusual: the full checks, whose errors name the field
            f = f"flows[{i}]"
            _obj(raw, f, fields)
            key = _flow(raw, f)
            job = check_name(raw["job"], f"{f}.job")
        else:
            job = raw["job"]
        if key in keys:
            raise SchemaError(f"flows[{i}]", f"flow {key.label()} appears twice")
        keys.add(key)
        yield i, raw, key, job


def _plain_flow(raw: Any, allowed: frozenset[str], names: frozenset[str] | set[str]) -> FlowKey | None:
    """The key of a well-formed flow entry with exactly the ``allowed`` fields and a valid job name, or
    None. The common case at 100,000 flows per second: type checks and C parsers, no regex, no objects."""
    if type(raw) is not dict or raw.keys() != allowed:
        return None
    src, dst, sport, dport, proto, job = raw["src"], raw["dst"], raw["sport"], raw["dport"], raw["proto"], raw["job"]
    if not (type(sport) is int and type(dport) is int and 0 <= sport <= 65535 and 0 <= dport <= 65535
            and type(src) is str and type(dst) is str and type(job) is str and type(proto) in (int, str)
            and (job in names or _NAME.fullmatch(job))):
        return None
    number = _PROTOS.get(proto)
    if number is None:
        return None
    try:  # inet_pton takes exactly the dotted quads ipaddress takes (no leading zeros, 4 parts)
        if ":" in src or ":" in dst:  # IPv6: canonical text only (any other goes to the full checks)
            if not (":" in src and ":" in dst and _canonical6(src) and _canonical6(dst)):
                return None
        else:
            _inet_pton(socket.AF_INET, src)
            _inet_pton(socket.AF_INET, dst)
    except (OSError, ValueError):
        return None
    return FlowKey(src, dst, sport, dport, number)


# ---- LevelsReply ---------------------------------------------------------------------------------

def reply_to_wire(reply: LevelsReply) -> dict[str, Any]:
    out = {"v": VERSION, "epoch": reply.epoch, "lease_s": reply.lease_s, "decision_age_s": reply.decision_age_s,
           "dscp_by_level": list(reply.dscp_by_level),
           "flows": [{"src": k.src, "dst": k.dst, "sport": k.sport, "dport": k.dport, "proto": k.proto,
                      "job": job, "level": level} for k, job, level in reply.flows]}
    if reply.shifts:  # only under policy cassini: every other reply stays as it was
        out["shifts"] = _shifts_to_wire(reply.shifts)
    if reply.mode != "enforce":  # only in shadow mode: an enforcing controller's replies stay as they were
        out["mode"] = reply.mode
    if reply.leader_epoch:  # only from an elected leader (--etcd): a lone controller's replies stay as they were
        out["leader_epoch"] = reply.leader_epoch
    return out


def _shifts_to_wire(shifts: tuple[JobShift, ...]) -> list[dict[str, Any]]:
    return [{"job": s.job, "plan": s.plan, "start_in_s": s.start_in_s, "period_s": s.period_s} for s in shifts]


def encode_reply(reply: LevelsReply, flows: bytes | None = None) -> bytes:
    """``codec.encode(reply_to_wire(reply))``, byte for byte, at a fraction of the cost: a controller
    answers ~100,000 flows per second. Flow entries are formatted directly in sorted key order; their
    strings go through json's own C escaping. ``flows``: ``encode_flow_levels(reply.flows)``, if known."""
    wire = {"v": VERSION, "epoch": reply.epoch, "lease_s": reply.lease_s,
            "decision_age_s": reply.decision_age_s, "dscp_by_level": list(reply.dscp_by_level), "flows": []}
    if reply.shifts:  # CASSINI's few orders (one per job of the host) go through the codec
        wire["shifts"] = _shifts_to_wire(reply.shifts)
    if reply.mode != "enforce":
        wire["mode"] = reply.mode
    if reply.leader_epoch:
        wire["leader_epoch"] = reply.leader_epoch
    head = encode(wire)
    if flows is None:
        flows = encode_flow_levels(reply.flows)
    return head.replace(b'"flows":[]', b'"flows":[' + flows + b"]", 1)


def encode_flow_levels(flows: Iterable[FlowLevel]) -> bytes:
    """The entries of a reply's ``flows`` list, comma-separated, as the codec writes them."""
    esc = _json_string
    return ",".join([f'{{"dport":{k.dport},"dst":{esc(k.dst)},"job":{esc(job)},"level":{level},'
                     f'"proto":{k.proto},"sport":{k.sport},"src":{esc(k.src)}}}' for k, job, level in flows]).encode()


class ReplyEncoder:
    """``encode_reply``, reusing each host's encoded flow entries while its reply carries the very same
    ``flows`` tuple (the controller hands a host the same tuple while its levels stay the same).
    Thread-safe; at most ``max_bytes`` of entries are kept (least recent hosts go first)."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._hosts: OrderedDict[str, tuple[tuple[FlowLevel, ...], bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __call__(self, host: str, reply: LevelsReply) -> bytes:
        last = self._hosts.get(host)
        if last is not None and last[0] is reply.flows:
            with self._lock:
                if host in self._hosts:
                    self._hosts.move_to_end(host)
            return encode_reply(reply, last[1])
        flows = encode_flow_levels(reply.flows)
        with self._lock:
            old = self._hosts.pop(host, None)
            self._bytes += len(flows) - (len(old[1]) if old else 0)
            self._hosts[host] = (reply.flows, flows)
            while self._bytes > self.max_bytes and self._hosts:
                self._bytes -= len(self._hosts.popitem(last=False)[1][1])
        return encode_reply(reply, flows)


def _shifts_from_wire(items: Any, known: set[str] | None) -> tuple[JobShift, ...]:
    out: list[JobShift] = []
    seen: set[str] = set()
    for i, raw in enumerate(_list(items, "shifts", MAX_JOBS)):
        f = f"shifts[{i}]"
        _obj(raw, f, ("job", "plan", "start_in_s", "period_s"))
        job = check_name(raw["job"], f"{f}.job")
        if known is not None and job not in known:
            raise SchemaError(f"{f}.job", f"{job!r} is not a job of this host (known: {sorted(known)})")
        if job in seen:
            raise SchemaError(f"{f}.job", f"{job!r} appears twice")
        seen.add(job)
        plan = _int(raw["plan"], f"{f}.plan", 0, MAX_COUNTER)
        period = check_ideal_time(raw["period_s"], f"{f}.period_s")
        start_in = _num(raw["start_in_s"], f"{f}.start_in_s", 0)
        if start_in >= period:
            raise SchemaError(f"{f}.start_in_s", f"{start_in!r} is invalid; in [0, period_s={period!r})")
        out.append(JobShift(job, plan, start_in, period))
    return tuple(out)


def reply_from_wire(msg: dict[str, Any], known_jobs: Iterable[str] | None = None) -> LevelsReply:
    """Validate a reply; with ``known_jobs``, a level for any other job is refused."""
    _obj(msg, "", ("v", "epoch", "lease_s", "decision_age_s", "dscp_by_level", "flows"),
         ("shifts", "mode", "leader_epoch"))
    mode = msg.get("mode", "enforce")
    if mode not in MODES:
        raise SchemaError("mode", f"{mode!r}: expected one of {', '.join(MODES)}")
    _version(msg)
    epoch = _int(msg["epoch"], "epoch", 0, MAX_COUNTER)
    lease = _num(msg["lease_s"], "lease_s", 0, MAX_LEASE_S, lo_open=True)
    age = _num(msg["decision_age_s"], "decision_age_s", 0)
    dscp = tuple(_int(d, f"dscp_by_level[{i}]", 0, DSCP_MAX)
                 for i, d in enumerate(_list(msg["dscp_by_level"], "dscp_by_level", MAX_LEVELS)))
    if not dscp:
        raise SchemaError("dscp_by_level", "empty; one DSCP per level is required")
    if len(set(dscp)) != len(dscp):
        raise SchemaError("dscp_by_level", f"{list(dscp)} has duplicates; one distinct DSCP per level")
    known = None if known_jobs is None else set(known_jobs)
    flows: list[FlowLevel] = []
    for i, raw, key, job in _flow_entries(msg["flows"], ("level",)):
        if known is not None and job not in known:
            raise SchemaError(f"flows[{i}].job", f"{job!r} is not a job of this host (known: {sorted(known)})")
        flows.append(FlowLevel(key, job, _int(raw["level"], f"flows[{i}].level", 0, len(dscp) - 1)))
    shifts = _shifts_from_wire(msg["shifts"], known) if "shifts" in msg else ()
    leader_epoch = _int(msg.get("leader_epoch", 0), "leader_epoch", 0, MAX_COUNTER)
    return LevelsReply(epoch, lease, dscp, tuple(flows), age, shifts, mode, leader_epoch)
