"""Main demonstration: the paper's worked examples on the emulated cluster, on real packets.

  leveller demo                   build the cluster, run everything, print the table, tear down
  leveller demo --json            only {"pair": {"fair": [R per job], "crux": [...], "leveller": [...]},
                                  "trio": {...}, ...} on stdout (R measured on the testbed)
  leveller demo --model-only      the single-link simulator's numbers only (no root needed)

What runs (needs root; about 7 minutes on 2 cores): a one-switch testbed (senders h1, h2,
h3 -> receiver h4, 100 Mbit/s links, two strict-priority levels on the switch port to h4),
the SDN app (paths, DSCP -> queue mapping), a controller per run and an agent per host
(eBPF DSCP marking on each host's eth0). Every job shape is first profiled alone on the
testbed (its ideal iteration time, median of its iterations). Then the paper's Figure 3
pair (C:M = 1:1 and 1:2) and Figure 1 trio (1:2, 1:2, 2:1) each run under `fair` (no
priorities), `crux` (static priority by G*C/M) and `leveller` (lowest R first, re-ranked
at every iteration end). One model time unit is --unit seconds. R per job = iterations x
ideal time / elapsed, from a common start, is printed next to the fluid model's and the
paper's numbers; one timeline PNG per run and results.json go to --out. A leftover of a
crashed demo is removed at the next start; Ctrl-C tears everything down. The checks printed
at the end compare the live runs with the fluid model run with the live options (--switching:
levels, tau, switching rule, floor), LEVELLER's min R at least 0.95 x the model's, and the
order of the policies; pass/FAIL decide the exit status: 1 when one failed, each failed check
named on stderr (with --json too), 0 when all that ran passed.

Transport as in a training cluster: hosts use datacenter TCP settings (RTO min 10 ms, no
slow start after idle), each job connection's window is clamped to 64 KB (below a switch
queue, so strict priority delays a flow without dropping it: the paper's classes are
lossless), and a job C:M sends M units of frames on the wire (headers counted).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.experiments.demo.model import EXAMPLES, simulate
from leveller.experiments.demo.scenario import PAPER
from leveller.experiments.shared.switching import DEFAULT_MODE, MODES
from leveller.model.limits import PAPER_POLICIES as POLICIES


def run_model_only(args: argparse.Namespace) -> int:
    results, pictures = simulate(args.cycles, Path(args.out) if args.plots else None)
    if args.json:
        doc: dict = {ex: {k: [round(float(r), 6) for r in res.rates] for k, res in runs.items()}
                     for ex, runs in results.items()}
        doc["paper"] = PAPER
        doc["timelines"] = pictures
        print(json.dumps(doc))
        return 0
    from rich.console import Console

    from leveller.experiments.demo.report import model_output

    console = Console()
    for renderable in model_output(results, pictures):
        console.print(renderable)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.model_only:
        return run_model_only(args)
    from leveller.experiments.demo.scenario import check_settings, names
    from leveller.experiments.shared.policy_run import LiveSettings

    examples = names(args.examples, tuple(EXAMPLES), "--examples")
    policies = names(args.policies, POLICIES, "--policies")
    check_settings(args.unit, args.seconds)
    if os.geteuid() != 0:
        raise UserError("the live demo needs root (namespaces, OVS, eBPF); run it as root, or "
                        "`leveller demo --model-only` for the simulator's numbers")
    from leveller.commands import output_dir
    from leveller.experiments.demo.model import model_like_live

    out = output_dir(args.out)
    mode = MODES[args.switching]
    settings = LiveSettings(unit_s=args.unit, seconds=args.seconds, controller_args=mode.controller_args(),
                            agent_args=mode.agent_args())
    model_rates = model_like_live(settings.unit_s, settings.tau_s, settings.levels, mode.rule, mode.floor, args.cycles)
    from leveller.experiments.shared.interrupts import unwind_on_signals

    with unwind_on_signals():  # SIGTERM / Ctrl-C unwind the context managers: everything is torn down
        runs, ideal = _run_with_progress(examples, policies, settings, out if args.plots else None, args.name,
                                         mode.floor)
    from leveller.experiments.demo.results import json_doc

    doc = json_doc(runs, model_rates, {"unit_s": settings.unit_s, "seconds_per_run": settings.seconds,
                                       "tau_s": settings.tau_s, "levels": settings.levels, "link_mbps": 100,
                                       "switching": mode.to_dict(),
                                       "ideal_s_by_shape": {k: round(v, 4) for k, v in ideal.items()}})
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc))
    else:
        from leveller.experiments.demo.report import print_tables

        print_tables(doc, out)
    from leveller.experiments.demo.report import exit_status

    return exit_status(doc)


def _run_with_progress(examples: list[str], policies: list[str], settings: Any, plots: Path | None,
                       name: str, floor: float) -> tuple[list[Any], dict[str, float]]:
    from leveller.commands.progress import Bar
    from leveller.experiments.demo.orchestrate import run_demo, total_seconds

    with Bar(["{task.description:<28}", "bar", "elapsed", "remaining"], total_seconds(examples, policies, settings),
             "setting up the cluster", transient=False, show=True) as bar:
        def step(what: str, fraction: float) -> None:
            bar.part(what, fraction, settings.alone_s if what.startswith("profiling") else settings.seconds)
            bar.update(description=what)  # not cut

        def note(message: str) -> None:
            if not bar.parts:
                bar.note(message)
            elif " R = " in message:
                bar.print(message)

        return run_demo(examples, policies, settings, plots, name=name, step=step, note=note, floor=floor)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/demo", metavar="DIR",
                        help="directory for timeline PNGs and results.json (default out/demo)")
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="skip the timeline PNGs")
    parser.add_argument("--json", action="store_true", help="print one JSON object (and nothing else) on stdout")
    parser.add_argument("--unit", type=float, default=0.25, metavar="S",
                        help="seconds per model time unit (default 0.25: job 1:2 computes 0.25 s, sends 0.5 s)")
    parser.add_argument("--seconds", type=float, default=60.0, metavar="S",
                        help="length of each policy run (default 60)")
    parser.add_argument("--examples", default="pair,trio", help="which examples to run (default pair,trio)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"which policies to run (default {','.join(POLICIES)})")
    parser.add_argument("--name", default="demo", help="testbed name, namespaces lvtb-NAME-* (default demo)")
    parser.add_argument("--switching", choices=tuple(MODES), default=DEFAULT_MODE,
                        help=f"LEVELLER's switching options, as in `experiment tenants` (default {DEFAULT_MODE}: "
                        "hysteresis, a floor on every queue, phase-aligned demotion; paper: none of them, checked "
                        "against the paper's numbers too); the model beside the live runs uses the same")
    parser.add_argument("--model-only", action="store_true",
                        help="only the fluid single-link model (no cluster, no root)")
    parser.add_argument("--cycles", type=int, default=1500, metavar="N",
                        help="model: measure R over N x the longest ideal iteration (default 1500)")
    parser.set_defaults(func=run)
