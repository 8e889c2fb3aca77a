"""The controller as a process runs it, built from one typed configuration: the composition root.

``ControllerConfig`` holds every option of `leveller controller` under its flag's name (--metrics-port
is ``metrics_port``), the values the command line and a --config TOML file fill alike (leveller.config).
``check`` refuses a bad configuration with a UserError naming the option, before any file, socket or
SDN app is touched (also what `leveller config check` runs). ``build_controller`` makes the Controller
(policy, paths, level map, rate and switching rules, pruning worker, GC pacing) and ``start`` serves it:
gRPC (shared secret or mutual TLS), Prometheus metrics, enforcement checks and, with --etcd, leader
election. The CLI (leveller.commands.controller) and the benchmarks (leveller.bench.controller_scale)
both build the controller here, so what they run cannot drift apart.

This module sits above leveller.rpc (it serves the controller over it): nothing in leveller.controller
imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveller.core.switching import DEFAULT as DEFAULT_SWITCHING
from leveller.errors import UserError

if TYPE_CHECKING:
    from leveller.controller.ha import HaController
    from leveller.controller.paths import PathProvider
    from leveller.controller.service import Controller
    from leveller.core.qos import LevelMap
    from leveller.rpc.loopserver import LoopServer
    from leveller.rpc.replay import ReplayGuard

VERIFY_INTERVAL_S = 0.5  # at most two enforcement checks a second (each reads every switch port's tc counters)


@dataclass
class ControllerConfig:
    """Every option of `leveller controller`, named after its flag, with the flag's default."""

    listen: str = "127.0.0.1:50051"
    secret_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    policy: str = "leveller"
    levels: int = 2
    tau: float = 1.0
    on_iteration: bool = False
    lease: float | None = None
    stale_after: float | None = None
    paths: str = "single"
    sdn_token_file: str | None = None
    reprofile: float | None = None
    reprofile_drift: float | None = None
    rate_window: str | None = None
    rate_half_life: str | None = None
    switch_delta: float = DEFAULT_SWITCHING.delta
    switch_dwell: float = DEFAULT_SWITCHING.dwell
    job_weight: list[str] = field(default_factory=list)
    verify: bool | None = None
    verify_window: float | None = None
    job_shape: list[str] = field(default_factory=list)
    mode: str = "enforce"
    metrics_port: int = 0
    metrics_addr: str = "127.0.0.1"
    duration: float | None = None
    json: bool = False
    etcd: str | None = None
    etcd_ttl: int | None = None
    etcd_prefix: str = "/leveller/"
    etcd_cacert: str | None = None
    etcd_cert: str | None = None
    etcd_key: str | None = None
    etcd_timeout: float | None = None
    advertise: str | None = None
    name: str | None = None

    @classmethod
    def from_namespace(cls, args: argparse.Namespace | Any) -> ControllerConfig:
        """The configuration of parsed options (attributes it lacks keep their defaults)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


def check_rate_options(cfg: ControllerConfig) -> tuple[float | None, float | None]:
    """(window, half-life) in seconds from --rate-window / --rate-half-life (between tau and a day, not
    both); --reprofile-drift in range."""
    from leveller.options import rate_options

    window, half_life = (None if v is None else float(v) for v in rate_options(cfg))
    for option, value in (("--rate-window", window), ("--rate-half-life", half_life)):
        if value is not None and not cfg.tau <= value <= 86400:
            raise UserError(f"{option} {value:g}: must be between --tau ({cfg.tau:g} s) and 86400 seconds "
                            f"(e.g. {option} 30)")
    drift = cfg.reprofile_drift
    if drift is not None and not (math.isfinite(drift) and 0.01 <= drift <= 10):
        raise UserError(f"--reprofile-drift {drift:g}: a relative tolerance in [0.01, 10] (e.g. 0.25 = 25%)")
    return window, half_life


def verify_window(cfg: ControllerConfig) -> float:
    """--verify-window in seconds (default max(2 x tau, 2 s)), between --tau and an hour."""
    window = cfg.verify_window if cfg.verify_window is not None else max(2 * cfg.tau, 2.0)
    if not (window >= cfg.tau and window <= 3600):
        raise UserError(f"--verify-window {window:g}: must be between --tau ({cfg.tau:g}) and 3600 seconds")
    return window


def etcd_ttl(cfg: ControllerConfig) -> int:
    """--etcd-ttl, or --lease / 2 rounded down (the agents' lease: --lease, default 3 x tau)."""
    lease = cfg.lease if cfg.lease is not None else 3 * cfg.tau
    ttl = cfg.etcd_ttl if cfg.etcd_ttl is not None else max(1, math.floor(lease / 2))
    if ttl < 1 or 2 * ttl > lease + 1e-9:
        raise UserError(f"--etcd-ttl {ttl}: must be whole seconds >= 1 and at most half of --lease ({lease:g} s), "
                        "so a new leader decides before the agents' levels run out; e.g. --lease 4 --etcd-ttl 2")
    return ttl


def check_etcd(cfg: ControllerConfig) -> None:
    """The etcd options' checks that need nothing but the options (UserError naming the option)."""
    from leveller.controller.etcdstore import parse_endpoints
    from leveller.controller.hastate import check_prefix
    from leveller.model.limits import NAME_PATTERN, NAME_RULE
    from leveller.rpc.failover import parse_addresses

    given = [o for o in ("etcd_ttl", "etcd_cacert", "etcd_cert", "etcd_key", "etcd_timeout", "advertise", "name")
             if getattr(cfg, o) is not None]
    if cfg.etcd is None:
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} needs --etcd URL[,URL...]")
        return
    try:
        endpoints = parse_endpoints(cfg.etcd)
        check_prefix(cfg.etcd_prefix)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if (cfg.etcd_cert is None) != (cfg.etcd_key is None):
        raise UserError("--etcd-cert and --etcd-key go together (a client certificate and its key)")
    if (cfg.etcd_cacert or cfg.etcd_cert) and endpoints[0].scheme != "https":
        raise UserError(f"--etcd-cacert/--etcd-cert need https:// URLs in --etcd (got {cfg.etcd!r})")
    if cfg.etcd_timeout is not None and not (math.isfinite(cfg.etcd_timeout) and 0.05 <= cfg.etcd_timeout <= 10):
        raise UserError(f"--etcd-timeout {cfg.etcd_timeout:g}: must be 0.05..10 seconds")
    etcd_ttl(cfg)
    if cfg.advertise is not None:
        parse_addresses(cfg.advertise, "--advertise")
    if cfg.name is not None and not NAME_PATTERN.fullmatch(cfg.name):
        raise UserError(f"--name {cfg.name!r}: {NAME_RULE}")


