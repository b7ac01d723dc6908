/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_hooks.c - white box: the evict, prefetch and place_rank seams (policy.h) as the tier
 * manager and the fabric call them, on a running context with synthetic candidate arrays. Every
 * answer is validated by C: invalid indices, duplicates, wrong types, an overrun budget or a
 * missing hook make the seam return < 0 (the caller's default) and never reach the caller.
 * place_rank gives the same answer in two contexts (two ranks) whatever happened before; on_tick
 * runs every policy.tick_ms; the seams are safe to call while tasks are being placed.
 *
 *	test_policy_hooks POLICIES_DIR
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core.h"
#include "policy.h"
#include "test_util.h"

static const char *policies_dir;
static char tmpdir[256];

static void write_policy(char *path, size_t len, const char *name, const char *text)
{
	FILE *f;

	snprintf(path, len, "%s/%s.lua", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 14];

static void capture_log(void *user, odx_log_level level, const char *msg)
{
	size_t n;

	(void)user;
	(void)level;
	pthread_mutex_lock(&log_lock);
	n = strlen(log_text);
	snprintf(log_text + n, sizeof(log_text) - n, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
}

static odx_context *open_policy(const char *policy, const char *tick_ms)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "host.devices", "2"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, "policy", policy));
	assert_ok(odx_config_set(cfg, "policy.budget", "2000"));
	assert_ok(odx_config_set(cfg, "policy.tick_ms", tick_ms ? tick_ms : "0"));
	assert_ok(odx_config_set(cfg, "log", "info"));
	assert_ok(odx_config_set_log(cfg, capture_log, NULL));
	log_text[0] = '\0';
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open(policy = %s): %s: %s", policy, odx_err_name(rc),
			 odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

static odx_context *open_shipped(const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s.lua", policies_dir, name);
	return open_policy(path, NULL);
}

/* Four candidates: 1 oldest and dirty, 2 clean and old, 3 wanted, 4 clean and new. */
static const odx__evict_cand cands[] = {
	{.buffer_id = 10, .bytes = 100, .last_use_ns = 1000, .dirty = true},
	{.buffer_id = 11, .bytes = 100, .last_use_ns = 2000},
	{.buffer_id = 12, .bytes = 100, .last_use_ns = 500, .priority = 3},
	{.buffer_id = 13, .bytes = 100, .last_use_ns = 9000},
};

static void test_no_policy(void **state)
{
	odx_context *ctx = open_policy("least_loaded", NULL);
	odx__rank_task rt = {.task_id = 1, .kernel = "k"};
	int order[4], rank[1];

	(void)state;
	assert_true(odx__policy_evict(ctx, 0, 100, cands, 4, order) < 0);
	assert_true(odx__policy_prefetch(ctx, NULL, 0, order) < 0);
	assert_true(odx__policy_place_rank(ctx, &rt, 1, 2, rank) < 0);
	odx__policy_set_bandwidth(ctx, 0, 0, 1e9); /* no-op */
	assert_ok(odx_close(ctx));
}

static void test_lru_through_seam(void **state)
{
	odx_context *ctx = open_shipped("lru");
	uint64_t ids[] = {1}, miss[] = {64};
	odx__prefetch_task w = {.task_id = 1, .nbufs = 1, .buffer_ids = ids, .missing_bytes = miss};
	int order[4];

	(void)state;
	assert_int_equal(odx__policy_evict(ctx, 0, 150, cands, 4, order), 2);
	assert_int_equal(order[0], 1); /* clean and oldest */
	assert_int_equal(order[1], 3); /* clean, newer */
	assert_int_equal(odx__policy_evict(ctx, 0, 400, cands, 4, order), 4);
	assert_int_equal(order[2], 0); /* dirty */
	assert_int_equal(order[3], 2); /* wanted */
	assert_int_equal(odx__policy_evict(ctx, 0, 1, cands, 0, order), 0);
	/* lru has no prefetch nor place_rank: the caller's default. */
	assert_int_equal(odx__policy_prefetch(ctx, &w, 1, order), ODX_ENOSYS);
	assert_int_equal(odx__policy_failures(ctx->policy), 0);
	assert_ok(odx_close(ctx));
}

static void test_lookahead_through_seam(void **state)
{
	odx_context *ctx = open_shipped("lookahead");
	uint64_t ids[3][2] = {{1, 2}, {3, 4}, {5, 6}};
	uint64_t miss[3][2] = {{64, 0}, {0, 0}, {1 << 20, 1 << 20}};
	odx__prefetch_task w[3];
	int order[3], i;

	(void)state;
	for (i = 0; i < 3; i++)
		w[i] = (odx__prefetch_task){.task_id = 100 + (uint64_t)i, .device = i % 2, .nbufs = 2,
					    .buffer_ids = ids[i], .missing_bytes = miss[i]};
	/* Task 1 has nothing missing; task 2 (device 0, behind task 0) must start fetching first:
	 * 2 MiB take ~210 us at the nominal 10 GB/s. */
	assert_int_equal(odx__policy_prefetch(ctx, w, 3, order), 2);
	assert_int_equal(order[0], 2);
	assert_int_equal(order[1], 0);
	/* A device index out of range is refused before Lua sees it. */
	w[0].device = 7;
	assert_int_equal(odx__policy_prefetch(ctx, w, 3, order), ODX_EINVAL);
	assert_int_equal(odx__policy_failures(ctx->policy), 0);
	assert_ok(odx_close(ctx));
}

/* Every wrong answer falls back (< 0) and counts as a failure; a right one after it works. */
static void test_invalid_answers(void **state)
{
	static const char *const bodies[] = {
		"out.order[1] = 0",                      /* out of range (1-based) */
		"out.order[1] = 5",                      /* past n */
		"out.order[1] = 2; out.order[2] = 2",    /* duplicate */
		"out.order[1] = 'two'",                  /* not a number */
		"out.order[1] = 1.5",                    /* not an integer */
		"out.order[1] = 1; return 'all'",        /* count of the wrong type */
		"out.order[1] = 1; return 3",            /* count past the answers given */
		"error('evict broke')",                  /* runtime error */
		"while true do end",                     /* budget */
		"local t = {} for i = 1, 1e9 do t[i] = i end", /* memory */
	};
	char text[512], path[512];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		odx_context *ctx;
		int order[4] = {-9, -9, -9, -9};
		uint64_t before;

		snprintf(text, sizeof(text),
			 "local P = { api = 1 }\n"
			 "function P.place(batch, out) end\n"
			 "function P.evict(need, c, out)\n"
			 "\tif need == 1 then out.order[1] = 4 return 1 end\n"
			 "\t%s\n"
			 "end\n"
			 "return P\n",
			 bodies[i]);
		write_policy(path, sizeof(path), "bad_evict", text);
		ctx = open_policy(path, NULL);
		before = odx__policy_failures(ctx->policy);
		if (odx__policy_evict(ctx, 0, 100, cands, 4, order) >= 0)
			fail_msg("case %zu (%s): accepted", i, bodies[i]);
		assert_int_equal(odx__policy_failures(ctx->policy), before + 1);
		/* The state survives: a good answer is taken again. */
		assert_int_equal(odx__policy_evict(ctx, 0, 1, cands, 4, order), 1);
		assert_int_equal(order[0], 3);
		assert_ok(odx_close(ctx));
	}
}

