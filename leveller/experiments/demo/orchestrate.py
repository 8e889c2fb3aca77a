"""The whole demo: cluster up, profile every job shape alone, run each example under every
policy, measure, plot, tear down. Progress goes to a callback (the CLI draws a rich bar)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.demo.results import RunResult
from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.measure import top_job_changes
from leveller.experiments.shared.policy_run import LiveSettings, profile_alone, run_policy
from leveller.model.limits import PAPER_POLICIES as POLICIES

Step = Callable[[str, float], None]  # (what is running, fraction of that step done)


def _quiet(_: str, __: float = 0.0) -> None:
    return None


def steps(examples: Sequence[str], policies: Sequence[str]) -> list[tuple[str, str]]:
    """(example, policy) runs in order."""
    return [(ex, pol) for ex in examples for pol in policies]


def run_demo(examples: Sequence[str] = ("pair", "trio"), policies: Sequence[str] = POLICIES,
             settings: LiveSettings = LiveSettings(), out_dir: Path | None = None, name: str = "demo",
             run_dir: Path | None = None, step: Step = _quiet,
             note: Callable[[str], None] = lambda _: None,
             floor: float | None = None) -> tuple[list[RunResult], dict[str, float]]:
    """Run the demo on a fresh cluster (its switch queues' ``floor``, None: the default); returns the measured
    runs and the profiled ideal times per shape."""
    results: list[RunResult] = []
    with DemoCluster(name, run_dir, progress=note, floor=floor) as cluster:
        shapes: dict[str, Any] = {}
        for ex in examples:
            for job in plan(ex):
                shapes.setdefault(job.shape, job)
        ideal_by_shape: dict[str, float] = {}
        for shape, job in shapes.items():
            ideal_by_shape[shape] = profile_alone(cluster, job.live(settings.unit_s), settings,
                                                  functools.partial(step, f"profiling {shape} alone"),
                                                  tag=f"alone-{shape.replace(':', '-')}")
        for ex, pol in steps(examples, policies):
            jobs = plan(ex)
            ideal = {j.name: ideal_by_shape[j.shape] for j in jobs}
            out = run_policy(cluster, f"{ex}-{pol}", pol, [j.live(settings.unit_s) for j in jobs], ideal, settings,
                             functools.partial(step, f"{ex} under {pol}"))
            run = RunResult(ex, pol, [j.name for j in jobs], [out.rates[j.name] for j in jobs],
                            [out.logs[j.name].iterations_by(out.t_end) for j in jobs],
                            [ideal[j.name] for j in jobs], out.t_end - out.t_start,
                            switches=top_job_changes(out.decisions))
            if out_dir is not None:
                from leveller.experiments.demo.plot import plot_run

                path = Path(out_dir) / f"{ex}-{pol}-timeline.png"
                plot_run(path, run, out, ideal)
                run.timeline = str(path)
            results.append(run)
            note(f"{ex} {pol}: R = {', '.join(f'{r:.3f}' for r in run.rates)}")
    return results, ideal_by_shape


def total_seconds(examples: Sequence[str], policies: Sequence[str], settings: LiveSettings) -> float:
    """How long ``run_demo`` runs jobs: each shape profiled alone once, then every example under every policy."""
    shapes = {j.shape for ex in examples for j in plan(ex)}
    return len(shapes) * settings.alone_s + len(examples) * len(policies) * settings.seconds
