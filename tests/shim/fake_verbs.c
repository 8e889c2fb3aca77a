/*
 * FAKE libibverbs provider for tests: there is no RDMA device on the
 * development machines or CI, so the shim is tested against this library,
 * installed as libibverbs.so.1 in a temp dir put first on LD_LIBRARY_PATH.
 *
 * It provides the libibverbs ABI (struct layouts from the real
 * <infiniband/verbs.h>, symbols versioned IBVERBS_1.1 by fake_verbs.map) and
 * fills context->ops like a provider. One device, one port; QPs connect in
 * loopback inside the process: a send on QP a is delivered to QP
 * a.dest_qp_num, completing on a's send CQ and as a receive on the peer.
 *
 * It enforces the Verbs rules the shim must respect:
 *  - QP state machine RESET->INIT->RTR->RTS (+ any->RESET, any->ERR,
 *    INIT->INIT, RTS->RTS) and, per transition, the required and optional
 *    attribute masks of the ibv_modify_qp man page for RC QPs (so the address
 *    vector, hence grh.traffic_class, can only be set on INIT->RTR);
 *  - posts to the send queue only in RTS, to the receive queue in INIT/RTR/RTS
 *    (RESET refuses both; ERR flushes);
 *  - transmission only from RTS to a peer in RTR/RTS that has a receive posted,
 *    one PSN per message: the receiver requires psn == its expected rq_psn
 *    (a mismatch is a sequence error that breaks the sender QP);
 *  - RESET drops queued work requests and removes the QP's unpolled CQEs
 *    (as mlx5 does), ERR flushes them with IBV_WC_WR_FLUSH_ERR;
 *  - a CQ holds at most cqe entries (overrun is logged as an error).
 *
 * Log lines: CREATE_QP, MODIFY (from, to, mask, tc, live PSNs, what a RESET
 * dropped), REJECT (a forbidden call), INJECTED, ERROR (psn_sequence,
 * remote_access, cq_overrun), WIRE (first message sent with a new class),
 * DESTROY_QP (messages transmitted).
 *
 * Transmission happens while some CQ is polled (the "wire" progresses then).
 *
 * Environment:
 *  LEVELLER_FAKE_LOG   append one line per event to this file
 *  LEVELLER_FAKE_FAIL  comma list STATE:N: the N-th (1-based, process-wide)
 *                      transition into STATE (RESET, INIT, RTR, RTS, ERR)
 *                      fails with EIO and changes nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_QPS 1024
#define FAKE_MAX_SGE 8

struct fake_swr {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	int signaled;
	uint32_t imm;
	size_t len;
	uint8_t *data;
	uint64_t remote_addr;
};

struct fake_rwr {
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sge[FAKE_MAX_SGE];
};

struct fake_cq {
	struct ibv_cq cq; /* first: the app sees &fake_cq.cq */
	struct ibv_wc *wc;
	int head, len, cap;
};

struct fake_qp {
	struct ibv_qp qp; /* first */
	struct ibv_qp_attr attr;
	int sig_all;
	uint32_t max_send_wr, max_recv_wr;
	struct fake_swr *sq;
	uint32_t sq_head, sq_len;
	struct fake_rwr *rq;
	uint32_t rq_head, rq_len;
	uint32_t sq_psn, rq_psn; /* live: next PSN to send / expected */
	int wire_tc;		 /* class of the last message transmitted */
	uint64_t tx;		 /* messages transmitted */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_qp *g_qps[FAKE_MAX_QPS];
static uint32_t g_next_qpn = 0x100;
static uint32_t g_next_key = 0x1000;
static int g_transitions[IBV_QPS_ERR + 1];
static FILE *g_log;
static int g_log_opened;
static struct ibv_device g_dev;
static int g_dev_init;

static const char *state_name(int s)
{
	static const char *names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return (s >= 0 && s <= IBV_QPS_ERR) ? names[s] : "UNKNOWN";
}

static void flog(const char *fmt, ...)
{
	if (!g_log_opened) {
		const char *path = getenv("LEVELLER_FAKE_LOG");
		g_log_opened = 1;
		if (path && *path) {
			g_log = fopen(path, "a");
			if (g_log)
				setvbuf(g_log, NULL, _IOLBF, 0);
		}
	}
	if (!g_log)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(g_log, fmt, ap);
	va_end(ap);
	fputc('\n', g_log);
}

static struct fake_qp *qp_by_num(uint32_t qpn)
{
	for (int i = 0; i < FAKE_MAX_QPS; i++)
		if (g_qps[i] && g_qps[i]->qp.qp_num == qpn)
			return g_qps[i];
	return NULL;
}

static int qp_tc(const struct fake_qp *q)
{
	return q->attr.ah_attr.is_global ? q->attr.ah_attr.grh.traffic_class : -1;
}

/* ---- completion queues ------------------------------------------------ */

static void cq_push(struct fake_cq *c, const struct ibv_wc *wc)
{
	if (c->len >= c->cap) {
		flog("ERROR cq_overrun cqe=%d qpn=0x%x", c->cap, wc->qp_num);
		return;
	}
	c->wc[(c->head + c->len) % c->cap] = *wc;
	c->len++;
}

static void cq_clean(struct fake_cq *c, uint32_t qpn, int *removed)
{
	int n = c->len, kept = 0;
	struct ibv_wc *tmp = malloc(sizeof(*tmp) * (n ? n : 1));
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = c->wc[(c->head + i) % c->cap];
		if (wc.qp_num == qpn)
			(*removed)++;
		else
			tmp[kept++] = wc;
	}
	c->head = 0;
	c->len = kept;
	memcpy(c->wc, tmp, sizeof(*tmp) * kept);
	free(tmp);
}

