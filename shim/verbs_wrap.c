/*
 * libibverbs interposition: QP lifecycle wrappers (exported, and handed out
 * by the dlsym/dlvsym interposer), context->ops wrappers for the inline
 * ibv_post_send / ibv_post_recv / ibv_poll_cq, and per-QP bookkeeping:
 *  - every attribute the application sets, per transition (for the rebuild),
 *  - the connection's endpoints, learnt at the RTR transition,
 *  - the send queue as sequence numbers: a signaled completion (in order on
 *    an RC send queue) completes every earlier WR, so "drained" means the
 *    last posted sequence number has completed,
 *  - the receives posted and not completed (a RESET discards them; the
 *    rebuild re-posts them in order).
 * A held QP blocks the application's posting thread until release (simplest
 * correct choice: no copy of the application's WR lists is needed).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define QP_BUCKETS 1024
#define CQ_BUCKETS 256
#define SHIM_MAX_SGE 16

static pthread_mutex_t g_reg = PTHREAD_MUTEX_INITIALIZER;
static struct shim_qp *g_qp_ptr[QP_BUCKETS], *g_qp_num[QP_BUCKETS];
static struct shim_cq *g_cq[CQ_BUCKETS];
static struct shim_ctx *g_ctx;
static int g_job_tc = -1;

void shim_registry_lock(void) { pthread_mutex_lock(&g_reg); }
void shim_registry_unlock(void) { pthread_mutex_unlock(&g_reg); }

static unsigned ptr_hash(const void *p, unsigned n) { return (unsigned)(((uintptr_t)p >> 6) % n); }

const char *shim_job(void)
{
	const char *j = getenv("LEVELLER_JOB");
	return j ? j : "";
}

int shim_job_tc(void) { return __atomic_load_n(&g_job_tc, __ATOMIC_ACQUIRE); }
void shim_set_job_tc(int tc) { __atomic_store_n(&g_job_tc, tc, __ATOMIC_RELEASE); }

static struct shim_qp *qp_by_ptr(struct ibv_qp *qp)
{
	pthread_mutex_lock(&g_reg);
	struct shim_qp *q = g_qp_ptr[ptr_hash(qp, QP_BUCKETS)];
	while (q && q->qp != qp)
		q = q->next_ptr;
	pthread_mutex_unlock(&g_reg);
	return q;
}

struct shim_qp *shim_qp_by_num(uint32_t qpn)
{
	pthread_mutex_lock(&g_reg);
	struct shim_qp *q = g_qp_num[qpn % QP_BUCKETS];
	while (q && q->qpn != qpn)
		q = q->next_num;
	pthread_mutex_unlock(&g_reg);
	return q;
}

struct shim_qp **shim_qps_snapshot(int *n)
{
	pthread_mutex_lock(&g_reg);
	int count = 0;
	for (int b = 0; b < QP_BUCKETS; b++)
		for (struct shim_qp *q = g_qp_num[b]; q; q = q->next_num)
			count++;
	struct shim_qp **out = calloc(count ? count : 1, sizeof(*out));
	int i = 0;
	for (int b = 0; b < QP_BUCKETS; b++)
		for (struct shim_qp *q = g_qp_num[b]; q; q = q->next_num)
			out[i++] = q;
	pthread_mutex_unlock(&g_reg);
	/* by QP number, so listings are stable */
	for (int a = 1; a < count; a++)
		for (int b = a; b > 0 && out[b - 1]->qpn > out[b]->qpn; b--) {
			struct shim_qp *t = out[b];
			out[b] = out[b - 1];
			out[b - 1] = t;
		}
	*n = count;
	return out;
}

static struct shim_ctx *ctx_find(struct ibv_context *ctx)
{
	pthread_mutex_lock(&g_reg);
	struct shim_ctx *c = g_ctx;
	while (c && c->ctx != ctx)
		c = c->next;
	pthread_mutex_unlock(&g_reg);
	return c;
}

/* ---- CQs: completions owed to the application ------------------------- */

