/*
 * The real functions under the shim: libc's dlsym/dlvsym (the shim
 * interposes both, see verbs_wrap.c) and the libibverbs entry points it wraps.
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

void *shim_real_dlsym(void *handle, const char *name)
{
	init_real_dl();
	return real_dlsym ? real_dlsym(handle, name) : NULL; /* tail call: caller's address kept */
}

void *shim_real_dlvsym(void *handle, const char *name, const char *version)
{
	init_real_dl();
	return real_dlvsym ? real_dlvsym(handle, name, version) : NULL; /* tail call */
}

/* Is p a function of this library (one of its wrappers, found again through
 * RTLD_NEXT or a global handle)? Then it is not the real one. */
static int ours(void *p)
{
	Dl_info a, b;
	return dladdr(p, &a) && dladdr((void *)ours, &b) && a.dli_fbase == b.dli_fbase;
}

static void set_if_unset(void **slot, void *handle, const char *name)
{
	if (*slot)
		return;
	void *p = shim_real_dlvsym(handle, name, "IBVERBS_1.1");
	if (p && !ours(p))
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
