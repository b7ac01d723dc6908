/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fabric_sized.c - what a sized transfer costs against a plain one (docs/sizes.md, "Cost"): a
 * ping-pong between two ranks through odx_fab_send / odx_fab_recv and through
 * odx_fab_send_sized / odx_fab_recv_upto (what the core uses for every buffer since run-time
 * lengths), the two alternating, 64 B .. 16 MiB. One line per size on rank 0: best and mean
 * one-way time of each, and whether a sized send of that size is one message (at most
 * odx_fab_sized_one_max bytes) or announces its length first. Run with two ranks:
 *
 *   scripts/odx-run -n 2 build/bench/fabric/fabric_sized [tcp|shm]
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabric.h"
#include "odx/odx.h"

#define REPS 6

static atomic_int left;

static void done(void *arg, int status, const char *msg)
{
	(void)arg;
	if (status) {
		fprintf(stderr, "transfer failed: %s: %s\n", odx_err_name(status), msg ? msg : "");
		exit(1);
	}
	atomic_fetch_sub(&left, 1);
}

static bool finished(void *arg)
{
	(void)arg;
	return atomic_load(&left) == 0;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_msg(void *user, int src, uint32_t type, const void *payload, size_t len)
{
	(void)user;
	(void)src;
	(void)type;
	(void)payload;
	(void)len;
}

/* One transfer of n bytes from `from` to the other rank, plain or sized; both ranks call it. */
static void one(odx_fab *f, int rank, int from, uint64_t key, char *buf, size_t n, bool sized)
{
	size_t got;
	int rc;

	atomic_store(&left, 1);
	if (rank == from)
		rc = sized ? odx_fab_send_sized(f, 1 - rank, key, buf, n, done, NULL)
			   : odx_fab_send(f, 1 - rank, key, buf, n, done, NULL);
	else
		rc = sized ? odx_fab_recv_upto(f, 1 - rank, key, buf, n, &got, done, NULL)
			   : odx_fab_recv(f, 1 - rank, key, buf, n, done, NULL);
	if (rc || odx_fab_wait(f, finished, NULL, 60000)) {
		fprintf(stderr, "rank %d: transfer of %zu bytes: %s\n", rank, n, odx_err_name(rc));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {64, 4096, 65536, 1 << 20, 16 << 20};
	odx_fab_params p = {.provider = argc > 1 ? argv[1] : "tcp", .peer_timeout_ms = 20000};
	odx_fab *f;
	char err[512], *buf = calloc(1, 16 << 20);
	uint64_t key = 1;
	int rank;

	if (!buf || odx_fab_open(&p, &f, err, sizeof(err))) {
		fprintf(stderr, "fabric_sized: %s\n", buf ? err : "out of memory");
		return 1;
	}
	odx_fab_set_handlers(f, on_msg, NULL, NULL);
	rank = odx_fab_rank(f);
	if (odx_fab_size(f) != 2) {
		fprintf(stderr, "run with two ranks (scripts/odx-run -n 2)\n");
		return 1;
	}
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		int iters = n >= (1 << 20) ? 20 : 200;
		double best[2] = {1e9, 1e9}, sum[2] = {0, 0};

		for (int rep = 0; rep < REPS; rep++) {
			for (int sized = 0; sized < 2; sized++) {
				double t0 = now(), us;

				for (int i = 0; i < iters; i++) {
					one(f, rank, 0, key++, buf, n, sized);
					one(f, rank, 1, key++, buf, n, sized);
				}
				us = (now() - t0) / iters / 2 * 1e6;
				sum[sized] += us;
				if (us < best[sized])
					best[sized] = us;
			}
		}
		if (rank == 0)
			printf("{\"provider\": \"%s\", \"bytes\": %zu, \"plain_best_us\": %.1f, "
			       "\"plain_mean_us\": %.1f, \"sized_best_us\": %.1f, "
			       "\"sized_mean_us\": %.1f, \"sized_one_message\": %s}\n",
			       odx_fab_provider(f), n, best[0], sum[0] / REPS, best[1],
			       sum[1] / REPS, n <= odx_fab_sized_one_max(f, 1) ? "true" : "false");
	}
	odx_fab_barrier(f, 0);
	odx_fab_close(f);
	free(buf);
	return 0;
}
