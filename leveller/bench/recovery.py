"""Recovery after a disturbance: how each kind of R (cumulative, windowed, decayed) behaves.

A job is starved for a while by an unmanaged flow (on a link only it uses);
then everything runs as before. What we measure, from the jobs' iteration end
times (simulated here, logged on the testbed by leveller.experiments.recovery.run):

- steady min R: min over jobs of R over the steady stretch before the
  disturbance (from ``warmup`` to its start), the paper's R over that stretch;
- min R(t): min over jobs of R over the last ``measure_s`` seconds before t,
  progress interpolated linearly inside an iteration (no +-1 iteration steps);
  the same yardstick for every kind of R, whatever the policy ranks by;
- recovery time: from the end of the disturbance until min R(t) is back within
  ``band`` (5 %) of the steady min R and stays there for ``hold_s`` seconds
  (None: not within the run);
- dip min R: the lowest min R(t) once its window has left the disturbance
  (what the catch-up costs the other jobs);
- final min R: the paper's R over the last ``final_s`` seconds of the run.

Pure functions over end times, plus the simulator driver (leveller.sim.link).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

Ends = Sequence[float]  # iteration end times of one job, increasing


@dataclass(frozen=True)
class RateMode:
    """Which R the policy ranks by: cumulative (both None), over a window, or decayed."""

    window_s: float | None = None
    half_life_s: float | None = None

    @property
    def name(self) -> str:
        if self.window_s is not None:
            return f"window {self.window_s:g} s"
        if self.half_life_s is not None:
            return f"half-life {self.half_life_s:g} s"
        return "cumulative"


@dataclass(frozen=True)
class Disturbance:
    job: str  # the starved job
    start_s: float
    duration_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Trace:
    """What one run left to measure: iteration end times, starts and ideal times per job."""

    ends: dict[str, list[float]]
    starts: dict[str, float]
    ideal: dict[str, float]
    disturbance: Disturbance
    horizon_s: float

    def min_rate(self, a: float, b: float) -> float:
        return min(stretch_rate(self.ends[j], self.starts[j], self.ideal[j], a, b) for j in self.ends)


@dataclass(frozen=True)
class RecoveryFigures:
    mode: str
    window_s: float | None
    half_life_s: float | None
    steady_min: float
    recovery_s: float | None
    dip_min: float  # lowest min R(t) once the measurement window no longer covers the disturbance
    final_min: float
    trace: Trace | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("trace")
        return out


def progress(ends: Ends, start: float, t: float) -> float:
    """Iterations done by ``t``, counting the running iteration by the share of it elapsed (its length
    taken as the next recorded one; after the last end, whole iterations only)."""
    k = bisect.bisect_right(ends, t)
    if k == len(ends):
        return float(k)
    prev = ends[k - 1] if k else start
    if t <= prev:
        return float(k)
    return k + (t - prev) / (ends[k] - prev)


def stretch_rate(ends: Ends, start: float, ideal: float, a: float, b: float) -> float:
    """R of a job over [a, b] (interpolated progress times its ideal time over the stretch)."""
    if not b > a:
        raise ValueError(f"empty stretch [{a}, {b}]")
    return (progress(ends, start, b) - progress(ends, start, a)) * ideal / (b - a)


def recovery_figures(mode: RateMode, ends: Mapping[str, Ends], starts: dict[str, float], ideal: dict[str, float],
                     disturbance: Disturbance, horizon_s: float, warmup_s: float, measure_s: float = 10.0,
                     hold_s: float = 10.0, band: float = 0.05, step_s: float = 0.25,
                     final_s: float = 30.0) -> RecoveryFigures:
    """The figures of one run (see the module docstring); times in seconds from the common start."""
    if not warmup_s + measure_s <= disturbance.start_s:
        raise ValueError(f"the disturbance at {disturbance.start_s:g} s leaves no steady stretch after a "
                         f"{warmup_s:g} s warm-up and a {measure_s:g} s measurement window")
    if not disturbance.end_s + hold_s <= horizon_s:
        raise ValueError(f"the run ({horizon_s:g} s) ends before the disturbance ({disturbance.end_s:g} s) "
                         f"plus the hold time {hold_s:g} s")

    trace = Trace({j: list(e) for j, e in ends.items()}, dict(starts), dict(ideal), disturbance, horizon_s)
    min_rate = trace.min_rate
    steady = min_rate(warmup_s, disturbance.start_s)
    times, t = [], disturbance.end_s
    while t <= horizon_s + 1e-9:
        times.append(t)
        t += step_s
    series = [min_rate(x - measure_s, x) for x in times]
    inside = [abs(m - steady) <= band * steady for m in series]
    hold = max(1, round(hold_s / step_s))
    recovery = None
    run = 0  # consecutive samples inside the band, ending at i
    for i, ok in enumerate(inside):
        run = run + 1 if ok else 0
        if run > hold:
            recovery = times[i - hold] - disturbance.end_s
            break
    after = [m for x, m in zip(times, series) if x >= disturbance.end_s + measure_s] or series
    return RecoveryFigures(mode.name, mode.window_s, mode.half_life_s, steady, recovery, min(after),
                           min_rate(max(disturbance.end_s, horizon_s - final_s), horizon_s), trace)


def plot_recovery(path: Path, figures: Sequence[RecoveryFigures], measure_s: float, title: str) -> None:
    """One panel per kind of R: each job's R over the last ``measure_s`` seconds against time, the
    disturbance shaded, the steady min R and its band drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = [f.trace for f in figures if f.trace is not None]
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, 2.4 * len(traces)), sharex=True, squeeze=False)
    for ax, f, tr in zip(axes[:, 0], figures, traces):
        d = tr.disturbance
        times = [measure_s + 0.5 * k for k in range(int((tr.horizon_s - measure_s) / 0.5) + 1)]
        for job in sorted(tr.ends):
            ax.plot(times, [stretch_rate(tr.ends[job], tr.starts[job], tr.ideal[job], t - measure_s, t)
                            for t in times], label=f"job {job}", linewidth=1)
        ax.axvspan(d.start_s, d.end_s, color="grey", alpha=0.25, label=f"job {d.job} starved")
        ax.axhspan(f.steady_min * 0.95, f.steady_min * 1.05, color="green", alpha=0.12, label="steady min R +-5%")
        shown = "-" if f.recovery_s is None else f"{f.recovery_s:.1f} s"
        ax.set_title(f"ranked by {f.mode}: recovery {shown}", fontsize=9)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel(f"R, last {measure_s:g} s")
    axes[0, 0].legend(fontsize=7, ncol=4, loc="lower left")
    axes[-1, 0].set_xlabel("seconds")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the fluid simulator ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SimSetup:
    """Jobs C:M (seconds) on one link, job ``disturbance.job`` starved; leveller re-ranks every ``tau_s``."""

    jobs: tuple[tuple[Fraction, Fraction], ...]
    disturbance: Disturbance
    horizon_s: float
    warmup_s: float
    tau_s: Fraction = Fraction(0)
    levels: int | None = None


