/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_copy_behind.c - odx_buffer_read and odx_buffer_write queued behind the kernels they wait
 * for (backend ABI 1.5 copy_sync_after), white box: the device's copied_behind counter tells
 * whether the path was taken. Runs on the backend the environment selects (host with its
 * asynchronous compute lane, OpenCL): values after long write-kernel-read chains, a read behind
 * a kernel that fails (the read fails with it and leaves its destination untouched), a write
 * behind a reader that fails (the write stands), and a wait with a timeout (never queued behind: it could not be withdrawn).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core.h"
#include "test_util.h"

enum { N = 4096 }; /* floats */

static bool on_host(void)
{
	const char *b = getenv("ODX_BACKENDS");

	return !b || strcmp(b, "host") == 0;
}

static odx_context *open_ctx(void)
{
	const char *kv[] = {"host.devices", "1", "host.async", "true", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);

	assert_int_equal(odx_device_count(ctx), 1);
	return ctx;
}

static uint64_t copied_behind(odx_context *ctx)
{
	return atomic_load(&ctx->devices[0].copied_behind);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static void axpy(odx_context *ctx, odx_buffer *x, odx_buffer *y, float a)
{
	odx_kernel *k;
	odx_task_opts o = {.grid = {(N + 63) / 64, 1, 1}, .block = {64, 1, 1}};

	assert_ok(odx_kernel_builtin(ctx, "odx.axpy_f32", &k));
	assert_ok(odx_submit(ctx, k,
			     (odx_arg[]){ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(a),
					 ODX_I32(N)},
			     4, &o, NULL));
}

/* write x; y += x; write x again at once (behind the kernel reading it); every tenth round
 * read y (behind the kernel writing it) and check it against the running sum, exactly (small
 * integers in floats). Also a part of x rewritten behind its reader. */
static void test_chains(void **state)
{
	odx_context *ctx = open_ctx();
	float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
	odx_buffer *bx, *by;
	double sum = 0;

	(void)state;
	assert_non_null(x);
	assert_non_null(y);
	assert_ok(odx_buffer_create(ctx, N * sizeof(float), 0, &bx));
	assert_ok(odx_buffer_create(ctx, N * sizeof(float), 0, &by));
	memset(y, 0, N * sizeof(float));
	assert_ok(odx_buffer_write(by, 0, y, N * sizeof(float), -1));
	for (int r = 0; r < 200; r++) {
		for (int i = 0; i < N; i++)
			x[i] = (float)(r % 7 + i % 3);
		assert_ok(odx_buffer_write(bx, 0, x, N * sizeof(float), -1));
		if (r % 5 == 4) {
			/* a part, at an odd offset, behind the kernel that read the old bytes */
			x[17] = 100.0f;
			x[18] = 200.0f;
			assert_ok(odx_buffer_write(bx, 17 * sizeof(float), &x[17],
						   2 * sizeof(float), -1));
		}
		axpy(ctx, bx, by, 1.0f);
		sum += (double)(r % 7);
		if (r % 10 == 9) {
			assert_ok(odx_buffer_read(by, 0, y, N * sizeof(float), -1));
			for (int i = 0; i < N; i++) {
				double want = sum + (double)((r + 1) * (i % 3));

				if (i == 17 || i == 18)
					continue;
				if ((double)y[i] != want)
					fail_msg("round %d, y[%d] = %g, expected %g", r, i,
						 (double)y[i], want);
			}
		}
	}
	/* Elements 17 and 18: one round in five added the rewritten values instead. */
	assert_ok(odx_buffer_read(by, 17 * sizeof(float), y, 2 * sizeof(float), -1));
	{
		double s17 = 0, s18 = 0;

		for (int r = 0; r < 200; r++) {
			s17 += r % 5 == 4 ? 100.0 : (double)(r % 7 + 17 % 3);
			s18 += r % 5 == 4 ? 200.0 : (double)(r % 7 + 18 % 3);
		}
		assert_true((double)y[0] == s17);
		assert_true((double)y[1] == s18);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	/* OpenCL: the submitting thread launches each kernel itself, so the next read or write
	 * always finds it queued. A host device's worker launches it, and may not have yet. */
	if (!on_host())
		assert_true(copied_behind(ctx) > 0);
	print_message("copied behind: %llu\n", (unsigned long long)copied_behind(ctx));
	odx_buffer_destroy(bx);
	odx_buffer_destroy(by);
	odx_close(ctx);
	free(x);
	free(y);
}

static _Atomic int started;
static odx__task *_Atomic gated; /* the task of the kernel the test holds (its event) */

/* True once a read or write submitted after the gated task has been queued behind it on the
 * device's lane (odx_buffer_read/write set its chain to CHAIN_BEHIND): the event the kernels
 * below wait for before they end, so the access is still behind an unfinished kernel then. */
static bool behind_queued(void)
{
	odx__task *t = atomic_load(&gated);
	bool yes = false;

	if (t == NULL)
		return false;
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < t->nsucc && !yes; i++)
		yes = atomic_load(&t->succ[i].task->chain) == ODX__CHAIN_BEHIND;
	pthread_mutex_unlock(&t->lock);
	return yes;
}

/* Holds the kernel until an access is queued behind it (at most 10 s: a hang guard; the test's
 * counter check then fails). */
static void hold_until_behind(void)
{
	atomic_store(&started, 1);
	for (int i = 0; i < 10000 && !behind_queued(); i++)
		sleep_ms(1);
}

/* slow_fail(W y): says it started, stays until the test's read is queued behind it, fails. */
static int slow_fail(const odx_host_launch *l)
{
	hold_until_behind();
	snprintf(l->error, l->error_size, "failed on purpose");
	return 5;
}

/* slow_fail_read(R x, W out): the same, reading x (the test's write goes behind it). */
static int slow_fail_read(const odx_host_launch *l)
{
	hold_until_behind();
	snprintf(l->error, l->error_size, "failed on purpose");
	return 6;
}

static _Atomic int released;

/* gated_fail(W y): fails once the test lets it (at most 10 s later). */
static int gated_fail(const odx_host_launch *l)
{
	atomic_store(&started, 1);
	for (int i = 0; i < 10000 && !atomic_load(&released); i++)
		sleep_ms(1);
	snprintf(l->error, l->error_size, "failed on purpose");
	return 7;
}

/* Submits the gated kernel `k` and waits (at most 10 s) until it runs and its device took it
 * (task->queued: its launch returned pending): only then can a copy go behind it. */
static void submit_gated(odx_context *ctx, odx_kernel *k, odx_arg *args, int nargs)
{
	odx_event *ev = NULL;
	odx__task *t;

	atomic_store(&started, 0);
	assert_ok(odx_submit(ctx, k, args, nargs, NULL, &ev));
	t = (odx__task *)ev; /* an event is a reference to its task */
	atomic_store(&gated, t);
	for (int i = 0; i < 10000 && !(atomic_load(&started) && atomic_load(&t->queued)); i++)
		sleep_ms(1);
	assert_true(atomic_load(&started));
	assert_true(atomic_load(&t->queued));
	/* ours stays referenced until the access is done; the test drops it after */
}

/* Drops the gated task's reference once it finished. */
static void release_gated(void)
{
	odx__task *t = atomic_exchange(&gated, NULL);

	assert_true(odx_event_wait((odx_event *)t, TEST_TIMEOUT_MS) != ODX_ETIMEDOUT);
	odx_event_release((odx_event *)t);
}

/* A read queued behind the kernel writing its buffer, which fails: the read fails with it, as
 * it would have waiting for the kernel; and a write behind a failing reader stands. The kernels
 * stay until the access is queued behind them, which is asserted (copied_behind), not retried
 * for: the path is taken whatever the timing. */
static void test_failing_producer(void **state)
{
	static const odx_param wparams[] = {{ODX_ARG_BUFFER, ODX_W, "y"}};
	static const odx_param rparams[] = {{ODX_ARG_BUFFER, ODX_R, "x"},
					    {ODX_ARG_BUFFER, ODX_W, "out"}};
	odx_context *ctx;
	odx_kernel *kw, *kr;
	odx_buffer *bx, *by, *bout;
	float v[N], back[N];
	uint64_t before;

	(void)state;
	if (!on_host())
		skip(); /* host kernels */
	ctx = open_ctx();
	kw = test_host_kernel(ctx, "slow_fail", wparams, 1, slow_fail);
	kr = test_host_kernel(ctx, "slow_fail_read", rparams, 2, slow_fail_read);
	assert_ok(odx_buffer_create(ctx, sizeof(v), 0, &bx));
	assert_ok(odx_buffer_create(ctx, sizeof(v), 0, &by));
	assert_ok(odx_buffer_create(ctx, sizeof(v), 0, &bout));

	submit_gated(ctx, kw, (odx_arg[]){ODX_BUF(by, ODX_W)}, 1);
	for (int i = 0; i < N; i++)
		v[i] = -1.0f;
	before = copied_behind(ctx);
	assert_int_equal(odx_buffer_read(by, 0, v, sizeof(v), -1), ODX_ECANCELED);
	assert_int_equal(copied_behind(ctx), before + 1);
	/* dst untouched, as when the read waits for the kernel */
	for (int i = 0; i < N; i++)
		assert_true(v[i] == -1.0f);
	assert_contains(odx_last_error(ctx), "failed on purpose");
	release_gated();
	odx_wait_all(ctx, TEST_TIMEOUT_MS); /* reports the kernel's failure once */

	for (int i = 0; i < N; i++)
		v[i] = (float)i;
	assert_ok(odx_buffer_write(bx, 0, v, sizeof(v), -1));
	submit_gated(ctx, kr, (odx_arg[]){ODX_BUF(bx, ODX_R), ODX_BUF(bout, ODX_W)}, 2);
	for (int i = 0; i < N; i++)
		v[i] = (float)(1000 + i);
	before = copied_behind(ctx);
	assert_ok(odx_buffer_write(bx, 0, v, sizeof(v), -1));
	assert_int_equal(copied_behind(ctx), before + 1);
	assert_ok(odx_buffer_read(bx, 0, back, sizeof(back), TEST_TIMEOUT_MS));
	assert_memory_equal(back, v, sizeof(v));
	release_gated();
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	odx_buffer_destroy(bx);
	odx_buffer_destroy(by);
	odx_buffer_destroy(bout);
	odx_close(ctx);
}

/* With a timeout the read waits for the kernel the usual way (a copy handed to the device
 * cannot be withdrawn when the timeout expires), and the timeout still works. The kernel is on
 * its device's lane first, so without the timeout the read would have gone behind it. */
static void test_timeout_not_behind(void **state)
{
	static const odx_param wparams[] = {{ODX_ARG_BUFFER, ODX_W, "y"}};
	odx_context *ctx;
	odx_kernel *kw;
	odx_buffer *by;
	float v[N];
	uint64_t before;

	(void)state;
	if (!on_host())
		skip();
	ctx = open_ctx();
	kw = test_host_kernel(ctx, "gated_fail", wparams, 1, gated_fail);
	assert_ok(odx_buffer_create(ctx, sizeof(v), 0, &by));
	before = copied_behind(ctx);
	atomic_store(&released, 0);
	submit_gated(ctx, kw, (odx_arg[]){ODX_BUF(by, ODX_W)}, 1);
	assert_int_equal(odx_buffer_read(by, 0, v, sizeof(v), 1), ODX_ETIMEDOUT);
	atomic_store(&released, 1);
	assert_int_equal(odx_buffer_read(by, 0, v, sizeof(v), TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_int_equal(copied_behind(ctx), before);
	release_gated();
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	odx_buffer_destroy(by);
	odx_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chains),
		cmocka_unit_test(test_failing_producer),
		cmocka_unit_test(test_timeout_not_behind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