def check(cfg: ControllerConfig) -> None:
    """Every check of the options that needs nothing but the options (no file, network or SDN app): what
    `start` refuses and `leveller config check` runs on a file. UserError naming the option."""
    from leveller.model.limits import MAX_LEASE_S, MAX_LEVELS, MAX_TAU_S, MIN_TAU_S
    from leveller.model.shape import parse_job_shape
    from leveller.options import parse_weights, switching_rule

    if not (math.isfinite(cfg.tau) and MIN_TAU_S <= cfg.tau <= MAX_TAU_S):
        raise UserError(f"--tau {cfg.tau:g}: must be {MIN_TAU_S:g}..{MAX_TAU_S:g} seconds (decisions at "
                        "iteration ends: --on-iteration)")
    if cfg.lease is not None and not (math.isfinite(cfg.lease) and cfg.tau < cfg.lease <= MAX_LEASE_S):
        raise UserError(f"--lease {cfg.lease:g}: must be longer than --tau ({cfg.tau:g}) and at most "
                        f"{MAX_LEASE_S:g} seconds (agents refuse a longer lease)")
    if cfg.lease is None and 3 * cfg.tau > MAX_LEASE_S:  # unreachable while MAX_TAU_S <= MAX_LEASE_S / 3
        raise UserError(f"--tau {cfg.tau:g}: the default lease 3 x tau exceeds {MAX_LEASE_S:g} s; give --lease")
    if cfg.stale_after is not None and not (math.isfinite(cfg.stale_after)
                                            and cfg.tau < cfg.stale_after <= MAX_LEASE_S):
        raise UserError(f"--stale-after {cfg.stale_after:g}: must be longer than --tau ({cfg.tau:g}) and at "
                        f"most {MAX_LEASE_S:g} seconds")
    if not 1 <= cfg.levels <= MAX_LEVELS:
        raise UserError(f"--levels {cfg.levels}: must be 1..{MAX_LEVELS}")
    if cfg.reprofile is not None and not (math.isfinite(cfg.reprofile) and 0 < cfg.reprofile <= 86400 * 365):
        raise UserError(f"--reprofile {cfg.reprofile:g}: must be > 0 seconds (at most a year)")
    if not 0 <= cfg.metrics_port <= 65535:
        raise UserError(f"--metrics-port {cfg.metrics_port}: must be a TCP port 0..65535 (0 = off)")
    for item in cfg.job_shape:
        parse_job_shape(item)
    check_rate_options(cfg)
    switching_rule(cfg)
    parse_weights(cfg.job_weight)
    verify_window(cfg)
    check_etcd(cfg)


