"""Sweeps of the network simulator on Dask distributed.

  leveller simulate sweep --grid grid.json --out out/sweep              # LocalCluster, one worker per core
  leveller simulate sweep --grid grid.json --out out/sweep --workers 2 --resume
  leveller simulate sweep --grid grid.json --out out/sweep --scheduler tcp://10.0.0.5:8786

Grid (JSON): {"topology": [T, ...], "jobs": [FILE, ...] or "trace": [SPEC, ...], "policy": [P, ...],
"levels": [K, ...], "seed": [S, ...], "tau": [S, ...] (optional), "switch_delta": [D, ...] and
"switch_dwell": [S, ...] (optional: LEVELLER's switching rule), "duration": S}. Every combination of
the lists is one task (one `simulate network` run of one policy; the trace's seed is the point's).

DIR/results.json: one object per grid point, its parameters plus min, p10, avg, gpu_utilization,
top_job_changes (and congested_share, measured, events, wall_seconds), or its parameters plus
"error" (a bad point is one named error; the others still run). DIR/results.csv: the same rows.
DIR/summary.json and DIR/summary.png: mean and 95% confidence interval across seeds.
--resume keeps the points already in DIR/results.json (errors are run again). The tasks run on a
Dask LocalCluster of --workers processes on this machine, or on the cluster at --scheduler.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from leveller.errors import UserError

SCHEDULER_RE = re.compile(r"^(tcp|tls|inproc|ucx)://[^\s/]+(:\d+)?$")


def run_sweep_command(args: argparse.Namespace) -> int:
    from leveller.sim.sweep import load_grid, points, run_sweep, write_summary

    grid = load_grid(args.grid)
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers = {args.workers} is invalid; an integer >= 1")
    if args.scheduler is not None and not SCHEDULER_RE.match(args.scheduler):
        raise UserError(f"--scheduler {args.scheduler!r}: expected an address like tcp://HOST:PORT")
    if args.scheduler is not None and args.workers is not None:
        raise UserError("give --workers (a local cluster) or --scheduler (your cluster), not both")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {args.out!r}: exists and is not a directory")
    if (out / "results.json").exists() and not args.resume:
        raise UserError(f"--out {args.out!r} already holds results.json: add --resume to keep its points, "
                        "or choose another directory")
    total = len(points(grid))
    with dask_client(args.scheduler, args.workers) as client, progress(total, not args.no_progress) as tick:
        rows = run_sweep(grid, out, client, resume=args.resume, on_done=tick)
    write_summary(out, rows)
    errors = [r for r in rows if "error" in r]
    if args.json:
        print(json.dumps({"out": str(out), "points": len(rows), "errors": len(errors)}))
    else:
        print(f"{len(rows) - len(errors)} of {len(rows)} points done, {len(errors)} failed; "
              f"results in {out / 'results.json'} and {out / 'results.csv'}")
        for r in errors[:10]:
            print(f"  failed: {r['policy']} on {r['topology']}: {r['error']}")
    return 0


class dask_client:
    """A distributed Client on the user's scheduler, or on a LocalCluster it starts and stops."""

    def __init__(self, scheduler: str | None, workers: int | None) -> None:
        self.scheduler = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.cluster: Any = None
        self.client: Any = None

    def __enter__(self) -> Any:
        from distributed import Client, LocalCluster

        if self.scheduler is not None:
            try:
                self.client = Client(self.scheduler, timeout=30)
            except OSError as exc:
                raise UserError(f"--scheduler {self.scheduler}: cannot connect ({exc})") from None
            return self.client
        self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                    dashboard_address=":0")
        self.client = Client(self.cluster)
        return self.client

    def __exit__(self, *exc: Any) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def configure(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to ``leveller simulate``'s sub-commands."""
    p = sub.add_parser("sweep", help="grids of network simulations on Dask distributed",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", required=True, metavar="FILE", help="grid JSON (see above)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for results.json, results.csv, summary")
    p.add_argument("--workers", type=int, metavar="N", help="LocalCluster worker processes (default: one per core)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on this Dask scheduler instead")
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
