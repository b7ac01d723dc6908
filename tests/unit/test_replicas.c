/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_replicas.c - white-box test of coherence: the MSI state of every replica after each step
 * of a buffer's life on two host devices, the pins, and the bytes accounted per memory node.
 * Memory nodes: 0 = host RAM, 1 = device 0, 2 = device 1.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"
#include "mem/pool.h"

#define TIMEOUT_MS 60000
#define N 16

enum { I = ODX__INVALID, S = ODX__SHARED, M = ODX__MODIFIED };

static int k_add(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (int i = 0; i < N; i++)
		x[i] += (uint32_t)v;
	return 0;
}

static int k_set(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (int i = 0; i < N; i++)
		x[i] = (uint32_t)v;
	return 0;
}

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
	uint32_t *x = l->buffers[0];

	x[0] = 0xdeadbeef; /* a partial write before failing */
	snprintf(l->error, l->error_size, "failed on purpose");
	return 5;
}

struct fx {
	odx_context *ctx;
	odx_kernel *add, *set, *sum, *fail;
};

static odx_kernel *kernel(odx_context *ctx, const char *name, odx_host_fn fn, odx_access a0,
			  odx_arg_kind k1, odx_access a1)
{
	odx_param p[2] = {{ODX_ARG_BUFFER, a0, "x"}, {k1, a1, "y"}};
	odx_kernel *k = NULL;

	assert_int_equal(odx_kernel_create(ctx, name, p, 2,
					   &(odx_kernel_variant){.backend = ODX_BACKEND_HOST,
								 .format = ODX_FORMAT_HOST_FN,
								 .host_fn = fn},
					   1, &k),
			 0);
	return k;
}

static int setup(void **state)
{
	static struct fx f;
	odx_config *cfg;

	assert_int_equal(odx_config_create(&cfg), 0);
	assert_int_equal(odx_config_set(cfg, "backends", "host"), 0);
	assert_int_equal(odx_config_set(cfg, "host.devices", "2"), 0);
	assert_int_equal(odx_config_set(cfg, "host.threads", "1"), 0);
	assert_int_equal(odx_config_set(cfg, "host.bind", "false"), 0);
	/* The walk below names host RAM's state after every read and write. */
	assert_int_equal(odx_config_set(cfg, "tier.direct_access", "false"), 0);
	assert_int_equal(odx_open(&f.ctx, cfg), 0);
	odx_config_destroy(cfg);
	f.add = kernel(f.ctx, "add", k_add, ODX_RW, ODX_ARG_I32, 0);
	f.set = kernel(f.ctx, "set", k_set, ODX_W, ODX_ARG_I32, 0);
	f.sum = kernel(f.ctx, "sum", k_sum, ODX_R, ODX_ARG_BUFFER, ODX_W);
	f.fail = kernel(f.ctx, "fail", k_fail, ODX_RW, ODX_ARG_I32, 0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	assert_int_equal(odx_close(f->ctx), 0);
	return 0;
}

static void expect_states(odx_buffer *b, int s0, int s1, int s2)
{
	assert_int_equal(atomic_load(&b->replicas[0].state), s0);
	assert_int_equal(atomic_load(&b->replicas[1].state), s1);
	assert_int_equal(atomic_load(&b->replicas[2].state), s2);
	for (int m = 0; m < 3; m++) {
		assert_int_equal(b->replicas[m].pins, 0);
		assert_false(b->replicas[m].fetching);
	}
}

static void run_on(struct fx *f, odx_kernel *k, int device, odx_arg a0, odx_arg a1, int want)
{
	odx_event *ev = NULL;

	assert_int_equal(
		odx_submit(f->ctx, k, (odx_arg[]){a0, a1}, 2,
			   &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = device},
			   &ev),
		0);
	assert_int_equal(odx_event_wait(ev, TIMEOUT_MS), want);
	odx_event_release(ev);
}

