/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_direct_access.c - odx_buffer_read and odx_buffer_write straight to and from a device's copy
 * (tier.direct_access), on whichever backend the environment selects with one device: host
 * devices and Vulkan map device memory (memcpy on the caller), OpenCL copies with its blocking
 * copy_sync, and Vulkan with vulkan.force_staging through its copy lane (copy_h2d/d2h + done). Where the bytes land is observed
 * through the memory nodes' used bytes; what they are, through reads and kernels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

enum { N = 65536 }; /* floats: 256 KiB */

static uint64_t used(odx_context *ctx, int memnode)
{
	odx_memnode_info info;

	assert_ok(odx_memnode_get_info(ctx, memnode, &info));
	return info.used_bytes;
}

static odx_context *open_one_device(const char *device_limit, const char *direct)
{
	const char *kv[] = {"host.devices",	 "1",	   "host.bind", "false",
			    "tier.device.limit", device_limit, "tier.direct_access", direct,
			    NULL};
	odx_context *ctx = test_open_ctx(kv);

	assert_int_equal(odx_device_count(ctx), 1);
	assert_int_equal(odx_memnode_count(ctx), 2);
	return ctx;
}

static void scale(odx_context *ctx, odx_buffer *x, float a, int n)
{
	odx_kernel *k;
	odx_task_opts o = {.grid = {(uint32_t)(n + 63) / 64, 1, 1}, .block = {64, 1, 1}};

	assert_ok(odx_kernel_builtin(ctx, "odx.scale_f32", &k));
	assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(x, ODX_RW), ODX_F32(a), ODX_I32(n)}, 3, &o,
			     NULL));
}

/* A whole write of a new buffer goes to the device; a kernel uses it there; the read comes
 * back from the device. Host RAM never holds a copy. */
static void test_write_kernel_read_on_device(void **state)
{
	odx_context *ctx = open_one_device("0", "true");
	float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
	uint64_t host0 = used(ctx, 0), dev0 = used(ctx, 1);
	odx_buffer *x;

	(void)state;
	assert_non_null(in);
	assert_non_null(out);
	for (int i = 0; i < N; i++)
		in[i] = (float)(i % 1000);
	assert_ok(odx_buffer_create(ctx, N * sizeof(float), 0, &x));
	assert_ok(odx_buffer_write(x, 0, in, N * sizeof(float), TEST_TIMEOUT_MS));
	assert_int_equal(used(ctx, 0), host0);
	assert_true(used(ctx, 1) >= dev0 + N * sizeof(float));
	/* the caller's bytes are copied: changing them now changes nothing */
	in[0] = -1.0f;
	scale(ctx, x, 2.0f, N);
	assert_ok(odx_buffer_read(x, 0, out, N * sizeof(float), TEST_TIMEOUT_MS));
	in[0] = 0.0f;
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 2.0f * in[i]);
	assert_int_equal(used(ctx, 0), host0);

	/* a part read at an odd offset, a part written into the device copy, then a kernel */
	{
		float part[33], patch[17];

		assert_ok(odx_buffer_read(x, 7 * sizeof(float), part, sizeof(part), TEST_TIMEOUT_MS));
		for (int i = 0; i < 33; i++)
			assert_true(part[i] == 2.0f * in[7 + i]);
		for (int i = 0; i < 17; i++) {
			patch[i] = 1000.0f + (float)i;
			in[4001 + i] = patch[i] / 2.0f; /* doubled below like the rest */
		}
		assert_ok(odx_buffer_write(x, 4001 * sizeof(float), patch, sizeof(patch),
					   TEST_TIMEOUT_MS));
		assert_int_equal(used(ctx, 0), host0);
	}
	scale(ctx, x, 3.0f, N);
	assert_ok(odx_buffer_read(x, 0, out, N * sizeof(float), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 6.0f * in[i]);
	assert_int_equal(used(ctx, 0), host0);
	assert_ok(odx_buffer_destroy(x));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_int_equal(used(ctx, 1), dev0);
	free(in);
	free(out);
	assert_ok(odx_close(ctx));
}

