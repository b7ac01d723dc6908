/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_wireup.c - how ranks learn each other's endpoint names.
 *
 * PMIx (Put/Commit/Fence/Get) when a PMIx launcher started us (mpirun, srun --mpi=pmix); else the
 * environment that scripts/odx-run sets: rank 0 listens at ODX_RENDEZVOUS ("unix:/path" or
 * "host:port"), every other rank connects and sends a hello carrying the job key and its name,
 * rank 0 checks each hello and answers everyone with the full table. Every step has a deadline;
 * a connection that sends garbage is dropped and rank 0 keeps waiting for the real ranks.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <pmix.h>

#include "fab_internal.h"
#include "odx/odx.h"

#define RDV_MAGIC 0x4f445852u /* "ODXR" */
#define RDV_VERSION 1
#define PMIX_NAME_KEY "odx.fab.name"

struct rdv_hello {
	uint32_t magic, version;
	uint64_t job_key;
	uint32_t rank, size;
	uint32_t name_len, pad;
};

/* PMIx is process-wide: two odx_fab in one process share one PMIx_Init. */
static pthread_mutex_t pmix_lock = PTHREAD_MUTEX_INITIALIZER;
static int pmix_users;
static pmix_proc_t pmix_self;

int fab_wireup_detect(struct fab_wireup *w, char *err, size_t errlen)
{
	memset(w, 0, sizeof(*w));
	w->size = 1;
	if (getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE")) {
		pthread_mutex_lock(&pmix_lock);
		pmix_status_t rc = PMIX_SUCCESS;
		if (pmix_users == 0)
			rc = PMIx_Init(&pmix_self, NULL, 0);
		if (rc == PMIX_SUCCESS)
			pmix_users++;
		pthread_mutex_unlock(&pmix_lock);
		if (rc != PMIX_SUCCESS) {
			snprintf(err, errlen, "PMIx_Init failed: %s", PMIx_Error_string(rc));
			return ODX_EUNAVAIL;
		}
		w->launcher = FAB_LAUNCH_PMIX;
		w->rank = (int)pmix_self.rank;
		snprintf(w->nspace, sizeof(w->nspace), "%s", pmix_self.nspace);
		pmix_proc_t wild;
		PMIX_LOAD_PROCID(&wild, pmix_self.nspace, PMIX_RANK_WILDCARD);
		pmix_value_t *val = NULL;
		rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
		if (rc != PMIX_SUCCESS || !val) {
			snprintf(err, errlen, "PMIx_Get(PMIX_JOB_SIZE) failed: %s",
				 PMIx_Error_string(rc));
			fab_wireup_finish(w);
			return ODX_EUNAVAIL;
		}
		w->size = (int)val->data.uint32;
		PMIX_VALUE_RELEASE(val);
		/* The namespace is unique per job and known only to its members and the launcher. */
		w->job_key = fab_hash64(w->nspace, strlen(w->nspace));
		return 0;
	}
	const char *rank = getenv("ODX_RANK"), *size = getenv("ODX_SIZE");
	if (rank && !*rank)
		rank = NULL;
	if (size && !*size)
		size = NULL;
	if (!rank && !size) {
		w->launcher = FAB_LAUNCH_SINGLE;
		w->job_key = fab_hash64("single", 6);
		return 0;
	}
	char *end1 = NULL, *end2 = NULL;
	long r = rank ? strtol(rank, &end1, 10) : -1, s = size ? strtol(size, &end2, 10) : -1;
	if (!rank || !size || *end1 || *end2 || s < 1 || s > 65536 || r < 0 || r >= s) {
		snprintf(err, errlen,
			 "ODX_RANK='%s' / ODX_SIZE='%s': need 0 <= rank < size <= 65536",
			 rank ? rank : "(unset)", size ? size : "(unset)");
		return ODX_EINVAL;
	}
	w->launcher = s > 1 ? FAB_LAUNCH_ENV : FAB_LAUNCH_SINGLE;
	w->rank = (int)r;
	w->size = (int)s;
	const char *key = getenv("ODX_JOB_KEY"), *rdv = getenv("ODX_RENDEZVOUS");
	if (s > 1 && (!key || !*key || !rdv || !*rdv)) {
		snprintf(err, errlen,
			 "ODX_SIZE=%ld needs ODX_JOB_KEY and ODX_RENDEZVOUS (use scripts/odx-run)",
			 s);
		return ODX_EINVAL;
	}
	w->job_key = key ? fab_hash64(key, strlen(key)) : fab_hash64("single", 6);
	if (rdv)
		snprintf(w->rendezvous, sizeof(w->rendezvous), "%s", rdv);
	return 0;
}

