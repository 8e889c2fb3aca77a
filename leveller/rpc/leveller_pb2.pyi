from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecentIteration(_message.Message):
    __slots__ = ("iteration", "time")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    time: float
    def __init__(self, iteration: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class JobReport(_message.Message):
    __slots__ = ("job", "iterations", "start_time", "ideal_time", "recent", "weight")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    IDEAL_TIME_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    job: str
    iterations: int
    start_time: float
    ideal_time: float
    recent: _containers.RepeatedCompositeFieldContainer[RecentIteration]
    weight: float
    def __init__(self, job: _Optional[str] = ..., iterations: _Optional[int] = ..., start_time: _Optional[float] = ..., ideal_time: _Optional[float] = ..., recent: _Optional[_Iterable[_Union[RecentIteration, _Mapping]]] = ..., weight: _Optional[float] = ...) -> None: ...

class FlowReport(_message.Message):
    __slots__ = ("src", "dst", "sport", "dport", "proto", "job", "bytes")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    SPORT_FIELD_NUMBER: _ClassVar[int]
    DPORT_FIELD_NUMBER: _ClassVar[int]
    PROTO_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    sport: int
    dport: int
    proto: int
    job: str
    bytes: int
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., sport: _Optional[int] = ..., dport: _Optional[int] = ..., proto: _Optional[int] = ..., job: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class DscpBytes(_message.Message):
    __slots__ = ("flow", "dscp", "bytes")
    FLOW_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    flow: int
    dscp: int
    bytes: int
    def __init__(self, flow: _Optional[int] = ..., dscp: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("host", "run", "seq", "jobs", "flows", "flows_dscp")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_DSCP_FIELD_NUMBER: _ClassVar[int]
    host: str
    run: str
    seq: int
    jobs: _containers.RepeatedCompositeFieldContainer[JobReport]
    flows: _containers.RepeatedCompositeFieldContainer[FlowReport]
    flows_dscp: _containers.RepeatedCompositeFieldContainer[DscpBytes]
    def __init__(self, host: _Optional[str] = ..., run: _Optional[str] = ..., seq: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[JobReport, _Mapping]]] = ..., flows: _Optional[_Iterable[_Union[FlowReport, _Mapping]]] = ..., flows_dscp: _Optional[_Iterable[_Union[DscpBytes, _Mapping]]] = ...) -> None: ...

class FlowLevel(_message.Message):
    __slots__ = ("src", "dst", "sport", "dport", "proto", "job", "level")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    SPORT_FIELD_NUMBER: _ClassVar[int]
    DPORT_FIELD_NUMBER: _ClassVar[int]
    PROTO_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    sport: int
    dport: int
    proto: int
    job: str
    level: int
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., sport: _Optional[int] = ..., dport: _Optional[int] = ..., proto: _Optional[int] = ..., job: _Optional[str] = ..., level: _Optional[int] = ...) -> None: ...

class JobShift(_message.Message):
    __slots__ = ("job", "plan", "start_in_s", "period_s")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    START_IN_S_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    job: str
    plan: int
    start_in_s: float
    period_s: float
    def __init__(self, job: _Optional[str] = ..., plan: _Optional[int] = ..., start_in_s: _Optional[float] = ..., period_s: _Optional[float] = ...) -> None: ...

