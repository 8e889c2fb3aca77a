"""Parameter sweeps of the network simulator, one task per grid point on Dask distributed.

Grid (JSON): ``{"topology": [T, ...], "jobs": [FILE, ...] | "trace": [SPEC, ...], "policy": [P, ...],
"levels": [K, ...], "seed": [S, ...], "tau": [S, ...]?, "switch_delta": [D, ...]?,
"switch_dwell": [S, ...]?, "duration": S}``. The points are the product of the lists. A point runs
``simulate network`` for one policy (the trace's seed overridden by ``seed``; with ``jobs``, ``seed``
only labels repeats) and gives its parameters plus ``min``, ``p10``, ``avg``, ``gpu_utilization``,
``top_job_changes``, ``congested_share``, ``measured``, ``events``, ``wall_seconds``; or its
parameters plus ``error`` (the error's type and message), which loses no other point.

:func:`run_sweep` submits the points not already done to a Dask ``Client`` and rewrites
``results.json`` (a list, one object per point) and ``results.csv`` after every point, so an
interrupted sweep resumes where it stopped. :func:`write_summary` adds the mean and 95% confidence
interval (Student t) across seeds per group of the other parameters (``summary.json``) and a plot.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from leveller.errors import UserError

LISTS = ("topology", "jobs", "trace", "policy", "levels", "seed", "tau", "switch_delta", "switch_dwell")
REQUIRED = ("topology", "policy", "levels", "seed", "duration")
PARAMS = ("topology", "jobs", "trace", "policy", "levels", "seed", "tau", "switch_delta", "switch_dwell",
          "duration")
METRICS = ("min", "p10", "avg", "gpu_utilization", "top_job_changes", "congested_share", "measured", "events",
           "wall_seconds")
STATS = ("min", "p10", "avg", "gpu_utilization", "top_job_changes")
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"


def load_grid(path: str) -> dict[str, Any]:
    """Read and check a grid file; UserError naming the key, the value and what is allowed."""
    from leveller.sim.network.jsonfile import read_json

    return check_grid(read_json(path, "--grid"), path)


def check_grid(grid: Any, where: str = "grid") -> dict[str, Any]:
    """The grid's structure (lists, required keys, duration); each point's values are checked when it runs."""
    if not isinstance(grid, dict):
        raise UserError(f"{where}: expected a JSON object with keys {', '.join(LISTS)}, duration")
    unknown = sorted(set(grid) - set(LISTS) - {"duration"})
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(LISTS)}, duration")
    for key in REQUIRED:
        if key not in grid:
            raise UserError(f"{where}: missing key {key!r}")
    if ("jobs" in grid) == ("trace" in grid):
        raise UserError(f"{where}: give exactly one of 'jobs' (files) or 'trace' (specs)")
    for key in LISTS:
        if key in grid and (not isinstance(grid[key], list) or not grid[key]):
            raise UserError(f"{where}: {key} = {grid[key]!r} is invalid; a non-empty list")
    duration = grid["duration"]
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not math.isfinite(duration) \
            or duration <= 0:
        raise UserError(f"{where}: duration = {duration!r} is invalid; simulated seconds > 0")
    return grid


def points(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The product of the grid's lists, in file order, each with ``duration``."""
    keys = [k for k in LISTS if k in grid]
    return [{**dict(zip(keys, values)), "duration": grid["duration"]}
            for values in itertools.product(*(grid[k] for k in keys))]


def point_key(point: dict[str, Any]) -> str:
    """A canonical text of a point's parameters (what --resume matches on)."""
    return json.dumps({k: point.get(k) for k in PARAMS if k in point}, sort_keys=True)


def run_point(point: dict[str, Any]) -> dict[str, Any]:
    """Simulate one grid point; its parameters plus the metrics, or plus ``error``. Never raises."""
    try:
        return {**point, **_simulate(point)}
    except Exception as exc:  # a bad point is one named error; the sweep goes on
        return {**point, "error": f"{type(exc).__name__}: {exc}"}


def _number(point: dict[str, Any], key: str, default: float) -> float:
    value = point.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UserError(f"{key} = {value!r} is invalid; a number >= 0")
    return float(value)