int odx_fab_local_ranks(int *local_rank, int *local_size)
{
	pmix_status_t rc = PMIX_SUCCESS;
	pmix_value_t *val = NULL;
	pmix_proc_t wild;
	int found = 0;

	if (!getenv("PMIX_RANK") || !getenv("PMIX_NAMESPACE"))
		return ODX_ENOENT;
	/* Asked before the wire-up (the host devices size their threads first): the init is
	 * shared with it, and undone here only when nothing else holds it. */
	pthread_mutex_lock(&pmix_lock);
	if (pmix_users == 0)
		rc = PMIx_Init(&pmix_self, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		pthread_mutex_unlock(&pmix_lock);
		return ODX_EUNAVAIL;
	}
	pmix_users++;
	if (PMIx_Get(&pmix_self, PMIX_LOCAL_RANK, NULL, 0, &val) == PMIX_SUCCESS && val) {
		*local_rank = (int)val->data.uint16;
		PMIX_VALUE_RELEASE(val);
		val = NULL;
		PMIX_LOAD_PROCID(&wild, pmix_self.nspace, PMIX_RANK_WILDCARD);
		if (PMIx_Get(&wild, PMIX_LOCAL_SIZE, NULL, 0, &val) == PMIX_SUCCESS && val) {
			*local_size = (int)val->data.uint32;
			PMIX_VALUE_RELEASE(val);
			found = 1;
		}
	}
	if (--pmix_users == 0)
		PMIx_Finalize(NULL, 0);
	pthread_mutex_unlock(&pmix_lock);
	return found ? 0 : ODX_ENOENT;
}

void fab_wireup_finish(struct fab_wireup *w)
{
	if (w->launcher != FAB_LAUNCH_PMIX)
		return;
	pthread_mutex_lock(&pmix_lock);
	if (--pmix_users == 0)
		PMIx_Finalize(NULL, 0);
	pthread_mutex_unlock(&pmix_lock);
	w->launcher = FAB_LAUNCH_SINGLE;
}

static int pmix_exchange(struct fab_wireup *w, const void *name, size_t len, void *all,
			 int timeout_ms, char *err, size_t errlen)
{
	pmix_value_t v;
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = (char *)name;
	v.data.bo.size = len;
	pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, PMIX_NAME_KEY, &v);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_Commit();
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen, "PMIx_Put/Commit of the endpoint name failed: %s",
			 PMIx_Error_string(rc));
		return ODX_EIO;
	}
	pmix_proc_t wild;
	PMIX_LOAD_PROCID(&wild, w->nspace, PMIX_RANK_WILDCARD);
	pmix_info_t info[2];
	bool collect = true;
	int timeout_s = (timeout_ms + 999) / 1000;
	PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
	rc = PMIx_Fence(&wild, 1, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen, "PMIx_Fence failed: %s", PMIx_Error_string(rc));
		return rc == PMIX_ERR_TIMEOUT ? ODX_ETIMEDOUT : ODX_EPEER;
	}
	for (int r = 0; r < w->size; r++) {
		pmix_proc_t proc;
		pmix_value_t *val = NULL;
		PMIX_LOAD_PROCID(&proc, w->nspace, (pmix_rank_t)r);
		rc = PMIx_Get(&proc, PMIX_NAME_KEY, NULL, 0, &val);
		if (rc != PMIX_SUCCESS || !val || val->type != PMIX_BYTE_OBJECT ||
		    val->data.bo.size != len) {
			snprintf(err, errlen, "PMIx_Get of rank %d's endpoint name failed: %s", r,
				 rc != PMIX_SUCCESS ? PMIx_Error_string(rc)
						    : "wrong type or length");
			if (val)
				PMIX_VALUE_RELEASE(val);
			return ODX_EPEER;
		}
		memcpy((char *)all + (size_t)r * len, val->data.bo.bytes, len);
		PMIX_VALUE_RELEASE(val);
	}
	return 0;
}

