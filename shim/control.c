/*
 * Local control channel: a unix stream socket served by one thread, started
 * when the process creates its first RC QP. Line-delimited JSON:
 *
 *   {"op": "list"}
 *     -> {"ok": true, "pid": P, "job": "J", "job_tc": T|null, "qps": [{"qp": N, "state": "RTS",
 *         "tc": T|null, "local": {"qpn", "port", "gid"}, "remote": {"qpn", "lid", "gid"},
 *         "resurrections": n, "failures": n, "last_pause_us": x, "last_error": s|null}]}
 *   {"op": "set_tc", "qp": N, "tc": T [, "lease_ms": L]}      one QP
 *   {"op": "set_tc", "job": "J", "tc": T [, "lease_ms": L]}   every QP of job J (and future ones)
 *     -> {"ok": bool, "job_match": bool, "results": [{"qp": N, "ok": bool, "old_tc": a, "tc": b,
 *         "changed": bool, "deferred": bool, "pause_us": x, "drain_us": y, "error": s}]}
 *   {"op": "lease", "ms": L}                 renew the lease (L = 0: end it now, synchronously)
 *     -> {"ok": true, "was_armed": bool}     false: it had run out (the QPs went back already)
 *   anything else -> {"ok": false, "error": "..."}
 *
 * Lines are parsed as JSON (json.c): a duplicate key, a field the op does not
 * know, a number that is not an integer in range, or bad JSON is refused with
 * the reason, and nothing is changed.
 *
 * The lease: a set_tc with "lease_ms" (or a "lease" op) arms a deadline L ms
 * ahead on CLOCK_MONOTONIC. A thread of the shim's own watches it; when it
 * passes without renewal, every QP is rebuilt at the class the application
 * gave it and the job class is dropped, so the agent's levels end even if the
 * agent was killed. Without any lease (manual set_tc), classes stay.
 *
 * Socket path: $LEVELLER_SHIM_SOCK, else leveller-shim-<pid>.sock in
 * /run/leveller (if writable), $XDG_RUNTIME_DIR, or /tmp. The job name comes
 * from $LEVELLER_JOB.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "shim.h"

#define LEASE_MAX_MS 86400000L
#define REQUEST_MAX 4096

static pthread_mutex_t g_start = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_started_pid;
static char g_path[108];

/* One traffic-class change at a time: the control thread and the lease thread. */
static pthread_mutex_t g_tc = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_lease_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_lease_cv;
static int g_lease_armed;
static uint64_t g_lease_deadline_ns; /* CLOCK_MONOTONIC */
static uint64_t g_lease_expiries;

/* A reply being built; after an allocation failure it stays failed (oom)
 * and the client gets a fixed error line instead. */
struct out {
	char *s;
	size_t len, cap;
	int oom;
};

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	while (!o->oom) {
		va_start(ap, fmt);
		int n = o->s ? vsnprintf(o->s + o->len, o->cap - o->len, fmt, ap) : -1;
		va_end(ap);
		if (n >= 0 && (size_t)n < o->cap - o->len) {
			o->len += n;
			return;
		}
		size_t ncap = o->cap * 2 + (n > 0 ? (size_t)n : 0) + 256;
		char *ns = shim_realloc(o->s, ncap, "out");
		if (!ns) {
			o->oom = 1;
			return;
		}
		o->s = ns;
		o->cap = ncap;
	}
}

static void put_str(struct out *o, const char *s)
{
	put(o, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			put(o, "\\%c", c);
		else if (c < 0x20)
			put(o, "\\u%04x", c);
		else
			put(o, "%c", c);
	}
	put(o, "\"");
}

static void put_gid(struct out *o, const union ibv_gid *g)
{
	char buf[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, g->raw, buf, sizeof(buf));
	put_str(o, buf);
}

static void put_tc(struct out *o, int tc)
{
	if (tc < 0)
		put(o, "null");
	else
		put(o, "%d", tc);
}

/* ---- request fields (json.c parses the line) -------------------------------- */

/* 1 an integer (into *v), 0 absent, -1 present but not an integer. */
static int field_int(const struct json_object *req, const char *key, long *v)
{
	const struct json_field *f = json_get(req, key);
	if (!f)
		return 0;
	if (f->type != JSON_INT)
		return -1;
	*v = (long)f->i;
	return 1;
}

