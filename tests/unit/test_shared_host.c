/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shared_host.c - host devices sharing host RAM (host.memnode=shared, the default), white
 * box: they run on the host memory node of their NUMA node, so a buffer passed between them is
 * never copied and has one replica; writes make that replica MODIFIED; results of chains that
 * alternate devices are right with every access mode, with synchronous and asynchronous host
 * lanes; the shared node still evicts to the disk tier.
 *
 * Both runs describe the machine to hwloc (HWLOC_SYNTHETIC, in their meson env): one NUMA node
 * (shared_host), or two with TEST_TWO_NODES set (shared_host_numa), one host device on each: there the devices have different host nodes, and what crosses them is copied
 * between the nodes (and written back home when evicted), with the same results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"
#include "mem/mem.h"
#include "test_util.h"

#define CHUNK (64u << 10) /* bytes per buffer */
#define N32 (CHUNK / 4)

/* x = v (W) */
static int k_set(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (size_t i = 0; i < N32; i++)
		x[i] = (uint32_t)v + (uint32_t)i;
	return 0;
}

/* x += v (RW) */
static int k_add(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int32_t v = *(const int32_t *)l->scalars[1];

	for (size_t i = 0; i < N32; i++)
		x[i] += (uint32_t)v;
	return 0;
}

/* y = x * 3 (x R, y W) */
static int k_triple(const odx_host_launch *l)
{
	const uint32_t *x = l->buffers[0];
	uint32_t *y = l->buffers[1];

	for (size_t i = 0; i < N32; i++)
		y[i] = x[i] * 3u;
	return 0;
}

typedef struct kernels {
	odx_kernel *set, *add, *triple;
} kernels;

static odx_kernel *kernel(odx_context *ctx, const char *name, odx_host_fn fn, odx_access a0,
			  odx_arg_kind k1, odx_access a1)
{
	odx_param p[2] = {{ODX_ARG_BUFFER, a0, "x"}, {k1, a1, "y"}};

	return test_host_kernel(ctx, name, p, 2, fn);
}

static kernels make_kernels(odx_context *ctx)
{
	return (kernels){
		.set = kernel(ctx, "set", k_set, ODX_W, ODX_ARG_I32, 0),
		.add = kernel(ctx, "add", k_add, ODX_RW, ODX_ARG_I32, 0),
		.triple = kernel(ctx, "triple", k_triple, ODX_R, ODX_ARG_BUFFER, ODX_W),
	};
}

static odx_context *open_with(const char *const *extra)
{
	const char *kv[32] = {"backends", "host", "host.devices", "2", "host.threads", "1",
			      "host.bind", "false", "host.memnode", "shared"};
	int n = 10, i;

	for (i = 0; extra && extra[i]; i++)
		kv[n++] = extra[i];
	kv[n] = NULL;
	return test_open_ctx(kv);
}

static void submit_on(odx_context *ctx, odx_kernel *k, int dev, odx_arg a0, odx_arg a1)
{
	assert_ok(odx_submit(ctx, k, (odx_arg[]){a0, a1}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = dev},
			     NULL));
}

