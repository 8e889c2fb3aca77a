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
import gc
import json
from pathlib import Path

from leveller.core.levels_input import MAX_FLOWS, parse_input
from leveller.errors import UserError

MAX_FILE_BYTES = 256 << 20
MAX_TABLE_ROWS = 200


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
    inp = parse_input(data, MAX_FLOWS)
    del data
    from leveller.core.levels import decide_levels

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
