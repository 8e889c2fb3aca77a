/*
 * The registry: owns every tracked QP, CQ and context, and is the only unit
 * that knows struct shim_qp. Per QP it keeps
 *  - every attribute the application sets, per transition (for the rebuild),
 *  - the connection's endpoints, learnt at the RTR transition,
 *  - the send queue as sequence numbers: a signaled completion (in order on
 *    an RC send queue) completes every earlier WR, so "drained" means the
 *    last posted sequence number has completed,
 *  - the receives posted and not completed (a RESET discards them; the
 *    rebuild re-posts them in order),
 * and per CQ the completions the shim polled while draining that the
 * application is owed. A held QP blocks the application's posting thread
 * until release (no copy of the application's WR lists is needed).
 *
 * Out of memory: a ring grows before anything is posted or polled, so a
 * failed growth changes nothing. On the application's post paths the post
 * still goes through (the application must not suffer for the shim's
 * bookkeeping) and the QP is marked lost: its class cannot be changed until
 * the application resets it, and set_tc says why.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

#define QP_BUCKETS 1024
#define CQ_BUCKETS 256
#define SHIM_MAX_SGE 16
#define RING_MIN 64
#define SWEEP_BATCH 32

struct shim_ctx {
	struct ibv_context *ctx;
	struct shim_ops orig; /* the provider's */
	struct shim_ctx *next;
};

struct shim_cq {
	struct ibv_cq *cq;
	struct shim_ctx *ctx;
	pthread_mutex_t m;
	struct ibv_wc *buf; /* ring of owed completions */
	int head, len, cap;
	struct shim_cq *next;
};

struct shim_recv {
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge *sge;
};

struct shim_sig {
	uint64_t seq;
	int internal; /* the shim's own fence: its completion is not the app's */
};

struct shim_qp {
	struct ibv_qp *qp;
	uint32_t qpn;
	struct shim_ctx *ctx;
	struct shim_cq *scq, *rcq;
	int sig_all;

	pthread_mutex_t m;
	pthread_cond_t cv;
	int held;	  /* posts and modifies wait while set */
	int resurrecting; /* completions flushed by our ERR step are ours */
	int dead;	  /* destroyed by the application */
	int broken;	  /* an error completion was seen: QP is in ERR */
	char lost[96];	  /* bookkeeping lost (out of memory): why; "" = intact */

	/* what the application brought the QP up with (latest values) */
	int state;
	struct ibv_qp_attr attr;
	int init_mask, rtr_mask, rts_mask;
	struct shim_endpoint local, remote;
	int connected;
	int desired_tc;
	int app_tc;

	/* send queue: sequence numbers of posted WRs and signaled ones pending */
	uint64_t posted_seq, completed_seq;
	struct shim_sig *sig;
	int sig_head, sig_len, sig_cap;
	/* receive queue: posted, not yet completed (re-posted after RESET) */
	struct shim_recv *rq;
	int rq_head, rq_len, rq_cap;
	int flushed; /* receives flushed by our ERR step */

	uint64_t resurrections, failures;
	double last_pause_us, last_drain_us;
	char last_error[256];

	struct shim_qp *next_ptr, *next_num;
};

static pthread_mutex_t g_reg = PTHREAD_MUTEX_INITIALIZER;
static struct shim_qp *g_qp_ptr[QP_BUCKETS], *g_qp_num[QP_BUCKETS];
static struct shim_cq *g_cq[CQ_BUCKETS];
static struct shim_ctx *g_ctx;
static int g_job_tc = -1;
static void (*g_first_qp_hook)(void);
static pid_t g_hook_pid;

static unsigned ptr_hash(const void *p, unsigned n) { return (unsigned)(((uintptr_t)p >> 6) % n); }

const char *shim_state_name(int s)
{
	static const char *names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return (s >= 0 && s <= IBV_QPS_ERR) ? names[s] : "UNKNOWN";
}

const char *shim_job(void)
{
	const char *j = getenv("LEVELLER_JOB");
	return j ? j : "";
}

int shim_job_tc(void) { return __atomic_load_n(&g_job_tc, __ATOMIC_ACQUIRE); }
void shim_set_job_tc(int tc) { __atomic_store_n(&g_job_tc, tc, __ATOMIC_RELEASE); }

void shim_reg_on_first_qp(void (*hook)(void)) { g_first_qp_hook = hook; }

/* ---- growable rings ------------------------------------------------------- */

