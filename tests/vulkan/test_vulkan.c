/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_vulkan.c - the Vulkan backend through the public API: enumeration, buffer round trips of
 * odd sizes and offsets (mapped and staged), kernel results against the host computation, std430
 * offsets of mixed scalars, a chain of 1000 small launches, launches batched into one submission
 * (independent ones, one reading what the one before wrote, launches behind host writes, mapped
 * and staged), refusals (invalid SPIR-V, a missing
 * entry point, arguments that do not match the kernel, oversized blocks) and, without
 * vulkan.allow_cpu, the reason a CPU-only machine gives.
 *
 * Run with ODX_BACKENDS=vulkan ODX_VULKAN_ALLOW_CPU=true (meson sets them). With
 * ODX_VULKAN_VALIDATION=true the Khronos validation layer is on, and any validation message
 * logged by the backend fails the test that was running.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define T TEST_TIMEOUT_MS

/* ---- SPIR-V images written by glslc at build time ----------------------------------------- */

typedef struct spv_image {
	void *code;
	size_t size;
} spv_image;

static spv_image axpy_spv, mixed_spv, bytes_inc_spv;

/* $ODX_TEST_SPV_DIR replaces the build directory (to run the binary on another machine). */
static void load_spv(const char *path, spv_image *img)
{
	const char *dir = getenv("ODX_TEST_SPV_DIR"), *base = strrchr(path, '/');
	char moved[1024];
	FILE *f;
	long n;

	if (dir && *dir) {
		snprintf(moved, sizeof(moved), "%s/%s", dir, base ? base + 1 : path);
		path = moved;
	}
	f = fopen(path, "rb");

	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	img->code = malloc((size_t)n);
	assert_non_null(img->code);
	assert_int_equal(fread(img->code, 1, (size_t)n, f), (size_t)n);
	img->size = (size_t)n;
	fclose(f);
}

/* ---- validation messages: the backend logs them at error level ------------------------------- */

static int validation_messages;
static bool validation_enabled;
static char last_message[1024];

static void log_sink(void *user, odx_log_level level, const char *msg)
{
	(void)user;
	if (strstr(msg, "validation layer enabled"))
		validation_enabled = true;
	if (level == ODX_LOG_ERROR && strstr(msg, "validation")) {
		validation_messages++;
		snprintf(last_message, sizeof(last_message), "%s", msg);
	}
	if (level <= ODX_LOG_WARN)
		fprintf(stderr, "odx: %s\n", msg);
}

static odx_context *open_vk(bool force_staging)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set_log(cfg, log_sink, NULL));
	assert_ok(odx_config_set(cfg, "log", "info"));
	if (force_staging)
		assert_ok(odx_config_set(cfg, "vulkan.force_staging", "true"));
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open: %s: %s", odx_err_name(rc), odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

static void close_vk(odx_context *ctx)
{
	assert_ok(odx_close(ctx));
	if (validation_messages)
		fail_msg("%d validation message(s), the last: %s", validation_messages,
			 last_message);
}

static odx_kernel *spv_kernel(odx_context *ctx, const char *name, const odx_param *params,
			      int nparams, const spv_image *img, const char *entry)
{
	odx_kernel_variant v = {
		.backend = ODX_BACKEND_VULKAN,
		.format = ODX_FORMAT_SPIRV,
		.code = img->code,
		.code_size = img->size,
		.entry = entry,
	};
	odx_kernel *k = NULL;

	assert_ok(odx_kernel_create(ctx, name, params, nparams, &v, 1, &k));
	return k;
}

static const odx_param axpy_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "x"},
	{ODX_ARG_BUFFER, ODX_RW, "y"},
	{ODX_ARG_I64, 0, "n"},
	{ODX_ARG_F32, 0, "a"},
};

