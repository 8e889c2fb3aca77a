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
 * agent was killed. A lease is at most LEASE_MAX_MS (60 s, the agent's own bound:
 * it renews at every report). Without any lease (manual set_tc), classes stay.
 *
 * Socket path: $LEVELLER_SHIM_SOCK, else leveller-shim-<pid>.sock in
 * /run/leveller/shim, and only when that is a directory of root's that not
 * every user may write (the root agent trusts what it finds there; the agent
 * creates it). Never /tmp or $XDG_RUNTIME_DIR: any user could serve a socket of
 * that name there. The socket is mode 0600 whatever the umask (root, the agent,
 * connects anyway). The job name comes from $LEVELLER_JOB.
 *
 * The shim must never hurt its host application: every reply is sent with
 * MSG_NOSIGNAL (a client that closed early gets EPIPE, not the process a
 * SIGPIPE), and one client at a time is served under a deadline: a request
 * line must arrive within IO_TIMEOUT_MS of the connection (or of the previous
 * reply), and its reply must be taken within IO_TIMEOUT_MS, else the
 * connection is dropped, so a client dripping bytes cannot hold the channel.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "shim.h"

/* The longest lease: the agent's own bound (leveller.agent.shim_control.LEASE_MAX_MS). It renews at every
 * report (each --interval, about a second), so a minute is ample; a longer lease would keep a class on for
 * that long after the agent is gone (the socket is the job's user's: a one-day EF lease was possible). */
#define LEASE_MAX_MS 60000L
#define REQUEST_MAX 4096
#define IO_TIMEOUT_MS 2000
#define SOCK_DIR "/run/leveller/shim"

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

/* Wait until fd is ready for events (poll) or deadline (CLOCK_MONOTONIC ns) passes: 1 ready, 0 not. */
static int wait_io(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ns();
		if (now >= deadline)
			return 0;
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return 0;
	}
}

/* Send len bytes within IO_TIMEOUT_MS: 0, or -1 (the client is gone or does not read: drop it).
 * MSG_NOSIGNAL: a client that closed early must never kill the application with SIGPIPE. */
static int send_all(int fd, const char *s, size_t len)
{
	uint64_t deadline = mono_ns() + IO_TIMEOUT_MS * 1000000ull;
	size_t off = 0;
	while (off < len) {
		ssize_t w = send(fd, s + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_io(fd, POLLOUT, deadline))
			continue;
		return -1;
	}
	return 0;
}

/* Answer one request line (line NULL: the line was too long): 0, or -1 when the reply could not be
 * sent (drop the connection). */
static int handle(int fd, const char *line)
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
	int rc = o.oom ? send_all(fd, oom, sizeof(oom) - 1) : send_all(fd, o.s, o.len);
	shim_free(o.s);
	return rc;
}

/* One connection: request lines until the client closes, errs or misses the deadline. */
static void serve_one(int fd)
{
	char buf[REQUEST_MAX];
	size_t len = 0;
	int skipping = 0; /* inside a line too long: dropped up to its newline */
	uint64_t deadline = mono_ns() + IO_TIMEOUT_MS * 1000000ull; /* for the next request line */
	for (;;) {
		if (!wait_io(fd, POLLIN, deadline))
			return; /* a request that takes this long is a stuck or hostile client */
		ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (r <= 0)
			return;
		len += (size_t)r;
		buf[len] = 0;
		char *nl;
		while ((nl = memchr(buf, '\n', len))) {
			*nl = 0;
			if (!skipping && handle(fd, buf))
				return;
			if (!skipping)
				deadline = mono_ns() + IO_TIMEOUT_MS * 1000000ull;
			skipping = 0;
			size_t used = (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, len - used);
			len -= used;
			buf[len] = 0;
		}
		if (len == sizeof(buf) - 1) { /* line too long: answer once, drop the rest of it */
			if (!skipping && handle(fd, NULL))
				return;
			if (!skipping)
				deadline = mono_ns() + IO_TIMEOUT_MS * 1000000ull;
			skipping = 1;
			len = 0;
		}
	}
}

static void *serve(void *arg)
{
	int ls = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		serve_one(fd);
		close(fd);
	}
}

/* The socket's path into out: 0, or -1 with why (no control channel then). Only $LEVELLER_SHIM_SOCK
 * or SOCK_DIR: the root agent trusts a socket there, so the directory must be root's (lstat: not a
 * symlink) and not writable by every user (any user could serve leveller-shim-<its pid>.sock). */
static int socket_path(char *out, size_t n, char *why, size_t wn)
{
	const char *env = getenv("LEVELLER_SHIM_SOCK");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		return 0;
	}
	struct stat st;
	if (lstat(SOCK_DIR, &st)) {
		snprintf(why, wn, "%s: %s (the agent creates it with --rdma; or set LEVELLER_SHIM_SOCK)", SOCK_DIR,
			 strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & S_IWOTH)) {
		snprintf(why, wn, "%s is %s, not a directory of root's that not every user may write", SOCK_DIR,
			 !S_ISDIR(st.st_mode) ? "not a directory" : st.st_uid != 0 ? "not owned by root"
									: "writable by every user");
		return -1;
	}
	snprintf(out, n, "%s/leveller-shim-%d.sock", SOCK_DIR, (int)getpid());
	return 0;
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
	shim_agent_register();    /* the job announces itself to the agent (agentreg.c) */
	char why[300];
	if (socket_path(g_path, sizeof(g_path), why, sizeof(why))) {
		fprintf(stderr, "leveller-shim: no control socket: %s (traffic class control disabled)\n", why);
		g_path[0] = 0;
		pthread_mutex_unlock(&g_start);
		return;
	}
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_path);
	unlink(g_path);
	/* 0600 before listen(): nobody can connect in between (connect needs a listening socket) */
	int bound = ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (!bound || chmod(g_path, 0600) || listen(ls, 8)) {
		fprintf(stderr, "leveller-shim: control socket %s: %s (traffic class control disabled)\n", g_path,
			strerror(errno));
		if (bound)
			unlink(g_path);
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
