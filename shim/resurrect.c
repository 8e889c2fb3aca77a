/*
 * QP resurrection: Verbs only accepts a new address vector (hence a new
 * grh.traffic_class) on the INIT->RTR transition, so changing the class of a
 * connected QP means rebuilding it:
 *
 *   hold    new posts and modifies of this QP block until release
 *   drain   wait until every posted send has completed (polling its CQs into
 *           the shim's buffers, which the application's next polls return in
 *           order); trailing unsignaled sends are covered by a signaled
 *           zero-length RDMA WRITE fence whose completion the shim consumes
 *   ERR     stop accepting incoming packets (the peer retransmits them
 *           later), collect the receives this flushes (not shown to the app)
 *   query   the live send and receive PSNs
 *   RESET -> INIT (recorded attributes) -> re-post the outstanding receives
 *           in order -> RTR (recorded attributes, new traffic class, receive
 *           PSN continued) -> RTS (send PSN continued)
 *   release
 *
 * A failure at any step rebuilds the QP at its old class (same sequence) and
 * is reported; if that also fails the QP is left in ERR and reported as such.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

void shim_sig_push(struct shim_qp *q, uint64_t seq, int internal);

static const char *state_name(int s)
{
	static const char *names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return (s >= 0 && s <= IBV_QPS_ERR) ? names[s] : "UNKNOWN";
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double env_ms(const char *name, double dflt)
{
	const char *v = getenv(name);
	double d = v ? atof(v) : 0;
	return d > 0 ? d : dflt;
}

int shim_qp_tc(const struct shim_qp *q)
{
	return q->attr.ah_attr.is_global ? q->attr.ah_attr.grh.traffic_class : -1;
}

static void sweep(struct shim_qp *q)
{
	int got = 0;
	if (q->scq)
		got += shim_cq_sweep(q->scq) > 0;
	if (q->rcq && q->rcq != q->scq)
		got += shim_cq_sweep(q->rcq) > 0;
	if (!got)
		sched_yield();
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

static int post_fence(struct shim_qp *q)
{
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE; /* zero length: no R_Key/VA check at the responder */
	wr.send_flags = IBV_SEND_SIGNALED;
	int rc = q->ctx->post_send(q->qp, &wr, &bad);
	if (rc == 0) {
		q->posted_seq++;
		shim_sig_push(q, q->posted_seq, 1);
	}
	return rc;
}

static int modify_state(struct shim_qp *q, struct ibv_qp_attr *a, int state, int mask)
{
	a->qp_state = state;
	a->cur_qp_state = q->state;
	int rc = shim_real.modify_qp(q->qp, a, mask | IBV_QP_STATE);
	if (rc == 0)
		q->state = state;
	return rc;
}

/* RESET -> INIT -> (re-post receives) -> RTR(tc, rq_psn) -> RTS(sq_psn).
 * Called while held; q->m is not taken (the app's paths are all waiting). */
static int rebuild(struct shim_qp *q, int tc, uint32_t sq_psn, uint32_t rq_psn, const char **step)
{
	struct ibv_qp_attr a;
	int rc;
	memset(&a, 0, sizeof(a));
	*step = "RESET";
	if ((rc = modify_state(q, &a, IBV_QPS_RESET, IBV_QP_STATE)))
		return rc;
	a = q->attr;
	*step = "INIT";
	if ((rc = modify_state(q, &a, IBV_QPS_INIT, q->init_mask & ~IBV_QP_CUR_STATE)))
		return rc;
	*step = "re-post receives";
	for (int i = 0; i < q->rq_len; i++) {
		struct shim_recv *r = &q->rq[(q->rq_head + i) % q->rq_cap];
		struct ibv_recv_wr wr, *bad = NULL;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = r->wr_id;
		wr.sg_list = r->sge;
		wr.num_sge = r->num_sge;
		if ((rc = q->ctx->post_recv(q->qp, &wr, &bad)))
			return rc;
	}
	a = q->attr;
	a.ah_attr.grh.traffic_class = (uint8_t)tc;
	a.rq_psn = rq_psn;
	*step = "RTR";
	if ((rc = modify_state(q, &a, IBV_QPS_RTR, q->rtr_mask & ~IBV_QP_CUR_STATE)))
		return rc;
	a = q->attr;
	a.sq_psn = sq_psn;
	*step = "RTS";
	if ((rc = modify_state(q, &a, IBV_QPS_RTS, q->rts_mask)))
		return rc;
	q->attr.ah_attr.grh.traffic_class = (uint8_t)tc;
	q->attr.rq_psn = rq_psn;
	q->attr.sq_psn = sq_psn;
	return 0;
}

/* Let the application's posts and modifies proceed; *pause_us = hold time. */
static void release(struct shim_qp *q, double t_hold, double *pause_us)
{
	*pause_us = now_us() - t_hold;
	pthread_mutex_lock(&q->m);
	q->held = 0;
	q->resurrecting = 0;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->m);
}

static int fail(struct shim_qp *q, const char *fmt, const char *a, const char *b)
{
	snprintf(q->last_error, sizeof(q->last_error), fmt, a, b);
	q->failures++;
	return -1;
}

