"""The demo's fluid single-link model of the paper's worked examples (`leveller demo --model-only`, and the
model column next to the live numbers): each example under each policy, optionally with timelines."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.experiments.demo.scenario import PAPER

# example -> the runs of the model: the paper's policies, and for the pair leveller re-ranking every 4 units
MODEL_RUNS = {"pair": (*PAPER["pair"], "leveller-tau4"), "trio": tuple(PAPER["trio"])}
EXAMPLES = {"pair": ("fig3", 15), "trio": ("fig1-trio", 21)}  # name -> (preset, timeline span)


def simulate(cycles: int, plots_dir: Path | None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The fluid single-link model of both examples (leveller.sim), optionally with timelines."""
    from leveller.core.policies import make_policy
    from leveller.sim.link import simulate_link
    from leveller.sim.presets import PRESETS

    if cycles < 1:
        raise UserError(f"--cycles must be an integer >= 1, got {cycles}")
    results: dict[str, dict[str, Any]] = {}
    for example, (preset, span) in EXAMPLES.items():
        runs = {}
        for key in MODEL_RUNS[example]:
            policy = make_policy(key.split("-")[0], 4 if key.endswith("tau4") else 0)
            runs[key] = simulate_link(PRESETS[preset], policy, cycles=cycles,
                                      record_until=Fraction(span) if plots_dir else Fraction(0))
        results[example] = runs
    pictures = []
    if plots_dir is not None:
        from leveller.sim.timeline import plot_timelines

        for example, runs in results.items():
            panels = [(key.replace("-tau4", ", tau=4"), res) for key, res in runs.items()]
            path = plots_dir / f"{example}-model-timeline.png"
            try:
                plot_timelines(panels, path, Fraction(EXAMPLES[example][1]))
            except OSError as exc:
                raise UserError(f"--out {plots_dir}: cannot write {path}: {exc.strerror}") from None
            pictures.append(str(path))
    return results, pictures


def model_like_live(unit_s: float, tau_s: float, levels: int, rule: Any, floor: float,
                    cycles: int) -> dict[str, dict[str, list[float]]]:
    """R per job of each example under each paper policy in the fluid single-link model, with the options
    the live run uses: its switch levels, the controller's tau and switching rule (the dwell in model time
    units of ``unit_s`` seconds), the queues' floor. What the demo's checks compare the live runs with."""
    from leveller.core.policies import make_policy
    from leveller.core.switching import SwitchRule
    from leveller.sim.link import simulate_link
    from leveller.sim.presets import PRESETS

    if cycles < 1:
        raise UserError(f"--cycles must be an integer >= 1, got {cycles}")
    unit = Fraction(str(unit_s))
    switching = SwitchRule(delta=rule.delta, dwell=rule.dwell / unit_s)
    return {example: {policy: [float(r) for r in simulate_link(
        PRESETS[preset], make_policy(policy, Fraction(str(tau_s)) / unit), cycles=cycles, levels=levels,
        switching=switching, floor=Fraction(str(floor))).rates] for policy in PAPER[example]}
        for example, (preset, _) in EXAMPLES.items()}