/* 1 a string (*v points into req), 0 absent, -1 present but not a string. */
static int field_str(const struct json_object *req, const char *key, const char **v)
{
	const struct json_field *f = json_get(req, key);
	if (!f)
		return 0;
	if (f->type != JSON_STRING)
		return -1;
	*v = f->s;
	return 1;
}

/* ", got X" for an error message about field key. */
static const char *got(const struct json_object *req, const char *key, char *buf, size_t n)
{
	const struct json_field *f = json_get(req, key);
	if (!f)
		snprintf(buf, n, ", it is missing");
	else if (f->type == JSON_INT)
		snprintf(buf, n, ", got %lld", f->i);
	else
		snprintf(buf, n, ", got a %s", json_type_name(f->type));
	return buf;
}

/* Refuse a field the op does not know (a typo must not pass as "absent").
 * allowed: NULL-terminated. 0, or -1 with the error reply written. */
static int known_fields(struct out *o, const struct json_object *req, const char *op, const char *const *allowed)
{
	for (int i = 0; i < req->n; i++) {
		int ok = 0;
		for (const char *const *a = allowed; *a && !ok; a++)
			ok = strcmp(req->f[i].key, *a) == 0;
		if (ok)
			continue;
		char msg[200];
		size_t len = (size_t)snprintf(msg, sizeof(msg), "unknown field '%.40s' for op '%s'; allowed:", req->f[i].key, op);
		for (const char *const *a = allowed; *a && len < sizeof(msg); a++)
			len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s %s", a == allowed ? "" : ",", *a);
		put(o, "{\"ok\": false, \"error\": ");
		put_str(o, msg);
		put(o, "}");
		return -1;
	}
	return 0;
}

/* ---- the agent's lease ---------------------------------------------------- */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Arm (or renew) the lease ms from now; returns whether it was still running. */
static int lease_arm(long ms)
{
	pthread_mutex_lock(&g_lease_m);
	uint64_t now = mono_ns();
	int was = g_lease_armed && now < g_lease_deadline_ns;
	g_lease_armed = 1;
	g_lease_deadline_ns = now + (uint64_t)ms * 1000000ull;
	pthread_cond_broadcast(&g_lease_cv);
	pthread_mutex_unlock(&g_lease_m);
	return was;
}

/* The lease ended: every QP back to the application's class, no job class. Caller holds g_tc. */
static void lease_revert(void)
{
	int n;
	struct shim_qp **qs = shim_qps_snapshot(&n);
	shim_set_job_tc(-1);
	for (int i = 0; i < n; i++) {
		struct shim_qp *q = qs[i];
		struct shim_qp_info info;
		shim_qp_set_desired(q, -1);
		shim_qp_info(q, &info);
		if (info.connected && info.app_tc >= 0 && info.tc != info.app_tc) {
			struct shim_tc_change change;
			shim_set_tc(q, info.app_tc, &change); /* a failure is kept for `list` */
			shim_qp_set_desired(q, -1);
		}
	}
	shim_free(qs);
}

static void *lease_watch(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_lease_m);
	for (;;) {
		if (!g_lease_armed) {
			pthread_cond_wait(&g_lease_cv, &g_lease_m);
			continue;
		}
		uint64_t deadline = g_lease_deadline_ns;
		if (mono_ns() < deadline) {
			struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
			pthread_cond_timedwait(&g_lease_cv, &g_lease_m, &ts);
			continue;
		}
		pthread_mutex_unlock(&g_lease_m);
		pthread_mutex_lock(&g_tc);
		pthread_mutex_lock(&g_lease_m);
		/* renewed while we waited for g_tc: nothing ran out */
		int expired = g_lease_armed && mono_ns() >= g_lease_deadline_ns;
		if (expired) {
			g_lease_armed = 0;
			g_lease_expiries++;
		}
		pthread_mutex_unlock(&g_lease_m);
		if (expired)
			lease_revert();
		pthread_mutex_unlock(&g_tc);
		pthread_mutex_lock(&g_lease_m);
	}
	return NULL;
}

