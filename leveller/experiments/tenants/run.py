"""Runs of the tenants experiment on the live cluster, through the demo's orchestration.

One *repeat* = one placement of N tenants: a fresh cluster (leveller.experiments.shared.cluster.DemoCluster on the
leaf-spine), every job profiled alone in place (its ideal iteration time), then one run per
policy with the whole live system (leveller.experiments.shared.policy_run.run_policy; under ``leveller`` the agents
also apply the overlap rule), then the cluster comes down. With ``lock`` the repeat holds an
``flock`` on that file from start to end, so other users of a shared machine interleave between
repeats. Progress goes to two callbacks; Ctrl-C / SIGTERM unwind the with-blocks (the caller
wraps the run in leveller.experiments.shared.interrupts.unwind_on_signals), which tears everything down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from leveller.core.switching import PAPER
from leveller.core.topology import Topology
from leveller.errors import UserError
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.linkbusy import LinkSampler, fabric_directions
from leveller.experiments.shared.measure import top_job_changes
from leveller.experiments.shared.policy_run import LiveSettings, profile_alone, run_policy
from leveller.experiments.shared.switching import DEFAULT_MODE, MODES, LiveSwitching
from leveller.experiments.shared.tcpstats import difference, read_counters
from leveller.experiments.tenants.model import model_rates
from leveller.experiments.tenants.plan import (
    LINK_MBPS,
    PolicyRun,
    Repeat,
    Tenant,
    draw_tenants,
    dumbbell,
    fig9_tenants,
    leafspine,
)
from leveller.testbed.cluster import port_name

Step = Callable[[str, float], None]  # (what runs, fraction of it done)
Note = Callable[[str], None]


def _quiet(*_: object) -> None:
    return None


@contextlib.contextmanager
def held(lock: Path | None, note: Note = _quiet) -> Iterator[None]:
    """Hold an exclusive flock on ``lock`` (waiting for it) for the block; nothing without a lock."""
    if lock is None:
        yield
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note(f"waiting for the lock {lock}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (others may hold it by path)


def _runs(cluster: DemoCluster, tenants: Sequence[Tenant], policies: Sequence[str], settings: LiveSettings,
          link_mbps: float, label: str, step: Step, switching: LiveSwitching) -> tuple[dict[str, float],
                                                                                   list[PolicyRun]]:
    jobs = [t.job(link_mbps) for t in tenants]
    ideal = {}
    for j in jobs:
        ideal[j.name] = profile_alone(cluster, j, settings, functools.partial(step, f"{label}: {j.name} alone"))
    hosts = [cluster.netns(h) for h in sorted({h for j in jobs for h in j.hosts})]
    topo: Topology = cluster.testbed.topology
    directions = fabric_directions(topo, port_name)
    runs = []
    for pol in policies:
        ours = pol == "leveller"  # the switching options are LEVELLER's; the floor is the network's
        run_settings = dataclasses.replace(
            settings, overlap=ours, controller_args=switching.controller_args() if ours else (),
            agent_args=switching.agent_args() if ours else ())
        before = read_counters(hosts)
        sampler = LinkSampler(cluster.testbed.state.switch_netns, directions)
        out = run_policy(cluster, pol, pol, jobs, ideal, run_settings, functools.partial(step, f"{label}: {pol}"),
                         background=sampler.context)
        tcp = difference(read_counters(hosts), before)
        model = model_rates(topo, jobs, pol, settings.levels, settings.seconds, settings.tau_s,
                            switching.rule if ours else PAPER, cluster.floor)
        plans = [d["shifts"]["plan"] for d in out.decisions if d.get("shifts")]
        runs.append(PolicyRun(pol, {j.name: out.rates[j.name] for j in jobs},
                              {j.name: out.logs[j.name].iterations_by(out.t_end) for j in jobs},
                              out.t_end - out.t_start, top_job_changes(out.decisions), max(plans, default=0),
                              tcp, model, sampler.busy(out.t_start, out.t_end)))
    return ideal, runs


def run_repeat(tenants: int, repeat: int, seed: int, policies: Sequence[str], settings: LiveSettings,
               name: str, ref_gbps: float, lock: Path | None = None, step: Step = _quiet,
               note: Note = _quiet, link_mbps: float = LINK_MBPS,
               switching: LiveSwitching = MODES[DEFAULT_MODE]) -> Repeat:
    """One placement of ``tenants`` tenants under every policy (see the module doc), LEVELLER with
    ``switching``'s options and the cluster's queues with its floor."""
    topo = leafspine(settings.levels, link_mbps)
    drawn = draw_tenants(tenants, topo, seed, repeat, ref_gbps)
    rep = Repeat(tenants, repeat, drawn)
    with held(lock, note):
        started = time.monotonic()
        with DemoCluster(name, progress=note, topology=topo, floor=switching.floor) as cluster:
            rep.ideal, rep.runs = _runs(cluster, drawn, policies, settings, link_mbps,
                                        f"{tenants} tenants #{repeat + 1}", step, switching)
        rep.seconds = time.monotonic() - started
    return rep


def run_fig9(policies: Sequence[str], settings: LiveSettings, name: str, ref_gbps: float,
             lock: Path | None = None, step: Step = _quiet, note: Note = _quiet,
             link_mbps: float = LINK_MBPS, switching: LiveSwitching = MODES[DEFAULT_MODE]) -> Repeat:
    """Three 2-host jobs on the dumbbell's one bottleneck, 2 levels, under every policy (LEVELLER with
    ``switching``'s options, the queues with its floor)."""
    topo = dumbbell(link_mbps)
    jobs = fig9_tenants(ref_gbps)
    rep = Repeat(3, 0, jobs)
    with held(lock, note):
        started = time.monotonic()
        with DemoCluster(name, progress=note, topology=topo, floor=switching.floor) as cluster:
            rep.ideal, rep.runs = _runs(cluster, jobs, policies, dataclasses.replace(settings, levels=topo.levels),
                                        link_mbps, "fig9", step, switching)
        rep.seconds = time.monotonic() - started
    return rep


