"""Run the central controller: every tau, rank jobs by R and push K priority levels to the agents.

Agents (`leveller agent`) report each job's iterations and flows over gRPC,
authenticated with a shared secret (--secret-file or LEVELLER_SECRET, same on
every host). Flow paths come from --paths:
  single[:LINK]              every flow shares one bottleneck (default)
  topology:PRESET_OR_FILE    deterministic ECMP over a topology (as the SDN app picks)
  sdn:URL | sdn:RUN_DIR      ask the running SDN app (source of truth; its DSCP map is used too)

Policies: leveller (lowest R first), crux (static, by GPU intensity G*C/M from
--job-shape), fair (no priority), cassini (no priority; jobs sharing a link are
interleaved in time: whenever the jobs on the links change, one time shift per
job from leveller.core.cassini, sent to the agents, which pass it to the jobs
through --shift-dir; needs --job-shape JOB=C:M[:G[:S]] and ideal times).

R is the paper's, cumulative since each job started, unless --rate-window S (R over
the last S seconds) or --rate-half-life S (iterations and time decayed with half-life
S) asks for one that forgets: after a disturbance (a job starved for a while by
traffic LEVELLER does not manage) the cumulative R keeps favouring that job until
its deficit is repaid, at the others' expense; a decayed R lets it go after a few
half-lives. See README "Which R". --job-weight JOB=W ranks that job by R / W.

With --paths sdn:..., every tau (at most twice a second: reading the queues runs `tc` per
switch port) the controller also checks that the switch queues took the bytes the
hosts marked for them: per switch port and level, the agents' bytes per DSCP
(eBPF counters) on the flows crossing the port against what the port's queue for that
level counted, over the last --verify-window seconds. A queue that took less than half
is a mismatch (a wrong DSCP -> queue map there turns LEVELLER off silently): shown by
`leveller status`, logged, and in the metric leveller_enforcement_mismatch{switch,port,
level}; it clears once the queue takes 80% again. --no-verify turns the check off.

Any gRPC client can call it: the service is leveller.v1.Controller (leveller/rpc/leveller.proto),
with server reflection and grpc.health.v1 on (README "Any gRPC client"), e.g.
  grpcurl -plaintext 127.0.0.1:50051 list
  grpcurl -plaintext 127.0.0.1:50051 describe leveller.v1.Controller
Calls to leveller.v1.Controller need the shared secret's signature or a client certificate;
health and reflection are open. Under mutual TLS a host reports as the host its certificate names,
and a flow's source address belongs to the host that first reported a flow from it (while that
host is live): another host's claim of such a flow is refused and counted
(leveller_requests_rejected_total{reason="flow_claim"}).

examples:
  leveller controller --secret-file /etc/leveller/secret --tau 1 --levels 2
  leveller controller --listen 10.0.0.254:50051 --paths sdn:http://127.0.0.1:8080 --metrics-port 9109
  leveller controller --policy cassini --paths sdn:/run/leveller/lab --job-shape j1=0.5:0.5 \
      --job-shape j2=0.5:0.5
  leveller controller --rate-half-life 10 --job-weight big=4 --reprofile-drift 0.25
  leveller controller --config examples/config/controller.toml --mode shadow
  leveller controller --tls-cert tls/controller.pem --tls-key tls/controller.key --tls-ca tls/ca.pem
  leveller controller --listen 10.0.0.1:50051 --etcd http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from leveller.errors import UserError
from leveller.model.limits import POLICIES

VERIFY_INTERVAL_S = 0.5  # at most two enforcement checks a second (each reads every switch port's tc counters)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="127.0.0.1:50051", help="gRPC address (default 127.0.0.1:50051)")
    parser.add_argument("--secret-file", help="file holding the shared secret (else $LEVELLER_SECRET; "
                        "optional with --tls-*)")
    from leveller.rpc.tls import add_tls_options

    add_tls_options(parser, "controller")
    parser.add_argument("--policy", default="leveller", choices=POLICIES)
    parser.add_argument("--levels", type=int, default=2, metavar="K", help="switch priority levels (default 2)")
    parser.add_argument("--tau", type=float, default=1.0, help="seconds between decisions (default 1)")
    parser.add_argument("--on-iteration", action="store_true",
                        help="also decide at once when an agent reports a finished iteration (the paper's "
                        "tau = 0; pair with `leveller agent --poll`), not only every --tau")
    parser.add_argument("--lease", type=float, help="seconds agents keep levels without news (default 3 x tau)")
    parser.add_argument("--stale-after", type=float, metavar="S",
                        help="forget an agent's jobs and flows when its last report is older (default 3 x tau)")
    parser.add_argument("--paths", default="single", help="path source (see above; default single)")
    parser.add_argument("--sdn-token-file", metavar="FILE",
                        help="bearer token of an SDN app listening beyond loopback (its --api-token-file), e.g. "
                        "--paths sdn:http://10.0.0.254:8181 --sdn-token-file /etc/leveller/sdn-token")
    parser.add_argument("--reprofile", type=float, metavar="S",
                        help="re-measure ideal times about every S seconds (jittered); default never")
    parser.add_argument("--reprofile-drift", type=float, metavar="TOL",
                        help="profile a job again when its iterations say its time alone moved by more than "
                        "TOL (e.g. 0.25 = 25%%): recent iterations faster than ideal / (1 + TOL), or, while it "
                        "holds the top priority, slower than ideal x (1 + TOL); default off")
    from leveller.commands.options import add_rate_options

    add_rate_options(parser, "seconds (>= --tau)", "rank")
    from leveller.commands.options import add_switching_options
    from leveller.core.switching import DEFAULT

    add_switching_options(parser, "seconds", DEFAULT.delta, DEFAULT.dwell)
    parser.add_argument("--job-weight", action="append", default=[], metavar="JOB=W",
                        help="operator weight of a job: leveller ranks by R / W, so weight 4 keeps a job "
                        "ahead until its R is 4 times the others' (default 1 = the paper; wins over a "
                        "weight the job's agent declares), e.g. --job-weight big=4")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                        help="check every step that switch queues took the bytes marked for their level "
                        "(default: on with --paths sdn:..., which it needs)")
    parser.add_argument("--verify-window", type=float, metavar="S",
                        help="compare marked and queued bytes over the last S seconds (default max(2 x tau, "
                        "2 s); a mismatch shows within S + tau), e.g. --verify-window 3")
    parser.add_argument("--job-shape", action="append", default=[], metavar="JOB=C:M[:G]",
                        help="compute and communication seconds per iteration (GPUs, and slack: how long "
                        "before the compute ends the communication starts) of a job: what --policy crux ranks "
                        "by (GPU intensity G*C/M; jobs without one rank last) and --policy cassini places")
    parser.add_argument("--mode", choices=("enforce", "shadow"), default="enforce",
                        help="enforce (default): agents mark the levels; shadow: decide and report as usual, but "
                        "agents count only and write no DSCP nor touch any QP; `leveller status` and the metrics "
                        "show the levels that would apply and the bytes each job sent on each (the mode travels in "
                        "every reply: restart in enforce mode, agents keep running), e.g. --mode shadow")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port")
    parser.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    parser.add_argument("--json", action="store_true", help="one JSON object per decision on stdout")
    from leveller.commands.controller_ha import add_etcd_options

    add_etcd_options(parser)  # --etcd and friends: leader election and state on etcd
    from leveller.config import add_config_option

    add_config_option(parser, "controller")
    parser.set_defaults(func=run)


def check_rate_options(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """(window, half-life) in seconds from --rate-window / --rate-half-life (between tau and a day, not
    both); --reprofile-drift in range."""
    import math

    from leveller.commands.options import rate_options

    window, half_life = (None if v is None else float(v) for v in rate_options(args))
    for option, value in (("--rate-window", window), ("--rate-half-life", half_life)):
        if value is not None and not args.tau <= value <= 86400:
            raise UserError(f"{option} {value:g}: must be between --tau ({args.tau:g} s) and 86400 seconds "
                            f"(e.g. {option} 30)")
    drift = args.reprofile_drift
    if drift is not None and not (math.isfinite(drift) and 0.01 <= drift <= 10):
        raise UserError(f"--reprofile-drift {drift:g}: a relative tolerance in [0.01, 10] (e.g. 0.25 = 25%)")
    return window, half_life


def verify_window(args: argparse.Namespace) -> float:
    """--verify-window in seconds (default max(2 x tau, 2 s)), between --tau and an hour."""
    window = args.verify_window if args.verify_window is not None else max(2 * args.tau, 2.0)
    if not (window >= args.tau and window <= 3600):
        raise UserError(f"--verify-window {window:g}: must be between --tau ({args.tau:g}) and 3600 seconds")
    return window


def check_args(args: argparse.Namespace) -> None:
    """Every check of the options that needs nothing but the options (no file, network or SDN app): what
    `run` refuses at start and `leveller config check` runs on a file. UserError naming the option."""
    import math

    from leveller.model.limits import MAX_LEASE_S, MAX_LEVELS, MAX_TAU_S, MIN_TAU_S
    from leveller.model.shape import parse_job_shape

    if not (math.isfinite(args.tau) and MIN_TAU_S <= args.tau <= MAX_TAU_S):
        raise UserError(f"--tau {args.tau:g}: must be {MIN_TAU_S:g}..{MAX_TAU_S:g} seconds (decisions at "
                        "iteration ends: --on-iteration)")
    if args.lease is not None and not (math.isfinite(args.lease) and args.tau < args.lease <= MAX_LEASE_S):
        raise UserError(f"--lease {args.lease:g}: must be longer than --tau ({args.tau:g}) and at most "
                        f"{MAX_LEASE_S:g} seconds (agents refuse a longer lease)")
    if args.lease is None and 3 * args.tau > MAX_LEASE_S:  # unreachable while MAX_TAU_S <= MAX_LEASE_S / 3
        raise UserError(f"--tau {args.tau:g}: the default lease 3 x tau exceeds {MAX_LEASE_S:g} s; give --lease")
    if args.stale_after is not None and not (math.isfinite(args.stale_after)
                                             and args.tau < args.stale_after <= MAX_LEASE_S):
        raise UserError(f"--stale-after {args.stale_after:g}: must be longer than --tau ({args.tau:g}) and at "
                        f"most {MAX_LEASE_S:g} seconds")
    if not 1 <= args.levels <= MAX_LEVELS:
        raise UserError(f"--levels {args.levels}: must be 1..{MAX_LEVELS}")
    if args.reprofile is not None and not (math.isfinite(args.reprofile) and 0 < args.reprofile <= 86400 * 365):
        raise UserError(f"--reprofile {args.reprofile:g}: must be > 0 seconds (at most a year)")
    if not 0 <= args.metrics_port <= 65535:
        raise UserError(f"--metrics-port {args.metrics_port}: must be a TCP port 0..65535 (0 = off)")
    for item in args.job_shape:
        parse_job_shape(item)
    check_rate_options(args)
    from leveller.commands.options import parse_weights, switching_rule

    switching_rule(args)
    parse_weights(args.job_weight)
    verify_window(args)
    from leveller.commands.controller_ha import check_etcd_args

    check_etcd_args(args)


def run(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from leveller.controller.gcpacing import GcPacer
    from leveller.controller.paths import SdnPaths, level_map_for, path_provider
    from leveller.controller.prune_worker import PruneWorker
    from leveller.controller.service import Controller
    from leveller.core.policies import make_policy
    from leveller.model.shape import parse_job_shape
    from leveller.rpc.auth import load_secret
    from leveller.rpc.transport import serve

    check_args(args)
    shapes = dict(parse_job_shape(s) for s in args.job_shape)
    window_s, half_life_s = check_rate_options(args)
    from leveller.commands.options import switching_rule

    switching = switching_rule(args)
    from leveller.commands.options import parse_weights

    weights = parse_weights(args.job_weight)
    from leveller.rpc.tls import tls_from_args

    tls = tls_from_args(args)
    secret = load_secret(args.secret_file, optional=tls is not None)
    sdn_token = None
    if args.sdn_token_file:
        from sdn.token import load_token

        sdn_token = load_token(args.sdn_token_file, "--sdn-token-file")
    paths = path_provider(args.paths, sdn_token)
    level_map = level_map_for(paths, args.levels)
    if args.verify and not isinstance(paths, SdnPaths):
        raise UserError("--verify needs --paths sdn:URL|RUN_DIR (the SDN app reads the switch queues)")
    window = verify_window(args)
    pruner = PruneWorker()  # large decisions are pruned in a worker process (see prune_worker)
    ctl = Controller(paths, make_policy(args.policy, tau=args.tau), level_map, args.tau, args.lease,
                     stale_after_s=args.stale_after,
                     reprofile_interval_s=args.reprofile, shapes=shapes,
                     on_iteration=args.on_iteration, weights=weights, rate_window=window_s,
                     rate_half_life=half_life_s, drift_tolerance=args.reprofile_drift, mode=args.mode,
                     gc_pacer=GcPacer().install(),  # this process is the controller's: see gcpacing
                     pruner=pruner, switching=switching,
                     flow_claims=tls is not None)  # a host's certificate proves it: its addresses are its own
    if isinstance(paths, SdnPaths) and args.verify is not False:
        from leveller.controller.enforcement import EnforcementMonitor, SdnQueues

        ctl.enforcement = EnforcementMonitor(SdnQueues(paths.client), level_map, window,
                                             registry=ctl.metrics.registry, interval_s=VERIFY_INTERVAL_S)
    try:
        from leveller.commands.controller_ha import ha_handler

        ha, replay = ha_handler(args, ctl)  # with --etcd: only the elected leader decides and answers
        server, port = serve(ha or ctl, args.listen, secret, on_reject=ctl.reject, tls=tls, replay=replay)
    except (OSError, RuntimeError) as exc:
        pruner.close()
        raise UserError(f"--listen {args.listen}: cannot listen ({exc})") from None
    metrics_server = None
    if args.metrics_port:
        try:
            metrics_server, _ = start_http_server(args.metrics_port, addr=args.metrics_addr,
                                                  registry=ctl.metrics.registry)
        except (OSError, OverflowError) as exc:  # socket.gaierror is an OSError: an unknown --metrics-addr
            server.stop(grace=0)
            pruner.close()
            raise UserError(f"--metrics-port {args.metrics_port} --metrics-addr {args.metrics_addr}: "
                            f"cannot listen ({exc})") from None
    stop = threading.Event()

    def on_step(decision: object, error: str | None) -> None:
        d = ctl.decision
        if args.json:
            mism = [m.__dict__ for m in ctl.enforcement.mismatches()] if ctl.enforcement is not None else []
            jobs = {j.name: {"ideal": j.ideal_time, "profiling": j.profiling, "weight": j.weight}
                    for j in ctl.last_jobs}
            line = {"t": round(time.time(), 4), "epoch": ctl.epoch, "mode": args.mode, "error": error,
                    "order": d.order if d else None,
                    "rates": d.rates if d else {}, "jobs": jobs, "enforcement_mismatches": mism,
                    "levels": {k.label(): v for k, v in d.levels.items()} if d else {}}
            plan = ctl.shift_planner.plan if ctl.shift_planner is not None else None
            if plan is not None:
                line["shifts"] = {"plan": plan.plan, "s": {j: round(v, 4) for j, v in plan.shifts.items()}}
            print(json.dumps(line), flush=True)
            return
        mismatched = ctl.enforcement.mismatches() if ctl.enforcement is not None else []
        for m in mismatched:
            print(f"ENFORCEMENT MISMATCH {m.describe(ctl.enforcement.window_s)}", flush=True)
        if error:
            print(f"step failed (levels kept): {error}", flush=True)
        elif d and d.levels and not mismatched:
            rates = ", ".join(f"{j}={r:.3f}" if r is not None else f"{j}=profiling" for j, r in d.rates.items())
            print(f"epoch {ctl.epoch}: order {d.order} R {rates}; {len(d.levels)} flows", flush=True)

    if not args.json:
        shadow = "SHADOW mode: nothing is marked, " if args.mode == "shadow" else ""
        print(f"controller listening on port {port} ({shadow}"
              f"policy {args.policy}, K={level_map.levels}, "
              f"tau={args.tau}s, lease={ctl.lease_s}s)" + (f", metrics on :{args.metrics_port}"
                                                          if args.metrics_port else ""), flush=True)
    timer = threading.Timer(args.duration, stop.set) if args.duration else None
    if timer:
        timer.start()
    try:
        if ha is not None:
            from leveller.commands.controller_ha import advertised

            ha.address = advertised(args, port)
            ha.start()
        (ha or ctl).run(stop, time.time, on_step)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if timer:
            timer.cancel()
        if ha is not None:
            ha.close()  # revokes the lease: a standby takes over at once
        server.stop(grace=1).wait()
        pruner.close()
        if metrics_server is not None:
            metrics_server.shutdown()
    return 0
