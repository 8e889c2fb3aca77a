"""Kubernetes pods as jobs (leveller.agent.kube): pod cgroups under both drivers, the pod list, the job table.

The kubepods trees are built in tmp_path as the kubelet names them (the systemd and the cgroupfs driver,
the three QoS classes); only the directories' names, inode numbers and cgroup.events matter to the source.
The last test builds a kubepods-like subtree in the real cgroup v2 hierarchy (root only), moves a real
``sleep`` into a container's cgroup and checks that the agent names that process's job.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from leveller.agent import kube, peers
from leveller.agent.jobtable import JobTable, Refused
from leveller.agent.reports import FlowSample
from leveller.model.flow import flow_key

FLOW = flow_key("10.0.0.1", "10.0.0.2", 40000, 47000)
CID = "4f1c2d3e" * 8  # a container id


def systemd_pod(root: Path, uid: str, qos: str) -> Path:
    """A pod's cgroup as the kubelet's systemd driver names it, with one containerd container."""
    u = uid.replace("-", "_")
    if qos == "guaranteed":
        pod = root / "kubepods.slice" / f"kubepods-pod{u}.slice"
    else:
        pod = root / "kubepods.slice" / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{u}.slice"
    return _with_container(pod, f"cri-containerd-{CID}.scope")


def cgroupfs_pod(root: Path, uid: str, qos: str) -> Path:
    """A pod's cgroup as the kubelet's cgroupfs driver names it, with one container."""
    pod = root / "kubepods" / f"pod{uid}" if qos == "guaranteed" else root / "kubepods" / qos / f"pod{uid}"
    return _with_container(pod, CID)


def _with_container(pod: Path, container: str) -> Path:
    (pod / container).mkdir(parents=True)
    for d in (pod, pod / container):
        (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    return pod


def pod_item(uid: str, job: str | None, namespace: str = "team-a", *, label: bool = True,
             ideal: str | None = None, weight: str | None = None) -> dict:
    meta: dict = {"name": f"p-{uid[:4]}", "namespace": namespace, "uid": uid, "labels": {}, "annotations": {}}
    if job is not None:
        meta["labels" if label else "annotations"][kube.JOB_KEY] = job
    if ideal is not None:
        meta["annotations"][kube.IDEAL_KEY] = ideal
    if weight is not None:
        meta["annotations"][kube.WEIGHT_KEY] = weight
    return {"metadata": meta, "status": {"phase": "Running"}}


DRIVERS = {"systemd": systemd_pod, "cgroupfs": cgroupfs_pod}
QOS = ("guaranteed", "burstable", "besteffort")


@pytest.mark.parametrize("driver", sorted(DRIVERS))
@pytest.mark.parametrize("qos", QOS)
def test_a_containers_cgroup_names_its_pod_under_both_drivers_and_every_qos(tmp_path: Path, driver: str,
                                                                           qos: str) -> None:
    uid = str(uuid.uuid4())
    pod = DRIVERS[driver](tmp_path, uid, qos)
    container = next(p for p in pod.iterdir() if p.is_dir())
    found = kube.pod_of_cgroup(str(container))
    assert found == kube.PodCgroup(uid, qos, str(pod))
    assert list(kube.pod_cgroups(str(tmp_path))) == [kube.PodCgroup(uid, qos, str(pod))]


@pytest.mark.parametrize("path", [
    "/kubepods.slice/kubepods-burstable.slice",  # a QoS slice, no pod
    "/system.slice/containerd.service",
    "/user.slice/pod12345678-1234-1234-1234-123456789abc",  # a pod-like name outside kubepods
    "/kubepods/burstable/podnot-a-uid",
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice",
])
def test_cgroups_that_are_no_pods_are_not_taken_for_one(path: str) -> None:
    assert kube.pod_of_cgroup(path) is None


def test_a_path_relative_to_a_cgroup_namespace_still_names_the_pod() -> None:
    uid = "0f0e0d0c-0b0a-0908-0706-050403020100"
    assert kube.pod_of_cgroup(f"/../../kubepods-besteffort-pod{uid.replace('-', '_')}.slice/"
                              f"cri-containerd-{CID}.scope") is not None
    assert kube.pod_of_cgroup(f"/../pod{uid}/{CID}").uid == uid  # type: ignore[union-attr]


def test_pod_list_items_become_jobs_named_by_namespace_and_label_or_annotation() -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert kube.pod_job(pod_item(a, "gpt", ideal="1.25", weight="4")) == kube.PodJob(a, "team-a.gpt", 1.25, 4.0)
    assert kube.pod_job(pod_item(b, "bert", "ml", label=False)) == kube.PodJob(b, "ml.bert", None, None)
    assert kube.pod_job(pod_item(a, None)) is None


@pytest.mark.parametrize(("item", "words"), [
    (pod_item(str(uuid.uuid4()), "gpt", ideal="fast"), [kube.IDEAL_KEY, "'fast'", "> 0"]),
    (pod_item(str(uuid.uuid4()), "gpt", weight="-1"), [kube.WEIGHT_KEY, "'-1'", "> 0"]),
    (pod_item(str(uuid.uuid4()), "g p t"), [kube.JOB_KEY, "'g p t'"]),
    (pod_item("not-a-uid", "gpt"), ["metadata.uid", "'not-a-uid'"]),
])
def test_a_bad_label_or_annotation_is_refused_naming_the_pod_key_and_value(item: dict, words: list[str]) -> None:
    with pytest.raises(kube.PodError) as err:
        kube.pod_job(item)
    assert "team-a/" in str(err.value)
    for w in words:
        assert w in str(err.value)


def write_pods(path: Path, items: list[dict]) -> None:
    path.write_text(json.dumps({"kind": "PodList", "apiVersion": "v1", "items": items}))


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_the_source_registers_labelled_pods_and_ends_them_when_they_go(tmp_path: Path, driver: str) -> None:
    cg, pods = tmp_path / "cg", tmp_path / "pods.json"
    uids = [str(uuid.uuid4()) for _ in QOS]
    dirs = [DRIVERS[driver](cg, u, q) for u, q in zip(uids, QOS, strict=True)]
    other = DRIVERS[driver](cg, str(uuid.uuid4()), "burstable")  # no label: not a LEVELLER job
    write_pods(pods, [pod_item(uids[0], "gpt", ideal="1.5"), pod_item(uids[1], "gpt", weight="2"),
                      pod_item(uids[2], "bert", "ml"), pod_item(str(uuid.uuid4()), "elsewhere")])
    rejected: list[tuple] = []
    source = kube.KubeSource(str(pods), str(cg), on_reject=lambda *a, **k: rejected.append((a, k)))
    table = JobTable()
    table.sources.append(source)
    table.sweep(now=10.0, force=True)
    assert sorted((e["job"], e["cgroup"]) for e in table.snapshot()) == sorted(
        [("team-a.gpt", str(dirs[0])), ("team-a.gpt", str(dirs[1])), ("ml.bert", str(dirs[2]))])
    leaf = next(p for p in dirs[1].iterdir() if p.is_dir())
    assert table.job_of(FLOW, FlowSample(1, os.stat(leaf).st_ino)) == "team-a.gpt"
    assert table.job_of(FLOW, FlowSample(1, os.stat(other).st_ino)) is None
    assert table.ideal_times.get("team-a.gpt") == 1.5 and table.weights.get("team-a.gpt") == 2.0
    assert rejected == []
    write_pods(pods, [pod_item(uids[0], "gpt"), pod_item(uids[1], "gpt")])  # the bert pod was deleted
    (dirs[0] / "cgroup.events").write_text("populated 0\nfrozen 0\n")  # the first gpt pod's processes ended
    table.sweep(now=20.0, force=True)
    assert [e["cgroup"] for e in table.snapshot()] == [str(dirs[1])]
    assert table.ended == {"pod_gone": 1, "empty": 1}


def test_a_process_of_the_pod_registers_under_the_pods_job_whatever_its_uid(tmp_path: Path) -> None:
    """The pod's entry is root's (the kubelet made it); a registration the source named (its claim) joins the
    job as the container's user, while a plain socket registration under that name stays refused."""
    cg, pods = tmp_path / "cg", tmp_path / "pods.json"
    uid = str(uuid.uuid4())
    pod = systemd_pod(cg, uid, "burstable")
    write_pods(pods, [pod_item(uid, "gpt")])
    table = JobTable()
    table.sources.append(kube.KubeSource(str(pods), str(cg)))
    table.sweep(now=10.0, force=True)
    table.add("kube", "team-a.gpt", 1000, str(pod), rank=1)
    table.sweep(now=20.0, force=True)  # the source's next scan leaves the registration it named alone
    assert sorted((e["uid"], e["rank"]) for e in table.snapshot()) == [(0, 0), (1000, 1)]
    with pytest.raises(Refused) as err:
        table.add("socket", "team-a.gpt", 1001, str(cgroupfs_pod(tmp_path / "other", str(uuid.uuid4()), "besteffort")))
    assert err.value.reason == "name_taken"


