/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_numa.c - host RAM as one memory node per NUMA node.
 *
 * The machine may have one NUMA node, so the test describes a two-node machine to hwloc
 * (HWLOC_SYNTHETIC, set before any context opens): two packages' worth of memory, one PU each.
 * Memory binding means nothing on a synthetic topology (ODX allocates unbound then); what is
 * tested is the model: two host memory nodes with their own capacities, each host device near
 * one of them, write-backs going to the node nearest the device they leave, the other node
 * taking them when that one is full, and results identical to the expected values through
 * device, host and disk tiers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define TWO_NODES "pack:2 numa:1(memory=1GB) core:1 pu:1"
#define CHUNK (64u << 10) /* bytes per buffer */
#define N32 (CHUNK / 4)

static uint64_t node_used(odx_context *ctx, int m)
{
	odx_memnode_info info;

	assert_ok(odx_memnode_get_info(ctx, m, &info));
	return info.used_bytes;
}

static odx_context *open_two(const char *const *extra)
{
	const char *kv[32] = {"host.devices", "2", "host.bind", "false", "backends", "host"};
	int n = 6, i;

	for (i = 0; extra && extra[i]; i++)
		kv[n++] = extra[i];
	kv[n] = NULL;
	return test_open_ctx(kv);
}

static void fill_on(odx_context *ctx, odx_kernel *fill, odx_buffer *b, uint32_t value, int dev)
{
	odx_arg args[] = {ODX_BUF(b, ODX_W), ODX_I32((int32_t)value), ODX_I32(N32)};
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
			   .on_device = dev,
			   .grid = {N32 / 64, 1, 1},
			   .block = {64, 1, 1}};

	assert_ok(odx_submit(ctx, fill, args, 3, &o, NULL));
}

static void check_value(odx_buffer *b, uint32_t value)
{
	static uint32_t back[N32];

	memset(back, 0, sizeof(back));
	assert_ok(odx_buffer_read(b, 0, back, sizeof(back), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N32; i++)
		if (back[i] != value)
			fail_msg("element %zu: %#x, expected %#x", i, back[i], value);
}

/* Two host nodes first, the devices after, each device near the node of its cores. */
static void test_layout(void **state)
{
	const char *kv[] = {"tier.host.limit", "3MiB", NULL};
	odx_context *ctx = open_two(kv);
	odx_memnode_info info;
	odx_device_info dev;
	int m, d;

	(void)state;
	assert_int_equal(odx_memnode_count(ctx), 4);
	for (m = 0; m < 2; m++) {
		assert_ok(odx_memnode_get_info(ctx, m, &info));
		assert_int_equal(info.kind, ODX_MEMNODE_HOST);
		assert_int_equal(info.device, -1);
		/* tier.host.limit applies to each node */
		assert_int_equal(info.capacity_bytes, 3u << 20);
		assert_int_equal(odx_memnode_near(ctx, m), m);
		assert_int_equal(odx_memnode_numa(ctx, m), m);
	}
	for (d = 0; d < 2; d++) {
		assert_ok(odx_device_get_info(ctx, d, &dev));
		assert_int_equal(dev.memnode, 2 + d);
		assert_ok(odx_memnode_get_info(ctx, dev.memnode, &info));
		assert_int_equal(info.kind, ODX_MEMNODE_DEVICE);
		/* host device d runs on PU d, which is NUMA node d's */
		assert_int_equal(odx_memnode_near(ctx, dev.memnode), d);
		assert_int_equal(odx_memnode_numa(ctx, dev.memnode), d);
	}
	assert_rc(odx_memnode_near(ctx, 4), ODX_EINVAL);
	assert_ok(odx_close(ctx));
}

/* Dirty copies evicted from a device are written to the host node nearest to it. */
static void test_writeback_near_device(void **state)
{
	/* The monitor off: it would also write the other device's copies back meanwhile. */
	const char *kv[] = {"tier.device.limit", "256KiB", "tier.host.limit", "16MiB",
			    "tier.monitor.start", "100", NULL};
	odx_context *ctx = open_two(kv);
	odx_kernel *fill;
	odx_buffer *b[2][8];
	int d, i;

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	for (d = 1; d >= 0; d--) {
		uint64_t before_other = node_used(ctx, 1 - d), before = node_used(ctx, d);

		for (i = 0; i < 8; i++) {
			assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b[d][i]));
			fill_on(ctx, fill, b[d][i], 0x1000u * (unsigned)d + (unsigned)i, d);
		}
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		/* the device holds 4 of the 8: at least 4 went down, all to its own node */
		print_message("device %d: node %d +%llu bytes, node %d +%llu bytes\n", d, d,
			      (unsigned long long)(node_used(ctx, d) - before), 1 - d,
			      (unsigned long long)(node_used(ctx, 1 - d) - before_other));
		assert_true(node_used(ctx, d) >= before + 4 * (uint64_t)CHUNK);
		assert_int_equal(node_used(ctx, 1 - d), before_other);
	}
	for (d = 0; d < 2; d++)
		for (i = 0; i < 8; i++)
			check_value(b[d][i], 0x1000u * (unsigned)d + (unsigned)i);
	for (d = 0; d < 2; d++)
		for (i = 0; i < 8; i++)
			odx_buffer_destroy(b[d][i]);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(node_used(ctx, 0), 0);
	assert_int_equal(node_used(ctx, 1), 0);
	assert_ok(odx_close(ctx));
}

