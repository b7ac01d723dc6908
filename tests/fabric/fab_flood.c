/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_flood.c - one rank of the throttling tests (2 ranks, started by scripts/odx-run through
 * run.sh): the fabric must hold back what the provider has no room for, never fail on it.
 *
 *   fab_flood flood     each rank posts FAB_FLOOD_COUNT (default 20000) small receives from the
 *                       other (1..700 bytes), then as many sends to it, all in flight at once:
 *                       more than shm's 1024 posted receives per endpoint, which it refused
 *                       with FI_ENOMEM (4 times, then the peer failed) before the throttle.
 *                       Every transfer must complete with its bytes checked, no retry may be
 *                       counted, and with FAB_FLOOD_EXPECT_THROTTLED=1 the throttle count must
 *                       be > 0 (the caps forced low with ODX_FAB_RX_CAP / ODX_FAB_TX_CAP, or the
 *                       count above the provider's own). With FAB_TEST_FAULT="enomem=P" the
 *                       injected FI_ENOMEM completions are back-pressure too: no retry counted.
 *   fab_flood hardfail  FAB_TEST_FAULT="cqfail=1": every post fails as a real error would; the
 *                       send must fail with ODX_EPEER after exactly max_retries + 1 attempts
 *                       (3 + 1 by default), and the retries be counted.
 *
 * Environment: FAB_TEST_PROVIDER, FAB_TEST_FAULT, FAB_TEST_SLOW (deadline factor), FAB_FLOOD_COUNT,
 * FAB_FLOOD_EXPECT_THROTTLED. Waits are count-based with a deadline; a failure prints why and
 * exits 1.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric.h"
#include "odx/odx.h"

static int slow = 1;
#define DEADLINE_MS (90000 * slow)
#define MAX_LEN 700

static int my_rank;

#define DIE(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "FAIL rank %d: ", my_rank);                                        \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int pending, failed;
static char first_error[512];

static void on_done(void *arg, int status, const char *msg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	pending--;
	if (status && !failed++)
		snprintf(first_error, sizeof(first_error), "%s: %s", odx_err_name(status),
			 msg ? msg : "(no message)");
	pthread_mutex_unlock(&lock);
}

static void on_peer(void *user, int rank, const char *why)
{
	(void)user;
	fprintf(stderr, "rank %d: peer %d failed: %s\n", my_rank, rank, why);
}

static bool none_pending(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	bool done = pending <= 0;
	pthread_mutex_unlock(&lock);
	return done;
}

static size_t flood_len(uint64_t key)
{
	return 1 + (size_t)(key * 37 % MAX_LEN);
}

static unsigned char pattern(int src, uint64_t key, size_t i)
{
	return (unsigned char)(src * 131 + key * 7 + i * 13 + 1);
}

static void wait_pending(odx_fab *f, const char *what)
{
	int ret = odx_fab_wait(f, none_pending, NULL, DEADLINE_MS);
	if (ret)
		DIE("%s: %d transfers still pending after %d ms (%s)", what, pending, DEADLINE_MS,
		    odx_err_name(ret));
}

static void run_flood(odx_fab *f, int peer)
{
	const char *c = getenv("FAB_FLOOD_COUNT");
	size_t n = c && atoi(c) > 0 ? (size_t)atoi(c) : 20000;
	unsigned char *in = calloc(n, MAX_LEN), *out = malloc(n * MAX_LEN);
	if (!in || !out)
		DIE("out of memory");
	pending = (int)(2 * n);
	/* every receive first (all posted before any data comes), then every send */
	for (size_t k = 0; k < n; k++) {
		int ret = odx_fab_recv(f, peer, k + 1, in + k * MAX_LEN, flood_len(k + 1), on_done,
				       NULL);
		if (ret)
			DIE("odx_fab_recv %zu: %s", k, odx_err_name(ret));
	}
	for (size_t k = 0; k < n; k++) {
		for (size_t i = 0; i < flood_len(k + 1); i++)
			out[k * MAX_LEN + i] = pattern(my_rank, k + 1, i);
		int ret = odx_fab_send(f, peer, k + 1, out + k * MAX_LEN, flood_len(k + 1), on_done,
				       NULL);
		if (ret)
			DIE("odx_fab_send %zu: %s", k, odx_err_name(ret));
	}
	wait_pending(f, "flood");
	if (failed)
		DIE("%d of %zu transfers failed, first: %s", failed, 2 * n, first_error);
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < flood_len(k + 1); i++)
			if (in[k * MAX_LEN + i] != pattern(peer, k + 1, i))
				DIE("transfer %zu byte %zu is wrong", k + 1, i);
	odx_fab_stats st;
	odx_fab_get_stats(f, &st);
	printf("rank %d: %zu sends and %zu receives of 1..%d bytes checked; %llu throttled, %llu "
	       "retries, %llu EAGAIN\n",
	       my_rank, n, n, MAX_LEN, (unsigned long long)st.throttled,
	       (unsigned long long)st.retries, (unsigned long long)st.eagain);
	if (st.retries)
		DIE("%llu retries counted: back-pressure must not count as a fault",
		    (unsigned long long)st.retries);
	const char *e = getenv("FAB_FLOOD_EXPECT_THROTTLED");
	if (e && atoi(e) && !st.throttled)
		DIE("nothing was throttled, yet the caps (or the count) ask for it");
	free(in);
	free(out);
}