def test_a_bad_pod_is_counted_once_and_the_other_pods_go_on(tmp_path: Path) -> None:
    cg, pods = tmp_path / "cg", tmp_path / "pods.json"
    good, bad = str(uuid.uuid4()), str(uuid.uuid4())
    systemd_pod(cg, good, "burstable")
    systemd_pod(cg, bad, "besteffort")
    write_pods(pods, [pod_item(good, "gpt"), pod_item(bad, "gpt", weight="heavy")])
    rejected: list[tuple] = []
    source = kube.KubeSource(str(pods), str(cg), on_reject=lambda *a, **k: rejected.append((a, k)))
    table = JobTable()
    table.sources.append(source)
    table.sweep(now=10.0, force=True)
    table.sweep(now=20.0, force=True)
    assert [e["job"] for e in table.snapshot()] == ["team-a.gpt"]
    assert len(rejected) == 1 and rejected[0][1] == {"reason": "bad_pod"} and kube.WEIGHT_KEY in rejected[0][0][1]


def test_an_unreadable_pod_list_keeps_the_last_one_read(tmp_path: Path) -> None:
    cg, pods = tmp_path / "cg", tmp_path / "pods.json"
    uid = str(uuid.uuid4())
    cgroupfs_pod(cg, uid, "besteffort")
    write_pods(pods, [pod_item(uid, "gpt")])
    source = kube.KubeSource(str(pods), str(cg))
    source.refresh(0.0, force=True)
    pods.write_text("{not json")
    source.refresh(10.0, force=True)
    assert source.read_errors == 1 and set(source.jobs) == {uid}
    pods.write_text(json.dumps({"items": "no list"}))
    with pytest.raises(ValueError, match="not a pod list"):
        kube.read_pod_list(str(pods))