static void complete(struct fake_qp *q, struct ibv_cq *cq, uint64_t wr_id,
		     enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len,
		     uint32_t imm, int with_imm)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = wr_id;
	wc.status = st;
	wc.opcode = op;
	wc.byte_len = len;
	wc.qp_num = q->qp.qp_num;
	if (with_imm) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = imm;
	}
	cq_push((struct fake_cq *)cq, &wc);
}

/* Flush every queued WR of q with IBV_WC_WR_FLUSH_ERR (QP in ERR). */
static void flush_all(struct fake_qp *q)
{
	while (q->sq_len) {
		struct fake_swr *w = &q->sq[q->sq_head];
		complete(q, q->qp.send_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0, 0);
		free(w->data);
		q->sq_head = (q->sq_head + 1) % q->max_send_wr;
		q->sq_len--;
	}
	while (q->rq_len) {
		complete(q, q->qp.recv_cq, q->rq[q->rq_head].wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0);
		q->rq_head = (q->rq_head + 1) % q->max_recv_wr;
		q->rq_len--;
	}
}

/* ---- the wire: move messages from RTS send queues to their peers ------ */

static int needs_recv(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/* Try to transmit the head WR of q; 1 if progress was made. */
static int transmit_one(struct fake_qp *q)
{
	if (q->qp.state != IBV_QPS_RTS || q->sq_len == 0)
		return 0;
	struct fake_qp *p = qp_by_num(q->attr.dest_qp_num);
	if (!p || (p->qp.state != IBV_QPS_RTR && p->qp.state != IBV_QPS_RTS))
		return 0; /* peer not listening: the requester keeps retrying */
	struct fake_swr *w = &q->sq[q->sq_head];
	if (needs_recv(w->opcode) && p->rq_len == 0)
		return 0; /* receiver not ready: RNR retry */
	uint32_t psn = q->sq_psn;
	if (psn != p->rq_psn) {
		flog("ERROR psn_sequence qpn=0x%x psn=%u peer=0x%x expected=%u", q->qp.qp_num, psn,
		     p->qp.qp_num, p->rq_psn);
		complete(q, q->qp.send_cq, w->wr_id, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 0, 0, 0);
		free(w->data);
		q->sq_head = (q->sq_head + 1) % q->max_send_wr;
		q->sq_len--;
		q->qp.state = IBV_QPS_ERR;
		flush_all(q);
		return 1;
	}
	int is_write = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (is_write && !(p->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) {
		flog("ERROR remote_access qpn=0x%x peer=0x%x", q->qp.qp_num, p->qp.qp_num);
		complete(q, q->qp.send_cq, w->wr_id, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 0, 0, 0);
		free(w->data);
		q->sq_head = (q->sq_head + 1) % q->max_send_wr;
		q->sq_len--;
		q->qp.state = IBV_QPS_ERR;
		flush_all(q);
		return 1;
	}
	if (is_write && w->len)
		memcpy((void *)(uintptr_t)w->remote_addr, w->data, w->len);
	if (needs_recv(w->opcode)) {
		struct fake_rwr *r = &p->rq[p->rq_head];
		size_t off = 0;
		if (!is_write) {
			for (int i = 0; i < r->num_sge && off < w->len; i++) {
				size_t n = w->len - off < r->sge[i].length ? w->len - off : r->sge[i].length;
				memcpy((void *)(uintptr_t)r->sge[i].addr, w->data + off, n);
				off += n;
			}
		}
		int imm = w->opcode != IBV_WR_SEND;
		complete(p, p->qp.recv_cq, r->wr_id, IBV_WC_SUCCESS,
			 w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
			 (uint32_t)w->len, w->imm, imm);
		p->rq_head = (p->rq_head + 1) % p->max_recv_wr;
		p->rq_len--;
	}
	if (qp_tc(q) != q->wire_tc) { /* one line per class change on the wire */
		q->wire_tc = qp_tc(q);
		flog("WIRE qpn=0x%x psn=%u tc=%d", q->qp.qp_num, psn, q->wire_tc);
	}
	q->tx++;
	q->sq_psn = (q->sq_psn + 1) & 0xffffff;
	p->rq_psn = (p->rq_psn + 1) & 0xffffff;
	if (w->signaled)
		complete(q, q->qp.send_cq, w->wr_id, IBV_WC_SUCCESS,
			 is_write ? IBV_WC_RDMA_WRITE : IBV_WC_SEND, (uint32_t)w->len, 0, 0);
	free(w->data);
	q->sq_head = (q->sq_head + 1) % q->max_send_wr;
	q->sq_len--;
	return 1;
}

static void progress(void)
{
	int moved;
	do {
		moved = 0;
		for (int i = 0; i < FAKE_MAX_QPS; i++)
			if (g_qps[i])
				moved |= transmit_one(g_qps[i]);
	} while (moved);
}

/* ---- context ops (what ibv_post_send / ibv_poll_cq inline calls reach) - */

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	pthread_mutex_lock(&g_lock);
	for (; wr; wr = wr->next) {
		if (q->qp.state == IBV_QPS_ERR) {
			complete(q, qp->send_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0, 0);
			continue;
		}
		if (q->qp.state != IBV_QPS_RTS) {
			flog("REJECT post_send qpn=0x%x state=%s", qp->qp_num, state_name(q->qp.state));
			rc = EINVAL;
			break;
		}
		if (q->sq_len >= q->max_send_wr) {
			flog("REJECT post_send qpn=0x%x send queue full (%u)", qp->qp_num, q->max_send_wr);
			rc = ENOMEM;
			break;
		}
		if (wr->num_sge > FAKE_MAX_SGE || wr->num_sge < 0) {
			rc = EINVAL;
			break;
		}
		struct fake_swr *w = &q->sq[(q->sq_head + q->sq_len) % q->max_send_wr];
		memset(w, 0, sizeof(*w));
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		w->imm = wr->imm_data;
		w->remote_addr = wr->wr.rdma.remote_addr;
		for (int i = 0; i < wr->num_sge; i++)
			w->len += wr->sg_list[i].length;
		w->data = malloc(w->len ? w->len : 1);
		size_t off = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(w->data + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		q->sq_len++;
	}
	if (rc)
		*bad = wr;
	pthread_mutex_unlock(&g_lock);
	return rc;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	pthread_mutex_lock(&g_lock);
	for (; wr; wr = wr->next) {
		if (q->qp.state == IBV_QPS_ERR) {
			complete(q, qp->recv_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0);
			continue;
		}
		if (q->qp.state == IBV_QPS_RESET) {
			flog("REJECT post_recv qpn=0x%x state=RESET", qp->qp_num);
			rc = EINVAL;
			break;
		}
		if (q->rq_len >= q->max_recv_wr) {
			flog("REJECT post_recv qpn=0x%x receive queue full (%u)", qp->qp_num, q->max_recv_wr);
			rc = ENOMEM;
			break;
		}
		if (wr->num_sge > FAKE_MAX_SGE || wr->num_sge < 0) {
			rc = EINVAL;
			break;
		}
		struct fake_rwr *r = &q->rq[(q->rq_head + q->rq_len) % q->max_recv_wr];
		r->wr_id = wr->wr_id;
		r->num_sge = wr->num_sge;
		memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
		q->rq_len++;
	}
	if (rc)
		*bad = wr;
	pthread_mutex_unlock(&g_lock);
	return rc;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	int k = 0;
	pthread_mutex_lock(&g_lock);
	progress();
	while (k < n && c->len) {
		wc[k++] = c->wc[c->head];
		c->head = (c->head + 1) % c->cap;
		c->len--;
	}
	pthread_mutex_unlock(&g_lock);
	return k;
}

/* ---- exported libibverbs API (IBVERBS_1.1 via fake_verbs.map) -------- */

struct ibv_device **ibv_get_device_list(int *num)
{
	pthread_mutex_lock(&g_lock);
	if (!g_dev_init) {
		g_dev_init = 1;
		g_dev.node_type = IBV_NODE_CA;
		g_dev.transport_type = IBV_TRANSPORT_IB;
		snprintf(g_dev.name, sizeof(g_dev.name), "fake_rdma0");
		snprintf(g_dev.dev_name, sizeof(g_dev.dev_name), "uverbs_fake0");
	}
	pthread_mutex_unlock(&g_lock);
	struct ibv_device **list = calloc(2, sizeof(*list));
	list[0] = &g_dev;
	if (num)
		*num = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *dev) { return dev->name; }

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct ibv_context *ctx = calloc(1, sizeof(*ctx));
	ctx->device = dev;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->ops.poll_cq = fake_poll_cq;
	flog("OPEN_DEVICE %s", dev->name);
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	free(ctx);
	return 0;
}

int(ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
	(void)ctx;
	if (port != 1)
		return EINVAL;
	/* The IBVERBS_1.1 symbol takes the compat (shorter) layout: fill only
	 * the leading fields every layout shares. */
	memset(attr, 0, offsetof(struct ibv_port_attr, link_layer));
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_1024;
	attr->gid_tbl_len = 1;
	attr->lid = 1;
	return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return EINVAL;
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = 0xff; /* ::ffff:127.0.0.1, a RoCE v2 IPv4-mapped GID */
	gid->raw[11] = 0xff;
	gid->raw[12] = 127;
	gid->raw[15] = 1;
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)access;
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	pthread_mutex_lock(&g_lock);
	mr->lkey = mr->rkey = g_next_key++;
	pthread_mutex_unlock(&g_lock);
	return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	(void)iova;
	return (ibv_reg_mr)(pd, addr, len, (int)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	if (cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_cq *c = calloc(1, sizeof(*c));
	c->cq.context = ctx;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	c->cap = cqe;
	c->wc = calloc(cqe, sizeof(*c->wc));
	return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	free(c->wc);
	free(c);
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	if (ia->qp_type != IBV_QPT_RC || ia->srq || !ia->send_cq || !ia->recv_cq ||
	    ia->cap.max_send_wr == 0 || ia->cap.max_recv_wr == 0) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_qp *q = calloc(1, sizeof(*q));
	q->qp.context = pd->context;
	q->qp.qp_context = ia->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = ia->send_cq;
	q->qp.recv_cq = ia->recv_cq;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	q->sig_all = ia->sq_sig_all;
	q->wire_tc = -2;
	q->max_send_wr = ia->cap.max_send_wr;
	q->max_recv_wr = ia->cap.max_recv_wr;
	q->sq = calloc(q->max_send_wr, sizeof(*q->sq));
	q->rq = calloc(q->max_recv_wr, sizeof(*q->rq));
	pthread_mutex_lock(&g_lock);
	int slot = -1;
	for (int i = 0; i < FAKE_MAX_QPS && slot < 0; i++)
		if (!g_qps[i])
			slot = i;
	if (slot < 0) {
		pthread_mutex_unlock(&g_lock);
		free(q->sq);
		free(q->rq);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->qp.qp_num = g_next_qpn++;
	g_qps[slot] = q;
	flog("CREATE_QP qpn=0x%x", q->qp.qp_num);
	pthread_mutex_unlock(&g_lock);
	return &q->qp;
}

/* Per-transition attribute masks for RC QPs (ibv_modify_qp(3)). */
static int transition_masks(int from, int to, int *req, int *opt)
{
	*req = IBV_QP_STATE;
	*opt = IBV_QP_CUR_STATE;
	if (to == IBV_QPS_RESET || to == IBV_QPS_ERR)
		return 0;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		*req |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		*opt = 0;
		return 0;
	}
	if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
		*opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		return 0;
	}
	if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		*req |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		*opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		return 0;
	}
	if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		*req |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
		*opt |= IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
		return 0;
	}
	if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
		*opt |= IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
		return 0;
	}
	return -1;
}

