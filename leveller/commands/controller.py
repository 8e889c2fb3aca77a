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
half-lives. See docs/architecture.md "Which R". --job-weight JOB=W ranks that job by R / W.

With --paths sdn:..., every tau (at most twice a second: reading the queues runs `tc` per
switch port) the controller also checks that the switch queues took the bytes the
hosts marked for them: per switch port and level, the agents' bytes per DSCP
(eBPF counters) on the flows crossing the port against what the port's queue for that
level counted, over the last --verify-window seconds. A queue that took less than half
is a mismatch (a wrong DSCP -> queue map there turns LEVELLER off silently): shown by
`leveller status`, logged, and in the metric leveller_enforcement_mismatch{switch,port,
level}; it clears once the queue takes 80% again. --no-verify turns the check off.

Any gRPC client can call it: the service is leveller.v1.Controller (leveller/rpc/leveller.proto),
with server reflection and grpc.health.v1 on (docs/api.md, "The controller's gRPC service"), e.g.
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
from typing import Any

from leveller.model.limits import POLICIES


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
    from leveller.commands.options import add_rate_options, add_switching_options
    from leveller.controller.app import ControllerConfig

    add_rate_options(parser, "seconds (>= --tau)", "rank")
    add_switching_options(parser, "seconds", ControllerConfig.switch_delta, ControllerConfig.switch_dwell)
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
    from leveller.config import add_config_option

    add_etcd_options(parser)  # --etcd and friends: leader election and state on etcd
    add_config_option(parser, "controller")
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace | Any) -> None:
    """Every check of the options that needs nothing but the options (leveller.controller.app.check)."""
    from leveller.controller.app import ControllerConfig, check

    check(ControllerConfig.from_namespace(args))


def run(args: argparse.Namespace) -> int:
    from leveller.controller.app import ControllerConfig, start

    cfg = ControllerConfig.from_namespace(args)
    app = start(cfg)

    def on_step(decision: object, error: str | None) -> None:
        if cfg.json:
            print(json.dumps(app.decision_line(error, time.time())), flush=True)
        else:
            for line in app.decision_text(error):
                print(line, flush=True)

    if not cfg.json:
        print(app.banner(), flush=True)
    app.run(threading.Event(), on_step)
    return 0