/* place_rank: the same batch gives the same ranks in two contexts, although the second drew
 * random numbers and placed tasks before (its history differs). */
static const char rank_policy[] =
	"local P = { api = 1 }\n"
	"function P.place(batch, out)\n"
	"\tfor i = 1, batch.n do out.device[i] = odx.random(batch.ndevices) end\n"
	"end\n"
	"function P.evict(need, c, out) odx.random() odx.random() return 0 end\n"
	"function P.place_rank(batch, out)\n"
	"\tfor i = 1, batch.n do\n"
	"\t\tif batch.kernel[i] == 'loop' then while true do end end\n"
	"\t\tif batch.kernel[i] == 'bad' then out.rank[i] = batch.nranks + 1\n"
	"\t\telseif batch.kernel[i] == 'owner' then out.rank[i] = 0\n"
	"\t\telse out.rank[i] = odx.random(batch.nranks) end\n"
	"\tend\n"
	"end\n"
	"return P\n";

static void fill_rank_batch(odx__rank_task *b, int n, const char *kernel)
{
	static const int owner[] = {0, 1};
	static const uint64_t bytes[] = {64, 128};
	int i;

	for (i = 0; i < n; i++)
		b[i] = (odx__rank_task){.task_id = 1000 + (uint64_t)i * 7, .kernel = kernel,
					.bytes = 192, .nbufs = 2, .owner_rank = owner,
					.buf_bytes = bytes};
}

