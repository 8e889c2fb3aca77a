"""sdn.ofsend: rules as data -> real os-ken OpenFlow 1.3 messages, sent to the switch they name.

The datapath is a fake (no switch unprivileged) that records what is sent; the messages are
os-ken's own classes and every one is serialized to wire bytes, so a field os-ken cannot encode
fails here and not on a live switch.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from os_ken.base import app_manager  # noqa: F401  (os-ken's import order: app_manager first)
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from leveller.model.flow import flow_key
from sdn.ofsend import send, to_ofp
from sdn.rules import SETUP_COOKIE, TABLE_PATH, TABLE_QOS, AddFlow, DeleteFlows, PacketOut
from tests.helpers.sdn import FakeDatapath


def wire(msg: Any) -> tuple[int, int, int]:
    """(OpenFlow version, message type, length) from the serialized header."""
    version, msg_type, length, _xid = struct.unpack_from("!BBHI", bytes(msg.buf))
    return version, msg_type, length


def test_flow_rule_with_queue_output_removal_notice_and_idle_timeout() -> None:
    dp = FakeDatapath(7)
    f = flow_key("10.0.0.1", "10.0.0.6", 40000, 5201, "tcp")
    rule = AddFlow(7, TABLE_PATH, 100, (("in_port", 3), ("eth_type", 0x0800), ("ip_proto", 6),
                                        ("ipv4_src", f.src), ("ipv4_dst", f.dst), ("tcp_src", 40000),
                                        ("tcp_dst", 5201)),
                   (("set_queue", 2), ("output", 4)), cookie=f.cookie(), idle_timeout=60, notify_removal=True)
    send({7: dp}, [rule])
    (msg,) = dp.sent
    assert isinstance(msg, parser.OFPFlowMod) and wire(msg)[:2] == (ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD)
    assert msg.command == ofp.OFPFC_ADD and msg.table_id == TABLE_PATH and msg.priority == 100
    assert msg.cookie == f.cookie() and msg.idle_timeout == 60
    assert msg.flags & ofp.OFPFF_SEND_FLOW_REM
    assert dict(msg.match.items()) == {"in_port": 3, "eth_type": 0x0800, "ip_proto": 6, "ipv4_src": "10.0.0.1",
                                       "ipv4_dst": "10.0.0.6", "tcp_src": 40000, "tcp_dst": 5201}
    (apply,) = msg.instructions
    assert apply.type == ofp.OFPIT_APPLY_ACTIONS
    queue, out = apply.actions
    assert isinstance(queue, parser.OFPActionSetQueue) and queue.queue_id == 2
    assert isinstance(out, parser.OFPActionOutput) and out.port == 4


def test_pipeline_rule_goes_to_the_next_table_and_asks_no_removal_notice() -> None:
    dp = FakeDatapath(1)
    send({1: dp}, [AddFlow(1, TABLE_QOS, 0, (), goto=TABLE_PATH),
                   AddFlow(1, TABLE_PATH, 1, (("eth_type", 0x0800),), (("controller", 0),)),
                   AddFlow(1, TABLE_PATH, 0, ())])
    goto, to_ctl, drop = dp.sent
    assert goto.flags == 0 and goto.cookie == SETUP_COOKIE
    (inst,) = goto.instructions
    assert isinstance(inst, parser.OFPInstructionGotoTable) and inst.table_id == TABLE_PATH
    (apply,) = to_ctl.instructions
    (act,) = apply.actions
    assert act.port == ofp.OFPP_CONTROLLER and act.max_len == ofp.OFPCML_NO_BUFFER  # whole packet, not a buffer id
    assert drop.instructions == []  # no action: the packet is dropped


def test_actions_then_goto_keep_both_instructions_in_order() -> None:
    dp = FakeDatapath(1)
    msg = to_ofp(dp, AddFlow(1, TABLE_QOS, 100, (("eth_type", 0x0800), ("ip_dscp", 46)), (("set_queue", 3),),
                             goto=TABLE_PATH))
    apply, goto = msg.instructions
    assert apply.actions[0].queue_id == 3 and goto.table_id == TABLE_PATH


def test_delete_flows_by_cookie_mask_in_every_table() -> None:
    dp = FakeDatapath(2)
    msg = to_ofp(dp, DeleteFlows(2, cookie=SETUP_COOKIE, mask=SETUP_COOKIE))
    dp.send_msg(msg)
    assert msg.command == ofp.OFPFC_DELETE and msg.table_id == ofp.OFPTT_ALL
    assert (msg.cookie, msg.cookie_mask) == (SETUP_COOKIE, SETUP_COOKIE)
    assert msg.out_port == ofp.OFPP_ANY and msg.out_group == ofp.OFPG_ANY and dict(msg.match.items()) == {}
    everything = to_ofp(dp, DeleteFlows(2))
    assert everything.cookie_mask == 0  # mask 0: every rule, whatever its cookie


def test_packet_out_forwards_the_frame_on_the_path_port() -> None:
    dp = FakeDatapath(3)
    frame = bytes(range(60))
    send({3: dp}, [PacketOut(3, in_port=5, out_port=1, data=frame)])
    (msg,) = dp.sent
    assert isinstance(msg, parser.OFPPacketOut) and msg.buffer_id == ofp.OFP_NO_BUFFER
    assert msg.in_port == 5 and [a.port for a in msg.actions] == [1] and msg.data == frame
    assert bytes(msg.buf).endswith(frame)


def test_unknown_action_and_message_types_are_refused_by_name() -> None:
    dp = FakeDatapath(1)
    with pytest.raises(ValueError, match="unknown action 'flood'"):
        to_ofp(dp, AddFlow(1, TABLE_PATH, 1, (), (("flood", 0),)))
    with pytest.raises(TypeError, match="str"):
        to_ofp(dp, "not a message")  # type: ignore[arg-type]


def test_messages_for_switches_not_connected_are_dropped_the_rest_sent_in_order() -> None:
    a, b = FakeDatapath(1), FakeDatapath(2)
    send({1: a, 2: b}, [DeleteFlows(2), DeleteFlows(9), AddFlow(1, TABLE_PATH, 0, ()), AddFlow(2, TABLE_PATH, 0, ())])
    assert [m.command for m in b.sent] == [ofp.OFPFC_DELETE, ofp.OFPFC_ADD]
    assert [m.command for m in a.sent] == [ofp.OFPFC_ADD]
