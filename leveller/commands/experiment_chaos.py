"""Chaos: the leveller pair on the emulated cluster while its parts are killed and restarted on a schedule.

Builds the demo's cluster (OVS driven by the SDN app, a controller, an agent
with its eBPF marker on every host of a job) and runs the paper's pair (C:M =
1:1 and 1:2 on one bottleneck) under `leveller` twice for --duration seconds:
undisturbed (the baseline), then while --schedule kills parts with SIGKILL and
starts them again. A schedule is TARGET@AT+DOWN,... (seconds after the jobs
start; DOWN seconds dead); targets:
  ovs          ovs-vswitchd (restarted on its database; the SDN app reinstalls its rules)
  sdn          the SDN app (restarted on the same API port)
  controller   the controller (same command line and port)
  agent        the agent of the first job's sender (h1); agent:HOST for another (killed
               while its packets carry a mark, waiting up to 3 s for one)
With controllers on etcd (each run gets three etcd members in a namespace and a standby controller):
  leader       the elected controller (kill -9; restarted, it joins as a standby)
  etcd         one etcd member of three (the raft leader)
  partition    the leader cut from etcd but not from the agents for DOWN seconds
Faults may not overlap and each leaves 5 s to recover before the next one.

Reported: min R of both runs and their ratio; per fault, the time from the
restart until the controller decided again, every job finished an iteration
and marked packets were back (on the agent's own host for an agent fault);
stale marks: packets seen on h4's eth0 with a rewritten DSCP later than one
lease after the last decision, or from a killed agent's host later than one
lease after the kill; and what the teardown left (namespaces, processes, run
directories, marker BPF programs). The RDMA shim is not part of the run (TCP
jobs), so no queue pair is checked; the report says so. With controllers on etcd,
per fault also: the leader before and after, the seconds until another controller
decided, how long a cut leader went on deciding, the longest stretch without a
decision and without a marked packet, and any agent back on an older leader
epoch (docs/chaos.md).
Writes chaos.json and chaos.png (R over time under faults and undisturbed,
faults shaded; the marks each sender's packets carried) to --out. Needs
root; everything is torn down at the end, also on Ctrl-C or an error.

Exit status 1 when a fault was not recovered from, a mark outlived its lease,
a fault could not be injected, the teardown left something, an agent went
back to an older leader epoch or a cut leader decided longer than its TTL.

examples:
  leveller experiment chaos                                 the default schedule, 90 s per run
  leveller experiment chaos --duration 40 --schedule controller@10+3,agent@25+3 --json
  leveller experiment chaos --schedule ovs@10+5,ovs@30+1 --no-baseline --out /tmp/chaos
  leveller experiment chaos --duration 60 --schedule leader@10+4,etcd@25+4,partition@40+4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

from leveller.errors import UserError

MIN_DURATION_S, MAX_DURATION_S = 20.0, 3600.0


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.experiments.chaos.check import DEFAULT_SCHEDULE

    parser.add_argument("--duration", type=float, default=90.0, metavar="S",
                        help="seconds each run's jobs run (default 90)")
    parser.add_argument("--schedule", default=DEFAULT_SCHEDULE, metavar="TARGET@AT+DOWN,...",
                        help=f"faults (see above; default {DEFAULT_SCHEDULE})")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the undisturbed run (no min R ratio)")
    parser.add_argument("--out", default="out/chaos", metavar="DIR",
                        help="directory for chaos.json and chaos.png (default out/chaos)")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip chaos.png")
    parser.add_argument("--name", default="chaos", help="testbed name, namespaces lvtb-NAME-* (default chaos)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (and nothing else) on stdout")
    parser.set_defaults(func=handle)


def _check(args: argparse.Namespace) -> None:
    from leveller.experiments.chaos.check import HA_TARGETS, parse_schedule
    from leveller.experiments.chaos.run import EXAMPLE
    from leveller.experiments.demo.scenario import plan
    from leveller.experiments.shared.star import RECEIVER
    from leveller.testbed.state import check_name

    if not MIN_DURATION_S <= args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration={args.duration:g}: allowed is {MIN_DURATION_S:g}..{MAX_DURATION_S:g} seconds")
    jobs = plan(EXAMPLE)
    parse_schedule(args.schedule, args.duration, sorted({j.sender for j in jobs} | {RECEIVER}), jobs[0].sender)
    check_name(args.name)
    if any(t in args.schedule for t in HA_TARGETS) and shutil.which("etcd") is None:
        raise UserError("--schedule with leader, etcd or partition needs etcd (scripts/setup-system.sh installs it)")
    if os.geteuid() != 0:
        raise UserError("experiment chaos needs root (namespaces, OVS, eBPF)")


def handle(args: argparse.Namespace) -> int:
    _check(args)
    from leveller.commands import output_dir
    from leveller.commands.experiment import live_progress
    from leveller.experiments.chaos.run import run_chaos

    out = output_dir(args.out)
    with live_progress(width=40, log_notes=True) as (progress, note):
        report = run_chaos(args.duration, args.schedule, args.name, args.baseline, progress=progress, note=note,
                           plot=out / "chaos.png" if args.plot else None)
    (out / "chaos.json").write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report))
    else:
        from leveller.experiments.chaos.table import print_report

        print_report(report, out)
    return 0 if report["verdict"] == "ok" else 1
