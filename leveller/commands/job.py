"""Run the training-job emulator: W workers that compute, exchange bytes over TCP and log iterations.

Each iteration a worker sleeps --compute seconds, then moves --comm seconds
worth of bytes at the bottleneck --rate (bytes = comm x rate / 8), and prints

    leveller-iter job=NAME rank=R iter=N t=UNIX_TIME

which `leveller agent --log FILE` counts. Workers listen on --port + rank.

With --slack S the communication starts S seconds before the compute ends (as
DDP starts its all-reduce during the backward pass); the iteration takes
C + max(0, M - S) alone, and each communication phase is announced in the log
(leveller-comm ... wait=W, W = max(0, S - M): how long it can wait without
stalling), so an agent run with --overlap demotes the job's flows meanwhile.
With --shift-file PATH (an agent's --shift-dir DIR writes DIR/NAME.shift) the
workers follow CASSINI's time shifts: once per plan, an iteration start is
delayed to the phase the controller chose.

examples:
  leveller job --name j1 --worker 127.0.0.1 --worker 127.0.0.1 \\
      --compute 0.25 --comm 0.25 --rate 100M --duration 20
  leveller job --name j1 --worker 10.0.0.1@h1 --worker 10.0.0.3@h3 \\
      --compute 0.25 --comm 0.5 --rate 100M --duration 60 --log /tmp/j1.log
  leveller job --name j2 --worker 10.0.0.2@h2 --worker 10.0.0.4@h4 --compute 1 --comm 0.25 \
      --slack 0.75 --rate 100M --duration 60 --log /tmp/j2.log --shift-file /tmp/shifts/j2.shift
  leveller job --name drift --worker 127.0.0.1 --worker 127.0.0.1 --pace \\
      --compute 0.1 --comm 0.1 --compute-change 20:0.4 --duration 40
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True, help="job name (letters, digits, _ . : -)")
    parser.add_argument("--worker", action="append", required=True, metavar="ADDR[@NETNS]",
                        help="one per worker, rank order; @NETNS runs it via `ip netns exec NETNS`")
    parser.add_argument("--compute", type=float, required=True, metavar="C", help="compute seconds per iteration")
    parser.add_argument("--comm", type=float, required=True, metavar="M",
                        help="communication seconds per iteration at --rate")
    parser.add_argument("--rate", default="100M", help="bottleneck bit rate, e.g. 100M, 1G (default 100M)")
    parser.add_argument("--pattern", default="push", choices=("push", "ring"),
                        help="push: ranks>0 send to rank 0 and wait for an ack; ring: rank i sends to i+1")
    parser.add_argument("--port", type=int, default=47000, help="worker i listens on PORT+i (default 47000)")
    parser.add_argument("--iterations", type=int, help="stop after this many iterations")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--pace", action="store_true",
                        help="kernel-pace each sender at --rate (SO_MAX_PACING_RATE): use where no link is "
                        "shaped, e.g. on loopback")
    parser.add_argument("--window", type=int, metavar="BYTES",
                        help="clamp each connection's TCP window: a flow never has more in flight, so a "
                        "switch queue larger than that never drops it (emulates a lossless class)")
    parser.add_argument("--slack", type=float, default=0.0, metavar="S",
                        help="start communicating S seconds before the compute ends (overlap; default 0)")
    parser.add_argument("--shift-file", metavar="PATH",
                        help="follow CASSINI shift orders written here by an agent (--shift-dir)")
    parser.add_argument("--compute-change", action="append", default=[], metavar="SECONDS:C",
                        help="from SECONDS after the start, compute C seconds per iteration (a job whose time "
                        "alone drifts, e.g. --compute-change 30:0.5); repeatable, in increasing SECONDS")
    parser.add_argument("--log", help="append the iteration lines to this file (what the agent tails)")
    parser.add_argument("--prefix", default="", help="command prefix for every worker, e.g. 'cgexec -g cpu:j1'")
    parser.add_argument("--json", action="store_true", help="print one JSON summary instead of the lines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leveller.jobs.launcher import JobRun
    from leveller.jobs.spec import RunConfig, parse_compute_change, parse_rate, parse_worker

    spec = RunConfig(name=args.name, workers=tuple(parse_worker(w) for w in args.worker),
                     compute_s=args.compute, comm_s=args.comm, rate_bps=parse_rate(args.rate),
                     pattern=args.pattern, port=args.port, iterations=args.iterations,
                     duration_s=args.duration, pace=args.pace, window_bytes=args.window, slack_s=args.slack,
                     shift_file=args.shift_file,
                     compute_changes=tuple(parse_compute_change(c) for c in args.compute_change))
    times: list[float] = []
    lock = threading.Lock()

    def on_line(rank: int, line: str) -> None:
        with lock:
            if rank == 0 and line.startswith("leveller-iter"):
                times.append(float(line.rsplit("t=", 1)[-1]))
            if not args.json:
                print(line, flush=True)

    with JobRun(spec, log=args.log, prefix=shlex.split(args.prefix), on_line=on_line) as job:
        results = job.wait()
    ok = all(r.returncode == 0 for r in results)
    iters = [r.iterations for r in results]
    mean = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    summary = {"job": spec.name, "workers": len(results), "iterations": iters, "ok": ok,
               "bytes_sent": [r.sent for r in results], "bytes_received": [r.received for r in results],
               "bytes_per_iteration": spec.bytes_per_iteration, "iteration_time_s": mean,
               "ideal_iteration_time_s": spec.ideal_s}
    if args.json:
        print(json.dumps(summary))
    else:
        shown = f"{mean:.3f} s" if mean is not None else "n/a"
        print(f"job {spec.name}: iterations per worker {iters}, mean iteration {shown} "
              f"(ideal {spec.ideal_s:.3f} s)", file=sys.stderr)
    if not ok:
        failed = [r for r in results if r.returncode != 0]
        # Workers the launcher stopped (SIGTERM) because another one failed are not the cause.
        causes = [r for r in failed if r.returncode != -signal.SIGTERM] or failed
        detail = "; ".join(f"worker {r.rank} exit {r.returncode}: {r.stderr.strip()[-300:]}" for r in causes)
        stopped = [str(r.rank) for r in failed if r not in causes]
        if stopped:
            detail += f" (then stopped worker {', '.join(stopped)})"
        raise UserError(f"job {spec.name} failed: {detail}")
    return 0
