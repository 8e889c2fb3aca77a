"""The protobuf form of the controller's messages (leveller.proto, package leveller.v1) <-> leveller.model.

Any gRPC client (grpcurl, another language) speaks this form; our agents still send
JSON (leveller.rpc.schema, with issue 9's fast report path). Both share the method
paths: a request body whose first byte is ``{`` or ``[`` is JSON (as a protobuf tag
byte, 0x7B and 0x5B mean a group start, which no message of this service contains),
any other is protobuf. A protobuf message is turned into the JSON form's fields and
goes through the very same checks (``report_from_wire`` etc.), so a bad value is
refused with the same SchemaError naming the field. Unknown protobuf fields are
ignored (protobuf's rule for a newer client); everything else is checked.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from leveller.codec import SchemaError
from leveller.model.messages import LevelsReply, Report
from leveller.rpc import leveller_pb2 as pb
from leveller.rpc.schema import VERSION, reply_from_wire, report_from_wire
from leveller.rpc.wire import SERVICE, watch_request_from_wire

assert pb.DESCRIPTOR.services_by_name["Controller"].full_name == SERVICE, "leveller.proto names another service"


def is_json(body: bytes) -> bool:
    """True for a JSON request (our agents), False for a protobuf one (see the module doc)."""
    return body[:1] in (b"{", b"[")


def _parse(message: type[Message], body: bytes) -> Any:
    try:
        return message.FromString(body)
    except DecodeError as exc:
        raise SchemaError("(body)", f"not a valid {message.DESCRIPTOR.full_name}: {exc}") from None


def report_from_proto(body: bytes) -> Report:
    """A ReportRequest, through the checks of the JSON form (SchemaError names the bad field)."""
    msg = _parse(pb.ReportRequest, body)
    jobs = []
    for j in msg.jobs:
        job: dict[str, Any] = {"job": j.job, "iterations": j.iterations, "start_time": j.start_time,
                               "recent": [[r.iteration, r.time] for r in j.recent]}
        if j.HasField("ideal_time"):
            job["ideal_time"] = j.ideal_time
        if j.HasField("weight"):
            job["weight"] = j.weight
        jobs.append(job)
    wire: dict[str, Any] = {
        "v": VERSION, "host": msg.host, "run": msg.run, "seq": msg.seq, "jobs": jobs,
        "flows": [{"src": f.src, "dst": f.dst, "sport": f.sport, "dport": f.dport, "proto": f.proto, "job": f.job,
                   "bytes": f.bytes} for f in msg.flows]}
    if msg.flows_dscp:
        wire["flows_dscp"] = [[d.flow, d.dscp, d.bytes] for d in msg.flows_dscp]
    return report_from_wire(wire)


def report_to_proto(report: Report) -> bytes:
    """The ReportRequest of a report (clients, tests)."""
    return pb.ReportRequest(
        host=report.host, run=report.run, seq=report.seq,
        jobs=[pb.JobReport(job=j.job, iterations=j.iterations, start_time=j.start_time, ideal_time=j.ideal_time,
                           weight=j.weight, recent=[pb.RecentIteration(iteration=n, time=t) for n, t in j.recent])
              for j in report.jobs],
        flows=[pb.FlowReport(src=k.src, dst=k.dst, sport=k.sport, dport=k.dport, proto=k.proto, job=job, bytes=n)
               for k, job, n in report.flows],
        flows_dscp=[pb.DscpBytes(flow=i, dscp=d, bytes=n) for i, d, n in report.dscp_bytes],
    ).SerializeToString()


def reply_to_proto(reply: LevelsReply) -> bytes:
    """The LevelsReply message of a reply."""
    return pb.LevelsReply(
        epoch=reply.epoch, lease_s=reply.lease_s, decision_age_s=reply.decision_age_s,
        dscp_by_level=list(reply.dscp_by_level), mode=reply.mode, leader_epoch=reply.leader_epoch,
        flows=[pb.FlowLevel(src=k.src, dst=k.dst, sport=k.sport, dport=k.dport, proto=k.proto, job=job, level=level)
               for k, job, level in reply.flows],
        shifts=[pb.JobShift(job=s.job, plan=s.plan, start_in_s=s.start_in_s, period_s=s.period_s)
                for s in reply.shifts],
    ).SerializeToString()


def reply_from_proto(body: bytes, known_jobs: Any = None) -> LevelsReply:
    """A LevelsReply message, through the checks of the JSON form (clients, tests)."""
    msg = _parse(pb.LevelsReply, body)
    wire: dict[str, Any] = {
        "v": VERSION, "epoch": msg.epoch, "lease_s": msg.lease_s, "decision_age_s": msg.decision_age_s,
        "dscp_by_level": list(msg.dscp_by_level), "mode": msg.mode or "enforce",
        "flows": [{"src": f.src, "dst": f.dst, "sport": f.sport, "dport": f.dport, "proto": f.proto, "job": f.job,
                   "level": f.level} for f in msg.flows]}
    if msg.leader_epoch:
        wire["leader_epoch"] = msg.leader_epoch
    if msg.shifts:
        wire["shifts"] = [{"job": s.job, "plan": s.plan, "start_in_s": s.start_in_s, "period_s": s.period_s}
                          for s in msg.shifts]
    return reply_from_wire(wire, known_jobs)


def watch_request_from_proto(body: bytes) -> tuple[str, int, float]:
    """(host, epoch, wait_s) of a WatchRequest; SchemaError names a bad field."""
    msg = _parse(pb.WatchRequest, body)
    return watch_request_from_wire({"v": VERSION, "host": msg.host, "epoch": msg.epoch, "wait_s": msg.wait_s})


def check_status_request(body: bytes) -> None:
    """A StatusRequest (it has no fields)."""
    _parse(pb.StatusRequest, body)


def status_to_proto(status: dict[str, Any]) -> bytes:
    """The StatusReply of the controller's status dict (its keys are the message's field names; ``ha``, the
    election's view with --etcd, is not in the message yet: JSON clients and `leveller status` show it)."""
    if "ha" in status:
        status = {k: v for k, v in status.items() if k != "ha"}
    return json_format.ParseDict(status, pb.StatusReply()).SerializeToString()
