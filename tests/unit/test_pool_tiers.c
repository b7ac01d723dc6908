/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool_tiers.c - white-box test of the device-memory pool and the pinned staging pool as
 * the tiers use them: replicas carved from a few chunks at distinct aligned offsets, the node's
 * accounting in rounded sizes, zero-filled reuse of pooled memory, nothing left at the end; and
 * reloads from the disk tier to a device through pinned blocks. Memory node 1 is device 0.
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
#include "mem/pool.h"
#include "test_util.h"

#define TIMEOUT_MS 60000
#define NBUF 12

/* fill(RW x, i32 v): every byte of x becomes v + its old value. */
static int k_fill(const odx_host_launch *l)
{
	uint8_t *x = l->buffers[0];
	uint8_t v = (uint8_t)*(const int32_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0]; i++)
		x[i] = (uint8_t)(x[i] + v);
	return 0;
}

/* first(W x, i32 v): writes x[0] only; the rest of a new buffer must read as zeros. */
static int k_first(const odx_host_launch *l)
{
	uint8_t *x = l->buffers[0];

	x[0] = (uint8_t)*(const int32_t *)l->scalars[1];
	return 0;
}

/* sum(R x, W out): out[0] = the sum of x's bytes. */
static int k_sum(const odx_host_launch *l)
{
	const uint8_t *x = l->buffers[0];
	uint64_t *out = l->buffers[1], s = 0;

	for (size_t i = 0; i < l->buffer_sizes[0]; i++)
		s += x[i];
	out[0] = s;
	return 0;
}

static odx_kernel *kernel(odx_context *ctx, const char *name, odx_host_fn fn, odx_access a0,
			  odx_arg_kind k1, odx_access a1)
{
	odx_param p[2] = {{ODX_ARG_BUFFER, a0, "x"}, {k1, a1, "y"}};

	return test_host_kernel(ctx, name, p, 2, fn);
}

static void run_on(odx_context *ctx, odx_kernel *k, int device, odx_arg a0, odx_arg a1)
{
	odx_event *ev = NULL;

	assert_ok(odx_submit(ctx, k, (odx_arg[]){a0, a1}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = device},
			     &ev));
	assert_ok(odx_event_wait(ev, TIMEOUT_MS));
	odx_event_release(ev);
}

static void test_replicas_share_chunks(void **state)
{
	static const char *const kv[] = {"backends",	      "host", "host.devices", "2",
					 "host.threads",      "1",    "host.bind",    "false",
					 "tier.device.limit", "64MiB", NULL};
	static const size_t sizes[NBUF] = {100,	 1000,	4096,  5000,  65536,  100000,
					   256,	 257,	40000, 12345, 300000, 1 << 20};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *fill = kernel(ctx, "fill", k_fill, ODX_RW, ODX_ARG_I32, 0);
	odx_kernel *first = kernel(ctx, "first", k_first, ODX_W, ODX_ARG_I32, 0);
	odx__memnode *node = &ctx->memnodes[1];
	odx_buffer *b[NBUF], *z;
	uint64_t handles[NBUF], charged = 0, requested = 0;
	int nhandles = 0;
	odx__pool_stats ps;
	uint8_t *got;
	size_t align;

	(void)state;
	assert_non_null(node->pool);
	align = odx__pool_align(node->pool);
	assert_int_equal(align % 64, 0); /* the host backend's mem_align, or more */
	for (int i = 0; i < NBUF; i++) {
		uint8_t *data = malloc(sizes[i]);

		for (size_t j = 0; j < sizes[i]; j++)
			data[j] = (uint8_t)(i + j);
		assert_ok(odx_buffer_create(ctx, sizes[i], 0, &b[i]));
		assert_ok(odx_buffer_write(b[i], 0, data, sizes[i], TIMEOUT_MS));
		run_on(ctx, fill, 0, ODX_BUF(b[i], 0), ODX_I32(i + 1));
		free(data);
	}
	/* Every replica on device 0 is pooled: few chunk handles, aligned offsets, and regions of
	 * one chunk never overlap. */
	for (int i = 0; i < NBUF; i++) {
		odx__replica *r = &b[i]->replicas[1];
		uint64_t ri = odx__pool_rounded_size(node->pool, sizes[i]);
		int h;

		assert_true(r->allocated);
		assert_int_equal(r->off % align, 0);
		for (h = 0; h < nhandles && handles[h] != r->mem; h++)
			;
		if (h == nhandles)
			handles[nhandles++] = r->mem;
		for (int j = 0; j < i; j++) {
			odx__replica *q = &b[j]->replicas[1];
			uint64_t rj = odx__pool_rounded_size(node->pool, sizes[j]);

			if (q->mem == r->mem)
				assert_true(r->off + ri <= q->off || q->off + rj <= r->off);
		}
		charged += ri;
		requested += sizes[i];
	}
	print_message("%d buffers on %d chunk handles (chunk %zu bytes, align %zu)\n", NBUF,
		      nhandles, odx__pool_chunk_size(node->pool), align);
	assert_true(nhandles <= 3);
	odx__pool_get_stats(node->pool, &ps);
	assert_int_equal(ps.used, charged);
	assert_int_equal(ps.requested, requested);
	assert_int_equal(atomic_load(&node->used), charged);
	/* The kernels saw their own bytes, at their offsets. */
	for (int i = 0; i < NBUF; i++) {
		got = malloc(sizes[i]);
		assert_ok(odx_buffer_read(b[i], 0, got, sizes[i], TIMEOUT_MS));
		for (size_t j = 0; j < sizes[i]; j++)
			if (got[j] != (uint8_t)(i + j + i + 1))
				fail_msg("buffer %d byte %zu: %u", i, j, got[j]);
		free(got);
	}

	/* Pooled memory comes back with its last user's bytes: a new buffer still reads as
	 * zeros where its first writer left it alone. */
	for (int i = 0; i < NBUF; i++)
		assert_ok(odx_buffer_destroy(b[i]));
	assert_ok(odx_wait_all(ctx, TIMEOUT_MS));
	assert_ok(odx_buffer_create(ctx, 65536, 0, &z));
	run_on(ctx, first, 0, ODX_BUF(z, ODX_W), ODX_I32(7));
	got = malloc(65536);
	assert_ok(odx_buffer_read(z, 0, got, 65536, TIMEOUT_MS));
	assert_int_equal(got[0], 7);
	for (size_t j = 1; j < 65536; j++)
		if (got[j] != 0)
			fail_msg("byte %zu of a new buffer is %u, not 0", j, got[j]);
	free(got);
	assert_ok(odx_buffer_destroy(z));
	assert_ok(odx_wait_all(ctx, TIMEOUT_MS));

	/* Nothing left: the pool hands out nothing, the node counts nothing, and trimming gives
	 * every chunk back. */
	odx__pool_get_stats(node->pool, &ps);
	assert_int_equal(ps.used, 0);
	assert_int_equal(ps.allocs, 0);
	assert_int_equal(ps.dedicated, 0);
	assert_int_equal(atomic_load(&node->used), 0);
	odx__pool_trim(node->pool);
	odx__pool_get_stats(node->pool, &ps);
	assert_int_equal(ps.chunk_bytes, 0);
	assert_ok(odx_close(ctx));
}

