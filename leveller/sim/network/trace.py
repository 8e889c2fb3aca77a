"""Synthetic job traces: ``synthetic:jobs=200,seed=1,load=0.8,...``.

Jobs arrive as a Poisson process. Each draws a model uniformly from the H200
catalog (``catalog_data.py``: compute time, gradient bytes, overlap slack) and
a size uniformly among the powers of two in [min_hosts, max_hosts] hosts, and
runs ``ceil(length / compute)`` iterations, its length drawn log-uniformly in
[min_s, max_s] seconds of compute. The arrival rate makes the offered load
(GPU-seconds of compute asked per second / GPUs of the network) equal
``load``. Placement happens at arrival on free hosts (FIFO queue while the
network is full): ``contiguous`` takes the first run of consecutive free hosts
(else the lowest-numbered ones), ``scattered`` a random set of free hosts.
R is measured from the start, so queueing does not count against the network.

Options (defaults): jobs=200, seed=1, load=0.8, placement=contiguous,
min_hosts=1, max_hosts=16, min_s=120, max_s=1200, overlap=1 (0: no slack).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from leveller.errors import UserError
from leveller.sim.network.catalog_data import MODELS
from leveller.sim.network.jobs import JobSpec
from leveller.sim.network.topology import Network

DEFAULTS: dict[str, Any] = {"jobs": 200, "seed": 1, "load": 0.8, "placement": "contiguous", "min_hosts": 1,
                            "max_hosts": 16, "min_s": 120.0, "max_s": 1200.0, "overlap": 1}
PLACEMENTS = ("contiguous", "scattered")
Placer = Callable[[Sequence[str], int], tuple[str, ...] | None]


KINDS: dict[str, type] = {"jobs": int, "seed": int, "load": float, "placement": str, "min_hosts": int,
                          "max_hosts": int, "min_s": float, "max_s": float, "overlap": int}
MINIMUM: dict[str, float] = {"jobs": 1, "seed": 0, "min_hosts": 1, "max_hosts": 1, "overlap": 0}


def _options(spec: str) -> dict[str, Any]:
    """Parse ``synthetic:k=v,...``; UserError naming the option and what is allowed."""
    opts = dict(DEFAULTS)
    allowed = ", ".join(f"{k}={v}" for k, v in DEFAULTS.items())
    for part in filter(None, spec.partition(":")[2].split(",")):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in KINDS:
            raise UserError(f"--trace {spec!r}: unknown option {part!r}; allowed (defaults): {allowed}")
        kind = KINDS[key]
        if kind is str:
            if raw not in PLACEMENTS:
                raise UserError(f"--trace {spec!r}: placement = {raw!r}; allowed: {', '.join(PLACEMENTS)}")
            opts[key] = raw
            continue
        try:
            value = kind(raw)
        except ValueError:
            raise UserError(f"--trace {spec!r}: {key} = {raw!r} is not a{'n integer' if kind is int else ' number'}") \
                from None
        low = MINIMUM.get(key)
        if (low is None and not value > 0) or (low is not None and value < low) or (key == "overlap" and value > 1):
            rule = "0 or 1" if key == "overlap" else ("> 0" if low is None else f">= {low:g}")
            raise UserError(f"--trace {spec!r}: {key} = {raw!r} is invalid; {rule}")
        opts[key] = value
    if opts["min_hosts"] > opts["max_hosts"]:
        raise UserError(f"--trace {spec!r}: min_hosts = {opts['min_hosts']} is above max_hosts = {opts['max_hosts']}")
    if opts["min_s"] > opts["max_s"]:
        raise UserError(f"--trace {spec!r}: min_s = {opts['min_s']:g} is above max_s = {opts['max_s']:g}")
    return opts


def synthetic(spec: str, net: Network) -> tuple[list[JobSpec], Placer]:
    """Jobs and the placer of a ``synthetic:`` trace on ``net``; UserError if a job cannot ever be placed."""
    opts = _options(spec)
    n_hosts = len(net.nics)
    if opts["max_hosts"] > n_hosts:
        raise UserError(f"--trace {spec!r}: cannot place a job of max_hosts = {opts['max_hosts']} hosts on "
                        f"{net.name}, which has {n_hosts} hosts; lower max_hosts")
    rng = np.random.default_rng(opts["seed"])
    sizes = [2 ** k for k in range(int(math.log2(opts["max_hosts"])) + 1) if 2 ** k >= opts["min_hosts"]]
    if not sizes:
        sizes = [opts["min_hosts"]]
    count = int(opts["jobs"])
    models = rng.integers(len(MODELS), size=count)
    size = rng.choice(sizes, size=count)
    length = np.exp(rng.uniform(math.log(opts["min_s"]), math.log(opts["max_s"]), size=count))
    gpu_seconds = size * net.gpus_per_host * length
    rate = opts["load"] * net.total_gpus / float(gpu_seconds.mean())
    arrivals = np.cumsum(rng.exponential(1 / rate, size=count))
    jobs = []
    for i in range(count):
        m = MODELS[int(models[i])]
        jobs.append(JobSpec(name=f"j{i:03d}", hosts=None, compute=m["compute_s"], bytes=float(m["bytes"]),
                            arrival=round(float(arrivals[i]), 6),
                            iterations=max(1, math.ceil(length[i] / m["compute_s"])),
                            slack=m["slack_s"] if opts["overlap"] else 0.0, size=int(size[i]), model=m["model"]))
    return jobs, make_placer(opts["placement"], list(net.nics), opts["seed"])


def make_placer(kind: str, order: Sequence[str], seed: int) -> Placer:
    """Choose ``size`` hosts among the free ones (given in network order), or None."""
    position = {h: i for i, h in enumerate(order)}
    calls = [0]

    def contiguous(free: Sequence[str], size: int) -> tuple[str, ...] | None:
        if len(free) < size:
            return None
        run: list[str] = []
        for h in free:
            if run and position[h] != position[run[-1]] + 1:
                run = []
            run.append(h)
            if len(run) == size:
                return tuple(run)
        return tuple(free[:size])

    def scattered(free: Sequence[str], size: int) -> tuple[str, ...] | None:
        if len(free) < size:
            return None
        calls[0] += 1
        rng = np.random.default_rng([seed, calls[0]])
        picked = rng.choice(len(free), size=size, replace=False)
        return tuple(free[int(i)] for i in picked)

    return contiguous if kind == "contiguous" else scattered
