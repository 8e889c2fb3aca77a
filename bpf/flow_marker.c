/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LEVELLER host datapath: per-flow byte counters and DSCP marking, one pass.
 *
 * Compiled at run time by bcc (leveller/agent/datapath.py) with
 *   -DFLOW_STATS_MAX=<n>  entries of flow_stats_egress (LRU: a full map evicts
 *                         the least recently seen flow, forwarding goes on)
 *   -DFLOW_DSCP_MAX=<n>   entries of flow_dscp_egress (plain hash, flow -> slot:
 *                         userspace is the only writer and reports a full map)
 *   -DFLOW_MARK_SLOTS=<n> entries of flow_mark_egress (array of marks, one per
 *                         slot, mmap'd by the agent)
 *   -DFLOW_DSCP_STATS_MAX=<n> entries of flow_dscp_stats_egress (LRU, per
 *                         flow and DSCP sent with)
 *
 * DSCP rewrites happen only while the agent's lease (flow_lease_egress, see
 * flow_marker.h) has not run out by the kernel clock.
 *
 * The program never drops, truncates or delays a packet: every path returns
 * TC_ACT_OK. Packets it does not understand (non-IP, IPv4 options or
 * fragments, IPv6 extension headers, neither TCP nor UDP, headers not in the
 * linear area or truncated) pass byte-identical and are not counted.
 * Headers are read with direct packet access (no unclone); the DSCP is
 * written with helpers, only when it differs from the wanted one.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/tcp.h>
#include <uapi/linux/udp.h>
#include <linux/stddef.h>

#include "flow_marker.h"

#ifndef FLOW_STATS_MAX
#error "FLOW_STATS_MAX must be set with -DFLOW_STATS_MAX=<entries>"
#endif
#ifndef FLOW_DSCP_MAX
#error "FLOW_DSCP_MAX must be set with -DFLOW_DSCP_MAX=<entries>"
#endif
#ifndef FLOW_MARK_SLOTS
#error "FLOW_MARK_SLOTS must be set with -DFLOW_MARK_SLOTS=<entries>"
#endif
#ifndef FLOW_DSCP_STATS_MAX
#error "FLOW_DSCP_STATS_MAX must be set with -DFLOW_DSCP_STATS_MAX=<entries>"
#endif

#define IP_FRAG_MASK 0x3fff /* MF flag | fragment offset */
#define IPV4_TOS_OFF (ETH_HLEN + offsetof(struct iphdr, tos))
#define IPV4_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))

BPF_TABLE("lru_hash", struct flow_key, struct flow_stats, flow_stats_egress, FLOW_STATS_MAX);
BPF_HASH(flow_dscp_egress, struct flow_key, struct flow_slot, FLOW_DSCP_MAX);
BPF_F_TABLE("array", __u32, struct flow_dscp, flow_mark_egress, FLOW_MARK_SLOTS, BPF_F_MMAPABLE);
BPF_ARRAY(flow_lease_egress, struct flow_lease, 1);
BPF_TABLE("lru_hash", struct flow_dscp_key, struct flow_dscp_stats, flow_dscp_stats_egress, FLOW_DSCP_STATS_MAX);

/* Read the L4 ports at l4 into key; 0 if the L4 header is truncated. */
static __always_inline int parse_ports(void *l4, void *data_end, __u8 proto,
				       struct flow_key *key)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return 0;
		key->src_port = bpf_ntohs(th->source);
		key->dst_port = bpf_ntohs(th->dest);
		return 1;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return 0;
		key->src_port = bpf_ntohs(uh->source);
		key->dst_port = bpf_ntohs(uh->dest);
		return 1;
	}
	return 0;
}

/* Add this packet to its flow's counters, and to its flow's counters for the
 * DSCP it leaves with (create the entries if new). */
static __always_inline void count_packet(struct __sk_buff *skb, struct flow_key *key, __u8 dscp)
{
	__u64 bytes = skb->len - ETH_HLEN;
	__u64 segs = skb->gso_segs ? skb->gso_segs : 1;
	__u64 now = bpf_ktime_get_ns();
	__u64 cgroup_id = bpf_skb_cgroup_id(skb);
	struct flow_stats *st = flow_stats_egress.lookup(key);
	struct flow_dscp_key dk;
	struct flow_dscp_stats *ds;

	if (!st) {
		struct flow_stats fresh = {
			.bytes = bytes, .packets = segs,
			.last_seen_ns = now, .cgroup_id = cgroup_id,
		};

		if (flow_stats_egress.insert(key, &fresh) == 0)
			goto by_dscp;
		/* Another CPU created it first: fall through and add. */
		st = flow_stats_egress.lookup(key);
		if (!st)
			goto by_dscp;
	}
	__sync_fetch_and_add(&st->bytes, bytes);
	__sync_fetch_and_add(&st->packets, segs);
	st->last_seen_ns = now;
	st->cgroup_id = cgroup_id;
by_dscp:
	__builtin_memset(&dk, 0, sizeof(dk));
	dk.flow = *key;
	dk.dscp = dscp & FLOW_DSCP_MASK;
	ds = flow_dscp_stats_egress.lookup(&dk);
	if (!ds) {
		struct flow_dscp_stats fresh = { .bytes = bytes, .packets = segs };

		if (flow_dscp_stats_egress.insert(&dk, &fresh) == 0)
			return;
		ds = flow_dscp_stats_egress.lookup(&dk);
		if (!ds)
			return;
	}
	__sync_fetch_and_add(&ds->bytes, bytes);
	__sync_fetch_and_add(&ds->packets, segs);
}