/* Milliseconds left (-1: no lease running). */
static long lease_left_ms(uint64_t *expiries)
{
	pthread_mutex_lock(&g_lease_m);
	uint64_t now = mono_ns();
	long left = g_lease_armed && now < g_lease_deadline_ns ? (long)((g_lease_deadline_ns - now) / 1000000ull) : -1;
	*expiries = g_lease_expiries;
	pthread_mutex_unlock(&g_lease_m);
	return left;
}

static void do_lease(struct out *o, const struct json_object *req)
{
	static const char *const allowed[] = {"op", "ms", NULL};
	long ms;
	char g[64];
	if (known_fields(o, req, "lease", allowed))
		return;
	if (field_int(req, "ms", &ms) != 1 || ms < 0 || ms > LEASE_MAX_MS) {
		put(o, "{\"ok\": false, \"error\": \"field 'ms' must be an integer 0..%ld (0 ends the lease now)%s\"}",
		    LEASE_MAX_MS, got(req, "ms", g, sizeof(g)));
		return;
	}
	pthread_mutex_lock(&g_tc);
	int was;
	if (ms > 0) {
		was = lease_arm(ms);
	} else {
		pthread_mutex_lock(&g_lease_m);
		was = g_lease_armed && mono_ns() < g_lease_deadline_ns;
		g_lease_armed = 0;
		pthread_mutex_unlock(&g_lease_m);
		lease_revert();
	}
	pthread_mutex_unlock(&g_tc);
	put(o, "{\"ok\": true, \"was_armed\": %s}", was ? "true" : "false");
}

static void put_qp(struct out *o, struct shim_qp *q)
{
	struct shim_qp_info in;
	shim_qp_info(q, &in);
	put(o, "{\"qp\": %u, \"state\": \"%s\", \"tc\": ", in.qpn, shim_state_name(in.state));
	put_tc(o, in.connected ? in.tc : -1);
	put(o, ", \"desired_tc\": ");
	put_tc(o, in.desired_tc);
	put(o, ", \"app_tc\": ");
	put_tc(o, in.app_tc);
	put(o, ", \"connected\": %s", in.connected ? "true" : "false");
	if (in.connected) {
		put(o, ", \"local\": {\"qpn\": %u, \"port\": %u, \"gid\": ", in.local.qpn, in.local.port);
		put_gid(o, &in.local.gid);
		put(o, "}, \"remote\": {\"qpn\": %u, \"lid\": %u, \"gid\": ", in.remote.qpn, in.remote.lid);
		put_gid(o, &in.remote.gid);
		put(o, "}");
	} else {
		put(o, ", \"local\": {\"qpn\": %u}, \"remote\": null", in.qpn);
	}
	put(o, ", \"resurrections\": %lu, \"failures\": %lu, \"last_pause_us\": %.1f, \"last_error\": ",
	    (unsigned long)in.resurrections, (unsigned long)in.failures, in.last_pause_us);
	if (in.last_error[0])
		put_str(o, in.last_error);
	else
		put(o, "null");
	put(o, "}");
}

static void do_list(struct out *o)
{
	int n;
	struct shim_qp **qs = shim_qps_snapshot(&n);
	if (!qs) {
		put(o, "{\"ok\": false, \"error\": \"out of memory listing the QPs\"}");
		return;
	}
	put(o, "{\"ok\": true, \"pid\": %d, \"job\": ", (int)getpid());
	put_str(o, shim_job());
	put(o, ", \"job_tc\": ");
	put_tc(o, shim_job_tc());
	uint64_t expiries;
	long left = lease_left_ms(&expiries);
	put(o, ", \"lease_ms_left\": ");
	if (left < 0)
		put(o, "null");
	else
		put(o, "%ld", left);
	put(o, ", \"lease_expiries\": %lu, \"alloc_live\": %ld, \"alloc_failed\": %ld", (unsigned long)expiries,
	    shim_alloc_live(), shim_alloc_failed());
	put(o, ", \"qps\": [");
	for (int i = 0; i < n; i++) {
		if (i)
			put(o, ", ");
		put_qp(o, qs[i]);
	}
	put(o, "]}");
	shim_free(qs);
}

