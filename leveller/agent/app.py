"""The host agent as a process runs it, built from one typed configuration: the composition root.

``AgentConfig`` holds every option of `leveller agent` under its flag's name (--metrics-port is
``metrics_port``), the values the command line and a --config TOML file fill alike (leveller.config).
``run_agent`` checks it (UserError naming the option), then runs the agent until stopped: the job
logs it follows, the eBPF datapath on --dev (and the RDMA shim), the failover client of the
controllers, the Watch of pushed decisions, the phase-aware demotion, the RTO-minimum routes, the
metrics, and the signals that end it cleanly. The CLI (leveller.commands.agent) only prints its steps.

This module sits above leveller.rpc (the agent talks to the controller over it): nothing in
leveller.agent imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from leveller.agent import arrivals
from leveller.agent.demotion import DEFAULT_QUIET_S, DEFAULT_WAIT_MAX_S
from leveller.agent.jobtable import DEFAULT_MAX_ENTRIES
from leveller.agent.regserver import DEFAULT_ITER_RATE, DEFAULT_RATE, HELLO_S
from leveller.errors import UserError
from leveller.jobs.logline import DEFAULT_PATTERN, check_job_name
from leveller.model.flow import FlowKey
from leveller.model.limits import MAX_JOBS

if TYPE_CHECKING:
    from leveller.agent.metrics import Rejections
    from leveller.agent.reports import JobClassifier
    from leveller.agent.service import StepResult
    from leveller.model.messages import LevelsReply
    from leveller.rpc.push import LevelsWatcher


@dataclass
class AgentConfig:
    """Every option of `leveller agent`, named after its flag, with the flag's default."""

    controller: str | None = None
    timeout: float | None = None
    secret_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    host: str = field(default_factory=socket.gethostname)
    log: list[str] = field(default_factory=list)
    pattern: str = DEFAULT_PATTERN
    job_ports: list[str] = field(default_factory=list)
    job_cgroup: list[str] = field(default_factory=list)
    ideal_time: list[str] = field(default_factory=list)
    job_weight: list[str] = field(default_factory=list)
    dev: str | None = None
    netns: str | None = None
    loader: str = "auto"
    from_start: bool = False
    metrics_port: int = 0
    metrics_addr: str = "127.0.0.1"
    interval: float = 1.0
    poll: float = 0.02
    duration: float | None = None
    rdma: bool = False
    no_push: bool = False
    overlap: bool = False
    phase_demotion: bool = True
    demote_wait_max: float | None = None
    rto_min_ms: int | None = None
    shift_dir: str | None = None
    json: bool = False
    trace_pushes: str | None = None
    socket: str | None = None
    slurm: bool = False
    job_cgroup_root: str | None = None
    kube_pods: str | None = None
    kube_token_file: str | None = None
    kube_ca: str | None = None
    kube_cgroup_root: str | None = None
    max_jobs: int = MAX_JOBS
    max_registrations: int = DEFAULT_MAX_ENTRIES
    registrations_per_second: float = DEFAULT_RATE
    iterations_per_second: float = DEFAULT_ITER_RATE
    registration_timeout: float = HELLO_S

    @classmethod
    def from_namespace(cls, args: argparse.Namespace | Any) -> AgentConfig:
        """The configuration of parsed options (attributes it lacks keep their defaults)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


def add_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `leveller agent`: one per AgentConfig field (leveller.config makes them TOML keys)."""
    parser.add_argument("--controller", metavar="HOST:PORT[,HOST:PORT...]",
                        help="controller gRPC address (required, here or as `controller` in --config); several, "
                        "comma-separated, for failover (see above)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds to wait for a controller's answer (default 5 with one controller, "
                        "1 with several: then a controller that does not answer in time is left for the next)")
    parser.add_argument("--secret-file", help="file holding the shared secret (else $LEVELLER_SECRET; "
                        "optional with --tls-*)")
    from leveller.rpc.tls import add_tls_options

    add_tls_options(parser, "HOST")
    parser.add_argument("--host", default=socket.gethostname(), help="this host's name in reports")
    parser.add_argument("--log", action="append", default=[], metavar="[JOB=]PATH",
                        help="job log to follow (file or FIFO); JOB names it when the pattern has no job group")
    parser.add_argument("--pattern", default=DEFAULT_PATTERN,
                        help="regex of an iteration line; named groups job, iter, t (default: leveller-iter lines)")
    parser.add_argument("--job-ports", action="append", default=[], metavar="JOB=LOW-HIGH")
    parser.add_argument("--job-cgroup", action="append", default=[], metavar="JOB=CGROUP_DIR")
    parser.add_argument("--ideal-time", action="append", default=[], metavar="JOB=SECONDS",
                        help="known ideal iteration time (else the controller profiles the job)")
    parser.add_argument("--job-weight", action="append", default=[], metavar="JOB=W",
                        help="declare a job's operator weight: leveller ranks by R / W, so a job of weight 4 "
                        "keeps priority until its R is 4 times the others' (default 1 = the paper; a "
                        "`leveller controller --job-weight` for the job wins), e.g. --job-weight big=4")
    parser.add_argument("--dev", help="egress interface for the eBPF datapath (needs root); without it no "
                        "flows are reported and nothing is marked")
    parser.add_argument("--netns", help="network namespace of --dev")
    parser.add_argument("--loader", choices=("auto", "libbpf", "bcc"), default="auto",
                        help="how the eBPF program gets into the kernel: libbpf loads the CO-RE object built once "
                        "(bpf/Makefile; no compiler or kernel headers on the host), bcc compiles "
                        "bpf/flow_marker.c at start (needs clang's libraries and the kernel headers); default "
                        "auto: libbpf when the object was built from the sources next to it, else bcc. The log, "
                        "the --json lines and leveller_agent_datapath_loader say which one ran")
    parser.add_argument("--from-start", action="store_true",
                        help="read the job logs from their first line, 1 MiB per poll (default: from their end, "
                        "after their first and last 64 KiB, where jobs log their start and latest count)")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between reports (default 1)")
    parser.add_argument("--poll", type=float, default=0.02, metavar="S",
                        help="read the job logs every S seconds between reports and report at once when an "
                        "iteration ended, so the controller can re-rank at iteration ends (default 0.02; 0 = off)")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--rdma", action="store_true",
                        help="also level the RDMA queue pairs of processes running under the shim "
                             "(LD_PRELOAD=shim/build/libleveller_shim.so): traffic class = DSCP << 2")
    parser.add_argument("--no-push", action="store_true",
                        help="take levels only from report replies (default: also keep a Watch call open, so "
                        "a new decision arrives within milliseconds instead of up to --interval later)")
    parser.add_argument("--overlap", action="store_true",
                        help="apply the overlap rule: demote a job's flows to the lowest level while its announced "
                        "communication can wait (leveller-comm lines in its log)")
    parser.add_argument("--phase-demotion", action=argparse.BooleanOptionalAction, default=True,
                        help="apply a flow's demotion (new level lower than its level now) only when its "
                        "communication phase has ended (its byte counter stopped growing over one --poll "
                        "interval, or its job logged an iteration end), at most --demote-wait-max seconds and "
                        "never beyond the lease; promotions apply at once (default: on; --no-phase-demotion: every "
                        "level at once, the paper's)")
    parser.add_argument("--demote-wait-max", type=float, default=None, metavar="S",
                        help="with --phase-demotion: the longest a demotion waits for its flow's phase to end "
                        f"(default {DEFAULT_WAIT_MAX_S:g}; the lease of the level it keeps bounds it too), "
                        "e.g. --demote-wait-max 0.5")
    parser.add_argument("--rto-min-ms", type=int, default=None, metavar="MS",
                        help="give each job peer (a destination of the job flows on --dev, in --netns) a host "
                        "route with a TCP RTO minimum of MS milliseconds, 1..200 (protocol 76; no other route or "
                        "destination changes), while the agent runs and the peer is reported, at most 4096; "
                        "deleted when it exits or dies (default: routes left alone), e.g. --rto-min-ms 10")
    parser.add_argument("--shift-dir", metavar="DIR",
                        help="write CASSINI shift orders (controller --policy cassini) to DIR/JOB.shift for the "
                        "jobs to follow")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per report on stdout (with every flow's byte counter)")
    parser.add_argument("--trace-pushes", metavar="FILE",
                        help="append a JSON line per pushed decision to FILE: its epoch and the wall-clock times "
                        "it came out of gRPC, was verified and decoded, and was applied (DSCP map written), to "
                        "see where a decision's milliseconds go (leveller bench levels uses it), "
                        "e.g. --trace-pushes /tmp/pushes.jsonl")
    arrivals.add_options(parser)


def step_line(r: StepResult, rejected: Rejections) -> dict[str, Any]:
    """The --json line of one report (the agent's JSON contract, with every flow's byte counter)."""
    return {"t": round(r.t, 4), "controller": r.controller, "ok": r.ok, "error": r.error,
            "mode": r.mode, "leader_epoch": r.leader_epoch,  # of the levels in hand (--etcd)
            "cleared": r.cleared, "stale": r.stale, "waiting": r.waiting, "held": r.held,
            "jobs": {j.job: j.iterations for j in r.report.jobs},
            "rejected": dict(rejected.counts),
            "marks": {k.label(): v for k, v in (r.marks or {}).items()},
            "loader": rejected.metrics.loader if rejected.metrics is not None else None,  # of the eBPF datapath
            "bytes": bytes_by_job(r.report.flows, FlowKey.label)}


def step_text(r: StepResult) -> str | None:
    """The line printed for one report without --json (None when all is well)."""
    if not r.ok:
        return f"report failed: {r.error}" + ("; lease expired, all DSCP rewrites cleared" if r.cleared else "")
    if r.stale and r.cleared:
        return "the controller's latest decision is older than its lease: all DSCP rewrites cleared"
    return None


@contextlib.contextmanager
def trace_file(path: str | None) -> Iterator[IO[str] | None]:
    """--trace-pushes FILE opened for appending, line-buffered (None without the flag)."""
    if path is None:
        yield None
        return
    try:
        out = open(path, "a", buffering=1)
    except OSError as exc:
        raise UserError(f"--trace-pushes {path}: cannot open ({exc.strerror})") from None
    with out:
        yield out


def traced(apply: Callable[[LevelsReply], None], out: IO[str],
            watcher: Callable[[], LevelsWatcher | None]) -> Callable[[LevelsReply], None]:
    """``apply`` that also writes {"epoch", "arrived", "decoded", "applied"} (wall clock) to ``out``."""

    def traced(reply: LevelsReply) -> None:
        apply(reply)
        applied, w = time.time(), watcher()
        out.write(json.dumps({"epoch": reply.epoch, "arrived": w.arrived_at if w else None,
                              "decoded": w.decoded_at if w else None, "applied": applied}) + "\n")

    return traced


def ideal_times(items: list[str]) -> dict[str, float]:
    from leveller.model.limits import MAX_IDEAL_S

    out = {}
    for item in items:
        job, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_IDEAL_S):
            raise UserError(f"--ideal-time {item!r}: expected JOB=SECONDS with 0 < SECONDS <= {MAX_IDEAL_S:g} "
                            "(one day)")
        out[check_job_name(job)] = seconds
    return out