def simulate_recovery(setup: SimSetup, modes: Sequence[RateMode], measure_s: float = 10.0,
                      hold_s: float = 10.0, band: float = 0.05,
                      on_mode: Callable[[str], None] = lambda _: None) -> list[RecoveryFigures]:
    """One simulator run per mode (leveller.sim.link), each measured by :func:`recovery_figures`."""
    from leveller.core.policies import LevellerPolicy
    from leveller.model.shape import JobShape
    from leveller.sim.link import Starve, job_name, simulate_link

    jobs = [JobShape(c, m) for c, m in setup.jobs]
    names = [job_name(i) for i in range(len(jobs))]
    if setup.disturbance.job not in names:
        raise ValueError(f"starved job {setup.disturbance.job!r} is not one of {names}")
    d = setup.disturbance
    starve = [Starve(names.index(d.job), Fraction(d.start_s), Fraction(d.start_s) + Fraction(d.duration_s))]
    longest = max(j.ideal for j in jobs)
    cycles = int(Fraction(setup.horizon_s) / longest) + 1
    out = []
    for mode in modes:
        on_mode(mode.name)
        res = simulate_link(jobs, LevellerPolicy(tau=setup.tau_s), cycles=cycles, levels=setup.levels,
                            rate_window=None if mode.window_s is None else Fraction(mode.window_s),
                            rate_half_life=None if mode.half_life_s is None else Fraction(mode.half_life_s),
                            starve=starve, record_ends=True)
        ends = {names[i]: [float(t) for t in res.ends[i]] for i in range(len(jobs))}
        out.append(recovery_figures(mode, ends, {n: 0.0 for n in names},
                                    {n: float(j.ideal) for n, j in zip(names, jobs)},
                                    d, setup.horizon_s, setup.warmup_s, measure_s, hold_s, band))
    return out