/* Reloads from the disk tier to a device go through the pinned staging pool's blocks; a buffer
 * of two blocks takes a run of two. */
static void test_reloads_through_pinned_blocks(void **state)
{
	char root[] = "/tmp/odx-pool-tiers-XXXXXX";
	const char *kv[] = {"backends",	       "host",	 "host.devices",      "1",
			    "host.threads",    "1",	 "host.bind",	      "false",
			    "tier.host.limit", "256KiB", "tier.disk.limit",   "16MiB",
			    "tier.disk.path",  root,	 "tier.pinned.size",  "1MiB",
			    "tier.pinned.block", "64KiB",
			    /* the writes land in host RAM (and spill), not on the device */
			    "tier.direct_access", "false", NULL};
	enum { NB = 8 };
	odx_context *ctx;
	odx_kernel *sum;
	odx_buffer *b[NB], *out;
	odx__pinned_stats st;
	uint64_t want[NB], got;

	(void)state;
	assert_non_null(mkdtemp(root));
	ctx = test_open_ctx(kv);
	sum = kernel(ctx, "sum", k_sum, ODX_R, ODX_ARG_BUFFER, ODX_W);
	assert_non_null(odx__tier_pinned(ctx));
	assert_ok(odx_buffer_create(ctx, sizeof(uint64_t), 0, &out));
	for (int i = 0; i < NB; i++) {
		size_t n = i == 0 ? 128 << 10 : 48 << 10;
		uint8_t *data = malloc(n);

		want[i] = 0;
		for (size_t j = 0; j < n; j++) {
			data[j] = (uint8_t)(3 * i + j);
			want[i] += data[j];
		}
		assert_ok(odx_buffer_create(ctx, n, 0, &b[i]));
		assert_ok(odx_buffer_write(b[i], 0, data, n, TIMEOUT_MS));
		free(data);
	}
	/* Host RAM holds 256 KiB: most of them went to disk and come back through a bounce. */
	for (int i = 0; i < NB; i++) {
		run_on(ctx, sum, 0, ODX_BUF(b[i], 0), ODX_BUF(out, 0));
		assert_ok(odx_buffer_read(out, 0, &got, sizeof(got), TIMEOUT_MS));
		assert_int_equal(got, want[i]);
	}
	odx__pinned_get_stats(odx__tier_pinned(ctx), &st);
	print_message("pinned pool: %llu blocks of %llu bytes, %llu bounces, peak %llu, %llu "
		      "fallbacks\n",
		      (unsigned long long)st.blocks, (unsigned long long)st.block,
		      (unsigned long long)st.gets, (unsigned long long)st.peak,
		      (unsigned long long)st.fallbacks);
	assert_int_equal(st.blocks, 16);
	assert_true(st.gets > 0);
	assert_int_equal(st.in_use, 0);
	assert_int_equal(st.fallbacks, 0);
	for (int i = 0; i < NB; i++)
		assert_ok(odx_buffer_destroy(b[i]));
	assert_ok(odx_buffer_destroy(out));
	assert_ok(odx_close(ctx));
	assert_int_equal(rmdir(root), 0); /* the spill area inside it is gone */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replicas_share_chunks),
		cmocka_unit_test(test_reloads_through_pinned_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
