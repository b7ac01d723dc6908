/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_unit.c - single-process checks of the transport: provider errors, the fault spec, a single
 * rank's self transfers and messages, the tag of one-message sized sends, length mismatches, cancellation at close, odx_fab_wait
 * (caller-driven progress, its deadline, a wait from a callback), odx_fab_describe, the names of
 * shm endpoints and the removal of the segments dead processes left.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fab_internal.h"
#include "odx/odx.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

struct done_rec {
	pthread_mutex_t lock;
	int calls, status;
	char msg[300];
};

static void on_done(void *arg, int status, const char *msg)
{
	struct done_rec *d = arg;
	pthread_mutex_lock(&d->lock);
	d->calls++;
	d->status = status;
	snprintf(d->msg, sizeof(d->msg), "%s", msg ? msg : "");
	pthread_mutex_unlock(&d->lock);
}

/* Every wait below only guards against a hang: 30 s, far above an honest run even sanitized on a
 * loaded machine (the progress thread runs the callbacks; it may wait its turn for a core). */
#define WAIT_MS 30000

static int wait_calls(struct done_rec *d, int n)
{
	for (int i = 0; i < WAIT_MS; i++) {
		pthread_mutex_lock(&d->lock);
		int c = d->calls;
		pthread_mutex_unlock(&d->lock);
		if (c >= n)
			return c;
		usleep(1000);
	}
	return d->calls;
}

static int self_msgs;
static void on_msg(void *user, int src, uint32_t type, const void *payload, size_t len)
{
	if (src == 0 && type == 42 && len == 5 && !memcmp(payload, "hello", 5))
		__atomic_add_fetch(&self_msgs, 1, __ATOMIC_SEQ_CST);
	(void)user;
}

static void test_unknown_provider(void)
{
	odx_fab_params p = {.provider = "no-such-provider"};
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(&p, &f, err, sizeof(err));
	CHECK(ret == ODX_EINVAL, "unknown provider: %s", odx_err_name(ret));
	CHECK(f == NULL, "out touched on failure");
	CHECK(strstr(err, "no-such-provider") && strstr(err, "available:") && strstr(err, "tcp"),
	      "error does not list the providers: %s", err);
}

static void test_unknown_iface(void)
{
	odx_fab_params p = {.provider = "tcp", .iface = "no-such-iface0"};
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(&p, &f, err, sizeof(err));
	CHECK(ret == ODX_EINVAL && strstr(err, "no-such-iface0"), "unknown interface: %s %s",
	      odx_err_name(ret), err);
}

static void test_fault_spec(void)
{
	struct fab_fault ft;
	char err[256];
	CHECK(fab_fault_parse(&ft, "delay_us=0-2000,reorder=0.2,eagain=0.3,cqerr=0.01,seed=7", err,
			      sizeof(err)) == 0,
	      "good spec refused: %s", err);
	CHECK(ft.on && ft.delay_max_us == 2000 && ft.eagain == 0.3, "spec misparsed");
	CHECK(fab_fault_parse(&ft, "eagain=2", err, sizeof(err)) == ODX_EINVAL &&
		      strstr(err, "eagain"),
	      "bad probability accepted");
	CHECK(fab_fault_parse(&ft, "bogus=1", err, sizeof(err)) == ODX_EINVAL &&
		      strstr(err, "unknown key"),
	      "unknown key accepted");
	CHECK(fab_fault_parse(&ft, NULL, err, sizeof(err)) == 0 && !ft.on, "NULL spec not off");
	odx_fab_params p = {.fault = "delay_us=5-1"};
	odx_fab *f = NULL;
	CHECK(odx_fab_open(&p, &f, err, sizeof(err)) == ODX_EINVAL, "open with a bad fault spec");
}

/* The tag of a one-message sized send (fab_eager_tag) never equals the control tag or any data
 * chunk's, and keeps keys apart, at the ends of the key range too. */