/* The nearest node full: the other one takes the copies, nothing fails, nothing is lost. */
static void test_other_node_when_full(void **state)
{
	const char *kv[] = {"tier.device.limit", "256KiB", "tier.host.limit", "320KiB",
			    "tier.monitor.start", "100", NULL};
	odx_context *ctx = open_two(kv);
	odx_kernel *fill;
	odx_buffer *b[12];
	int i;

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	/* 12 x 64 KiB on device 1: 4 stay there, 8 go down; node 1 holds 5 of them */
	for (i = 0; i < 12; i++) {
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b[i]));
		fill_on(ctx, fill, b[i], 0xabc00u + (unsigned)i, 1);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	print_message("node 0: %llu bytes, node 1: %llu bytes\n",
		      (unsigned long long)node_used(ctx, 0), (unsigned long long)node_used(ctx, 1));
	assert_true(node_used(ctx, 1) >= 4 * (uint64_t)CHUNK);
	assert_true(node_used(ctx, 0) >= (uint64_t)CHUNK);
	assert_true(node_used(ctx, 1) <= 320u << 10);
	for (i = 0; i < 12; i++)
		check_value(b[i], 0xabc00u + (unsigned)i);
	for (i = 0; i < 12; i++)
		odx_buffer_destroy(b[i]);
	assert_ok(odx_close(ctx));
}

/* Host copies made through the API (no device involved) spread over the nodes by room. */
static void test_api_copies_spread(void **state)
{
	const char *kv[] = {"tier.direct_access", "false", NULL};
	odx_context *ctx = open_two(kv);
	static uint32_t data[N32];
	odx_buffer *b[4];
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		for (size_t j = 0; j < N32; j++)
			data[j] = (uint32_t)(i * 7 + 1);
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b[i]));
		assert_ok(odx_buffer_write(b[i], 0, data, sizeof(data), TEST_TIMEOUT_MS));
	}
	/* a thread whose node cannot be told (the topology is not this machine's): the node with
	 * the most room, so the four alternate */
	assert_int_equal(node_used(ctx, 0), 2 * (uint64_t)CHUNK);
	assert_int_equal(node_used(ctx, 1), 2 * (uint64_t)CHUNK);
	for (i = 0; i < 4; i++)
		check_value(b[i], (uint32_t)(i * 7 + 1));
	for (i = 0; i < 4; i++)
		odx_buffer_destroy(b[i]);
	assert_ok(odx_close(ctx));
}

/* A working set many times the device tiers and both host nodes, with a disk tier, moving
 * between the two devices: every value as computed on the CPU. */
