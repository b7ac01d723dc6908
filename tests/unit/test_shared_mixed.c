/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shared_mixed.c - host devices sharing host RAM (host.memnode=shared) beside a discrete
 * device with memory of its own (Vulkan on lavapipe): the host devices pass a buffer with no
 * copy and no second replica, what crosses to or from the Vulkan device is copied, and every
 * result is right. Public API only (the Vulkan module links against libodx's exports).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define CHUNK (64u << 10)
#define N32 (CHUNK / 4)

static void builtin_on(odx_context *ctx, odx_kernel *k, int dev, odx_arg a0, odx_arg a1)
{
	odx_arg args[] = {a0, a1, ODX_I32(N32)};
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
			   .on_device = dev,
			   .grid = {N32 / 64, 1, 1},
			   .block = {64, 1, 1}};

	assert_ok(odx_submit(ctx, k, args, 3, &o, NULL));
}

static void check_u32(odx_buffer *b, uint32_t value)
{
	static uint32_t back[N32];

	memset(back, 0, sizeof(back));
	assert_ok(odx_buffer_read(b, 0, back, sizeof(back), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < N32; i++)
		if (back[i] != value)
			fail_msg("element %zu: %#x, expected %#x", i, back[i], value);
}

static uint64_t used(odx_context *ctx, int m)
{
	odx_memnode_info info;

	assert_ok(odx_memnode_get_info(ctx, m, &info));
	return info.used_bytes;
}

static void test_mixed_discrete(void **state)
{
	const char *kv[] = {"backends",	    "host,vulkan", "host.devices",	 "2",
			    "host.threads",	    "1",	   "host.bind",		 "false",
			    "host.memnode",	    "shared",	   "vulkan.allow_cpu",	 "true",
			    "tier.direct_access", "false",	   NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *fill, *copy;
	odx_device_info di, h0, h1;
	odx_buffer *a, *b, *c, *d;
	int vk = -1, i, nhost = 0;

	(void)state;
	for (i = 0; i < odx_memnode_count(ctx); i++) {
		odx_memnode_info info;

		assert_ok(odx_memnode_get_info(ctx, i, &info));
		nhost += info.kind == ODX_MEMNODE_HOST;
	}
	for (i = 0; i < odx_device_count(ctx); i++) {
		assert_ok(odx_device_get_info(ctx, i, &di));
		if (di.kind == ODX_BACKEND_VULKAN) {
			vk = i;
			break;
		}
	}
	assert_true(vk >= 0);
	assert_ok(odx_device_get_info(ctx, vk, &di));
	assert_ok(odx_device_get_info(ctx, 0, &h0));
	assert_ok(odx_device_get_info(ctx, 1, &h1));
	/* the host devices on host RAM, one node; the Vulkan device on its own */
	assert_int_equal(h0.kind, ODX_BACKEND_HOST);
	assert_int_equal(h0.memnode, h1.memnode);
	assert_true(h0.memnode < nhost);
	assert_true(di.memnode >= nhost);
	assert_int_equal(odx_memnode_count(ctx), nhost + 1);

	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &copy));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &a));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &b));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &c));
	assert_ok(odx_buffer_create(ctx, CHUNK, 0, &d));
	/* host 0 writes a, host 1 copies it to b: one replica each, on host RAM, none elsewhere */
	builtin_on(ctx, fill, 0, ODX_BUF(a, ODX_W), ODX_I32(0x5eed));
	builtin_on(ctx, copy, 1, ODX_BUF(a, ODX_R), ODX_BUF(b, ODX_W));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(used(ctx, h0.memnode), 2 * (uint64_t)CHUNK);
	assert_int_equal(used(ctx, di.memnode), 0);
	/* Vulkan copies b to c (b copied to its memory), host 0 copies c to d (c copied back) */
	builtin_on(ctx, copy, vk, ODX_BUF(b, ODX_R), ODX_BUF(c, ODX_W));
	builtin_on(ctx, copy, 0, ODX_BUF(c, ODX_R), ODX_BUF(d, ODX_W));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_true(used(ctx, di.memnode) >= 2 * (uint64_t)CHUNK);
	assert_int_equal(used(ctx, h0.memnode), 4 * (uint64_t)CHUNK);
	check_u32(a, 0x5eed);
	check_u32(b, 0x5eed);
	check_u32(c, 0x5eed);
	check_u32(d, 0x5eed);
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	odx_buffer_destroy(c);
	odx_buffer_destroy(d);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mixed_discrete),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
