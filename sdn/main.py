"""Process entry of the SDN app (used by `leveller sdn`).

os-ken has no manager command any more: load and instantiate the app with
AppManager, passing our configuration as a keyword context. The HTTP API socket
is bound first, in the caller's network namespace, then the process may enter
the switches' namespace (testbed) so OpenFlow listens next to the switches.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from leveller.core.qos import LevelMap
from leveller.core.topology import Topology


def run(topo: Topology, level_map: LevelMap, queue_mode: str, api_host: str, api_port: int,
        of_host: str = "127.0.0.1", of_port: int = 6653, netns: str | None = None,
        info_file: Path | None = None, idle_timeout: int = 60, api_limits: Any = None,
        api_token: bytes | None = None, api_token_file: str | None = None) -> None:
    """Run the app until killed."""
    import eventlet
    from os_ken import cfg
    from os_ken.base import app_manager  # first: registers --ofp-* options, monkey-patches
    from os_ken.lib import hub

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sock = eventlet.listen((api_host, api_port), backlog=1024)  # bursts of clients queue instead of SYN retries
    if netns:
        from pyroute2 import netns as pnetns

        pnetns.setns(netns, flags=0)
    cfg.CONF(args=["--ofp-listen-host", of_host, "--ofp-tcp-listen-port", str(of_port)], project="os_ken")
    from sdn.app import AppConfig

    config = AppConfig(topo, level_map, queue_mode, sock, idle_timeout=idle_timeout, api_token=api_token)
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
                                   "openflow": f"tcp:{of_host}:{of_port}", "netns": netns,
                                   "token_file": api_token_file}))
        os.replace(tmp, info_file)
    logging.getLogger("leveller.sdn").info("API on http://%s:%s, OpenFlow on %s:%s (netns %s)",
                                           host, port, of_host, of_port, netns)
    try:
        hub.joinall(threads)
    finally:
        mgr.close()