static const odx_param bytes_inc_params[] = {
	{ODX_ARG_BUFFER, ODX_RW, "bytes"},
	{ODX_ARG_I64, 0, "n"},
};

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_enumeration(void **state)
{
	odx_context *ctx = open_vk(false);
	odx_device_info info;
	odx_backend_info bi;
	int i, found = 0;

	(void)state;
	assert_true(odx_device_count(ctx) >= 1);
	for (i = 0; i < odx_device_count(ctx); i++) {
		assert_ok(odx_device_get_info(ctx, i, &info));
		assert_int_equal(info.kind, ODX_BACKEND_VULKAN);
		assert_true(info.memory_bytes > 0);
		assert_true(info.compute_lanes >= 1 && info.copy_lanes >= 1);
		print_message("device %d: %s, %llu MiB\n", i, info.name,
			      (unsigned long long)(info.memory_bytes >> 20));
	}
	for (i = 0; i < odx_backend_count(ctx); i++) {
		assert_ok(odx_backend_get_info(ctx, i, &bi));
		if (strcmp(bi.name, "vulkan") == 0) {
			found = 1;
			assert_int_equal(bi.available, 1);
			assert_true(bi.device_count >= 1);
		}
	}
	assert_int_equal(found, 1);
	/* The validation run must really have the layer on, or it proves nothing. */
	if (getenv("ODX_VULKAN_VALIDATION") && strcmp(getenv("ODX_VULKAN_VALIDATION"), "true") == 0)
		assert_true(validation_enabled);
	close_vk(ctx);
}

/* Round trips through device memory: write, increment every byte on the device, read back. */
static void round_trips(bool force_staging)
{
	static const size_t sizes[] = {1, 3, 4, 4097, 65536 + 5};
	odx_context *ctx = open_vk(force_staging);
	odx_kernel *k = spv_kernel(ctx, "bytes_inc", bytes_inc_params, 2, &bytes_inc_spv, "main");
	uint64_t seed = 7;

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s], off, len, i;
		uint8_t *want = malloc(n), *got = malloc(n);
		odx_buffer *b = NULL;
		odx_arg args[2];
		odx_task_opts o = {.block = {64, 1, 1}};

		assert_non_null(want);
		assert_non_null(got);
		for (i = 0; i < n; i++)
			want[i] = (uint8_t)test_rand(&seed);
		assert_ok(odx_buffer_create(ctx, n, 0, &b));
		assert_ok(odx_buffer_write(b, 0, want, n, T));
		args[0] = ODX_BUF(b, ODX_RW);
		args[1] = ODX_I64((int64_t)n);
		o.grid[0] = (uint32_t)((n + 3) / 4 + 63) / 64;
		assert_ok(odx_submit(ctx, k, args, 2, &o, NULL));
		for (i = 0; i < n; i++)
			want[i]++;
		/* An odd sub-range written while the device holds the latest copy. */
		off = n / 3;
		len = n - off > 5 ? 5 : n - off;
		for (i = 0; i < len; i++)
			want[off + i] = (uint8_t)(0xa0 + i);
		assert_ok(odx_buffer_write(b, off, want + off, len, T));
		assert_ok(odx_submit(ctx, k, args, 2, &o, NULL));
		for (i = 0; i < n; i++)
			want[i]++;
		memset(got, 0, n);
		assert_ok(odx_buffer_read(b, 0, got, n, T));
		assert_memory_equal(got, want, n);
		/* And an odd sub-range read. */
		if (n > 2) {
			memset(got, 0, n);
			assert_ok(odx_buffer_read(b, 1, got, n - 2, T));
			assert_memory_equal(got, want + 1, n - 2);
		}
		assert_ok(odx_buffer_destroy(b));
		free(want);
		free(got);
	}
	assert_ok(odx_wait_all(ctx, T));
	assert_ok(odx_kernel_destroy(k));
	close_vk(ctx);
}

static void test_round_trip_mapped(void **state)
{
	(void)state;
	round_trips(false);
}

static void test_round_trip_staged(void **state)
{
	(void)state;
	round_trips(true);
}

