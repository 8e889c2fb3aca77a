"""Plots of the tenants experiment: the paper's Figure 10 (minimum and average R per tenant count
and policy) and Figure 9 (iterations per job in a common window, minimum R per policy)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.tenants.plan import PolicyRun, mean_sd

COLORS = {"fair": "#7f7f7f", "crux": "#d62728", "cassini": "#2ca02c", "leveller": "#1f77b4"}


def plot_fig10(path: Path, doc: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]], title: str) -> None:
    """Grouped bars per tenant count: minimum R solid, average R pale with a dashed edge, mean over
    the repeats with one standard deviation as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted(doc, key=int)
    policies = [p for p in COLORS if any(p in doc[n] for n in counts)]
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i, pol in enumerate(policies):
        xs, mins, min_err, avgs, avg_err = [], [], [], [], []
        for k, n in enumerate(counts):
            if pol not in doc[n]:
                continue
            xs.append(k - 0.4 + width * (i + 0.5))
            m, s = mean_sd(doc[n][pol]["min"])
            a, t = mean_sd(doc[n][pol]["avg"])
            mins.append(m)
            min_err.append(s)
            avgs.append(a)
            avg_err.append(t)
        ax.bar(xs, avgs, width * 0.9, yerr=avg_err, color=COLORS[pol], alpha=0.3, edgecolor=COLORS[pol],
               linestyle="--", capsize=2, error_kw={"alpha": 0.5})
        ax.bar(xs, mins, width * 0.9, yerr=min_err, color=COLORS[pol], label=pol, capsize=2)
    ax.set_xticks(range(len(counts)), [f"{n} tenants" for n in counts])
    ax.set_ylabel("normalized progress rate R")
    ax.set_ylim(0, 1.25)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, ncol=len(policies), loc="upper center", title="min (solid), avg (pale)",
              title_fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_fig9(path: Path, runs: Sequence[PolicyRun], jobs: Mapping[str, Any], title: str) -> None:
    """Iterations of every job in the common window, grouped by policy, minimum R on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(jobs)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for i, job in enumerate(names):
        xs = [k - 0.4 + width * (i + 0.5) for k in range(len(runs))]
        ax.bar(xs, [r.iterations[job] for r in runs], width * 0.9, label=f"{job} ({jobs[job]})",
               color=("#9467bd", "#ff7f0e", "#17becf", "#8c564b")[i % 4])
    for k, r in enumerate(runs):
        top = max(r.iterations.values())
        ax.text(k, top * 1.03, f"min R {r.min:.2f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(runs)), [r.policy for r in runs])
    ax.set_ylabel("iterations in the common window")
    ax.set_ylim(0, max(max(r.iterations.values()) for r in runs) * 1.2)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(names))  # below: bars stay visible
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_live_vs_model(path: Path, runs: Sequence[PolicyRun], title: str) -> None:
    """R of every job of every run: the fluid model's (x) against the live measurement (y), one colour
    per policy, with the diagonal (live = model) and the 0.9 x model line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    for pol, color in COLORS.items():
        pts = [(run.model[j], r) for run in runs if run.policy == pol for j, r in run.rates.items() if j in run.model]
        if pts:
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, s=18, color=color, label=pol, alpha=0.8)
    ax.plot([0, 1.05], [0, 1.05], color="#444", linewidth=0.8, label="live = model")
    ax.plot([0, 1.05], [0, 0.945], color="#444", linewidth=0.6, linestyle=":", label="0.9 x model")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("R in the fluid model (same jobs, placement, options)")
    ax.set_ylabel("R measured live")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
