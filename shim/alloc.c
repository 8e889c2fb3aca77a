/*
 * The shim's allocator: malloc/calloc/realloc that count the blocks they hand
 * out (`list` shows alloc_live, so a test sees a leak) and that fail on
 * purpose where LEVELLER_SHIM_FAIL_ALLOC says, so that every out-of-memory
 * path of the shim can be driven by a test:
 *
 *   LEVELLER_SHIM_FAIL_ALLOC=sig:1,cqbuf:0   the 2nd and later allocations
 *                                            at site "sig" fail, every one at "cqbuf"
 *
 * Sites: ctx, cq, qp, cqbuf, sig, rq, sge, snapshot, request, out.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define MAX_RULES 8

struct rule {
	char site[16];
	long allow; /* successes left before failing */
};

static struct rule g_rules[MAX_RULES];
static int g_nrules = -1; /* -1: environment not read yet */
static pthread_mutex_t g_m = PTHREAD_MUTEX_INITIALIZER;
static long g_live, g_failed;

static void read_rules(void)
{
	g_nrules = 0;
	const char *env = getenv("LEVELLER_SHIM_FAIL_ALLOC");
	while (env && *env && g_nrules < MAX_RULES) {
		const char *colon = strchr(env, ':'), *comma = strchr(env, ',');
		if (!colon || (comma && comma < colon))
			break;
		struct rule *r = &g_rules[g_nrules];
		size_t len = (size_t)(colon - env);
		if (len == 0 || len >= sizeof(r->site))
			break;
		memcpy(r->site, env, len);
		r->site[len] = 0;
		r->allow = strtol(colon + 1, NULL, 10);
		g_nrules++;
		env = comma ? comma + 1 : NULL;
	}
}

/* Should this allocation at site fail on purpose? */
static int refuse(const char *site)
{
	int no = 0;
	pthread_mutex_lock(&g_m);
	if (g_nrules < 0)
		read_rules();
	for (int i = 0; i < g_nrules; i++)
		if (strcmp(g_rules[i].site, site) == 0) {
			if (g_rules[i].allow > 0)
				g_rules[i].allow--;
			else
				no = 1;
		}
	if (no)
		g_failed++;
	pthread_mutex_unlock(&g_m);
	return no;
}

static void count(long d)
{
	__atomic_add_fetch(&g_live, d, __ATOMIC_RELAXED);
}

void *shim_malloc(size_t size, const char *site)
{
	void *p = refuse(site) ? NULL : malloc(size);
	if (p)
		count(1);
	return p;
}

void *shim_calloc(size_t n, size_t size, const char *site)
{
	void *p = refuse(site) ? NULL : calloc(n, size);
	if (p)
		count(1);
	return p;
}

/* Like realloc: on failure p is untouched and still owned by the caller. */
void *shim_realloc(void *p, size_t size, const char *site)
{
	if (refuse(site))
		return NULL;
	void *np = realloc(p, size);
	if (np && !p)
		count(1);
	return np;
}

void shim_free(void *p)
{
	if (p) {
		count(-1);
		free(p);
	}
}

long shim_alloc_live(void) { return __atomic_load_n(&g_live, __ATOMIC_RELAXED); }

long shim_alloc_failed(void)
{
	pthread_mutex_lock(&g_m);
	long n = g_failed;
	pthread_mutex_unlock(&g_m);
	return n;
}
