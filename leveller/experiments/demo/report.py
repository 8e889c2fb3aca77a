"""What `leveller demo` prints: the tables of the single-link model (--model-only) and of the live runs,
as rich renderables and lines (the command prints them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from leveller.experiments.demo.model import EXAMPLES
from leveller.experiments.demo.results import acceptance, failed_checks, table_rows
from leveller.experiments.demo.scenario import PAPER, SHAPES


def model_output(results: dict[str, dict[str, Any]], pictures: list[str]) -> list[Any]:
    """Per example a table of R per job and policy, simulated next to the paper's model; then the timelines."""
    from rich.table import Table

    shown: list[Any] = []
    for example, runs in results.items():
        preset = EXAMPLES[example][0]
        table = Table(title=f"{example} ({preset}): R per job, simulated vs paper model")
        table.add_column("policy")
        n = len(next(iter(runs.values())).rates)
        for i in range(n):
            table.add_column(f"job {i + 1}", justify="right")
        table.add_column("min", justify="right")
        table.add_column("avg", justify="right")
        for key, res in runs.items():
            paper = PAPER[example][key.split("-")[0]]  # leveller-tau4: the paper's leveller numbers
            cells = [f"{float(r):.3f} ({'-' if p is None else f'{p:g}'})" for r, p in zip(res.rates, paper)]
            table.add_row(key, *cells, f"{float(res.min):.3f}", f"{float(res.avg):.3f}")
        shown.append(table)
    shown.append("cells: simulated R (paper model); crux starves Job 2 of the trio")
    shown += [f"timeline: {path}" for path in pictures]
    return shown


def live_output(doc: dict[str, Any], out: Path) -> list[Any]:
    """Per example a table of R measured on the testbed; the ideal times, the acceptance checks, the files."""
    from rich.table import Table

    shown: list[Any] = []
    for example in ("pair", "trio"):
        rows = table_rows(example, doc)
        if not rows:
            continue
        shapes = ", ".join(f"{c}:{m}" for c, m in SHAPES[example])
        table = Table(title=f"{example} (C:M = {shapes}): R per job measured on the testbed")
        table.add_column("policy")
        for i in range(len(rows[0]) - 3):
            table.add_column(f"job {i + 1}", justify="right")
        table.add_column("min", justify="right")
        table.add_column("avg", justify="right")
        for row in rows:
            table.add_row(*row)
        shown.append(table)
    shown.append("cells: measured R (fluid model; paper). Ideal times profiled alone on the testbed: "
                  + ", ".join(f"{k} {v:.3f} s" for k, v in doc["settings"]["ideal_s_by_shape"].items()))
    for name, ok, detail in acceptance(doc):
        mark = "-" if ok is None else ("[green]pass[/]" if ok else "[red]FAIL[/]")
        shown.append(f"  {mark} {name}: {detail}")
    for r in doc["runs"]:
        if r["timeline"]:
            shown.append(f"timeline: {r['timeline']}")
    shown.append(f"results: {out / 'results.json'}")
    return shown


def exit_status(doc: dict[str, Any]) -> int:
    """1 when an acceptance check failed (each named on stderr), else 0: a printed FAIL is a failed run."""
    failed = failed_checks(doc)
    for check in failed:
        print(f"leveller demo: check failed: {check}", file=sys.stderr)
    return 1 if failed else 0


def print_tables(doc: dict[str, Any], out: Path) -> None:
    """Print the live tables, the checks and the files (live_output) on the terminal."""
    from rich.console import Console

    console = Console()
    for renderable in live_output(doc, out):
        console.print(renderable)