/* Make room for `need` more elements in a ring (unrolled to the start of the
 * new buffer). 0, or -1 with the ring untouched. */
static int ring_reserve(void **buf, int *head, int len, int *cap, size_t elem, int need, const char *site)
{
	if (len + need <= *cap)
		return 0;
	int ncap = *cap ? *cap : RING_MIN;
	while (ncap < len + need)
		ncap *= 2;
	char *nb = shim_malloc(elem * (size_t)ncap, site);
	if (!nb)
		return -1;
	for (int i = 0; i < len; i++)
		memcpy(nb + elem * (size_t)i, (char *)*buf + elem * (size_t)((*head + i) % *cap), elem);
	shim_free(*buf);
	*buf = nb;
	*cap = ncap;
	*head = 0;
	return 0;
}

/* ---- lookups -------------------------------------------------------------- */

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
	struct shim_qp **out = shim_calloc(count ? count : 1, sizeof(*out), "snapshot");
	int i = 0;
	for (int b = 0; out && b < QP_BUCKETS; b++)
		for (struct shim_qp *q = g_qp_num[b]; q; q = q->next_num)
			out[i++] = q;
	pthread_mutex_unlock(&g_reg);
	*n = out ? count : 0;
	/* by QP number, so listings are stable */
	for (int a = 1; a < *n; a++)
		for (int b = a; b > 0 && out[b - 1]->qpn > out[b]->qpn; b--) {
			struct shim_qp *t = out[b];
			out[b] = out[b - 1];
			out[b - 1] = t;
		}
	return out;
}

/* Caller holds g_reg. */
static struct shim_ctx *ctx_find_locked(struct ibv_context *ctx)
{
	struct shim_ctx *c = g_ctx;
	while (c && c->ctx != ctx)
		c = c->next;
	return c;
}

static struct shim_ctx *ctx_find(struct ibv_context *ctx)
{
	pthread_mutex_lock(&g_reg);
	struct shim_ctx *c = ctx_find_locked(ctx);
	pthread_mutex_unlock(&g_reg);
	return c;
}

/* Keep a context's ops and install the wrappers, once. Caller holds g_reg. */
static struct shim_ctx *ctx_wrap_locked(struct ibv_context *ctx, const struct shim_ops *w)
{
	struct shim_ctx *c = ctx_find_locked(ctx);
	if (c || ctx->ops.post_send == w->post_send || !(c = shim_calloc(1, sizeof(*c), "ctx")))
		return c;
	c->ctx = ctx;
	c->orig.post_send = ctx->ops.post_send;
	c->orig.post_recv = ctx->ops.post_recv;
	c->orig.poll_cq = ctx->ops.poll_cq;
	c->next = g_ctx;
	g_ctx = c;
	__atomic_store_n(&ctx->ops.post_send, w->post_send, __ATOMIC_RELEASE);
	__atomic_store_n(&ctx->ops.post_recv, w->post_recv, __ATOMIC_RELEASE);
	__atomic_store_n(&ctx->ops.poll_cq, w->poll_cq, __ATOMIC_RELEASE);
	return c;
}

/* Caller holds g_reg. */
static struct shim_cq *cq_find_locked(struct ibv_cq *cq)
{
	struct shim_cq *c = g_cq[ptr_hash(cq, CQ_BUCKETS)];
	while (c && c->cq != cq)
		c = c->next;
	return c;
}

static struct shim_cq *cq_get_locked(struct ibv_cq *cq, struct shim_ctx *x)
{
	struct shim_cq *c = cq_find_locked(cq);
	if (c || !(c = shim_calloc(1, sizeof(*c), "cq")))
		return c;
	unsigned h = ptr_hash(cq, CQ_BUCKETS);
	c->cq = cq;
	c->ctx = x;
	pthread_mutex_init(&c->m, NULL);
	c->next = g_cq[h];
	g_cq[h] = c;
	return c;
}

/* ---- per-QP send/receive bookkeeping (caller holds q->m) ------------------- */

static void lose(struct shim_qp *q, const char *why)
{
	if (!q->lost[0])
		snprintf(q->lost, sizeof(q->lost), "%s", why);
}

static void sig_push(struct shim_qp *q, uint64_t seq, int internal)
{
	q->sig[(q->sig_head + q->sig_len) % q->sig_cap] = (struct shim_sig){seq, internal};
	q->sig_len++;
}