/* axpy over n floats with a given geometry; compares with the host computation. */
static void run_axpy(odx_context *ctx, odx_kernel *k, size_t n, const uint32_t grid[3],
		     const uint32_t block[3])
{
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
	float *got = malloc(n * sizeof(float));
	odx_buffer *bx = NULL, *by = NULL;
	odx_task_opts o = {0};
	odx_event *ev = NULL;
	odx_arg args[4];
	const float a = 2.5f;
	size_t i;

	for (i = 0; i < n; i++) {
		x[i] = (float)i * 0.5f;
		y[i] = 1.0f - (float)(i % 7);
	}
	memcpy(o.grid, grid, sizeof(o.grid));
	memcpy(o.block, block, sizeof(o.block));
	assert_ok(odx_buffer_create(ctx, n * sizeof(float), 0, &bx));
	assert_ok(odx_buffer_create(ctx, n * sizeof(float), 0, &by));
	assert_ok(odx_buffer_write(bx, 0, x, n * sizeof(float), T));
	assert_ok(odx_buffer_write(by, 0, y, n * sizeof(float), T));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64((int64_t)n);
	args[3] = ODX_F32(a);
	assert_ok(odx_submit(ctx, k, args, 4, &o, &ev));
	if (odx_event_wait(ev, T) != 0)
		fail_msg("axpy failed: %s", odx_event_message(ev));
	odx_event_release(ev);
	assert_ok(odx_buffer_read(by, 0, got, n * sizeof(float), T));
	for (i = 0; i < n; i++)
		if (got[i] != a * x[i] + y[i])
			fail_msg("y[%zu] = %g, want %g", i, got[i], a * x[i] + y[i]);
	assert_ok(odx_buffer_destroy(bx));
	assert_ok(odx_buffer_destroy(by));
	free(x);
	free(y);
	free(got);
}

static void test_axpy(void **state)
{
	odx_context *ctx = open_vk(false);
	odx_kernel *k = spv_kernel(ctx, "axpy", axpy_params, 4, &axpy_spv, "main");

	(void)state;
	run_axpy(ctx, k, 100000, (uint32_t[]){391, 1, 1}, (uint32_t[]){256, 1, 1});
	/* Odd geometries: a grid larger than needed, odd blocks, 2-D grids, one work-item. */
	run_axpy(ctx, k, 1001, (uint32_t[]){200, 1, 1}, (uint32_t[]){7, 1, 1});
	run_axpy(ctx, k, 999, (uint32_t[]){4, 3, 1}, (uint32_t[]){100, 1, 1});
	run_axpy(ctx, k, 3, (uint32_t[]){3, 1, 1}, (uint32_t[]){1, 1, 1});
	run_axpy(ctx, k, 5, (uint32_t[]){1, 1, 1}, (uint32_t[]){5, 1, 1});
	assert_ok(odx_kernel_destroy(k));
	close_vk(ctx);
}

/* Three buffers and i32, f64, i32, i64, f32 scalars at std430 offsets 0, 8, 16, 24, 32. */
static void test_mixed_scalars(void **state)
{
	static const odx_param params[] = {
		{ODX_ARG_BUFFER, ODX_R, "ints"}, {ODX_ARG_BUFFER, ODX_R, "floats"},
		{ODX_ARG_BUFFER, ODX_W, "out"},	 {ODX_ARG_I32, 0, "a"},
		{ODX_ARG_F64, 0, "b"},		 {ODX_ARG_I32, 0, "n"},
		{ODX_ARG_I64, 0, "d"},		 {ODX_ARG_F32, 0, "e"},
	};
	enum { N = 1000 };
	odx_context *ctx = open_vk(false);
	odx_kernel *k = spv_kernel(ctx, "mixed", params, 8, &mixed_spv, "main");
	int32_t ints[N];
	float floats[N];
	double out[N];
	odx_buffer *bi = NULL, *bf = NULL, *bo = NULL;
	const int32_t a = -17;
	const double b = 0.125;
	const int64_t d = ((int64_t)1 << 40) + 3;
	const float e = 3.0f;
	odx_task_opts o = {.grid = {(N + 63) / 64, 1, 1}, .block = {64, 1, 1}};
	odx_arg args[8];
	int i;

	(void)state;
	for (i = 0; i < N; i++) {
		ints[i] = i * 3 - 500;
		floats[i] = (float)i * 0.25f;
	}
	assert_ok(odx_buffer_create(ctx, sizeof(ints), 0, &bi));
	assert_ok(odx_buffer_create(ctx, sizeof(floats), 0, &bf));
	assert_ok(odx_buffer_create(ctx, sizeof(out), 0, &bo));
	assert_ok(odx_buffer_write(bi, 0, ints, sizeof(ints), T));
	assert_ok(odx_buffer_write(bf, 0, floats, sizeof(floats), T));
	args[0] = ODX_BUF(bi, ODX_R);
	args[1] = ODX_BUF(bf, ODX_R);
	args[2] = ODX_BUF(bo, ODX_W);
	args[3] = ODX_I32(a);
	args[4] = ODX_F64(b);
	args[5] = ODX_I32(N);
	args[6] = ODX_I64(d);
	args[7] = ODX_F32(e);
	assert_ok(odx_submit(ctx, k, args, 8, &o, NULL));
	assert_ok(odx_buffer_read(bo, 0, out, sizeof(out), T));
	for (i = 0; i < N; i++) {
		double want = (double)ints[i] * b + (double)floats[i] * (double)e + (double)a +
			      (double)d;

		if (out[i] != want)
			fail_msg("out[%d] = %.17g, want %.17g", i, out[i], want);
	}
	assert_ok(odx_wait_all(ctx, T));
	close_vk(ctx);
}

