/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_gpu_fake_driver.c - the CUDA or HIP backend (argv[1]: "cuda" or "hip") over a fake driver
 * (argv[2]: the path of libfake_cuda.so / libfake_hip.so): the whole task path with real
 * arithmetic, chunked staging, zero-filled allocations, copies between two devices, and the
 * error paths (no driver, stub library, no device, old driver, wrong architecture skipped or
 * refused at load and falling through to the next variant, argument mismatch, a sticky error
 * that loses one device while the other carries on, CUDA source variants without NVRTC), and
 * registered user memory (ABI 1.3 host_register: page-locked once per range, copied without a
 * bounce, unlocked once; a refusal costs only the direct path), and reads and writes straight to
 * and from a device's copy (ABI 1.3 copy_sync: one driver copy per call on the application's
 * thread, or one per piece when staged; odd offsets; failures named with the native error),
 * and tiles of a partitioned buffer moved by the core's one-copy-per-run fallback (no 2D copy).
 * Results are labelled "fake driver": nothing here touches a GPU.
 *
 * This file holds main, the helpers (fake_driver.h) and the task path and error cases; the ABI
 * 1.3 memory cases (host_register, copy_sync) and the tiles are test_gpu_fake_memory.c.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "../unit/test_util.h"
#include "fake_driver.h"

const char *backend; /* "cuda" or "hip" */
static const char *fake_path;
static void *fake_lib;       /* keeps the fake loaded, so its counters survive odx_close */
bool is_cuda;

static long live_base; /* what earlier tests left (a failed one, or a lost device) */
static long fake_live(void);

/* The context's log, kept for tests that look for a message (info and above). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void log_capture(void *user, odx_log_level level, const char *msg)
{
	size_t used;

	(void)user;
	(void)level;
	pthread_mutex_lock(&log_lock);
	used = strlen(log_text);
	snprintf(log_text + used, sizeof(log_text) - used, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
}

bool logged(const char *needle)
{
	bool found;

	pthread_mutex_lock(&log_lock);
	found = strstr(log_text, needle) != NULL;
	pthread_mutex_unlock(&log_lock);
	return found;
}

void assert_logged(const char *needle)
{
	pthread_mutex_lock(&log_lock);
	if (!strstr(log_text, needle)) {
		pthread_mutex_unlock(&log_lock);
		fail_msg("the log lacks \"%s\":\n%s", needle, log_text);
	}
	pthread_mutex_unlock(&log_lock);
}

static const char *const env_knobs[] = {"INIT_ERROR",	  "DRIVER_VERSION", "DEVICE_COUNT",
					"LAUNCH_ERROR", "ALLOC_FAIL",	  "REGISTER_ERROR"};

void fake_set(const char *knob, const char *value)
{
	char name[64];

	snprintf(name, sizeof(name), "FAKE_%s_%s", is_cuda ? "CUDA" : "HIP", knob);
	setenv(name, value, 1);
}

int reset_env(void **state)
{
	(void)state;
	if (fake_lib) {
		live_base = 0;
		live_base = fake_live();
		fake_fail_copies(0, 0);
	}
	for (size_t i = 0; i < sizeof(env_knobs) / sizeof(env_knobs[0]); i++) {
		char name[64];

		snprintf(name, sizeof(name), "FAKE_%s_%s", is_cuda ? "CUDA" : "HIP", env_knobs[i]);
		unsetenv(name);
	}
	return 0;
}

static long fake_live(void)
{
	long (*fn)(void) = NULL;
	void *sym = dlsym(fake_lib, is_cuda ? "fake_cuda_live" : "fake_hip_live");

	memcpy(&fn, &sym, sizeof(fn));
	return fn ? fn() - live_base : -1;
}

/* A page-locking counter of the fake (fake_common.h). */
long fake_stat(const char *name)
{
	long (*fn)(const char *) = NULL;
	void *sym = dlsym(fake_lib, is_cuda ? "fake_cuda_stat" : "fake_hip_stat");

	memcpy(&fn, &sym, sizeof(fn));
	assert_non_null(fn);
	return fn(name);
}