static void rq_pop(struct shim_qp *q)
{
	if (!q->rq_len)
		return;
	shim_free(q->rq[q->rq_head].sge);
	q->rq_head = (q->rq_head + 1) % q->rq_cap;
	q->rq_len--;
}

static void queues_clear(struct shim_qp *q)
{
	while (q->rq_len)
		rq_pop(q);
	q->sig_len = 0;
	q->completed_seq = q->posted_seq;
	q->lost[0] = 0; /* nothing is queued: the bookkeeping is whole again */
}

/* Record one posted receive; -1 (nothing recorded) when it cannot. */
static int rq_push(struct shim_qp *q, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || wr->num_sge > SHIM_MAX_SGE)
		return -1;
	if (ring_reserve((void **)&q->rq, &q->rq_head, q->rq_len, &q->rq_cap, sizeof(*q->rq), 1, "rq"))
		return -1;
	struct ibv_sge *sge = shim_malloc(sizeof(*sge) * (wr->num_sge ? wr->num_sge : 1), "sge");
	if (!sge)
		return -1;
	memcpy(sge, wr->sg_list, sizeof(*sge) * wr->num_sge);
	struct shim_recv *r = &q->rq[(q->rq_head + q->rq_len) % q->rq_cap];
	r->wr_id = wr->wr_id;
	r->num_sge = wr->num_sge;
	r->sge = sge;
	q->rq_len++;
	return 0;
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
				if (q->lost[0]) {
					/* untracked until the application resets the QP */
				} else if (wc[i].opcode & IBV_WC_RECV) {
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

/* Poll c into its owed-completions ring: as much as there is room for when
 * the ring cannot grow; -ENOMEM (nothing polled) when it is full. */
static int cq_sweep(struct shim_cq *c)
{
	struct ibv_wc tmp[SWEEP_BATCH];
	pthread_mutex_lock(&c->m);
	int room = SWEEP_BATCH;
	if (ring_reserve((void **)&c->buf, &c->head, c->len, &c->cap, sizeof(*c->buf), SWEEP_BATCH, "cqbuf"))
		room = c->cap - c->len;
	if (room == 0) {
		pthread_mutex_unlock(&c->m);
		return -ENOMEM;
	}
	int r = c->ctx->orig.poll_cq(c->cq, room, tmp);
	if (r > 0) {
		int kept = observe(c, tmp, r);
		for (int i = 0; i < kept; i++)
			c->buf[(c->head + c->len++) % c->cap] = tmp[i];
	}
	pthread_mutex_unlock(&c->m);
	return r;
}

static int cq_reserve(struct shim_cq *c, int need)
{
	pthread_mutex_lock(&c->m);
	int rc = ring_reserve((void **)&c->buf, &c->head, c->len, &c->cap, sizeof(*c->buf), need, "cqbuf");
	pthread_mutex_unlock(&c->m);
	return rc;
}

/* ---- the wrapped context ops ------------------------------------------------ */

/* The tracked QP of qp, locked once it is not held; NULL (and *x its
 * context, if known) for a QP the shim does not track. */
static struct shim_qp *lock_for_post(struct ibv_qp *qp, struct shim_ctx **x)
{
	struct shim_qp *q = qp_by_ptr(qp);
	if (!q) {
		*x = ctx_find(qp->context);
		return NULL;
	}
	pthread_mutex_lock(&q->m);
	while (q->held)
		pthread_cond_wait(&q->cv, &q->m);
	return q;
}

int shim_reg_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct shim_ctx *x;
	struct shim_qp *q = lock_for_post(qp, &x);
	if (!q)
		return x ? x->orig.post_send(qp, wr, bad) : EINVAL;
	int nsig = 0;
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		nsig += q->sig_all || (w->send_flags & IBV_SEND_SIGNALED);
	if (!q->lost[0] &&
	    ring_reserve((void **)&q->sig, &q->sig_head, q->sig_len, &q->sig_cap, sizeof(*q->sig), nsig, "sig"))
		lose(q, "out of memory recording posted sends");
	int rc = q->ctx->orig.post_send(qp, wr, bad);
	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		if (rc && (!bad || w == *bad))
			break;
		q->posted_seq++;
		if (!q->lost[0] && (q->sig_all || (w->send_flags & IBV_SEND_SIGNALED)))
			sig_push(q, q->posted_seq, 0);
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

int shim_reg_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct shim_ctx *x;
	struct shim_qp *q = lock_for_post(qp, &x);
	if (!q)
		return x ? x->orig.post_recv(qp, wr, bad) : EINVAL;
	int rc = q->ctx->orig.post_recv(qp, wr, bad);
	for (struct ibv_recv_wr *w = wr; w; w = w->next) {
		if (rc && (!bad || w == *bad))
			break;
		if (!q->lost[0] && rq_push(q, w))
			lose(q, w->num_sge > SHIM_MAX_SGE ? "a receive has more scatter entries than the shim copies"
							  : "out of memory recording posted receives");
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

int shim_reg_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	pthread_mutex_lock(&g_reg);
	struct shim_cq *c = cq_find_locked(cq);
	struct shim_ctx *x = c ? c->ctx : ctx_find_locked(cq->context);
	pthread_mutex_unlock(&g_reg);
	if (!c) /* no tracked QP uses this CQ */
		return x ? x->orig.poll_cq(cq, n, wc) : -EINVAL;
	int k = 0;
	pthread_mutex_lock(&c->m);
	while (k < n && c->len) {
		wc[k++] = c->buf[c->head];
		c->head = (c->head + 1) % c->cap;
		c->len--;
	}
	if (k < n) {
		int r = c->ctx->orig.poll_cq(cq, n - k, wc + k);
		if (r > 0)
			k += observe(c, wc + k, r);
		else if (r < 0 && k == 0)
			k = r;
	}
	pthread_mutex_unlock(&c->m);
	return k;
}

/* ---- attribute recording ---------------------------------------------------- */

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
static void record_qp_attr(struct shim_qp *q, const struct ibv_qp_attr *a, int mask)
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

static int qp_tc(const struct shim_qp *q)
{
	return q->attr.ah_attr.is_global ? q->attr.ah_attr.grh.traffic_class : -1;
}

/* ---- QP lifecycle (the wrappers' side) ---------------------------------------- */

int shim_reg_qp_add(struct ibv_qp *qp, const struct ibv_qp_init_attr *ia, const struct shim_ops *wrappers)
{
	struct shim_qp *q = shim_calloc(1, sizeof(*q), "qp");
	if (!q)
		return -ENOMEM;
	q->qp = qp;
	q->qpn = qp->qp_num;
	q->sig_all = ia->sq_sig_all;
	q->state = IBV_QPS_RESET;
	q->desired_tc = -1;
	q->app_tc = -1;
	pthread_mutex_init(&q->m, NULL);
	pthread_cond_init(&q->cv, NULL);
	pthread_mutex_lock(&g_reg);
	q->ctx = ctx_wrap_locked(qp->context, wrappers);
	q->scq = q->ctx ? cq_get_locked(ia->send_cq, q->ctx) : NULL;
	q->rcq = q->scq ? cq_get_locked(ia->recv_cq, q->ctx) : NULL;
	if (!q->rcq) { /* a context or CQ record it made stays: it is whole, and used later */
		pthread_mutex_unlock(&g_reg);
		pthread_mutex_destroy(&q->m);
		pthread_cond_destroy(&q->cv);
		shim_free(q);
		return -ENOMEM;
	}
	unsigned hp = ptr_hash(qp, QP_BUCKETS), hn = q->qpn % QP_BUCKETS;
	q->next_ptr = g_qp_ptr[hp];
	g_qp_ptr[hp] = q;
	q->next_num = g_qp_num[hn];
	g_qp_num[hn] = q;
	void (*hook)(void) = NULL;
	if (g_hook_pid != getpid()) { /* also after fork: the child starts its own */
		g_hook_pid = getpid();
		hook = g_first_qp_hook;
	}
	pthread_mutex_unlock(&g_reg);
	if (hook)
		hook();
	return 0;
}

int shim_reg_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
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
		record_qp_attr(q, &a, mask);
		if (to_rtr && (mask & IBV_QP_AV))
			q->app_tc = attr->ah_attr.is_global ? attr->ah_attr.grh.traffic_class : -1;
	}
	pthread_mutex_unlock(&q->m);
	return rc;
}