static struct shim_cq *cq_get(struct ibv_cq *cq)
{
	unsigned h = ptr_hash(cq, CQ_BUCKETS);
	pthread_mutex_lock(&g_reg);
	struct shim_cq *c = g_cq[h];
	while (c && c->cq != cq)
		c = c->next;
	if (!c) {
		struct shim_ctx *x = g_ctx;
		while (x && x->ctx != cq->context)
			x = x->next;
		if (x && (c = calloc(1, sizeof(*c)))) {
			c->cq = cq;
			c->ctx = x;
			pthread_mutex_init(&c->m, NULL);
			c->next = g_cq[h];
			g_cq[h] = c;
		}
	}
	pthread_mutex_unlock(&g_reg);
	return c;
}

static void cq_buffer_push(struct shim_cq *c, const struct ibv_wc *wc)
{
	if (c->len == c->cap) {
		int ncap = c->cap ? 2 * c->cap : 64;
		struct ibv_wc *nb = malloc(sizeof(*nb) * ncap);
		for (int i = 0; i < c->len; i++)
			nb[i] = c->buf[(c->head + i) % c->cap];
		free(c->buf);
		c->buf = nb;
		c->cap = ncap;
		c->head = 0;
	}
	c->buf[(c->head + c->len) % c->cap] = *wc;
	c->len++;
}

/* ---- per-QP send/receive bookkeeping (caller holds q->m) --------------- */

static void sig_push(struct shim_qp *q, uint64_t seq, int internal)
{
	if (q->sig_len == q->sig_cap) {
		int ncap = q->sig_cap ? 2 * q->sig_cap : 64;
		struct shim_sig *n = malloc(sizeof(*n) * ncap);
		for (int i = 0; i < q->sig_len; i++)
			n[i] = q->sig[(q->sig_head + i) % q->sig_cap];
		free(q->sig);
		q->sig = n;
		q->sig_cap = ncap;
		q->sig_head = 0;
	}
	q->sig[(q->sig_head + q->sig_len) % q->sig_cap] = (struct shim_sig){seq, internal};
	q->sig_len++;
}

void shim_sig_push(struct shim_qp *q, uint64_t seq, int internal) { sig_push(q, seq, internal); }

static int rq_push(struct shim_qp *q, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || wr->num_sge > SHIM_MAX_SGE)
		return -1;
	if (q->rq_len == q->rq_cap) {
		int ncap = q->rq_cap ? 2 * q->rq_cap : 64;
		struct shim_recv *n = malloc(sizeof(*n) * ncap);
		for (int i = 0; i < q->rq_len; i++)
			n[i] = q->rq[(q->rq_head + i) % q->rq_cap];
		free(q->rq);
		q->rq = n;
		q->rq_cap = ncap;
		q->rq_head = 0;
	}
	struct shim_recv *r = &q->rq[(q->rq_head + q->rq_len) % q->rq_cap];
	r->wr_id = wr->wr_id;
	r->num_sge = wr->num_sge;
	r->sge = malloc(sizeof(struct ibv_sge) * (wr->num_sge ? wr->num_sge : 1));
	memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
	q->rq_len++;
	return 0;
}

static void rq_pop(struct shim_qp *q)
{
	if (!q->rq_len)
		return;
	free(q->rq[q->rq_head].sge);
	q->rq_head = (q->rq_head + 1) % q->rq_cap;
	q->rq_len--;
}

static void queues_clear(struct shim_qp *q)
{
	while (q->rq_len)
		rq_pop(q);
	q->sig_len = 0;
	q->completed_seq = q->posted_seq;
}

/* Account for polled completions; drop the ones that belong to the shim
 * (its fence, receives flushed by its ERR step). Returns how many remain. */
static int observe(struct shim_cq *c, struct ibv_wc *wc, int n)
{
	int kept = 0;
	for (int i = 0; i < n; i++) {
		struct shim_qp *q = shim_qp_by_num(wc[i].qp_num);
		int keep = 1;
		if (q && (q->scq == c || q->rcq == c)) {
			pthread_mutex_lock(&q->m);
			if (q->dead) {
				/* nothing to track */
			} else if (wc[i].status == IBV_WC_SUCCESS) {
				if (wc[i].opcode & IBV_WC_RECV) {
					rq_pop(q);
				} else if (q->sig_len) {
					struct shim_sig s = q->sig[q->sig_head];
					q->sig_head = (q->sig_head + 1) % q->sig_cap;
					q->sig_len--;
					q->completed_seq = s.seq;
					keep = !s.internal;
				}
			} else if (q->resurrecting && wc[i].status == IBV_WC_WR_FLUSH_ERR) {
				q->flushed++; /* a receive our ERR step flushed: re-posted later */
				keep = 0;
			} else {
				q->broken = 1;
			}
			pthread_mutex_unlock(&q->m);
		}
		if (keep)
			wc[kept++] = wc[i];
	}
	return kept;
}

