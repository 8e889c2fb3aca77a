"""Pictures of network simulation runs: CDF of R per policy, R over time per job, link utilisation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from leveller.sim.network.engine import SimResult

COLORS = {"fair": "#7f7f7f", "crux": "#d62728", "cassini": "#2ca02c", "leveller": "#1f77b4"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, ax, path: Path, legend: bool = True) -> Path:
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_cdf(results: Sequence[SimResult], path: Path) -> Path:
    """Empirical CDF of the jobs' R, one line per policy."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        rates = np.sort(np.asarray(r.rates))
        if len(rates):
            ax.step(rates, np.arange(1, len(rates) + 1) / len(rates), where="post",
                    label=f"{r.policy} (min {rates[0]:.3f})", color=COLORS.get(r.policy))
    ax.set_xlabel("normalized progress rate R")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    return _save(plt, fig, ax, path)


def plot_rates_over_time(result: SimResult, path: Path) -> Path:
    """R of every job over simulated time (the five lowest final R highlighted)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    series: dict[str, list[tuple[float, float]]] = {}
    for t, rates in result.samples:
        for name, r in rates.items():
            series.setdefault(name, []).append((t, r))
    final = sorted((pts[-1][1], name) for name, pts in series.items() if pts)
    low = {name for _, name in final[:5]}
    for name, pts in series.items():
        ts, rs = zip(*pts)
        if name in low:
            ax.plot(ts, rs, lw=1.4, label=name)
        else:
            ax.plot(ts, rs, lw=0.5, color="#bbbbbb")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("R")
    ax.set_title(f"{result.policy}: R over time per job (lowest five in colour)")
    return _save(plt, fig, ax, path, legend=bool(low))


def plot_links(results: Sequence[SimResult], path: Path) -> Path:
    """Mean utilisation of every directed link that carried traffic, sorted, one line per policy."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        util = np.sort(np.asarray(list(r.link_utilization.values())))[::-1]
        if len(util):
            ax.plot(np.arange(1, len(util) + 1), util, label=r.policy, color=COLORS.get(r.policy))
    ax.set_xscale("log")
    ax.set_xlabel("directed links carrying traffic, busiest first")
    ax.set_ylabel("mean utilisation over the run")
    return _save(plt, fig, ax, path)


def plot_all(results: Sequence[SimResult], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = [plot_cdf(results, directory / "cdf-rate.png"), plot_links(results, directory / "link-utilisation.png")]
    for r in results:
        out.append(plot_rates_over_time(r, directory / f"rate-over-time-{r.policy}.png"))
    return out
