"""Compress job ranks into K switch priority levels for given flows.

  leveller levels --input flows.json --levels 2 --json

FILE: {"jobs": {"<job>": {"rate": R}}, "flows": {"<flow>": {"job": "<job>", "links": ["<link>", ...]}}}
Jobs are ranked by increasing R (the leveller policy); equal R keeps the order
in which jobs appear in FILE. The contention graph (one node per flow, an edge
when flows of different jobs share a link) is pruned: in every connected part
all flows of the lowest-R job take the highest free level, then leave; the
last level (0) is shared by every remaining flow. Output: {"levels": {"<flow>":
level}} with K-1 the highest priority and 0 the lowest.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from leveller.errors import UserError


def parse_input(data: Any) -> tuple[list[Any], dict[str, Any]]:
    """Validate the FILE structure; return (JobView list in file order, flows by name)."""
    from leveller.core.levels import Flow
    from leveller.core.policies import JobView

    if not isinstance(data, dict):
        raise UserError(f"top level must be an object with keys 'jobs' and 'flows', got {type(data).__name__}")
    jobs_in, flows_in = data.get("jobs"), data.get("flows")
    if not isinstance(jobs_in, dict) or not jobs_in:
        raise UserError("'jobs' must be a non-empty object {\"<job>\": {\"rate\": R}}")
    if not isinstance(flows_in, dict):
        raise UserError("'flows' must be an object {\"<flow>\": {\"job\": \"<job>\", \"links\": [...]}}")
    jobs = []
    for name, spec in jobs_in.items():
        rate = spec.get("rate") if isinstance(spec, dict) else None
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise UserError(f"jobs.{name}.rate must be a number >= 0 (progress rate R), got {rate!r}")
        jobs.append(JobView(name=name, rate=rate))
    flows = {}
    for name, spec in flows_in.items():
        if not isinstance(spec, dict):
            raise UserError(f"flows.{name} must be an object with 'job' and 'links', got {spec!r}")
        job = spec.get("job")
        if job not in jobs_in:
            raise UserError(f"flows.{name}.job: {job!r} is not a job in 'jobs' (known: {', '.join(jobs_in)})")
        links = spec.get("links")
        if not isinstance(links, list) or not links or not all(isinstance(x, str) and x for x in links):
            raise UserError(f"flows.{name}.links must be a non-empty list of link names (strings), got {links!r}")
        flows[name] = Flow(job=job, links=tuple(links))
    return jobs, flows


def run(args: argparse.Namespace) -> int:
    from leveller.core.levels import assign_levels
    from leveller.core.policies import LevellerPolicy

    if args.levels < 1:
        raise UserError(f"--levels must be an integer >= 1 (switch priority levels K), got {args.levels}")
    path = Path(args.input)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"--input {args.input}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--input {args.input}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    jobs, flows = parse_input(data)
    order = LevellerPolicy().order(jobs)
    levels = assign_levels(order, flows, args.levels)
    if args.json:
        print(json.dumps({"levels": levels}))
        return 0
    from rich.console import Console
    from rich.table import Table

    rates = {j.name: j.rate for j in jobs}
    table = Table(title=f"{args.levels} levels (K-1 = highest priority)")
    for col in ("flow", "job", "R", "links", "level"):
        table.add_column(col)
    for name in sorted(flows, key=lambda f: (-levels[f], f)):
        fl = flows[name]
        table.add_row(name, fl.job, f"{rates[fl.job]:.3f}", ",".join(fl.links), str(levels[name]))
    Console().print(table)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, metavar="FILE", help="JSON file with jobs (rates) and flows (links)")
    parser.add_argument("--levels", type=int, required=True, metavar="K", help="number of switch priority levels (>= 1)")
    parser.add_argument("--json", action="store_true", help="print {\"levels\": {flow: level}}")
    parser.set_defaults(func=run)