def build_controller(cfg: ControllerConfig, paths: PathProvider, level_map: LevelMap, *, pruner: Any = None,
                     gc_pacer: Any = None, flow_claims: bool = False) -> Controller:
    """The Controller of a checked ``cfg`` deciding over ``paths`` with ``level_map``; ``pruner`` (a
    PruneWorker) prunes large decisions in a worker process, ``gc_pacer`` paces the garbage collector."""
    from leveller.controller.service import Controller
    from leveller.core.levels import prune
    from leveller.core.policies import make_policy
    from leveller.model.shape import parse_job_shape
    from leveller.options import parse_weights, switching_rule

    window_s, half_life_s = check_rate_options(cfg)
    return Controller(paths, make_policy(cfg.policy, tau=cfg.tau), level_map, cfg.tau, cfg.lease,
                      stale_after_s=cfg.stale_after, reprofile_interval_s=cfg.reprofile,
                      shapes=dict(parse_job_shape(s) for s in cfg.job_shape), on_iteration=cfg.on_iteration,
                      weights=parse_weights(cfg.job_weight), rate_window=window_s, rate_half_life=half_life_s,
                      drift_tolerance=cfg.reprofile_drift, mode=cfg.mode, gc_pacer=gc_pacer,
                      pruner=pruner if pruner is not None else prune, switching=switching_rule(cfg),
                      flow_claims=flow_claims)


def ha_handler(cfg: ControllerConfig, ctl: Controller) -> tuple[HaController | None, ReplayGuard | None]:
    """(the HaController around ``ctl``, the replay memory to serve with), or (None, None) without --etcd."""
    if cfg.etcd is None:
        return None, None
    from leveller.controller.etcdstore import EtcdStore, EtcdTls, parse_endpoints
    from leveller.controller.ha import HaController, HaMetrics
    from leveller.controller.hastate import Layout
    from leveller.rpc.replay import ReplayGuard

    metrics = HaMetrics(ctl.metrics.registry)
    tls = EtcdTls(cfg.etcd_cacert, cfg.etcd_cert, cfg.etcd_key) if cfg.etcd_cacert else None
    ttl = etcd_ttl(cfg)
    timeout = cfg.etcd_timeout if cfg.etcd_timeout is not None else min(1.0, ttl / 4)
    store = EtcdStore(parse_endpoints(cfg.etcd), timeout, tls, on_call=metrics.on_call)
    replay = ReplayGuard()
    name = cfg.name or re.sub(r"[^A-Za-z0-9_.:-]", "-", socket.gethostname().split(".")[0])[:64] or "controller"
    ha = HaController(ctl, store, name, cfg.advertise or cfg.listen, ttl, Layout(cfg.etcd_prefix),
                      replay=replay, metrics=metrics)
    return ha, replay