@contextlib.contextmanager
def datapath(dev: str | None, netns: str | None, loader: str = "auto",
             metrics: Any = None) -> Iterator[tuple[Any, Any]]:
    from leveller.agent.service import NoFlows, NoMarking
    if not dev:
        yield NoFlows(), NoMarking()
        return
    from leveller.agent.claim import claim_device
    from leveller.agent.datapath import Datapath, DatapathError
    from leveller.agent.enforce_bpf import BpfEnforcer, BpfFlowSource
    with claim_device(dev, netns):  # claim: removes a crashed run's filter
        dp = Datapath(dev, netns=netns, loader=loader)
        try:
            dp.attach()
        except DatapathError as exc:  # the kernel refused (capabilities, no such device): one line, no traceback
            raise UserError(str(exc)) from None
        if metrics is not None:
            metrics.set_loader(dp.loader_used)
        try:
            yield BpfFlowSource(dp), BpfEnforcer(dp)
        finally:
            dp.detach()


@contextlib.contextmanager
def rto_routes(args: AgentConfig) -> Iterator[Any]:
    """The route keeper of --rto-min-ms (None without it), stopped (its host routes deleted) on the way out."""
    if args.rto_min_ms is None:
        yield None
        return
    from leveller.agent.rto_min import RtoMinGuard

    with RtoMinGuard(args.rto_min_ms, args.netns) as guard:
        yield guard


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop`` instead of raising where they land, so shutdown always takes
    the normal path (clear marks, detach BPF); SIGUSR1 dumps every thread's stack to stderr."""
    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        yield
    finally:
        faulthandler.unregister(signal.SIGUSR1)
        for sig, old in previous.items():
            signal.signal(sig, old)


