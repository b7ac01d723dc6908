/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_opencl.c - the OpenCL backend on whatever OpenCL platform the machine has (PoCL in CI,
 * hence ODX_OPENCL_ALLOW_CPU): enumeration, buffer round trips, a user kernel in OpenCL C, a long
 * chain of launches, a device-to-device copy when there are two devices (POCL_DEVICES="pthread
 * pthread"), build errors and missing entry points with the compiler's words, mismatched
 * arguments refused, allocation failures, and the binary cache on disk.
 *
 * Environment (set by tests/opencl/meson.build): ODX_BACKENDS=opencl, ODX_OPENCL_ALLOW_CPU=true,
 * ODX_TEST_OPENCL_DEVICES (devices expected), ODX_TEST_OPENCL_TMP (a private scratch directory).
 */
#include <dirent.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

static const char inc_src[] = "__kernel void inc(__global uchar *b, int n)\n"
			      "{\n"
			      "	int i = get_global_id(0);\n"
			      "	if (i < n)\n"
			      "		b[i] = (uchar)(b[i] + 1);\n"
			      "}\n";

static const char axpy_src[] =
	"__kernel void axpy(float a, __global const float *x, __global float *y, int n)\n"
	"{\n"
	"	int i = get_global_id(0);\n"
	"	if (i < n)\n"
	"		y[i] = a * x[i] + y[i];\n"
	"}\n";

static const char add1_src[] = "__kernel void add1(__global int *p)\n"
			       "{\n"
			       "	if (get_global_id(0) == 0)\n"
			       "		p[0] += 1;\n"
			       "}\n";

static const char iota_src[] =
	"__kernel void iota3(__global int *x, int n)\n"
	"{\n"
	"	int i = get_global_id(0);\n"
	"	if (i < n)\n"
	"		x[i] = 3 * i + 1;\n"
	"}\n"
	"__kernel void plus1(__global const int *x, __global int *y, int n)\n"
	"{\n"
	"	int i = get_global_id(0);\n"
	"	if (i < n)\n"
	"		y[i] = x[i] + 1;\n"
	"}\n";

static const char broken_src[] = "__kernel void broken(__global int *x)\n"
				 "{\n"
				 "	x[0] = undeclared_thing_42;\n"
				 "}\n";

/* ---- helpers ------------------------------------------------------------------------------ */

static int expected_devices(void)
{
	const char *s = getenv("ODX_TEST_OPENCL_DEVICES");

	return s && *s ? atoi(s) : 1;
}

/* An OpenCL C kernel; the source is passed without its NUL, as a blob would be. */
static odx_kernel *cl_kernel(odx_context *ctx, const char *name, const odx_param *params,
			     int nparams, const char *src, const char *entry)
{
	odx_kernel *k = NULL;
	odx_kernel_variant v = {
		.backend = ODX_BACKEND_OPENCL,
		.format = ODX_FORMAT_OPENCL_C,
		.code = src,
		.code_size = strlen(src),
		.entry = entry,
	};

	assert_ok(odx_kernel_create(ctx, name, params, nparams, &v, 1, &k));
	return k;
}

static odx_task_opts grid_for(size_t n, int device)
{
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE,
			   .on_device = device ? device - 1 : ODX_DEVICE_ANY};

	o.block[0] = 64;
	o.grid[0] = (uint32_t)((n + 63) / 64);
	return o;
}

/* Runs a task and returns its final status; the message is copied to msg. */
static int run_task(odx_context *ctx, odx_kernel *k, const odx_arg *args, int nargs,
		    const odx_task_opts *o, char *msg, size_t msg_size)
{
	odx_event *ev = NULL;
	int rc;

	assert_ok(odx_submit(ctx, k, args, nargs, o, &ev));
	rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
	assert_int_not_equal(rc, ODX_ETIMEDOUT);
	if (msg)
		snprintf(msg, msg_size, "%s", odx_event_message(ev));
	odx_event_release(ev);
	return rc;
}

/* Collects log lines, for the cache tests. */
static struct {
	pthread_mutex_t lock;
	char text[32768];
	size_t len;
} logged = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void log_sink(void *user, odx_log_level level, const char *msg)
{
	size_t n = strlen(msg);

	(void)user;
	(void)level;
	pthread_mutex_lock(&logged.lock);
	if (logged.len + n + 2 < sizeof(logged.text)) {
		memcpy(logged.text + logged.len, msg, n);
		logged.len += n;
		logged.text[logged.len++] = '\n';
		logged.text[logged.len] = '\0';
	}
	pthread_mutex_unlock(&logged.lock);
}

