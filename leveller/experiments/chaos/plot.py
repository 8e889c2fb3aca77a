"""The chaos run on one page: R over time under faults and undisturbed, faults shaded; marks on the wire."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.chaos.check import Segment, Struck
from leveller.experiments.shared.measure import rate_series


def plot_chaos(path: Path, chaos: Any, base: Any | None, ideal: Mapping[str, float], struck: Sequence[Struck],
               faults: Sequence[Mapping[str, Any]], segments: Sequence[Segment], decisions: Sequence[float]) -> None:
    """PNG at ``path``: top, R(t) of every job (solid: under faults; dashed: the undisturbed run), each
    fault shaded from kill to restart and a dotted line where it had recovered; bottom, the packets each
    sender's datapath marked (seen at the receiver) and the controller's decisions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = chaos.t_start
    fig, (ax_r, ax_w) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, job in enumerate(sorted(chaos.logs)):
        c = colors[i % len(colors)]
        for run, style, what in ((chaos, "-", "faults"), (base, "--", "undisturbed")):
            if run is None:
                continue
            times = [run.t_start + 0.25 * (k + 1) for k in range(int((run.t_end - run.t_start) / 0.25))]
            series = rate_series(run.logs[job], ideal[job], times)
            ax_r.plot([t - run.t_start for t in times], [float("nan") if v is None else v for v in series],
                      style, color=c, label=f"{job} {what} ({run.rates[job]:.3f})")
    for k, f in zip(struck, faults):
        for ax in (ax_r, ax_w):
            ax.axvspan(k.killed - t0, k.restarted - t0, color="red", alpha=0.15, linewidth=0)
            if f.get("recovered_s") is not None:
                ax.axvline(k.restarted - t0 + f["recovered_s"], color="red", linestyle=":", linewidth=1)
        ax_r.text(k.killed - t0, 1.02, f["fault"], fontsize=8, color="darkred")
    ax_r.set_ylim(0, 1.1)
    ax_r.set_ylabel("R (measured)")
    ax_r.set_title("chaos: R of the pair under leveller (shaded: part killed; dotted: recovered)", fontsize=10)
    ax_r.legend(loc="lower right", fontsize=7)
    hosts = sorted({s.host for s in segments})
    for y, host in enumerate(hosts):
        ax_w.broken_barh([(s.start - t0, max(s.end - s.start, 0.01)) for s in segments
                          if s.host == host and s.dscp != 0], (y - 0.35, 0.7), color=colors[y % len(colors)])
    y = len(hosts)
    ax_w.vlines([d - t0 for d in decisions], y - 0.35, y + 0.35, color="black", linewidth=0.3)
    ax_w.set_yticks(range(len(hosts) + 1), [f"{h} marked" for h in hosts] + ["decisions"])
    ax_w.set_xlabel("seconds since the jobs started")
    ax_w.set_xlim(0, chaos.t_end - t0)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
