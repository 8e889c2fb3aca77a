"""Parameter sweeps of the network simulator, one task per grid point on Dask distributed.

Grid (JSON): ``{"topology": [T, ...], "jobs": [FILE, ...] | "trace": [SPEC, ...], "policy": [P, ...],
"levels": [K, ...], "seed": [S, ...], "tau": [S, ...]?, "switch_delta": [D, ...]?,
"switch_dwell": [S, ...]?, "duration": S}``. The points are the product of the lists. A point runs
``simulate network`` for one policy (the trace's seed overridden by ``seed``; with ``jobs``, ``seed``
only labels repeats) and gives its parameters plus ``min``, ``p10``, ``avg``, ``gpu_utilization``,
``top_job_changes``, ``congested_share``, ``measured``, ``events``, ``wall_seconds``; or its
parameters plus ``error`` (the error's type and message), which loses no other point.

Bounds, checked before anything runs (a UserError naming the key, the value and what is allowed): at
most MAX_POINTS points (the product of the lists' lengths, computed before the points are made), a
duration of at most MAX_DURATION_S simulated seconds, list entries that are strings of at most
MAX_TEXT characters or numbers, a grid file of at most MAX_GRID_BYTES.

:func:`run_sweep` submits the points not already done to a Dask ``Client`` and rewrites
``results.json`` (a list, one object per point) and ``results.csv`` as points finish (after every
point while that costs under a tenth of the time; always at the end, and also when interrupted), so
an interrupted sweep resumes where it stopped. Every row is checked (:func:`check_row`: each metric
a number in range) as it comes back from a worker, and again when ``--resume`` keeps it: a new row
that fails becomes an error row; a kept row that fails is moved to ``results.invalid.json`` (nothing
is lost) and its point run again. Rows of results.json that are no point of the grid are refused
before the sweep starts (resuming would drop them). :func:`write_summary` adds the mean and 95%
confidence interval (Student t) across seeds per group of the other parameters (``summary.json``)
and a plot.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import time
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
INVALID_JSON = "results.invalid.json"
MAX_POINTS = 100_000  # a day of one-second points on 2 cores; a bigger sweep is several grids
MAX_DURATION_S = 10_000_000  # simulated seconds of one point (116 days; a Philly replay is 75)
MAX_TEXT = 4096  # characters of one list entry (a topology, trace spec or jobs path)
MAX_GRID_BYTES = 1 << 20
MAX_ERROR = 2000  # characters of a row's error message
COUNTS = ("top_job_changes", "measured", "events")  # the other METRICS are numbers >= 0 (R, shares, seconds)
OPTIONAL = ("min", "p10", "avg", "congested_share")  # null when no job was measured


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_grid(path: str) -> dict[str, Any]:
    """Read and check a grid file; UserError naming the key, the value and what is allowed."""
    from leveller.sim.network.jsonfile import read_json

    return check_grid(read_json(path, "--grid", max_bytes=MAX_GRID_BYTES), path)


def check_grid(grid: Any, where: str = "grid") -> dict[str, Any]:
    """The grid's structure (lists, required keys, entries, duration, number of points); each point's
    values (a policy's name, a topology) are checked when it runs."""
    if not isinstance(grid, dict):
        raise UserError(f"{where}: expected a JSON object with keys {', '.join(LISTS)}, duration")
    unknown = sorted(str(k) for k in set(grid) - set(LISTS) - {"duration"})
    if unknown:
        raise UserError(f"{where}: unknown key {_show(unknown[0])}; allowed: {', '.join(LISTS)}, duration")
    for key in REQUIRED:
        if key not in grid:
            raise UserError(f"{where}: missing key {key!r}")
    if ("jobs" in grid) == ("trace" in grid):
        raise UserError(f"{where}: give exactly one of 'jobs' (files) or 'trace' (specs)")
    for key in LISTS:
        if key in grid and (not isinstance(grid[key], list) or not grid[key]):
            raise UserError(f"{where}: {key} = {_show(grid[key])} is invalid; a non-empty list")
    duration = grid["duration"]
    # compared, not converted: float(10**400) would raise OverflowError; NaN fails the comparison
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration <= MAX_DURATION_S:
        raise UserError(f"{where}: duration = {_show(duration)} is invalid; simulated seconds, a number > 0 "
                        f"and at most {MAX_DURATION_S}")
    lengths = {k: len(grid[k]) for k in LISTS if k in grid}
    count = math.prod(lengths.values())
    if count > MAX_POINTS:
        product = " x ".join(f"{k} {n}" for k, n in lengths.items() if n > 1)
        raise UserError(f"{where}: the grid has {count} points ({product}); at most {MAX_POINTS}: split it "
                        "into several grids (each with its own --out)")
    for key in lengths:
        for i, value in enumerate(grid[key]):
            if isinstance(value, str) and len(value) <= MAX_TEXT:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                continue
            raise UserError(f"{where}: {key}[{i}] = {_show(value)} is invalid; a string of at most {MAX_TEXT} "
                            "characters or a number")
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
    # compared before float(): float(10**400) raises OverflowError; NaN and inf fail the range
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e300:
        raise UserError(f"{key} = {_show(value)} is invalid; a finite number >= 0")
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
        raise UserError(f"policy = {_show(policy)} is unknown; allowed: {', '.join(ALL)}")
    if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= MAX_LEVELS:
        raise UserError(f"levels = {_show(levels)} is invalid; an integer 1..{MAX_LEVELS}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UserError(f"seed = {_show(seed)} is invalid; an integer 0..2**63-1")
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


def check_row(row: Any) -> str | None:
    """Why a result row (not an error row) is not a valid result, or None: every metric present, the
    counts integers >= 0, the others finite numbers >= 0 (R, the shares and seconds; null where the
    simulator gives null when no job was measured)."""
    if not isinstance(row, dict):
        return f"{_show(row)} is not an object"
    for key in METRICS:
        if key not in row:
            return f"no {key!r}"
        value = row[key]
        if value is None and key in OPTIONAL:
            continue
        if key in COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return f"{key} = {_show(value)} is invalid; an integer >= 0"
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e300:
            return f"{key} = {_show(value)} is invalid; a finite number >= 0" + (" or null" if key in OPTIONAL else "")
    return None


def read_results(out: Path) -> list[Any]:
    """The rows already in ``out/results.json`` (none if absent); UserError if it is not a JSON list."""
    from leveller.sim.network.jsonfile import read_json

    path = out / RESULTS_JSON
    if not path.exists():
        return []
    rows = read_json(str(path), "--resume")
    if not isinstance(rows, list):
        raise UserError(f"--resume: {path} is not a list of result objects; move it away to start afresh")
    return rows


def kept_rows(out: Path, grid: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """What ``--resume`` keeps of ``out/results.json``: the valid result rows by point key, and the
    invalid ones (``{"row": index, "reason", "value"}``: not an object, failing :func:`check_row`, a
    second row of a point), which are to be run again. Error rows are run again, as always. UserError,
    before anything runs, when rows are no point of this grid: resuming would drop them."""
    keys = {point_key(p) for p in points(grid)}
    kept: dict[str, dict[str, Any]] = {}
    invalid: list[dict[str, Any]] = []
    foreign: list[int] = []
    for i, row in enumerate(read_results(out)):
        if not isinstance(row, dict):
            invalid.append({"row": i, "reason": "not an object", "value": row})
            continue
        key = point_key(row)
        if key not in keys:
            foreign.append(i)
            continue
        if "error" in row:
            continue
        why = check_row(row) or ("a second row of the same point" if key in kept else None)
        if why is not None:
            invalid.append({"row": i, "reason": why, "value": row})
        else:
            kept[key] = row
    if foreign:
        raise UserError(f"--resume: {out / RESULTS_JSON} has {len(foreign)} rows that are no point of this grid "
                        f"(first: row {foreign[0]}); resume with the grid that made them, or choose another --out")
    return kept, invalid


def save_invalid(out: Path, invalid: Sequence[dict[str, Any]]) -> Path:
    """Append the invalid rows --resume does not keep to ``out/results.invalid.json`` (nothing is lost)."""
    from leveller.sim.network.jsonfile import read_json

    path = out / INVALID_JSON
    before = read_json(str(path), "--resume") if path.exists() else []
    if not isinstance(before, list):
        raise UserError(f"--resume: {path} is not a JSON list; move it away")
    tmp = out / (INVALID_JSON + ".tmp")
    tmp.write_text(json.dumps([*before, *invalid], indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _result(point: dict[str, Any], row: Any) -> dict[str, Any]:
    """The row of ``point`` from what a worker sent: its metrics checked, else an error row."""
    if isinstance(row, dict) and "error" in row:
        return {**point, "error": str(row["error"])[:MAX_ERROR]}
    why = check_row(row)
    if why is not None:
        return {**point, "error": f"ResultError: {why}"}
    return {**point, **{k: row[k] for k in METRICS}}


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
              on_done: Callable[[int, int], None] | None = None,
              kept: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run the grid's points on the Dask ``client``; return (and write) all rows, in grid order.

    ``resume``: the valid result rows already in ``out/results.json`` are kept, not run again
    (``kept``: those of :func:`kept_rows`, when the caller has read them already). ``on_done(done,
    total)`` after every point. The rows written are checked (:func:`check_row`); the files are
    rewritten as points finish and at the end, also when the loop is interrupted.
    """
    from distributed import as_completed

    todo = points(grid)
    done: dict[str, dict[str, Any]] = {}
    if resume:
        done = dict(kept) if kept is not None else kept_rows(out, grid)[0]
    pending = [p for p in todo if point_key(p) not in done]
    total = len(todo)
    finished = total - len(pending)
    if on_done is not None:
        on_done(finished, total)
    futures = [client.submit(run_point, p, pure=False) for p in pending]
    by_future = dict(zip(futures, pending))
    last, cost = 0.0, 0.0
    try:
        for future in as_completed(futures):
            point = by_future.pop(future)
            try:
                row = _result(point, future.result())
            except Exception as exc:  # the worker died: still one named error for this point
                row = {**point, "error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR]}
            done[point_key(point)] = row
            finished += 1
            if time.monotonic() - last >= 10 * cost:  # writing costs at most a tenth of the time
                started = time.monotonic()
                write_results(out, ordered(todo, done))
                last, cost = time.monotonic(), time.monotonic() - started
            if on_done is not None:
                on_done(finished, total)
    finally:  # also on Ctrl-C or a lost scheduler: every row computed is on disk
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