void shim_reg_qp_remove(struct ibv_qp *qp)
{
	struct shim_qp *q = qp_by_ptr(qp);
	if (!q)
		return;
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

void shim_reg_cq_remove(struct ibv_cq *cq)
{
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
}

/* ---- QPs for resurrect.c and control.c ------------------------------------------ */

void shim_qp_info(struct shim_qp *q, struct shim_qp_info *o)
{
	pthread_mutex_lock(&q->m);
	o->qpn = q->qpn;
	o->state = q->state;
	o->connected = q->connected;
	o->broken = q->broken;
	o->dead = q->dead;
	o->tc = qp_tc(q);
	o->desired_tc = q->desired_tc;
	o->app_tc = q->app_tc;
	o->local = q->local;
	o->remote = q->remote;
	o->resurrections = q->resurrections;
	o->failures = q->failures;
	o->last_pause_us = q->last_pause_us;
	o->last_drain_us = q->last_drain_us;
	memcpy(o->last_error, q->last_error, sizeof(o->last_error));
	pthread_mutex_unlock(&q->m);
}

void shim_qp_set_desired(struct shim_qp *q, int tc)
{
	pthread_mutex_lock(&q->m);
	q->desired_tc = tc;
	pthread_mutex_unlock(&q->m);
}

int shim_qp_hold(struct shim_qp *q, int tc, int *old_tc, char *why, size_t n)
{
	int r = SHIM_HOLD_HELD;
	pthread_mutex_lock(&q->m);
	*old_tc = qp_tc(q);
	if (q->dead) {
		snprintf(why, n, "QP was destroyed");
		r = SHIM_HOLD_REFUSED;
	} else if (!q->connected && (q->state == IBV_QPS_RESET || q->state == IBV_QPS_INIT)) {
		q->desired_tc = tc;
		r = SHIM_HOLD_DEFERRED;
	} else if (q->state != IBV_QPS_RTS || q->broken) {
		snprintf(why, n, "QP is in state %s; the traffic class of a connected QP can be changed in RTS only",
			 q->broken ? "ERR (an error completion was seen)" : shim_state_name(q->state));
		r = SHIM_HOLD_REFUSED;
	} else if (!q->attr.ah_attr.is_global) {
		snprintf(why, n, "QP has no GRH (ah_attr.is_global = 0), so it has no traffic class");
		r = SHIM_HOLD_REFUSED;
	} else if (q->lost[0]) {
		snprintf(why, n, "the shim lost track of this QP's queues (%s); its class can change after the "
				 "application resets it", q->lost);
		r = SHIM_HOLD_REFUSED;
	} else {
		q->desired_tc = tc;
		if (*old_tc == tc)
			r = SHIM_HOLD_SAME;
		else
			q->held = 1;
	}
	pthread_mutex_unlock(&q->m);
	return r;
}

void shim_qp_release(struct shim_qp *q)
{
	pthread_mutex_lock(&q->m);
	q->held = 0;
	q->resurrecting = 0;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->m);
}

