"""The os-ken app: a thin shim that feeds OpenFlow events to sdn.logic.PathController
and sends what it returns (sdn.ofsend). It also polls per-queue statistics, keeps the
DSCP classifiers on switch ports (userspace datapath) and serves the HTTP API."""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from leveller.core.qos import LevelMap
from leveller.core.topology import Topology
from sdn import api, httpd, tcmap
from sdn.logic import LOOPBACK, PathController, switch_refusal
from sdn.ofsend import send

LOG = logging.getLogger("leveller.sdn")


@dataclass
class AppConfig:
    topo: Topology
    level_map: LevelMap
    queue_mode: str  # "set_queue" (kernel/hardware datapath) or "tc" (OVS userspace)
    api_sock: Any  # listening socket for the HTTP API (bound before entering the switch netns)
    idle_timeout: int = 60
    poll_interval: float = 1.0
    api_limits: httpd.Limits = httpd.Limits()
    api_token: bytes | None = None  # bearer token every API request must carry (sdn.token)
    # the networks switches may connect from (--of-allow); a switch must also be one of the topology's dpids
    of_allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(default=LOOPBACK)


def _source(dp: Any) -> str:
    """The source address of a switch's connection (os-ken's Datapath.address: (host, port, ...))."""
    address = getattr(dp, "address", None)
    return str(address[0]) if address else ""


