/*
 * Small verbs program for the shim tests: brings up a loopback pair of RC
 * QPs (A sends, B receives), then streams messages until "stop" (or EOF) on
 * stdin, and prints one JSON summary line that says whether every message
 * completed exactly once and in order.
 *
 * Built twice from this file: linked against libibverbs (-libverbs), and with
 * -DVERBS_DLOPEN, where it resolves every entry point like NCCL does:
 * dlopen("libibverbs.so" / "libibverbs.so.1") + dlvsym(h, name, "IBVERBS_1.1").
 *
 *   verbs_stream [--window W] [--size B] [--signal-every K] [--tc T] [--max-seconds S]
 *                [--pause-before-rtr-ms M]   (prints "INIT" then waits before connecting)
 *   verbs_stream rules     check the verbs provider refuses forbidden transitions
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct verbs {
	struct ibv_device **(*get_device_list)(int *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
};
static struct verbs V;
static const char *g_mode;

static void die(const char *what, int err)
{
	printf("{\"error\": \"%s failed: %s\"}\n", what, strerror(err));
	fflush(stdout);
	exit(1);
}

#ifdef VERBS_DLOPEN
static void *sym(void *h, const char *name)
{
	void *p = dlvsym(h, name, "IBVERBS_1.1");
	if (!p)
		die(name, ENOENT);
	return p;
}

static void load_verbs(void)
{
	void *h = dlopen("libibverbs.so", RTLD_NOW);
	if (!h)
		h = dlopen("libibverbs.so.1", RTLD_NOW);
	if (!h)
		die("dlopen libibverbs", ENOENT);
	V.get_device_list = sym(h, "ibv_get_device_list");
	V.open_device = sym(h, "ibv_open_device");
	V.query_gid = sym(h, "ibv_query_gid");
	V.alloc_pd = sym(h, "ibv_alloc_pd");
	V.reg_mr = sym(h, "ibv_reg_mr");
	V.create_cq = sym(h, "ibv_create_cq");
	V.create_qp = sym(h, "ibv_create_qp");
	V.modify_qp = sym(h, "ibv_modify_qp");
	V.destroy_qp = sym(h, "ibv_destroy_qp");
	g_mode = "dlopen";
}
#else
static void load_verbs(void)
{
	V.get_device_list = ibv_get_device_list;
	V.open_device = ibv_open_device;
	V.query_gid = ibv_query_gid;
	V.alloc_pd = ibv_alloc_pd;
	V.reg_mr = (ibv_reg_mr);
	V.create_cq = ibv_create_cq;
	V.create_qp = ibv_create_qp;
	V.modify_qp = ibv_modify_qp;
	V.destroy_qp = ibv_destroy_qp;
	g_mode = "linked";
}
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct setup {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	union ibv_gid gid;
};

static struct ibv_qp *make_qp(struct setup *s, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = depth;
	ia.cap.max_recv_wr = depth;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = V.create_qp(s->pd, &ia);
	if (!qp)
		die("ibv_create_qp", errno);
	return qp;
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	return V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct setup *s, struct ibv_qp *qp, uint32_t dest, uint32_t rq_psn, int tc)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = s->gid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.traffic_class = tc;
	a.ah_attr.port_num = 1;
	return V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void open_all(struct setup *s, int cqe)
{
	int n = 0;
	struct ibv_device **devs = V.get_device_list(&n);
	if (!devs || n < 1)
		die("ibv_get_device_list", ENODEV);
	s->ctx = V.open_device(devs[0]);
	if (!s->ctx)
		die("ibv_open_device", errno);
	s->pd = V.alloc_pd(s->ctx);
	s->cq_a = V.create_cq(s->ctx, cqe, NULL, NULL, 0);
	s->cq_b = V.create_cq(s->ctx, cqe, NULL, NULL, 0);
	if (!s->pd || !s->cq_a || !s->cq_b)
		die("ibv_alloc_pd/ibv_create_cq", errno);
	if (V.query_gid(s->ctx, 1, 0, &s->gid))
		die("ibv_query_gid", EINVAL);
}

/* ---- "rules": the provider must refuse what Verbs forbids ------------- */
static int rules(void)
{
	struct setup s;
	char buf[64];
	open_all(&s, 16);
	s.a = make_qp(&s, s.cq_a, 4);
	s.b = make_qp(&s, s.cq_b, 4);
	struct ibv_mr *mr = V.reg_mr(s.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bs;
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *br;
	int rtr_before_init = to_rtr(&s, s.a, s.b->qp_num, 1, 0);
	int send_in_reset = ibv_post_send(s.a, &swr, &bs);
	int recv_in_reset = ibv_post_recv(s.a, &rwr, &br);
	to_init(s.a);
	to_init(s.b);
	int send_in_init = ibv_post_send(s.a, &swr, &bs);
	to_rtr(&s, s.a, s.b->qp_num, 1, 0);
	to_rtr(&s, s.b, s.a->qp_num, 1, 0);
	int send_in_rtr = ibv_post_send(s.a, &swr, &bs);
	to_rts(s.a, 1);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.traffic_class = 96;
	a.ah_attr.port_num = 1;
	int av_in_rts = V.modify_qp(s.a, &a, IBV_QP_STATE | IBV_QP_AV);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	int rts_to_init = V.modify_qp(s.a, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RESET;
	int to_reset = V.modify_qp(s.a, &a, IBV_QP_STATE);
	int rtr_after_reset = to_rtr(&s, s.a, s.b->qp_num, 1, 96);
	printf("{\"mode\": \"%s\", \"rtr_before_init\": %d, \"send_in_reset\": %d, \"recv_in_reset\": %d, "
	       "\"send_in_init\": %d, \"send_in_rtr\": %d, \"av_in_rts\": %d, \"rts_to_init\": %d, "
	       "\"to_reset\": %d, \"rtr_after_reset\": %d}\n",
	       g_mode, rtr_before_init, send_in_reset, recv_in_reset, send_in_init, send_in_rtr, av_in_rts,
	       rts_to_init, to_reset, rtr_after_reset);
	return 0;
}

/* ---- stream ------------------------------------------------------------ */
static atomic_int g_stop;

static void *stdin_watch(void *arg)
{
	(void)arg;
	char line[64];
	while (fgets(line, sizeof(line), stdin))
		if (strncmp(line, "stop", 4) == 0)
			break;
	atomic_store(&g_stop, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	int window = 16, size = 64, sig_every = 4, tc = 0, pause_ms = 0;
	double max_seconds = 60;
	load_verbs();
	if (argc > 1 && strcmp(argv[1], "rules") == 0)
		return rules();
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--window"))
			window = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--size"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--signal-every"))
			sig_every = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--tc"))
			tc = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--pause-before-rtr-ms"))
			pause_ms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-seconds"))
			max_seconds = atof(argv[i + 1]);
	}
	if (window < 1 || size < 8 || sig_every < 1) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	struct setup s;
	int depth = 2 * window + 8;
	open_all(&s, 4 * depth);
	s.a = make_qp(&s, s.cq_a, depth);
	s.b = make_qp(&s, s.cq_b, depth);
	uint8_t *sbuf = calloc(window, size), *rbuf = calloc(2 * window, size);
	struct ibv_mr *smr = V.reg_mr(s.pd, sbuf, (size_t)window * size, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = V.reg_mr(s.pd, rbuf, (size_t)2 * window * size,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	const uint32_t psn_ab = 0x1234, psn_ba = 0x777;
	if (to_init(s.a) || to_init(s.b))
		die("modify to INIT", EINVAL);
	for (int i = 0; i < 2 * window; i++) { /* B's receive ring */
		struct ibv_sge sge = {.addr = (uintptr_t)(rbuf + (size_t)i * size), .length = size, .lkey = rmr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(s.b, &wr, &bad))
			die("ibv_post_recv", EINVAL);
	}
	if (pause_ms > 0) {
		printf("INIT {\"qp_a\": %u, \"qp_b\": %u}\n", s.a->qp_num, s.b->qp_num);
		fflush(stdout);
		struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (to_rtr(&s, s.a, s.b->qp_num, psn_ba, tc) || to_rtr(&s, s.b, s.a->qp_num, psn_ab, tc))
		die("modify to RTR", EINVAL);
	if (to_rts(s.a, psn_ab) || to_rts(s.b, psn_ba))
		die("modify to RTS", EINVAL);
	printf("READY {\"mode\": \"%s\", \"qp_a\": %u, \"qp_b\": %u}\n", g_mode, s.a->qp_num, s.b->qp_num);
	fflush(stdout);
	pthread_t th;
	pthread_create(&th, NULL, stdin_watch, NULL);
	pthread_detach(th);

	uint64_t posted = 0, received = 0, send_completions = 0, signaled_posted = 0;
	int64_t last_signaled_done = -1;
	int in_order = 1, errors = 0, final_posted = 0;
	char first_error[160] = "";
	double start = now_s(), last_recv = start, max_gap = 0;
	struct ibv_wc wc[16];
	for (;;) {
		double t = now_s();
		if (t - start > max_seconds) {
			snprintf(first_error, sizeof(first_error), "timeout after %.0f s (posted %lu received %lu)",
				 max_seconds, (unsigned long)posted, (unsigned long)received);
			errors++;
			break;
		}
		int stopping = atomic_load(&g_stop);
		if (stopping && final_posted && received == posted && last_signaled_done == (int64_t)posted - 1)
			break;
		if (posted - received < (uint64_t)window && (!stopping || !final_posted)) {
			int last = stopping; /* the final message is signaled: it covers all */
			uint8_t *slot = sbuf + (posted % window) * size;
			memcpy(slot, &posted, 8);
			struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = size, .lkey = smr->lkey};
			struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
						 .opcode = IBV_WR_SEND}, *bad;
			if (last || posted % sig_every == (uint64_t)sig_every - 1) {
				wr.send_flags = IBV_SEND_SIGNALED;
				signaled_posted++;
			}
			int rc = ibv_post_send(s.a, &wr, &bad);
			if (rc) {
				snprintf(first_error, sizeof(first_error), "ibv_post_send: %s", strerror(rc));
				errors++;
				break;
			}
			posted++;
			final_posted = last;
		}
		int n = ibv_poll_cq(s.cq_a, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND) {
				if (!errors)
					snprintf(first_error, sizeof(first_error), "send completion status %d opcode %d",
						 wc[i].status, wc[i].opcode);
				errors++;
				continue;
			}
			send_completions++;
			if ((int64_t)wc[i].wr_id <= last_signaled_done)
				in_order = 0;
			last_signaled_done = (int64_t)wc[i].wr_id;
		}
		n = ibv_poll_cq(s.cq_b, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV) {
				if (!errors)
					snprintf(first_error, sizeof(first_error), "recv completion status %d opcode %d",
						 wc[i].status, wc[i].opcode);
				errors++;
				continue;
			}
			uint64_t seq;
			uint8_t *slot = rbuf + wc[i].wr_id * size;
			memcpy(&seq, slot, 8);
			if (seq != received)
				in_order = 0;
			received++;
			double tr = now_s();
			if (tr - last_recv > max_gap)
				max_gap = tr - last_recv;
			last_recv = tr;
			struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = size, .lkey = rmr->lkey};
			struct ibv_recv_wr rwr = {.wr_id = wc[i].wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
			int rc = ibv_post_recv(s.b, &rwr, &bad);
			if (rc) {
				snprintf(first_error, sizeof(first_error), "ibv_post_recv: %s", strerror(rc));
				errors++;
			}
		}
		if (errors)
			break;
	}
	printf("{\"mode\": \"%s\", \"posted\": %lu, \"received\": %lu, \"send_completions\": %lu, "
	       "\"signaled_posted\": %lu, \"last_signaled_done\": %ld, \"in_order\": %s, \"errors\": %d, "
	       "\"first_error\": \"%s\", \"max_gap_ms\": %.3f, \"seconds\": %.3f}\n",
	       g_mode, (unsigned long)posted, (unsigned long)received, (unsigned long)send_completions,
	       (unsigned long)signaled_posted, (long)last_signaled_done, in_order ? "true" : "false", errors,
	       first_error, max_gap * 1e3, now_s() - start);
	fflush(stdout);
	V.destroy_qp(s.a);
	V.destroy_qp(s.b);
	return errors ? 1 : 0;
}