static int injected_failure(int to)
{
	const char *spec = getenv("LEVELLER_FAKE_FAIL");
	int n = ++g_transitions[to];
	if (!spec)
		return 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		if (!colon)
			continue;
		*colon = 0;
		if (strcmp(tok, state_name(to)) == 0 && atoi(colon + 1) == n)
			return 1;
	}
	return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	pthread_mutex_lock(&g_lock);
	int from = q->qp.state;
	int to = (mask & IBV_QP_STATE) ? (int)attr->qp_state : from;
	int tc = (mask & IBV_QP_AV) && attr->ah_attr.is_global ? attr->ah_attr.grh.traffic_class : qp_tc(q);
	int req, opt, rc = 0;
	const char *why = NULL;
	if (!(mask & IBV_QP_STATE))
		why = "IBV_QP_STATE missing (the fake supports state transitions only)";
	else if (transition_masks(from, to, &req, &opt) != 0)
		why = "transition not allowed";
	else if ((mask & req) != req)
		why = "required attribute missing";
	else if (mask & ~(req | opt))
		why = "attribute not allowed in this transition";
	else if ((mask & IBV_QP_CUR_STATE) && (int)attr->cur_qp_state != from)
		why = "cur_qp_state mismatch";
	else if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		why = "bad port";
	if (why) {
		flog("REJECT modify qpn=0x%x from=%s to=%s mask=0x%x tc=%d reason=\"%s\"", qp->qp_num,
		     state_name(from), state_name(to), mask, tc, why);
		pthread_mutex_unlock(&g_lock);
		return EINVAL;
	}
	if (injected_failure(to)) {
		flog("INJECTED modify qpn=0x%x from=%s to=%s tc=%d", qp->qp_num, state_name(from), state_name(to), tc);
		pthread_mutex_unlock(&g_lock);
		return EIO;
	}
	int dropped_sq = 0, dropped_rq = 0, cleaned = 0;
	if (to == IBV_QPS_RESET) {
		dropped_sq = (int)q->sq_len;
		dropped_rq = (int)q->rq_len;
		while (q->sq_len) {
			free(q->sq[q->sq_head].data);
			q->sq_head = (q->sq_head + 1) % q->max_send_wr;
			q->sq_len--;
		}
		q->rq_len = 0;
		cq_clean((struct fake_cq *)qp->send_cq, qp->qp_num, &cleaned);
		if (qp->recv_cq != qp->send_cq)
			cq_clean((struct fake_cq *)qp->recv_cq, qp->qp_num, &cleaned);
		memset(&q->attr, 0, sizeof(q->attr));
		q->sq_psn = q->rq_psn = 0;
	}
	if (mask & IBV_QP_PKEY_INDEX)
		q->attr.pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		q->attr.port_num = attr->port_num;
	if (mask & IBV_QP_ACCESS_FLAGS)
		q->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_AV)
		q->attr.ah_attr = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		q->attr.path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		q->attr.dest_qp_num = attr->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		q->rq_psn = q->attr.rq_psn = attr->rq_psn & 0xffffff;
	if (mask & IBV_QP_SQ_PSN)
		q->sq_psn = q->attr.sq_psn = attr->sq_psn & 0xffffff;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		q->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		q->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		q->attr.timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		q->attr.retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		q->attr.rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		q->attr.max_rd_atomic = attr->max_rd_atomic;
	q->qp.state = to;
	q->attr.qp_state = to;
	if (to == IBV_QPS_ERR)
		flush_all(q);
	flog("MODIFY qpn=0x%x from=%s to=%s mask=0x%x tc=%d rq_psn=%u sq_psn=%u dropped_sq=%d dropped_rq=%d "
	     "cleaned_cqes=%d",
	     qp->qp_num, state_name(from), state_name(to), mask, tc, q->rq_psn, q->sq_psn, dropped_sq,
	     dropped_rq, cleaned);
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *ia)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	(void)mask;
	pthread_mutex_lock(&g_lock);
	*attr = q->attr;
	attr->qp_state = attr->cur_qp_state = q->qp.state;
	attr->sq_psn = q->sq_psn;
	attr->rq_psn = q->rq_psn;
	if (ia) {
		memset(ia, 0, sizeof(*ia));
		ia->send_cq = qp->send_cq;
		ia->recv_cq = qp->recv_cq;
		ia->qp_type = IBV_QPT_RC;
		ia->sq_sig_all = q->sig_all;
		ia->cap.max_send_wr = q->max_send_wr;
		ia->cap.max_recv_wr = q->max_recv_wr;
	}
	pthread_mutex_unlock(&g_lock);
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < FAKE_MAX_QPS; i++)
		if (g_qps[i] == q)
			g_qps[i] = NULL;
	flog("DESTROY_QP qpn=0x%x tx=%lu", qp->qp_num, (unsigned long)q->tx);
	pthread_mutex_unlock(&g_lock);
	for (uint32_t i = 0; i < q->sq_len; i++)
		free(q->sq[(q->sq_head + i) % q->max_send_wr].data);
	free(q->sq);
	free(q->rq);
	free(q);
	return 0;
}