static int set_one(struct out *o, struct shim_qp *q, int tc)
{
	struct shim_tc_change c;
	int rc = shim_set_tc(q, tc, &c);
	struct shim_qp_info in;
	shim_qp_info(q, &in);
	put(o, "{\"qp\": %u, \"ok\": %s, \"old_tc\": ", in.qpn, rc ? "false" : "true");
	put_tc(o, c.old_tc);
	put(o, ", \"tc\": ");
	put_tc(o, c.deferred ? tc : rc ? in.tc : tc);
	put(o, ", \"changed\": %s, \"deferred\": %s, \"pause_us\": %.1f, \"drain_us\": %.1f",
	    (!rc && !c.deferred && c.old_tc != tc) ? "true" : "false", c.deferred ? "true" : "false", c.pause_us,
	    c.drain_us);
	if (rc) {
		put(o, ", \"error\": ");
		put_str(o, c.error);
	}
	put(o, "}");
	return rc;
}

static void set_tc_locked(struct out *o, long tc, long qpn, int has_qp, const char *job);

static void put_results(struct out *o, int bad, struct out *r)
{
	if (r->oom)
		o->oom = 1;
	else
		put(o, "{\"ok\": %s, \"job_match\": true, \"results\": [%.*s]}", bad ? "false" : "true",
		    (int)r->len, r->s ? r->s : "");
	shim_free(r->s);
}

static void do_set_tc(struct out *o, const struct json_object *req)
{
	static const char *const allowed[] = {"op", "tc", "qp", "job", "lease_ms", NULL};
	long tc = -1, qpn = -1, lease_ms = 0;
	const char *job = "";
	char g[64];
	if (known_fields(o, req, "set_tc", allowed))
		return;
	int has_tc = field_int(req, "tc", &tc);
	int has_qp = field_int(req, "qp", &qpn);
	int has_job = field_str(req, "job", &job);
	int has_lease = field_int(req, "lease_ms", &lease_ms);
	if (has_tc != 1 || tc < 0 || tc > 255) {
		put(o, "{\"ok\": false, \"error\": \"field 'tc' must be an integer traffic class 0..255%s\"}",
		    got(req, "tc", g, sizeof(g)));
		return;
	}
	if (has_qp < 0 || has_job < 0 || (has_qp == 1) == (has_job == 1)) {
		put(o, "{\"ok\": false, \"error\": \"give exactly one of 'qp' (integer QP number) or 'job' (string)\"}");
		return;
	}
	if (has_lease < 0 || (has_lease == 1 && (lease_ms < 1 || lease_ms > LEASE_MAX_MS))) {
		put(o, "{\"ok\": false, \"error\": \"field 'lease_ms' must be an integer 1..%ld%s\"}", LEASE_MAX_MS,
		    got(req, "lease_ms", g, sizeof(g)));
		return;
	}
	pthread_mutex_lock(&g_tc);
	if (has_lease == 1)
		lease_arm(lease_ms); /* before the change: the deadline counts from the request */
	set_tc_locked(o, tc, qpn, has_qp, job);
	pthread_mutex_unlock(&g_tc);
}

static void set_tc_locked(struct out *o, long tc, long qpn, int has_qp, const char *job)
{
	if (has_qp == 1) {
		struct shim_qp *q = qpn >= 0 && qpn <= 0xffffff ? shim_qp_by_num((uint32_t)qpn) : NULL;
		if (!q) {
			put(o, "{\"ok\": false, \"error\": \"no QP %ld in process %d\"}", qpn, (int)getpid());
			return;
		}
		struct out r = {0};
		int rc = set_one(&r, q, (int)tc);
		put_results(o, rc, &r);
		return;
	}
	if (strcmp(job, shim_job()) != 0) {
		put(o, "{\"ok\": true, \"job_match\": false, \"results\": []}");
		return;
	}
	int n, bad = 0;
	struct shim_qp **qs = shim_qps_snapshot(&n);
	if (!qs) {
		put(o, "{\"ok\": false, \"error\": \"out of memory listing the QPs; nothing changed\"}");
		return;
	}
	shim_set_job_tc((int)tc);
	struct out r = {0};
	for (int i = 0; i < n; i++) {
		if (i)
			put(&r, ", ");
		bad |= set_one(&r, qs[i], (int)tc);
	}
	shim_free(qs);
	put_results(o, bad, &r);
}