def advertised(cfg: ControllerConfig, port: int) -> str:
    """The address standbys name for this controller: --advertise, else --listen with the bound port
    (refused for a wildcard address, which no agent can dial)."""
    if cfg.advertise:
        return str(cfg.advertise)
    host = cfg.listen.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]", ""):
        raise UserError(f"--listen {cfg.listen} with --etcd: give --advertise HOST:PORT (the address agents dial)")
    return f"{host}:{port}"


@dataclass
class ControllerApp:
    """A started controller: its Controller, gRPC server (on ``port``) and what else runs for it."""

    config: ControllerConfig
    controller: Controller
    server: LoopServer
    port: int
    level_map: LevelMap
    pruner: Any
    gc_pacer: Any
    ha: HaController | None = None
    metrics_server: Any = None

    def run(self, stop: threading.Event, on_step: Callable[[object, str | None], None] | None = None,
            clock: Callable[[], float] = time.time) -> None:
        """Decide every tau (or, with --etcd, while elected) until ``stop`` is set; then ``close``."""
        timer = threading.Timer(self.config.duration, stop.set) if self.config.duration else None
        if timer:
            timer.start()
        try:
            if self.ha is not None:
                self.ha.address = advertised(self.config, self.port)
                self.ha.start()
            (self.ha or self.controller).run(stop, clock, on_step)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            if timer:
                timer.cancel()
            self.close()

    def banner(self) -> str:
        """The line printed once the controller listens (without --json)."""
        cfg, shadow = self.config, "SHADOW mode: nothing is marked, " if self.config.mode == "shadow" else ""
        return (f"controller listening on port {self.port} ({shadow}policy {cfg.policy}, K={self.level_map.levels}, "
                f"tau={cfg.tau}s, lease={self.controller.lease_s}s)"
                + (f", metrics on :{cfg.metrics_port}" if cfg.metrics_port else ""))

    def decision_line(self, error: str | None, now: float) -> dict[str, Any]:
        """The --json line of the latest step (the controller's JSON contract, one object per decision)."""
        ctl, d = self.controller, self.controller.decision
        mism = [m.__dict__ for m in ctl.enforcement.mismatches()] if ctl.enforcement is not None else []
        jobs = {j.name: {"ideal": j.ideal_time, "profiling": j.profiling, "weight": j.weight} for j in ctl.last_jobs}
        line = {"t": round(now, 4), "epoch": ctl.epoch, "mode": self.config.mode, "error": error,
                "order": d.order if d else None,
                "rates": d.rates if d else {}, "jobs": jobs, "enforcement_mismatches": mism,
                "levels": {k.label(): v for k, v in d.levels.items()} if d else {}}
        plan = ctl.shift_planner.plan if ctl.shift_planner is not None else None
        if plan is not None:
            line["shifts"] = {"plan": plan.plan, "s": {j: round(v, 4) for j, v in plan.shifts.items()}}
        return line

    def decision_text(self, error: str | None) -> list[str]:
        """The lines printed for the latest step without --json (mismatches, a failure, or the order)."""
        ctl, d = self.controller, self.controller.decision
        mismatched = ctl.enforcement.mismatches() if ctl.enforcement is not None else []
        lines = [f"ENFORCEMENT MISMATCH {m.describe(ctl.enforcement.window_s)}" for m in mismatched
                 if ctl.enforcement is not None]
        if error:
            lines.append(f"step failed (levels kept): {error}")
        elif d and d.levels and not mismatched:
            rates = ", ".join(f"{j}={r:.3f}" if r is not None else f"{j}=profiling" for j, r in d.rates.items())
            lines.append(f"epoch {ctl.epoch}: order {d.order} R {rates}; {len(d.levels)} flows")
        return lines

    def close(self) -> None:
        """Stop serving and end what was started (the leader's lease is revoked: a standby takes over)."""
        if self.ha is not None:
            self.ha.close()
        self.server.stop(grace=1).wait()
        self.pruner.close()
        if self.gc_pacer is not None:
            self.gc_pacer.uninstall()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()


