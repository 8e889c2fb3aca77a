"""Show jobs (iterations, ideal time, R), agents and flows (level, path) of a running controller.

With several controllers (a failover pair, as given to the agents), the first
that answers is shown and named.

examples:
  leveller status --controller 127.0.0.1:50051
  leveller status --controller 10.0.0.250:50051,10.0.0.251:50051
  leveller status --controller 127.0.0.1:50051 --json | jq '.jobs'
  leveller status --tls-cert tls/admin.pem --tls-key tls/admin.key --tls-ca tls/ca.pem

A controller in shadow mode (`--mode shadow`) is flagged; its flows' levels are the ones that
would apply, and a table shows how many bytes each job sent on each would-be level.

The flows listed are the first 10,000 by flow key (the title then says "the first N of M";
the JSON has flows_total and flows_truncated). Under mutual TLS only the admin certificate may
read the status (a host's certificate reports for its host only).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from leveller.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--controller", default="127.0.0.1:50051", metavar="HOST:PORT[,HOST:PORT...]",
                        help="controller address; several, comma-separated: the first that answers")
    parser.add_argument("--secret-file", help="file holding the shared secret (else $LEVELLER_SECRET; "
                        "optional with --tls-*)")
    from leveller.rpc.tls import add_tls_options

    add_tls_options(parser, "admin")
    parser.add_argument("--json", action="store_true", help="print the controller's status object")
    parser.set_defaults(func=run)


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _print_shadow_bytes(console: Any, by_job: dict[str, dict[str, int]], k: int) -> None:
    """Shadow mode: bytes each job sent on each level it would have had (K-1 highest; none = undecided)."""
    from rich.table import Table

    columns = [str(level) for level in range(k - 1, -1, -1)] + ["none"]
    table = Table("job", *(f"level {c}" if c != "none" else "undecided" for c in columns),
                  title="bytes sent per would-be level (since the controller started)")
    for job, levels in sorted(by_job.items()):
        table.add_row(job, *(f"{levels.get(c, 0):,}" for c in columns))
    console.print(table)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from leveller.rpc.auth import load_secret
    from leveller.rpc.failover import FailoverClient, parse_addresses
    from leveller.rpc.transport import RpcFailure

    addresses = parse_addresses(args.controller)
    from leveller.rpc.tls import tls_from_args

    tls = tls_from_args(args)
    secret = load_secret(args.secret_file, optional=tls is not None)
    try:
        with FailoverClient(addresses, secret, tls=tls) as client:
            status = client.status()
    except RpcFailure as exc:
        raise UserError(f"--controller {args.controller}: {exc}") from None
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    console = Console()
    age = status.get("decision_age_s")
    stale = age is not None and age >= status["lease_s"]
    console.print(f"controller {status['controller']}: policy {status['policy']}, K={status['levels']}, "
                  f"tau={status['tau_s']} s, "
                  f"epoch {status['epoch']}"
                  + ("" if age is None else f", decided {age:.1f} s ago" + (
                      f" [red](older than the lease {status['lease_s']} s: agents drop its levels)[/]"
                      if stale else ""))
                  + (f"  [red]last error: {status['last_error']}[/]" if status.get("last_error") else ""))
    ha = status.get("ha")
    if ha:  # controllers on etcd (--etcd): who leads, at which epoch, who else is there
        leader = "this controller" if ha["role"] == "leader" else (ha["leader"] or "none elected now")
        members = ", ".join(f"{m['name']} ({m['address']})" for m in ha.get("members", [])) or "-"
        console.print(f"leader: {leader}, epoch {ha['epoch']}; {ha['name']} is {ha['role']}; members: {members}"
                      + (f"  [red]etcd: {ha['last_error']}[/]" if ha.get("last_error") else ""))
    shadow = status.get("mode") == "shadow"
    if shadow:
        console.print("[bold yellow]SHADOW MODE[/]: the levels below are what would apply; agents mark nothing")
    enf = status.get("enforcement")
    if enf:
        for m in enf["mismatches"]:
            console.print(f"[bold red]ENFORCEMENT MISMATCH[/] {m['message']}")
        if enf.get("error"):
            console.print(f"[red]enforcement check failed: {enf['error']}[/]")
        elif not enf["mismatches"]:
            console.print(f"enforcement: {len(enf['checks'])} switch queue(s) checked over the last "
                          f"{enf['window_s']:g} s, each took the bytes marked for it")
    mode = status.get("rate") or {}
    kind = (f"R over the last {mode['window_s']:g} s" if mode.get("window_s") else
            f"R decayed, half-life {mode['half_life_s']:g} s" if mode.get("half_life_s") else "cumulative R")
    jobs = Table("job", "iterations", "ideal s", "R", "weight", "state",
                 title=f"jobs ({kind}{', highest priority first' if status.get('order') else ''})")
    order = status.get("order") or []
    for j in sorted(status["jobs"], key=lambda j: order.index(j["job"]) if j["job"] in order else len(order)):
        state = "profiling" if j["profiling"] else ("waiting for profile" if j["ideal_time"] is None else "")
        jobs.add_row(j["job"], str(j["iterations"]), _fmt(j["ideal_time"]), _fmt(j["rate"]),
                     _fmt(j.get("weight", 1.0), "g"), state)
    console.print(jobs)
    agents = Table("host", "last report s ago", "jobs", "flows", title="agents")
    for a in status["agents"]:
        agents.add_row(a["host"], _fmt(a["age_s"], ".1f"), str(a["jobs"]), str(a["flows"]))
    console.print(agents)
    if shadow:
        _print_shadow_bytes(console, status.get("shadow_bytes") or {}, status["levels"])
    title = "flows"
    if status.get("flows_truncated"):  # a controller lists a bounded number of flows (the first by flow key)
        title = f"flows (the first {len(status['flows'])} of {status['flows_total']})"
    flows = Table("flow", "job", "host", "would-be level" if shadow else "level", "bytes", "links", title=title)
    for f in status["flows"]:
        flows.add_row(f["flow"], f["job"], f["host"], _fmt(f["level"], "d"), str(f["bytes"]), " ".join(f["links"]))
    console.print(flows)
    return 0