int shim_cq_sweep(struct shim_cq *c)
{
	struct ibv_wc tmp[32];
	pthread_mutex_lock(&c->m);
	int r = c->ctx->poll_cq(c->cq, 32, tmp);
	if (r > 0) {
		int kept = observe(c, tmp, r);
		for (int i = 0; i < kept; i++)
			cq_buffer_push(c, &tmp[i]);
	}
	pthread_mutex_unlock(&c->m);
	return r;
}

/* ---- context ops wrappers ---------------------------------------------- */

static int w_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct shim_qp *q = qp_by_ptr(qp);
	if (!q) {
		struct shim_ctx *c = ctx_find(qp->context);
		return c ? c->post_send(qp, wr, bad) : EINVAL;
	}
	pthread_mutex_lock(&q->m);
	while (q->held)
		pthread_cond_wait(&q->cv, &q->m);
	int rc = q->ctx->post_send(qp, wr, bad);
	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		if (rc && (!bad || w == *bad))
			break;
		q->posted_seq++;
		if (q->sig_all || (w->send_flags & IBV_SEND_SIGNALED))
			sig_push(q, q->posted_seq, 0);
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

static int w_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct shim_qp *q = qp_by_ptr(qp);
	if (!q) {
		struct shim_ctx *c = ctx_find(qp->context);
		return c ? c->post_recv(qp, wr, bad) : EINVAL;
	}
	pthread_mutex_lock(&q->m);
	while (q->held)
		pthread_cond_wait(&q->cv, &q->m);
	int rc = q->ctx->post_recv(qp, wr, bad);
	for (struct ibv_recv_wr *w = wr; w; w = w->next) {
		if (rc && (!bad || w == *bad))
			break;
		if (rq_push(q, w))
			q->broken = 1; /* cannot re-post what it cannot copy: no resurrection */
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

static int w_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct shim_cq *c = cq_get(cq);
	if (!c) {
		struct shim_ctx *x = ctx_find(cq->context);
		return x ? x->poll_cq(cq, n, wc) : -EINVAL;
	}
	int k = 0;
	pthread_mutex_lock(&c->m);
	while (k < n && c->len) {
		wc[k++] = c->buf[c->head];
		c->head = (c->head + 1) % c->cap;
		c->len--;
	}
	if (k < n) {
		int r = c->ctx->poll_cq(cq, n - k, wc + k);
		if (r > 0)
			k += observe(c, wc + k, r);
		else if (r < 0 && k == 0)
			k = r;
	}
	pthread_mutex_unlock(&c->m);
	return k;
}