static void test_place_rank_deterministic(void **state)
{
	enum { N = 64, RANKS = 5 };
	odx__rank_task b[N];
	odx_context *r0, *r1;
	char path[512];
	int out0[N], out1[N], order[4], i, spread = 0;

	(void)state;
	write_policy(path, sizeof(path), "ranks", rank_policy);
	r0 = open_policy(path, NULL);
	r1 = open_policy(path, NULL);
	fill_rank_batch(b, N, "k");
	/* Another history on rank 1: random numbers drawn by other hooks. */
	for (i = 0; i < 10; i++)
		assert_int_equal(odx__policy_evict(r1, 0, 1, cands, 4, order), 0);
	assert_int_equal(odx__policy_place_rank(r0, b, N, RANKS, out0), N);
	assert_int_equal(odx__policy_place_rank(r1, b, N, RANKS, out1), N);
	for (i = 0; i < N; i++) {
		assert_int_equal(out0[i], out1[i]);
		assert_true(out0[i] >= 0 && out0[i] < RANKS);
		spread |= 1 << out0[i];
	}
	assert_true(spread != 1 && spread != 2); /* random, not constant */
	/* The same call again: still the same (seeded from the batch, not from history). */
	assert_int_equal(odx__policy_place_rank(r0, b, N, RANKS, out1), N);
	assert_memory_equal(out0, out1, sizeof(out0));

	/* 0: owner-computes for that entry, not a failure. */
	fill_rank_batch(b, 2, "owner");
	assert_int_equal(odx__policy_place_rank(r0, b, 2, RANKS, out0), 0);
	assert_int_equal(out0[0], -1);
	assert_int_equal(odx__policy_failures(r0->policy), 0);
	/* An invalid rank: that entry falls back, and the call counts as failed. */
	fill_rank_batch(b, 3, "k");
	b[1].kernel = "bad";
	assert_int_equal(odx__policy_place_rank(r0, b, 3, RANKS, out0), 2);
	assert_int_equal(out0[1], -1);
	assert_true(out0[0] >= 0 && out0[2] >= 0);
	assert_int_equal(odx__policy_failures(r0->policy), 1);
	/* An endless loop stops on the instruction budget (the same on every rank). */
	fill_rank_batch(b, 1, "loop");
	assert_true(odx__policy_place_rank(r0, b, 1, RANKS, out0) < 0);
	assert_true(odx__policy_place_rank(r1, b, 1, RANKS, out0) < 0);
	assert_int_equal(odx__policy_failures(r0->policy), 2);
	/* Still usable, still agreeing. */
	fill_rank_batch(b, N, "k");
	assert_int_equal(odx__policy_place_rank(r0, b, N, RANKS, out0), N);
	assert_int_equal(odx__policy_place_rank(r1, b, N, RANKS, out1), N);
	assert_memory_equal(out0, out1, sizeof(out0));
	assert_ok(odx_close(r0));
	assert_ok(odx_close(r1));
}

