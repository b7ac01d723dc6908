/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tier_model.c - model-based property test of the memory tiers (white box).
 *
 * Random sequences of host writes (full and partial), kernel writes and copies on random devices,
 * reads, odx_buffer_wont_use hints, forced evictions (odx__tier_make_room on a random node) and
 * prefetches (on by default), with the device and host tiers forced small and a disk tier, are
 * checked against a reference model of every buffer's bytes. After each step that waits for the
 * runtime to settle, the replica states must satisfy the MSI invariants:
 *  - every buffer has at least one valid copy (memory node or disk), or was never written;
 *  - a MODIFIED copy is the only valid one;
 *  - no copy is pinned, fetching or being evicted once everything finished;
 *  - every memory node's use stays within its capacity.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core.h"
#include "mem/mem.h"
#include "test_util.h"

enum { NBUF = 24, WORDS = 4096 }; /* 16 KiB buffers, 384 KiB in all */

typedef struct model {
	uint32_t data[NBUF][WORDS];
	bool written[NBUF];
} model;

static bool settled(void *arg)
{
	return atomic_load(&((odx_context *)arg)->transfers) == 0;
}

static void check_invariants(odx_context *ctx, odx_buffer **b, const model *md, int step)
{
	int i, m;

	/* Copies the runtime started on its own (write-backs, prefetches, spills) finish too
	 * (within TEST_TIMEOUT_MS: a hang guard, 10 s was near a sanitized run's on a loaded box). */
	for (i = 0; i < TEST_TIMEOUT_MS / 100 && !settled(ctx); i++)
		odx__wait_until(ctx, settled, ctx, 100);
	assert_true(settled(ctx));
	for (m = 0; m < ctx->nmemnodes; m++)
		if (atomic_load(&ctx->memnodes[m].used) > ctx->memnodes[m].capacity)
			fail_msg("step %d: memory node %d uses %llu of %llu bytes", step, m,
				 (unsigned long long)atomic_load(&ctx->memnodes[m].used),
				 (unsigned long long)ctx->memnodes[m].capacity);
	for (i = 0; i < NBUF; i++) {
		odx_buffer *x = b[i];
		int valid, modified = 0;

		pthread_mutex_lock(&x->lock);
		valid = odx__valid_copies(x);
		for (m = 0; m < ctx->nmemnodes; m++) {
			odx__replica *r = &x->replicas[m];

			modified += atomic_load(&r->state) == ODX__MODIFIED;
			if (r->pins || r->fetching || r->evicting)
				fail_msg("step %d: buffer %d on node %d: pins %u fetching %d evicting %d "
					 "after everything finished",
					 step, i, m, r->pins, r->fetching, r->evicting);
			if (atomic_load(&r->state) != ODX__INVALID && !r->allocated)
				fail_msg("step %d: buffer %d node %d valid but not allocated", step, i, m);
		}
		modified += atomic_load(&x->disk_state) == ODX__MODIFIED;
		pthread_mutex_unlock(&x->lock);
		if (md->written[i] && valid < 1)
			fail_msg("step %d: buffer %d has no valid copy", step, i);
		if (modified > 0 && valid != 1)
			fail_msg("step %d: buffer %d has a MODIFIED copy and %d valid copies", step, i,
				 valid);
	}
}

/* Forces an eviction pass on node m, as if a task needed `need` bytes there. */
static void force_eviction(odx_context *ctx, int m, uint64_t need)
{
	odx__memnode *node = &ctx->memnodes[m];
	odx__copy_job *jobs = NULL;
	char why[256];
	uint64_t used;

	pthread_mutex_lock(&node->lock);
	used = atomic_load(&node->used);
	/* ask for room as if the node were nearly full */
	if (used + need > node->capacity || used > 0) {
		uint64_t want = need + (used > node->capacity / 2 ? used - node->capacity / 2 : 0);

		odx__tier_make_room(ctx, m, want < node->capacity ? want : node->capacity, NULL, &jobs,
				    why, sizeof(why));
	}
	pthread_mutex_unlock(&node->lock);
	odx__copy_start_all(ctx, jobs);
}

