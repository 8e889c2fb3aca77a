"""The one place that turns `sdn.rules` data into os-ken OpenFlow 1.3 messages and sends them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sdn.rules import AddFlow, DeleteFlows, Msg, PacketOut


def _actions(dp: Any, actions: tuple[tuple[str, int], ...]) -> list[Any]:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out = []
    for name, arg in actions:
        if name == "set_queue":
            out.append(parser.OFPActionSetQueue(arg))
        elif name == "output":
            out.append(parser.OFPActionOutput(arg))
        elif name == "controller":
            out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
        else:
            raise ValueError(f"unknown action {name!r}")
    return out


def to_ofp(dp: Any, msg: Msg) -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if isinstance(msg, AddFlow):
        inst = []
        if msg.actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, _actions(dp, msg.actions)))
        if msg.goto is not None:
            inst.append(parser.OFPInstructionGotoTable(msg.goto))
        return parser.OFPFlowMod(dp, cookie=msg.cookie, table_id=msg.table, command=ofp.OFPFC_ADD,
                                 idle_timeout=msg.idle_timeout, priority=msg.priority,
                                 flags=ofp.OFPFF_SEND_FLOW_REM if msg.notify_removal else 0,
                                 match=parser.OFPMatch(**dict(msg.match)), instructions=inst)
    if isinstance(msg, DeleteFlows):
        return parser.OFPFlowMod(dp, cookie=msg.cookie, cookie_mask=msg.mask, table_id=ofp.OFPTT_ALL,
                                 command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                 match=parser.OFPMatch())
    if isinstance(msg, PacketOut):
        return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=msg.in_port,
                                   actions=[parser.OFPActionOutput(msg.out_port)], data=msg.data)
    raise TypeError(type(msg))


def send(datapaths: dict[int, Any], msgs: Iterable[Msg]) -> None:
    """Send each message to its switch; messages for switches not connected are dropped
    (they get everything again when they connect)."""
    for msg in msgs:
        dp = datapaths.get(msg.dpid)
        if dp is not None:
            dp.send_msg(to_ofp(dp, msg))
