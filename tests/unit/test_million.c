/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_million.c - a million tasks run, and memory stays flat while they do.
 *
 * 10^6 tasks without buffers and 10^5 tasks over two buffers each are submitted without events;
 * odx_wait_all then finds every one of them run. The in-flight bound caps how many tasks are
 * alive at once, so the resident set measured after the first 10^5 tasks (warm: pools and queues
 * grown) and after the rest must not differ by more than 64 MiB.
 *
 * $ODX_TEST_SCALE shrinks the counts (the memory bound stays).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define NBUF 64       /* buffers shared by the two-buffer tasks */
#define ELEMS 8       /* uint64 per buffer */
#define RSS_SLACK (64ull * 1024 * 1024)

static atomic_long empty_run, pair_run;

static int empty_kernel(const odx_host_launch *l)
{
	(void)l;
	atomic_fetch_add_explicit(&empty_run, 1, memory_order_relaxed);
	return 0;
}

/* pair(R src, RW dst): dst[i] += src[i] + 1. */
static int pair_kernel(const odx_host_launch *l)
{
	const uint64_t *s = l->buffers[0];
	uint64_t *d = l->buffers[1];

	for (int i = 0; i < ELEMS; i++)
		d[i] += s[i] + 1;
	atomic_fetch_add_explicit(&pair_run, 1, memory_order_relaxed);
	return 0;
}

static void test_million_tasks(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false", NULL};
	static uint64_t model[NBUF][ELEMS];
	const long warm = test_scaled(100000, 1000);
	const long empty = test_scaled(1000000, 10000);
	const long pairs = test_scaled(100000, 1000);
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *ek = test_host_kernel(ctx, "empty", NULL, 0, empty_kernel);
	odx_kernel *pk = test_host_kernel(
		ctx, "pair",
		(odx_param[]){{ODX_ARG_BUFFER, ODX_R, "src"}, {ODX_ARG_BUFFER, ODX_RW, "dst"}}, 2,
		pair_kernel);
	odx_buffer *bufs[NBUF];
	uint64_t rng = 42, rss_warm, rss_end, got[ELEMS];

	(void)state;
	atomic_store(&empty_run, 0);
	atomic_store(&pair_run, 0);
	for (int b = 0; b < NBUF; b++) {
		for (int i = 0; i < ELEMS; i++)
			model[b][i] = (uint64_t)(b * ELEMS + i);
		assert_ok(odx_buffer_create(ctx, sizeof(model[b]), 0, &bufs[b]));
		assert_ok(odx_buffer_write(bufs[b], 0, model[b], sizeof(model[b]), TEST_TIMEOUT_MS));
	}

	/* warm up: pools, queues and allocator arenas reach their working size */
	for (long i = 0; i < warm; i++)
		assert_ok(odx_submit(ctx, ek, NULL, 0, NULL, NULL));
	assert_ok(odx_wait_all(ctx, 600000));
	assert_int_equal(atomic_load(&empty_run), warm);
	rss_warm = test_rss_bytes();

	for (long i = warm; i < empty; i++)
		assert_ok(odx_submit(ctx, ek, NULL, 0, NULL, NULL));
	for (long i = 0; i < pairs; i++) {
		int s = (int)test_rand_below(&rng, NBUF);
		int d = (s + 1 + (int)test_rand_below(&rng, NBUF - 1)) % NBUF;

		assert_ok(odx_submit(ctx, pk, (odx_arg[]){ODX_BUF(bufs[s], 0), ODX_BUF(bufs[d], 0)},
				     2, NULL, NULL));
		for (int e = 0; e < ELEMS; e++)
			model[d][e] += model[s][e] + 1;
	}
	assert_ok(odx_wait_all(ctx, 600000));
	rss_end = test_rss_bytes();

	assert_int_equal(atomic_load(&empty_run), empty);
	assert_int_equal(atomic_load(&pair_run), pairs);
	for (int b = 0; b < NBUF; b++) {
		assert_ok(odx_buffer_read(bufs[b], 0, got, sizeof(got), TEST_TIMEOUT_MS));
		assert_memory_equal(got, model[b], sizeof(got));
		assert_ok(odx_buffer_destroy(bufs[b]));
	}
	print_message("VmRSS after %ld tasks: %llu KiB, after %ld: %llu KiB\n", warm,
		      (unsigned long long)(rss_warm / 1024), empty + pairs,
		      (unsigned long long)(rss_end / 1024));
	assert_true(rss_warm > 0);
	if (rss_end > rss_warm + RSS_SLACK)
		fail_msg("VmRSS grew by %llu KiB over %ld tasks (bound %llu KiB)",
			 (unsigned long long)((rss_end - rss_warm) / 1024), empty + pairs - warm,
			 (unsigned long long)(RSS_SLACK / 1024));
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_million_tasks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