# ---- the network simulator ---------------------------------------------------------------------------

PAIR_UNIT_S = 0.25  # the demo's time unit: the paper's pair C:M = 1:1 and 1:2 are 0.25:0.25 and 0.25:0.5 s
DUMBBELL = "dumbbell:bottleneck_mbps=100"


def network_pair(unit_s: float = PAIR_UNIT_S, mbps: float = 100.0) -> list:
    """The paper's pair on the dumbbell: job 1 (h1 <-> h3) C:M = 1:1, job 2 (h2 <-> h4) 1:2, in units of
    ``unit_s`` seconds; both rings cross the bottleneck in each direction (leveller.sim.network)."""
    from leveller.model.job import JobSpec

    per_s = mbps * 1e6 / 8
    return [JobSpec("1", ("h1", "h3"), unit_s, unit_s * per_s), JobSpec("2", ("h2", "h4"), unit_s, 2 * unit_s * per_s)]


def network_recovery(modes: Sequence[RateMode], disturbance: Disturbance, horizon_s: float, warmup_s: float,
                     tau_s: float = 0.0, levels: int = 2, measure_s: float = 10.0, hold_s: float = 10.0,
                     band: float = 0.05, on_mode: Callable[[str], None] = lambda _: None) -> list[RecoveryFigures]:
    """The pair on the dumbbell in the network simulator, one run per mode; job ``disturbance.job``
    starved by an unmanaged flow holding its host's uplink (h1>s1 or h2>s1) for the disturbance."""
    from leveller.sim.network.engine import Disturbance as LinkHeld
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import load_network

    specs = network_pair()
    uplink = {"1": "h1>s1", "2": "h2>s1"}
    if disturbance.job not in uplink:
        raise ValueError(f"starved job {disturbance.job!r} is not one of {sorted(uplink)}")
    net = load_network(DUMBBELL)
    held = [LinkHeld(uplink[disturbance.job], disturbance.start_s, disturbance.duration_s)]
    out = []
    for mode in modes:
        on_mode(mode.name)
        ends: dict[str, list[float]] = {s.name: [] for s in specs}

        def record(t: float, sim: Simulation, ends: dict[str, list[float]] = ends) -> None:
            for j in sim.running.values():
                done = j.iterations_at(t)
                while len(ends[j.name]) < done:
                    ends[j.name].append(t)

        sim = Simulation(net, specs, make_net_policy("leveller", tau_s, mode.window_s, mode.half_life_s), levels,
                         horizon_s, on_rates=record, disturbances=held)
        result = sim.run()
        ideal = {j.name: float(j.ideal) for j in result.jobs if j.ideal is not None}
        out.append(recovery_figures(mode, ends, {s.name: 0.0 for s in specs}, ideal, disturbance, horizon_s,
                                    warmup_s, measure_s, hold_s, band))
    return out
