"""Jobs of the network simulator: the jobs FILE format and its validation, into the model's JobSpec
(leveller.model.job).

FILE (JSON): {"jobs": [{"name": str, "hosts": [str, ...], "compute": s, "bytes": B,
"arrival": s (default 0), "iterations": int or null (default null = runs to the end),
"slack": s (default 0)}]}

One iteration = ``compute`` seconds, then a ring all-reduce of ``bytes`` bytes
per rank over ``hosts`` in list order: rank i sends 2(n-1)/n x bytes to rank
i+1 (mod n), all flows of the iteration in lockstep (the iteration's
communication ends when its last flow ends). A host with several NICs (the
rail fabric) stripes its share over them, NIC r to NIC r of the next host (a
hierarchical all-reduce: reduce-scatter over NVLink inside the host first).
``slack`` = how long before compute ends the all-reduce may start (overlap
with the backward pass); it is at most ``compute``. Every error names the job,
the field, the value and what is allowed, and is raised before the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leveller.errors import UserError
from leveller.model.job import JobSpec
from leveller.model.limits import MAX_ITERATIONS
from leveller.sim.network.jsonfile import read_json

FIELDS = {"name", "hosts", "compute", "bytes", "arrival", "iterations", "slack"}
MAX_NUMBER = 1e300  # seconds and bytes: finite, and far from float overflow when multiplied


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(job: str, key: str, value: Any, minimum: float, strict: bool) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and -MAX_NUMBER <= value <= MAX_NUMBER
    if not ok or value < minimum or (strict and value == minimum):  # NaN fails the range, inf and 10**400 too
        rule = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise UserError(f"job {job!r}: {key} = {_show(value)} is invalid; a number {rule} and at most {MAX_NUMBER:g}")
    return float(value)


def parse_job(entry: Any, index: int, known_hosts: Sequence[str]) -> JobSpec:
    """Validate one entry of the FILE's ``jobs`` list against the network's host names."""
    if not isinstance(entry, dict):
        raise UserError(f"jobs[{index}]: expected an object with keys {', '.join(sorted(FIELDS))}")
    unknown = sorted(set(entry) - FIELDS)
    if unknown:
        raise UserError(f"jobs[{index}]: unknown key {_show(unknown[0])}; allowed: {', '.join(sorted(FIELDS))}")
    for key in ("name", "hosts", "compute", "bytes"):
        if key not in entry:
            raise UserError(f"jobs[{index}]: missing required key {key!r}")
    name = entry["name"]
    if not isinstance(name, str) or not name or len(name) > 64 or any(c.isspace() or c == "/" for c in name):
        raise UserError(f"jobs[{index}].name = {_show(name)} is invalid; 1-64 characters, no spaces or '/'")
    hosts = entry["hosts"]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise UserError(f"job {name!r}: hosts = {_show(hosts)} is invalid; a non-empty list of host names")
    known = set(known_hosts)
    for h in hosts:
        if h not in known:
            sample = ", ".join(list(known_hosts)[:6]) + (", ..." if len(known_hosts) > 6 else "")
            raise UserError(f"job {name!r}: unknown host {_show(h)}; hosts of this topology: {sample}")
    if len(set(hosts)) != len(hosts):
        raise UserError(f"job {name!r}: hosts = {_show(hosts)} lists a host twice; one rank per host")
    compute = _num(name, "compute", entry["compute"], 0, strict=True)
    nbytes = _num(name, "bytes", entry["bytes"], 0, strict=True)
    arrival = _num(name, "arrival", entry.get("arrival", 0), 0, strict=False)
    slack = _num(name, "slack", entry.get("slack", 0), 0, strict=False)
    if slack > compute:
        raise UserError(f"job {name!r}: slack = {slack:g} is invalid; at most compute = {compute:g} "
                        "(communication cannot start before the iteration does)")
    iterations = entry.get("iterations")
    if iterations is not None and (isinstance(iterations, bool) or not isinstance(iterations, int)
                                   or not 1 <= iterations <= MAX_ITERATIONS):
        raise UserError(f"job {name!r}: iterations = {_show(iterations)} is invalid; an integer 1..2**53 or null")
    return JobSpec(name, tuple(hosts), compute, nbytes, arrival, iterations, slack, size=len(hosts))


def parse_jobs(data: Any, known_hosts: Sequence[str]) -> list[JobSpec]:
    """Validate a parsed jobs FILE; names must be unique."""
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise UserError('jobs file: expected {"jobs": [ {...}, ... ]} with at least one job')
    jobs = [parse_job(entry, i, known_hosts) for i, entry in enumerate(data["jobs"])]
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise UserError(f"jobs file: job name {job.name!r} is used twice; names must be unique")
        seen.add(job.name)
    return jobs


def load_jobs(path: str, known_hosts: Sequence[str]) -> list[JobSpec]:
    """Read and validate a jobs FILE."""
    return parse_jobs(read_json(path, "--jobs"), known_hosts)


COLLECTIVES = ("ddp", "fsdp")


def ring_volumes(n_hosts: int, nbytes: float, nics: int) -> float:
    """Bytes one NIC sends to its successor per iteration: 2(n-1)/n x bytes, striped over ``nics``."""
    if n_hosts < 2:
        return 0.0
    return 2 * (n_hosts - 1) / n_hosts * nbytes / nics


def phase_volume(collective: str, n_ranks: int, nbytes: float) -> float:
    """Bytes one rank sends to its ring successor in one communication phase.

    ``nbytes`` = parameters x bytes per element. DDP (ring all-reduce, one phase per iteration):
    2(n-1)/n x nbytes. FSDP (all-gather or reduce-scatter, three phases per iteration): (n-1)/n x
    nbytes each, 3(n-1)/n x nbytes per iteration.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective = {collective!r}; allowed: {', '.join(COLLECTIVES)}")
    if n_ranks < 2:
        return 0.0
    share = (n_ranks - 1) / n_ranks * nbytes
    return 2 * share if collective == "ddp" else share


def iteration_volume(collective: str, n_ranks: int, nbytes: float) -> float:
    """Bytes one rank sends per iteration: 2(n-1)/n x nbytes (DDP) or 3(n-1)/n x nbytes (FSDP)."""
    phases = 3 if collective == "fsdp" else 1
    return phases * phase_volume(collective, n_ranks, nbytes)


def check_paths(jobs: Sequence[JobSpec], net: Any) -> None:
    """Every consecutive pair of a job's hosts must be connected in ``net`` (before the run starts)."""
    for job in jobs:
        if job.hosts is None:
            continue
        hosts = job.hosts
        for i in range(len(hosts) if len(hosts) > 1 else 0):
            a, b = hosts[i], hosts[(i + 1) % len(hosts)]
            if not net.connected(net.nics[a][0], net.nics[b][0]):
                raise UserError(f"job {job.name!r}: no path between hosts {a!r} and {b!r} in {net.name}")