def run_all(opts: object, counts: Sequence[int], policies: Sequence[str], step: Step = _quiet, note: Note = _quiet,
            done: Callable[[int, int, Repeat], None] | None = None) -> list[Repeat]:
    """Every repeat `leveller experiment tenants` asks for (``opts``: its options; --fig9: Figure 9 once),
    ``done(tenants, repeat, its result)`` after each."""
    o: Any = opts
    settings = LiveSettings(seconds=o.duration, alone_s=o.alone, levels=o.levels)
    lock, switching, repeats = Path(o.lock) if o.lock else None, MODES[o.switching], []
    for n, r in units(o, counts):
        rep = (run_fig9(policies, settings, o.name, o.ref_gbps, lock, step, note, o.link_mbps, switching)
               if o.fig9 else run_repeat(n, r, o.seed, policies, settings, o.name, o.ref_gbps, lock, step, note,
                                         o.link_mbps, switching))
        repeats.append(rep)
        if done is not None:
            done(n, r, rep)
    return repeats


def units(opts: object, counts: Sequence[int]) -> list[tuple[int, int]]:
    """(tenants, repeat) of every repeat to run."""
    o: Any = opts
    return [(n, r) for n in counts for r in range(1 if o.fig9 else o.repeats)]


MIN_DURATION_S, MAX_DURATION_S = 10.0, 3600.0  # of every policy run


def check_options(args: Any) -> tuple[list[int], list[str]]:
    """`leveller experiment tenants`' options (``args``), every one checked before anything starts: (tenant
    counts, policies); UserError names the flag, the value and what is allowed."""
    from leveller.experiments.shared.options import check_live, check_ranges, int_list, policy_list
    from leveller.experiments.tenants.plan import FIG9_POLICIES, LINK_MBPS, check_tenants, leafspine
    from leveller.model.limits import POLICIES
    from leveller.testbed.state import check_name

    policies = policy_list(args.policies, FIG9_POLICIES if args.fig9 else POLICIES)
    counts = [3] if args.fig9 else int_list(args.tenants, "--tenants")
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats}: at least 1")
    if not 1 <= args.levels <= 8:
        raise UserError(f"--levels {args.levels}: allowed is 1..8 (switch priority queues)")
    args.link_mbps = LINK_MBPS if args.link_mbps is None else args.link_mbps
    check_ranges(("--duration", args.duration, MIN_DURATION_S, MAX_DURATION_S, "seconds"),
                 ("--alone", args.alone, 5, 600, "seconds"), ("--ref-gbps", args.ref_gbps, 1, 3200, ""),
                 ("--link-mbps", args.link_mbps, 1, 1000, ""))
    if not args.fig9:
        check_tenants(counts, leafspine(args.levels))
    if args.lock is not None and not Path(args.lock).parent.is_dir():
        check_name(args.name)
        raise UserError(f"--lock {args.lock}: its directory does not exist")
    check_live(args, "experiment tenants", root=not args.plan)
    return counts, policies