static void log_reset(void)
{
	pthread_mutex_lock(&logged.lock);
	logged.len = 0;
	logged.text[0] = '\0';
	pthread_mutex_unlock(&logged.lock);
}

/* A context with the binary cache in `dir` and a debug log into `logged`. */
static odx_context *open_with_cache(const char *dir)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "opencl.cache_dir", dir));
	assert_ok(odx_config_set(cfg, "log", "debug"));
	assert_ok(odx_config_set_log(cfg, log_sink, NULL));
	if (odx_open(&ctx, cfg) != 0)
		fail_msg("odx_open: %s", odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

/* A fresh directory under the test's scratch directory. */
static void scratch_dir(char *path, size_t size)
{
	const char *tmp = getenv("ODX_TEST_OPENCL_TMP");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	mkdir(tmp, 0700);
	snprintf(path, size, "%s/cache-XXXXXX", tmp);
	assert_non_null(mkdtemp(path));
}

/* The single *.clbin file in `dir` (fails if there is not exactly one). */
static void cache_file(const char *dir, char *path, size_t size)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (len > 6 && strcmp(e->d_name + len - 6, ".clbin") == 0) {
			snprintf(path, size, "%s/%s", dir, e->d_name);
			found++;
		}
	}
	closedir(d);
	assert_int_equal(found, 1);
}