/* Wrap a context's ops once, keeping the provider's originals. */
static struct shim_ctx *ctx_wrap(struct ibv_context *ctx)
{
	pthread_mutex_lock(&g_reg);
	struct shim_ctx *c = g_ctx;
	while (c && c->ctx != ctx)
		c = c->next;
	if (!c && ctx->ops.post_send != w_post_send && (c = calloc(1, sizeof(*c)))) {
		c->ctx = ctx;
		c->post_send = ctx->ops.post_send;
		c->post_recv = ctx->ops.post_recv;
		c->poll_cq = ctx->ops.poll_cq;
		c->next = g_ctx;
		g_ctx = c;
		__atomic_store_n(&ctx->ops.post_send, w_post_send, __ATOMIC_RELEASE);
		__atomic_store_n(&ctx->ops.post_recv, w_post_recv, __ATOMIC_RELEASE);
		__atomic_store_n(&ctx->ops.poll_cq, w_poll_cq, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_reg);
	return c;
}

/* ---- attribute recording ----------------------------------------------- */

static void merge_attr(struct ibv_qp_attr *d, const struct ibv_qp_attr *s, int mask)
{
	if (mask & IBV_QP_CUR_STATE)
		d->cur_qp_state = s->cur_qp_state;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		d->en_sqd_async_notify = s->en_sqd_async_notify;
	if (mask & IBV_QP_ACCESS_FLAGS)
		d->qp_access_flags = s->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		d->pkey_index = s->pkey_index;
	if (mask & IBV_QP_PORT)
		d->port_num = s->port_num;
	if (mask & IBV_QP_QKEY)
		d->qkey = s->qkey;
	if (mask & IBV_QP_AV)
		d->ah_attr = s->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		d->path_mtu = s->path_mtu;
	if (mask & IBV_QP_TIMEOUT)
		d->timeout = s->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		d->retry_cnt = s->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		d->rnr_retry = s->rnr_retry;
	if (mask & IBV_QP_RQ_PSN)
		d->rq_psn = s->rq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		d->max_rd_atomic = s->max_rd_atomic;
	if (mask & IBV_QP_ALT_PATH) {
		d->alt_ah_attr = s->alt_ah_attr;
		d->alt_pkey_index = s->alt_pkey_index;
		d->alt_port_num = s->alt_port_num;
		d->alt_timeout = s->alt_timeout;
	}
	if (mask & IBV_QP_MIN_RNR_TIMER)
		d->min_rnr_timer = s->min_rnr_timer;
	if (mask & IBV_QP_SQ_PSN)
		d->sq_psn = s->sq_psn;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		d->max_dest_rd_atomic = s->max_dest_rd_atomic;
	if (mask & IBV_QP_PATH_MIG_STATE)
		d->path_mig_state = s->path_mig_state;
	if (mask & IBV_QP_CAP)
		d->cap = s->cap;
	if (mask & IBV_QP_DEST_QPN)
		d->dest_qp_num = s->dest_qp_num;
	if (mask & IBV_QP_RATE_LIMIT)
		d->rate_limit = s->rate_limit;
}

/* Record a successful application modify (caller holds q->m). */
void shim_record_qp_attr(struct shim_qp *q, const struct ibv_qp_attr *a, int mask)
{
	int from = q->state;
	int to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from;
	merge_attr(&q->attr, a, mask);
	if (to == IBV_QPS_RESET && (mask & IBV_QP_STATE)) {
		q->init_mask = q->rtr_mask = q->rts_mask = 0;
		q->connected = 0;
		queues_clear(q); /* a reset discards every queued WR */
	} else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		q->init_mask = mask;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
		q->init_mask |= mask;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		q->rtr_mask = mask;
		q->connected = 1;
		q->local.qpn = q->qpn;
		q->local.port = a->ah_attr.port_num ? a->ah_attr.port_num : q->attr.port_num;
		q->local.sgid_index = a->ah_attr.grh.sgid_index;
		memset(&q->local.gid, 0, sizeof(q->local.gid));
		if (a->ah_attr.is_global && shim_real.query_gid)
			shim_real.query_gid(q->qp->context, q->local.port, a->ah_attr.grh.sgid_index, &q->local.gid);
		q->remote.qpn = a->dest_qp_num;
		q->remote.lid = a->ah_attr.dlid;
		q->remote.gid = a->ah_attr.grh.dgid;
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		q->rts_mask = mask;
	} else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
		q->rts_mask |= mask;
	}
	if (to == IBV_QPS_ERR)
		q->broken = 1;
	else if (to == IBV_QPS_RESET)
		q->broken = 0;
	q->state = to;
}

/* ---- exported lifecycle wrappers --------------------------------------- */

static void ensure_real(void)
{
	if (!shim_real.create_qp || !shim_real.modify_qp || !shim_real.destroy_qp)
		shim_resolve_real(RTLD_NEXT);
}

