"""The churn plot: one panel per policy, a row per job from its start to its last iteration, each
stretch coloured by the highest level the controller gave the job's flows then (grey: no level)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def level_spans(steps: Sequence[Sequence[float]], end: float) -> dict[int, list[tuple[float, float]]]:
    """Per level, the (start, width) stretches of ``steps`` ([t, level] in time order) before ``end``.

    Consecutive steps at one level are one stretch, and each level is drawn in one call: a 600 s run
    has thousands of steps per job, and an artist per step took matplotlib many minutes to draw.
    """
    spans: dict[int, list[tuple[float, float]]] = {}
    run: list[Any] = []  # [level, start, end] of the stretch being drawn
    nexts = [float(step[0]) for step in steps[1:]] + [end]
    for (t, level), t_next in zip(steps, nexts):
        t, t1 = float(t), min(t_next, end)
        if t1 <= t:  # no time at this level (two steps at once, or past the end)
            continue
        if run and run[0] == int(level) and run[2] == t:
            run[2] = t1
            continue
        if run:
            spans.setdefault(run[0], []).append((run[1], run[2] - run[1]))
        run = [int(level), t, t1]
    if run:
        spans.setdefault(run[0], []).append((run[1], run[2] - run[1]))
    return spans


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
            for level, spans in level_spans(job["levels"], end).items():
                ax.broken_barh(spans, (row - 0.4, 0.8), color=colors(level))
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