/* on_tick runs on its own every policy.tick_ms; evict reports how many ticks it saw. */
static void test_on_tick(void **state)
{
	static const char text[] = "local P = { api = 1 }\n"
				   "local ticks, seen_devices = 0, 0\n"
				   "function P.place(batch, out) end\n"
				   "function P.on_tick(s)\n"
				   "\tticks = ticks + 1\n"
				   "\tseen_devices = s.ndevices\n"
				   "\tassert(s.queue[1] >= 0 and s.done[2] >= 0 and s.now_us > 0)\n"
				   "end\n"
				   "function P.evict(need, c, out)\n"
				   "\tif ticks >= 3 and seen_devices == 2 then out.order[1] = 2 end\n"
				   "end\n"
				   "return P\n";
	char path[512];
	odx_context *ctx;
	int order[4], i, got = -1;

	(void)state;
	write_policy(path, sizeof(path), "ticks", text);
	ctx = open_policy(path, "5");
	/* Until 3 ticks were seen (tick_ms 5): a hang guard of TEST_TIMEOUT_MS, not a deadline
	 * (a loaded machine under ASan may take far more than 3 x 5 ms to run them). */
	for (i = 0; i < TEST_TIMEOUT_MS / 5 && got != 1; i++) {
		usleep(5000);
		got = odx__policy_evict(ctx, 0, 1, cands, 4, order);
	}
	assert_int_equal(got, 1);
	assert_int_equal(order[0], 1);
	assert_int_equal(odx__policy_failures(ctx->policy), 0);
	assert_ok(odx_close(ctx));
}

/* Seams called from another thread while tasks are placed through the same Lua state: no
 * deadlock, no lost task, every answer valid. */
static _Atomic bool stop_caller;

static void *evict_caller(void *arg)
{
	odx_context *ctx = arg;
	int order[4];
	long calls = 0;

	while (!atomic_load(&stop_caller)) {
		int k = odx__policy_evict(ctx, 0, 250, cands, 4, order);

		assert_true(k == 3);
		calls++;
	}
	return (void *)calls;
}

static int inc_kernel(const odx_host_launch *l)
{
	uint32_t *a = l->buffers[0];

	a[0]++;
	return 0;
}