/* A function of the fake (fake_common.h), by the name after "fake_cuda_" / "fake_hip_". */
static void *fake_fn(const char *suffix)
{
	char name[64];
	void *sym;

	snprintf(name, sizeof(name), "fake_%s_%s", is_cuda ? "cuda" : "hip", suffix);
	sym = dlsym(fake_lib, name);
	assert_non_null(sym);
	return sym;
}

/* Every host<->device copy fails with `code` once `after` more succeeded (code 0: none). */
void fake_fail_copies(int code, long after)
{
	void (*fn)(int, long);
	void *sym = fake_fn("fail_copies");

	memcpy(&fn, &sym, sizeof(fn));
	fn(code, after);
}

/* Opens a context on the fake driver (or `library` if not NULL), with one more configuration
 * key if `key` is not NULL; returns the code, sets *out. The log goes to log_text. */
static int open_ctx_with(const char *backends, const char *library, const char *key,
			 const char *value, odx_context **out, char *err, size_t errlen)
{
	char lib_key[64];
	odx_config *cfg = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	snprintf(lib_key, sizeof(lib_key), "%s.library", backend);
	assert_ok(odx_config_set(cfg, "backends", backends));
	assert_ok(odx_config_set(cfg, lib_key, library ? library : fake_path));
	assert_ok(odx_config_set(cfg, "log", "info"));
	if (key)
		assert_ok(odx_config_set(cfg, key, value));
	assert_ok(odx_config_set_log(cfg, log_capture, NULL));
	pthread_mutex_lock(&log_lock);
	log_text[0] = '\0';
	pthread_mutex_unlock(&log_lock);
	rc = odx_open(out, cfg);
	snprintf(err, errlen, "%s", odx_config_error(cfg));
	odx_config_destroy(cfg);
	return rc;
}

static int open_ctx(const char *backends, const char *library, odx_context **out, char *err,
		    size_t errlen)
{
	return open_ctx_with(backends, library, NULL, NULL, out, err, errlen);
}

odx_context *open_fake(void)
{
	odx_context *ctx = NULL;
	char err[1024];
	int rc = open_ctx(backend, NULL, &ctx, err, sizeof(err));

	if (rc)
		fail_msg("odx_open(backends = %s, fake driver): %s: %s", backend, odx_err_name(rc),
			 err);
	return ctx;
}

void close_checked(odx_context *ctx)
{
	assert_ok(odx_close(ctx));
	/* Every stream, event, pinned block, module and allocation went back to the driver. */
	assert_int_equal(fake_live(), 0);
}

static const odx_param axpy_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "x"},
	{ODX_ARG_BUFFER, ODX_RW, "y"},
	{ODX_ARG_F32, 0, "a"},
	{ODX_ARG_I32, 0, "n"},
};

odx_kernel *fake_kernel(odx_context *ctx, const char *image, int nparams)
{
	odx_kernel_variant v = {
		.backend = is_cuda ? ODX_BACKEND_CUDA : ODX_BACKEND_HIP,
		.format = is_cuda ? ODX_FORMAT_PTX : ODX_FORMAT_HIP_CO,
		.code = image,
		.code_size = strlen(image),
		.entry = "odx_test_axpy",
	};
	odx_kernel *k = NULL;

	assert_ok(odx_kernel_create(ctx, "fake_axpy", axpy_params, nparams, &v, 1, &k));
	return k;
}

const char *good_image(void)
{
	return is_cuda ? "ODXFAKE:sm_90" : "ODXFAKE:gfx90a";
}

/* Submits axpy on `device` (0: any) and waits; returns the task status, message in msg. */
int axpy(odx_context *ctx, odx_kernel *k, odx_buffer *x, odx_buffer *y, float a, int n, int device,
	 char *msg, size_t msglen)
{
	odx_arg args[4] = {ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(a), ODX_I32(n)};
	odx_task_opts opts = {.flags = ODX_SUBMIT_ON_DEVICE,
			      .on_device = device ? device - 1 : ODX_DEVICE_ANY,
			      .grid = {(uint32_t)(n + 255) / 256, 1, 1},
			      .block = {256, 1, 1}};
	odx_event *ev = NULL;
	int rc = odx_submit(ctx, k, args, 4, &opts, &ev);

	if (rc) {
		snprintf(msg, msglen, "%s", odx_last_error(ctx));
		return rc;
	}
	rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
	snprintf(msg, msglen, "%s", odx_event_message(ev));
	odx_event_release(ev);
	return rc;
}