/* 1000 tiny launches, each depending on the one before (y += 1 * x with x = 1). */
static void test_chain(void **state)
{
	enum { N = 64 };
	long launches = test_scaled(1000, 10), i;
	odx_context *ctx = open_vk(false);
	odx_kernel *k = spv_kernel(ctx, "axpy", axpy_params, 4, &axpy_spv, "main");
	float ones[N], zeros[N] = {0}, got[N];
	odx_buffer *bx = NULL, *by = NULL;
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {N, 1, 1}};
	odx_arg args[4];

	(void)state;
	for (i = 0; i < N; i++)
		ones[i] = 1.0f;
	assert_ok(odx_buffer_create(ctx, sizeof(ones), 0, &bx));
	assert_ok(odx_buffer_create(ctx, sizeof(zeros), 0, &by));
	assert_ok(odx_buffer_write(bx, 0, ones, sizeof(ones), T));
	assert_ok(odx_buffer_write(by, 0, zeros, sizeof(zeros), T));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64(N);
	args[3] = ODX_F32(1.0f);
	for (i = 0; i < launches; i++)
		assert_ok(odx_submit(ctx, k, args, 4, &o, NULL));
	assert_ok(odx_wait_all(ctx, T));
	assert_ok(odx_buffer_read(by, 0, got, sizeof(got), T));
	for (i = 0; i < N; i++)
		assert_true(got[i] == (float)launches);
	close_vk(ctx);
}

/*
 * Many launches in flight at once, so the backend records them into shared submissions: P
 * independent axpy streams interleaved, plus a pipeline in which each launch reads the buffer the
 * launch just before it wrote (y += x, then z += y: z ends at 1 + 2 + ... + K). Wrong results
 * mean a missing barrier between the dispatches of one command buffer, or a lost launch.
 */
