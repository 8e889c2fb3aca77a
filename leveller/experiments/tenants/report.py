"""What `leveller experiment tenants` shows and keeps: the draws it would run (--plan), the details
documents (tenants.json, fig9.json: their "results" / "fig9" part is the command's JSON contract), the
plots, and the tables the command prints (rich renderables; the command prints them).

``opts`` is the command's parsed options (attributes seed, repeats, levels, duration, alone, ref_gbps,
link_mbps, switching, fig9).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.tenants.plan import (
    MAX_S,
    MIN_S,
    PAPER_FIG9,
    Repeat,
    catalog,
    comparisons,
    contract,
    draw_tenants,
    fig9_tenants,
    leafspine,
    mean_sd,
    scale_model,
    time_scale,
)

SCALING_NOTE = ("seconds per iteration; M for 2 ranks: it grows with the ranks, 2(W-1)/W of the gradient bytes "
                "per rank (x1.33 for 3, x1.5 for 4 ranks)")


def plan(opts: Any, counts: list[int]) -> dict[str, Any]:
    """The jobs of every repeat: ``{"<tenants>": [[{"job", "hosts", model...}] per repeat]}`` or fig9's."""
    if opts.fig9:
        return {"fig9": [{"job": t.name, **t.to_dict()} for t in fig9_tenants(opts.ref_gbps)]}
    topo = leafspine(opts.levels)
    return {str(n): [[{"job": t.name, **t.to_dict()} for t in draw_tenants(n, topo, opts.seed, r, opts.ref_gbps)]
                     for r in range(opts.repeats)] for n in counts}


def plan_lines(doc: dict[str, Any]) -> list[str]:
    """The --plan output without --json: every repeat's jobs, hosts and emulated times."""
    lines = []
    for key, reps in doc.items():
        for r, jobs in enumerate(reps if key != "fig9" else [reps]):
            lines.append(f"{key} tenants, repeat {r + 1}:" if key != "fig9" else "fig9:")
            for j in jobs:
                e = j["emulated"]
                lines.append(f"  {j['job']:4} {j['model']:16} hosts {','.join(j['hosts']):20} C {e['compute_s']:.3f} s "
                             f"M {e['comm_s']:.3f} s slack {e['slack_s']:.3f} s (C:M {j['compute_to_comm']:.2f})")
    return lines


def scaling_table(opts: Any) -> Any:
    """The catalog on the emulated links (the command always prints it on stderr: it says what the jobs are)."""
    from rich.table import Table

    table = Table(title=f"job catalog (H200 profiles) on the emulated {opts.link_mbps:g} Mbit/s links: a ring "
                        f"all-reduce at {opts.ref_gbps:g} Gbit/s per rank; times x{time_scale(opts.ref_gbps):.2f}, "
                        f"then clamped to {MIN_S:g}-{MAX_S:g} s per iteration", title_justify="left")
    table.add_column("model", no_wrap=True)
    for col in ("C real", "M real", "C:M", "scale", "C emu", "M emu", "slack emu"):
        table.add_column(col, justify="right", no_wrap=True)
    for entry in catalog():
        m = scale_model(entry, 2, opts.ref_gbps)
        table.add_row(m.model, f"{m.real_compute_s:.4f}", f"{m.real_comm_s:.4f}",
                      f"{m.real_compute_s / m.real_comm_s:.2f}", f"{m.scale:.2f}", f"{m.compute_s:.3f}",
                      f"{m.comm_s:.3f}", f"{m.slack_s:.3f}")
    return table


def _switching(opts: Any) -> dict[str, Any]:
    from leveller.experiments.shared.switching import MODES

    return MODES[opts.switching].to_dict()


def _run_doc(run: Any) -> dict[str, Any]:
    return {"rates": {k: round(v, 4) for k, v in run.rates.items()}, "iterations": run.iterations,
            "window_s": round(run.window_s, 2), "top_job_changes": run.switches, "cassini_plans": run.plans,
            "tcp": run.tcp, "model": {k: round(v, 4) for k, v in run.model.items()}, "link_busy": run.link_busy}