static void check(odx_buffer *b, uint32_t base, uint32_t mul)
{
	static uint32_t back[N32];

	memset(back, 0, sizeof(back));
	assert_ok(odx_buffer_read(b, 0, back, sizeof(back), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N32; i++)
		if (back[i] != (base + (uint32_t)i) * mul)
			fail_msg("element %zu: %#x, expected %#x", i, back[i],
				 (base + (uint32_t)i) * mul);
}

static uint64_t bytes_between_nodes(odx_context *ctx)
{
	uint64_t sum = 0;
	int s, d;

	for (s = 0; s < ctx->nmemnodes; s++)
		for (d = 0; d < ctx->nmemnodes; d++)
			if (s != d)
				sum += atomic_load(&ctx->bytes_copied[s * ctx->nmemnodes + d]);
	return sum;
}

/* One host node, both devices on it; a device's memory is that node's. */
static void test_layout(void **state)
{
	const char *kv[] = {"tier.host.limit", "3MiB", NULL};
	odx_context *ctx = open_with(kv);
	odx_memnode_info mem;
	odx_device_info dev;
	int d;

	(void)state;
	assert_int_equal(odx_memnode_count(ctx), 1);
	assert_ok(odx_memnode_get_info(ctx, 0, &mem));
	assert_int_equal(mem.kind, ODX_MEMNODE_HOST);
	assert_int_equal(mem.device, -1);
	for (d = 0; d < 2; d++) {
		assert_ok(odx_device_get_info(ctx, d, &dev));
		assert_int_equal(dev.memnode, 0);
		/* one accounting: the device reports the node's capacity */
		assert_int_equal(dev.memory_bytes, 3u << 20);
	}
	assert_ok(odx_close(ctx));

	/* private, the explicit option: a node per device again */
	{
		const char *priv[] = {"host.memnode", "private", NULL};

		ctx = open_with(priv);
		assert_int_equal(odx_memnode_count(ctx), 3);
		for (d = 0; d < 2; d++) {
			assert_ok(odx_device_get_info(ctx, d, &dev));
			assert_int_equal(dev.memnode, 1 + d);
		}
		assert_ok(odx_close(ctx));
	}
}

/* A chain alternating the two devices with W, RW and R-then-W tasks: right results, no copy,
 * one replica, MODIFIED on the host node after each writer. */
static void chain(const char *async)
{
	const char *kv[] = {"host.async", async, "tier.direct_access", "false", NULL};
	odx_context *ctx = open_with(kv);
	kernels k = make_kernels(ctx);
	odx_buffer *a, *b;
	const int steps = 40;
	uint32_t base = 7;
	int i;

	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &a));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b));
	submit_on(ctx, k.set, 0, ODX_BUF(a, ODX_W), ODX_I32(7));
	for (i = 0; i < steps; i++) {
		/* RW on one device, then the other device reads what it wrote */
		submit_on(ctx, k.add, i % 2, ODX_BUF(a, ODX_RW), ODX_I32(i));
		base += (uint32_t)i;
		submit_on(ctx, k.triple, (i + 1) % 2, ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(atomic_load(&ctx->copies), 0);
	assert_int_equal(bytes_between_nodes(ctx), 0);
	pthread_mutex_lock(&a->lock);
	assert_int_equal(atomic_load(&a->replicas[0].state), ODX__MODIFIED);
	assert_int_equal(a->replicas[0].pins, 0);
	assert_int_equal(odx__valid_copies(a), 1);
	pthread_mutex_unlock(&a->lock);
	assert_int_equal(atomic_load(&b->replicas[0].state), ODX__MODIFIED);
	/* one replica each, on the one node */
	assert_int_equal(atomic_load(&ctx->memnodes[0].used), 2 * (uint64_t)CHUNK);
	check(a, base, 1);
	check(b, base, 3);
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

static void test_chain_sync(void **state)
{
	(void)state;
	chain("false");
}

static void test_chain_async(void **state)
{
	(void)state;
	chain("true");
}

/* Many buffers, ten times the host node's limit, touched on alternating devices: the shared
 * node spills to the disk tier and reloads, and every value comes back right. */
static void test_spill_shared_node(void **state)
{
	const char *kv[] = {"tier.host.limit", "512KiB", "tier.disk.limit", "64MiB", NULL};
	odx_context *ctx = open_with(kv);
	kernels k = make_kernels(ctx);
	enum { NB = 80 };
	odx_buffer *b[NB], *out[NB];
	int i;

	(void)state;
	for (i = 0; i < NB; i++) {
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b[i]));
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &out[i]));
		submit_on(ctx, k.set, i % 2, ODX_BUF(b[i], ODX_W), ODX_I32(1000 * i));
	}
	for (i = 0; i < NB; i++) {
		submit_on(ctx, k.add, (i + 1) % 2, ODX_BUF(b[i], ODX_RW), ODX_I32(5));
		submit_on(ctx, k.triple, i % 2, ODX_BUF(b[i], ODX_R), ODX_BUF(out[i], ODX_W));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	print_message("spills %llu, reloads %llu, peak %llu bytes\n",
		      (unsigned long long)atomic_load(&ctx->tier->spills),
		      (unsigned long long)atomic_load(&ctx->tier->reloads),
		      (unsigned long long)ctx->memnodes[0].peak);
	assert_true(atomic_load(&ctx->tier->spills) > 0);
	assert_true(atomic_load(&ctx->tier->reloads) > 0);
	assert_true(ctx->memnodes[0].peak <= 512u << 10);
	assert_int_equal(bytes_between_nodes(ctx), 0);
	for (i = 0; i < NB; i++) {
		check(b[i], 1000u * (unsigned)i + 5u, 1);
		check(out[i], 1000u * (unsigned)i + 5u, 3);
	}
	for (i = 0; i < NB; i++) {
		odx_buffer_destroy(b[i]);
		odx_buffer_destroy(out[i]);
	}
	assert_ok(odx_close(ctx));
}