static void test_batched(void **state)
{
	enum { N = 64, P = 8 };
	long rounds = test_scaled(40, 5), k, i, j;
	odx_context *ctx = open_vk(false);
	odx_kernel *kk = spv_kernel(ctx, "axpy", axpy_params, 4, &axpy_spv, "main");
	float init[N], zeros[N] = {0}, got[N];
	odx_buffer *bx[P], *by[P], *ones = NULL, *py = NULL, *pz = NULL;
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {N, 1, 1}};
	odx_arg args[4];

	(void)state;
	args[2] = ODX_I64(N);
	args[3] = ODX_F32(1.0f);
	for (j = 0; j < P; j++) {
		for (i = 0; i < N; i++)
			init[i] = (float)(j + 1);
		assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &bx[j]));
		assert_ok(odx_buffer_create(ctx, sizeof(zeros), 0, &by[j]));
		assert_ok(odx_buffer_write(bx[j], 0, init, sizeof(init), T));
		assert_ok(odx_buffer_write(by[j], 0, zeros, sizeof(zeros), T));
	}
	for (i = 0; i < N; i++)
		init[i] = 1.0f;
	assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &ones));
	assert_ok(odx_buffer_create(ctx, sizeof(zeros), 0, &py));
	assert_ok(odx_buffer_create(ctx, sizeof(zeros), 0, &pz));
	assert_ok(odx_buffer_write(ones, 0, init, sizeof(init), T));
	assert_ok(odx_buffer_write(py, 0, zeros, sizeof(zeros), T));
	assert_ok(odx_buffer_write(pz, 0, zeros, sizeof(zeros), T));
	for (k = 0; k < rounds; k++) {
		for (j = 0; j < P; j++) {
			args[0] = ODX_BUF(bx[j], ODX_R);
			args[1] = ODX_BUF(by[j], ODX_RW);
			assert_ok(odx_submit(ctx, kk, args, 4, &o, NULL));
		}
		args[0] = ODX_BUF(ones, ODX_R);
		args[1] = ODX_BUF(py, ODX_RW);
		assert_ok(odx_submit(ctx, kk, args, 4, &o, NULL));
		args[0] = ODX_BUF(py, ODX_R);
		args[1] = ODX_BUF(pz, ODX_RW);
		assert_ok(odx_submit(ctx, kk, args, 4, &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, T));
	for (j = 0; j < P; j++) {
		assert_ok(odx_buffer_read(by[j], 0, got, sizeof(got), T));
		for (i = 0; i < N; i++)
			if (got[i] != (float)(rounds * (j + 1)))
				fail_msg("stream %ld: y[%ld] = %g, want %g", j, i, got[i],
					 (double)(rounds * (j + 1)));
		assert_ok(odx_buffer_destroy(bx[j]));
		assert_ok(odx_buffer_destroy(by[j]));
	}
	assert_ok(odx_buffer_read(pz, 0, got, sizeof(got), T));
	for (i = 0; i < N; i++)
		if (got[i] != (float)(rounds * (rounds + 1) / 2))
			fail_msg("pipeline: z[%ld] = %g, want %g", i, got[i],
				 (double)(rounds * (rounds + 1) / 2));
	assert_ok(odx_buffer_destroy(ones));
	assert_ok(odx_buffer_destroy(py));
	assert_ok(odx_buffer_destroy(pz));
	assert_ok(odx_kernel_destroy(kk));
	close_vk(ctx);
}

/*
 * A host write before each launch (the benchmark's loop): the launch must see the bytes the
 * copy lane wrote, through the map or a staging copy on the other queue. y ends at 1 + ... + M.
 */
static void writes_then_launches(bool force_staging)
{
	enum { N = 64 };
	long iters = test_scaled(200, 10), k, i;
	odx_context *ctx = open_vk(force_staging);
	odx_kernel *kk = spv_kernel(ctx, "axpy", axpy_params, 4, &axpy_spv, "main");
	float x[N], zeros[N] = {0}, got[N];
	odx_buffer *bx = NULL, *by = NULL;
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {N, 1, 1}};
	odx_arg args[4];

	assert_ok(odx_buffer_create(ctx, sizeof(x), 0, &bx));
	assert_ok(odx_buffer_create(ctx, sizeof(zeros), 0, &by));
	assert_ok(odx_buffer_write(by, 0, zeros, sizeof(zeros), T));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64(N);
	args[3] = ODX_F32(1.0f);
	for (k = 1; k <= iters; k++) {
		for (i = 0; i < N; i++)
			x[i] = (float)k;
		assert_ok(odx_buffer_write(bx, 0, x, sizeof(x), T));
		assert_ok(odx_submit(ctx, kk, args, 4, &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, T));
	assert_ok(odx_buffer_read(by, 0, got, sizeof(got), T));
	for (i = 0; i < N; i++)
		if (got[i] != (float)(iters * (iters + 1) / 2))
			fail_msg("y[%ld] = %g, want %g", i, got[i], (double)(iters * (iters + 1) / 2));
	assert_ok(odx_buffer_destroy(bx));
	assert_ok(odx_buffer_destroy(by));
	assert_ok(odx_kernel_destroy(kk));
	close_vk(ctx);
}

