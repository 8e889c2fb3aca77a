"""Tenants: the paper's testbed experiments (Figures 9 and 10) on the emulated cluster.

Figure 10: N tenants (--tenants, default 2,3,4) share the `leafspine` testbed (3 leaves x 2
spines, 4 hosts per leaf: the paper's 12 GPUs with a NIC each; 25 Mbit/s links). Per tenant count
and repeat, a seeded draw places every tenant on 2-4 hosts across at least two leaves (its ring
all-reduce crosses the spines, where tenants meet) and gives it a model of the catalog derived
from real H200 profiles (compute time, gradient bytes, overlap slack; the compute : communication
ratio of a ring all-reduce at --ref-gbps, times scaled to the emulated links: printed at the
start). Every job is profiled alone in place (its ideal iteration time), then runs for --duration
under every policy (--policies) with the whole live system: controller, an agent per host, eBPF
marks, OVS strict-priority queues. `leveller` includes the agents' overlap rule; `cassini`
shifts iterations instead of giving priorities. R = iterations x ideal / elapsed per job; min and
average over the tenants of a run.

--fig9: three 2-host jobs on the `dumbbell`'s one bottleneck with 2 levels; prints the iterations
of every job in the common window and the minimum R per policy (the paper: 14/27/14 LEVELLER,
13/26/15 CASSINI, 12/23/17 Crux; minimum R 0.69, 0.63, 0.61).

Output: a table (or with --json the object {"<tenants>": {"<policy>": {"min": [R per repeat],
"avg": [R per repeat]}}}; with --fig9 {"fig9": {"<policy>": {"iterations", "rates", "min",
"avg"}}, ...}); in --out: tenants.json (or fig9.json) with every detail, and the plot
tenants.png (or fig9.png). Each repeat builds and removes its own cluster; with --lock FILE it
holds an flock on FILE for the repeat only, so others on a shared machine interleave. Needs root.
Ctrl-C tears everything down.

examples:
  leveller experiment tenants --repeats 3 --seed 1
  leveller experiment tenants --tenants 4 --policies crux,cassini,leveller --repeats 10 --json
  leveller experiment tenants --fig9 --duration 60
  leveller experiment tenants --plan --tenants 4 --repeats 2     the draws, without running
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from leveller.errors import UserError

MIN_DURATION_S, MAX_DURATION_S = 10.0, 3600.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenants", default="2,3,4", metavar="N,...",
                        help="tenant counts, comma-separated (default 2,3,4)")
    parser.add_argument("--policies", default=None, metavar="P,...",
                        help="comma-separated subset of fair,crux,cassini,leveller (default: all four; "
                        "with --fig9 crux,cassini,leveller)")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="placements per tenant count (default 3; the paper: at least 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the placements and models (default 0)")
    parser.add_argument("--levels", type=int, default=4, metavar="K",
                        help="switch priority levels on the leaf-spine (default 4; --fig9 always uses 2)")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of every policy run (default 60)")
    parser.add_argument("--alone", type=float, default=10.0, metavar="S",
                        help="seconds of every job's run alone, for its ideal time (default 10)")
    parser.add_argument("--ref-gbps", type=float, default=100.0, metavar="G",
                        help="network the catalog's communication times refer to, Gbit/s per rank (default 100)")
    parser.add_argument("--link-mbps", type=float, default=None, metavar="R",
                        help="rate of every emulated link, Mbit/s (default 25: what one ovs-vswitchd thread forwards "
                        "through three bridges without becoming the bottleneck)")
    from leveller.demo.switching import DEFAULT_MODE, MODES

    parser.add_argument("--switching", choices=tuple(MODES), default=DEFAULT_MODE,
                        help="LEVELLER's remedies for the TCP cost of changing priorities: hysteresis (the "
                        "controller's --switch-delta/--switch-dwell), floor (every queue below the top keeps a "
                        "share of its port; the network's, so every policy runs on it), phase (agents demote a "
                        "flow when its communication phase ended), all, or paper (none) (default "
                        f"{DEFAULT_MODE})")
    parser.add_argument("--fig9", action="store_true",
                        help="Figure 9 instead: three 2-host jobs on one bottleneck with 2 levels")
    parser.add_argument("--out", default="out/tenants", metavar="DIR",
                        help="directory for the details (JSON) and the plot (default out/tenants)")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the plot")
    parser.add_argument("--name", default="tenants", help="testbed name, namespaces lvtb-NAME-* (default tenants)")
    parser.add_argument("--lock", metavar="FILE",
                        help="hold an flock on FILE during each repeat (wait for it), e.g. a shared machine's lock")
    parser.add_argument("--plan", action="store_true",
                        help="print the jobs and placements the run would use, and stop (no root needed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (and nothing else) on stdout")
    parser.set_defaults(func=handle)


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values:
        raise UserError(f"{option} {text!r} is invalid; comma-separated whole numbers, e.g. 2,3,4")
    return sorted(set(values))


def _policies(text: str | None, fig9: bool) -> list[str]:
    from leveller.demo.tenants import FIG9_POLICIES
    from leveller.model.limits import POLICIES

    if text is None:
        return list(FIG9_POLICIES if fig9 else POLICIES)
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in POLICIES]
    if bad or not items:
        raise UserError(f"--policies {text!r}: unknown policy {bad[0] if bad else '(none)'!r}; "
                        f"a comma-separated subset of {', '.join(POLICIES)}")
    return list(dict.fromkeys(items))


def check(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """Every input checked before anything starts; UserError names the flag, the value and what is allowed."""
    from leveller.demo.tenants import check_tenants, leafspine
    from leveller.testbed.state import check_name

    policies = _policies(args.policies, args.fig9)
    counts = [3] if args.fig9 else _ints(args.tenants, "--tenants")
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats}: at least 1")
    if not 1 <= args.levels <= 8:
        raise UserError(f"--levels {args.levels}: allowed is 1..8 (switch priority queues)")
    if not (math.isfinite(args.duration) and MIN_DURATION_S <= args.duration <= MAX_DURATION_S):
        raise UserError(f"--duration {args.duration:g}: allowed is {MIN_DURATION_S:g}..{MAX_DURATION_S:g} seconds")
    if not (math.isfinite(args.alone) and 5 <= args.alone <= 600):
        raise UserError(f"--alone {args.alone:g}: allowed is 5..600 seconds")
    if not (math.isfinite(args.ref_gbps) and 1 <= args.ref_gbps <= 3200):
        raise UserError(f"--ref-gbps {args.ref_gbps:g}: allowed is 1..3200")
    from leveller.demo.tenants import LINK_MBPS

    if args.link_mbps is None:
        args.link_mbps = LINK_MBPS
    if not (math.isfinite(args.link_mbps) and 1 <= args.link_mbps <= 1000):
        raise UserError(f"--link-mbps {args.link_mbps:g}: allowed is 1..1000")
    if not args.fig9:
        check_tenants(counts, leafspine(args.levels))
    check_name(args.name)
    if args.lock is not None and not Path(args.lock).parent.is_dir():
        raise UserError(f"--lock {args.lock}: its directory does not exist")
    if os.geteuid() != 0 and not args.plan:
        raise UserError("experiment tenants needs root (namespaces, OVS, eBPF)")
    return counts, policies


def plan(args: argparse.Namespace, counts: list[int]) -> dict[str, Any]:
    """The jobs of every repeat: ``{"<tenants>": [[{"job", "hosts", model...}] per repeat]}`` or fig9's."""
    from leveller.demo.tenants import draw_tenants, fig9_tenants, leafspine

    if args.fig9:
        return {"fig9": [{"job": t.name, **t.to_dict()} for t in fig9_tenants(args.ref_gbps)]}
    topo = leafspine(args.levels)
    return {str(n): [[{"job": t.name, **t.to_dict()} for t in draw_tenants(n, topo, args.seed, r, args.ref_gbps)]
                     for r in range(args.repeats)] for n in counts}