static void run_sequence(uint64_t seed, int steps, const char *const *kv)
{
	static model md;
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *fill, *copy;
	odx_buffer *b[NBUF];
	uint32_t host[WORDS];
	int i, s, ndev = odx_device_count(ctx);
	char spill_dir[] = "/tmp/odx-tier-model-XXXXXX";

	(void)spill_dir;
	memset(&md, 0, sizeof(md));
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &copy));
	for (i = 0; i < NBUF; i++)
		assert_ok(odx_buffer_create(ctx, sizeof(host), 0, &b[i]));
	for (s = 0; s < steps; s++) {
		int x = (int)test_rand_below(&seed, NBUF), y = (int)test_rand_below(&seed, NBUF);
		int dev = (int)test_rand_below(&seed, (unsigned)ndev);
		odx_task_opts o = {.grid = {WORDS / 64, 1, 1},
				   .block = {64, 1, 1},
				   .flags = ODX_SUBMIT_ON_DEVICE,
				   .on_device = dev};
		unsigned op = test_rand_below(&seed, 9);

		if (y == x)
			y = (x + 1) % NBUF;
		switch (op) {
		case 0: { /* full host write */
			for (i = 0; i < WORDS; i++)
				host[i] = (uint32_t)test_rand(&seed);
			assert_ok(odx_buffer_write(b[x], 0, host, sizeof(host), TEST_TIMEOUT_MS));
			memcpy(md.data[x], host, sizeof(host));
			md.written[x] = true;
			break;
		}
		case 1: { /* partial host write */
			size_t off = test_rand_below(&seed, WORDS / 2), n = 1 + test_rand_below(&seed, WORDS / 2);

			for (i = 0; i < (int)n; i++)
				host[i] = (uint32_t)test_rand(&seed);
			assert_ok(odx_buffer_write(b[x], off * 4, host, n * 4, TEST_TIMEOUT_MS));
			memcpy(&md.data[x][off], host, n * 4);
			md.written[x] = true;
			break;
		}
		case 2: { /* fill on a device */
			uint32_t v = (uint32_t)test_rand(&seed);

			assert_ok(odx_submit(ctx, fill,
					     (odx_arg[]){ODX_BUF(b[x], ODX_W), ODX_I32((int32_t)v),
							 ODX_I32(WORDS)},
					     3, &o, NULL));
			for (i = 0; i < WORDS; i++)
				md.data[x][i] = v;
			md.written[x] = true;
			break;
		}
		case 3:
		case 4: /* copy on a device */
			assert_ok(odx_submit(ctx, copy,
					     (odx_arg[]){ODX_BUF(b[x], ODX_R), ODX_BUF(b[y], ODX_W),
							 ODX_I32(WORDS)},
					     3, &o, NULL));
			memcpy(md.data[y], md.data[x], sizeof(host));
			md.written[y] = md.written[y] || md.written[x];
			break;
		case 5: /* read and compare */
			assert_ok(odx_buffer_read(b[x], 0, host, sizeof(host), TEST_TIMEOUT_MS));
			if (memcmp(host, md.data[x], sizeof(host)) != 0)
				fail_msg("seed step %d: buffer %d differs from the model", s, x);
			break;
		case 6:
			assert_ok(odx_buffer_wont_use(b[x]));
			break;
		case 7: /* forced eviction on a random node */
			force_eviction(ctx, (int)test_rand_below(&seed, (unsigned)ctx->nmemnodes),
				       sizeof(host));
			break;
		default: /* settle, then check every invariant */
			assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
			check_invariants(ctx, b, &md, s);
			break;
		}
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	check_invariants(ctx, b, &md, steps);
	/* The won't-use hint lasts until a task submitted after it uses the buffer. */
	assert_ok(odx_buffer_wont_use(b[0]));
	assert_true(b[0]->wont_use);
	{
		odx_task_opts o = {.grid = {WORDS / 64, 1, 1}, .block = {64, 1, 1}};

		assert_ok(odx_submit(ctx, fill,
				     (odx_arg[]){ODX_BUF(b[0], ODX_W), ODX_I32(7), ODX_I32(WORDS)}, 3,
				     &o, NULL));
		for (i = 0; i < WORDS; i++)
			md.data[0][i] = 7;
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	pthread_mutex_lock(&b[0]->lock);
	assert_false(b[0]->wont_use);
	pthread_mutex_unlock(&b[0]->lock);
	for (i = 0; i < NBUF; i++) {
		assert_ok(odx_buffer_read(b[i], 0, host, sizeof(host), TEST_TIMEOUT_MS));
		if (memcmp(host, md.data[i], sizeof(host)) != 0)
			fail_msg("end: buffer %d differs from the model", i);
		odx_buffer_destroy(b[i]);
	}
	assert_ok(odx_close(ctx));
}

static void test_tiers_model(void **state)
{
	static char dir[] = "/tmp/odx-tier-model-XXXXXX";
	const char *kv[] = {"host.devices",	"2",	  "host.bind",	      "false",
			    "tier.device.limit", "96KiB",  "tier.host.limit",  "160KiB",
			    "tier.disk.limit",	 "16MiB",  "tier.disk.path",   dir,
			    /* no background eviction: the invariants are checked at quiescent
			     * points, which the monitor would not respect (it is tested elsewhere) */
			    "tier.monitor.start", "100", "tier.monitor.stop", "100",
			    NULL};
	int steps = (int)test_scaled(600, 150);

	(void)state;
	assert_non_null(mkdtemp(dir));
	for (uint64_t seed = 1; seed <= 4; seed++) {
		print_message("seed %llu, %d steps\n", (unsigned long long)seed, steps);
		run_sequence(seed * 0x9e3779b97f4a7c15ull, steps, kv);
	}
	assert_int_equal(rmdir(dir), 0); /* the spill areas were all removed */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tiers_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