struct ibv_qp *shim_wrap_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	ensure_real();
	if (!shim_real.create_qp) {
		errno = ENOSYS;
		return NULL;
	}
	struct ibv_qp *qp = shim_real.create_qp(pd, ia);
	if (!qp || ia->qp_type != IBV_QPT_RC)
		return qp; /* only RC QPs are tracked and resurrected */
	struct shim_ctx *x = ctx_wrap(qp->context);
	struct shim_qp *q = x ? calloc(1, sizeof(*q)) : NULL;
	if (!q)
		return qp;
	q->qp = qp;
	q->qpn = qp->qp_num;
	q->ctx = x;
	q->sig_all = ia->sq_sig_all;
	q->state = IBV_QPS_RESET;
	q->desired_tc = -1;
	q->app_tc = -1;
	pthread_mutex_init(&q->m, NULL);
	pthread_cond_init(&q->cv, NULL);
	q->scq = cq_get(ia->send_cq);
	q->rcq = cq_get(ia->recv_cq);
	pthread_mutex_lock(&g_reg);
	unsigned hp = ptr_hash(qp, QP_BUCKETS), hn = q->qpn % QP_BUCKETS;
	q->next_ptr = g_qp_ptr[hp];
	g_qp_ptr[hp] = q;
	q->next_num = g_qp_num[hn];
	g_qp_num[hn] = q;
	pthread_mutex_unlock(&g_reg);
	shim_control_start();
	return qp;
}

int shim_wrap_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	ensure_real();
	struct shim_qp *q = qp_by_ptr(qp);
	if (!q)
		return shim_real.modify_qp(qp, attr, mask);
	pthread_mutex_lock(&q->m);
	while (q->held)
		pthread_cond_wait(&q->cv, &q->m);
	struct ibv_qp_attr a = *attr;
	int to_rtr = (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR;
	int tc = q->desired_tc >= 0 ? q->desired_tc : shim_job_tc();
	if (to_rtr && (mask & IBV_QP_AV) && a.ah_attr.is_global && tc >= 0)
		a.ah_attr.grh.traffic_class = (uint8_t)tc; /* the controller's class from the start */
	int rc = shim_real.modify_qp(qp, &a, mask);
	if (rc == 0) {
		shim_record_qp_attr(q, &a, mask);
		if (to_rtr && (mask & IBV_QP_AV))
			q->app_tc = attr->ah_attr.is_global ? attr->ah_attr.grh.traffic_class : -1;
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

int shim_wrap_destroy_qp(struct ibv_qp *qp)
{
	ensure_real();
	struct shim_qp *q = qp_by_ptr(qp);
	if (q) {
		pthread_mutex_lock(&q->m);
		while (q->held)
			pthread_cond_wait(&q->cv, &q->m);
		q->dead = 1;
		queues_clear(q);
		pthread_mutex_unlock(&q->m);
		pthread_mutex_lock(&g_reg);
		struct shim_qp **pp = &g_qp_ptr[ptr_hash(qp, QP_BUCKETS)];
		while (*pp && *pp != q)
			pp = &(*pp)->next_ptr;
		if (*pp)
			*pp = q->next_ptr;
		pp = &g_qp_num[q->qpn % QP_BUCKETS];
		while (*pp && *pp != q)
			pp = &(*pp)->next_num;
		if (*pp)
			*pp = q->next_num;
		pthread_mutex_unlock(&g_reg);
		/* q itself is kept: a concurrent poll may still hold a pointer */
	}
	return shim_real.destroy_qp(qp);
}

int shim_wrap_destroy_cq(struct ibv_cq *cq)
{
	ensure_real();
	pthread_mutex_lock(&g_reg);
	struct shim_cq **pp = &g_cq[ptr_hash(cq, CQ_BUCKETS)];
	while (*pp && (*pp)->cq != cq)
		pp = &(*pp)->next;
	struct shim_cq *c = *pp;
	if (c)
		*pp = c->next;
	pthread_mutex_unlock(&g_reg);
	if (c) {
		pthread_mutex_lock(&c->m);
		c->len = 0; /* owed completions die with the CQ */
		pthread_mutex_unlock(&c->m);
	}
	return shim_real.destroy_cq ? shim_real.destroy_cq(cq) : ENOSYS;
}

/* The exported names are aliases (same address) of the wrappers, so a lookup
 * that lands on them is recognised by the dlsym interposer. */
SHIM_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)
	__attribute__((alias("shim_wrap_create_qp")));
SHIM_EXPORT int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int) __attribute__((alias("shim_wrap_modify_qp")));
SHIM_EXPORT int ibv_destroy_qp(struct ibv_qp *) __attribute__((alias("shim_wrap_destroy_qp")));
SHIM_EXPORT int ibv_destroy_cq(struct ibv_cq *) __attribute__((alias("shim_wrap_destroy_cq")));