def tenants_details(opts: Any, repeats: Sequence[Repeat]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the --json object, every detail: tenants.json) of the Figure 10 runs."""
    doc = contract(repeats)
    details = {"results": doc, "comparisons": comparisons(doc),
               "settings": {"seed": opts.seed, "repeats": opts.repeats, "levels": opts.levels,
                            "duration_s": opts.duration, "alone_s": opts.alone, "ref_gbps": opts.ref_gbps,
                            "link_mbps": opts.link_mbps, "switching": _switching(opts)},
               "repeats": [{"tenants": r.tenants, "repeat": r.repeat, "seconds": round(r.seconds, 1),
                            "jobs": {t.name: t.to_dict() for t in r.jobs},
                            "ideal_s": {k: round(v, 4) for k, v in r.ideal.items()},
                            "runs": {run.policy: _run_doc(run) for run in r.runs}} for r in repeats],
               "seconds": round(sum(r.seconds for r in repeats), 1)}
    return doc, details


def plot_tenants(opts: Any, out: Path, doc: dict[str, Any], repeats: Sequence[Repeat]) -> None:
    """tenants.png (Figure 10) and tenants-model.png (live against the fluid model) in ``out``."""
    from leveller.experiments.tenants.plot import plot_fig10, plot_live_vs_model

    plot_fig10(out / "tenants.png", doc, f"leaf-spine, {opts.repeats} repeat(s), {opts.duration:g} s per run, "
                                          f"K={opts.levels}; mean over repeats, bars: 1 sd")
    plot_live_vs_model(out / "tenants-model.png", [run for r in repeats for run in r.runs],
                       f"R per job, live against the fluid model; switching {opts.switching}")


def tenants_table(opts: Any, doc: dict[str, Any]) -> Any:
    """R per tenant count and policy: mean ± sd over the repeats, and per repeat."""
    from rich.table import Table

    table = Table(title=f"R on the leaf-spine, {opts.repeats} repeat(s) of {opts.duration:g} s per policy "
                        "(mean ± sd over repeats; per repeat in brackets)")
    for col in ("tenants", "policy", "min R", "avg R", "min per repeat", "avg per repeat"):
        table.add_column(col, justify="left" if col in ("tenants", "policy") else "right")
    for n, pols in doc.items():
        for pol, v in pols.items():
            (m, s), (a, t) = mean_sd(v["min"]), mean_sd(v["avg"])
            table.add_row(n, pol, f"{m:.3f} ± {s:.3f}", f"{a:.3f} ± {t:.3f}",
                          " ".join(f"{x:.2f}" for x in v["min"]), " ".join(f"{x:.2f}" for x in v["avg"]))
    return table


def placements_table(details: dict[str, Any]) -> Any:
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


def comparison_lines(details: dict[str, Any]) -> list[str]:
    return [f"{n} tenants: LEVELLER " + ", ".join(f"{k.replace('_', ' ')} {v:+.1%}" for k, v in row.items())
            for n, row in details["comparisons"].items()]


def fig9_doc(opts: Any, rep: Repeat) -> dict[str, Any]:
    """Figure 9's --json object, also its fig9.json."""
    return {"fig9": {run.policy: {"iterations": run.iterations, "rates": {k: round(v, 4) for k, v in run.rates.items()},
                                  "min": round(run.min, 4), "avg": round(run.avg, 4), "top_job_changes": run.switches,
                                  "cassini_plans": run.plans, "tcp": run.tcp,
                                  "model": {k: round(v, 4) for k, v in run.model.items()},
                                  "model_min": None if run.model_min is None else round(run.model_min, 4),
                                  "link_busy": run.link_busy}
                     for run in rep.runs},
            "switching": _switching(opts),
            "window_s": round(min(run.window_s for run in rep.runs), 2),
            "jobs": {t.name: t.to_dict() for t in rep.jobs}, "ideal_s": {k: round(v, 4) for k, v in rep.ideal.items()},
            "paper": PAPER_FIG9, "seconds": round(rep.seconds, 1), "link_mbps": opts.link_mbps}


def plot_fig9(opts: Any, out: Path, rep: Repeat) -> None:
    """fig9.png and fig9-model.png (live against the fluid model) in ``out``."""
    from leveller.experiments.tenants.plot import plot_fig9 as plot
    from leveller.experiments.tenants.plot import plot_live_vs_model

    plot(out / "fig9.png", rep.runs, {t.name: t.model.model for t in rep.jobs},
         f"three 2-host jobs on one {opts.link_mbps:g} Mbit/s bottleneck, K=2, {opts.duration:g} s")
    plot_live_vs_model(out / "fig9-model.png", rep.runs,
                       f"Figure 9: R per job, live against the fluid model; switching {opts.switching}")


def fig9_table(doc: dict[str, Any], rep: Repeat) -> Any:
    """Iterations per job and policy in the common window, min and average R, next to the paper's."""
    from rich.table import Table

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
    return table


def write_fig9(opts: Any, out: Path, rep: Repeat) -> dict[str, Any]:
    """fig9.json (and with --plot its plots) in ``out``; returns the document (the --json object)."""
    doc = fig9_doc(opts, rep)
    (out / "fig9.json").write_text(json.dumps(doc, indent=1))
    if opts.plot:
        plot_fig9(opts, out, rep)
    return doc


def write_tenants(opts: Any, out: Path, repeats: Sequence[Repeat]) -> tuple[dict[str, Any], dict[str, Any]]:
    """tenants.json (and with --plot its plots) in ``out``; returns (the --json object, the details)."""
    doc, details = tenants_details(opts, repeats)
    (out / "tenants.json").write_text(json.dumps(details, indent=1))
    if opts.plot:
        plot_tenants(opts, out, doc, repeats)
    return doc, details


def repeat_line(opts: Any, n: int, r: int, rep: Repeat) -> str:
    """The line shown once a repeat is done (min and average R per policy, live and modelled)."""
    return (f"{'fig9' if opts.fig9 else f'{n} tenants, repeat {r + 1}'} ({rep.seconds:.0f} s): "
            + "; ".join(f"{run.policy} min {run.min:.3f} (model {run.model_min or 0:.3f}) avg "
                        f"{run.avg:.3f}" for run in rep.runs))


def fig9_output(doc: dict[str, Any], rep: Repeat, out: Path) -> list[Any]:
    """What the command prints of Figure 9 without --json: the table and a footer."""
    return [fig9_table(doc, rep),
            "ideal iteration times alone: " + ", ".join(f"{k} {v:.3f} s" for k, v in rep.ideal.items())
            + f"; {rep.seconds / 60:.1f} min; details in {out / 'fig9.json'}"]


def tenants_output(opts: Any, doc: dict[str, Any], details: dict[str, Any], out: Path) -> list[Any]:
    """What the command prints of Figure 10 without --json: the tables, the comparisons and a footer."""
    return [tenants_table(opts, doc), placements_table(details), *comparison_lines(details),
            f"{details['seconds'] / 60:.1f} min in all; details in {out / 'tenants.json'}"
            + (f", plot {out / 'tenants.png'}" if opts.plot else "")]
