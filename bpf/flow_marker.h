/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Map key/value structs of flow_marker.c (tc egress: per-flow counters and
 * DSCP marking). Mirrored, field by field, by leveller/agent/flow_structs.py;
 * tests/unit/test_flow_structs.py checks sizes and offsets against this file.
 * Keep the layout free of implicit padding: explicit pad fields, zeroed.
 */
#ifndef LEVELLER_FLOW_MARKER_H
#define LEVELLER_FLOW_MARKER_H

#ifndef __VMLINUX_H__ /* the CO-RE build has the kernel types from vmlinux.h */
#include <linux/types.h>
#endif

/* Ethertype-agnostic 5-tuple. IPv4 addresses occupy addr[0..3], the other
 * 12 bytes are zero; IPv6 addresses use all 16. Addresses are in network
 * byte order (as on the wire); ports are in HOST byte order. */
struct flow_key {
	__u8 src_addr[16];
	__u8 dst_addr[16];
	__u16 src_port;
	__u16 dst_port;
	__u8 proto;      /* IPPROTO_TCP (6) or IPPROTO_UDP (17) */
	__u8 ip_version; /* 4 or 6 */
	__u8 pad[2];     /* always zero */
};

/* Per-flow counters, updated on every egress packet of the flow.
 * bytes: L3 bytes (IP header + payload) as the packet passes tc; a GSO
 *        super-packet is counted once with its headers, so bytes is at least
 *        the L4 payload and exceeds it by at most one IP+L4 header per
 *        packet.
 * packets: wire segments (gso_segs of a GSO packet, else 1).
 * last_seen_ns: bpf_ktime_get_ns() of the latest packet (CLOCK_MONOTONIC).
 * cgroup_id: cgroup v2 id of the sending socket (bpf_skb_cgroup_id), 0 when
 *            the packet has no local socket. */
struct flow_stats {
	__u64 bytes;
	__u64 packets;
	__u64 last_seen_ns;
	__u64 cgroup_id;
};

/* Key of flow_dscp_stats_egress: a flow and the DSCP its packets left with
 * (after any rewrite, i.e. what the switches classify by). */
struct flow_dscp_key {
	struct flow_key flow;
	__u8 dscp;       /* 0..63 */
	__u8 pad[3];     /* always zero */
};

/* Counters of one flow's packets that left with one DSCP: bytes and packets
 * counted as in struct flow_stats. A flow moved between levels has one entry
 * per DSCP it used, so bytes per queue can be checked against the switches. */
struct flow_dscp_stats {
	__u64 bytes;
	__u64 packets;
};

/* A marked flow's slot: the value of flow_dscp_egress (hash, flow_key -> slot),
 * the index of the flow's mark in flow_mark_egress. The agent writes an entry
 * only when a flow gets or loses its slot; a slot >= the array's size marks
 * nothing. */
struct flow_slot {
	__u32 slot;
};

/* The mark of one slot: the value of flow_mark_egress (array, BPF_F_MMAPABLE),
 * which the agent maps into its memory and writes with plain stores, so
 * changing an existing flow's DSCP takes no system call. Encoding of `mark`:
 *   0                     leave the packet alone (also: any invalid value)
 *   FLOW_DSCP_SET | dscp  set the DSCP to dscp (0..63), keep the ECN bits
 * i.e. valid values are 0x80..0xbf; bit 6 set means invalid (no-op).
 * 8 bytes, the size the kernel gives every array element anyway: element i
 * lies at byte 8 * i of the mapped area. A freed slot is zeroed before a new
 * flow gets it, and a new flow's mark is written before its slot entry. */
#define FLOW_DSCP_SET 0x80
#define FLOW_DSCP_MASK 0x3f
struct flow_dscp {
	__u8 mark;
	__u8 pad[7];     /* always zero */
};

/* The agent's lease on its marks: the only entry (key 0) of flow_lease_egress.
 * deadline_ns is a bpf_ktime_get_ns() time (CLOCK_MONOTONIC). No packet is
 * rewritten at or after it, whatever the marks hold, so marks end on
 * time even when the agent is killed and nobody clears the map.
 * 0 (the value at load) means no lease: nothing is rewritten. */
struct flow_lease {
	__u64 deadline_ns;
};

#endif /* LEVELLER_FLOW_MARKER_H */
