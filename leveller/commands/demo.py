"""Main demonstration. For now: the paper's worked examples on the single-link simulator.

  leveller demo                 table of R per policy and job, timelines in ./out/demo
  leveller demo --json          {"pair": {"fair": [...], "crux": [...], "leveller": [...]}, "trio": {...}}

Runs the paper's Figure 3 pair (Job 1 computes 1 / sends 1, Job 2 computes 1 /
sends 2) and Figure 1 trio (1:2, 1:2, 2:1) under flow-fair share, Crux's
static priority and LEVELLER's lowest-R-first, measures R over 1500 x the
longest ideal iteration from a common start, and prints them next to the
paper's model numbers. Writes one timeline PNG per example (like the
digest's Figure 1) into --out. The emulated-cluster demo replaces this later.
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path
from typing import Optional

from leveller.errors import UserError

POLICIES = ("fair", "crux", "leveller")
# Paper model numbers (digest sections 2 and 3.2); None where the paper gives none.
PAPER: dict[str, dict[str, list[Optional[float]]]] = {
    "pair": {"fair": [0.75, 0.75], "crux": [1.0, 0.75], "leveller": [0.857, 0.857],
             "leveller-tau4": [0.857, 0.857]},
    "trio": {"fair": [0.5, 0.5, 0.667], "crux": [None, 0.0, None], "leveller": [0.6, 0.6, 0.6]},
}
EXAMPLES = {"pair": ("fig3", 15), "trio": ("fig1-trio", 21)}  # name -> (preset, timeline span)


def run(args: argparse.Namespace) -> int:
    from leveller.core.policies import make_policy
    from leveller.sim.link import simulate_link
    from leveller.sim.presets import PRESETS

    if args.cycles < 1:
        raise UserError(f"--cycles must be an integer >= 1, got {args.cycles}")
    results: dict[str, dict] = {}
    for example, (preset, span) in EXAMPLES.items():
        runs = {}
        for key in PAPER[example]:
            policy = make_policy(key.split("-")[0], 4 if key.endswith("tau4") else 0)
            runs[key] = simulate_link(PRESETS[preset], policy, cycles=args.cycles,
                                      record_until=Fraction(span) if args.plots else Fraction(0))
        results[example] = runs
    pictures = []
    if args.plots:
        from leveller.sim.timeline import plot_timelines

        out = Path(args.out)
        for example, runs in results.items():
            panels = [(key.replace("-tau4", ", tau=4"), res) for key, res in runs.items()]
            path = out / f"{example}-timeline.png"
            try:
                plot_timelines(panels, path, Fraction(EXAMPLES[example][1]))
            except OSError as exc:
                raise UserError(f"--out {args.out}: cannot write {path}: {exc.strerror}") from None
            pictures.append(str(path))
    if args.json:
        doc: dict = {ex: {k: [round(float(r), 6) for r in res.rates] for k, res in runs.items()}
                     for ex, runs in results.items()}
        doc["paper"] = PAPER
        doc["timelines"] = pictures
        print(json.dumps(doc))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
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
            paper = PAPER[example][key]
            cells = [f"{float(r):.3f} ({'-' if p is None else f'{p:g}'})" for r, p in zip(res.rates, paper)]
            table.add_row(key, *cells, f"{float(res.min):.3f}", f"{float(res.avg):.3f}")
        console.print(table)
    console.print("cells: simulated R (paper model); crux starves Job 2 of the trio")
    for path in pictures:
        console.print(f"timeline: {path}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/demo", metavar="DIR", help="directory for timeline PNGs (default out/demo)")
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="skip the timeline PNGs")
    parser.add_argument("--cycles", type=int, default=1500, metavar="N",
                        help="measure R over N x the longest ideal iteration (default 1500)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)