static void run_axpy(odx_context *ctx, size_t n)
{
	static const odx_param params[] = {{ODX_ARG_F32, 0, "a"},
					   {ODX_ARG_BUFFER, ODX_R, "x"},
					   {ODX_ARG_BUFFER, ODX_RW, "y"},
					   {ODX_ARG_I32, 0, "n"}};
	odx_kernel *k = cl_kernel(ctx, "axpy", params, 4, axpy_src, "axpy");
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
	float *out = malloc(n * sizeof(float));
	odx_buffer *bx = NULL, *by = NULL;
	const float a = 2.5f;
	odx_task_opts o = grid_for(n, 0);
	size_t i;

	assert_non_null(x);
	assert_non_null(y);
	assert_non_null(out);
	for (i = 0; i < n; i++) {
		x[i] = (float)i * 0.5f - 7.0f;
		y[i] = (float)(i % 97) * 0.25f;
	}
	assert_ok(odx_buffer_create(ctx, n * sizeof(float), 0, &bx));
	assert_ok(odx_buffer_create(ctx, n * sizeof(float), 0, &by));
	assert_ok(odx_buffer_write(bx, 0, x, n * sizeof(float), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(by, 0, y, n * sizeof(float), TEST_TIMEOUT_MS));
	{
		odx_arg args[] = {ODX_F32(a), ODX_BUF(bx, 0), ODX_BUF(by, 0), ODX_I32((int32_t)n)};
		char msg[1024];
		int rc = run_task(ctx, k, args, 4, &o, msg, sizeof(msg));

		if (rc != 0)
			fail_msg("axpy: %s: %s", odx_err_name(rc), msg);
	}
	assert_ok(odx_buffer_read(by, 0, out, n * sizeof(float), TEST_TIMEOUT_MS));
	for (i = 0; i < n; i++) {
		/* The device may contract a*x+y into one fma: allow the last bits to differ. */
		float want = a * x[i] + y[i];

		if (fabsf(out[i] - want) > 1e-5f * (fabsf(want) + 1.0f))
			fail_msg("y[%zu] = %g, want %g", i, (double)out[i], (double)want);
	}
	odx_buffer_destroy(bx);
	odx_buffer_destroy(by);
	odx_kernel_destroy(k);
	free(x);
	free(y);
	free(out);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_enumeration(void **state)
{
	odx_context *ctx = test_open_ctx(NULL);
	int n = odx_device_count(ctx), i, found = 0;

	(void)state;
	assert_int_equal(n, expected_devices());
	for (i = 0; i < n; i++) {
		odx_device_info info;

		assert_ok(odx_device_get_info(ctx, i, &info));
		assert_int_equal(info.kind, ODX_BACKEND_OPENCL);
		assert_true(info.memory_bytes > 0);
		assert_int_equal(info.compute_lanes, 1);
		assert_int_equal(info.copy_lanes, 1);
		assert_true(strlen(info.name) > 0);
	}
	for (i = 0; i < odx_backend_count(ctx); i++) {
		odx_backend_info b;

		assert_ok(odx_backend_get_info(ctx, i, &b));
		if (strcmp(b.name, "opencl") == 0) {
			found = 1;
			assert_int_equal(b.available, 1);
			assert_int_equal(b.device_count, n);
			assert_contains(b.origin, "libodx-backend-opencl.so");
		}
	}
	assert_int_equal(found, 1);
	assert_ok(odx_close(ctx));
}

/* Odd sizes and offsets through host->device->host: the inc kernel forces the device trip. */
static void test_round_trip(void **state)
{
	static const size_t sizes[] = {1, 3, 1237, 65537, (1u << 20) + 3};
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_RW, "b"}, {ODX_ARG_I32, 0, "n"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel *k = cl_kernel(ctx, "inc", params, 2, inc_src, "inc");
	size_t s;
	int dev;

	(void)state;
	for (dev = 0; dev < odx_device_count(ctx); dev++) {
		for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			size_t n = sizes[s], off = n > 7 ? 7 : 0, len = n - off - (n > 13 ? 5 : 0);
			uint8_t *src = malloc(n), *dst = malloc(n);
			odx_buffer *b = NULL;
			odx_task_opts o = grid_for(n, dev + 1);
			size_t i;

			assert_non_null(src);
			assert_non_null(dst);
			for (i = 0; i < n; i++)
				src[i] = (uint8_t)test_mix(i, n);
			assert_ok(odx_buffer_create(ctx, n, 0, &b));
			/* The untouched head and tail stay zero (a new buffer reads as zeros). */
			assert_ok(odx_buffer_write(b, off, src + off, len, TEST_TIMEOUT_MS));
			{
				odx_arg args[] = {ODX_BUF(b, 0), ODX_I32((int32_t)n)};
				char msg[1024];
				int rc = run_task(ctx, k, args, 2, &o, msg, sizeof(msg));

				if (rc)
					fail_msg("inc: %s: %s", odx_err_name(rc), msg);
			}
			memset(dst, 0xee, n);
			assert_ok(odx_buffer_read(b, 0, dst, n, TEST_TIMEOUT_MS));
			for (i = 0; i < n; i++) {
				uint8_t want =
					(uint8_t)((i >= off && i < off + len ? src[i] : 0) + 1);

				if (dst[i] != want)
					fail_msg("device %d size %zu: byte %zu is %u, want %u", dev,
						 n, i, dst[i], want);
			}
			/* A read at an odd offset sees the same bytes. */
			if (n > 13) {
				memset(dst, 0, n);
				assert_ok(odx_buffer_read(b, 5, dst, 7, TEST_TIMEOUT_MS));
				for (i = 0; i < 7; i++)
					assert_int_equal(
						dst[i],
						(uint8_t)((5 + i >= off ? src[5 + i] : 0) + 1));
			}
			odx_buffer_destroy(b);
			free(src);
			free(dst);
		}
	}
	odx_kernel_destroy(k);
	assert_ok(odx_close(ctx));
}

static void test_axpy(void **state)
{
	odx_context *ctx = test_open_ctx(NULL);

	(void)state;
	run_axpy(ctx, 10007);
	run_axpy(ctx, 1);
	assert_ok(odx_close(ctx));
}

/* 1000 dependent launches of a tiny kernel: each must see the previous one's result. */
static void test_chain(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_RW, "p"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel *k = cl_kernel(ctx, "add1", params, 1, add1_src, "add1");
	odx_buffer *b = NULL;
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};
	int32_t v = 0, i;
	const int32_t n = (int32_t)test_scaled(1000, 50);

	(void)state;
	assert_ok(odx_buffer_create(ctx, sizeof(v), 0, &b));
	for (i = 0; i < n; i++) {
		odx_arg arg = ODX_BUF(b, 0);

		assert_ok(odx_submit(ctx, k, &arg, 1, &o, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(b, 0, &v, sizeof(v), TEST_TIMEOUT_MS));
	assert_int_equal(v, n);
	odx_buffer_destroy(b);
	odx_kernel_destroy(k);
	assert_ok(odx_close(ctx));
}

/* Written by a task on device 0, read by a task on device 1: a device-to-device copy. */
static void test_two_devices(void **state)
{
	static const odx_param p_iota[] = {{ODX_ARG_BUFFER, ODX_W, "x"}, {ODX_ARG_I32, 0, "n"}};
	static const odx_param p_plus[] = {{ODX_ARG_BUFFER, ODX_R, "x"},
					   {ODX_ARG_BUFFER, ODX_W, "y"},
					   {ODX_ARG_I32, 0, "n"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel *iota, *plus;
	odx_buffer *x = NULL, *y = NULL;
	const int n = 100003;
	int32_t *out = malloc(n * sizeof(int32_t));
	odx_memnode_info m1, host;
	char msg[1024];
	int i, rc;

	(void)state;
	if (odx_device_count(ctx) < 2) {
		odx_close(ctx);
		free(out);
		skip();
	}
	iota = cl_kernel(ctx, "iota3", p_iota, 2, iota_src, "iota3");
	plus = cl_kernel(ctx, "plus1", p_plus, 3, iota_src, "plus1");
	assert_ok(odx_buffer_create(ctx, n * sizeof(int32_t), 0, &x));
	assert_ok(odx_buffer_create(ctx, n * sizeof(int32_t), 0, &y));
	{
		odx_arg args[] = {ODX_BUF(x, 0), ODX_I32(n)};
		odx_task_opts o = grid_for((size_t)n, 1);

		rc = run_task(ctx, iota, args, 2, &o, msg, sizeof(msg));
		if (rc)
			fail_msg("iota3: %s: %s", odx_err_name(rc), msg);
	}
	{
		odx_arg args[] = {ODX_BUF(x, 0), ODX_BUF(y, 0), ODX_I32(n)};
		odx_task_opts o = grid_for((size_t)n, 2);

		rc = run_task(ctx, plus, args, 3, &o, msg, sizeof(msg));
		if (rc)
			fail_msg("plus1: %s: %s", odx_err_name(rc), msg);
	}
	/* x went from device 0 to device 1, not through the host: node 2 holds it and y. */
	assert_ok(odx_memnode_get_info(ctx, 2, &m1));
	assert_true(m1.used_bytes >= 2 * n * sizeof(int32_t));
	assert_ok(odx_memnode_get_info(ctx, 0, &host));
	assert_int_equal(host.used_bytes, 0);
	assert_ok(odx_buffer_read(y, 0, out, n * sizeof(int32_t), TEST_TIMEOUT_MS));
	for (i = 0; i < n; i++)
		if (out[i] != 3 * i + 2)
			fail_msg("y[%d] = %d, want %d", i, out[i], 3 * i + 2);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	odx_kernel_destroy(iota);
	odx_kernel_destroy(plus);
	free(out);
	assert_ok(odx_close(ctx));
}

static void test_build_error(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_W, "x"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel *k = cl_kernel(ctx, "broken", params, 1, broken_src, "broken");
	odx_buffer *b = NULL;
	odx_arg arg;
	char msg[1024];
	int round;

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	arg = ODX_BUF(b, 0);
	/* The second submission gets the remembered failure, not a second compilation. */
	for (round = 0; round < 2; round++) {
		odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};

		assert_rc(run_task(ctx, k, &arg, 1, &o, msg, sizeof(msg)), ODX_EBACKEND);
		if (round == 0)
			print_message("build error: %s\n", msg);
		assert_contains(msg, "undeclared_thing_42");
		assert_contains(msg, "CL_BUILD_PROGRAM_FAILURE");
	}
	odx_buffer_destroy(b);
	odx_kernel_destroy(k);
	assert_ok(odx_close(ctx));
}

static void test_missing_entry(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_RW, "p"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel *k = cl_kernel(ctx, "nope", params, 1, add1_src, "no_such_entry");
	odx_buffer *b = NULL;
	odx_arg arg;
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};
	char msg[1024];

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	arg = ODX_BUF(b, 0);
	assert_rc(run_task(ctx, k, &arg, 1, &o, msg, sizeof(msg)), ODX_EBACKEND);
	print_message("missing entry: %s\n", msg);
	assert_contains(msg, "no_such_entry");
	assert_contains(msg, "CL_INVALID_KERNEL_NAME");
	assert_contains(msg, "add1"); /* what the program does define */
	odx_buffer_destroy(b);
	odx_kernel_destroy(k);
	assert_ok(odx_close(ctx));
}

/* A signature that disagrees with the OpenCL C source is refused before the driver runs it. */
static void expect_refused(odx_context *ctx, const odx_param *params, const odx_arg *args,
			   const char *why)
{
	odx_kernel *k = cl_kernel(ctx, "axpy_bad", params, 4, axpy_src, "axpy");
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};
	char msg[1024];

	assert_rc(run_task(ctx, k, args, 4, &o, msg, sizeof(msg)), ODX_EINVAL);
	assert_contains(msg, why);
	odx_kernel_destroy(k);
}

static void test_bad_arguments(void **state)
{
	static const odx_param too_few[] = {{ODX_ARG_F32, 0, "a"},
					    {ODX_ARG_BUFFER, ODX_R, "x"},
					    {ODX_ARG_BUFFER, ODX_RW, "y"}};
	static const odx_param wrong_type[] = {{ODX_ARG_I32, 0, "a"},
					       {ODX_ARG_BUFFER, ODX_R, "x"},
					       {ODX_ARG_BUFFER, ODX_RW, "y"},
					       {ODX_ARG_I32, 0, "n"}};
	static const odx_param scalar_for_buffer[] = {{ODX_ARG_F32, 0, "a"},
						      {ODX_ARG_BUFFER, ODX_R, "x"},
						      {ODX_ARG_I64, 0, "y"},
						      {ODX_ARG_I32, 0, "n"}};
	static const odx_param wide_int[] = {{ODX_ARG_F32, 0, "a"},
					     {ODX_ARG_BUFFER, ODX_R, "x"},
					     {ODX_ARG_BUFFER, ODX_RW, "y"},
					     {ODX_ARG_I64, 0, "n"}};
	odx_context *ctx = test_open_ctx(NULL);
	odx_buffer *x = NULL, *y = NULL;
	odx_kernel *k;
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};
	char msg[1024];

	(void)state;
	/* Each failed task poisons the buffers it writes: fresh ones for every case. */
	assert_ok(odx_buffer_create(ctx, 16, 0, &x));
	assert_ok(odx_buffer_create(ctx, 16, 0, &y));
	k = cl_kernel(ctx, "axpy3", too_few, 3, axpy_src, "axpy");
	{
		odx_arg args[] = {ODX_F32(1.0f), ODX_BUF(x, 0), ODX_BUF(y, 0)};

		assert_rc(run_task(ctx, k, args, 3, &o, msg, sizeof(msg)), ODX_EINVAL);
		assert_contains(msg, "takes 4 arguments");
	}
	odx_kernel_destroy(k);
	odx_buffer_destroy(y);
	assert_ok(odx_buffer_create(ctx, 16, 0, &y));
	{
		odx_arg args[] = {ODX_I32(1), ODX_BUF(x, 0), ODX_BUF(y, 0), ODX_I32(4)};

		expect_refused(ctx, wrong_type, args, "parameter 0 is 'float'");
	}
	odx_buffer_destroy(y);
	assert_ok(odx_buffer_create(ctx, 16, 0, &y));
	{
		odx_arg args[] = {ODX_F32(1.0f), ODX_BUF(x, 0), ODX_I64(7), ODX_I32(4)};

		expect_refused(ctx, scalar_for_buffer, args, "parameter 2");
	}
	{
		odx_arg args[] = {ODX_F32(1.0f), ODX_BUF(x, 0), ODX_BUF(y, 0), ODX_I64(4)};

		expect_refused(ctx, wide_int, args, "parameter 3 is 'int' (takes i32)");
	}
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	assert_ok(odx_close(ctx));
}

