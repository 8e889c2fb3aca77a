"""Latency from a controller level change to the new DSCP on the wire, as a distribution.

A veth pair between two fresh namespaces, a steady iperf3 UDP flow (job
"probe") plus a small one (job "other"), a real `leveller agent` process with
the eBPF datapath on the sender's veth, and a controller (real leveller policy,
K=2) on gRPC. Each sample makes the other job the lowest-R one, timestamps the
controller's decision and finds the first probe packet carrying the new DSCP in
a kernel-timestamped capture at the receiver. Prints min/median/p90/p99/max and
a histogram; the target is a median under 5 ms.

By default the agent keeps a Watch call open (levels pushed on every
decision); --no-push measures the report-only path, where a level waits for
the agent's next report (about half of --report-interval on average).
With push, each sample is also cut into stages (median and p90 of each):
decide (the controller's step), wake (the Watch handler has the reply), send
(encoding, signing, gRPC, loopback, until the reply is out of gRPC in the
agent), decode (the agent's signature and field checks), apply (change
detection and the BPF map write) and wire (map written -> the next probe
packet at the receiver, one every ~0.2 ms); then, for reference, a bare gRPC
long-poll reply between two processes, the floor under wake + send.
Needs root; removes everything it created. About 0.4 s per sample.

examples:
  leveller bench levels
  leveller bench levels --samples 200 --json
  leveller bench levels --no-push --report-interval 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=100, metavar="N",
                        help="level changes to measure (default 100)")
    parser.add_argument("--report-interval", type=float, default=0.25, metavar="S",
                        help="the agent's report interval in seconds (default 0.25)")
    parser.add_argument("--no-push", action="store_true",
                        help="agent without the Watch call: levels only arrive with report replies")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random delays between samples")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not 1 <= args.samples <= 10000:
        raise UserError(f"--samples={args.samples}: allowed is 1..10000")
    if not 0.05 <= args.report_interval <= 10:
        raise UserError(f"--report-interval={args.report_interval}: allowed is 0.05..10 seconds")
    # gRPC logs an INFO line about fork() each time a subprocess starts next to its threads
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from rich.console import Console

    from leveller.bench import levels_latency

    levels_latency.check_tools()
    kwargs = dict(samples=args.samples, report_interval_s=args.report_interval, push=not args.no_push,
                  seed=args.seed)
    if args.json:
        result = levels_latency.run(**kwargs)
        print(json.dumps(result.to_json()))
        return 0
    with Console(stderr=True).status("starting") as status:
        result = levels_latency.run(progress=status.update, **kwargs)
    _print(result.to_json())
    return 0


def _print(res: dict) -> None:
    out = sys.stdout
    lat = res["latency_ms"]
    print(f"decision -> DSCP on the wire, {res['samples']} samples ({res['mode']}, agent reports every "
          f"{res['report_interval_s']:g} s), {res['missed']} missed, {res['elapsed_s']:.0f} s", file=out)
    if not lat:
        print("no sample observed", file=out)
        return
    print("  ".join(f"{k} {lat[k]:.2f} ms" for k in ("min", "median", "p90", "p99", "max")), file=out)
    peak = max(b["count"] for b in res["histogram"]) or 1
    for b in res["histogram"]:
        hi = f"{b['hi_ms']:g}" if b["hi_ms"] is not None else "inf"
        print(f"  [{b['lo_ms']:>6g}, {hi:>6}) ms {b['count']:>5}  {'#' * round(40 * b['count'] / peak)}", file=out)
    if res.get("stages_ms"):
        st = res["stages_ms"]
        print("where the milliseconds go (median / p90 per stage): " + ", ".join(
            f"{k} {v['median']:.2f} / {v['p90']:.2f}" for k, v in st.items()) + f" ms ({res['staged']} samples)",
              file=out)
    if res.get("grpc_floor_ms"):
        floor = res["grpc_floor_ms"]
        print(f"a bare gRPC long-poll reply between two processes here (the floor under wake + send): "
              f"median {floor['median']:.2f} ms, p90 {floor['p90']:.2f} ms", file=out)
    verdict = "meets" if res["median_under_target"] else "misses"
    print(f"median {lat['median']:.2f} ms {verdict} the {res['target_ms']:g} ms target", file=out)