/* Last posted send not covered by a signaled WR still pending or done? */
static int needs_fence(const struct shim_qp *q)
{
	if (q->completed_seq == q->posted_seq)
		return 0;
	if (!q->sig_len)
		return 1;
	return q->sig[(q->sig_head + q->sig_len - 1) % q->sig_cap].seq != q->posted_seq;
}

/* A signaled zero-length RDMA WRITE (no R_Key/VA check at the responder). Caller holds q->m. */
static int post_fence(struct shim_qp *q)
{
	if (ring_reserve((void **)&q->sig, &q->sig_head, q->sig_len, &q->sig_cap, sizeof(*q->sig), 1, "sig"))
		return -ENOMEM;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	int rc = q->ctx->orig.post_send(q->qp, &wr, &bad);
	if (rc == 0) {
		q->posted_seq++;
		sig_push(q, q->posted_seq, 1);
	}
	return rc;
}

int shim_qp_sends_left(struct shim_qp *q, int *fenced, uint64_t *left)
{
	int r = 0;
	pthread_mutex_lock(&q->m);
	if (!*fenced && needs_fence(q)) {
		int rc = post_fence(q);
		if (rc == -ENOMEM)
			r = -ENOMEM;
		*fenced = rc == 0; /* a provider refusal is tried again */
	}
	*left = q->posted_seq - q->completed_seq;
	if (r == 0)
		r = *left == 0 ? 1 : q->broken ? -EIO : 0;
	pthread_mutex_unlock(&q->m);
	return r;
}

int shim_qp_sweep(struct shim_qp *q)
{
	int got = 0, r;
	if ((r = cq_sweep(q->scq)) == -ENOMEM)
		return r;
	got += r > 0 ? r : 0;
	if (q->rcq != q->scq) {
		if ((r = cq_sweep(q->rcq)) == -ENOMEM)
			return r;
		got += r > 0 ? r : 0;
	}
	return got;
}