static void test_tags(void)
{
	static const uint64_t keys[] = {0, 1, 2, 255, 256, (1ull << FAB_KEY_BITS) - 1};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		uint64_t t = fab_eager_tag(keys[i]);
		CHECK(t != FAB_TAG_CTRL && !(t & FAB_TAG_DATA),
		      "one-message tag of key %#llx: %#llx", (unsigned long long)keys[i],
		      (unsigned long long)t);
		for (size_t j = 0; j < sizeof(keys) / sizeof(keys[0]); j++) {
			CHECK(t != fab_data_tag(keys[j], 0) && t != fab_data_tag(keys[j], 1) &&
				      t != fab_data_tag(keys[j], FAB_MAX_CHUNKS - 1),
			      "one-message tag of key %#llx is a chunk's of key %#llx",
			      (unsigned long long)keys[i], (unsigned long long)keys[j]);
			CHECK(i == j || t != fab_eager_tag(keys[j]),
			      "keys %#llx and %#llx share a tag", (unsigned long long)keys[i],
			      (unsigned long long)keys[j]);
		}
	}
}

/* Sized transfers to oneself (copies: any length is one) and the one-message limit's answers. */
static void test_sized_self(void)
{
	odx_fab *f = NULL;
	char err[256] = "";
	int ret = odx_fab_open(NULL, &f, err, sizeof(err));
	CHECK(ret == 0, "single-rank open: %s %s", odx_err_name(ret), err);
	if (ret)
		return;
	CHECK(odx_fab_sized_one_max(f, 0) == SIZE_MAX && odx_fab_sized_one_max(f, 1) == 0 &&
		      odx_fab_sized_one_max(f, -1) == 0 && odx_fab_sized_one_max(NULL, 0) == 0,
	      "odx_fab_sized_one_max of oneself or a bad rank");
	char a[100], b[200];
	memset(a, 7, sizeof(a));
	memset(b, 0, sizeof(b));
	size_t got = 1;
	struct done_rec d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
	CHECK(odx_fab_recv_upto(f, 0, 5, b, sizeof(b), &got, on_done, &d) == 0, "recv_upto");
	CHECK(odx_fab_send_sized(f, 0, 5, a, sizeof(a), on_done, &d) == 0, "send_sized");
	CHECK(wait_calls(&d, 2) == 2 && d.status == 0 && got == sizeof(a) && b[99] == 7 && !b[100],
	      "sized self transfer: %s, %zu bytes", odx_err_name(d.status), got);
	odx_fab_close(f);
}