def handle(args: argparse.Namespace) -> int:
    counts, policies = check(args)
    if args.plan:
        doc = plan(args, counts)
        if args.json:
            print(json.dumps(doc))
            return 0
        from rich.console import Console

        _print_scaling(Console(stderr=True), args)
        for key, reps in doc.items():
            for r, jobs in enumerate(reps if key != "fig9" else [reps]):
                print(f"{key} tenants, repeat {r + 1}:" if key != "fig9" else "fig9:")
                for j in jobs:
                    e = j["emulated"]
                    print(f"  {j['job']:4} {j['model']:16} hosts {','.join(j['hosts']):20} C {e['compute_s']:.3f} s "
                          f"M {e['comm_s']:.3f} s slack {e['slack_s']:.3f} s (C:M {j['compute_to_comm']:.2f})")
        return 0
    from leveller.commands import output_dir

    out = output_dir(args.out)
    from rich.console import Console

    console = Console(stderr=True)
    _print_scaling(console, args)
    from leveller.demo.interrupts import unwind_on_signals

    with unwind_on_signals():  # SIGTERM / Ctrl-C unwind the context managers: everything is torn down
        repeats = _run(args, counts, policies, console)
    if args.fig9:
        return _finish_fig9(args, repeats[0], out)
    return _finish_tenants(args, repeats, out)


