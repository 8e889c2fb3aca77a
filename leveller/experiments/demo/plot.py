"""Timeline plot of one live run: R(t) per job, and who held the top priority level when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.demo.scenario import PAPER
from leveller.experiments.shared.measure import rate_series

DETAIL_S = 12.0  # seconds shown in the priority/iteration panel


def top_spans(decisions: Sequence[Mapping[str, Any]], t_end: float) -> dict[str, list[tuple[float, float]]]:
    """job -> [(start, length)] while the controller ranked it first (it held the top level)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    points = [(d["t"], d["order"][0] if d.get("order") else None) for d in decisions if "t" in d]
    for (t, job), (t_next, _) in zip(points, points[1:] + [(t_end, None)]):
        if job is None or t_next <= t:
            continue
        mine = spans.setdefault(job, [])
        if mine and abs(mine[-1][0] + mine[-1][1] - t) < 1e-9:
            mine[-1] = (mine[-1][0], t_next - mine[-1][0])  # contiguous: one longer span
        else:
            mine.append((t, t_next - t))
    return spans


def plot_run(path: Path, run: Any, out: Any, ideal: Mapping[str, float]) -> None:
    """Write ``path`` (PNG): R(t) from the iteration logs over the run, and for the first
    DETAIL_S seconds the iteration ends of every job over the spans where it held the top level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = out.t_start
    steps = int((out.t_end - t0) / 0.25)
    times = [t0 + 0.25 * (i + 1) for i in range(steps)]
    fig, (ax_r, ax_p) = plt.subplots(2, 1, figsize=(9, 6), gridspec_kw={"height_ratios": [3, 2]})
    paper = PAPER.get(run.example, {}).get(run.policy, [])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, job in enumerate(run.jobs):
        c = colors[i % len(colors)]
        series = rate_series(out.logs[job], ideal[job], times)
        ax_r.plot([t - t0 for t in times], [float("nan") if v is None else v for v in series], color=c,
                  label=f"{job} ({run.rates[i]:.3f})")
        if i < len(paper) and paper[i] is not None:
            ax_r.axhline(paper[i], color=c, linestyle=":", linewidth=1)
    ax_r.set_ylim(0, 1.1)
    ax_r.set_ylabel("R (measured)")
    ax_r.set_title(f"{run.example} under {run.policy}: R from a common start (dotted: paper model)")
    ax_r.legend(loc="lower right")
    spans = top_spans(out.decisions, out.t_end)
    for i, job in enumerate(run.jobs):
        c = colors[i % len(colors)]
        y = len(run.jobs) - 1 - i
        ax_p.broken_barh([(s - t0, w) for s, w in spans.get(job, []) if s - t0 < DETAIL_S], (y - 0.35, 0.7),
                         color=c, alpha=0.35, linewidth=0)
        ends = [t - t0 for t in out.logs[job].end_times() if t - t0 < DETAIL_S]
        ax_p.vlines(ends, y - 0.4, y + 0.4, color=c)
    ax_p.set_yticks(range(len(run.jobs)), list(reversed(run.jobs)))
    ax_p.set_xlim(0, DETAIL_S)
    ax_p.set_xlabel("seconds since the jobs started")
    ax_p.set_title("first seconds: iteration ends (lines), top priority level held (shaded)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