/* ---- the environment rendezvous ----------------------------------------------------------- */

static int remaining_ms(int64_t deadline)
{
	int64_t left = (deadline - fab_now_ns()) / 1000000;
	return left < 0 ? 0 : (int)left;
}

/* Reads or writes exactly n bytes before the deadline. */
static int io_full(int fd, void *buf, size_t n, bool writing, int64_t deadline)
{
	size_t done = 0;
	while (done < n) {
		struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
		int left = remaining_ms(deadline);
		if (left == 0)
			return ODX_ETIMEDOUT;
		int pr = poll(&pfd, 1, left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return pr == 0 ? ODX_ETIMEDOUT : ODX_EIO;
		ssize_t k = writing ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
				    : recv(fd, (char *)buf + done, n - done, 0);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k <= 0)
			return ODX_EIO;
		done += (size_t)k;
	}
	return 0;
}

/* Parses "unix:/path" or "host:port" into a socket address. */
static int rdv_address(const char *spec, struct sockaddr_storage *ss, socklen_t *sl, char *err,
		       size_t errlen)
{
	memset(ss, 0, sizeof(*ss));
	if (!strncmp(spec, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;
		if (strlen(spec + 5) >= sizeof(un->sun_path)) {
			snprintf(err, errlen, "ODX_RENDEZVOUS '%s': path too long", spec);
			return ODX_EINVAL;
		}
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, spec + 5);
		*sl = sizeof(*un);
		return 0;
	}
	char host[200];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) {
		snprintf(err, errlen, "ODX_RENDEZVOUS '%s' is neither unix:/path nor host:port",
			 spec);
		return ODX_EINVAL;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc || !res) {
		snprintf(err, errlen, "ODX_RENDEZVOUS '%s': %s", spec, gai_strerror(rc));
		return ODX_EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sl = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int rdv_serve(struct fab_wireup *w, const struct sockaddr_storage *ss, socklen_t sl,
		     const void *name, size_t len, void *all, int64_t deadline, char *err,
		     size_t errlen)
{
	int lfd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int *fds = calloc((size_t)w->size, sizeof(int));
	int ret = 0, have = 1;
	if (lfd < 0 || !fds) {
		snprintf(err, errlen, "rendezvous: socket: %s", strerror(errno));
		ret = ODX_EIO;
		goto out_close;
	}
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_UNIX) {
		/* a stale socket file from an earlier crashed run: only ever remove a socket */
		struct stat st;
		const char *path = ((const struct sockaddr_un *)ss)->sun_path;
		if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
			unlink(path);
	}
	if (bind(lfd, (const struct sockaddr *)ss, sl) || listen(lfd, 128)) {
		snprintf(err, errlen, "rendezvous: cannot listen at %s: %s", w->rendezvous,
			 strerror(errno));
		ret = ODX_EIO;
		goto out_close;
	}
	memcpy(all, name, len);
	while (have < w->size) {
		struct pollfd pfd = {.fd = lfd, .events = POLLIN};
		int left = remaining_ms(deadline);
		if (left == 0 || poll(&pfd, 1, left) == 0) {
			snprintf(err, errlen,
				 "rendezvous: only %d of %d ranks arrived at %s in time", have,
				 w->size, w->rendezvous);
			ret = ODX_ETIMEDOUT;
			goto out_close;
		}
		int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		/* A hello gets at most 2 s, so a stalled or hostile client cannot hold the job. */
		int64_t hello_deadline = fab_now_ns() + 2000000000ll;
		if (hello_deadline > deadline)
			hello_deadline = deadline;
		struct rdv_hello h;
		const char *why = NULL;
		if (io_full(cfd, &h, sizeof(h), false, hello_deadline))
			why = "short or slow hello";
		else if (h.magic != RDV_MAGIC || h.version != RDV_VERSION)
			why = "bad magic or version";
		else if (h.job_key != w->job_key)
			why = "wrong job key";
		else if ((int)h.size != w->size || h.rank == 0 || h.rank >= (uint32_t)w->size)
			why = "rank or size out of range";
		else if (fds[h.rank])
			why = "duplicate rank";
		else if (h.name_len != len)
			why = "endpoint name length differs (different provider?)";
		else if (io_full(cfd, (char *)all + (size_t)h.rank * len, len, false,
				 hello_deadline))
			why = "short endpoint name";
		if (why) {
			fprintf(stderr, "odx fabric: rendezvous: dropped a connection: %s\n", why);
			close(cfd);
			continue;
		}
		fds[h.rank] = cfd;
		have++;
	}
	struct rdv_hello table = {RDV_MAGIC,	     RDV_VERSION,   w->job_key, 0,
				  (uint32_t)w->size, (uint32_t)len, 0};
	for (int r = 1; r < w->size && !ret; r++) {
		if (io_full(fds[r], &table, sizeof(table), true, deadline) ||
		    io_full(fds[r], all, (size_t)w->size * len, true, deadline)) {
			snprintf(err, errlen,
				 "rendezvous: could not send the address table to rank %d", r);
			ret = ODX_EPEER;
		}
	}
out_close:
	for (int r = 1; fds && r < w->size; r++)
		if (fds[r] > 0)
			close(fds[r]);
	free(fds);
	if (lfd >= 0) {
		close(lfd);
		if (ss->ss_family == AF_UNIX)
			unlink(((const struct sockaddr_un *)ss)->sun_path);
	}
	return ret;
}