def bytes_by_job(flows: Any, label: Any) -> dict[str, dict[str, int]]:
    """job -> flow label -> byte counter (the --json view of a report's flows)."""
    out: dict[str, dict[str, int]] = {}
    for f in flows:
        out.setdefault(f.job, {})[label(f.key)] = f.bytes
    return out


def phase_demotion(args: AgentConfig) -> tuple[Any, Any] | None:
    """(PhaseDemotion, FlowActivity) for --phase-demotion (None without it); UserError for a bad
    --demote-wait-max."""
    wait = args.demote_wait_max if args.demote_wait_max is not None else DEFAULT_WAIT_MAX_S
    if not (math.isfinite(wait) and 0 < wait <= 60):
        raise UserError(f"--demote-wait-max {wait}: must be in (0, 60] seconds")
    if not args.phase_demotion:
        return None
    from leveller.agent.demotion import FlowActivity, PhaseDemotion

    # a flow is idle when its counter did not grow over one log poll (--poll; 0 = off: the default poll)
    return PhaseDemotion(wait), FlowActivity(args.poll or DEFAULT_QUIET_S)


def check_names(args: AgentConfig) -> None:
    """Refuse bad --host, --dev, --netns before anything touches a file or the network."""
    from leveller.agent.names import check_ifname, check_netns
    from leveller.codec import SchemaError
    from leveller.rpc.schema import check_name

    try:
        check_name(args.host, "--host")
    except SchemaError as exc:
        raise UserError(f"{exc} (the controller refuses reports of such a host)") from None
    if args.dev is not None:
        check_ifname(args.dev)
    if args.netns is not None:
        if args.dev is None:
            raise UserError("--netns: only meaningful with --dev")
        check_netns(args.netns)