static void fake_driver_task_path(void **state)
{
	/* More than one staging block (8 MiB) and not a multiple of it. */
	const int n = 3 * (1 << 20) + 5;
	float *xs = malloc((size_t)n * 4), *ys = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
	odx_context *ctx = open_fake();
	odx_device_info info;
	odx_kernel *k = fake_kernel(ctx, good_image(), 4);
	odx_buffer *x, *y;
	char msg[1024];
	int i;

	(void)state;
	assert_int_equal(odx_device_count(ctx), 1);
	assert_ok(odx_device_get_info(ctx, 0, &info));
	assert_contains(info.name, "fake");
	assert_int_equal(info.kind, is_cuda ? ODX_BACKEND_CUDA : ODX_BACKEND_HIP);
	assert_int_equal(info.copy_lanes, 2);
	assert_true(info.memory_bytes > 0 && info.memory_bytes <= (900u << 20));
	for (i = 0; i < n; i++) {
		xs[i] = (float)(i % 1000);
		ys[i] = (float)(i % 3);
	}
	assert_ok(odx_buffer_create(ctx, (size_t)n * 4, 0, &x));
	assert_ok(odx_buffer_create(ctx, (size_t)n * 4, 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, (size_t)n * 4, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(y, 0, ys, (size_t)n * 4, TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 2.0f, n, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, (size_t)n * 4, TEST_TIMEOUT_MS));
	for (i = 0; i < n; i++)
		if (out[i] != 2.0f * xs[i] + ys[i])
			fail_msg("y[%d] = %g, expected %g", i, out[i], 2.0f * xs[i] + ys[i]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
	free(xs);
	free(ys);
	free(out);
}

/* A buffer never written reads as zeros on the device too (the fake's memory is not zero). */
static void fake_driver_zero_fill(void **state)
{
	enum { N = 1000 };
	float ys[N], out[N];
	odx_context *ctx = open_fake();
	odx_kernel *k = fake_kernel(ctx, good_image(), 4);
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	for (int i = 0; i < N; i++)
		ys[i] = (float)i;
	assert_ok(odx_buffer_create(ctx, sizeof(ys), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(ys), 0, &y));
	assert_ok(odx_buffer_write(y, 0, ys, sizeof(ys), TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 1.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	assert_memory_equal(out, ys, sizeof(ys));
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

static void fake_driver_many_launches(void **state)
{
	enum { N = 256, LAUNCHES = 1000 };
	float xs[N], out[N];
	odx_context *ctx = open_fake();
	odx_kernel *k = fake_kernel(ctx, good_image(), 4);
	odx_task_opts opts = {.grid = {1, 1, 1}, .block = {N, 1, 1}};
	odx_buffer *x, *y;
	odx_arg args[4];

	(void)state;
	for (int i = 0; i < N; i++)
		xs[i] = (float)(i % 9);
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	args[0] = ODX_BUF(x, ODX_R);
	args[1] = ODX_BUF(y, ODX_RW);
	args[2] = ODX_F32(1.0f);
	args[3] = ODX_I32(N);
	for (int i = 0; i < LAUNCHES; i++)
		assert_ok(odx_submit(ctx, k, args, 4, &opts, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == (float)LAUNCHES * xs[i]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

/* Two devices: y is written on device 0, then used on device 1 (copy_d2d, peer copy). */
static void fake_driver_two_devices(void **state)
{
	enum { N = 4096 };
	float xs[N], out[N];
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	fake_set("DEVICE_COUNT", "2");
	ctx = open_fake();
	k = fake_kernel(ctx, good_image(), 4);
	assert_int_equal(odx_device_count(ctx), 2);
	for (int i = 0; i < N; i++)
		xs[i] = (float)(i % 11);
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 1.0f, N, 1, msg, sizeof(msg)), 0);
	assert_rc(axpy(ctx, k, x, y, 2.0f, N, 2, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 3.0f * xs[i]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

static void fake_driver_no_driver(void **state)
{
	odx_context *ctx = NULL;
	odx_backend_info info;
	char err[1024];
	int i, found = 0;

	(void)state;
	assert_rc(open_ctx(backend, "/nonexistent/libodx-no-such-driver.so", &ctx, err,
			   sizeof(err)),
		  ODX_EUNAVAIL);
	assert_contains(err, "not found");
	assert_contains(err, "No such file");
	/* Under auto the host backend still works and the reason is kept. */
	assert_ok(open_ctx("auto", "/nonexistent/libodx-no-such-driver.so", &ctx, err, sizeof(err)));
	assert_true(odx_device_count(ctx) >= 1);
	for (i = 0; i < odx_backend_count(ctx); i++) {
		assert_ok(odx_backend_get_info(ctx, i, &info));
		if (strcmp(info.name, backend) == 0) {
			found = 1;
			assert_int_equal(info.available, 0);
			assert_contains(info.reason, "libodx-no-such-driver.so");
		}
	}
	assert_true(found);
	assert_ok(odx_close(ctx));
}

static void expect_unavailable(const char *want1, const char *want2)
{
	odx_context *ctx = NULL;
	char err[1024];

	assert_rc(open_ctx(backend, NULL, &ctx, err, sizeof(err)), ODX_EUNAVAIL);
	assert_contains(err, want1);
	if (want2)
		assert_contains(err, want2);
	assert_int_equal(fake_live(), 0);
}

static void fake_driver_stub_library(void **state)
{
	(void)state;
	fake_set("INIT_ERROR", "34");
	expect_unavailable("stub library was loaded instead of the driver", "(34)");
}

static void fake_driver_no_device(void **state)
{
	(void)state;
	fake_set("INIT_ERROR", "100");
	expect_unavailable(is_cuda ? "CUDA_ERROR_NO_DEVICE (100)" : "hipErrorNoDevice (100)", NULL);
	reset_env(NULL);
	fake_set("DEVICE_COUNT", "0");
	expect_unavailable("reports no device", NULL);
}

static void fake_driver_old_driver(void **state)
{
	(void)state;
	fake_set("DRIVER_VERSION", "10020");
	expect_unavailable("CUDA 10.2 (driver API 10020)", "11.3");
}

/* Before cuFuncGetParamInfo (12.4) the argument check is skipped; everything else works. */
static void fake_driver_driver_11(void **state)
{
	(void)state;
	fake_set("DRIVER_VERSION", "11080");
	fake_driver_task_path(state);
}

static void fake_driver_sticky_error(void **state)
{
	enum { N = 64 };
	float xs[N] = {0};
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y, *z, *w;
	char msg[1024];
	const char *name = is_cuda ? "CUDA_ERROR_ILLEGAL_ADDRESS (700)" : "hipErrorIllegalAddress (700)";

	(void)state;
	fake_set("LAUNCH_ERROR", "700");
	ctx = open_fake();
	k = fake_kernel(ctx, good_image(), 4);
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &z));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	/* The fault shows when the launch's event is waited for. */
	assert_rc(axpy(ctx, k, x, y, 1.0f, N, 0, msg, sizeof(msg)), ODX_EDEVLOST);
	assert_contains(msg, name);
	/* From then on the device is lost: the core places nothing more there, and a task
	 * forced there fails in the backend (its allocations first: the backend logs the first
	 * error, the ABI has no message for mem_alloc). */
	assert_rc(axpy(ctx, k, x, z, 1.0f, N, 0, msg, sizeof(msg)), ODX_EDEVLOST);
	assert_contains(msg, "lost");
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &w));
	assert_rc(axpy(ctx, k, x, w, 1.0f, N, 1, msg, sizeof(msg)), ODX_EDEVLOST);
	assert_contains(msg, "lost");
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	odx_buffer_destroy(z);
	odx_buffer_destroy(w);
	/* Not close_checked: the core does not run buffer destructions once every device is lost
	 * (odx__device_can_run refuses lost devices for non-kernel tasks too), so the replicas of
	 * x and y on the lost device are never given back to the backend. */
	assert_ok(odx_close(ctx));
}

static void expect_load_failure(const char *image, int nparams, int want_rc, const char *want1,
				const char *want2)
{
	odx_context *ctx = open_fake();
	odx_kernel *k = fake_kernel(ctx, image, nparams);
	odx_buffer *x, *y;
	odx_arg args[4];
	odx_event *ev = NULL;
	odx_task_opts opts = {.grid = {1, 1, 1}, .block = {64, 1, 1}};

	assert_ok(odx_buffer_create(ctx, 256, 0, &x));
	assert_ok(odx_buffer_create(ctx, 256, 0, &y));
	args[0] = ODX_BUF(x, ODX_R);
	args[1] = ODX_BUF(y, ODX_RW);
	args[2] = ODX_F32(1.0f);
	args[3] = ODX_I32(64);
	assert_ok(odx_submit(ctx, k, args, nparams, &opts, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), want_rc);
	assert_contains(odx_event_message(ev), want1);
	if (want2)
		assert_contains(odx_event_message(ev), want2);
	odx_event_release(ev);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

static void fake_driver_wrong_arch(void **state)
{
	(void)state;
	if (is_cuda) {
		expect_load_failure("ODXFAKE:sm_80", 4, ODX_ENOVARIANT,
				    "CUDA_ERROR_NO_BINARY_FOR_GPU (209)", "arch 90");
		expect_load_failure("ODXFAKE:badptx", 4, ODX_ENOVARIANT,
				    "CUDA_ERROR_INVALID_PTX (218)", "fake syntax error");
	} else {
		expect_load_failure("ODXFAKE:gfx1030", 4, ODX_ENOVARIANT,
				    "hipErrorNoBinaryForGpu (209)", NULL);
	}
}

static void fake_driver_arg_mismatch(void **state)
{
	(void)state;
	/* The kernel takes four parameters; a signature of three is refused before the driver.
	 * CUDA only (cuFuncGetParamInfo): HIP cannot tell a kernel's parameters. */
	if (!is_cuda)
		skip();
	expect_load_failure(good_image(), 3, ODX_EINVAL, "takes more than the 3 arguments", NULL);
}

/* can_run: a cubin for another architecture is skipped for the next variant (real ELF header,
 * never loaded); a PTX variant for a newer target or ISA than the device and driver likewise. */
static void fake_driver_variant_choice(void **state)
{
	unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x41, 8};
	const char *ptx_new_target = ".version 7.0\n.target sm_100\n";
	const char *ptx_new_isa = ".version 9.9\n.target sm_70\n";
	odx_kernel_variant v[4];
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y;
	char msg[1024];
	float out[64], xs[64];

	(void)state;
	elf[18] = 190; /* EM_CUDA */
	elf[49] = 80;  /* sm_80, e_flags bits 8..15 */
	v[0] = (odx_kernel_variant){ODX_BACKEND_CUDA, ODX_FORMAT_CUBIN, NULL, elf,
				    sizeof(elf),      "odx_test_axpy",	NULL};
	v[1] = (odx_kernel_variant){ODX_BACKEND_CUDA,	    ODX_FORMAT_PTX,  NULL, ptx_new_target,
				    strlen(ptx_new_target), "odx_test_axpy", NULL};
	v[2] = (odx_kernel_variant){ODX_BACKEND_CUDA,	 ODX_FORMAT_PTX,  NULL, ptx_new_isa,
				    strlen(ptx_new_isa), "odx_test_axpy", NULL};
	v[3] = (odx_kernel_variant){ODX_BACKEND_CUDA,	  ODX_FORMAT_PTX,  NULL, good_image(),
				    strlen(good_image()), "odx_test_axpy", NULL};
	if (!is_cuda)
		skip();
	ctx = open_fake();
	assert_ok(odx_kernel_create(ctx, "choice", axpy_params, 4, v, 4, &k));
	for (int i = 0; i < 64; i++)
		xs[i] = (float)i;
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 1.0f, 64, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	assert_memory_equal(out, xs, sizeof(xs));
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

static void fake_driver_alloc_failure(void **state)
{
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	if (!is_cuda)
		skip();
	fake_set("ALLOC_FAIL", "1");
	ctx = open_fake();
	k = fake_kernel(ctx, good_image(), 4);
	assert_ok(odx_buffer_create(ctx, 256, 0, &x));
	assert_ok(odx_buffer_create(ctx, 256, 0, &y));
	assert_rc(axpy(ctx, k, x, y, 1.0f, 64, 0, msg, sizeof(msg)), ODX_ENOMEM);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

/* An image that passes can_run (nothing in it to read) but that the driver refuses at load, for
 * another architecture: the core loads the kernel's next variant instead. */
static void fake_driver_fallthrough_at_load(void **state)
{
	const char *wrong = is_cuda ? "ODXFAKE:sm_80" : "ODXFAKE:gfx1030";
	odx_backend_kind kind = is_cuda ? ODX_BACKEND_CUDA : ODX_BACKEND_HIP;
	odx_variant_format format = is_cuda ? ODX_FORMAT_PTX : ODX_FORMAT_HIP_CO;
	odx_kernel_variant v[2] = {
		{kind, format, NULL, wrong, strlen(wrong), "odx_test_axpy", NULL},
		{kind, format, NULL, good_image(), strlen(good_image()), "odx_test_axpy", NULL},
	};
	enum { N = 300 };
	float xs[N], out[N];
	odx_context *ctx = open_fake();
	odx_kernel *k;
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	for (int i = 0; i < N; i++)
		xs[i] = (float)(i % 13);
	assert_ok(odx_kernel_create(ctx, "fallthrough", axpy_params, 4, v, 2, &k));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	assert_rc(axpy(ctx, k, x, y, 2.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 2.0f * xs[i]);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

/* Two devices, a fault on the first: that device is lost (the first error named), tasks the
 * core places go to the other one and give exact results, a task forced onto the lost one
 * fails saying so. */
static void fake_driver_lost_device_others_run(void **state)
{
	enum { N = 512 };
	static const odx_param fault_params[] = {{ODX_ARG_BUFFER, ODX_RW, "p"}};
	odx_kernel_variant fv = {
		.backend = is_cuda ? ODX_BACKEND_CUDA : ODX_BACKEND_HIP,
		.format = is_cuda ? ODX_FORMAT_PTX : ODX_FORMAT_HIP_CO,
		.code = good_image(),
		.code_size = strlen(good_image()),
		.entry = "odx_test_fault",
	};
	const char *name = is_cuda ? "CUDA_ERROR_ILLEGAL_ADDRESS (700)" : "hipErrorIllegalAddress (700)";
	odx_task_opts on_first = {.flags = ODX_SUBMIT_ON_DEVICE,
				  .on_device = 0,
				  .grid = {1, 1, 1},
				  .block = {1, 1, 1}};
	float xs[N], out[N];
	odx_context *ctx;
	odx_kernel *k, *fk;
	odx_buffer *p, *x, *y;
	odx_event *ev = NULL;
	odx_arg arg;
	char msg[1024];

	(void)state;
	fake_set("DEVICE_COUNT", "2");
	ctx = open_fake();
	assert_int_equal(odx_device_count(ctx), 2);
	k = fake_kernel(ctx, good_image(), 4);
	assert_ok(odx_kernel_create(ctx, "fault", fault_params, 1, &fv, 1, &fk));
	for (int i = 0; i < N; i++)
		xs[i] = (float)(i % 17);
	assert_ok(odx_buffer_create(ctx, 64, 0, &p));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	arg = ODX_BUF(p, ODX_RW);
	assert_ok(odx_submit(ctx, fk, &arg, 1, &on_first, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EDEVLOST);
	assert_contains(odx_event_message(ev), name);
	odx_event_release(ev);
	assert_logged("is lost");
	for (int i = 0; i < 3; i++)
		assert_rc(axpy(ctx, k, x, y, 1.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_true(out[i] == 3.0f * xs[i]);
	assert_rc(axpy(ctx, k, x, y, 1.0f, N, 1, msg, sizeof(msg)), ODX_EDEVLOST);
	assert_contains(msg, "lost");
	odx_buffer_destroy(p);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	assert_ok(odx_close(ctx));
}

/* PTX newer than the driver reads, where can_run cannot see its .version (past the first 4 KiB):
 * the driver refuses it at load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, with the versions in the
 * message) and the next variant runs. */
static void fake_driver_ptx_too_new_at_load(void **state)
{
	static const char tail[] = ".version 9.9\n.target sm_80\n.address_size 64\n"
				   ".visible .entry odx_test_axpy(\n)\n{\n\tret;\n}\n";
	size_t pad = 5000, len = pad + sizeof(tail) - 1;
	char *ptx;
	odx_kernel_variant v[2];
	odx_context *ctx;
	odx_kernel *only, *both;
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	if (!is_cuda)
		skip();
	ptx = malloc(len);
	assert_non_null(ptx);
	/* A long comment header, as some generators write: lines of "// ----". */
	memset(ptx, '-', pad);
	for (size_t i = 0; i < pad; i += 50) {
		ptx[i] = ptx[i + 1] = '/';
		ptx[i + 49] = '\n';
	}
	memcpy(ptx + pad, tail, sizeof(tail) - 1);
	v[0] = (odx_kernel_variant){
		ODX_BACKEND_CUDA, ODX_FORMAT_PTX, NULL, ptx, len, "odx_test_axpy", NULL};
	v[1] = (odx_kernel_variant){ODX_BACKEND_CUDA,	  ODX_FORMAT_PTX,  NULL, good_image(),
				    strlen(good_image()), "odx_test_axpy", NULL};
	ctx = open_fake();
	assert_ok(odx_kernel_create(ctx, "ptx_9_9", axpy_params, 4, v, 1, &only));
	assert_ok(odx_kernel_create(ctx, "ptx_9_9_then_fake", axpy_params, 4, v, 2, &both));
	free(ptx);
	assert_ok(odx_buffer_create(ctx, 256, 0, &x));
	assert_ok(odx_buffer_create(ctx, 256, 0, &y));
	assert_rc(axpy(ctx, only, x, y, 1.0f, 64, 0, msg, sizeof(msg)), ODX_ENOVARIANT);
	assert_contains(msg, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)");
	assert_contains(msg, "Unsupported .version 9.9");
	assert_contains(msg, "the driver, CUDA 12.8, reads PTX ISA up to 8.8");
	/* y's writer failed: a task on it now would be canceled, so fresh buffers. */
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	assert_ok(odx_buffer_create(ctx, 256, 0, &x));
	assert_ok(odx_buffer_create(ctx, 256, 0, &y));
	assert_rc(axpy(ctx, both, x, y, 1.0f, 64, 0, msg, sizeof(msg)), 0);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

/* CUDA source needs NVRTC; without it a source variant is skipped (the reason logged once): a
 * kernel with nothing else has no variant, one with a PTX image behind it runs that. */
static void fake_driver_cuda_source_without_nvrtc(void **state)
{
	static const char src[] = "extern \"C\" __global__ void odx_test_axpy(const float *x, "
				  "float *y, float a, int n) { }\n";
	odx_kernel_variant v[2] = {
		{ODX_BACKEND_CUDA, ODX_FORMAT_CUDA_C, NULL, src, sizeof(src) - 1, "odx_test_axpy",
		 NULL},
		{ODX_BACKEND_CUDA, ODX_FORMAT_PTX, NULL, good_image(), strlen(good_image()),
		 "odx_test_axpy", NULL},
	};
	enum { N = 100 };
	float xs[N], out[N];
	odx_context *ctx = NULL;
	odx_kernel *only, *both;
	odx_buffer *x, *y;
	char msg[1024];

	(void)state;
	if (!is_cuda)
		skip();
	if (open_ctx_with("cuda", NULL, "cuda.nvrtc_library", "/nonexistent/libodx-no-nvrtc.so",
			  &ctx, msg, sizeof(msg)))
		fail_msg("odx_open: %s", msg);
	for (int i = 0; i < N; i++)
		xs[i] = (float)i;
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &x));
	assert_ok(odx_buffer_create(ctx, sizeof(xs), 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, sizeof(xs), TEST_TIMEOUT_MS));
	assert_ok(odx_kernel_create(ctx, "source_only", axpy_params, 4, v, 1, &only));
	assert_rc(axpy(ctx, only, x, y, 1.0f, N, 0, msg, sizeof(msg)), ODX_ENOVARIANT);
	assert_logged("CUDA source variants are skipped");
	assert_logged("/nonexistent/libodx-no-nvrtc.so");
	assert_ok(odx_kernel_create(ctx, "source_then_ptx", axpy_params, 4, v, 2, &both));
	assert_rc(axpy(ctx, both, x, y, 1.0f, N, 0, msg, sizeof(msg)), 0);
	assert_ok(odx_buffer_read(y, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	assert_memory_equal(out, xs, sizeof(xs));
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	close_checked(ctx);
}

/* Tells the fake that this thread is the application's: its driver copies are copy_sync's (the
 * lanes issue theirs on threads of their own). Every test runs on this thread. */
static bool mark_caller(void)
{
	void (*mark)(void);
	void *sym = dlsym(fake_lib, is_cuda ? "fake_cuda_mark_caller" : "fake_hip_mark_caller");

	if (!sym)
		return false;
	memcpy(&mark, &sym, sizeof(mark));
	mark();
	return true;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(fake_driver_task_path, reset_env),
		cmocka_unit_test_teardown(fake_driver_zero_fill, reset_env),
		cmocka_unit_test_teardown(fake_driver_many_launches, reset_env),
		cmocka_unit_test_teardown(fake_driver_two_devices, reset_env),
		cmocka_unit_test_teardown(fake_driver_no_driver, reset_env),
		cmocka_unit_test_teardown(fake_driver_no_device, reset_env),
		cmocka_unit_test_teardown(fake_driver_sticky_error, reset_env),
		cmocka_unit_test_teardown(fake_driver_wrong_arch, reset_env),
		cmocka_unit_test_teardown(fake_driver_variant_choice, reset_env),
		cmocka_unit_test_teardown(fake_driver_alloc_failure, reset_env),
		cmocka_unit_test_teardown(fake_driver_arg_mismatch, reset_env),
		cmocka_unit_test_teardown(fake_driver_fallthrough_at_load, reset_env),
		cmocka_unit_test_teardown(fake_driver_lost_device_others_run, reset_env),
		cmocka_unit_test_teardown(fake_driver_ptx_too_new_at_load, reset_env),
		cmocka_unit_test_teardown(fake_driver_cuda_source_without_nvrtc, reset_env),
		cmocka_unit_test_teardown(fake_driver_host_register, reset_env),
		cmocka_unit_test_teardown(fake_driver_host_register_two_devices, reset_env),
		cmocka_unit_test_teardown(fake_driver_host_register_refused, reset_env),
		cmocka_unit_test_teardown(fake_driver_host_register_shared, reset_env),
		cmocka_unit_test_teardown(fake_driver_copy_sync_round_trip, reset_env),
		cmocka_unit_test_teardown(fake_driver_copy_sync_kernel, reset_env),
		cmocka_unit_test_teardown(fake_driver_copy_sync_partial, reset_env),
		cmocka_unit_test_teardown(fake_driver_copy_sync_page_locked, reset_env),
		cmocka_unit_test_teardown(fake_driver_copy_sync_failure, reset_env),
		cmocka_unit_test_teardown(fake_driver_partition_fallback, reset_env),
		cmocka_unit_test_teardown(fake_driver_stub_library, reset_env),
		cmocka_unit_test_teardown(fake_driver_old_driver, reset_env),
		cmocka_unit_test_teardown(fake_driver_driver_11, reset_env),
	};
	int first = 0, count = (int)(sizeof(tests) / sizeof(tests[0]));

	if (argc < 3) {
		fprintf(stderr, "usage: %s cuda|hip FAKE_LIBRARY\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	fake_path = argv[2];
	is_cuda = strcmp(backend, "cuda") == 0;
	fake_lib = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL);
	if (!fake_lib) {
		fprintf(stderr, "cannot load the fake driver: %s\n", dlerror());
		return 1;
	}
	reset_env(NULL);
	if (!mark_caller()) {
		fprintf(stderr, "the fake driver has no mark_caller function\n");
		return 1;
	}
	if (!is_cuda)
		count -= 3; /* the last three are about CUDA driver versions */
	return _cmocka_run_group_tests(is_cuda ? "cuda_fake_driver" : "hip_fake_driver",
				       tests + first, (size_t)count, NULL, NULL);
}