int shim_set_tc(struct shim_qp *q, int tc, int *old_tc, int *deferred, double *pause_us, double *drain_us)
{
	char num[32];
	*deferred = 0;
	*pause_us = *drain_us = 0;
	pthread_mutex_lock(&q->m);
	*old_tc = shim_qp_tc(q);
	if (q->dead) {
		pthread_mutex_unlock(&q->m);
		return fail(q, "QP was destroyed%s%s", "", "");
	}
	if (!q->connected && (q->state == IBV_QPS_RESET || q->state == IBV_QPS_INIT)) {
		q->desired_tc = tc; /* applied when the application moves it to RTR */
		*deferred = 1;
		pthread_mutex_unlock(&q->m);
		return 0;
	}
	if (q->state != IBV_QPS_RTS || q->broken) {
		const char *st = q->broken ? "ERR (an error completion was seen)" : state_name(q->state);
		pthread_mutex_unlock(&q->m);
		return fail(q, "QP is in state %s; the traffic class of a connected QP can be changed in RTS only%s",
			    st, "");
	}
	if (!q->attr.ah_attr.is_global) {
		pthread_mutex_unlock(&q->m);
		return fail(q, "QP has no GRH (ah_attr.is_global = 0), so it has no traffic class%s%s", "", "");
	}
	q->desired_tc = tc;
	if (*old_tc == tc) {
		pthread_mutex_unlock(&q->m);
		return 0;
	}
	double t0 = now_us();
	q->held = 1;
	pthread_mutex_unlock(&q->m);

	/* drain the send queue */
	double deadline = t0 + 1e3 * env_ms("LEVELLER_SHIM_DRAIN_TIMEOUT_MS", 5000);
	int fenced = 0;
	for (;;) {
		pthread_mutex_lock(&q->m);
		if (!fenced && needs_fence(q))
			fenced = post_fence(q) == 0;
		int done = q->completed_seq == q->posted_seq, broken = q->broken;
		uint64_t left = q->posted_seq - q->completed_seq;
		pthread_mutex_unlock(&q->m);
		if (done)
			break;
		if (broken) {
			release(q, t0, pause_us);
			return fail(q, "an error completion arrived while draining; traffic class unchanged%s%s", "", "");
		}
		if (now_us() > deadline) {
			release(q, t0, pause_us);
			snprintf(num, sizeof(num), "%lu", (unsigned long)left);
			return fail(q, "drain timed out with %s sends outstanding; traffic class unchanged%s", num, "");
		}
		sweep(q);
	}
	double t_drained = now_us();
	*drain_us = t_drained - t0;

	/* ERR: stop receiving; collect the receives it flushes */
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	pthread_mutex_lock(&q->m);
	q->resurrecting = 1;
	q->flushed = 0;
	pthread_mutex_unlock(&q->m);
	int rc = modify_state(q, &a, IBV_QPS_ERR, IBV_QP_STATE);
	if (rc) {
		release(q, t0, pause_us);
		return fail(q, "step ERR failed: %s; traffic class unchanged%s", strerror(rc), "");
	}
	deadline = now_us() + 1e3 * env_ms("LEVELLER_SHIM_FLUSH_TIMEOUT_MS", 1000);
	for (;;) {
		pthread_mutex_lock(&q->m);
		int done = q->flushed >= q->rq_len;
		pthread_mutex_unlock(&q->m);
		if (done || now_us() > deadline)
			break; /* on timeout RESET removes what was not polled */
		sweep(q);
	}
	sweep(q); /* anything else completed before ERR */

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	memset(&qa, 0, sizeof(qa));
	const char *step = "query PSNs";
	rc = shim_real.query_qp ? shim_real.query_qp(q->qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &qia)
				: ENOSYS;
	if (rc == 0) {
		rc = rebuild(q, tc, qa.sq_psn, qa.rq_psn, &step);
		if (rc == 0) {
			pthread_mutex_lock(&q->m);
			q->resurrections++;
			q->last_error[0] = 0;
			pthread_mutex_unlock(&q->m);
			release(q, t0, pause_us);
			q->last_pause_us = *pause_us;
			q->last_drain_us = *drain_us;
			return 0;
		}
		const char *step2;
		int rc2 = rebuild(q, *old_tc, qa.sq_psn, qa.rq_psn, &step2);
		if (rc2 == 0) {
			snprintf(q->last_error, sizeof(q->last_error),
				 "step %s failed: %s; QP rebuilt at its old traffic class %d", step, strerror(rc), *old_tc);
			q->failures++;
			release(q, t0, pause_us);
			return -1;
		}
		snprintf(q->last_error, sizeof(q->last_error),
			 "step %s failed: %s; restoring the old traffic class failed at %s: %s; QP left in ERR", step,
			 strerror(rc), step2, strerror(rc2));
	} else {
		snprintf(q->last_error, sizeof(q->last_error), "step %s failed: %s; QP left in ERR", step, strerror(rc));
	}
	memset(&a, 0, sizeof(a));
	modify_state(q, &a, IBV_QPS_ERR, IBV_QP_STATE);
	pthread_mutex_lock(&q->m);
	q->broken = 1;
	q->failures++;
	pthread_mutex_unlock(&q->m);
	release(q, t0, pause_us);
	return -1;
}