def run_agent(cfg: AgentConfig, on_step: Callable[[StepResult, Rejections], None]) -> None:
    """Check ``cfg`` and run the agent until --duration, SIGINT or SIGTERM; ``on_step`` after each report."""
    args = cfg
    from leveller.agent.metrics import AgentMetrics, Rejections
    from leveller.agent.overlap import OverlapWindows
    from leveller.agent.rate_tracker import EDGE_BYTES, LogTailer, RateTracker
    from leveller.agent.reports import Classifier, parse_cgroup_rule, parse_port_rule
    from leveller.agent.service import Agent
    from leveller.rpc.auth import load_secret
    from leveller.rpc.failover import FailoverClient, parse_addresses
    from leveller.rpc.push import LevelsWatcher

    check_names(args)
    if not args.controller:
        raise UserError("--controller: give the controller's HOST:PORT (or `controller = \"HOST:PORT\"` in --config)")
    controllers = parse_addresses(args.controller)
    if not args.log and not arrivals.wanted(args):
        raise UserError("--log: give at least one job log to follow (or --socket / --slurm / --kube-pods for jobs that "
                        "register or are found by themselves)")
    arrivals.check(args)
    if not args.interval > 0:
        raise UserError(f"--interval {args.interval}: must be > 0 seconds")
    if not 0 <= args.poll < 60:
        raise UserError(f"--poll {args.poll}: must be in [0, 60) seconds (0 = off)")
    if args.timeout is not None and not 0 < args.timeout <= 60:
        raise UserError(f"--timeout {args.timeout}: must be in (0, 60] seconds")
    if not 0 <= args.metrics_port <= 65535:
        raise UserError(f"--metrics-port {args.metrics_port}: must be a TCP port 0..65535 (0 = off)")
    demotion = phase_demotion(args)
    if args.rto_min_ms is not None:
        from leveller.agent.rto_min import check_rto_min_ms

        check_rto_min_ms(args.rto_min_ms)
        if not args.dev:
            raise UserError(f"--rto-min-ms {args.rto_min_ms}: needs --dev (the job peers are the destinations "
                            "of the job flows the datapath counts there)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    metrics = AgentMetrics()
    rejected = Rejections(metrics)
    logs = []
    for item in args.log:
        name, sep, rest = item.partition("=")
        job: str | None = name if sep and "/" not in name else None
        path = rest if job is not None else item
        tracker = RateTracker(args.pattern, default_job=job, on_reject=rejected)
        # a pattern without an iter group counts lines: old lines from the edges would count as new
        edges = 0 if tracker.counts_lines else EDGE_BYTES
        logs.append((LogTailer(path, from_start=args.from_start, edge_bytes=edges), tracker))
    classifier: JobClassifier = Classifier(tuple(parse_cgroup_rule(c) for c in args.job_cgroup),
                            tuple(parse_port_rule(p) for p in args.job_ports))
    ideals: Mapping[str, float] = ideal_times(args.ideal_time)
    shift_files = None
    if args.shift_dir:
        from leveller.agent.shifts import ShiftFiles
        shift_files = ShiftFiles(args.shift_dir)
    from leveller.options import parse_weights

    weights: Mapping[str, float] = parse_weights(args.job_weight)
    from leveller.rpc.tls import tls_from_args

    tls = tls_from_args(args)
    secret = load_secret(args.secret_file, optional=tls is not None)
    stop = threading.Event()

    def step(r: StepResult) -> None:
        on_step(r, rejected)

    metrics_server = None
    if args.metrics_port:
        from prometheus_client import start_http_server
        try:
            metrics_server, _ = start_http_server(args.metrics_port, addr=args.metrics_addr,
                                                  registry=metrics.registry)
        except OSError as exc:
            raise UserError(f"--metrics-port {args.metrics_port}: cannot listen ({exc})") from None
    try:
        with trace_file(args.trace_pushes) as trace, FailoverClient(controllers, secret, args.timeout, tls=tls) \
                as client, datapath(args.dev, args.netns, args.loader, metrics) as (flows, enf), \
                rto_routes(args) as routes, \
                arrivals.job_table(args, classifier, ideals, weights, rejected, metrics) as table:
            if table is not None:  # the static rules first, then the jobs that came by themselves
                classifier, ideals, weights = table, table.ideal_times, table.weights
            if args.rdma:
                from leveller.agent.enforce_shim import add_shim
                flows, enf, classifier = add_shim(flows, enf, classifier, metrics=metrics)
            agent = Agent(args.host, logs, client, enf, flows=flows, classifier=classifier, jobs=table,
                          ideal_times=ideals, weights=weights, metrics=metrics, rejected=rejected,
                          overlap=OverlapWindows() if args.overlap else None, shift_files=shift_files,
                          demotion=demotion[0] if demotion else None, activity=demotion[1] if demotion else None,
                          rto_routes=routes)
            timer = threading.Timer(args.duration, stop.set) if args.duration else None
            if timer:
                timer.start()
            # the watcher follows the controller the reports go to
            on_levels = agent.apply_pushed if trace is None else traced(agent.apply_pushed, trace, lambda: watcher)
            watcher = None if args.no_push else LevelsWatcher(
                lambda: client.active, secret, args.host, on_levels, lambda: agent.known_jobs,
                tls=tls)
            try:
                if watcher:
                    watcher.start()
                with stop_on_signals(stop):
                    agent.run(args.interval, stop, step, poll_s=args.poll or None)
            finally:
                stop.set()
                if watcher:
                    watcher.close()
                if timer:
                    timer.cancel()
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