def _simulate(point: dict[str, Any]) -> dict[str, Any]:
    from leveller.core.switching import SwitchRule
    from leveller.model.limits import MAX_LEVELS
    from leveller.model.limits import POLICIES as ALL
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.jobs import check_paths, load_jobs
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import load_network
    from leveller.sim.network.trace import synthetic

    policy, levels, seed = point["policy"], point["levels"], point["seed"]
    if policy not in ALL:
        raise UserError(f"policy = {policy!r} is unknown; allowed: {', '.join(ALL)}")
    if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= MAX_LEVELS:
        raise UserError(f"levels = {levels!r} is invalid; an integer 1..{MAX_LEVELS}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed = {seed!r} is invalid; an integer >= 0")
    tau = _number(point, "tau", 0.0)
    rule = SwitchRule(_number(point, "switch_delta", 0.0), _number(point, "switch_dwell", 0.0))
    net = load_network(str(point["topology"]))
    placer = None
    if "jobs" in point:
        jobs = load_jobs(str(point["jobs"]), list(net.nics))
        check_paths(jobs, net)
    else:
        spec = str(point["trace"])
        jobs, placer = synthetic(spec + ("," if ":" in spec else ":") + f"seed={seed}", net)
    sim = Simulation(net, jobs, make_net_policy(policy, tau, None, None, rule), levels, float(point["duration"]),
                     placer=placer, congestion=True)
    summary = sim.run().summary()
    return {k: summary[k] for k in METRICS}


def read_results(out: Path) -> list[dict[str, Any]]:
    """The rows already in ``out/results.json`` (none if absent); UserError if it is not a list."""
    path = out / RESULTS_JSON
    if not path.exists():
        return []
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"--resume: {path} is not valid JSON ({exc}); move it away to start afresh") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"--resume: {path} is not a list of result objects")
    return rows


def write_results(out: Path, rows: Sequence[dict[str, Any]]) -> None:
    """``results.json`` and ``results.csv`` (same rows; columns: parameters, metrics, error), atomically."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (RESULTS_JSON + ".tmp")
    tmp.write_text(json.dumps(list(rows), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / RESULTS_JSON)
    params = [k for k in PARAMS if any(k in r for r in rows)]
    columns = params + list(METRICS) + ["error"]
    tmp = out / (RESULTS_CSV + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})
    os.replace(tmp, out / RESULTS_CSV)


def run_sweep(grid: dict[str, Any], out: Path, client: Any, resume: bool = False,
              on_done: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Run the grid's points on the Dask ``client``; return (and write) all rows, in grid order.

    ``resume``: points with a result (not an error) already in ``out/results.json`` are kept, not
    run again. ``on_done(done, total)`` after every point.
    """
    from distributed import as_completed

    todo = points(grid)
    done: dict[str, dict[str, Any]] = {}
    if resume:
        done = {point_key(r): r for r in read_results(out) if "error" not in r}
    pending = [p for p in todo if point_key(p) not in done]
    total = len(todo)
    if on_done is not None:
        on_done(total - len(pending), total)
    futures = [client.submit(run_point, p, pure=False) for p in pending]
    by_future = dict(zip(futures, pending))
    for future in as_completed(futures):
        try:
            row = future.result()
        except Exception as exc:  # the worker died: still one named error for this point
            row = {**by_future[future], "error": f"{type(exc).__name__}: {exc}"}
        done[point_key(row)] = row
        write_results(out, ordered(todo, done))
        if on_done is not None:
            on_done(total - len(pending) + sum(1 for f in futures if f.done()), total)
    rows = ordered(todo, done)
    write_results(out, rows)
    return rows


def ordered(todo: Iterable[dict[str, Any]], done: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [done[k] for k in (point_key(p) for p in todo) if k in done]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student t; 0 for one value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group of parameters other than ``seed``: seeds, errors, and mean / ci95 of every STATS metric."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        key = json.dumps({k: r.get(k) for k in PARAMS if k in r and k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in groups.items():
        ok = [m for m in members if "error" not in m]
        entry: dict[str, Any] = {**json.loads(key), "seeds": len(ok), "errors": len(members) - len(ok)}
        for metric in STATS:
            values = [float(m[metric]) for m in ok if m.get(metric) is not None]
            if values:
                mean, half = mean_ci(values)
                entry[metric] = {"mean": mean, "ci95": half}
        out.append(entry)
    return out


def write_summary(out: Path, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``summary.json`` and ``summary.png`` (min, p10 and average R per point with 95% CIs across seeds)."""
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    plotted = [s for s in summary if "min" in s]
    if not plotted:
        return summary
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    varying = [k for k in PARAMS if k not in ("seed", "duration") and len({json.dumps(s.get(k)) for s in plotted}) > 1]
    labels = [", ".join(f"{s.get(k)}" for k in varying) or "all" for s in plotted]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(plotted) + 2), 4.5))
    width = 0.27
    for i, metric in enumerate(("min", "p10", "avg")):
        xs = [x + (i - 1) * width for x in range(len(plotted))]
        ax.bar(xs, [s[metric]["mean"] for s in plotted], width, yerr=[s[metric]["ci95"] for s in plotted],
               capsize=3, label=f"{metric} R")
    ax.set_xticks(range(len(plotted)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("R (mean over seeds, 95% CI)")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title(" / ".join(varying) if varying else "sweep")
    fig.tight_layout()
    fig.savefig(out / "summary.png", dpi=120)
    plt.close(fig)
    return summary
