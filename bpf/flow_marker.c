/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LEVELLER host datapath: per-flow byte counters and DSCP marking, one pass.
 *
 * One source, two loaders (leveller/agent/bpfload.py):
 *   libbpf  the CO-RE object bpf/build/flow_marker.bpf.o, built once by bpf/Makefile
 *           (clang -target bpf -g -DLEVELLER_CORE, against a vmlinux.h that bpftool
 *           dumps from the build host's BTF); the agent sizes the maps before it
 *           loads the object (bpf_map__set_max_entries), so the sizes below are
 *           only the object's defaults. No compiler or kernel headers at run time.
 *   bcc     compiled at run time (a developer's edited C, or no object), with
 *           -D cflags for the map sizes and the kernel's uapi headers.
 * The map sizes:
 *   FLOW_STATS_MAX       entries of flow_stats_egress (LRU: a full map evicts
 *                        the least recently seen flow, forwarding goes on)
 *   FLOW_DSCP_MAX        entries of flow_dscp_egress (plain hash, flow -> slot:
 *                        userspace is the only writer and reports a full map)
 *   FLOW_MARK_SLOTS      entries of flow_mark_egress (array of marks, one per
 *                        slot, mmap'd by the agent)
 *   FLOW_DSCP_STATS_MAX  entries of flow_dscp_stats_egress (LRU, per
 *                        flow and DSCP sent with)
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
#ifdef LEVELLER_CORE
/* The kernel's own types may share our struct names (6.x has a struct flow_stats): vmlinux.h gets
 * theirs renamed, flow_marker.h defines ours. */
#define flow_key vmlinux_flow_key
#define flow_stats vmlinux_flow_stats
#define flow_dscp_key vmlinux_flow_dscp_key
#define flow_dscp_stats vmlinux_flow_dscp_stats
#define flow_slot vmlinux_flow_slot
#define flow_dscp vmlinux_flow_dscp
#define flow_lease vmlinux_flow_lease
/* The program reads only layouts the kernel keeps stable: struct __sk_buff (uapi, rewritten by the
 * verifier) and the wire formats of packet headers. They need no CO-RE relocation, and relocated
 * field offsets (vmlinux.h marks every struct preserve_access_index) make clang add offsets to
 * packet pointers in registers, which the verifier refuses to a loader without CAP_PERFMON or
 * CAP_SYS_ADMIN: the agent's systemd unit grants neither. */
#define BPF_NO_PRESERVE_ACCESS_INDEX
#include "vmlinux.h"
#undef flow_key
#undef flow_stats
#undef flow_dscp_key
#undef flow_dscp_stats
#undef flow_slot
#undef flow_dscp
#undef flow_lease
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Macros of the uapi headers that BTF does not carry (vmlinux.h has types and enums only). */
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define TC_ACT_OK 0

#ifndef FLOW_STATS_MAX
#define FLOW_STATS_MAX 65536
#endif
#ifndef FLOW_DSCP_MAX
#define FLOW_DSCP_MAX 65536
#endif
#ifndef FLOW_MARK_SLOTS
#define FLOW_MARK_SLOTS 131072
#endif
#ifndef FLOW_DSCP_STATS_MAX
#define FLOW_DSCP_STATS_MAX 131072
#endif

/* BTF-defined maps (libbpf) */
#define LV_MAP(_type, _name, _key, _value, _max, _flags)                       \
	struct {                                                               \
		__uint(type, _type);                                           \
		__type(key, _key);                                             \
		__type(value, _value);                                         \
		__uint(max_entries, _max);                                     \
		__uint(map_flags, _flags);                                     \
	} _name SEC(".maps")
#define LV_LRU_HASH(name, key, value, max) LV_MAP(BPF_MAP_TYPE_LRU_HASH, name, key, value, max, 0)
#define LV_HASH(name, key, value, max) LV_MAP(BPF_MAP_TYPE_HASH, name, key, value, max, 0)
#define LV_ARRAY(name, value, max, flags) LV_MAP(BPF_MAP_TYPE_ARRAY, name, __u32, value, max, flags)
#define LV_LOOKUP(map, key) bpf_map_lookup_elem(&map, key)
#define LV_INSERT(map, key, value) bpf_map_update_elem(&map, key, value, BPF_NOEXIST)
#define LV_PROGRAM(sec) SEC(sec)

/* bcc loads with this license too (its default) */
char _license[] SEC("license") = "GPL";

#else /* bcc */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/tcp.h>
#include <uapi/linux/udp.h>
#include <linux/stddef.h>

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

/* bcc's map declarations. Its front end rewrites map.lookup(key) into a call on the map's fd, but
 * not inside a macro: LV_LOOKUP(map, key) calls map_lookup(key), one small function per map and
 * method, below the maps. */
#define LV_LRU_HASH(name, key, value, max) BPF_TABLE("lru_hash", key, value, name, max)
#define LV_HASH(name, key, value, max) BPF_TABLE("hash", key, value, name, max)
#define LV_ARRAY(name, value, max, flags) BPF_F_TABLE("array", __u32, value, name, max, flags)
#define LV_LOOKUP(map, key) map##_lookup(key)
#define LV_INSERT(map, key, value) map##_insert(key, value)
#define LV_PROGRAM(sec)
#endif

#include "flow_marker.h"

#define IP_FRAG_MASK 0x3fff /* MF flag | fragment offset */
#define IPV4_TOS_OFF (ETH_HLEN + offsetof(struct iphdr, tos))
#define IPV4_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))

LV_LRU_HASH(flow_stats_egress, struct flow_key, struct flow_stats, FLOW_STATS_MAX);
LV_HASH(flow_dscp_egress, struct flow_key, struct flow_slot, FLOW_DSCP_MAX);
LV_ARRAY(flow_mark_egress, struct flow_dscp, FLOW_MARK_SLOTS, BPF_F_MMAPABLE);
LV_ARRAY(flow_lease_egress, struct flow_lease, 1, 0);
LV_LRU_HASH(flow_dscp_stats_egress, struct flow_dscp_key, struct flow_dscp_stats, FLOW_DSCP_STATS_MAX);

#ifndef LEVELLER_CORE
static __always_inline struct flow_stats *flow_stats_egress_lookup(struct flow_key *key)
{
	return flow_stats_egress.lookup(key);
}

static __always_inline int flow_stats_egress_insert(struct flow_key *key, struct flow_stats *value)
{
	return flow_stats_egress.insert(key, value);
}

static __always_inline struct flow_slot *flow_dscp_egress_lookup(struct flow_key *key)
{
	return flow_dscp_egress.lookup(key);
}

static __always_inline struct flow_dscp *flow_mark_egress_lookup(__u32 *slot)
{
	return flow_mark_egress.lookup(slot);
}

static __always_inline struct flow_lease *flow_lease_egress_lookup(__u32 *zero)
{
	return flow_lease_egress.lookup(zero);
}

static __always_inline struct flow_dscp_stats *flow_dscp_stats_egress_lookup(struct flow_dscp_key *key)
{
	return flow_dscp_stats_egress.lookup(key);
}

static __always_inline int flow_dscp_stats_egress_insert(struct flow_dscp_key *key, struct flow_dscp_stats *value)
{
	return flow_dscp_stats_egress.insert(key, value);
}
#endif

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
	struct flow_stats *st = LV_LOOKUP(flow_stats_egress, key);
	struct flow_dscp_key dk;
	struct flow_dscp_stats *ds;

	if (!st) {
		struct flow_stats fresh = {
			.bytes = bytes, .packets = segs,
			.last_seen_ns = now, .cgroup_id = cgroup_id,
		};

		if (LV_INSERT(flow_stats_egress, key, &fresh) == 0)
			goto by_dscp;
		/* Another CPU created it first: fall through and add. */
		st = LV_LOOKUP(flow_stats_egress, key);
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
	ds = LV_LOOKUP(flow_dscp_stats_egress, &dk);
	if (!ds) {
		struct flow_dscp_stats fresh = { .bytes = bytes, .packets = segs };

		if (LV_INSERT(flow_dscp_stats_egress, &dk, &fresh) == 0)
			return;
		ds = LV_LOOKUP(flow_dscp_stats_egress, &dk);
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
	struct flow_lease *lease = LV_LOOKUP(flow_lease_egress, &zero);

	return lease && bpf_ktime_get_ns() < lease->deadline_ns;
}

/* The wanted DSCP of the flow, or -1 to leave the packet alone: its slot, then
 * the mark in that slot, read once (the agent stores marks concurrently). */
static __always_inline int wanted_dscp(struct flow_key *key)
{
	struct flow_slot *s = LV_LOOKUP(flow_dscp_egress, key);
	struct flow_dscp *d;
	__u32 slot;
	__u8 mark;

	if (!s)
		return -1;
	slot = s->slot;
	d = LV_LOOKUP(flow_mark_egress, &slot); /* NULL for a slot past the array */
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
LV_PROGRAM("tc")
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