static void run_hardfail(odx_fab *f, int peer)
{
	static unsigned char buf[512];
	pending = 1;
	int ret = odx_fab_send(f, peer, 1, buf, sizeof(buf), on_done, NULL);
	if (ret)
		DIE("odx_fab_send: %s", odx_err_name(ret));
	wait_pending(f, "hardfail");
	odx_fab_stats st;
	odx_fab_get_stats(f, &st);
	printf("rank %d: %s; %llu retries, %llu throttled\n", my_rank, first_error,
	       (unsigned long long)st.retries, (unsigned long long)st.throttled);
	if (failed != 1 || !strstr(first_error, "ODX_EPEER") ||
	    !strstr(first_error, "failed 4 times") || !strstr(first_error, "injected hard"))
		DIE("expected the send to fail with ODX_EPEER after 4 injected hard errors, got: %s",
		    first_error[0] ? first_error : "success");
	if (st.retries < 4)
		DIE("only %llu retries counted", (unsigned long long)st.retries);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "flood";
	const char *sl = getenv("FAB_TEST_SLOW");
	if (sl && atoi(sl) > 1)
		slow = atoi(sl);
	alarm((unsigned)(DEADLINE_MS / 1000 + 60 * slow)); /* the last resort against a hang */
	odx_fab_params p = {0};
	p.provider = getenv("FAB_TEST_PROVIDER");
	p.fault = getenv("FAB_TEST_FAULT");
	p.peer_timeout_ms = 10000 * slow;
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(&p, &f, err, sizeof(err));
	if (ret)
		DIE("odx_fab_open: %s: %s", odx_err_name(ret), err);
	my_rank = odx_fab_rank(f);
	if (odx_fab_size(f) != 2)
		DIE("runs on 2 ranks, not %d", odx_fab_size(f));
	odx_fab_set_handlers(f, NULL, on_peer, NULL);
	if (my_rank == 0)
		printf("provider %s, mode %s\n", odx_fab_provider(f), mode);
	if (!strcmp(mode, "flood")) {
		ret = odx_fab_barrier(f, DEADLINE_MS);
		if (ret)
			DIE("first barrier: %s", odx_err_name(ret));
		run_flood(f, 1 - my_rank);
		ret = odx_fab_barrier(f, DEADLINE_MS);
		if (ret)
			DIE("last barrier: %s", odx_err_name(ret));
	} else if (!strcmp(mode, "hardfail")) {
		/* no barrier: every message fails, control messages too */
		run_hardfail(f, 1 - my_rank);
	} else {
		DIE("unknown mode %s", mode);
	}
	odx_fab_close(f);
	return 0;
}
