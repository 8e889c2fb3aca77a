"""What the churn runs measured, from their records. Pure (records in, numbers out).

Per job and policy: its start t0 (its ``iter=0`` line), whether it finished (all its iterations
before the end of the run), R = iterations x ideal / (last iteration - t0), the seconds from t0 to
the first decision that gives one of its flows a level (its flows: what the agents reported for
it), and the seconds from its last iteration to the first report of every agent that carried one
of its marks with none left; beside its levels, the R the controller ranked it by and its place in the
order at every decision. The ideal time of a job is the one the controller profiled for it
(at top priority), the smallest over the policy runs, so that every policy's R uses the same one.
Targets: the first level within the job's profiling (PROFILE_SAMPLES iterations at its ideal time)
plus 2 tau; every mark gone within the lease; no job never ranked; LEVELLER's min R of finished
jobs at least every other policy's. A job whose mark outlived the lease also gets ``marks_kept``: the
agents that still marked it, the mark, and which job that flow was reported for then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from leveller.experiments.churn.plan import Arrival, ChurnSettings, PolicyRecord

PROFILE_SAMPLES = 5  # the controller's profiling window, in iterations (leveller.controller.registry)


def job_flows(record: PolicyRecord) -> dict[str, set[str]]:
    """job -> the flow labels the agents reported for it."""
    out: dict[str, set[str]] = {}
    for lines in record.agent_lines.values():
        for line in lines:
            for job, flows in (line.get("bytes") or {}).items():
                out.setdefault(job, set()).update(flows)
    return out


def profiled_ideal(record: PolicyRecord) -> dict[str, float]:
    """job -> the last ideal time the controller's decisions show for it."""
    out: dict[str, float] = {}
    for d in record.decisions:
        for job, info in (d.get("jobs") or {}).items():
            if info.get("ideal"):
                out[job] = float(info["ideal"])
    return out


def level_series(record: PolicyRecord, flows: Mapping[str, set[str]]) -> dict[str, list[tuple[float, int]]]:
    """job -> (decision time, highest level of its flows) for every decision that levels one of them."""
    owner = {label: job for job, labels in flows.items() for label in labels}
    out: dict[str, list[tuple[float, int]]] = {}
    for d in record.decisions:
        best: dict[str, int] = {}
        for label, level in (d.get("levels") or {}).items():
            job = owner.get(label)
            if job is not None:
                best[job] = max(best.get(job, -1), int(level))
        for job, level in best.items():
            out.setdefault(job, []).append((float(d["t"]), level))
    return out


def controller_series(record: PolicyRecord) -> dict[str, list[tuple[float, float | None, int | None]]]:
    """job -> (decision time, the R the controller ranked it by, its place in the order, 0 first) for
    every decision that shows it: what the controller believed, beside what the job did."""
    out: dict[str, list[tuple[float, float | None, int | None]]] = {}
    for d in record.decisions:
        place = {job: i for i, job in enumerate(d.get("order") or ())}
        rates = d.get("rates") or {}
        for job in sorted(set(rates) | set(place)):
            r = rates.get(job)
            out.setdefault(job, []).append((float(d["t"]), None if r is None else float(r), place.get(job)))
    return out


def _marks_any(line: Mapping[str, Any], labels: set[str]) -> bool:
    """Whether an agent's report line marks one of the flows ``labels``."""
    return not labels.isdisjoint(line.get("marks") or {})


def marks_gone(record: PolicyRecord, labels: set[str], end: float) -> float | None:
    """Seconds after ``end`` until every agent that marked one of ``labels`` reported none of them
    (None: no agent ever marked them); inf when one still held a mark at its last report."""
    worst: float | None = None
    for lines in record.agent_lines.values():
        if not any(_marks_any(line, labels) for line in lines):
            continue
        after = [line for line in lines if line.get("t", 0) >= end]
        cleared = next((line["t"] for line in after if not _marks_any(line, labels)), None)
        if not after and not _marks_any(lines[-1], labels):
            cleared = end  # its last report, before the end, held none of them
        gone = float("inf") if cleared is None else float(cleared) - end
        worst = gone if worst is None else max(worst, gone)
    return worst