static void test_single_rank(void)
{
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(NULL, &f, err, sizeof(err));
	CHECK(ret == 0, "single-rank open: %s %s", odx_err_name(ret), err);
	if (ret)
		return;
	CHECK(odx_fab_rank(f) == 0 && odx_fab_size(f) == 1, "rank/size");
	CHECK(!strcmp(odx_fab_provider(f), "self"), "provider %s", odx_fab_provider(f));
	odx_fab_set_handlers(f, on_msg, NULL, NULL);
	CHECK(odx_fab_send_msg(f, 0, 42, "hello", 5) == 0, "self message");
	CHECK(odx_fab_send_msg(f, 1, 42, "hello", 5) == ODX_EINVAL, "message to rank 1 of 1");
	CHECK(odx_fab_send_msg(f, 0, 42, "x", odx_fab_max_msg(f) + 1) == ODX_EINVAL,
	      "oversized message");

	static const size_t sizes[] = {0, 1, 7, 100000};
	for (size_t i = 0; i < 4; i++) {
		struct done_rec d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
		unsigned char *src = malloc(sizes[i] + 1), *dst = calloc(1, sizes[i] + 1);
		for (size_t b = 0; b < sizes[i]; b++)
			src[b] = (unsigned char)(b * 7 + i);
		/* send first for even sizes, receive first for odd ones */
		if (i % 2) {
			CHECK(odx_fab_recv(f, 0, 100 + i, dst, sizes[i], on_done, &d) == 0, "recv");
			CHECK(odx_fab_send(f, 0, 100 + i, src, sizes[i], on_done, &d) == 0, "send");
		} else {
			CHECK(odx_fab_send(f, 0, 100 + i, src, sizes[i], on_done, &d) == 0, "send");
			CHECK(odx_fab_recv(f, 0, 100 + i, dst, sizes[i], on_done, &d) == 0, "recv");
		}
		CHECK(wait_calls(&d, 2) == 2 && d.status == 0, "self transfer of %zu: %d calls, %s",
		      sizes[i], d.calls, d.msg);
		CHECK(!memcmp(src, dst, sizes[i]), "self transfer of %zu: data differs", sizes[i]);
		free(src);
		free(dst);
	}
	/* a length mismatch fails both sides with a message naming the sizes */
	struct done_rec d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
	char a[16] = "0123456789", b[32];
	CHECK(odx_fab_send(f, 0, 7, a, 10, on_done, &d) == 0, "send");
	CHECK(odx_fab_recv(f, 0, 7, b, 20, on_done, &d) == 0, "recv");
	CHECK(wait_calls(&d, 2) == 2 && d.status == ODX_EINVAL && strstr(d.msg, "expects 20"),
	      "length mismatch: %s", d.msg);
	/* keys travel in the provider's tag: 55 bits */
	CHECK(odx_fab_send(f, 0, 1ull << ODX_FAB_KEY_BITS, a, 10, on_done, &d) == ODX_EINVAL &&
		      odx_fab_recv(f, 0, ~0ull, b, 10, on_done, &d) == ODX_EINVAL,
	      "a key of more than %d bits accepted", ODX_FAB_KEY_BITS);
	CHECK(odx_fab_barrier(f, WAIT_MS) == 0, "barrier of one");
	for (int i = 0; i < WAIT_MS && __atomic_load_n(&self_msgs, __ATOMIC_SEQ_CST) < 1; i++)
		usleep(1000);
	CHECK(self_msgs == 1, "self message delivered %d times", self_msgs);
	/* idle, the progress thread sleeps (it must not spin: the cores are shared), and with no
	 * provider at all no sleep counts as one taken while a data op was posted */
	odx_fab_stats idle;
	odx_fab_get_stats(f, &idle);
	for (int i = 0; i < WAIT_MS && idle.sleeps < 3; i++) {
		usleep(1000);
		odx_fab_get_stats(f, &idle);
	}
	CHECK(idle.sleeps >= 3 && idle.sleeps_posted == 0 && idle.sleep_ns > 0,
	      "idle progress thread: %llu sleeps (%llu with data posted, %llu ns)",
	      (unsigned long long)idle.sleeps, (unsigned long long)idle.sleeps_posted,
	      (unsigned long long)idle.sleep_ns);
	/* a receive nobody sends to: canceled at close, done called once */
	struct done_rec c = {PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
	CHECK(odx_fab_recv(f, 0, 999, b, 4, on_done, &c) == 0, "recv");
	odx_fab_stats st;
	odx_fab_get_stats(f, &st);
	CHECK(st.transfers >= 10, "transfer counter %llu", (unsigned long long)st.transfers);
	odx_fab_close(f);
	CHECK(c.calls == 1 && c.status == ODX_ECANCELED, "pending receive at close: %d calls, %s",
	      c.calls, odx_err_name(c.status));
}

static bool calls_reached(void *arg)
{
	struct done_rec *d = arg;
	pthread_mutex_lock(&d->lock);
	bool done = d->calls >= 2;
	pthread_mutex_unlock(&d->lock);
	return done;
}

static bool never(void *arg)
{
	(void)arg;
	return false;
}

/* A callback that waits: its thread already drives progress, so the wait (and a barrier, which
 * waits too) refuses. */
struct nested {
	odx_fab *f;
	int calls, ret, bar;
};

static void on_done_nested(void *arg, int status, const char *msg)
{
	struct nested *n = arg;
	n->ret = odx_fab_wait(n->f, never, NULL, 1000);
	n->bar = odx_fab_barrier(n->f, 1000);
	__atomic_add_fetch(&n->calls, 1, __ATOMIC_SEQ_CST);
	(void)status;
	(void)msg;
}

static bool nested_done(void *arg)
{
	struct nested *n = arg;
	return __atomic_load_n(&n->calls, __ATOMIC_SEQ_CST) >= 2;
}

/* odx_fab_wait drives progress on the caller's thread: the done callbacks run there. */
static void test_wait(void)
{
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(NULL, &f, err, sizeof(err));
	CHECK(ret == 0, "single-rank open: %s %s", odx_err_name(ret), err);
	if (ret)
		return;
	for (int i = 0; i < 50; i++) {
		struct done_rec d = {PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
		unsigned char src[64], dst[64] = {0};
		memset(src, i, sizeof(src));
		CHECK(odx_fab_send(f, 0, 300 + (uint64_t)i, src, sizeof(src), on_done, &d) == 0,
		      "send");
		CHECK(odx_fab_recv(f, 0, 300 + (uint64_t)i, dst, sizeof(dst), on_done, &d) == 0,
		      "recv");
		ret = odx_fab_wait(f, calls_reached, &d, WAIT_MS);
		CHECK(ret == 0 && d.calls == 2 && d.status == 0 && !memcmp(src, dst, sizeof(src)),
		      "wait %d: %s, %d calls, %s", i, odx_err_name(ret), d.calls, d.msg);
	}
	/* every wait has a deadline */
	ret = odx_fab_wait(f, never, NULL, 50);
	CHECK(ret == ODX_ETIMEDOUT, "wait for a condition that never holds: %s", odx_err_name(ret));
	CHECK(odx_fab_wait(NULL, never, NULL, 50) == ODX_EINVAL &&
		      odx_fab_wait(f, NULL, NULL, 50) == ODX_EINVAL,
	      "bad arguments accepted");
	struct nested n = {f, 0, 0, 0};
	char a[8] = "abcdefg", b[8];
	CHECK(odx_fab_send(f, 0, 400, a, 8, on_done_nested, &n) == 0 &&
		      odx_fab_recv(f, 0, 400, b, 8, on_done_nested, &n) == 0,
	      "nested transfer");
	ret = odx_fab_wait(f, nested_done, &n, WAIT_MS);
	CHECK(ret == 0 && n.ret == ODX_EBUSY && n.bar == ODX_EBUSY,
	      "wait from a callback: %s, inner wait %s, inner barrier %s", odx_err_name(ret),
	      odx_err_name(n.ret), odx_err_name(n.bar));
	/* the refused barrier left no epoch behind: a barrier from here still works */
	CHECK(odx_fab_barrier(f, WAIT_MS) == 0, "barrier after a refused one");
	odx_fab_close(f);
}

static bool shm_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

static void shm_make(const char *name)
{
	int fd = shm_open(name, O_RDWR | O_CREAT, 0600);

	CHECK(fd >= 0, "shm_open %s: %s", name, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* A killed rank's segment must not block the next process that gets its pid (libfabric's own
 * pid-based names did: fi_enable EBUSY), and is removed by the next job; a live one stays. */
static void test_shm_names(void)
{
	char mine[256], again[256], dead[256], reused[256];
	pid_t child = fork();

	fab_shm_name(mine, sizeof(mine));
	fab_shm_name(again, sizeof(again));
	CHECK(strncmp(mine, "odx-", 4) == 0 && strcmp(mine, again) != 0,
	      "two endpoints of one process got '%s' and '%s'", mine, again);
	if (child == 0)
		_exit(0);
	CHECK(child > 0 && waitpid(child, NULL, 0) == child, "fork/wait");
	/* a process that is gone, and one whose pid is now held by another process (ours, with
	 * another start time) */
	snprintf(dead, sizeof(dead), "odx-%ld-12345-0", (long)child);
	snprintf(reused, sizeof(reused), "odx-%ld-1-0_l1", (long)getpid());
	shm_make(mine);
	shm_make(dead);
	shm_make(reused);
	CHECK(fab_shm_sweep() >= 2, "the sweep removed fewer than the two dead segments");
	CHECK(!shm_exists(dead), "the segment of a dead process is still there");
	CHECK(!shm_exists(reused), "the segment of a dead process whose pid was reused is still there");
	CHECK(shm_exists(mine), "the sweep removed the segment of a live process");
	shm_unlink(mine);
}

static void test_describe(void)
{
	char buf[2048];
	odx_fab_params p = {.provider = "shm", .shm_lanes = 3};
	int ret = odx_fab_describe(&p, buf, sizeof(buf));
	CHECK(ret == 0, "describe: %s", odx_err_name(ret));
	CHECK(strstr(buf, "RDM providers:") && strstr(buf, "auto -> ") && strstr(buf, "shm -> shm"),
	      "describe says: %s", buf);
	/* auto adds shm here (tcp and shm are both present), with the lanes asked for */
	CHECK(strstr(buf, "shm copy lanes: 3"), "describe names no copy lanes: %s", buf);
	fputs(buf, stdout);
}

int main(void)
{
	test_unknown_provider();
	test_unknown_iface();
	test_fault_spec();
	test_tags();
	test_single_rank();
	test_sized_self();
	test_wait();
	test_describe();
	test_shm_names();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	else
		printf("all fabric unit checks passed\n");
	return failures ? 1 : 0;
}
