/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_combine_far.c - odx.hash_combine's host variant with a far table (kernels/host_combine.c):
 * a grid with records past the near table's 8192 slots + 65536 gives a second table behind it.
 * Through the public API on one host device of one thread (one call with every group): keys
 * spread over more keys than the near table holds are combined by the far table (few rows pass
 * where the same rows pass almost all with the near table alone), a far table too small for the
 * keys lets the rest through, and in every case each row passes to its partition or is counted
 * in exactly one record, and rows and records merged give every key's exact count, sum, minimum
 * and maximum.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

#define NO_PART 0xffffffffu
#define MULT 2654435761u /* keys are id * MULT (odd: one key per id) */
enum { P = 3, NEAR_GROUPS = 32, FAR_GROUPS = 32 + 256 }; /* 8192 records; 8192 + 65536 */

static uint32_t fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* The inverse of an odd u32 modulo 2^32 (Newton's iteration): the id of a key. */
static uint32_t inverse(uint32_t a)
{
	uint32_t x = a;

	for (int i = 0; i < 5; i++)
		x *= 2 - a * x;
	return x;
}

typedef struct agg {
	uint64_t cnt;
	double sum, lo, hi;
} agg;

static void add(agg *a, uint64_t cnt, double sum, double lo, double hi)
{
	if (a->cnt == 0 || lo < a->lo)
		a->lo = lo;
	if (a->cnt == 0 || hi > a->hi)
		a->hi = hi;
	a->cnt += cnt;
	a->sum += sum;
}

static uint64_t word(const uint32_t *v, int r, int q)
{
	return (uint64_t)v[8 * r + 2 * q] | (uint64_t)v[8 * r + 2 * q + 1] << 32;
}

static double f64(uint64_t bits)
{
	double d;

	memcpy(&d, &bits, 8);
	return d;
}

/*
 * n rows over `nkeys` keys (row i has id (i * 7919) % nkeys, so every key comes n / nkeys times
 * spread over the stream) through a grid of `groups`; checks the invariant and the merged
 * aggregates against the rows, and returns the rows that passed through.
 */
static uint64_t combine(int n, uint32_t nkeys, int groups)
{
	const char *kv[] = {"host.devices", "1", "host.threads", "1", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	size_t recs = (size_t)groups * 256;
	uint32_t *keys = malloc(4 * (size_t)n), *vals = malloc(4 * (size_t)n);
	uint32_t *pids = malloc(4 * (size_t)n), *rk = malloc(4 * recs), *rv = malloc(32 * recs);
	uint32_t *rp = malloc(4 * recs), inv = inverse(MULT);
	agg *want = calloc(nkeys, sizeof(*want)), *got = calloc(nkeys, sizeof(*got));
	uint64_t passed = 0;
	odx_buffer *b[6];
	odx_kernel *k;

	assert_true(keys && vals && pids && rk && rv && rp && want && got);
	for (int i = 0; i < n; i++) {
		uint32_t id = (uint32_t)(((uint64_t)i * 7919) % nkeys);
		float f = (float)((i * 13) % 11) - 5.0f; /* -5 .. 5: min and max show */

		keys[i] = id * MULT;
		memcpy(&vals[i], &f, 4);
		add(&want[id], 1, f, f, f);
	}
	size_t bytes[6] = {4 * (size_t)n, 4 * (size_t)n, 4 * (size_t)n, 4 * recs, 32 * recs,
			   4 * recs};
	for (int j = 0; j < 6; j++)
		assert_ok(odx_buffer_create(ctx, bytes[j], 0, &b[j]));
	assert_ok(odx_buffer_write(b[0], 0, keys, bytes[0], TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(b[1], 0, vals, bytes[1], TEST_TIMEOUT_MS));
	assert_ok(odx_kernel_builtin(ctx, "odx.hash_combine", &k));
	odx_task_opts o = {.grid = {(uint32_t)groups, 1, 1}, .block = {1, 1, 1}};
	odx_arg args[] = {ODX_BUF(b[0], ODX_R), ODX_BUF(b[1], ODX_R), ODX_BUF(b[2], ODX_W),
			  ODX_BUF(b[3], ODX_W), ODX_BUF(b[4], ODX_W), ODX_BUF(b[5], ODX_W),
			  ODX_I32(n),		ODX_I32(P),	       ODX_I32(1),
			  ODX_I32(0)};
	assert_ok(odx_submit(ctx, k, args, 10, &o, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b[2], 0, pids, bytes[2], TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b[3], 0, rk, bytes[3], TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b[4], 0, rv, bytes[4], TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b[5], 0, rp, bytes[5], TEST_TIMEOUT_MS));

	for (int i = 0; i < n; i++) {
		float f;

		if (pids[i] == NO_PART)
			continue;
		if (pids[i] != fmix32(keys[i]) % P)
			fail_msg("row %d to partition %u, not %u", i, pids[i], fmix32(keys[i]) % P);
		memcpy(&f, &vals[i], 4);
		add(&got[keys[i] * inv], 1, f, f, f);
		passed++;
	}
	for (size_t r = 0; r < recs; r++) {
		uint64_t cnt = word(rv, (int)r, 0);
		uint32_t id = rk[r] * inv;

		if (cnt == 0) {
			if (rp[r] != NO_PART)
				fail_msg("empty record %zu to partition %u", r, rp[r]);
			continue;
		}
		if (id >= nkeys || rp[r] != fmix32(rk[r]) % P)
			fail_msg("record %zu: key 0x%x (id %u), partition %u", r, rk[r], id, rp[r]);
		add(&got[id], cnt, f64(word(rv, (int)r, 1)), f64(word(rv, (int)r, 2)),
		    f64(word(rv, (int)r, 3)));
	}
	/* the values are small integers: every sum is exact in any order */
	for (uint32_t id = 0; id < nkeys; id++)
		if (got[id].cnt != want[id].cnt || got[id].sum != want[id].sum ||
		    got[id].lo != want[id].lo || got[id].hi != want[id].hi)
			fail_msg("key id %u: count %llu sum %g min %g max %g, want %llu %g %g %g", id,
				 (unsigned long long)got[id].cnt, got[id].sum, got[id].lo, got[id].hi,
				 (unsigned long long)want[id].cnt, want[id].sum, want[id].lo,
				 want[id].hi);
	for (int j = 0; j < 6; j++)
		assert_ok(odx_buffer_destroy(b[j]));
	odx_close(ctx);
	free(keys);
	free(vals);
	free(pids);
	free(rk);
	free(rv);
	free(rp);
	free(want);
	free(got);
	return passed;
}

/* 40000 keys, 15 rows each: the near table (8192 slots) lets most rows through; with the far
 * table behind it (65536 slots) next to none pass. */
static void test_far_table_combines(void **state)
{
	(void)state;
	enum { N = 600000, K = 40000 };
	uint64_t near_only = combine(N, K, NEAR_GROUPS);
	uint64_t with_far = combine(N, K, FAR_GROUPS);

	print_message("rows passed: %llu with the near table alone, %llu with the far table\n",
		      (unsigned long long)near_only, (unsigned long long)with_far);
	assert_true(near_only > N / 2);
	assert_true(with_far < N / 20); /* keys whose 8-slot bucket is full pass: about 2% here */
}

/* 200000 keys, 3 rows each: the far table fills; the rows of keys it has no room for pass. */
static void test_far_table_full(void **state)
{
	(void)state;
	enum { N = 600000, K = 200000 };
	uint64_t passed = combine(N, K, FAR_GROUPS);

	print_message("rows passed with a full far table: %llu of %d\n",
		      (unsigned long long)passed, N);
	assert_true(passed > 0 && passed < (uint64_t)N);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_far_table_combines),
		cmocka_unit_test(test_far_table_full),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