static void test_msi_walk(void **state)
{
	struct fx *f = *state;
	uint32_t data[N], got[N];
	odx_buffer *b, *out;

	for (int i = 0; i < N; i++)
		data[i] = (uint32_t)i;
	assert_int_equal(odx_buffer_create(f->ctx, sizeof(data), 0, &b), 0);
	assert_int_equal(odx_buffer_create(f->ctx, sizeof(uint32_t), 0, &out), 0);
	/* New: no copy anywhere, reads as zeros. */
	expect_states(b, I, I, I);
	assert_true(b->zero);

	/* A full write from the host: the host copy is the only valid one. */
	assert_int_equal(odx_buffer_write(b, 0, data, sizeof(data), TIMEOUT_MS), 0);
	expect_states(b, M, I, I);
	assert_false(b->zero);

	/* Read on device 0: fetched there, both copies clean. */
	run_on(f, f->sum, 0, ODX_BUF(b, 0), ODX_BUF(out, 0), 0);
	expect_states(b, S, S, I);

	/* Read-write on device 1: its copy is now the only valid one. */
	run_on(f, f->add, 1, ODX_BUF(b, 0), ODX_I32(100), 0);
	expect_states(b, I, I, M);

	/* The host reads: device 1's copy comes back, both clean. */
	assert_int_equal(odx_buffer_read(b, 0, got, sizeof(got), TIMEOUT_MS), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(got[i], (uint32_t)i + 100);
	expect_states(b, S, I, S);

	/* A write-only task on device 0 needs no fetch and invalidates the rest. */
	run_on(f, f->set, 0, ODX_BUF(b, 0), ODX_I32(7), 0);
	expect_states(b, I, M, I);

	/* A partial host write must fetch first (read-write), then owns the only copy. */
	assert_int_equal(odx_buffer_write(b, 4, &data[1], 4, TIMEOUT_MS), 0);
	expect_states(b, M, I, I);
	assert_int_equal(odx_buffer_read(b, 0, got, 8, TIMEOUT_MS), 0);
	assert_int_equal(got[0], 7);
	assert_int_equal(got[1], 1);

	/* A failed read-write kernel: its (partly written) copy is invalid, the clean one stays. */
	run_on(f, f->fail, 1, ODX_BUF(b, 0), ODX_I32(0), ODX_EKERNEL);
	expect_states(b, S, I, I);
	assert_int_equal(odx_wait_all(f->ctx, TIMEOUT_MS), ODX_EKERNEL);

	/* Memory accounting: b is allocated on every node it visited (copies are kept for reuse
	 * even when invalid), out only on device 0 where sum wrote it; nothing after. A pooled
	 * device node counts what its pool takes: the rounded sizes. */
	assert_int_equal(atomic_load(&f->ctx->memnodes[0].used), sizeof(data));
	assert_int_equal(atomic_load(&f->ctx->memnodes[1].used),
			 odx__pool_charge(f->ctx->memnodes[1].pool, sizeof(data)) +
				 odx__pool_charge(f->ctx->memnodes[1].pool, sizeof(uint32_t)));
	assert_int_equal(atomic_load(&f->ctx->memnodes[2].used),
			 odx__pool_charge(f->ctx->memnodes[2].pool, sizeof(data)));
	assert_int_equal(odx_buffer_destroy(b), 0);
	assert_int_equal(odx_buffer_destroy(out), 0);
	assert_int_equal(odx_wait_all(f->ctx, TIMEOUT_MS), 0);
	for (int m = 0; m < 3; m++)
		assert_int_equal(atomic_load(&f->ctx->memnodes[m].used), 0);
}

/* Dependency tracking keeps references to few tasks: the last writer and readers since. */
static void test_tracking_is_bounded(void **state)
{
	struct fx *f = *state;
	odx_buffer *b, *out;

	assert_int_equal(odx_buffer_create(f->ctx, N * sizeof(uint32_t), 0, &b), 0);
	assert_int_equal(odx_buffer_create(f->ctx, sizeof(uint32_t), 0, &out), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(odx_submit(f->ctx, f->sum, (odx_arg[]){ODX_BUF(b, 0), ODX_BUF(out, ODX_RW)},
					    2, NULL, NULL),
				 0);
	assert_int_equal(odx_wait_all(f->ctx, TIMEOUT_MS), 0);
	/* out was written 1000 times in a chain: it remembers one writer, no readers. */
	assert_non_null(out->last_writer);
	assert_int_equal(out->nreaders, 0);
	/* b was only read: its reader list is compacted as it grows, never past twice the
	 * readers still running when it filled. */
	assert_true(b->capreaders <= 2048);
	assert_int_equal(odx_buffer_destroy(b), 0);
	assert_int_equal(odx_buffer_destroy(out), 0);
	assert_int_equal(odx_wait_all(f->ctx, TIMEOUT_MS), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_msi_walk),
		cmocka_unit_test(test_tracking_is_bounded),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
