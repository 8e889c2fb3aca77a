"""Demo results as data: the JSON document, table rows and the acceptance checks. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leveller.experiments.demo.scenario import PAPER
from leveller.model.limits import PAPER_POLICIES as POLICIES

# The acceptance figures for `leveller demo --json` on the 2-core machine.
PAIR_LEVELLER_MIN = 0.82
PAIR_FAIR_MIN_MAX = 0.80
PAIR_CRUX_JOB2_MAX = 0.78
TRIO_LEVELLER_MIN = 0.58
TRIO_GAIN_OVER_FAIR = 0.03


@dataclass
class RunResult:
    """One policy run of one example, measured on the testbed."""

    example: str
    policy: str
    jobs: list[str]
    rates: list[float]
    iterations: list[int]
    ideal_s: list[float]
    seconds: float
    timeline: str | None = None
    switches: int = 0  # controller decisions that changed the top job (0 for static policies)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def min(self) -> float:
        return min(self.rates)

    @property
    def avg(self) -> float:
        return sum(self.rates) / len(self.rates)


def json_doc(runs: Sequence[RunResult], model: Mapping[str, Mapping[str, Sequence[float]]],
             settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"pair": {policy: [R per job]}, "trio": {...}}`` measured, plus model, paper and run details."""
    doc: dict[str, Any] = {}
    for r in runs:
        doc.setdefault(r.example, {})[r.policy] = [round(x, 4) for x in r.rates]
    doc["model"] = {ex: {p: [round(float(x), 4) for x in rates] for p, rates in pols.items()}
                    for ex, pols in model.items()}
    doc["paper"] = PAPER
    doc["runs"] = [{"example": r.example, "policy": r.policy, "jobs": r.jobs, "iterations": r.iterations,
                    "ideal_s": [round(x, 4) for x in r.ideal_s], "seconds": round(r.seconds, 2),
                    "top_job_changes": r.switches, "timeline": r.timeline} for r in runs]
    doc["settings"] = dict(settings)
    doc["acceptance"] = {name: ok for name, ok, _ in acceptance(doc)}
    return doc


def _get(doc: Mapping[str, Any], example: str, policy: str) -> list[float] | None:
    return doc.get(example, {}).get(policy)


def acceptance(doc: Mapping[str, Any]) -> list[tuple[str, bool | None, str]]:
    """The issue's acceptance checks on a results document: (name, passed or None if not run, detail)."""
    checks: list[tuple[str, bool | None, str]] = []

    def add(name: str, values: Sequence[list[float] | None], test: Any, detail: Any) -> None:
        if any(v is None for v in values):
            checks.append((name, None, "not run"))
        else:
            checks.append((name, bool(test(*values)), detail(*values)))

    add(f"pair leveller min R >= {PAIR_LEVELLER_MIN}", [_get(doc, "pair", "leveller")],
        lambda lk: min(lk) >= PAIR_LEVELLER_MIN, lambda lk: f"min {min(lk):.3f}")
    add(f"pair fair min R <= {PAIR_FAIR_MIN_MAX}", [_get(doc, "pair", "fair")],
        lambda f: min(f) <= PAIR_FAIR_MIN_MAX, lambda f: f"min {min(f):.3f}")
    add(f"pair crux job 2 R <= {PAIR_CRUX_JOB2_MAX}", [_get(doc, "pair", "crux")],
        lambda c: c[1] <= PAIR_CRUX_JOB2_MAX, lambda c: f"job 2 {c[1]:.3f}")
    add(f"trio leveller min R >= {TRIO_LEVELLER_MIN}", [_get(doc, "trio", "leveller")],
        lambda lk: min(lk) >= TRIO_LEVELLER_MIN, lambda lk: f"min {min(lk):.3f}")
    add(f"trio leveller min R >= fair min R + {TRIO_GAIN_OVER_FAIR}",
        [_get(doc, "trio", "leveller"), _get(doc, "trio", "fair")],
        lambda lk, f: min(lk) >= min(f) + TRIO_GAIN_OVER_FAIR, lambda lk, f: f"{min(lk):.3f} vs {min(f):.3f}")
    return checks


def failed_checks(doc: Mapping[str, Any]) -> list[str]:
    """``name (detail)`` of every acceptance check that ran and failed: what decides the exit status."""
    return [f"{name} ({detail})" for name, ok, detail in acceptance(doc) if ok is False]


def table_rows(example: str, doc: Mapping[str, Any]) -> list[list[str]]:
    """Rows ``policy, job cells..., min, avg`` where a cell is ``measured (model; paper)``."""
    rows = []
    for policy in POLICIES:
        measured = _get(doc, example, policy)
        if measured is None:
            continue
        model = doc.get("model", {}).get(example, {}).get(policy, [None] * len(measured))
        paper = PAPER.get(example, {}).get(policy, [None] * len(measured))
        cells = [f"{m:.3f} ({_fmt(s)}; {_fmt(p)})" for m, s, p in zip(measured, model, paper)]
        rows.append([policy, *cells, f"{min(measured):.3f}", f"{sum(measured) / len(measured):.3f}"])
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
