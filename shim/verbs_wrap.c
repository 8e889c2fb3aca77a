/*
 * The shim's entry points, all thin: the exported libibverbs wrappers
 * (ibv_create_qp, ibv_modify_qp, ibv_destroy_qp, ibv_destroy_cq), the
 * context->ops wrappers for the inline ibv_post_send / ibv_post_recv /
 * ibv_poll_cq, and the dlsym/dlvsym interposer.
 *
 * NCCL does not link libibverbs: it dlopens it and resolves every entry point
 * with dlvsym(handle, name, "IBVERBS_1.1"), which a preloaded definition of
 * ibv_create_qp never sees. So the shim also interposes dlsym and dlvsym:
 * for the libibverbs names it wraps, it resolves the real function through the
 * caller's handle (remembering it as the real one) and returns its wrapper.
 * Every other lookup is a tail call to libc's function, so glibc still sees
 * the application's return address (RTLD_NEXT keeps its meaning).
 *
 * The bookkeeping behind every wrapper is the registry's (registry.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "shim.h"

static int w_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return shim_reg_post_send(qp, wr, bad);
}

static int w_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return shim_reg_post_recv(qp, wr, bad);
}

static int w_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return shim_reg_poll_cq(cq, n, wc); }

static const struct shim_ops g_wrappers = {w_post_send, w_post_recv, w_poll_cq};

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
	if (qp && ia->qp_type == IBV_QPT_RC) /* only RC QPs are tracked and resurrected */
		shim_reg_qp_add(qp, ia, &g_wrappers); /* out of memory: the QP works, untracked */
	return qp;
}

int shim_wrap_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	ensure_real();
	return shim_reg_modify_qp(qp, attr, mask);
}

int shim_wrap_destroy_qp(struct ibv_qp *qp)
{
	ensure_real();
	shim_reg_qp_remove(qp);
	return shim_real.destroy_qp(qp);
}

int shim_wrap_destroy_cq(struct ibv_cq *cq)
{
	ensure_real();
	shim_reg_cq_remove(cq);
	return shim_real.destroy_cq ? shim_real.destroy_cq(cq) : ENOSYS;
}

/* The exported names are aliases (same address) of the wrappers, so a lookup
 * that lands on them is recognised by the dlsym interposer. */
SHIM_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)
	__attribute__((alias("shim_wrap_create_qp")));
SHIM_EXPORT int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int) __attribute__((alias("shim_wrap_modify_qp")));
SHIM_EXPORT int ibv_destroy_qp(struct ibv_qp *) __attribute__((alias("shim_wrap_destroy_qp")));
SHIM_EXPORT int ibv_destroy_cq(struct ibv_cq *) __attribute__((alias("shim_wrap_destroy_cq")));

/* ---- dlsym / dlvsym interposer ------------------------------------------ */

static void *wrapper_for(const char *name)
{
	if (strcmp(name, "ibv_create_qp") == 0)
		return (void *)shim_wrap_create_qp;
	if (strcmp(name, "ibv_modify_qp") == 0)
		return (void *)shim_wrap_modify_qp;
	if (strcmp(name, "ibv_destroy_qp") == 0)
		return (void *)shim_wrap_destroy_qp;
	if (strcmp(name, "ibv_destroy_cq") == 0)
		return (void *)shim_wrap_destroy_cq;
	return NULL;
}

/* A wrapped libibverbs name: resolve through the caller's handle, keep the
 * real functions of that library, hand out the wrapper. */
static __attribute__((noinline)) void *intercept(void *handle, const char *name, const char *version, void *w)
{
	void *p = version ? shim_real_dlvsym(handle, name, version) : shim_real_dlsym(handle, name);
	if (!p || p == w)
		return p;
	shim_resolve_real(handle);
	return w;
}

static int is_v11(const char *version)
{
	return version == NULL || strcmp(version, "IBVERBS_1.1") == 0;
}

SHIM_EXPORT void *dlsym(void *handle, const char *name)
{
	void *w;
	if (name[0] == 'i' && name[1] == 'b' && name[2] == 'v' && (w = wrapper_for(name)))
		return intercept(handle, name, NULL, w);
	return shim_real_dlsym(handle, name); /* tail call: caller's address kept */
}

SHIM_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
	void *w;
	if (name[0] == 'i' && name[1] == 'b' && name[2] == 'v' && is_v11(version) && (w = wrapper_for(name)))
		return intercept(handle, name, version, w);
	return shim_real_dlvsym(handle, name, version); /* tail call */
}
