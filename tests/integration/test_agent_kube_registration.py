"""A process of a Kubernetes pod registers on the agent's socket and is named after its pod (issue 38 item 3).

Real parts: the agent's RegistrationServer on a real Unix socket, a kubepods-like subtree in the real
cgroup v2 hierarchy (the systemd driver's names) with a client process placed in its container's cgroup,
running as an unprivileged uid through setpriv, and the KubeSource reading a pod list file in the
kubelet's /pods format. What cannot exist here is the kubelet itself: the file stands in for its pod list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveller.agent.jobtable import JobTable
from leveller.agent.kube import JOB_KEY, KubeSource
from leveller.agent.metrics import Rejections
from leveller.agent.regserver import RegistrationServer
from tests.integration.support import fresh_cgroup, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, setpriv)")
NOBODY = 65534
CLIENT = textwrap.dedent("""
    import json, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(json.dumps({"op": "register", "job": "whatever-i-claim", "rank": 3}).encode() + b"\\n")
    buf = b""
    while b"\\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    sys.stdout.write(buf.decode()); sys.stdout.flush()
    sys.stdin.read()
""")


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="lvkube-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_pods_process_registers_under_its_pods_job_as_its_own_uid(shared_dir: Path) -> None:
    uid = str(uuid.uuid4())
    pods = shared_dir / "pods.json"
    pods.write_text(json.dumps({"kind": "PodList", "items": [{"metadata": {
        "name": "gpt-0", "namespace": "team-a", "uid": uid, "labels": {JOB_KEY: "gpt"}}}]}))
    with fresh_cgroup("lvkube") as top:
        slices = top / "kubepods.slice" / "kubepods-burstable.slice"
        pod = slices / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        container = pod / f"cri-containerd-{'ab' * 32}.scope"
        container.mkdir(parents=True)
        table = JobTable()
        table.sources.append(KubeSource(str(pods), str(top)))
        rejected = Rejections()
        sock = shared_dir / "agent.sock"
        script = f'echo $$ > {container}/cgroup.procs && exec "$@"'
        p = None
        try:
            with RegistrationServer(str(sock), table, rejected):
                p = subprocess.Popen(["sh", "-c", script, "sh", "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                      "--clear-groups", sys.executable, "-c", CLIENT, str(sock)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                assert p.stdout is not None
                line = p.stdout.readline()
                assert line, p.stderr.read() if p.stderr else ""
                r = json.loads(line)
                assert r["ok"] and r["job"] == "team-a.gpt" and r["source"] == "kube" and r["cgroup"] == str(pod), r
                table.sweep(force=True)  # the source's scan adds the pod's own entry beside the registration
                got = sorted((e["source"], e["job"], e["uid"], e["rank"]) for e in table.snapshot())
                assert got == [("kube", "team-a.gpt", 0, 0), ("kube", "team-a.gpt", NOBODY, 3)]
                assert rejected.total == 0
                p.stdin.close()  # type: ignore[union-attr]
                p.wait(5)
                wait_until(lambda: not table.sweep(force=True) and not table.entries, 5,
                           "the pod's entries did not end with its last process")
        finally:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(5)
            for d in (container, pod, slices, top / "kubepods.slice"):
                wait_until(lambda d=d: _rmdir(d), 5, f"could not remove {d}")  # type: ignore[misc]


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
