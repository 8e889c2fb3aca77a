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
 * This unit is the procedure only: the QP and its primitive steps belong to
 * the registry (registry.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

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

/* Record a failed change (for the caller and for `list`); returns -1. */
static int failed(struct shim_qp *q, struct shim_tc_change *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out->error, sizeof(out->error), fmt, ap);
	va_end(ap);
	shim_qp_outcome(q, out->error, 0, 0);
	return -1;
}

/* Poll the QP's CQs; yield when nothing came. -ENOMEM: no room to keep them. */
static int sweep(struct shim_qp *q)
{
	int r = shim_qp_sweep(q);
	if (r == 0)
		sched_yield();
	return r < 0 ? r : 0;
}

/* Step drain: every posted send completed. 0, or -1 with out->error. */
static int drain_sends(struct shim_qp *q, double t0, struct shim_tc_change *out)
{
	double deadline = t0 + 1e3 * env_ms("LEVELLER_SHIM_DRAIN_TIMEOUT_MS", 5000);
	int fenced = 0;
	for (;;) {
		uint64_t left;
		int r = shim_qp_sends_left(q, &fenced, &left);
		if (r == 1)
			return 0;
		if (r == -EIO)
			return failed(q, out, "an error completion arrived while draining; traffic class unchanged");
		if (r == -ENOMEM)
			return failed(q, out, "out of memory posting the drain fence; traffic class unchanged");
		if (now_us() > deadline)
			return failed(q, out, "drain timed out with %lu sends outstanding; traffic class unchanged",
				      (unsigned long)left);
		if (sweep(q) == -ENOMEM)
			return failed(q, out, "out of memory keeping polled completions; traffic class unchanged");
	}
}

/* Step ERR: stop receiving and collect the receives it flushes. 0, or -1 with out->error. */
static int stop_receiving(struct shim_qp *q, struct shim_tc_change *out)
{
	if (shim_qp_reserve_completions(q))
		return failed(q, out, "out of memory reserving room for completions; traffic class unchanged");
	shim_qp_flush_begin(q);
	int rc = shim_qp_to_err(q);
	if (rc)
		return failed(q, out, "step ERR failed: %s; traffic class unchanged", strerror(rc));
	double deadline = now_us() + 1e3 * env_ms("LEVELLER_SHIM_FLUSH_TIMEOUT_MS", 1000);
	/* on timeout (or no room to poll) RESET removes what was not polled */
	while (!shim_qp_flush_done(q) && now_us() <= deadline && sweep(q) == 0)
		;
	sweep(q); /* anything else completed before ERR */
	return 0;
}

/* RESET -> INIT -> re-post receives -> RTR(tc, rq_psn) -> RTS(sq_psn); 0 or
 * the provider's errno with *step naming the step that failed. */
static int rebuild(struct shim_qp *q, int tc, uint32_t sq_psn, uint32_t rq_psn, const char **step)
{
	int rc;
	if ((*step = "RESET", rc = shim_qp_to_reset(q)) || (*step = "INIT", rc = shim_qp_to_init(q)) ||
	    (*step = "re-post receives", rc = shim_qp_repost_recvs(q)) ||
	    (*step = "RTR", rc = shim_qp_to_rtr(q, tc, rq_psn)) || (*step = "RTS", rc = shim_qp_to_rts(q, sq_psn)))
		return rc;
	shim_qp_commit(q, tc, sq_psn, rq_psn);
	return 0;
}

/* Query the PSNs and rebuild at tc; on failure rebuild at the old class, and
 * when that fails too leave the QP in ERR. 0, or -1 with out->error. */
static int rebuild_or_restore(struct shim_qp *q, int tc, struct shim_tc_change *out)
{
	uint32_t sq_psn, rq_psn;
	const char *step = "query PSNs", *step2;
	int rc = shim_qp_query_psns(q, &sq_psn, &rq_psn);
	if (rc == 0) {
		if ((rc = rebuild(q, tc, sq_psn, rq_psn, &step)) == 0)
			return 0;
		int rc2 = rebuild(q, out->old_tc, sq_psn, rq_psn, &step2);
		if (rc2 == 0)
			return failed(q, out, "step %s failed: %s; QP rebuilt at its old traffic class %d", step,
				      strerror(rc), out->old_tc);
		snprintf(out->error, sizeof(out->error),
			 "step %s failed: %s; restoring the old traffic class failed at %s: %s; QP left in ERR", step,
			 strerror(rc), step2, strerror(rc2));
	} else {
		snprintf(out->error, sizeof(out->error), "step %s failed: %s; QP left in ERR", step, strerror(rc));
	}
	shim_qp_to_err(q);
	shim_qp_mark_broken(q);
	shim_qp_outcome(q, out->error, 0, 0);
	return -1;
}

int shim_set_tc(struct shim_qp *q, int tc, struct shim_tc_change *out)
{
	memset(out, 0, sizeof(*out));
	char why[200];
	switch (shim_qp_hold(q, tc, &out->old_tc, why, sizeof(why))) {
	case SHIM_HOLD_REFUSED:
		return failed(q, out, "%s", why);
	case SHIM_HOLD_DEFERRED:
		out->deferred = 1; /* applied when the application moves it to RTR */
		return 0;
	case SHIM_HOLD_SAME:
		return 0;
	}
	double t0 = now_us();
	int rc = drain_sends(q, t0, out);
	if (rc == 0) {
		out->drain_us = now_us() - t0;
		rc = stop_receiving(q, out);
	}
	if (rc == 0)
		rc = rebuild_or_restore(q, tc, out);
	out->pause_us = now_us() - t0;
	shim_qp_release(q);
	if (rc == 0)
		shim_qp_outcome(q, NULL, out->pause_us, out->drain_us);
	return rc;
}
