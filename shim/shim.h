/*
 * LEVELLER RDMA shim (LD_PRELOAD): internal interfaces, one section per unit.
 * Calls flow one way (tests/unit/test_shim_layers.py checks it on the objects):
 *
 *   verbs_wrap.c -> registry.c <- resurrect.c <- control.c
 *   (all of them may call down to alloc.c and real.c)
 *
 * alloc.c      the shim's allocator: counts live blocks, and fails on purpose
 *              when LEVELLER_SHIM_FAIL_ALLOC asks (tests).
 * real.c       libc's real dlsym/dlvsym; table of the real libibverbs entry points.
 * registry.c   owns every tracked QP, CQ and context: per-QP bookkeeping (the
 *              attributes the application set, posted sends and receives,
 *              completions owed to the application), and the primitive steps
 *              a rebuild is made of. struct shim_qp is known only there.
 * verbs_wrap.c the exported ibv_* wrappers, the context->ops wrappers and the
 *              dlsym/dlvsym interposer: thin entry points into the registry.
 * resurrect.c  change a QP's traffic class: hold, drain, ERR, RESET, INIT,
 *              RTR (new grh.traffic_class, PSNs continued), RTS, release.
 * control.c    unix-socket control channel (line-delimited JSON, json.c parses
 *              it) and the agent's lease; registers itself with the registry
 *              to start with the first QP.
 */
#ifndef LEVELLER_SHIM_H
#define LEVELLER_SHIM_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SHIM_EXPORT __attribute__((visibility("default")))

/* ---- alloc.c --------------------------------------------------------------
 * Every allocation of the shim goes through these; site names the caller so
 * a test can make that one fail (LEVELLER_SHIM_FAIL_ALLOC=site:N[,site:N]:
 * every allocation at site after its first N fails). */
void *shim_malloc(size_t size, const char *site);
void *shim_calloc(size_t n, size_t size, const char *site);
void *shim_realloc(void *p, size_t size, const char *site);
void shim_free(void *p);
/* Blocks allocated and not freed; allocations refused on purpose. */
long shim_alloc_live(void);
long shim_alloc_failed(void);

/* ---- real.c -------------------------------------------------------------- */

/* Real libibverbs entry points (IBVERBS_1.1 ABI). */
struct shim_real {
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
	int (*destroy_cq)(struct ibv_cq *);
	int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
};
extern struct shim_real shim_real;

/* Resolve the real entry points through handle (RTLD_NEXT for the linked
 * path); a function of this library is never taken as the real one. */
void shim_resolve_real(void *handle);
void *shim_real_dlsym(void *handle, const char *name);
void *shim_real_dlvsym(void *handle, const char *name, const char *version);

/* ---- registry.c: entry points for the wrappers ---------------------------- */

/* The three context ops the shim wraps. */
struct shim_ops {
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
};

/* Called (once per process, after fork again) when the first QP is tracked. */
void shim_reg_on_first_qp(void (*hook)(void));
/* Track an RC QP the provider created: keeps ctx's original ops and installs
 * wrappers in their place (once per context). 0, or -ENOMEM: not tracked. */
int shim_reg_qp_add(struct ibv_qp *qp, const struct ibv_qp_init_attr *ia, const struct shim_ops *wrappers);
/* The application's modify (waits while held; applies the class set ahead at RTR). */
int shim_reg_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
/* Forget a QP (waits while held) / a CQ; the provider's destroy is the caller's. */
void shim_reg_qp_remove(struct ibv_qp *qp);
void shim_reg_cq_remove(struct ibv_cq *cq);
/* The wrapped context ops. */
int shim_reg_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int shim_reg_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int shim_reg_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);

/* ---- registry.c: QPs for resurrect.c and control.c ------------------------ */

struct shim_qp; /* opaque outside registry.c */

const char *shim_state_name(int state);
const char *shim_job(void);
/* agentreg.c: register the job with the host agent's socket (once per process; errors on stderr) */
void shim_agent_register(void);
int shim_job_tc(void);
void shim_set_job_tc(int tc);