/* ---- two NUMA nodes (HWLOC_SYNTHETIC) -------------------------------------------------------- */

/* Host device d sits on NUMA node d: its memory node is host node d. */
static void test_numa_layout(void **state)
{
	odx_context *ctx = open_with(NULL);
	odx_device_info dev;
	int d;

	(void)state;
	assert_int_equal(odx_memnode_count(ctx), 2);
	for (d = 0; d < 2; d++) {
		assert_ok(odx_device_get_info(ctx, d, &dev));
		assert_int_equal(dev.memnode, d);
	}
	assert_ok(odx_close(ctx));
}

/* A chain across the nodes: copied between them, right results. */
static void test_numa_chain(void **state)
{
	const char *kv[] = {"tier.direct_access", "false", NULL};
	odx_context *ctx = open_with(kv);
	kernels k = make_kernels(ctx);
	odx_buffer *a, *b;
	uint32_t base = 3;
	int i;

	(void)state;
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &a));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b));
	submit_on(ctx, k.set, 1, ODX_BUF(a, ODX_W), ODX_I32(3));
	for (i = 0; i < 20; i++) {
		submit_on(ctx, k.add, i % 2, ODX_BUF(a, ODX_RW), ODX_I32(i));
		base += (uint32_t)i;
		submit_on(ctx, k.triple, (i + 1) % 2, ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_true(bytes_between_nodes(ctx) > 0);
	check(a, base, 1);
	check(b, base, 3);
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

/* Buffers homed on node 1 (first written there) modified on node 0 under pressure: the dirty
 * copies on node 0 are written back home, or spilled from there, and nothing is lost. */
static void test_numa_writeback_home(void **state)
{
	const char *kv[] = {"tier.host.limit", "512KiB", "tier.disk.limit", "64MiB", NULL};
	odx_context *ctx = open_with(kv);
	kernels k = make_kernels(ctx);
	enum { NB = 40 };
	odx_buffer *b[NB];
	int i;

	(void)state;
	for (i = 0; i < NB; i++) {
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b[i]));
		submit_on(ctx, k.set, 1, ODX_BUF(b[i], ODX_W), ODX_I32(100 * i));
	}
	for (i = 0; i < NB; i++)
		submit_on(ctx, k.add, 0, ODX_BUF(b[i], ODX_RW), ODX_I32(9));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (i = 0; i < NB; i++)
		assert_int_equal(atomic_load(&b[i]->home), 1);
	print_message("node 0: %llu write-backs home; spills %llu\n",
		      (unsigned long long)atomic_load(&ctx->memnodes[0].writebacks),
		      (unsigned long long)atomic_load(&ctx->tier->spills));
	assert_true(atomic_load(&ctx->memnodes[0].writebacks) > 0);
	for (i = 0; i < NB; i++)
		check(b[i], 100u * (unsigned)i + 9u, 1);
	assert_true(ctx->memnodes[0].peak <= 512u << 10);
	for (i = 0; i < NB; i++)
		odx_buffer_destroy(b[i]);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest one_node[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_chain_sync),
		cmocka_unit_test(test_chain_async),
		cmocka_unit_test(test_spill_shared_node),
	};
	const struct CMUnitTest two_nodes[] = {
		cmocka_unit_test(test_numa_layout),
		cmocka_unit_test(test_numa_chain),
		cmocka_unit_test(test_numa_writeback_home),
	};

	/* shared_host_numa describes two NUMA nodes to hwloc in its environment. */
	if (getenv("TEST_TWO_NODES"))
		return cmocka_run_group_tests(two_nodes, NULL, NULL);
	return cmocka_run_group_tests(one_node, NULL, NULL);
}