static void test_writes_then_launches_mapped(void **state)
{
	(void)state;
	writes_then_launches(false);
}

static void test_writes_then_launches_staged(void **state)
{
	(void)state;
	writes_then_launches(true);
}

/* Submits `k` over a fresh buffer pair and returns the task's status and message. */
static int submit_axpy_status(odx_context *ctx, odx_kernel *k, const odx_arg *scalars,
			      const uint32_t block[3], char *msg, size_t msg_size)
{
	odx_buffer *bx = NULL, *by = NULL;
	odx_task_opts o = {.grid = {1, 1, 1}};
	odx_event *ev = NULL;
	odx_arg args[4];
	int rc;

	memcpy(o.block, block, sizeof(o.block));
	assert_ok(odx_buffer_create(ctx, 64, 0, &bx));
	assert_ok(odx_buffer_create(ctx, 64, 0, &by));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = scalars[0];
	args[3] = scalars[1];
	assert_ok(odx_submit(ctx, k, args, 4, &o, &ev));
	rc = odx_event_wait(ev, T);
	snprintf(msg, msg_size, "%s", odx_event_message(ev));
	odx_event_release(ev);
	assert_ok(odx_buffer_destroy(bx));
	assert_ok(odx_buffer_destroy(by));
	odx_wait_all(ctx, T); /* clears the failure for the next check */
	return rc;
}

static void test_invalid_spirv(void **state)
{
	static const uint32_t garbage[] = {0xdeadbeef, 1, 2, 3, 4, 5};
	/* A valid header whose one instruction claims more words than there are. */
	static const uint32_t truncated[] = {0x07230203, 0x00010500, 0, 10, 0, (20u << 16) | 17};
	static const uint8_t odd[7] = {3, 2, 0x23, 7, 0, 0, 0};
	const struct {
		const void *code;
		size_t size;
		const char *entry;
		const char *says;
	} cases[] = {
		{garbage, sizeof(garbage), "main", "magic"},
		{truncated, sizeof(truncated), "main", "past the end"},
		{odd, sizeof(odd), "main", "whole number of words"},
		{axpy_spv.code, axpy_spv.size, "nope", "entry point named 'nope'"},
	};
	odx_arg scalars[2] = {ODX_I64(16), ODX_F32(1.0f)};
	odx_context *ctx = open_vk(false);
	char msg[1024];

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		spv_image img = {(void *)cases[c].code, cases[c].size};
		odx_kernel *k = spv_kernel(ctx, "broken", axpy_params, 4, &img, cases[c].entry);

		assert_rc(submit_axpy_status(ctx, k, scalars, (uint32_t[]){16, 1, 1}, msg,
					     sizeof(msg)),
			  ODX_EBACKEND);
		assert_contains(msg, cases[c].says);
		assert_ok(odx_kernel_destroy(k));
	}
	close_vk(ctx);
}

/* Arguments that do not match the kernel's interface, and blocks beyond the device's limits,
 * are refused before the driver sees them. */