/* Answer one request line (line NULL: the line was too long). */
static void handle(int fd, const char *line)
{
	static const char *const list_fields[] = {"op", NULL};
	struct out o = {0};
	struct json_object *req = shim_malloc(sizeof(*req), "request");
	char err[200];
	const char *op = NULL;
	if (!req) {
		o.oom = 1;
	} else if (!line) {
		put(&o, "{\"ok\": false, \"error\": \"request line longer than %d bytes\"}", REQUEST_MAX - 1);
	} else if (json_parse_object(line, req, err, sizeof(err))) {
		put(&o, "{\"ok\": false, \"error\": ");
		char msg[240];
		snprintf(msg, sizeof(msg), "bad JSON: %s", err);
		put_str(&o, msg);
		put(&o, "}");
	} else if (field_str(req, "op", &op) != 1) {
		put(&o, "{\"ok\": false, \"error\": \"field 'op' (string) is required: list, set_tc or lease\"}");
	} else if (strcmp(op, "list") == 0) {
		if (!known_fields(&o, req, "list", list_fields))
			do_list(&o);
	} else if (strcmp(op, "set_tc") == 0) {
		do_set_tc(&o, req);
	} else if (strcmp(op, "lease") == 0) {
		do_lease(&o, req);
	} else {
		char msg[96];
		snprintf(msg, sizeof(msg), "unknown op '%.40s'; allowed: list, set_tc, lease", op);
		put(&o, "{\"ok\": false, \"error\": ");
		put_str(&o, msg);
		put(&o, "}");
	}
	shim_free(req);
	put(&o, "\n");
	static const char oom[] = "{\"ok\": false, \"error\": \"out of memory in the shim building the reply\"}\n";
	const char *s = o.oom ? oom : o.s;
	size_t len = o.oom ? sizeof(oom) - 1 : o.len, off = 0;
	while (off < len) {
		ssize_t w = write(fd, s + off, len - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	shim_free(o.s);
}

static void *serve(void *arg)
{
	int ls = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		char buf[REQUEST_MAX];
		size_t len = 0;
		int skipping = 0; /* inside a line too long: dropped up to its newline */
		for (;;) {
			ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
			if (r <= 0)
				break;
			len += (size_t)r;
			buf[len] = 0;
			char *nl;
			while ((nl = memchr(buf, '\n', len))) {
				*nl = 0;
				if (!skipping)
					handle(fd, buf);
				skipping = 0;
				size_t used = (size_t)(nl - buf) + 1;
				memmove(buf, nl + 1, len - used);
				len -= used;
				buf[len] = 0;
			}
			if (len == sizeof(buf) - 1) { /* line too long: answer once, drop the rest of it */
				if (!skipping)
					handle(fd, NULL);
				skipping = 1;
				len = 0;
			}
		}
		close(fd);
	}
}

static void socket_path(char *out, size_t n)
{
	const char *env = getenv("LEVELLER_SHIM_SOCK");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		return;
	}
	const char *dir = "/tmp";
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (access("/run/leveller", W_OK) == 0)
		dir = "/run/leveller";
	else if (xdg && *xdg && access(xdg, W_OK) == 0)
		dir = xdg;
	snprintf(out, n, "%s/leveller-shim-%d.sock", dir, (int)getpid());
}

static void cleanup(void)
{
	if (g_started_pid == getpid() && g_path[0])
		unlink(g_path);
}

static void control_start(void)
{
	pthread_mutex_lock(&g_start);
	if (g_started_pid == getpid()) {
		pthread_mutex_unlock(&g_start);
		return;
	}
	g_started_pid = getpid(); /* also after fork: the child starts its own */
	socket_path(g_path, sizeof(g_path));
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_path);
	unlink(g_path);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 8)) {
		fprintf(stderr, "leveller-shim: control socket %s: %s (traffic class control disabled)\n", g_path,
			strerror(errno));
		if (ls >= 0)
			close(ls);
		g_path[0] = 0;
		pthread_mutex_unlock(&g_start);
		return;
	}
	static int registered;
	if (!registered++)
		atexit(cleanup);
	static int cv_ready;
	if (!cv_ready++) {
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&g_lease_cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_create(&th, &at, lease_watch, NULL);
	pthread_create(&th, &at, serve, (void *)(intptr_t)ls);
	pthread_attr_destroy(&at);
	pthread_mutex_unlock(&g_start);
}

/* Start with the process's first tracked QP (the registry calls back; the
 * registry does not know this unit). */
__attribute__((constructor)) static void control_register(void) { shim_reg_on_first_qp(control_start); }
