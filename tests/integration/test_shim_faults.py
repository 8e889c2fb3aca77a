"""The RDMA shim must never hurt the job it is loaded into (issue 26, High 1 and 2).

Live: the verbs program streams under LD_PRELOAD=libleveller_shim.so against the FAKE verbs
provider. A client of the shim's control socket that closes before reading its replies used to kill
the job with SIGPIPE (rc -13); a client that drips its request one byte at a time held the shim's
only control thread, so the agent could not reach the shim (nor renew its lease) for as long as it
liked. Without $LEVELLER_SHIM_SOCK the socket goes only to the root-owned /run/leveller/shim, never
to /tmp or $XDG_RUNTIME_DIR, where any user could serve a socket of that name.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from leveller.agent.shim_control import ShimClient
from leveller.bench.shim import SHIM_LIB, StreamRun

NOBODY = 65534

REQUEST = b'{"op": "list"}\n'


def assert_intact(summary: dict) -> None:
    assert summary["errors"] == 0 and summary["in_order"] is True, summary
    assert summary["received"] == summary["posted"] > 0, summary


def assert_alive(run: StreamRun) -> None:
    time.sleep(0.2)  # a SIGPIPE would have been delivered by now
    assert run.proc.poll() is None, f"the job under the shim died: rc {run.proc.returncode}"


def test_job_survives_clients_that_close_without_reading(shim_build: Path, tmp_path: Path) -> None:
    """Many requests in one go, then close: the shim's replies meet a closed socket (EPIPE, no signal)."""
    run = StreamRun(shim_build, tmp_path)
    try:
        for _ in range(3):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(run.sock))
                s.sendall(REQUEST * 200)
            assert_alive(run)
        client = ShimClient(run.sock, timeout=5.0)
        assert len(client.list_qps()) == 2  # the control channel still serves
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def test_a_dripping_client_neither_kills_the_job_nor_holds_the_control_channel(shim_build: Path,
                                                                                 tmp_path: Path) -> None:
    """A request dripped one byte per second (each byte in time for any per-read timeout) is dropped
    after the shim's 2 s request deadline; the agent's list meanwhile is answered."""
    run = StreamRun(shim_build, tmp_path)
    dropped: list[float] = []
    started = threading.Event()

    def drip() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(run.sock))
            t0 = time.monotonic()
            started.set()
            try:
                for byte in REQUEST * 2:
                    s.send(bytes([byte]))
                    time.sleep(1.0)
                    if time.monotonic() - t0 > 12:
                        return
            except OSError:  # the shim closed the connection: EPIPE / ECONNRESET
                dropped.append(time.monotonic() - t0)

    thread = threading.Thread(target=drip, daemon=True)
    try:
        thread.start()
        assert started.wait(5)
        time.sleep(0.5)  # the drip holds the control thread now
        t0 = time.monotonic()
        listed = ShimClient(run.sock, timeout=4.0).list_qps()
        waited = time.monotonic() - t0
        assert len(listed) == 2 and waited < 3.0, f"the agent waited {waited:.1f} s behind a dripping client"
        thread.join(15)
        assert dropped and dropped[0] < 6.0, f"the dripping client was not dropped: {dropped}"
        assert_alive(run)
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def _as_job_user(build: Path, workdir: Path) -> tuple[Path, dict[str, Any]]:
    """Where a job of an ordinary user can run the verbs program, and Popen's user arguments: under
    root the job runs as nobody, from a copy of the programs in a directory nobody can read."""
    if os.geteuid() != 0:
        return build, {}
    copy = workdir / "job"
    (copy / "fake").mkdir(parents=True)
    shutil.copy2(build / "verbs_stream_linked", copy / "verbs_stream_linked")
    shutil.copy2(build / "fake" / "libibverbs.so.1", copy / "fake" / "libibverbs.so.1")
    for path in (workdir, copy, copy / "fake"):
        os.chown(path, NOBODY, NOBODY)
    return copy, {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def test_the_socket_goes_only_to_the_root_owned_directory(shim_build: Path) -> None:
    """An ordinary user's job without $LEVELLER_SHIM_SOCK: its socket goes to /run/leveller/shim when
    that is root's and not writable by every user, else nowhere (the control channel is off, and the
    shim says why); never to /tmp nor $XDG_RUNTIME_DIR, where any user could serve that name."""
    workdir = Path(tempfile.mkdtemp(prefix="leveller-shim-dir-"))
    try:
        workdir.chmod(0o755)
        build, user = _as_job_user(shim_build, workdir)
        xdg = workdir / "xdg"
        xdg.mkdir(mode=0o700)
        if user:
            os.chown(xdg, NOBODY, NOBODY)
        env = dict(os.environ, LD_LIBRARY_PATH=str(build / "fake"), LEVELLER_JOB="jobA", LD_PRELOAD=str(SHIM_LIB),
                   LEVELLER_FAKE_LOG=str(workdir / "fake.log"), XDG_RUNTIME_DIR=str(xdg))
        env.pop("LEVELLER_SHIM_SOCK", None)
        proc = subprocess.Popen([str(build / "verbs_stream_linked")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True, **user)
        try:
            assert proc.stdout is not None and proc.stdout.readline().startswith("READY")
            time.sleep(0.3)
            name = f"leveller-shim-{proc.pid}.sock"
            assert not (xdg / name).exists(), "the shim served its socket in $XDG_RUNTIME_DIR"
            assert not (Path("/tmp") / name).exists(), "the shim served its socket in /tmp"
            out, err = proc.communicate("stop\n", timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, (out, err)
        shim_dir = Path("/run/leveller/shim")
        if not shim_dir.is_dir():
            assert f"{shim_dir}" in err and "control" in err, err
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