static int rdv_join(struct fab_wireup *w, const struct sockaddr_storage *ss, socklen_t sl,
		    const void *name, size_t len, void *all, int64_t deadline, char *err,
		    size_t errlen)
{
	int fd = -1;
	/* rank 0 may not listen yet: retry until the deadline */
	for (;;) {
		fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			snprintf(err, errlen, "rendezvous: socket: %s", strerror(errno));
			return ODX_EIO;
		}
		if (connect(fd, (const struct sockaddr *)ss, sl) == 0)
			break;
		close(fd);
		if (remaining_ms(deadline) == 0) {
			snprintf(err, errlen, "rendezvous: rank 0 never answered at %s",
				 w->rendezvous);
			return ODX_ETIMEDOUT;
		}
		usleep(20000);
	}
	struct rdv_hello h = {RDV_MAGIC,	 RDV_VERSION,	w->job_key, (uint32_t)w->rank,
			      (uint32_t)w->size, (uint32_t)len, 0};
	int ret = io_full(fd, &h, sizeof(h), true, deadline);
	if (!ret)
		ret = io_full(fd, (void *)name, len, true, deadline);
	struct rdv_hello t;
	if (!ret)
		ret = io_full(fd, &t, sizeof(t), false, deadline);
	if (!ret && (t.magic != RDV_MAGIC || t.job_key != w->job_key || (int)t.size != w->size ||
		     t.name_len != len))
		ret = ODX_EPEER;
	if (!ret)
		ret = io_full(fd, all, (size_t)w->size * len, false, deadline);
	close(fd);
	if (ret)
		snprintf(err, errlen, "rendezvous with rank 0 at %s failed: %s", w->rendezvous,
			 odx_strerror(ret));
	return ret;
}

int fab_wireup_exchange(struct fab_wireup *w, const void *name, size_t len, void *all,
			int timeout_ms, char *err, size_t errlen)
{
	if (w->launcher == FAB_LAUNCH_PMIX)
		return pmix_exchange(w, name, len, all, timeout_ms, err, errlen);
	if (w->launcher == FAB_LAUNCH_SINGLE) {
		memcpy(all, name, len);
		return 0;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	int ret = rdv_address(w->rendezvous, &ss, &sl, err, errlen);
	if (ret)
		return ret;
	int64_t deadline = fab_now_ns() + (int64_t)timeout_ms * 1000000;
	if (w->rank == 0)
		return rdv_serve(w, &ss, sl, name, len, all, deadline, err, errlen);
	return rdv_join(w, &ss, sl, name, len, all, deadline, err, errlen);
}