static void test_seams_while_placing(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}};
	odx_context *ctx = open_shipped("lru");
	odx_kernel *k = test_host_kernel(ctx, "inc", params, 1, inc_kernel);
	odx_buffer *bufs[8];
	pthread_t th;
	void *calls;
	uint32_t v;
	int i, j;

	(void)state;
	for (j = 0; j < 8; j++)
		assert_ok(odx_buffer_create(ctx, sizeof(uint32_t), 0, &bufs[j]));
	atomic_store(&stop_caller, false);
	assert_int_equal(pthread_create(&th, NULL, evict_caller, ctx), 0);
	for (i = 0; i < 2000; i++) {
		odx_arg arg = ODX_BUF(bufs[i % 8], ODX_RW);

		assert_ok(odx_submit(ctx, k, &arg, 1, NULL, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	atomic_store(&stop_caller, true);
	pthread_join(th, &calls);
	assert_true((long)calls > 0);
	for (j = 0; j < 8; j++) {
		assert_ok(odx_buffer_read(bufs[j], 0, &v, sizeof(v), TEST_TIMEOUT_MS));
		assert_int_equal(v, 2000 / 8);
		assert_ok(odx_buffer_destroy(bufs[j]));
	}
	assert_int_equal(odx__policy_failures(ctx->policy), 0);
	assert_ok(odx_close(ctx));
}

/* Ready tasks wait while both devices are busy and are placed in batches (a worker that runs
 * low, 32 waiting, or the tick): every task still runs, chains stay exact, batches are big. */
static int spin_kernel(const odx_host_launch *l)
{
	volatile uint32_t *a = l->buffers[0];
	uint64_t until = odx__now_ns() + 2000;

	while (odx__now_ns() < until)
		;
	a[0]++;
	return 0;
}

static void test_deferred_batches(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}};
	char path[512];
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *bufs[16];
	const char *p;
	double per_call = 0;
	uint32_t v;
	int i, j;

	(void)state;
	snprintf(path, sizeof(path), "%s/eager.lua", policies_dir);
	ctx = open_policy(path, "100");
	k = test_host_kernel(ctx, "spin", params, 1, spin_kernel);
	for (j = 0; j < 16; j++)
		assert_ok(odx_buffer_create(ctx, sizeof(uint32_t), 0, &bufs[j]));
	/* 16 chains of 200, interleaved: plenty of ready tasks while both devices are busy. */
	for (i = 0; i < 3200; i++) {
		odx_arg arg = ODX_BUF(bufs[i % 16], ODX_RW);

		assert_ok(odx_submit(ctx, k, &arg, 1, NULL, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (j = 0; j < 16; j++) {
		assert_ok(odx_buffer_read(bufs[j], 0, &v, sizeof(v), TEST_TIMEOUT_MS));
		assert_int_equal(v, 200);
		assert_ok(odx_buffer_destroy(bufs[j]));
	}
	assert_ok(odx_close(ctx));
	p = strstr(log_text, " place calls for ");
	assert_non_null(p);
	p = strstr(p, "tasks (");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "tasks (%lf a call)", &per_call), 1);
	print_message("deferred placement: %.1f tasks a place call\n", per_call);
	assert_true(per_call > 1.5);
}

/* The inputs a batch keeps between calls follow what changed: kernels destroyed and made again
 * under other names, tags of reused task slots. The policy checks each task's kernel against
 * its tag (set to the kernel's name) and fails the call otherwise. Under ASan this also checks
 * that nothing compares against a destroyed kernel's name. */
static int noop_kernel(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

static void test_inputs_follow_changes(void **state)
{
	static const char text[] =
		"local P = { api = 1 }\n"
		"function P.place(batch, out)\n"
		"\tfor i = 1, batch.n do\n"
		"\t\tlocal k, t = batch.kernel[i], batch.tag[i]\n"
		"\t\tassert(k:sub(1, 63) == t, k .. ' ~= ' .. t) -- tags keep 63 characters\n"
		"\t\tout.device[i] = 1\n"
		"\tend\n"
		"end\n"
		"return P\n";
	/* the third name in parentheses: one literal on two lines, not a missing comma */
	static const char *const names[] = {"alpha", "b",
					    ("a-much-longer-kernel-name-than-the-"
					     "sixty-three-characters-a-shadow-keeps-0123456789")};
	char path[512];
	odx_context *ctx;
	int round, i;

	(void)state;
	write_policy(path, sizeof(path), "tags", text);
	ctx = open_policy(path, NULL);
	for (round = 0; round < 9; round++) {
		const char *name = names[round % 3];
		odx_kernel *k = test_host_kernel(ctx, name, NULL, 0, noop_kernel);
		odx_task_opts o = {.tag = name};

		for (i = 0; i < 20; i++)
			assert_ok(odx_submit(ctx, k, NULL, 0, &o, NULL));
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		assert_ok(odx_kernel_destroy(k));
	}
	assert_int_equal(odx__policy_failures(ctx->policy), 0);
	assert_ok(odx_close(ctx));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_policy),
		cmocka_unit_test(test_lru_through_seam),
		cmocka_unit_test(test_lookahead_through_seam),
		cmocka_unit_test(test_invalid_answers),
		cmocka_unit_test(test_place_rank_deterministic),
		cmocka_unit_test(test_on_tick),
		cmocka_unit_test(test_seams_while_placing),
		cmocka_unit_test(test_deferred_batches),
		cmocka_unit_test(test_inputs_follow_changes),
	};
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s POLICIES_DIR\n", argv[0]);
		return 2;
	}
	policies_dir = argv[1];
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/odx-policy-hooks-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	for (const char *n = "bad_evict\0ranks\0ticks\0tags\0"; *n; n += strlen(n) + 1) {
		char path[512];

		snprintf(path, sizeof(path), "%s/%s.lua", tmpdir, n);
		unlink(path);
	}
	rmdir(tmpdir);
	return rc;
}