static void test_out_of_core_across_nodes(void **state)
{
	char dir[] = "/tmp/odx-numa-XXXXXX";
	const char *kv[] = {"tier.device.limit", "256KiB", "tier.host.limit", "512KiB",
			    "tier.disk.limit",	 "16MiB",  "tier.disk.path",  dir,
			    NULL};
	enum { NB = 40 };
	odx_context *ctx;
	odx_kernel *fill, *scale, *copy;
	odx_buffer *x[NB], *y[NB];
	static float back[N32];
	int i;

	(void)state;
	assert_non_null(mkdtemp(dir));
	ctx = open_two(kv);
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	assert_ok(odx_kernel_builtin(ctx, "odx.scale_f32", &scale));
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &copy));
	for (i = 0; i < NB; i++) {
		float v = (float)(i + 1);
		uint32_t bits;
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
				   .on_device = 1 - i % 2,
				   .grid = {N32 / 64, 1, 1},
				   .block = {64, 1, 1}};

		memcpy(&bits, &v, sizeof(bits));
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &x[i]));
		assert_ok(odx_buffer_create(ctx, CHUNK, 0, &y[i]));
		/* x on one device, y = copy of x on the other, then scaled there twice */
		fill_on(ctx, fill, x[i], bits, i % 2);
		{
			odx_arg args[] = {ODX_BUF(x[i], ODX_R), ODX_BUF(y[i], ODX_W), ODX_I32(N32)};

			assert_ok(odx_submit(ctx, copy, args, 3, &o, NULL));
		}
		for (int k = 0; k < 2; k++) {
			odx_arg args[] = {ODX_BUF(y[i], ODX_RW), ODX_F32(2.0f), ODX_I32(N32)};

			assert_ok(odx_submit(ctx, scale, args, 3, &o, NULL));
		}
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (i = 0; i < NB; i++) {
		assert_ok(odx_buffer_read(y[i], 0, back, sizeof(back), TEST_TIMEOUT_MS));
		for (size_t j = 0; j < N32; j++)
			if (back[j] != 4.0f * (float)(i + 1))
				fail_msg("y[%d][%zu] = %g, expected %g", i, j, (double)back[j],
					 4.0 * (i + 1));
		assert_ok(odx_buffer_read(x[i], 0, back, sizeof(back), TEST_TIMEOUT_MS));
		for (size_t j = 0; j < N32; j++)
			if (back[j] != (float)(i + 1))
				fail_msg("x[%d][%zu] = %g, expected %d", i, j, (double)back[j], i + 1);
	}
	assert_true(node_used(ctx, 0) <= 512u << 10);
	assert_true(node_used(ctx, 1) <= 512u << 10);
	assert_ok(odx_close(ctx));
	assert_int_equal(rmdir(dir), 0); /* the spill area is gone at close */
}

/* User memory registered as a buffer is its host copy, counted on one host node. */
static void test_registered(void **state)
{
	odx_context *ctx = open_two(NULL);
	static uint32_t user[N32];
	odx_kernel *copy;
	odx_buffer *u, *out;
	uint64_t before = node_used(ctx, 0) + node_used(ctx, 1);

	(void)state;
	for (size_t j = 0; j < N32; j++)
		user[j] = 0x5eed0000u + (uint32_t)j % 1000;
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &copy));
	assert_ok(odx_buffer_register(ctx, user, sizeof(user), 0, &u));
	assert_int_equal(node_used(ctx, 0) + node_used(ctx, 1), before + CHUNK);
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &out));
	{
		odx_arg args[] = {ODX_BUF(u, ODX_R), ODX_BUF(out, ODX_W), ODX_I32(N32)};
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
				   .on_device = 1,
				   .grid = {N32 / 64, 1, 1},
				   .block = {64, 1, 1}};

		assert_ok(odx_submit(ctx, copy, args, 3, &o, NULL));
	}
	{
		static uint32_t back[N32];

		assert_ok(odx_buffer_read(out, 0, back, sizeof(back), TEST_TIMEOUT_MS));
		assert_memory_equal(back, user, sizeof(back));
	}
	odx_buffer_destroy(out);
	odx_buffer_destroy(u);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(node_used(ctx, 0) + node_used(ctx, 1), before);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_writeback_near_device),
		cmocka_unit_test(test_other_node_when_full),
		cmocka_unit_test(test_api_copies_spread),
		cmocka_unit_test(test_out_of_core_across_nodes),
		cmocka_unit_test(test_registered),
	};

	/* Before any topology is read: the machine this test describes. */
	setenv("HWLOC_SYNTHETIC", TWO_NODES, 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
