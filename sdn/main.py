"""Process entry of the SDN app (used by `leveller sdn`).

os-ken has no manager command any more: load and instantiate the app with
AppManager, passing our configuration as a keyword context. The HTTP API socket
is bound first, in the caller's network namespace, then the process may enter
the switches' namespace (testbed) so OpenFlow listens next to the switches.

SIGINT and SIGTERM end the process at once (exit 130 / 143). Ctrl-C did nothing:
the main thread waits on a lock while os-ken and eventlet run in other OS threads,
and Python runs a signal handler only in the main thread, and only once that
wakes (never, when another thread took the signal). Blocking both signals in
every thread and waiting for them in one (``sigwait``) is not enough either:
threads started by imports before that (OpenBLAS's, from numpy) keep them
unblocked and take them. So the signals keep a Python handler, whose C part
writes the signal's number to a wakeup pipe from whichever thread the kernel
picked (``signal.set_wakeup_fd``), and one plain OS thread reads that pipe and
exits. The app holds nothing to undo: the switches keep their rules, as after
any restart, and reinstall them on reconnection.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from leveller.core.qos import LevelMap
from leveller.core.topology import Topology

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def stop_on_signals() -> None:
    """Exit 128 + the signal as soon as SIGINT or SIGTERM arrives, whichever thread the kernel hands it
    to, from an OS thread of its own (see the module docstring). Call it from the main thread, before
    eventlet patches the standard library."""
    import eventlet.patcher

    read, write = os.pipe()
    os.set_blocking(write, False)  # the C handler must never block
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: None)  # a handler, so the C part runs and writes the wakeup byte
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    pipe_read = os.read  # bound now: eventlet's patched os.read would yield to a hub this thread has not

    def wait() -> None:
        signum = 0
        while signum not in STOP_SIGNALS:  # (another handler someone installs writes its signal here too)
            signum = pipe_read(read, 1)[0]
        os.write(2, f"leveller sdn: {signal.Signals(signum).name}: stopping\n".encode())  # no lock taken
        os._exit(128 + signum)

    threading = eventlet.patcher.original("threading")  # a real OS thread even once eventlet patched threading
    threading.Thread(target=wait, name="leveller-sdn-signals", daemon=True).start()


def run(topo: Topology, level_map: LevelMap, queue_mode: str, api_host: str, api_port: int,
        of_host: str = "127.0.0.1", of_port: int = 6653, netns: str | None = None,
        info_file: Path | None = None, idle_timeout: int = 60, api_limits: Any = None,
        api_token: bytes | None = None, api_token_file: str | None = None, of_allow: Any = None,
        of_tls: tuple[str, str, str] | None = None) -> None:
    """Run the app until killed. ``of_allow``: the networks switches may connect from (default loopback);
    ``of_tls``: (cert, key, CA) files: OpenFlow over TLS, every switch presenting a certificate of the CA."""
    stop_on_signals()  # first: before os-ken or eventlet start a thread
    import eventlet
    from os_ken import cfg
    from os_ken.base import app_manager  # first: registers --ofp-* options, monkey-patches
    from os_ken.lib import hub

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sock = eventlet.listen((api_host, api_port), backlog=1024)  # bursts of clients queue instead of SYN retries
    if netns:
        from pyroute2 import netns as pnetns

        pnetns.setns(netns, flags=0)
    of_args = ["--ofp-listen-host", of_host]
    if of_tls is None:
        of_args += ["--ofp-tcp-listen-port", str(of_port)]
    else:  # os-ken listens with TLS only, on the SSL port, requiring a client certificate of the CA
        cert, key, ca = of_tls
        of_args += ["--ofp-ssl-listen-port", str(of_port), "--ctl-cert", cert, "--ctl-privkey", key,
                    "--ca-certs", ca]
    cfg.CONF(args=of_args, project="os_ken")
    from sdn.app import AppConfig

    config = AppConfig(topo, level_map, queue_mode, sock, idle_timeout=idle_timeout, api_token=api_token)
    if of_allow is not None:
        config.of_allow = tuple(of_allow)
    if api_limits is not None:
        config.api_limits = api_limits
    mgr = app_manager.AppManager.get_instance()
    mgr.load_apps(["sdn.app"])
    contexts = mgr.create_contexts()
    threads = mgr.instantiate_apps(leveller=config, **contexts)
    host, port = sock.getsockname()[:2]
    if info_file is not None:
        tmp = info_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"api": f"http://{host}:{port}", "pid": os.getpid(),
                                   "openflow": f"{'ssl' if of_tls else 'tcp'}:{of_host}:{of_port}", "netns": netns,
                                   "token_file": api_token_file}))
        os.replace(tmp, info_file)
    logging.getLogger("leveller.sdn").info("API on http://%s:%s, OpenFlow on %s:%s (netns %s)",
                                           host, port, of_host, of_port, netns)
    try:
        hub.joinall(threads)
    finally:
        mgr.close()
