"""Timeline pictures of single-link runs: compute / send / half share / wait per job."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from leveller.sim.link import LinkResult

COLORS = {"compute": "#9e9e9e", "send": "#1f77b4", "share": "#9ecae1", "wait": "#f2b134"}
LABELS = {"compute": "compute", "send": "send", "share": "share of the link", "wait": "wait"}


def plot_timelines(panels: Sequence[tuple[str, LinkResult]], path: Path, until: Fraction) -> Path:
    """Draw one panel per (title, result) over [0, until) into the PNG ``path``; return it.

    Results must have been simulated with ``record_until >= until``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    end = float(until)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.0 + 0.55 * sum(len(r.jobs) for _, r in panels)),
                             squeeze=False, sharex=True)
    for ax, (title, result) in zip(axes[:, 0], panels):
        n = len(result.jobs)
        for seg in result.segments:
            if seg.start >= until:
                continue
            stop = min(seg.end, until)
            ax.broken_barh([(float(seg.start), float(stop - seg.start))], (n - 1 - seg.job - 0.35, 0.7),
                           facecolors=COLORS[seg.kind], edgecolor="white", linewidth=0.5)
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"Job {n - i}" for i in range(n)])
        rates = ", ".join(f"{float(r):.3f}" for r in result.rates)
        ax.set_title(f"{title}: R -> {rates}", fontsize=10, loc="left")
        ax.set_xlim(0, end)
        ax.set_ylim(-0.6, n - 0.4)
    axes[-1, 0].set_xlabel("time (link units)")
    fig.legend(handles=[Patch(color=COLORS[k], label=LABELS[k]) for k in COLORS], loc="lower center",
               ncol=len(COLORS), frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
