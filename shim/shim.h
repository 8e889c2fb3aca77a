/*
 * LEVELLER RDMA shim (LD_PRELOAD): internal interfaces.
 *
 * real.c       find libc's real dlsym/dlvsym; interpose dlsym/dlvsym so that
 *              libibverbs lookups (NCCL: dlopen + dlvsym "IBVERBS_1.1") return
 *              our wrappers; table of the real libibverbs entry points.
 * verbs_wrap.c exported ibv_create_qp/ibv_modify_qp/ibv_destroy_qp/
 *              ibv_destroy_cq wrappers, context->ops wrappers (post_send,
 *              post_recv, poll_cq), QP/CQ registry and per-QP bookkeeping.
 * resurrect.c  change a QP's traffic class: hold, drain, ERR, RESET, INIT,
 *              RTR (new grh.traffic_class, PSNs continued), RTS, release.
 * control.c    unix-socket control channel (line-delimited JSON) and the
 *              agent's lease: when it runs out, every QP goes back to the
 *              class the application gave it (a timer thread of its own).
 */
#ifndef LEVELLER_SHIM_H
#define LEVELLER_SHIM_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#define SHIM_EXPORT __attribute__((visibility("default")))

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

/* Resolve the real entry points through handle (RTLD_NEXT for the linked path). */
void shim_resolve_real(void *handle);
void *shim_real_dlvsym(void *handle, const char *name, const char *version);

/* Original context ops, kept once per context when the ops are wrapped. */
struct shim_ctx {
	struct ibv_context *ctx;
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	struct shim_ctx *next;
};

/* Completions the shim polled (while draining) that the application is owed. */
struct shim_cq {
	struct ibv_cq *cq;
	struct shim_ctx *ctx;
	pthread_mutex_t m;
	struct ibv_wc *buf;
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

/* Endpoint of a connection as learnt at the RTR transition. */
struct shim_endpoint {
	uint32_t qpn;
	uint8_t port;
	uint8_t sgid_index;
	uint16_t lid;
	union ibv_gid gid;
};

struct shim_qp {
	struct ibv_qp *qp;
	uint32_t qpn;
	struct shim_ctx *ctx;
	struct shim_cq *scq, *rcq;
	int sig_all;

	pthread_mutex_t m;
	pthread_cond_t cv;
	int held;	/* posts and modifies wait while set */
	int resurrecting; /* completions flushed by our ERR step are ours */
	int dead;	/* destroyed by the application */
	int broken;	/* an error completion was seen: QP is in ERR */

	/* what the application brought the QP up with (latest values) */
	int state;
	struct ibv_qp_attr attr;
	int init_mask, rtr_mask, rts_mask;
	struct shim_endpoint local, remote;
	int connected; /* RTR seen */
	int desired_tc; /* applied at the next RTR; -1 = none */
	int app_tc;	/* class the application asked for at its RTR; -1 = none (no GRH) */

	/* send queue: sequence numbers of posted WRs and signaled ones pending */
	uint64_t posted_seq, completed_seq;
	struct shim_sig *sig;
	int sig_head, sig_len, sig_cap;
	/* receive queue: posted, not yet completed (re-posted after RESET) */
	struct shim_recv *rq;
	int rq_head, rq_len, rq_cap;
	int flushed; /* receives flushed by our ERR step */

	/* statistics */
	uint64_t resurrections, failures;
	double last_pause_us, last_drain_us;
	char last_error[256];

	struct shim_qp *next_ptr, *next_num;
};

/* registry (verbs_wrap.c) */
void shim_registry_lock(void);
void shim_registry_unlock(void);
/* Snapshot of live QPs (caller frees the array); QPs are never freed. */
struct shim_qp **shim_qps_snapshot(int *n);
struct shim_qp *shim_qp_by_num(uint32_t qpn);
const char *shim_job(void);
int shim_job_tc(void);
void shim_set_job_tc(int tc);

/* Poll cq into its owed-completions buffer (drain); returns count or -errno. */
int shim_cq_sweep(struct shim_cq *c);
void shim_record_qp_attr(struct shim_qp *q, const struct ibv_qp_attr *a, int mask);

/* resurrect.c: change q's traffic class; 0 or -1 with q->last_error set.
 * On success *pause_us / *drain_us are filled. */
int shim_set_tc(struct shim_qp *q, int tc, int *old_tc, int *deferred, double *pause_us, double *drain_us);
int shim_qp_tc(const struct shim_qp *q);

/* control.c */
void shim_control_start(void);

#endif
