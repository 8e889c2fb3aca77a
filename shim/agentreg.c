/*
 * Registration with the host agent (docs/api.md, "Registration socket"): when the shim starts
 * (the process's first tracked QP) it registers the job with the agent, so an agent run with
 * --socket needs no flag for it. One JSON line: job $LEVELLER_JOB, rank $LEVELLER_RANK (else $RANK,
 * else 0), and $LEVELLER_ITER_LOG as the log to follow when set. The agent takes the pid, uid and
 * cgroup from the kernel. A detached thread renews the registration every RENEW_S; the connection
 * stays open for the process's life (its close ends the registration). Socket:
 * $LEVELLER_AGENT_SOCK, else /run/leveller/agent.sock if it exists; "" turns it off.
 * Never fails the application: every error is one line on stderr and the shim goes on.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shim.h"

#define DEFAULT_AGENT_SOCK "/run/leveller/agent.sock"
#define LEASE_S 30
#define RENEW_S 10

static int g_agent_fd = -1;

/* A job name the agent accepts: 1-64 of [A-Za-z0-9_.:-]. */
static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == ':' || c == '-'))
			return 0;
	}
	return 1;
}

static void *renew(void *arg)
{
	int fd = (int)(intptr_t)arg;
	static const char msg[] = "{\"op\": \"renew\"}\n";
	for (;;) {
		sleep(RENEW_S);
		if (send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL) < 0)
			return NULL;
	}
}

/* A path with no '"', '\\' or control character (it goes into JSON as is). */
static int plain(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			return 0;
	return 1;
}

void shim_agent_register(void)
{
	if (g_agent_fd >= 0)
		return;
	const char *path = getenv("LEVELLER_AGENT_SOCK");
	if (!path)
		path = access(DEFAULT_AGENT_SOCK, F_OK) == 0 ? DEFAULT_AGENT_SOCK : "";
	if (!*path)
		return;
	const char *job = shim_job();
	if (!valid_name(job)) {
		fprintf(stderr, "leveller-shim: LEVELLER_JOB=%.80s is not a job name (1-64 of A-Z a-z 0-9 _ . : -): "
				"not registered with the agent\n", job);
		return;
	}
	const char *rank_s = getenv("LEVELLER_RANK");
	if (!rank_s || !*rank_s)
		rank_s = getenv("RANK");
	long rank = rank_s ? strtol(rank_s, NULL, 10) : 0;
	if (rank < 0 || rank > (1 << 20))
		rank = 0;
	const char *log = getenv("LEVELLER_ITER_LOG");
	char msg[4096];
	int n;
	if (log && *log && log[0] == '/' && plain(log) && strlen(log) < 3000)
		n = snprintf(msg, sizeof(msg), "{\"op\": \"register\", \"job\": \"%s\", \"rank\": %ld, \"lease_s\": %d, "
						"\"log\": \"%s\"}\n", job, rank, LEASE_S, log);
	else
		n = snprintf(msg, sizeof(msg), "{\"op\": \"register\", \"job\": \"%s\", \"rank\": %ld, \"lease_s\": %d}\n",
			     job, rank, LEASE_S);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) || send(fd, msg, (size_t)n, MSG_NOSIGNAL) != n) {
		fprintf(stderr, "leveller-shim: cannot register with the agent at %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	char reply[1024] = {0};
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	ssize_t got = poll(&pfd, 1, 2000) == 1 ? recv(fd, reply, sizeof(reply) - 1, 0) : -1;
	if (got <= 0 || !strstr(reply, "\"ok\": true")) {
		char *nl = got > 0 ? strchr(reply, '\n') : NULL;
		if (nl)
			*nl = 0;
		fprintf(stderr, "leveller-shim: the agent at %s did not register job %s: %s\n", path, job,
			got > 0 ? reply : "no answer");
		close(fd);
		return;
	}
	g_agent_fd = fd;
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_create(&th, &at, renew, (void *)(intptr_t)fd);
	pthread_attr_destroy(&at);
}