def marks_kept(record: PolicyRecord, labels: set[str], end: float, after_s: float) -> list[dict[str, Any]]:
    """Per agent that still marked one of ``labels`` ``after_s`` seconds after ``end``: its first such
    report (time after ``end``), the marks it held of them, and which job each of those flows was
    reported for in that report (``None``: none). What a failed ``no_mark_past_lease`` check needs to
    tell a mark the agent kept for a gone job from a flow another job still reports. An agent whose
    last report, before the lease was over, still marked them is listed with that report and
    ``last_report``: the run has no report of it past the lease (it stopped, or the run did)."""
    out = []
    for host, lines in sorted(record.agent_lines.items()):
        late = next((line for line in lines if line.get("t", 0) >= end + after_s and _marks_any(line, labels)),
                    None)
        unseen = late is None and lines and float(lines[-1].get("t", 0)) < end + after_s \
            and _marks_any(lines[-1], labels)
        if late is None and not unseen:
            continue
        line = late if late is not None else lines[-1]
        held = {k: v for k, v in (line.get("marks") or {}).items() if k in labels}
        owner = {flow: job for job, flows in (line.get("bytes") or {}).items() for flow in flows}
        entry = {"host": host, "t_after_end": round(float(line["t"]) - end, 3), "marks": held,
                 "reported_for": {flow: owner.get(flow) for flow in held},
                 "jobs_reported": sorted(line.get("jobs") or {})}
        if unseen:  # its last report still marked them, and it made none after the lease
            entry["last_report"] = True
        out.append(entry)
    return out


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """min, p10 and mean of ``values`` (None each when there are none)."""
    if not values:
        return {"min": None, "p10": None, "mean": None}
    arr = np.asarray(values, dtype=float)
    return {"min": round(float(arr.min()), 4), "p10": round(float(np.percentile(arr, 10)), 4),
            "mean": round(float(arr.mean()), 4)}


