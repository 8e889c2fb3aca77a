"""The agent's options for jobs that come and go, and the job table they build (wired by leveller.agent.app).

--socket PATH serves the registration socket (leveller.agent.regserver), --slurm discovers the
jobs Slurm runs on this host (leveller.agent.slurm), --kube-pods the pods of this Kubernetes node
that are LEVELLER jobs (leveller.agent.kube); each makes --log optional. The limits
(--max-jobs, --max-registrations, --registrations-per-second, --iterations-per-second,
--registration-timeout) bound what clients can make the agent hold.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from leveller.agent.jobtable import DEFAULT_MAX_ENTRIES, JobTable
from leveller.agent.regserver import DEFAULT_ITER_RATE, DEFAULT_RATE, DEFAULT_SOCKET, HELLO_S, Limits
from leveller.agent.reports import JobClassifier
from leveller.errors import UserError
from leveller.model.limits import MAX_JOBS


def add_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `leveller agent` for self-registering and scheduler jobs."""
    parser.add_argument("--socket", metavar="PATH",
                        help="serve the registration socket at PATH (mode 0666 in a directory only root writes; "
                        f"the units use {DEFAULT_SOCKET}): jobs register themselves there (the hook, "
                        "`leveller job`, the RDMA shim) and need no flag here (docs/api.md)")
    parser.add_argument("--slurm", action="store_true",
                        help="find the jobs Slurm runs on this host (the processes under each slurmstepd), name "
                        "each by its Slurm job (NAME.JOBID: the same on every host of the job) and give it a "
                        "cgroup of its own under --job-cgroup-root (docs/operations.md, \"Slurm\")")
    parser.add_argument("--job-cgroup-root", metavar="DIR",
                        help="with --slurm: the cgroup (relative to the cgroup2 mount, or absolute) under which "
                        "the agent makes one cgroup per discovered job (default: leveller)")
    parser.add_argument("--kube-pods", metavar="URL_OR_FILE",
                        help="find the Kubernetes pods on this node that are LEVELLER jobs (label or annotation "
                        "leveller.io/job; ideal time and weight from the annotations leveller.io/ideal-time, "
                        "leveller.io/weight) in the kubelet's pod list: its /pods URL or a file of that JSON, e.g. "
                        "--kube-pods http://127.0.0.1:10255/pods or https://127.0.0.1:10250/pods with "
                        "--kube-token-file; each pod's cgroup is its job's (docs/operations.md, \"Kubernetes\")")
    parser.add_argument("--kube-token-file", metavar="FILE",
                        help="with an https --kube-pods: bearer token for the kubelet, e.g. "
                        "/var/run/secrets/kubernetes.io/serviceaccount/token")
    parser.add_argument("--kube-ca", metavar="PEM",
                        help="with an https --kube-pods: CA the kubelet's serving certificate is signed by")
    parser.add_argument("--kube-cgroup-root", metavar="DIR",
                        help="with --kube-pods: where the pods' cgroups are looked for (relative to the cgroup2 "
                        "mount, or absolute; default the mount: kubepods.slice or kubepods below it)")
    parser.add_argument("--max-jobs", type=int, default=MAX_JOBS,
                        help=f"jobs this host reports at most (default {MAX_JOBS}: a report's bound)")
    parser.add_argument("--max-registrations", type=int, default=DEFAULT_MAX_ENTRIES,
                        help=f"registrations (ranks) at most (default {DEFAULT_MAX_ENTRIES})")
    parser.add_argument("--registrations-per-second", type=float, default=DEFAULT_RATE, metavar="N",
                        help=f"registrations accepted per second, one second's worth in a burst "
                        f"(default {DEFAULT_RATE:g})")
    parser.add_argument("--iterations-per-second", type=float, default=DEFAULT_ITER_RATE, metavar="N",
                        help="iteration ends a registration may send per second, two seconds' worth in a burst; "
                        f"the excess is dropped and counted (default {DEFAULT_ITER_RATE:g})")
    parser.add_argument("--registration-timeout", type=float, default=HELLO_S, metavar="S",
                        help=f"a connection that registers nothing within S seconds is closed (default {HELLO_S:g})")


def check(cfg: Any) -> None:
    """UserError for a bad limit (named)."""
    for name, value, lo, hi in (("--max-jobs", cfg.max_jobs, 1, MAX_JOBS),
                                ("--max-registrations", cfg.max_registrations, 1, 1 << 20)):
        if not lo <= value <= hi:
            raise UserError(f"{name} {value}: must be in {lo}..{hi}")
    for name, value in (("--registrations-per-second", cfg.registrations_per_second),
                        ("--iterations-per-second", cfg.iterations_per_second),
                        ("--registration-timeout", cfg.registration_timeout)):
        if not 0 < value <= 1e6:
            raise UserError(f"{name} {value}: must be > 0 (and at most 1e6)")
    if cfg.job_cgroup_root and not cfg.slurm:
        raise UserError("--job-cgroup-root: only meaningful with --slurm")
    for name, value in (("--kube-token-file", cfg.kube_token_file), ("--kube-ca", cfg.kube_ca),
                        ("--kube-cgroup-root", cfg.kube_cgroup_root)):
        if value and not cfg.kube_pods:
            raise UserError(f"{name}: only meaningful with --kube-pods")
    if cfg.kube_pods and cfg.kube_pods.startswith("http://") and cfg.kube_token_file:
        raise UserError("--kube-token-file: sent only over https (--kube-pods https://...), not in clear text")


def wanted(cfg: Any) -> bool:
    return bool(cfg.socket or cfg.slurm or cfg.kube_pods)


@contextlib.contextmanager
def job_table(cfg: Any, classifier: JobClassifier, ideals: Mapping[str, float], weights: Mapping[str, float],
              on_reject: Callable[..., None], metrics: Any = None) -> Iterator[JobTable | None]:
    """The job table of --socket / --slurm / --kube-pods with its server and sources running (None without both)."""
    if not wanted(cfg):
        yield None
        return

    def changed(job: str, why: str | None) -> None:
        if metrics is not None:
            if why is not None:
                metrics.jobs_ended.labels(why).inc()
            metrics.registered.set(len(table.entries))

    table = JobTable(classifier, ideals, weights, max_jobs=cfg.max_jobs, max_entries=cfg.max_registrations,
                     on_change=changed)
    with contextlib.ExitStack() as stack:
        if cfg.slurm:
            from leveller.agent.slurm import SlurmSource

            source = SlurmSource(cfg.job_cgroup_root or "leveller", netns=cfg.netns, on_reject=on_reject)
            stack.callback(source.close)
            table.sources.append(source)
        if cfg.kube_pods:
            from leveller.agent.kube import KubeSource

            table.sources.append(KubeSource(cfg.kube_pods, cfg.kube_cgroup_root, cfg.kube_token_file,
                                            cfg.kube_ca, on_reject=on_reject))
        if cfg.socket:
            from leveller.agent.regserver import RegistrationServer

            limits = Limits(cfg.registrations_per_second, cfg.iterations_per_second,
                            hello_s=cfg.registration_timeout)
            server = RegistrationServer(cfg.socket, table, on_reject, limits, pattern=cfg.pattern)
            stack.enter_context(server)
        yield table