/* More than the device can hold in one buffer: ODX_ENOMEM, and the log says where and how much. */
static void test_out_of_memory(void **state)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_W, "b"}, {ODX_ARG_I32, 0, "n"}};
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *b = NULL;
	odx_device_info info;
	odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};
	char msg[1024], want[64];
	size_t size;
	odx_config *cfg = NULL;

	(void)state;
	/* The core stages a buffer on the host to destroy it (a host replica of its full size,
	 * never touched); meson's MALLOC_PERTURB_ would fill those gigabytes. */
	mallopt(M_PERTURB, 0);
	log_reset();
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "log", "warn"));
	assert_ok(odx_config_set_log(cfg, log_sink, NULL));
	assert_ok(odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	assert_ok(odx_device_get_info(ctx, 0, &info));
	/* Beyond the whole device memory: refused by any driver, without touching host RAM. */
	size = (size_t)info.memory_bytes + (1u << 20);
	k = cl_kernel(ctx, "inc", params, 2, inc_src, "inc");
	assert_ok(odx_buffer_create(ctx, size, 0, &b));
	{
		odx_arg args[] = {ODX_BUF(b, 0), ODX_I32(1)};

		/* The memory tier refuses it before the driver is asked: fails fast, naming
		 * the task, the device and both sizes. */
		assert_rc(run_task(ctx, k, args, 2, &o, msg, sizeof(msg)), ODX_ENOSPC);
	}
	snprintf(want, sizeof(want), "needs %zu bytes on memory node 1", size);
	print_message("out of memory: %s\n", msg);
	assert_contains(msg, want);
	snprintf(want, sizeof(want), "holds %llu bytes", (unsigned long long)info.memory_bytes);
	assert_contains(msg, want);
	assert_contains(msg, "tier.device.limit");
	odx_buffer_destroy(b);
	odx_kernel_destroy(k);
	assert_ok(odx_close(ctx));
}