def summarize(arrivals: Sequence[Arrival], records: Sequence[PolicyRecord], settings: ChurnSettings,
              model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON result: per policy the R figures and per job the timings (and ``model``, the fluid
    model's figures on the same arrivals: churn.model); the checks."""
    ideals: dict[str, float] = {}
    for r in records:
        for job, t in profiled_ideal(r).items():
            ideals[job] = min(t, ideals.get(job, t))
    policies: dict[str, Any] = {}
    for r in records:
        flows = job_flows(r)
        series = level_series(r, flows)
        seen = controller_series(r)
        jobs: dict[str, Any] = {}
        for a in arrivals:
            log = r.logs.get(a.name)
            entry: dict[str, Any] = {"arrival": a.at, "iterations": 0, "finished": False, "ranked": False}
            if a.name in r.failures:
                entry["failed"] = r.failures[a.name]
            if log is None or log.start is None:
                jobs[a.name] = entry
                continue
            done = max(log.ends, default=0)
            last = log.ends.get(done, log.start)
            ideal = ideals.get(a.name, a.ideal_s)
            entry.update(start=round(log.start - r.t_start, 3), iterations=done,
                         finished=done >= a.iterations, ideal_s=round(ideal, 4))
            if done and last > log.start:
                entry["rate"] = round(done * ideal / (last - log.start), 4)
            levels = series.get(a.name, [])
            entry["ranked"] = bool(levels)
            if levels:
                entry["first_level_s"] = round(levels[0][0] - log.start, 3)
                entry["first_level_target_s"] = round(PROFILE_SAMPLES * ideal + 2 * settings.tau_s, 3)
            # its end: its processes gone (they may outlive the last iteration by a second or two under
            # load, their flows rightly marked meanwhile), else its last iteration, or the run's end
            end = r.exits.get(a.name, last if entry["finished"] else r.t_end)
            entry["end"] = round(end - r.t_start, 3)  # what its marks are timed from
            labels = flows.get(a.name, set())
            gone = marks_gone(r, labels, end)
            if gone is not None:
                entry["marks_gone_s"] = round(gone, 3) if np.isfinite(gone) else None
                if gone > settings.lease_s:
                    entry["marks_kept"] = marks_kept(r, labels, end, settings.lease_s)
            entry["levels"] = [(round(t - r.t_start, 2), lv) for t, lv in levels]
            entry["controller"] = [(round(t - r.t_start, 2), None if x is None else round(x, 4), place)
                                   for t, x, place in seen.get(a.name, [])]
            jobs[a.name] = entry
        finished = [j["rate"] for j in jobs.values() if j["finished"] and "rate" in j]
        started = [j for j in jobs.values() if "start" in j]
        late = [n for n, j in jobs.items() if "first_level_s" in j and j["first_level_s"] > j["first_level_target_s"]]
        kept = [n for n, j in jobs.items() if "marks_gone_s" in j and
                (j["marks_gone_s"] is None or j["marks_gone_s"] > settings.lease_s)]
        first = [j["first_level_s"] for j in jobs.values() if "first_level_s" in j]
        gone_s = [j["marks_gone_s"] for j in jobs.values() if j.get("marks_gone_s") is not None]
        policies[r.policy] = {
            "jobs_arrived": len(arrivals), "jobs_started": len(started), "jobs_finished": len(finished),
            **stats(finished),
            "never_ranked": sorted(n for n, j in jobs.items() if "start" in j and not j["ranked"]),
            "first_level_s": {"max": max(first, default=None), "p50": float(np.median(first)) if first else None},
            "first_level_late": late,
            "marks_gone_s": {"max": max(gone_s, default=None)},
            "marks_past_lease": kept,
            "seconds": round(r.t_end - r.t_start, 1),
            "jobs": jobs,
        }
    return {"settings": {"duration_s": settings.duration_s, "mean_arrival_s": settings.mean_arrival_s,
                         "mean_iterations": settings.mean_iterations, "seed": settings.seed,
                         "levels": settings.levels, "tau_s": settings.tau_s, "lease_s": settings.lease_s,
                         "link_mbps": settings.link_mbps},
            "arrivals": [a.to_dict() for a in arrivals], "policies": policies,
            **({"model": dict(model)} if model is not None else {}), "checks": checks(policies)}


def checks(policies: Mapping[str, Any]) -> dict[str, bool]:
    """The experiment's pass/fail checks (they decide the command's exit status)."""
    out = {"every_job_ranked": all(not p["never_ranked"] for p in policies.values()),
           "first_level_in_time": all(not p["first_level_late"] for p in policies.values()),
           "no_mark_past_lease": all(not p["marks_past_lease"] for p in policies.values()),
           "jobs_finished": all(p["jobs_finished"] > 0 for p in policies.values())}
    ours = policies.get("leveller")
    others = [p for name, p in policies.items() if name != "leveller" and p["min"] is not None]
    if ours is not None and others:
        out["leveller_min_at_least_others"] = ours["min"] is not None and all(ours["min"] >= p["min"]
                                                                              for p in others)
    return out


def table_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """One row per policy: finished, min / p10 / mean R, the model's min R (and jobs finished in the model)
    when the result has a model, never ranked, first level max, marks gone max."""
    def f(x: Any, digits: int = 3) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    model = doc.get("model")
    rows = []
    for name, p in doc["policies"].items():
        m = (model or {}).get(name)
        modelled = [] if model is None else ["-" if m is None or m["min"] is None
                                             else f"{m['min']:.3f} ({m['jobs_finished']})"]
        rows.append([name, f"{p['jobs_finished']}/{p['jobs_started']}", f(p["min"]), f(p["p10"]), f(p["mean"]),
                     *modelled, str(len(p["never_ranked"])), f(p["first_level_s"]["max"], 2),
                     f(p["marks_gone_s"]["max"], 2)])
    return rows
