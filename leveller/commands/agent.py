"""Run the host agent: count job iterations from logs, report flows, apply DSCP levels per flow.

Every --interval the agent reads the job logs (--log), the per-flow byte
counters of the eBPF datapath (--dev), sends a report to the controller and
writes the returned levels as DSCP rewrites into the datapath. Levels live
until the controller's lease after the decision that made them: with no fresh
decision by then (controller gone, refusing us, or its decision loop stalled)
every rewrite is removed (no priorities rather than stale ones). The kernel
program and the RDMA shim hold the same deadline themselves, so the marks end
on time even if this agent is killed. Flows belong to jobs by cgroup
(--job-cgroup) or port range (--job-ports; the job emulator's workers listen
on --port + rank).

With --overlap the agent applies the overlap rule: a job that announces a
communication phase in its log (leveller-comm ... wait=W: `leveller job --slack`,
or `communication_started()` of the hook) has its flows demoted to the lowest
level for W seconds, then back to the controller's level (never beyond the
lease). With --shift-dir DIR, CASSINI's time shifts (controller --policy cassini)
are written to DIR/JOB.shift, which the job emulator (--shift-file) and the hook
(LEVELLER_SHIFT_FILE) follow.

With --phase-demotion (the default) a flow moved to a lower level keeps its level until its
communication phase has ended: its byte counter stopped growing for one --poll
interval, or its job logged an iteration end; at most --demote-wait-max
seconds (default 1) and never beyond the lease of the level it keeps. A
promotion applies at once. Under strict priority a TCP flow demoted mid-transfer
otherwise loses its ACK clock and waits out a retransmission timeout. With
--rto-min-ms MS the routes toward the job peers (the destinations of the job
flows on --dev) get an RTO minimum of MS milliseconds (Linux: 200) while the
agent lives: a helper process puts them back when the agent exits or dies
(leveller.agent.rto_min says why a route metric, and what is left if the
helper itself is killed with SIGKILL).

Log lines are checked with the controller's rules (job name, iteration count,
time); a bad line is skipped, logged (rate-limited) and counted
(leveller_agent_rejected_total on --metrics-port), and the host's other jobs
go on. Logs are followed from their end (after reading their first and last
64 KiB: where jobs log their start and their latest count); --from-start reads
the whole backlog, 1 MiB per poll.

Several controllers (--controller a:port,b:port, same secret and settings):
the agent reports to the first that answers and stays with it; when it stops
answering (no connection, or no answer within --timeout), the same report goes
to the next one, cycling through the list. The levels in hand are kept while
the new controller learns this host's flows (at most until their lease ends).
The active controller is named in the --json lines ("controller") and in the
metric leveller_agent_controller{address=...}; leveller_agent_failovers_total
counts the moves.

examples:
  leveller agent --controller 10.0.0.254:50051 --host h1 --log /tmp/j1.log \\
      --job-ports j1=47000-47001 --dev h1-eth0 --netns h1
  leveller agent --controller 10.0.0.250:50051,10.0.0.251:50051 --timeout 0.5 \\
      --log /tmp/j1.log --job-ports j1=47000-47001 --dev eth0 --json
  leveller agent --controller 127.0.0.1:50051 --log gpt=/var/log/train.log \\
      --pattern '\\| step (?P<iter>\\d+)/' --ideal-time gpt=1.2 --metrics-port 9110
  leveller agent --controller 127.0.0.1:50051 --log /tmp/j1.log --job-ports j1=47000-47001 \\
      --dev eth0 --netns h1 --overlap --shift-dir /tmp/shifts
  leveller agent --controller 10.0.0.254:50051 --log /tmp/big.log --job-weight big=4
  leveller agent --controller 10.0.0.254:50051 --log /tmp/j1.log --job-ports j1=47000-47001 \\
      --dev eth0 --netns h1 --phase-demotion --demote-wait-max 0.5 --rto-min-ms 10
  leveller agent --config examples/config/agent.toml --interval 0.5
  leveller agent --controller ctl.lab:50051 --host h1 --tls-cert tls/h1.pem --tls-key tls/h1.key \\
      --tls-ca tls/ca.pem --log /tmp/j1.log

With --tls-* the agent talks mutual TLS (see `leveller certs init`); the controller accepts its
reports only for the host its certificate names. A controller in shadow mode (--mode shadow)
says so in every reply: the agent then writes no DSCP and touches no QP, and marks again as
soon as a reply says otherwise (no restart).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from leveller.agent import app

if TYPE_CHECKING:
    from leveller.agent.metrics import Rejections
    from leveller.agent.service import StepResult

# the agent is built in leveller.agent.app; these names stay for the tests that use them from here
_trace_file, _traced, _phase_demotion, check_names = app.trace_file, app.traced, app.phase_demotion, app.check_names


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.config import add_config_option

    app.add_options(parser)  # the flags of AgentConfig, one per field
    add_config_option(parser, "agent")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = app.AgentConfig.from_namespace(args)

    def on_step(r: StepResult, rejected: Rejections) -> None:
        if cfg.json:
            print(json.dumps(app.step_line(r, rejected)), flush=True)
        elif (text := app.step_text(r)) is not None:
            print(text, flush=True)

    app.run_agent(cfg, on_step)
    return 0