/* The binary cache: a file appears, a second context uses it, a damaged one is rebuilt. */
static void test_binary_cache(void **state)
{
	char dir[512], file[1024];
	odx_context *ctx;
	struct stat sb;
	FILE *f;

	(void)state;
	scratch_dir(dir, sizeof(dir));

	log_reset();
	ctx = open_with_cache(dir);
	run_axpy(ctx, 1000);
	assert_ok(odx_close(ctx));
	cache_file(dir, file, sizeof(file));
	assert_ok(stat(file, &sb));
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_ok(stat(dir, &sb));
	assert_contains(logged.text, "program stored in cache file");
	if (strstr(logged.text, "loaded from cache file"))
		fail_msg("a fresh cache was read from:\n%s", logged.text);

	/* Second context: the binary is loaded, not compiled. */
	log_reset();
	ctx = open_with_cache(dir);
	run_axpy(ctx, 1000);
	assert_ok(odx_close(ctx));
	assert_contains(logged.text, "program loaded from cache file");

	/* Damage the binary's middle: detected, rebuilt from source, still right, file renewed. */
	f = fopen(file, "r+b");
	assert_non_null(f);
	assert_ok(stat(file, &sb));
	fseek(f, (long)(sb.st_size / 2), SEEK_SET);
	fputc(~fgetc(f) & 0xff, f);
	fseek(f, (long)(sb.st_size / 2), SEEK_SET);
	fputs("garbage", f);
	fclose(f);
	log_reset();
	ctx = open_with_cache(dir);
	run_axpy(ctx, 1000);
	assert_ok(odx_close(ctx));
	assert_contains(logged.text, "damaged");
	assert_contains(logged.text, "program stored in cache file");

	/* A truncated file likewise. */
	assert_ok(truncate(file, 20));
	log_reset();
	ctx = open_with_cache(dir);
	run_axpy(ctx, 1000);
	assert_ok(odx_close(ctx));
	assert_contains(logged.text, "ignoring cached binary");

	/* And the renewed file is good again. */
	log_reset();
	ctx = open_with_cache(dir);
	run_axpy(ctx, 1000);
	assert_ok(odx_close(ctx));
	assert_contains(logged.text, "program loaded from cache file");
}

