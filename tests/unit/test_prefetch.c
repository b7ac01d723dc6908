/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_prefetch.c - odx_buffer_prefetch, white-box: a request's copy starts when its level allows
 * (NEXT at once with room, IDLE only once its device has nothing queued or running), after the
 * writer it waits for, and lands valid where a later task finds it without copying; a request is
 * cancelled with nothing moved when the plan changes (a later write, a failed writer, the
 * buffer's destruction), and close does not wait for requests that cannot start. Devices are
 * kept busy deterministically by a kernel that blocks until the test opens its gate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core.h"
#include "test_util.h"

#define TIMEOUT_MS TEST_TIMEOUT_MS /* every wait and gate: a hang guard only */
#define N 4096 /* uint32 per buffer */

static atomic_bool gate_open;

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* gate(RW x, i32 v): waits (at most TIMEOUT_MS) for the test to open the gate, then x[i] = v. */
static int k_gate(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (int waited = 0; !atomic_load(&gate_open) && waited < TIMEOUT_MS; waited++)
		sleep_ms(1);
	for (int i = 0; i < N; i++)
		x[i] = (uint32_t)v;
	return 0;
}

/* set(W x, i32 v): x[i] = v. */
static int k_set(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (int i = 0; i < N; i++)
		x[i] = (uint32_t)v;
	return 0;
}

/* sum(R x, W out): out[0] = sum of x. */
static int k_sum(const odx_host_launch *l)
{
	const uint32_t *x = l->buffers[0];
	uint32_t *out = l->buffers[1], s = 0;

	for (int i = 0; i < N; i++)
		s += x[i];
	out[0] = s;
	return 0;
}

static int k_fail(const odx_host_launch *l)
{
	snprintf(l->error, l->error_size, "failed on purpose");
	return 5;
}

static odx_kernel *kernel(odx_context *ctx, const char *name, odx_host_fn fn, odx_access a0,
			  odx_arg_kind k1, odx_access a1)
{
	return test_host_kernel(ctx, name, (odx_param[]){{ODX_ARG_BUFFER, a0, "x"}, {k1, a1, "y"}},
				2, fn);
}

struct fx {
	odx_context *ctx;
	odx_kernel *gate, *set, *sum, *fail;
};

static odx_context *open_ctx(const char *device_limit)
{
	odx_config *cfg;
	odx_context *ctx;

	assert_int_equal(odx_config_create(&cfg), 0);
	assert_int_equal(odx_config_set(cfg, "backends", "host"), 0);
	assert_int_equal(odx_config_set(cfg, "host.devices", "2"), 0);
	assert_int_equal(odx_config_set(cfg, "host.threads", "1"), 0);
	assert_int_equal(odx_config_set(cfg, "host.bind", "false"), 0);
	assert_int_equal(odx_config_set(cfg, "tier.device.limit", device_limit), 0);
	assert_int_equal(odx_open(&ctx, cfg), 0);
	odx_config_destroy(cfg);
	return ctx;
}

static int setup(void **state)
{
	static struct fx f;

	atomic_store(&gate_open, false);
	f.ctx = open_ctx("0");
	f.gate = kernel(f.ctx, "gate", k_gate, ODX_RW, ODX_ARG_I32, 0);
	f.set = kernel(f.ctx, "set", k_set, ODX_W, ODX_ARG_I32, 0);
	f.sum = kernel(f.ctx, "sum", k_sum, ODX_R, ODX_ARG_BUFFER, ODX_W);
	f.fail = kernel(f.ctx, "fail", k_fail, ODX_W, ODX_ARG_I32, 0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	atomic_store(&gate_open, true);
	assert_int_equal(odx_close(f->ctx), 0);
	return 0;
}

static void submit_on(struct fx *f, odx_kernel *k, int device, odx_arg a0, odx_arg a1)
{
	assert_int_equal(
		odx_submit(f->ctx, k, (odx_arg[]){a0, a1}, 2,
			   &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = device},
			   NULL),
		0);
}

static int node_of(odx_context *ctx, int device)
{
	return ctx->devices[device].memnode;
}

static bool valid_on(odx_buffer *b, int m)
{
	bool v;

	pthread_mutex_lock(&b->lock);
	v = b->replicas[m].allocated && !b->replicas[m].fetching &&
	    atomic_load(&b->replicas[m].state) != ODX__INVALID;
	pthread_mutex_unlock(&b->lock);
	return v;
}

/* Polls (the copy completes on a backend thread) until b is valid on node m. */
static void wait_valid(odx_buffer *b, int m)
{
	for (int waited = 0; !valid_on(b, m); waited++) {
		if (waited >= TIMEOUT_MS)
			fail_msg("buffer %llu never became valid on memory node %d (%d requests "
				 "pending; demand fetches on the devices: %d, %d)",
				 (unsigned long long)b->id, m, atomic_load(&b->ctx->pf_pending),
				 (int)atomic_load(&b->ctx->devices[0].demand_fetches),
				 (int)atomic_load(&b->ctx->devices[1].demand_fetches));
		sleep_ms(1);
	}
}

static bool allocated_on(odx_buffer *b, int m)
{
	bool a;

	pthread_mutex_lock(&b->lock);
	a = b->replicas[m].allocated;
	pthread_mutex_unlock(&b->lock);
	return a;
}

static uint64_t cancelled(odx_context *ctx)
{
	return atomic_load(&ctx->pf_cancelled);
}

static uint64_t started(odx_context *ctx)
{
	return atomic_load(&ctx->pf_started);
}

static odx_buffer *host_buffer(odx_context *ctx, uint32_t v)
{
	static uint32_t data[N];
	odx_buffer *b;

	for (int i = 0; i < N; i++)
		data[i] = v;
	assert_int_equal(odx_buffer_create(ctx, sizeof(data), 0, &b), 0);
	assert_int_equal(odx_buffer_write(b, 0, data, sizeof(data), TIMEOUT_MS), 0);
	assert_true(valid_on(b, 0));
	return b;
}

/* NEXT with room starts at once; the task that then reads it there copies nothing. */
static void test_next_lands_where_the_task_reads(void **state)
{
	struct fx *f = *state;
	odx_context *ctx = f->ctx;
	int m1 = node_of(ctx, 1);
	odx_buffer *b = host_buffer(ctx, 3), *out;
	uint64_t copies, s0 = started(ctx);
	uint32_t got = 0;

	assert_int_equal(odx_buffer_create(ctx, sizeof(uint32_t) * N, 0, &out), 0);
	assert_int_equal(odx_buffer_prefetch(b, 1, ODX_PREFETCH_NEXT), 0);
	wait_valid(b, m1);
	assert_int_equal(started(ctx), s0 + 1);
	assert_true(valid_on(b, 0)); /* a copy: the host's stays */
	copies = atomic_load(&ctx->copies);
	submit_on(f, f->sum, 1, ODX_BUF(b, ODX_R), ODX_BUF(out, ODX_W));
	assert_int_equal(odx_wait_all(ctx, TIMEOUT_MS), 0);
	assert_int_equal(atomic_load(&ctx->copies), copies); /* b was there already */
	assert_int_equal(odx_buffer_read(out, 0, &got, sizeof(got), TIMEOUT_MS), 0);
	assert_int_equal(got, 3u * N);
	assert_int_equal(odx_buffer_destroy(b), 0);
	assert_int_equal(odx_buffer_destroy(out), 0);
}

/* A request made while the buffer's writer runs starts after it, with the writer's bytes. */
static void test_waits_for_the_writer(void **state)
{
	struct fx *f = *state;
	odx_context *ctx = f->ctx;
	int m0 = node_of(ctx, 0), m1 = node_of(ctx, 1);
	odx_buffer *b = host_buffer(ctx, 1);
	uint32_t got[N];
	uint64_t s0 = started(ctx);

	atomic_store(&gate_open, false);
	submit_on(f, f->gate, 0, ODX_BUF(b, ODX_RW), ODX_I32(9));
	assert_int_equal(odx_buffer_prefetch(b, 1, ODX_PREFETCH_NOW), 0);
	sleep_ms(50); /* long enough for a wrongly eager start; the check cannot pass by timing */
	assert_false(allocated_on(b, m1));
	assert_int_equal(started(ctx), s0);
	atomic_store(&gate_open, true);
	wait_valid(b, m1);
	assert_int_equal(started(ctx), s0 + 1);
	assert_true(valid_on(b, m0));
	assert_int_equal(odx_buffer_read(b, 0, got, sizeof(got), TIMEOUT_MS), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(got[i], 9u);
	assert_int_equal(odx_buffer_destroy(b), 0);
}

/* IDLE waits while its device has work, and starts once it has none. */
static void test_idle_waits_for_an_idle_device(void **state)
{
	struct fx *f = *state;
	odx_context *ctx = f->ctx;
	int m1 = node_of(ctx, 1);
	odx_buffer *b = host_buffer(ctx, 4), *busy = host_buffer(ctx, 0);
	uint64_t s0 = started(ctx);

	atomic_store(&gate_open, false);
	submit_on(f, f->gate, 1, ODX_BUF(busy, ODX_RW), ODX_I32(1));
	assert_int_equal(odx_buffer_prefetch(b, 1, ODX_PREFETCH_IDLE), 0);
	sleep_ms(50);
	assert_false(allocated_on(b, m1));
	assert_int_equal(started(ctx), s0);
	atomic_store(&gate_open, true);
	wait_valid(b, m1);
	assert_int_equal(started(ctx), s0 + 1);
	assert_int_equal(odx_buffer_destroy(b), 0);
	assert_int_equal(odx_buffer_destroy(busy), 0);
}

/* Plan changes before the copy starts: nothing moves. */
static void test_cancelled_when_the_plan_changes(void **state)
{
	struct fx *f = *state;
	odx_context *ctx = f->ctx;
	int m1 = node_of(ctx, 1);
	odx_buffer *written = host_buffer(ctx, 5), *gone = host_buffer(ctx, 6),
		   *failed = host_buffer(ctx, 7), *busy = host_buffer(ctx, 0);
	uint32_t fresh[N] = {0};
	uint64_t c0 = cancelled(ctx), s0 = started(ctx);

	atomic_store(&gate_open, false);
	submit_on(f, f->gate, 1, ODX_BUF(busy, ODX_RW), ODX_I32(1));
	/* written again after the request */
	assert_int_equal(odx_buffer_prefetch(written, 1, ODX_PREFETCH_IDLE), 0);
	assert_int_equal(odx_buffer_write(written, 0, fresh, sizeof(fresh), TIMEOUT_MS), 0);
	/* destroyed */
	assert_int_equal(odx_buffer_prefetch(gone, 1, ODX_PREFETCH_IDLE), 0);
	assert_int_equal(odx_buffer_destroy(gone), 0);
	/* its writer fails (on device 0, behind nothing: it fails at once or soon) */
	submit_on(f, f->fail, 0, ODX_BUF(failed, ODX_W), ODX_I32(0));
	assert_int_equal(odx_buffer_prefetch(failed, 1, ODX_PREFETCH_NOW), 0);
	atomic_store(&gate_open, true);
	assert_int_not_equal(odx_wait_all(ctx, TIMEOUT_MS), ODX_ETIMEDOUT);
	for (int waited = 0; cancelled(ctx) < c0 + 3 && waited < TIMEOUT_MS; waited++)
		sleep_ms(1);
	assert_int_equal(cancelled(ctx), c0 + 3);
	assert_int_equal(started(ctx), s0);
	assert_false(allocated_on(written, m1));
	assert_false(allocated_on(failed, m1));
	assert_int_equal(atomic_load(&ctx->pf_pending), 0);
	assert_int_equal(odx_buffer_destroy(written), 0);
	assert_int_equal(odx_buffer_destroy(failed), 0);
	assert_int_equal(odx_buffer_destroy(busy), 0);
}

static void test_bad_arguments(void **state)
{
	struct fx *f = *state;
	odx_buffer *b = host_buffer(f->ctx, 1);

	assert_int_equal(odx_buffer_prefetch(NULL, 0, ODX_PREFETCH_NOW), ODX_EINVAL);
	assert_int_equal(odx_buffer_prefetch(b, 2, ODX_PREFETCH_NOW), ODX_EINVAL);
	assert_non_null(strstr(odx_last_error(f->ctx), "device 2 does not exist"));
	assert_int_equal(odx_buffer_prefetch(b, -1, ODX_PREFETCH_NOW), ODX_EINVAL);
	assert_int_equal(odx_buffer_prefetch(b, 0, (odx_prefetch_level)4), ODX_EINVAL);
	assert_int_equal(odx_buffer_destroy(b), 0);
}

/* A request that can never start (no room below the watermark, NEXT never evicts) does not
 * hold up odx_close, and leaves nothing behind (ASan checks the leak). */
static void test_close_with_a_request_waiting(void **state)
{
	odx_context *ctx = open_ctx("64KiB");
	odx_buffer *fill, *b;
	odx_kernel *set = kernel(ctx, "set", k_set, ODX_W, ODX_ARG_I32, 0);
	uint32_t *big = calloc(16384, sizeof(uint32_t));

	(void)state;
	assert_non_null(big);
	/* 60 KiB of device 1's 64 KiB in use by an idle copy */
	assert_int_equal(odx_buffer_create(ctx, 60 << 10, 0, &fill), 0);
	assert_int_equal(odx_submit(ctx, set, (odx_arg[]){ODX_BUF(fill, ODX_W), ODX_I32(1)}, 2,
				    &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 1},
				    NULL),
			 0);
	assert_int_equal(odx_wait_all(ctx, TIMEOUT_MS), 0);
	assert_int_equal(odx_buffer_create(ctx, 16384 * sizeof(uint32_t), 0, &b), 0);
	assert_int_equal(odx_buffer_write(b, 0, big, 16384 * sizeof(uint32_t), TIMEOUT_MS), 0);
	assert_int_equal(odx_buffer_prefetch(b, 1, ODX_PREFETCH_NEXT), 0);
	sleep_ms(20);
	assert_int_equal(atomic_load(&ctx->pf_pending), 1);
	free(big);
	assert_int_equal(odx_close(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_next_lands_where_the_task_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_waits_for_the_writer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_waits_for_an_idle_device, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_when_the_plan_changes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
		cmocka_unit_test(test_close_with_a_request_waiting),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
