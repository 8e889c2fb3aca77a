"""The churn plot: one panel per policy, a row per job from its start to its last iteration, each
stretch coloured by the highest level the controller gave the job's flows then (grey: no level)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plot_churn(path: Path, doc: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    policies = doc["policies"]
    levels = int(doc["settings"]["levels"])
    colors = plt.get_cmap("viridis", levels)
    names = [a["name"] for a in doc["arrivals"]]
    fig, axes = plt.subplots(len(policies), 1, figsize=(10, 1.2 + 0.22 * max(4, len(names)) * len(policies)),
                             sharex=True, squeeze=False)
    for ax, (policy, p) in zip(axes[:, 0], policies.items()):
        for row, name in enumerate(names):
            job = p["jobs"][name]
            if "start" not in job:
                continue
            start = job["start"]
            end = start + (job["iterations"] * job["ideal_s"] / job["rate"] if job.get("rate") else 0.0)
            ax.broken_barh([(start, max(0.01, end - start))], (row - 0.4, 0.8), color="0.85")
            steps = job["levels"]
            for (t, level), nxt in zip(steps, [*steps[1:], [end, None]]):
                t1 = min(float(nxt[0]), end)
                if t1 > t:
                    ax.broken_barh([(t, t1 - t)], (row - 0.4, 0.8), color=colors(level))
            if not job["finished"]:
                ax.plot([end], [row], marker=">", color="k", markersize=3)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=6)
        ax.invert_yaxis()
        ax.set_title(f"{policy}: {p['jobs_finished']} finished, min R {p['min']}, never ranked "
                     f"{len(p['never_ranked'])}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the run started")
    handles = [Patch(color=colors(k), label=f"level {k}") for k in range(levels)]
    handles.append(Patch(color="0.85", label="no level"))
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=levels + 1)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