/* Live QPs by QP number (caller frees with shim_free); NULL when out of
 * memory. QP records are never freed, so the pointers stay valid. */
struct shim_qp **shim_qps_snapshot(int *n);
struct shim_qp *shim_qp_by_num(uint32_t qpn);

/* Endpoint of a connection as learnt at the RTR transition. */
struct shim_endpoint {
	uint32_t qpn;
	uint8_t port;
	uint8_t sgid_index;
	uint16_t lid;
	union ibv_gid gid;
};

/* A consistent copy of what a QP is, taken under its lock. */
struct shim_qp_info {
	uint32_t qpn;
	int state, connected, broken, dead;
	int tc;		/* current grh.traffic_class; -1 = no GRH */
	int desired_tc; /* applied at the next RTR; -1 = none */
	int app_tc;	/* the application's class at its RTR; -1 = none */
	struct shim_endpoint local, remote;
	uint64_t resurrections, failures;
	double last_pause_us, last_drain_us;
	char last_error[256];
};
void shim_qp_info(struct shim_qp *q, struct shim_qp_info *out);
void shim_qp_set_desired(struct shim_qp *q, int tc);

/* Start a change to tc: SHIM_HOLD_HELD (posts and modifies now wait),
 * SHIM_HOLD_DEFERRED (not connected: applied at its RTR), SHIM_HOLD_SAME
 * (already at tc) or SHIM_HOLD_REFUSED (why says why). */
enum { SHIM_HOLD_HELD, SHIM_HOLD_DEFERRED, SHIM_HOLD_SAME, SHIM_HOLD_REFUSED };
int shim_qp_hold(struct shim_qp *q, int tc, int *old_tc, char *why, size_t n);
void shim_qp_release(struct shim_qp *q);

/* While held. Sends outstanding: 1 all completed, 0 not yet (a signaled
 * fence is posted once if the last sends are unsignaled), -EIO an error
 * completion was seen, -ENOMEM the fence could not be recorded. */
int shim_qp_sends_left(struct shim_qp *q, int *fenced, uint64_t *left);
/* Poll the QP's CQs into the completions owed to the application: >0 some,
 * 0 none, -ENOMEM no room to keep them (nothing polled). */
int shim_qp_sweep(struct shim_qp *q);
/* Before ERR: room for every completion the rebuild can poll (a RESET drops
 * what is left in the CQ, so nothing may stay unpolled for want of room).
 * 0, or -ENOMEM. */
int shim_qp_reserve_completions(struct shim_qp *q);
/* Our ERR step flushes the outstanding receives: count them, hide them. */
void shim_qp_flush_begin(struct shim_qp *q);
int shim_qp_flush_done(struct shim_qp *q);
/* Rebuild steps (0 or the provider's errno); the recorded attributes are used. */
int shim_qp_to_err(struct shim_qp *q);
int shim_qp_to_reset(struct shim_qp *q);
int shim_qp_to_init(struct shim_qp *q);
int shim_qp_repost_recvs(struct shim_qp *q);
int shim_qp_to_rtr(struct shim_qp *q, int tc, uint32_t rq_psn);
int shim_qp_to_rts(struct shim_qp *q, uint32_t sq_psn);
int shim_qp_query_psns(struct shim_qp *q, uint32_t *sq_psn, uint32_t *rq_psn);
/* The rebuild at tc succeeded: remember the class and PSNs. */
void shim_qp_commit(struct shim_qp *q, int tc, uint32_t sq_psn, uint32_t rq_psn);
/* Outcome of a change, for `list`: error NULL = success (counts a resurrection). */
void shim_qp_outcome(struct shim_qp *q, const char *error, double pause_us, double drain_us);
void shim_qp_mark_broken(struct shim_qp *q);

/* ---- resurrect.c ---------------------------------------------------------- */

struct shim_tc_change {
	int old_tc, deferred;
	double pause_us, drain_us;
	char error[256]; /* set when it failed */
};
/* Change q's traffic class: 0, or -1 with out->error (also kept for `list`). */
int shim_set_tc(struct shim_qp *q, int tc, struct shim_tc_change *out);

#endif