/* cache_dir = none writes nothing; an empty cache_dir means $XDG_CACHE_HOME/odx/opencl. */
static void test_cache_location(void **state)
{
	char dir[512], sub[600], file[1024];
	odx_context *ctx;
	odx_config *cfg = NULL;
	struct stat sb;
	DIR *d;
	struct dirent *e;
	int files = 0;

	(void)state;
	scratch_dir(dir, sizeof(dir));
	assert_ok(setenv("XDG_CACHE_HOME", dir, 1));
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "opencl.cache_dir", "none"));
	assert_ok(odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	run_axpy(ctx, 100);
	assert_ok(odx_close(ctx));
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		files += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(files, 0);

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "opencl.cache_dir", ""));
	assert_ok(odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	run_axpy(ctx, 100);
	assert_ok(odx_close(ctx));
	snprintf(sub, sizeof(sub), "%s/odx/opencl", dir);
	assert_ok(stat(sub, &sb));
	assert_int_equal(sb.st_mode & 0777, 0700);
	cache_file(sub, file, sizeof(file));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_enumeration),    cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_axpy),	       cmocka_unit_test(test_chain),
		cmocka_unit_test(test_two_devices),    cmocka_unit_test(test_build_error),
		cmocka_unit_test(test_missing_entry),  cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_out_of_memory),  cmocka_unit_test(test_binary_cache),
		cmocka_unit_test(test_cache_location),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