/* Whether the agent's lease still runs (a deadline of 0 never does). */
static __always_inline int lease_valid(void)
{
	__u32 zero = 0;
	struct flow_lease *lease = flow_lease_egress.lookup(&zero);

	return lease && bpf_ktime_get_ns() < lease->deadline_ns;
}

/* The wanted DSCP of the flow, or -1 to leave the packet alone: its slot, then
 * the mark in that slot, read once (the agent stores marks concurrently). */
static __always_inline int wanted_dscp(struct flow_key *key)
{
	struct flow_slot *s = flow_dscp_egress.lookup(key);
	struct flow_dscp *d;
	__u32 slot;
	__u8 mark;

	if (!s)
		return -1;
	slot = s->slot;
	d = flow_mark_egress.lookup(&slot); /* NULL for a slot past the array */
	if (!d)
		return -1;
	mark = *(volatile __u8 *)&d->mark;
	if ((mark & ~(FLOW_DSCP_SET | FLOW_DSCP_MASK)) || !(mark & FLOW_DSCP_SET))
		return -1;
	if (!lease_valid())
		return -1;
	return mark & FLOW_DSCP_MASK;
}

static __always_inline void handle_ipv4(struct __sk_buff *skb, void *data, void *data_end)
{
	struct iphdr *iph = data + ETH_HLEN;
	struct flow_key key;
	__u8 old_tos, new_tos;
	int dscp;

	if ((void *)(iph + 1) > data_end)
		return;
	if (iph->version != 4 || iph->ihl != 5)
		return; /* IP options: pass unchanged */
	if (iph->frag_off & bpf_htons(IP_FRAG_MASK))
		return; /* fragment: pass unchanged */
	__builtin_memset(&key, 0, sizeof(key));
	if (!parse_ports(iph + 1, data_end, iph->protocol, &key))
		return;
	__builtin_memcpy(key.src_addr, &iph->saddr, 4);
	__builtin_memcpy(key.dst_addr, &iph->daddr, 4);
	key.proto = iph->protocol;
	key.ip_version = 4;
	old_tos = iph->tos;

	dscp = wanted_dscp(&key);
	new_tos = dscp < 0 ? old_tos : (old_tos & 0x03) | (__u8)(dscp << 2);
	count_packet(skb, &key, new_tos >> 2);
	if (new_tos == old_tos)
		return;
	/* TOS is the low byte of the header's first 16-bit word. */
	bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, bpf_htons(old_tos), bpf_htons(new_tos), 2);
	bpf_skb_store_bytes(skb, IPV4_TOS_OFF, &new_tos, 1, 0);
}

static __always_inline void handle_ipv6(struct __sk_buff *skb, void *data, void *data_end)
{
	struct ipv6hdr *ip6h = data + ETH_HLEN;
	struct flow_key key;
	__u16 old_word, new_word;
	__be16 store;
	__u8 old_tc, new_tc;
	int dscp;

	if ((void *)(ip6h + 1) > data_end)
		return;
	if (ip6h->version != 6)
		return;
	__builtin_memset(&key, 0, sizeof(key));
	/* Extension headers (incl. fragments) are not walked: pass unchanged. */
	if (!parse_ports(ip6h + 1, data_end, ip6h->nexthdr, &key))
		return;
	__builtin_memcpy(key.src_addr, &ip6h->saddr, 16);
	__builtin_memcpy(key.dst_addr, &ip6h->daddr, 16);
	key.proto = ip6h->nexthdr;
	key.ip_version = 6;
	/* First word: version(4) | traffic class(8) | flow label high nibble(4). */
	old_word = bpf_ntohs(*(__be16 *)ip6h);

	dscp = wanted_dscp(&key);
	old_tc = (old_word >> 4) & 0xff;
	new_tc = dscp < 0 ? old_tc : (old_tc & 0x03) | (__u8)(dscp << 2);
	count_packet(skb, &key, new_tc >> 2);
	if (new_tc == old_tc)
		return;
	new_word = (old_word & 0xf00f) | ((__u16)new_tc << 4);
	store = bpf_htons(new_word);
	bpf_skb_store_bytes(skb, ETH_HLEN, &store, sizeof(store), 0);
}

/* Attach point: tc clsact egress, direct-action (cls_bpf), on an Ethernet
 * device. Returns TC_ACT_OK for every packet. */
int leveller_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return TC_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		handle_ipv4(skb, data, data_end);
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		handle_ipv6(skb, data, data_end);
	return TC_ACT_OK;
}