def start(cfg: ControllerConfig, *, paths: PathProvider | None = None, secret: bytes | None = None,
          level_map: LevelMap | None = None, pace_gc: bool = True) -> ControllerApp:
    """Check ``cfg``, build the controller and serve it; UserError naming the option on a bad one.

    ``paths`` (else from --paths), ``secret`` (else --secret-file or $LEVELLER_SECRET) and ``level_map``
    (else the SDN app's or the default of --levels) let a benchmark run the same controller on a
    generated cluster. ``pace_gc``: this process is the controller's (leveller.controller.gcpacing)."""
    from leveller.controller.gcpacing import GcPacer
    from leveller.controller.paths import SdnPaths, level_map_for, path_provider
    from leveller.controller.prune_worker import PruneWorker
    from leveller.rpc.auth import load_secret
    from leveller.rpc.tls import tls_from_args
    from leveller.rpc.transport import serve

    check(cfg)
    tls = tls_from_args(cfg)
    if secret is None:
        secret = load_secret(cfg.secret_file, optional=tls is not None)
    if paths is None:
        sdn_token = None
        if cfg.sdn_token_file:
            from sdn.token import load_token

            sdn_token = load_token(cfg.sdn_token_file, "--sdn-token-file")
        paths = path_provider(cfg.paths, sdn_token)
    if level_map is None:
        level_map = level_map_for(paths, cfg.levels)
    if cfg.verify and not isinstance(paths, SdnPaths):
        raise UserError("--verify needs --paths sdn:URL|RUN_DIR (the SDN app reads the switch queues)")
    window = verify_window(cfg)
    pruner = PruneWorker()  # large decisions are pruned in a worker process (see prune_worker)
    pacer = GcPacer().install() if pace_gc else None
    ctl = build_controller(cfg, paths, level_map, pruner=pruner, gc_pacer=pacer,
                           flow_claims=tls is not None)  # a host's certificate proves it: its addresses are its own
    if isinstance(paths, SdnPaths) and cfg.verify is not False:
        from leveller.controller.enforcement import EnforcementMonitor, SdnQueues

        ctl.enforcement = EnforcementMonitor(SdnQueues(paths.client), level_map, window,
                                             registry=ctl.metrics.registry, interval_s=VERIFY_INTERVAL_S)

    def give_up() -> None:
        pruner.close()
        if pacer is not None:
            pacer.uninstall()

    try:
        ha, replay = ha_handler(cfg, ctl)  # with --etcd: only the elected leader decides and answers
        server, port = serve(ha or ctl, cfg.listen, secret, on_reject=ctl.reject, tls=tls, replay=replay)
    except (OSError, RuntimeError) as exc:
        give_up()
        raise UserError(f"--listen {cfg.listen}: cannot listen ({exc})") from None
    app = ControllerApp(cfg, ctl, server, port, level_map, pruner, pacer, ha=ha)
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        try:
            app.metrics_server, _ = start_http_server(cfg.metrics_port, addr=cfg.metrics_addr,
                                                      registry=ctl.metrics.registry)
        except (OSError, OverflowError) as exc:  # socket.gaierror is an OSError: an unknown --metrics-addr
            server.stop(grace=0)
            give_up()
            raise UserError(f"--metrics-port {cfg.metrics_port} --metrics-addr {cfg.metrics_addr}: "
                            f"cannot listen ({exc})") from None
    return app