/* What has no device copy stays in host RAM: a part written into a new buffer (the rest reads
 * as zeros), a buffer never written, a whole write that the device tier has no room for below
 * its monitor's watermark. */
static void test_host_ram_when_no_device_copy(void **state)
{
	odx_context *ctx = open_one_device("1MiB", "true");
	float patch[5] = {1, 2, 3, 4, 5}, got[16];
	float *big = calloc(N * 4, sizeof(float)); /* 1 MiB: above the 90% watermark of 1 MiB */
	uint64_t host0 = used(ctx, 0);
	odx_buffer *a, *z, *b;

	(void)state;
	assert_non_null(big);
	assert_ok(odx_buffer_create(ctx, 64 * sizeof(float), 0, &a));
	assert_ok(odx_buffer_write(a, 3 * sizeof(float), patch, sizeof(patch), TEST_TIMEOUT_MS));
	assert_true(used(ctx, 0) > host0);
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < 16; i++)
		assert_true(got[i] == (i >= 3 && i < 8 ? patch[i - 3] : 0.0f));

	assert_ok(odx_buffer_create(ctx, 16 * sizeof(float), 0, &z));
	memset(got, 0xff, sizeof(got));
	assert_ok(odx_buffer_read(z, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < 16; i++)
		assert_true(got[i] == 0.0f);

	assert_ok(odx_buffer_create(ctx, N * 4 * sizeof(float), 0, &b));
	host0 = used(ctx, 0);
	big[N] = 42.0f;
	assert_ok(odx_buffer_write(b, 0, big, N * 4 * sizeof(float), TEST_TIMEOUT_MS));
	assert_true(used(ctx, 0) >= host0 + N * 4 * sizeof(float));
	/* a kernel brings it to the device; the read then comes from there */
	scale(ctx, b, 0.5f, N * 4);
	assert_ok(odx_buffer_read(b, N * sizeof(float), got, sizeof(got), TEST_TIMEOUT_MS));
	assert_true(got[0] == 21.0f);
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_buffer_destroy(z));
	assert_ok(odx_buffer_destroy(b));
	free(big);
	assert_ok(odx_close(ctx));
}

/* tier.direct_access = false: every read and write goes through host RAM. */
static void test_switched_off(void **state)
{
	odx_context *ctx = open_one_device("0", "false");
	float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
	uint64_t host0 = used(ctx, 0);
	odx_buffer *x;

	(void)state;
	assert_non_null(in);
	assert_non_null(out);
	for (int i = 0; i < N; i++)
		in[i] = (float)(i % 77);
	assert_ok(odx_buffer_create(ctx, N * sizeof(float), 0, &x));
	assert_ok(odx_buffer_write(x, 0, in, N * sizeof(float), TEST_TIMEOUT_MS));
	assert_true(used(ctx, 0) >= host0 + N * sizeof(float));
	scale(ctx, x, 4.0f, N);
	assert_ok(odx_buffer_read(x, 0, out, N * sizeof(float), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 4.0f * in[i]);
	assert_ok(odx_buffer_destroy(x));
	free(in);
	free(out);
	assert_ok(odx_close(ctx));
}

/* Registered user memory is the buffer's host copy: writes land there, never on the device. */
static void test_registered_stays_in_user_memory(void **state)
{
	odx_context *ctx = open_one_device("0", "true");
	float *mem = calloc(N, sizeof(float)), patch[4] = {9, 8, 7, 6};
	odx_buffer *r;

	(void)state;
	assert_non_null(mem);
	for (int i = 0; i < N; i++)
		mem[i] = (float)i;
	assert_ok(odx_buffer_register(ctx, mem, N * sizeof(float), 0, &r));
	scale(ctx, r, 2.0f, N);
	assert_ok(odx_buffer_write(r, 0, patch, sizeof(patch), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(r));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(mem[i] == (i < 4 ? patch[i] : 2.0f * (float)i));
	free(mem);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_kernel_read_on_device),
		cmocka_unit_test(test_host_ram_when_no_device_copy),
		cmocka_unit_test(test_switched_off),
		cmocka_unit_test(test_registered_stays_in_user_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
