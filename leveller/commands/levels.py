"""Compress job ranks into K switch priority levels for given flows.

  leveller levels --input flows.json --levels 2 --json

FILE: {"jobs": {"<job>": {"rate": R}}, "flows": {"<flow>": {"job": "<job>", "links": ["<link>", ...]}}}
Jobs are ranked by increasing R (the leveller policy); equal R keeps the order
in which jobs appear in FILE. The contention graph (one node per flow, an edge
when flows of different jobs share a link) is pruned: in every connected part
all flows of the lowest-R job take the highest free level, then leave; the
last level (0) is shared by every remaining flow. Output: {"levels": {"<flow>":
level}} with K-1 the highest priority and 0 the lowest.

The pairwise graph is never built (leveller.core.levels): 100,000 flows of a
1,024-GPU cluster take about 1.5 s in all (pruning ~50 ms); a FILE with more
than 1,000,000 flows is refused before it is decided (one over 256 MiB before
it is read). The table shows the first 200 flows by level; --json prints all.

examples:
  leveller levels --input flows.json --levels 2
  leveller bench controller --write-levels cluster.json --flows 100000
  leveller levels --input cluster.json --levels 8 --json
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from leveller.errors import UserError

MAX_FLOWS = 1_000_000  # more is refused before any work (the decision would outgrow a tau)
MAX_FILE_BYTES = 256 << 20
MAX_TABLE_ROWS = 200


@dataclass
class LevelsInput:
    """FILE as arrays: flow i is ``names[i]`` of job ``jobs[job[i]]``, crossing the links listed in the
    incidence (``inc_flow[e]`` crosses link ``inc_link[e]``, ``link_names`` by id)."""

    jobs: list[Any]  # JobView, in file order
    names: list[str]
    job: list[int]
    inc_flow: list[int]
    inc_link: list[int]
    link_names: list[str]

    def links_of(self, i: int) -> list[str]:
        """Links of flow i (the incidence is in flow order)."""
        lo, hi = bisect.bisect_left(self.inc_flow, i), bisect.bisect_right(self.inc_flow, i)
        return [self.link_names[lk] for lk in self.inc_link[lo:hi]]


def parse_input(data: Any) -> LevelsInput:
    """Validate the FILE structure (errors name the field) and intern it into integer ids."""
    from leveller.core.policies import JobView

    if not isinstance(data, dict):
        raise UserError(f"top level must be an object with keys 'jobs' and 'flows', got {type(data).__name__}")
    jobs_in, flows_in = data.get("jobs"), data.get("flows")
    if not isinstance(jobs_in, dict) or not jobs_in:
        raise UserError("'jobs' must be a non-empty object {\"<job>\": {\"rate\": R}}")
    if not isinstance(flows_in, dict):
        raise UserError("'flows' must be an object {\"<flow>\": {\"job\": \"<job>\", \"links\": [...]}}")
    if len(flows_in) > MAX_FLOWS:
        raise UserError(f"'flows' has {len(flows_in)} flows; at most {MAX_FLOWS} are decided in one run")
    jobs = []
    for name, spec in jobs_in.items():
        rate = spec.get("rate") if isinstance(spec, dict) else None
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise UserError(f"jobs.{name}.rate must be a number >= 0 (progress rate R), got {rate!r}")
        jobs.append(JobView(name=name, rate=rate))
    job_index = {name: i for i, name in enumerate(jobs_in)}
    link_ids: dict[str, int] = {}
    names, job, inc_flow, inc_link = list(flows_in), [], [], []
    for i, spec in enumerate(flows_in.values()):
        # one pass, no object per flow: at 100,000 flows every microsecond here is 0.1 s
        j = job_index.get(spec.get("job")) if type(spec) is dict and type(spec.get("job")) is str else None
        links = spec.get("links") if type(spec) is dict else None
        if j is None or type(links) is not list or not links:
            _flow_error(names[i], spec, jobs_in)
        job.append(j)
        for link in links:
            if type(link) is not str or not link:
                _flow_error(names[i], spec, jobs_in)
            inc_flow.append(i)
            inc_link.append(link_ids.setdefault(link, len(link_ids)))
    return LevelsInput(jobs, names, job, inc_flow, inc_link, list(link_ids))


def _flow_error(name: str, spec: Any, jobs_in: dict[str, Any]) -> NoReturn:
    """Raise the UserError that names what is wrong with flows.<name>."""
    if not isinstance(spec, dict):
        raise UserError(f"flows.{name} must be an object with 'job' and 'links', got {spec!r}")
    job = spec.get("job")
    if not isinstance(job, str) or job not in jobs_in:
        known = ", ".join(list(jobs_in)[:20]) + (", ..." if len(jobs_in) > 20 else "")
        raise UserError(f"flows.{name}.job: {job!r} is not a job in 'jobs' (known: {known})")
    raise UserError(f"flows.{name}.links must be a non-empty list of link names (strings), got {spec.get('links')!r}")


def decide_levels(inp: LevelsInput, k: int) -> list[int]:
    """Level of every flow (in input order): the leveller order by R, then K-level pruning."""
    import numpy as np

    from leveller.core.levels import prune
    from leveller.core.policies import LevellerPolicy

    order = LevellerPolicy().order(inp.jobs)
    rank_of = {name: r for r, name in enumerate(order)}
    rank_by_job = np.array([rank_of[j.name] for j in inp.jobs], dtype=np.int64)
    rank = rank_by_job[np.asarray(inp.job, dtype=np.int64)]
    levels = prune(rank, np.asarray(inp.inc_flow, dtype=np.int64), np.asarray(inp.inc_link, dtype=np.int64),
                   len(inp.link_names), k)
    return levels.tolist()


def run(args: argparse.Namespace) -> int:
    # Parsing 100,000 flows allocates millions of objects and no cycles: the cyclic garbage
    # collector would rescan them over and over (it doubles the run time).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if was_enabled:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    if args.levels < 1:
        raise UserError(f"--levels must be an integer >= 1 (switch priority levels K), got {args.levels}")
    path = Path(args.input)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"--input {args.input}: {size / 2**20:.0f} MiB; at most {MAX_FILE_BYTES >> 20} MiB "
                            f"(about {MAX_FLOWS} flows) are read")
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"--input {args.input}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--input {args.input}: malformed JSON at line {exc.lineno} column {exc.colno}: "
                        f"{exc.msg}") from None
    del text
    inp = parse_input(data)
    del data
    levels = decide_levels(inp, args.levels)
    if args.json:
        print(json.dumps({"levels": dict(zip(inp.names, levels))}))
        return 0
    from rich.console import Console
    from rich.table import Table

    rates = {j.name: j.rate for j in inp.jobs}
    shown = sorted(range(len(inp.names)), key=lambda i: (-levels[i], inp.names[i]))
    table = Table(title=f"{args.levels} levels (K-1 = highest priority)")
    for col in ("flow", "job", "R", "links", "level"):
        table.add_column(col)
    for i in shown[:MAX_TABLE_ROWS]:
        job = inp.jobs[inp.job[i]].name
        table.add_row(inp.names[i], job, f"{rates[job]:.3f}", ",".join(inp.links_of(i)), str(levels[i]))
    console = Console()
    console.print(table)
    if len(shown) > MAX_TABLE_ROWS:
        console.print(f"... {len(shown) - MAX_TABLE_ROWS} more flows (--json prints them all)")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, metavar="FILE", help="JSON file with jobs (rates) and flows (links)")
    parser.add_argument("--levels", type=int, required=True, metavar="K",
                        help="number of switch priority levels (>= 1)")
    parser.add_argument("--json", action="store_true", help="print {\"levels\": {flow: level}}")
    parser.set_defaults(func=run)