int shim_qp_reserve_completions(struct shim_qp *q)
{
	pthread_mutex_lock(&q->m);
	int need = q->rq_len + SWEEP_BATCH;
	pthread_mutex_unlock(&q->m);
	if (cq_reserve(q->scq, need) || (q->rcq != q->scq && cq_reserve(q->rcq, need)))
		return -ENOMEM;
	return 0;
}

void shim_qp_flush_begin(struct shim_qp *q)
{
	pthread_mutex_lock(&q->m);
	q->resurrecting = 1;
	q->flushed = 0;
	pthread_mutex_unlock(&q->m);
}

int shim_qp_flush_done(struct shim_qp *q)
{
	pthread_mutex_lock(&q->m);
	int done = q->flushed >= q->rq_len;
	pthread_mutex_unlock(&q->m);
	return done;
}

/* The rebuild steps run while held: the application's paths all wait, so
 * q->m is not taken. */
static int modify_state(struct shim_qp *q, struct ibv_qp_attr *a, int state, int mask)
{
	a->qp_state = state;
	a->cur_qp_state = q->state;
	int rc = shim_real.modify_qp(q->qp, a, mask | IBV_QP_STATE);
	if (rc == 0)
		q->state = state;
	return rc;
}

int shim_qp_to_err(struct shim_qp *q)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	return modify_state(q, &a, IBV_QPS_ERR, IBV_QP_STATE);
}

int shim_qp_to_reset(struct shim_qp *q)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	return modify_state(q, &a, IBV_QPS_RESET, IBV_QP_STATE);
}

int shim_qp_to_init(struct shim_qp *q)
{
	struct ibv_qp_attr a = q->attr;
	return modify_state(q, &a, IBV_QPS_INIT, q->init_mask & ~IBV_QP_CUR_STATE);
}

int shim_qp_repost_recvs(struct shim_qp *q)
{
	for (int i = 0; i < q->rq_len; i++) {
		struct shim_recv *r = &q->rq[(q->rq_head + i) % q->rq_cap];
		struct ibv_recv_wr wr, *bad = NULL;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = r->wr_id;
		wr.sg_list = r->sge;
		wr.num_sge = r->num_sge;
		int rc = q->ctx->orig.post_recv(q->qp, &wr, &bad);
		if (rc)
			return rc;
	}
	return 0;
}

int shim_qp_to_rtr(struct shim_qp *q, int tc, uint32_t rq_psn)
{
	struct ibv_qp_attr a = q->attr;
	a.ah_attr.grh.traffic_class = (uint8_t)tc;
	a.rq_psn = rq_psn;
	return modify_state(q, &a, IBV_QPS_RTR, q->rtr_mask & ~IBV_QP_CUR_STATE);
}

int shim_qp_to_rts(struct shim_qp *q, uint32_t sq_psn)
{
	struct ibv_qp_attr a = q->attr;
	a.sq_psn = sq_psn;
	return modify_state(q, &a, IBV_QPS_RTS, q->rts_mask);
}

int shim_qp_query_psns(struct shim_qp *q, uint32_t *sq_psn, uint32_t *rq_psn)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	memset(&qa, 0, sizeof(qa));
	if (!shim_real.query_qp)
		return ENOSYS;
	int rc = shim_real.query_qp(q->qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &qia);
	*sq_psn = qa.sq_psn;
	*rq_psn = qa.rq_psn;
	return rc;
}

void shim_qp_commit(struct shim_qp *q, int tc, uint32_t sq_psn, uint32_t rq_psn)
{
	pthread_mutex_lock(&q->m);
	q->attr.ah_attr.grh.traffic_class = (uint8_t)tc;
	q->attr.rq_psn = rq_psn;
	q->attr.sq_psn = sq_psn;
	pthread_mutex_unlock(&q->m);
}

void shim_qp_outcome(struct shim_qp *q, const char *error, double pause_us, double drain_us)
{
	pthread_mutex_lock(&q->m);
	if (error) {
		snprintf(q->last_error, sizeof(q->last_error), "%s", error);
		q->failures++;
	} else {
		q->last_error[0] = 0;
		q->resurrections++;
		q->last_pause_us = pause_us;
		q->last_drain_us = drain_us;
	}
	pthread_mutex_unlock(&q->m);
}

void shim_qp_mark_broken(struct shim_qp *q)
{
	pthread_mutex_lock(&q->m);
	q->broken = 1;
	pthread_mutex_unlock(&q->m);
}