def _settings(args: argparse.Namespace) -> Any:
    from leveller.demo.live import LiveSettings

    return LiveSettings(seconds=args.duration, alone_s=args.alone, levels=args.levels)


def _run(args: argparse.Namespace, counts: list[int], policies: list[str], console: Any) -> list[Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from leveller.demo.switching import MODES
    from leveller.demo.tenants_run import run_fig9, run_repeat

    settings = _settings(args)
    switching = MODES[args.switching]
    units = [(n, r) for n in counts for r in range(1 if args.fig9 else args.repeats)]
    total = sum(n * args.alone + len(policies) * args.duration for n, _ in units)
    done: dict[str, float] = {}
    repeats = []
    lock = Path(args.lock) if args.lock else None
    with Progress(TextColumn("{task.description:<30}"), BarColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("setting up", total=total)

        def step(what: str, fraction: float) -> None:
            done[what] = fraction * (args.alone if what.endswith(" alone") else args.duration)
            bar.update(task, completed=sum(done.values()), description=what[:30])

        def note(message: str) -> None:
            if message.startswith("waiting for the lock"):
                console.print(message)
            bar.update(task, description=message[:30])

        for n, r in units:
            if args.fig9:
                rep = run_fig9(policies, settings, args.name, args.ref_gbps, lock, step, note, args.link_mbps,
                               switching)
            else:
                rep = run_repeat(n, r, args.seed, policies, settings, args.name, args.ref_gbps, lock, step, note,
                                 args.link_mbps, switching)
            repeats.append(rep)
            if not args.json:
                console.print(f"{'fig9' if args.fig9 else f'{n} tenants, repeat {r + 1}'} ({rep.seconds:.0f} s): "
                              + "; ".join(f"{run.policy} min {run.min:.3f} (model {run.model_min or 0:.3f}) avg "
                                          f"{run.avg:.3f}" for run in rep.runs))
    return repeats


def _switching(args: argparse.Namespace) -> dict[str, Any]:
    from leveller.demo.switching import MODES

    return MODES[args.switching].to_dict()


def _print_scaling(console: Any, args: argparse.Namespace) -> None:
    """The catalog on the emulated links (always on stderr: it says what the jobs are)."""
    from rich.table import Table

    from leveller.demo.tenants import MAX_S, MIN_S, catalog, scale_model, time_scale

    table = Table(title=f"job catalog (H200 profiles) on the emulated {args.link_mbps:g} Mbit/s links: a ring "
                        f"all-reduce at {args.ref_gbps:g} Gbit/s per rank; times x{time_scale(args.ref_gbps):.2f}, "
                        f"then clamped to {MIN_S:g}-{MAX_S:g} s per iteration", title_justify="left")
    table.add_column("model", no_wrap=True)
    for col in ("C real", "M real", "C:M", "scale", "C emu", "M emu", "slack emu"):
        table.add_column(col, justify="right", no_wrap=True)
    for entry in catalog():
        m = scale_model(entry, 2, args.ref_gbps)
        table.add_row(m.model, f"{m.real_compute_s:.4f}", f"{m.real_comm_s:.4f}",
                      f"{m.real_compute_s / m.real_comm_s:.2f}", f"{m.scale:.2f}", f"{m.compute_s:.3f}",
                      f"{m.comm_s:.3f}", f"{m.slack_s:.3f}")
    console.print(table)
    console.print("seconds per iteration; M for 2 ranks: it grows with the ranks, 2(W-1)/W of the gradient bytes "
                  "per rank (x1.33 for 3, x1.5 for 4 ranks)")


def _finish_tenants(args: argparse.Namespace, repeats: list[Any], out: Path) -> int:
    from leveller.demo.tenants import comparisons, contract

    doc = contract(repeats)
    details = {"results": doc, "comparisons": comparisons(doc),
               "settings": {"seed": args.seed, "repeats": args.repeats, "levels": args.levels,
                            "duration_s": args.duration, "alone_s": args.alone, "ref_gbps": args.ref_gbps,
                            "link_mbps": args.link_mbps, "switching": _switching(args)},
               "repeats": [{"tenants": r.tenants, "repeat": r.repeat, "seconds": round(r.seconds, 1),
                            "jobs": {t.name: t.to_dict() for t in r.jobs},
                            "ideal_s": {k: round(v, 4) for k, v in r.ideal.items()},
                            "runs": {run.policy: {"rates": {k: round(v, 4) for k, v in run.rates.items()},
                                                  "iterations": run.iterations, "window_s": round(run.window_s, 2),
                                                  "top_job_changes": run.switches, "cassini_plans": run.plans,
                                                  "tcp": run.tcp,
                                                  "model": {k: round(v, 4) for k, v in run.model.items()}}
                                     for run in r.runs}} for r in repeats],
               "seconds": round(sum(r.seconds for r in repeats), 1)}
    (out / "tenants.json").write_text(json.dumps(details, indent=1))
    if args.plot:
        from leveller.demo.tenants_plot import plot_fig10

        plot_fig10(out / "tenants.png", doc, f"leaf-spine, {args.repeats} repeat(s), {args.duration:g} s per run, "
                                              f"K={args.levels}; mean over repeats, bars: 1 sd")
        from leveller.demo.tenants_plot import plot_live_vs_model

        plot_live_vs_model(out / "tenants-model.png", [run for r in repeats for run in r.runs],
                           f"R per job, live against the fluid model; switching {args.switching}")
    if args.json:
        print(json.dumps(doc))
        return 0
    _print_table(doc, details, out, args)
    return 0


def _print_table(doc: dict[str, Any], details: dict[str, Any], out: Path, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from leveller.demo.tenants import mean_sd

    console = Console(file=sys.stdout)
    table = Table(title=f"R on the leaf-spine, {args.repeats} repeat(s) of {args.duration:g} s per policy "
                        "(mean ± sd over repeats; per repeat in brackets)")
    for col in ("tenants", "policy", "min R", "avg R", "min per repeat", "avg per repeat"):
        table.add_column(col, justify="left" if col in ("tenants", "policy") else "right")
    for n, pols in doc.items():
        for pol, v in pols.items():
            (m, s), (a, t) = mean_sd(v["min"]), mean_sd(v["avg"])
            table.add_row(n, pol, f"{m:.3f} ± {s:.3f}", f"{a:.3f} ± {t:.3f}",
                          " ".join(f"{x:.2f}" for x in v["min"]), " ".join(f"{x:.2f}" for x in v["avg"]))
    console.print(table)
    console.print(_placements_table(details))
    for n, row in details["comparisons"].items():
        console.print(f"{n} tenants: LEVELLER " + ", ".join(f"{k.replace('_', ' ')} {v:+.1%}" for k, v in row.items()))
    console.print(f"{details['seconds'] / 60:.1f} min in all; details in {out / 'tenants.json'}"
                  + (f", plot {out / 'tenants.png'}" if args.plot else ""))


def _placements_table(details: dict[str, Any]) -> Any:
    """Per placement and policy: min R live / model, the top job's changes and TCP's timeouts."""
    from rich.table import Table

    table = Table(title="per placement: min R live / fluid model, top-job changes, TCP retransmission timeouts")
    for col in ("tenants", "repeat", "policy", "min R live", "min R model", "live / model", "top changes",
                "timeouts", "retrans segs"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for rep in details["repeats"]:
        for pol, run in rep["runs"].items():
            live = min(run["rates"].values())
            model = min(run["model"].values()) if run["model"] else None
            table.add_row(str(rep["tenants"]), str(rep["repeat"] + 1), pol, f"{live:.3f}",
                          "-" if model is None else f"{model:.3f}", "-" if not model else f"{live / model:.2f}",
                          str(run["top_job_changes"]), str(run["tcp"].get("timeouts", "-")),
                          str(run["tcp"].get("retrans_segs", "-")))
    return table


def _finish_fig9(args: argparse.Namespace, rep: Any, out: Path) -> int:
    from leveller.demo.tenants import PAPER_FIG9

    doc = {"fig9": {run.policy: {"iterations": run.iterations, "rates": {k: round(v, 4) for k, v in run.rates.items()},
                                 "min": round(run.min, 4), "avg": round(run.avg, 4), "top_job_changes": run.switches,
                                 "cassini_plans": run.plans, "tcp": run.tcp,
                                 "model": {k: round(v, 4) for k, v in run.model.items()},
                                 "model_min": None if run.model_min is None else round(run.model_min, 4)}
                    for run in rep.runs},
           "switching": _switching(args),
           "window_s": round(min(run.window_s for run in rep.runs), 2),
           "jobs": {t.name: t.to_dict() for t in rep.jobs}, "ideal_s": {k: round(v, 4) for k, v in rep.ideal.items()},
           "paper": PAPER_FIG9, "seconds": round(rep.seconds, 1), "link_mbps": args.link_mbps}
    (out / "fig9.json").write_text(json.dumps(doc, indent=1))
    if args.plot:
        from leveller.demo.tenants_plot import plot_fig9

        plot_fig9(out / "fig9.png", rep.runs, {t.name: t.model.model for t in rep.jobs},
                  f"three 2-host jobs on one {args.link_mbps:g} Mbit/s bottleneck, K=2, {args.duration:g} s")
        from leveller.demo.tenants_plot import plot_live_vs_model

        plot_live_vs_model(out / "fig9-model.png", rep.runs,
                           f"Figure 9: R per job, live against the fluid model; switching {args.switching}")
    if args.json:
        print(json.dumps(doc))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout)
    names = [t.name for t in rep.jobs]
    table = Table(title=f"Figure 9: iterations in a common {doc['window_s']:g} s window, three 2-host jobs on one "
                        "bottleneck, 2 levels")
    for col in ("policy", *[f"{n} ({t.model.model})" for n, t in zip(names, rep.jobs)], "min R", "avg R",
                "min R model", "top changes", "timeouts", "paper"):
        table.add_column(col, justify="left" if col in ("policy", "paper") else "right")
    for run in rep.runs:
        paper = PAPER_FIG9.get(run.policy)
        table.add_row(run.policy, *[str(run.iterations[n]) for n in names], f"{run.min:.3f}", f"{run.avg:.3f}",
                      "-" if run.model_min is None else f"{run.model_min:.3f}", str(run.switches),
                      str(run.tcp.get("timeouts", "-")),
                      f"{'/'.join(map(str, paper['iterations']))}, min {paper['min']}" if paper else "")
    console.print(table)
    console.print("ideal iteration times alone: " + ", ".join(f"{k} {v:.3f} s" for k, v in rep.ideal.items())
                  + f"; {rep.seconds / 60:.1f} min; details in {out / 'fig9.json'}")
    return 0
