/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_bind.c - ranks that share a host bind their device threads to disjoint cores, run as
 * every rank of a job (scripts/odx-run, which says how many ranks share the host).
 *
 * Each rank runs one kernel on its own buffer (it owns it, so the task runs there): the kernel
 * writes the affinity mask of the device thread running it (sched_getaffinity). Every rank reads
 * every rank's mask (reads are collective) and checks that they are single-core, bound (not the
 * whole machine) and pairwise disjoint. When the process may use fewer cores than there are
 * ranks (no disjoint binding exists then; ODX says so and does not bind), it checks instead that
 * each rank's host devices run one compute thread each (oversubscribed, below).
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "odx/odx.h"

#define TIMEOUT_MS 60000
#define MASK_WORDS 16 /* CPUs 0..1023 */

static int rank_ = -1;

#include "dist_check.h"

/* The calling thread's affinity, as bits of CPUs 0..1023. */
static int affinity_of_thread(const odx_host_launch *l)
{
	uint64_t *out = l->buffers[0];
	cpu_set_t set;
	int c;

	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) != 0) {
		snprintf(l->error, l->error_size, "sched_getaffinity failed");
		return 1;
	}
	memset(out, 0, MASK_WORDS * sizeof(uint64_t));
	for (c = 0; c < 64 * MASK_WORDS && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			out[c / 64] |= 1ull << (c % 64);
	return 0;
}

static int count(const uint64_t *m)
{
	int i, n = 0;

	for (i = 0; i < MASK_WORDS; i++)
		n += __builtin_popcountll(m[i]);
	return n;
}

/*
 * More ranks than CPUs (taskset -c 0,1 scripts/odx-run -n 4): no disjoint binding exists, so
 * ODX leaves the threads unbound, and each rank sizes its host devices for one CPU: one compute
 * thread a device (host.threads = 0), not the process's CPUs / devices, which would run 2 x the
 * CPUs in compute threads taking turns.
 */
static int oversubscribed(int n, int ncpu)
{
	odx_context *ctx;
	odx_device_info info;
	int d, host = 0;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	for (d = 0; d < odx_device_count(ctx); d++) {
		CHECK(ctx, odx_device_get_info(ctx, d, &info));
		if (info.kind != ODX_BACKEND_HOST)
			continue;
		host++;
		printf("rank %d: %d ranks on %d CPUs: %s has %d compute thread(s)\n", rank_, n, ncpu,
		       info.name, info.threads);
		if (info.threads != 1) {
			fprintf(stderr, "rank %d: %s runs %d threads where its rank shares %d CPUs "
					"with %d ranks\n", rank_, info.name, info.threads, ncpu, n);
			return 1;
		}
	}
	if (host == 0) {
		fprintf(stderr, "rank %d: no host device\n", rank_);
		return 1;
	}
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));
	return 0;
}

int main(void)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_W, "mask"}};
	const odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN,
				      .host_fn = affinity_of_thread};
	uint64_t masks[64][MASK_WORDS];
	odx_buffer *buf[64];
	odx_kernel *k;
	odx_context *ctx;
	cpu_set_t mine;
	int n, r, s, w, ncpu;

	/* Decided before odx_open, from what every rank sees alike (same machine, same mask). */
	CPU_ZERO(&mine);
	if (sched_getaffinity(0, sizeof(mine), &mine) != 0)
		return 1;
	ncpu = CPU_COUNT(&mine);
	n = getenv("ODX_LOCAL_SIZE") ? atoi(getenv("ODX_LOCAL_SIZE")) : 0;
	if (n < 2) {
		fprintf(stderr, "run me with scripts/odx-run -n N (N >= 2)\n");
		return 1;
	}
	if (ncpu < n)
		return oversubscribed(n, ncpu);
	if (n > 64)
		return 1;
	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	if (odx_size(ctx) != n) {
		fprintf(stderr, "rank %d: odx_size %d, ODX_LOCAL_SIZE %d\n", rank_, odx_size(ctx), n);
		return 1;
	}
	CHECK(ctx, odx_kernel_create(ctx, "affinity", params, 1, &v, 1, &k));
	for (r = 0; r < n; r++) {
		odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}};

		CHECK(ctx, odx_buffer_create(ctx, sizeof(masks[0]), 0, &buf[r]));
		CHECK(ctx, odx_buffer_set_owner(buf[r], r));
		CHECK(ctx, odx_submit(ctx, k, (odx_arg[]){ODX_BUF(buf[r], ODX_W)}, 1, &o, NULL));
	}
	for (r = 0; r < n; r++)
		CHECK(ctx, odx_buffer_read(buf[r], 0, masks[r], sizeof(masks[r]), TIMEOUT_MS));
	for (r = 0; r < n; r++) {
		printf("rank %d: rank %d's device thread may run on %d CPUs (word 0: %#llx)\n", rank_,
		       r, count(masks[r]), (unsigned long long)masks[r][0]);
		/* host.bind (the default) binds each device thread to one PU of its rank's slice */
		if (count(masks[r]) != 1) {
			fprintf(stderr, "rank %d: rank %d's device thread is not bound to one CPU\n",
				rank_, r);
			return 1;
		}
		for (s = 0; s < r; s++)
			for (w = 0; w < MASK_WORDS; w++)
				if (masks[r][w] & masks[s][w]) {
					fprintf(stderr,
						"rank %d: ranks %d and %d bound their device threads "
						"to the same CPU\n",
						rank_, s, r);
					return 1;
				}
	}
	for (r = 0; r < n; r++)
		odx_buffer_destroy(buf[r]);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));
	printf("rank %d: %d ranks bound to disjoint CPUs\n", rank_, n);
	return 0;
}
