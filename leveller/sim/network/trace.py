"""Job traces: ``synthetic:jobs=200,seed=1,load=0.8,...`` and ``contended:jobs=N,seed=S,...``.

Jobs arrive as a Poisson process. Each draws a model uniformly from a catalog
(``models=h200``: the measured H200 rows of ``catalog_data.py``; ``models=paper``:
the paper-scale GPT models of ``catalog_paper.py``, measured on an H200, DDP and FSDP
entries, narrowed by ``collective=ddp|fsdp|mix``; ``gpu=a100`` scales either catalog's
times to an A100 by peak BF16 TFLOP/s, ``catalog_paper.GPUS``) and a size uniformly among the
powers of two in [min_hosts, max_hosts] hosts, and runs ``ceil(length / compute)``
iterations, its length drawn log-uniformly in [min_s, max_s] seconds of compute.
The arrival rate makes the offered load (GPU-seconds of compute asked per second /
GPUs of the network) equal ``load``. ``per_host=all`` gives a job whole hosts;
``per_host=1`` one GPU on each of its hosts (the paper's tenants: the ranks of
different jobs on a host share its NICs). Placement happens at arrival on hosts
with enough free GPUs (FIFO queue while the network is full): ``contiguous``
takes the first run of consecutive free hosts (else the lowest-numbered ones),
``scattered`` a random set of them. R is measured from the start, so queueing
does not count against the network.

``arrivals=lingjun|philly|helios,file=PATH`` replays a trace file instead
(``tracefiles.py``): the first ``jobs`` jobs of the file that ran on GPUs (the
reader stops there), in submit order, arrive at their submit time (from the first
one's), ask for their GPU count (hosts = ceil(GPUs / GPUs per host), or GPUs with
per_host=1, at most ``max_hosts``) and run for their duration; the model is still
drawn from the catalog.

Options (defaults): jobs=200, seed=1, load=0.8, placement=contiguous,
min_hosts=1, max_hosts=16, min_s=120, max_s=1200, overlap=1 (0: no slack),
models=h200, collective=mix, per_host=all, arrivals=poisson, file=, gpu=h200.

``contended:`` is the same with the defaults of CONTENDED, a documented recipe
for a fabric where jobs contend: the paper-scale catalog, DDP and FSDP, one GPU
per host per job, scattered placement, 2-16 hosts per job, 300-1800 s of compute
each, and an offered load of 0.5 (half the GPUs' compute asked for; contention
stretches the jobs, so more of them run at once), which keeps the spines and the
shared NICs busy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from leveller.errors import UserError
from leveller.model.job import JobSpec
from leveller.sim.network.catalog_data import MODELS
from leveller.sim.network.catalog_paper import GPUS, compute_scale, paper_models
from leveller.sim.network.topology import Network

DEFAULTS: dict[str, Any] = {"jobs": 200, "seed": 1, "load": 0.8, "placement": "contiguous", "min_hosts": 1,
                            "max_hosts": 16, "min_s": 120.0, "max_s": 1200.0, "overlap": 1, "models": "h200",
                            "collective": "mix", "per_host": "all", "arrivals": "poisson", "file": "", "gpu": "h200"}
CONTENDED: dict[str, Any] = {**DEFAULTS, "models": "paper", "collective": "mix", "per_host": "1",
                             "placement": "scattered", "load": 0.5, "min_hosts": 2, "max_hosts": 16,
                             "min_s": 300.0, "max_s": 1800.0}
PLACEMENTS = ("contiguous", "scattered")
CHOICES: dict[str, tuple[str, ...]] = {"placement": PLACEMENTS, "models": ("h200", "paper"),
                                       "collective": ("ddp", "fsdp", "mix"), "per_host": ("all", "1"),
                                       "arrivals": ("poisson", "lingjun", "philly", "helios"),
                                       "gpu": tuple(GPUS)}
TRACE_KINDS = ("synthetic", "contended")
Placer = Callable[[Sequence[str], int], tuple[str, ...] | None]


KINDS: dict[str, type] = {"jobs": int, "seed": int, "load": float, "placement": str, "min_hosts": int,
                          "max_hosts": int, "min_s": float, "max_s": float, "overlap": int, "models": str,
                          "collective": str, "per_host": str, "arrivals": str, "file": str,
                          "gpu": str}
MINIMUM: dict[str, float] = {"jobs": 1, "seed": 0, "min_hosts": 1, "max_hosts": 1, "overlap": 0}
MAX_JOBS = 1_000_000  # jobs of one trace (a million jobs is days of simulation; more would only fill memory)


def _options(spec: str) -> dict[str, Any]:
    """Parse ``synthetic:k=v,...`` or ``contended:k=v,...``; UserError naming the option and what is allowed."""
    trace_kind = spec.partition(":")[0]
    if trace_kind not in TRACE_KINDS:
        raise UserError(f"--trace {spec!r}: unknown trace kind {trace_kind!r}; allowed: "
                        + ", ".join(f"{k}:KEY=V,..." for k in TRACE_KINDS))
    defaults = CONTENDED if trace_kind == "contended" else DEFAULTS
    opts = dict(defaults)
    allowed = ", ".join(f"{k}={v}" for k, v in defaults.items())
    for part in filter(None, spec.partition(":")[2].split(",")):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in KINDS:
            raise UserError(f"--trace {spec!r}: unknown option {part!r}; allowed (defaults): {allowed}")
        kind = KINDS[key]
        if kind is str:
            if key in CHOICES and raw not in CHOICES[key]:
                raise UserError(f"--trace {spec!r}: {key} = {raw!r}; allowed: {', '.join(CHOICES[key])}")
            opts[key] = raw
            continue
        try:
            value = kind(raw) if len(raw) <= 32 else None
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)):
            raise UserError(f"--trace {spec!r}: {key} = {raw[:40]!r} is not a"
                            + ("n integer" if kind is int else " finite number"))
        low = MINIMUM.get(key)
        if (low is None and not value > 0) or (low is not None and value < low) or (key == "overlap" and value > 1) \
                or (key == "jobs" and value > MAX_JOBS):
            rule = "0 or 1" if key == "overlap" else ("> 0" if low is None else f">= {low:g}")
            rule += f" and at most {MAX_JOBS}" if key == "jobs" else ""
            raise UserError(f"--trace {spec!r}: {key} = {raw!r} is invalid; {rule}")
        opts[key] = value
    if opts["min_hosts"] > opts["max_hosts"]:
        raise UserError(f"--trace {spec!r}: min_hosts = {opts['min_hosts']} is above max_hosts = {opts['max_hosts']}")
    if opts["min_s"] > opts["max_s"]:
        raise UserError(f"--trace {spec!r}: min_s = {opts['min_s']:g} is above max_s = {opts['max_s']:g}")
    if (opts["arrivals"] == "poisson") != (not opts["file"]):
        raise UserError(f"--trace {spec!r}: arrivals = {opts['arrivals']} "
                        + ("takes no file=" if opts["file"] else "needs file=PATH (lingjun: the directory of "
                           "job.csv and worker.csv)"))
    return opts


def catalog(opts: dict[str, Any], spec: str) -> list[dict[str, Any]]:
    """The catalog entries the options select."""
    if opts["models"] == "h200":
        if opts["collective"] == "fsdp":
            raise UserError(f"--trace {spec!r}: collective = fsdp needs models=paper (the H200 rows are DDP)")
        scale = compute_scale(opts["gpu"])
        return [{**m, "collective": "ddp", "compute_s": round(m["compute_s"] * scale, 6),
                 "slack_s": round(m["slack_s"] * scale, 6)} for m in MODELS]
    return [m for m in paper_models(opts["gpu"]) if opts["collective"] in ("mix", m["collective"])]


def synthetic(spec: str, net: Network) -> tuple[list[JobSpec], Placer]:
    """Jobs and the placer of a ``synthetic:`` or ``contended:`` trace on ``net``; UserError if a job
    cannot ever be placed."""
    opts = _options(spec)
    n_hosts = len(net.nics)
    if opts["max_hosts"] > n_hosts:
        raise UserError(f"--trace {spec!r}: cannot place a job of max_hosts = {opts['max_hosts']} hosts on "
                        f"{net.name}, which has {n_hosts} hosts; lower max_hosts")
    per_rank = 1 if opts["per_host"] == "1" else 0
    gpus_per_rank = per_rank or net.gpus_per_host
    entries = catalog(opts, spec)
    rng = np.random.default_rng(opts["seed"])
    if opts["arrivals"] == "poisson":
        sizes = [2 ** k for k in range(int(math.log2(opts["max_hosts"])) + 1) if 2 ** k >= opts["min_hosts"]]
        if not sizes:
            sizes = [opts["min_hosts"]]
        count = int(opts["jobs"])
        models = rng.integers(len(entries), size=count)
        size = rng.choice(sizes, size=count)
        length = np.exp(rng.uniform(math.log(opts["min_s"]), math.log(opts["max_s"]), size=count))
        gpu_seconds = size * gpus_per_rank * length
        rate = opts["load"] * net.total_gpus / float(gpu_seconds.mean())
        arrivals = np.cumsum(rng.exponential(1 / rate, size=count))
    else:
        from leveller.sim.network.tracefiles import read_trace

        rows = read_trace(opts["arrivals"], opts["file"], limit=int(opts["jobs"]))
        count = len(rows)
        models = rng.integers(len(entries), size=count)
        first = rows[0].submit if rows else 0.0
        arrivals = np.array([r.submit - first for r in rows])
        length = np.array([r.duration for r in rows])
        size = np.array([min(opts["max_hosts"], max(1, math.ceil(r.gpus / gpus_per_rank))) for r in rows])
    jobs = []
    for i in range(count):
        m = entries[int(models[i])]
        jobs.append(JobSpec(name=f"j{i:03d}", hosts=None, compute=m["compute_s"], bytes=float(m["bytes"]),
                            arrival=round(float(arrivals[i]), 6),
                            iterations=max(1, math.ceil(length[i] / m["compute_s"])),
                            slack=m["slack_s"] if opts["overlap"] else 0.0, size=int(size[i]), model=m["model"],
                            collective=m["collective"], gpus_per_rank=per_rank, forward=m.get("forward_s", 0.0)))
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