def _drop(dp: Any) -> None:
    """Close a refused switch's connection: its reader ends, nothing is ever sent to it."""
    sock = getattr(dp, "socket", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    dp.close()


class LevellerApp(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, leveller: AppConfig, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg = leveller
        self.logic = PathController(leveller.topo, leveller.level_map, set_queue=leveller.queue_mode == "set_queue",
                                    idle_timeout=leveller.idle_timeout)
        self.datapaths: dict[int, Any] = {}
        self.refused_switches = 0  # connections refused (not a topology dpid, not an allowed address, a takeover)
        self.port_names: dict[int, dict[int, str]] = {}
        self.queue_stats: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.classified: dict[str, bool] = {}  # tc mode: port -> its DSCP classifier was in place at the last check
        # one check of the classifiers at a time: a port's reply and the poll loop both check, and two
        # reinstalls of one port interleaved (each flushes, then adds) left it with 11 rules instead of 6
        self._tc_lock = hub.Semaphore(1)

    def start(self) -> Any:
        thread = super().start()
        self.threads.append(hub.spawn(self._poll_loop))
        self.threads.append(hub.spawn(self._serve_api))
        return thread

    # ---- OpenFlow events -------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        connected = {dpid: _source(d) for dpid, d in self.datapaths.items()}
        why = switch_refusal(self.logic.topo, dp.id, _source(dp), self.cfg.of_allow, connected)
        if why is not None:
            self.refused_switches += 1
            LOG.warning("switch connection from %s refused: %s", _source(dp), why)
            _drop(dp)
            return
        self.datapaths[dp.id] = dp
        LOG.info("switch %016x connected", dp.id)
        send(self.datapaths, self.logic.switch_connected(dp.id, time.time()))
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state(self, ev: Any) -> None:
        dp = ev.datapath
        dpid = dp.id
        if ev.state == DEAD_DISPATCHER and dpid is not None and self.datapaths.get(dpid) is dp:
            LOG.info("switch %016x disconnected", dpid)
            del self.datapaths[dpid]
            self.logic.switch_disconnected(dpid)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _port_desc(self, ev: Any) -> None:
        dp = ev.msg.datapath
        names = self.port_names.setdefault(dp.id, {})
        for port in ev.msg.body:
            if port.port_no < dp.ofproto.OFPP_MAX:
                names[port.port_no] = port.name.decode() if isinstance(port.name, bytes) else port.name
        self._keep_classifiers(dp.id)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev: Any) -> None:
        msg = ev.msg
        send(self.datapaths, self.logic.packet_in(msg.datapath.id, msg.match["in_port"], bytes(msg.data), time.time()))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev: Any) -> None:
        msg = ev.msg
        ofp = msg.datapath.ofproto
        if msg.reason in (ofp.OFPRR_IDLE_TIMEOUT, ofp.OFPRR_HARD_TIMEOUT):
            send(self.datapaths, self.logic.flow_removed(msg.datapath.id, msg.cookie, time.time()))

    @set_ev_cls(ofp_event.EventOFPQueueStatsReply, MAIN_DISPATCHER)
    def _queue_stats(self, ev: Any) -> None:
        now = time.time()
        for s in ev.msg.body:
            self.queue_stats[(ev.msg.datapath.id, s.port_no, s.queue_id)] = {
                "tx_bytes": s.tx_bytes, "tx_packets": s.tx_packets, "tx_errors": s.tx_errors, "at": now}

    # ---- background work -------------------------------------------------------------------
    def _poll_loop(self) -> None:
        while True:
            for dp in list(self.datapaths.values()):
                parser, ofp = dp.ofproto_parser, dp.ofproto
                try:
                    dp.send_msg(parser.OFPQueueStatsRequest(dp, 0, ofp.OFPP_ANY, ofp.OFPQ_ALL))
                    self._keep_classifiers(dp.id)
                except Exception:  # a switch going away mid-loop must not stop the loop
                    LOG.exception("polling switch %s", dp.id)
            hub.sleep(self.cfg.poll_interval)

    def _keep_classifiers(self, dpid: int) -> None:
        if self.cfg.queue_mode != "tc":
            return
        with self._tc_lock:
            for _port_no, name in sorted(self.port_names.get(dpid, {}).items()):
                found = tcmap.ensure_filters(name, self.cfg.level_map)
                self.classified[name] = found != tcmap.NO_QDISC
                if found == tcmap.INSTALLED:
                    LOG.info("DSCP classifier installed on %s", name)

    def queues_ready(self) -> tuple[bool, list[str]]:
        """(ready, what is missing): every connected switch's ports known and, in tc mode, each with its
        DSCP classifier. Until then traffic is forwarded but not prioritised (health says so)."""
        missing = []
        for s in self.logic.topo.switches:
            if s.dpid not in self.datapaths:
                continue  # not connected: "switches" says so
            names = self.port_names.get(s.dpid)
            if names is None:
                missing.append(f"{s.name} (ports not known yet)")
            elif self.cfg.queue_mode == "tc":
                missing += [n for _, n in sorted(names.items()) if not self.classified.get(n)]
        return not missing, missing

    def _serve_api(self) -> None:
        from eventlet import tpool  # heavy requests run in OS threads; the API's event loop stays free

        limits = self.cfg.api_limits
        stats = httpd.ApiStats()
        app = api.make_app(self, tpool.execute, limits.max_body_bytes, metrics=stats.prometheus)
        # the server checks the bearer token as soon as a request's headers are in, before its body is read
        httpd.serve(self.cfg.api_sock, app, limits, token=self.cfg.api_token, stats=stats)

    # ---- views for the API -----------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Switches connected, flows, the level map, and ``queues``: ``ready`` once every connected switch's
        egress ports prioritise by DSCP (tc mode: the classifier on each port), else ``missing`` names them."""
        ready, missing = self.queues_ready()
        return {"switches": {s.name: s.dpid in self.datapaths for s in self.logic.topo.switches},
                "flows": len(self.logic.flows), "queue_mode": self.cfg.queue_mode,
                "levels": self.logic.level_map.to_dict(), "queues": {"ready": ready, "missing": missing}}

    def queues(self) -> list[dict[str, Any]]:
        """Per-queue counters of every switch port: on the userspace datapath (tc mode) the HTB classes
        the tc classifiers fill, read now; else the switches' OpenFlow queue statistics (polled)."""
        if self.cfg.queue_mode == "tc":
            return self._tc_queues()
        now = time.time()
        out = []
        level_of_queue = {q: lv for lv, q in enumerate(self.logic.level_map.queue)}
        for (dpid, port, queue), st in sorted(self.queue_stats.items()):
            sw = self.logic.topo.switch_by_dpid(dpid)
            out.append({"switch": sw.name if sw else None, "dpid": dpid, "port": port,
                        "port_name": self.port_names.get(dpid, {}).get(port), "queue": queue,
                        "level": level_of_queue.get(queue), "tx_bytes": st["tx_bytes"],
                        "tx_packets": st["tx_packets"], "tx_errors": st["tx_errors"],
                        "drops": None, "backlog_bytes": None, "source": "openflow",
                        "age_s": round(now - st["at"], 3)})
        return out

    def _tc_queues(self) -> list[dict[str, Any]]:
        out = []
        level_of_queue = {q: lv for lv, q in enumerate(self.logic.level_map.queue)}
        for dpid, names in sorted(self.port_names.items()):
            sw = self.logic.topo.switch_by_dpid(dpid)
            for port, name in sorted(names.items()):
                for queue, st in sorted(tcmap.class_stats(name).items()):
                    out.append({"switch": sw.name if sw else None, "dpid": dpid, "port": port, "port_name": name,
                                "queue": queue, "level": level_of_queue.get(queue), "tx_bytes": st["bytes"],
                                "tx_packets": st["packets"], "tx_errors": 0, "drops": st["drops"],
                                "backlog_bytes": st["backlog_bytes"], "source": "tc", "age_s": 0.0})
        return out
