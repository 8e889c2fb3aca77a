"""Sweeps of the network simulator on Dask distributed.

  leveller simulate sweep --grid grid.json --out out/sweep              # LocalCluster, one worker per core
  leveller simulate sweep --grid grid.json --out out/sweep --workers 2 --resume
  leveller simulate sweep --grid grid.json --out out/sweep --scheduler tls://10.0.0.5:8786 \
      --tls-ca tls/ca.pem --tls-cert tls/admin.pem --tls-key tls/admin.key

Grid (JSON): {"topology": [T, ...], "jobs": [FILE, ...] or "trace": [SPEC, ...], "policy": [P, ...],
"levels": [K, ...], "seed": [S, ...], "tau": [S, ...] (optional), "switch_delta": [D, ...] and
"switch_dwell": [S, ...] (optional: LEVELLER's switching rule), "duration": S}. Every combination of
the lists is one task (one `simulate network` run of one policy; the trace's seed is the point's).
At most 100,000 points and 10,000,000 simulated seconds; list entries are strings or numbers.

DIR/results.json: one object per grid point, its parameters plus min, p10, avg, gpu_utilization,
top_job_changes (and congested_share, measured, events, wall_seconds), or its parameters plus
"error" (a bad point is one named error; the others still run). DIR/results.csv: the same rows.
DIR/summary.json and DIR/summary.png: mean and 95% confidence interval across seeds.
--resume keeps the points already in DIR/results.json (errors are run again). A kept row whose
metrics are not valid numbers is moved to DIR/results.invalid.json, said on stderr, and run again;
rows that are no point of the grid are refused before anything runs.

Where the tasks run: a Dask LocalCluster of --workers processes on this machine (its scheduler and
workers on 127.0.0.1 over TLS with certificates made for the run, its dashboard on 127.0.0.1 only),
or the cluster at --scheduler. Use tls:// with --tls-ca (the CA that signed the scheduler's
certificate), --tls-cert and --tls-key (this client's certificate, e.g. admin.pem of `leveller certs
init`): Dask's TLS is mutual. tcp:// works but is warned about: Dask has no authentication, and
client, scheduler and workers send each other pickles, so whoever can reach a tcp:// scheduler can
run code on its workers and in this process. Use it on a network only you can reach.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from leveller.errors import UserError


def run_sweep_command(args: argparse.Namespace) -> int:
    from leveller.sim.dask_cluster import SCHEDULER_RE, TCP_WARNING, dask_client
    from leveller.sim.sweep import INVALID_JSON, kept_rows, load_grid, points, run_sweep, save_invalid, write_summary

    grid = load_grid(args.grid)
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers = {args.workers} is invalid; an integer >= 1")
    if args.scheduler is not None and not SCHEDULER_RE.match(args.scheduler):
        raise UserError(f"--scheduler {args.scheduler!r}: expected an address like tls://HOST:PORT or tcp://HOST:PORT")
    if args.scheduler is not None and args.workers is not None:
        raise UserError("give --workers (a local cluster) or --scheduler (your cluster), not both")
    security = dask_security(args.scheduler, args.tls_ca, args.tls_cert, args.tls_key)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {args.out!r}: exists and is not a directory")
    if (out / "results.json").exists() and not args.resume:
        raise UserError(f"--out {args.out!r} already holds results.json: add --resume to keep its points, "
                        "or choose another directory")
    kept, invalid = kept_rows(out, grid) if args.resume else ({}, [])
    if invalid:
        saved = save_invalid(out, invalid)
        print(f"leveller: --resume: {len(invalid)} rows of {out / 'results.json'} are no valid result and run "
              f"again (kept in {saved}):", file=sys.stderr)
        for bad in invalid[:5]:
            print(f"  row {bad['row']}: {bad['reason']}", file=sys.stderr)
    if args.scheduler is not None and args.scheduler.startswith("tcp://"):
        print(f"leveller: warning: --scheduler {args.scheduler}: {TCP_WARNING}", file=sys.stderr, flush=True)
    total = len(points(grid))
    with dask_client(args.scheduler, args.workers, security) as client, \
            progress(total, not args.no_progress) as tick:
        rows = run_sweep(grid, out, client, resume=args.resume, on_done=tick, kept=kept)
    write_summary(out, rows)
    errors = [r for r in rows if "error" in r]
    if args.json:
        print(json.dumps({"out": str(out), "points": len(rows), "errors": len(errors), "invalid_rerun": len(invalid)}))
    else:
        print(f"{len(rows) - len(errors)} of {len(rows)} points done, {len(errors)} failed; "
              f"results in {out / 'results.json'} and {out / 'results.csv'}"
              + (f"; {len(invalid)} invalid kept rows in {out / INVALID_JSON}" if invalid else ""))
        for r in errors[:10]:
            print(f"  failed: {r['policy']} on {r['topology']}: {r['error']}")
    return 0


def dask_security(scheduler: str | None, ca: str | None, cert: str | None, key: str | None) -> Any:
    """distributed's Security for --scheduler tls:// from --tls-ca/--tls-cert/--tls-key (each a readable
    file); None for tcp:// and the local cluster, which refuse the options."""
    given = {"--tls-ca": ca, "--tls-cert": cert, "--tls-key": key}
    if scheduler is None or not scheduler.startswith("tls://"):
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise UserError(f"{extra[0]} is only for --scheduler tls://HOST:PORT (the local cluster makes its own "
                            "certificates)")
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise UserError(f"--scheduler {scheduler}: Dask's TLS is mutual: give --tls-ca (the CA of the scheduler's "
                        f"certificate), --tls-cert and --tls-key (this client's); missing {', '.join(missing)}")
    from leveller.files import read_small_file
    from leveller.sim.dask_cluster import client_security

    for option, path in given.items():
        read_small_file(str(path), option, private=option == "--tls-key")
    return client_security(str(ca), str(cert), str(key))


def configure(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to ``leveller simulate``'s sub-commands."""
    p = sub.add_parser("sweep", help="grids of network simulations on Dask distributed",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", required=True, metavar="FILE", help="grid JSON (see above)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for results.json, results.csv, summary")
    p.add_argument("--workers", type=int, metavar="N", help="LocalCluster worker processes (default: one per core)")
    p.add_argument("--scheduler", metavar="tls://HOST:PORT",
                   help="run on this Dask scheduler instead: tls:// with the --tls-* files, or tcp:// (no "
                   "authentication, pickles both ways: warned about, for networks only you can reach)")
    p.add_argument("--tls-ca", metavar="FILE", help="with tls://: the CA certificate that signed the scheduler's")
    p.add_argument("--tls-cert", metavar="FILE", help="with tls://: this client's certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="with tls://: this client's private key (PEM, mode 0600)")
    p.add_argument("--resume", action="store_true", help="keep the points already in DIR/results.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on the terminal")
    p.add_argument("--json", action="store_true", help="print one JSON object: out, points, errors")
    p.set_defaults(func=run_sweep_command)


@contextlib.contextmanager
def progress(total: int, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """tick(done, total) of a progress bar over grid points on a terminal (stderr); None elsewhere."""
    from leveller.commands.progress import Bar

    with Bar(["sweep", "bar", "count", "elapsed"], total, "sweep", transient=False,
             show=None if enabled else False) as bar:
        yield (lambda done, total: bar.update(completed=done, total=total)) if bar.shown else None