static void test_refusals(void **state)
{
	/* axpy's SPIR-V declares (i64 n, f32 a); this signature says (i32, f32). */
	static const odx_param wrong[] = {
		{ODX_ARG_BUFFER, ODX_R, "x"},
		{ODX_ARG_BUFFER, ODX_RW, "y"},
		{ODX_ARG_I32, 0, "n"},
		{ODX_ARG_F32, 0, "a"},
	};
	static const odx_param one_buffer[] = {
		{ODX_ARG_BUFFER, ODX_RW, "y"},
		{ODX_ARG_I64, 0, "n"},
		{ODX_ARG_F32, 0, "a"},
	};
	odx_arg good[2] = {ODX_I64(16), ODX_F32(1.0f)};
	odx_arg bad[2] = {ODX_I32(16), ODX_F32(1.0f)};
	odx_context *ctx = open_vk(false);
	odx_kernel *k = spv_kernel(ctx, "axpy_wrong", wrong, 4, &axpy_spv, "main");
	odx_kernel *ok = spv_kernel(ctx, "axpy", axpy_params, 4, &axpy_spv, "main");
	odx_kernel *k1 = spv_kernel(ctx, "axpy_one", one_buffer, 3, &axpy_spv, "main");
	odx_buffer *by = NULL;
	odx_event *ev = NULL;
	odx_arg args[3];
	char msg[1024];

	(void)state;
	assert_rc(submit_axpy_status(ctx, k, bad, (uint32_t[]){16, 1, 1}, msg, sizeof(msg)),
		  ODX_EINVAL);
	assert_contains(msg, "push-constant offset");
	assert_rc(submit_axpy_status(ctx, ok, good, (uint32_t[]){2048, 1, 1}, msg, sizeof(msg)),
		  ODX_EINVAL);
	assert_contains(msg, "exceeds");
	assert_rc(submit_axpy_status(ctx, ok, good, (uint32_t[]){64, 64, 1}, msg, sizeof(msg)),
		  ODX_EINVAL);
	assert_contains(msg, "work-items");
	/* The kernel binds two buffers; a launch with one is refused. */
	assert_ok(odx_buffer_create(ctx, 64, 0, &by));
	args[0] = ODX_BUF(by, ODX_RW);
	args[1] = ODX_I64(16);
	args[2] = ODX_F32(1.0f);
	assert_ok(odx_submit(ctx, k1, args, 3, &(odx_task_opts){.block = {16, 1, 1}}, &ev));
	assert_rc(odx_event_wait(ev, T), ODX_EINVAL);
	assert_contains(odx_event_message(ev), "binding 1");
	odx_event_release(ev);
	odx_wait_all(ctx, T);
	/* And the device still works afterwards. */
	assert_ok(submit_axpy_status(ctx, ok, good, (uint32_t[]){16, 1, 1}, msg, sizeof(msg)));
	assert_ok(odx_buffer_destroy(by));
	close_vk(ctx);
}

/* Without vulkan.allow_cpu a machine with only CPU Vulkan devices says so. */
static void test_cpu_needs_allow(void **state)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	(void)state;
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "vulkan.allow_cpu", "false"));
	assert_ok(odx_config_set_log(cfg, log_sink, NULL));
	rc = odx_open(&ctx, cfg);
	if (rc == 0) {
		odx_close(ctx);
		odx_config_destroy(cfg);
		skip(); /* a real GPU is present: nothing to refuse */
	}
	assert_rc(rc, ODX_EUNAVAIL);
	assert_contains(odx_config_error(cfg), "allow_cpu");
	print_message("reason: %s\n", odx_config_error(cfg));
	odx_config_destroy(cfg);
}

static int setup(void **state)
{
	(void)state;
	validation_messages = 0;
	last_message[0] = '\0';
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_enumeration, setup),
		cmocka_unit_test_setup(test_round_trip_mapped, setup),
		cmocka_unit_test_setup(test_round_trip_staged, setup),
		cmocka_unit_test_setup(test_axpy, setup),
		cmocka_unit_test_setup(test_mixed_scalars, setup),
		cmocka_unit_test_setup(test_chain, setup),
		cmocka_unit_test_setup(test_batched, setup),
		cmocka_unit_test_setup(test_writes_then_launches_mapped, setup),
		cmocka_unit_test_setup(test_writes_then_launches_staged, setup),
		cmocka_unit_test_setup(test_invalid_spirv, setup),
		cmocka_unit_test_setup(test_refusals, setup),
		cmocka_unit_test_setup(test_cpu_needs_allow, setup),
	};

	load_spv(AXPY_SPV, &axpy_spv);
	load_spv(MIXED_SPV, &mixed_spv);
	load_spv(BYTES_INC_SPV, &bytes_inc_spv);
	return cmocka_run_group_tests_name("vulkan", tests, NULL, NULL);
}