class LevelsReply(_message.Message):
    __slots__ = ("epoch", "lease_s", "decision_age_s", "dscp_by_level", "flows", "shifts", "mode", "leader_epoch")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    DECISION_AGE_S_FIELD_NUMBER: _ClassVar[int]
    DSCP_BY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    SHIFTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_s: float
    decision_age_s: float
    dscp_by_level: _containers.RepeatedScalarFieldContainer[int]
    flows: _containers.RepeatedCompositeFieldContainer[FlowLevel]
    shifts: _containers.RepeatedCompositeFieldContainer[JobShift]
    mode: str
    leader_epoch: int
    def __init__(self, epoch: _Optional[int] = ..., lease_s: _Optional[float] = ..., decision_age_s: _Optional[float] = ..., dscp_by_level: _Optional[_Iterable[int]] = ..., flows: _Optional[_Iterable[_Union[FlowLevel, _Mapping]]] = ..., shifts: _Optional[_Iterable[_Union[JobShift, _Mapping]]] = ..., mode: _Optional[str] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("host", "epoch", "wait_s")
    HOST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    host: str
    epoch: int
    wait_s: float
    def __init__(self, host: _Optional[str] = ..., epoch: _Optional[int] = ..., wait_s: _Optional[float] = ...) -> None: ...

class SignedMessage(_message.Message):
    __slots__ = ("body", "time", "mac")
    BODY_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    time: str
    mac: str
    def __init__(self, body: _Optional[bytes] = ..., time: _Optional[str] = ..., mac: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job", "iterations", "start_time", "ideal_time", "profiling", "weight", "rate")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    IDEAL_TIME_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    job: str
    iterations: int
    start_time: float
    ideal_time: float
    profiling: bool
    weight: float
    rate: float
    def __init__(self, job: _Optional[str] = ..., iterations: _Optional[int] = ..., start_time: _Optional[float] = ..., ideal_time: _Optional[float] = ..., profiling: _Optional[bool] = ..., weight: _Optional[float] = ..., rate: _Optional[float] = ...) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("host", "age_s", "jobs", "flows")
    HOST_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    host: str
    age_s: float
    jobs: int
    flows: int
    def __init__(self, host: _Optional[str] = ..., age_s: _Optional[float] = ..., jobs: _Optional[int] = ..., flows: _Optional[int] = ...) -> None: ...

class FlowStatus(_message.Message):
    __slots__ = ("flow", "job", "host", "bytes", "level", "links")
    FLOW_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    flow: str
    job: str
    host: str
    bytes: int
    level: int
    links: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, flow: _Optional[str] = ..., job: _Optional[str] = ..., host: _Optional[str] = ..., bytes: _Optional[int] = ..., level: _Optional[int] = ..., links: _Optional[_Iterable[str]] = ...) -> None: ...

class RateWindow(_message.Message):
    __slots__ = ("window_s", "half_life_s")
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    HALF_LIFE_S_FIELD_NUMBER: _ClassVar[int]
    window_s: float
    half_life_s: float
    def __init__(self, window_s: _Optional[float] = ..., half_life_s: _Optional[float] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("now", "epoch", "policy", "levels", "tau_s", "lease_s", "last_error", "mode", "shadow_bytes", "rate", "decision_age_s", "enforcement", "order", "jobs", "agents", "flows", "flows_total", "flows_truncated")
    NOW_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    TAU_S_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    DECISION_AGE_S_FIELD_NUMBER: _ClassVar[int]
    ENFORCEMENT_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FLOWS_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    now: float
    epoch: int
    policy: str
    levels: int
    tau_s: float
    lease_s: float
    last_error: str
    mode: str
    shadow_bytes: _struct_pb2.Struct
    rate: RateWindow
    decision_age_s: float
    enforcement: _struct_pb2.Struct
    order: _containers.RepeatedScalarFieldContainer[str]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    agents: _containers.RepeatedCompositeFieldContainer[AgentStatus]
    flows: _containers.RepeatedCompositeFieldContainer[FlowStatus]
    flows_total: int
    flows_truncated: bool
    def __init__(self, now: _Optional[float] = ..., epoch: _Optional[int] = ..., policy: _Optional[str] = ..., levels: _Optional[int] = ..., tau_s: _Optional[float] = ..., lease_s: _Optional[float] = ..., last_error: _Optional[str] = ..., mode: _Optional[str] = ..., shadow_bytes: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rate: _Optional[_Union[RateWindow, _Mapping]] = ..., decision_age_s: _Optional[float] = ..., enforcement: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., order: _Optional[_Iterable[str]] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., agents: _Optional[_Iterable[_Union[AgentStatus, _Mapping]]] = ..., flows: _Optional[_Iterable[_Union[FlowStatus, _Mapping]]] = ..., flows_total: _Optional[int] = ..., flows_truncated: _Optional[bool] = ...) -> None: ...