def _cgroup2() -> str | None:
    try:
        return peers.cgroup2_mount()
    except OSError:
        return None


needs_root_cgroup2 = pytest.mark.skipif(os.geteuid() != 0 or _cgroup2() is None,
                                        reason="needs root and a cgroup v2 hierarchy (any mount point)")


@needs_root_cgroup2
@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_real_process_in_a_real_kubepods_cgroup_is_named_by_its_pods_job(tmp_path: Path, driver: str) -> None:
    mount = peers.cgroup2_mount()
    top = Path(mount, f"leveller-kubetest-{os.getpid()}-{driver}")
    uid = str(uuid.uuid4())
    if driver == "systemd":
        container = top / "kubepods.slice" / "kubepods-burstable.slice" / \
            f"kubepods-burstable-pod{uid.replace('-', '_')}.slice" / f"cri-containerd-{CID}.scope"
    else:
        container = top / "kubepods" / "burstable" / f"pod{uid}" / CID
    pods = tmp_path / "pods.json"
    write_pods(pods, [pod_item(uid, "gpt")])
    container.mkdir(parents=True)
    sleep = subprocess.Popen(["sleep", "60"])
    try:
        (container / "cgroup.procs").write_text(str(sleep.pid))
        assert peers.cgroup_of(sleep.pid).endswith(container.name)  # the kernel put it there
        source = kube.KubeSource(str(pods), str(top))
        table = JobTable()
        table.sources.append(source)
        table.sweep(now=10.0, force=True)
        assert table.claim(sleep.pid) == ("kube", "team-a.gpt", str(container.parent))
        assert [(e["job"], e["cgroup"]) for e in table.snapshot()] == [("team-a.gpt", str(container.parent))]
        assert table.job_of(FLOW, FlowSample(1, os.stat(container).st_ino)) == "team-a.gpt"
        assert table.claim(os.getpid()) is None  # this test's own process is in no pod
        sleep.kill()
        sleep.wait()
        table.sweep(now=20.0, force=True)  # the pod's cgroup emptied: its job leaves
        assert table.snapshot() == [] and table.ended == {"empty": 1}
    finally:
        if sleep.poll() is None:
            sleep.kill()
            sleep.wait()
        for d in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except OSError:
                pass
        assert not top.exists()


@pytest.mark.parametrize(("flags", "words"), [
    (["--kube-token-file", "/t"], ["--kube-token-file", "only meaningful with --kube-pods"]),
    (["--kube-cgroup-root", "/c"], ["--kube-cgroup-root", "only meaningful with --kube-pods"]),
    (["--kube-pods", "http://127.0.0.1:10255/pods", "--kube-token-file", "/t"], ["--kube-token-file", "https"]),
])
def test_kube_flags_without_what_they_need_are_refused_by_name(flags: list[str], words: list[str]) -> None:
    from leveller.agent import arrivals
    from leveller.cli import build_parser
    from leveller.errors import UserError

    args = build_parser().parse_args(["agent", "--controller", "127.0.0.1:1", *flags])
    with pytest.raises(UserError) as err:
        arrivals.check(args)
    for w in words:
        assert w in str(err.value)
    args = build_parser().parse_args(["agent", "--controller", "127.0.0.1:1", "--kube-pods", "/pods.json"])
    arrivals.check(args)
    assert arrivals.wanted(args)
