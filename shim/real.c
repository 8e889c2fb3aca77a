/*
 * Symbol plumbing.
 *
 * NCCL does not link libibverbs: it dlopens it and resolves every entry point
 * with dlvsym(handle, name, "IBVERBS_1.1"), which a preloaded definition of
 * ibv_create_qp never sees. So the shim also interposes dlsym and dlvsym:
 * for the libibverbs names it wraps, it resolves the real function through the
 * caller's handle (remembering it as the real one) and returns its wrapper.
 * Every other lookup is a tail call to libc's function, so glibc still sees
 * the application's return address (RTLD_NEXT keeps its meaning).
 *
 * libc's real dlsym/dlvsym cannot be found by name lookup (any lookup of
 * "dlsym" binds to this library first), so they are read from libc's dynamic
 * symbol table, found with dl_iterate_phdr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "shim.h"

struct shim_real shim_real;

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
static dlsym_fn real_dlsym;
static dlvsym_fn real_dlvsym;

struct elf_query {
	const char *name;
	void *addr;
};

static uintptr_t dyn_ptr(uintptr_t base, ElfW(Addr) p)
{
	/* glibc relocates most d_ptr entries in place; others are offsets */
	return p < base ? base + p : p;
}

static uint32_t gnu_hash_nsyms(const uint32_t *gh)
{
	uint32_t nbuckets = gh[0], symoffset = gh[1], bloom = gh[2];
	const uint32_t *buckets = gh + 4 + bloom * (sizeof(ElfW(Addr)) / 4);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t last = 0;
	for (uint32_t i = 0; i < nbuckets; i++)
		if (buckets[i] > last)
			last = buckets[i];
	if (last < symoffset)
		return symoffset;
	while (!(chain[last - symoffset] & 1))
		last++;
	return last + 1;
}

static int find_in_libc(struct dl_phdr_info *info, size_t size, void *data)
{
	struct elf_query *q = data;
	(void)size;
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	const char *base_name = slash ? slash + 1 : info->dlpi_name;
	if (!base_name || strncmp(base_name, "libc.so", 7) != 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		uintptr_t base = info->dlpi_addr;
		const ElfW(Dyn) *d = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
		const ElfW(Sym) *symtab = NULL;
		const char *strtab = NULL;
		uint32_t nsyms = 0;
		for (; d->d_tag != DT_NULL; d++) {
			if (d->d_tag == DT_SYMTAB)
				symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr);
			else if (d->d_tag == DT_STRTAB)
				strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr);
			else if (d->d_tag == DT_HASH)
				nsyms = ((const uint32_t *)dyn_ptr(base, d->d_un.d_ptr))[1];
			else if (d->d_tag == DT_GNU_HASH && !nsyms)
				nsyms = gnu_hash_nsyms((const uint32_t *)dyn_ptr(base, d->d_un.d_ptr));
		}
		if (!symtab || !strtab)
			return 0;
		for (uint32_t s = 0; s < nsyms; s++) {
			if (symtab[s].st_shndx == SHN_UNDEF || ELF64_ST_TYPE(symtab[s].st_info) != STT_FUNC)
				continue;
			if (strcmp(strtab + symtab[s].st_name, q->name) == 0) {
				q->addr = (void *)(base + symtab[s].st_value);
				return 1;
			}
		}
	}
	return 0;
}

static void *libc_symbol(const char *name)
{
	struct elf_query q = {name, NULL};
	dl_iterate_phdr(find_in_libc, &q);
	return q.addr;
}

static void init_real_dl(void)
{
	if (!real_dlsym)
		real_dlsym = (dlsym_fn)libc_symbol("dlsym");
	if (!real_dlvsym)
		real_dlvsym = (dlvsym_fn)libc_symbol("dlvsym");
}

void *shim_real_dlvsym(void *handle, const char *name, const char *version)
{
	init_real_dl();
	return real_dlvsym ? real_dlvsym(handle, name, version) : NULL;
}

/* Our wrappers, defined in verbs_wrap.c. */
struct ibv_qp *shim_wrap_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *);
int shim_wrap_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int);
int shim_wrap_destroy_qp(struct ibv_qp *);
int shim_wrap_destroy_cq(struct ibv_cq *);

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

static void set_if_unset(void **slot, void *handle, const char *name)
{
	if (*slot)
		return;
	void *p = shim_real_dlvsym(handle, name, "IBVERBS_1.1");
	if (p && p != wrapper_for(name))
		__atomic_store_n(slot, p, __ATOMIC_RELEASE);
}

void shim_resolve_real(void *handle)
{
	set_if_unset((void **)&shim_real.create_qp, handle, "ibv_create_qp");
	set_if_unset((void **)&shim_real.modify_qp, handle, "ibv_modify_qp");
	set_if_unset((void **)&shim_real.destroy_qp, handle, "ibv_destroy_qp");
	set_if_unset((void **)&shim_real.destroy_cq, handle, "ibv_destroy_cq");
	set_if_unset((void **)&shim_real.query_qp, handle, "ibv_query_qp");
	set_if_unset((void **)&shim_real.query_gid, handle, "ibv_query_gid");
}

/* A wrapped libibverbs name: resolve through the caller's handle, keep the
 * real functions of that library, hand out the wrapper. */
static __attribute__((noinline)) void *intercept(void *handle, const char *name, const char *version, void *w)
{
	init_real_dl();
	void *p = version ? real_dlvsym(handle, name, version) : real_dlsym(handle, name);
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
	init_real_dl();
	return real_dlsym(handle, name); /* tail call: caller's address kept */
}

SHIM_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
	void *w;
	if (name[0] == 'i' && name[1] == 'b' && name[2] == 'v' && is_v11(version) && (w = wrapper_for(name)))
		return intercept(handle, name, version, w);
	init_real_dl();
	return real_dlvsym(handle, name, version); /* tail call */
}
