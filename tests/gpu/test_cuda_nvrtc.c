/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda_nvrtc.c - CUDA source variants (ODX_FORMAT_CUDA_C) through the real NVRTC, loaded by
 * the fake libcuda (tests/gpu/fake_cuda.c), which checks the PTX or cubin NVRTC wrote (ISA
 * version, target, entry names) and runs its entry point as the fake axpy on the host. Labelled
 * "fake driver": NVRTC is real, the device is not; nothing here proves the code runs on a GPU.
 *
 * usage: test_cuda_nvrtc FAKE_LIBCUDA DIALECT_H AXPY_SOURCE
 *   the source of the standard odx.axpy_f32 is DIALECT_H followed by AXPY_SOURCE, as libodx
 *   embeds it. Exits 77 (skipped) when the CUDA backend cannot open NVRTC here.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "../unit/test_util.h"

static const char *fake_path;
static char *axpy_source; /* odx_dialect.h + axpy_f32.cl */
static size_t axpy_source_size;
static int nvrtc_major, nvrtc_minor;
static char driver_matching_nvrtc[16]; /* FAKE_CUDA_DRIVER_VERSION of NVRTC's release */

/* The context's CUDA lines (debug and above), for tests that look for a message. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[32768];

static void log_capture(void *user, odx_log_level level, const char *msg)
{
	size_t used;

	(void)user;
	(void)level;
	if (!strstr(msg, "CUDA") && !strstr(msg, "NVRTC"))
		return;
	pthread_mutex_lock(&log_lock);
	used = strlen(log_text);
	snprintf(log_text + used, sizeof(log_text) - used, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
}

static bool logged(const char *needle)
{
	bool found;

	pthread_mutex_lock(&log_lock);
	found = strstr(log_text, needle) != NULL;
	pthread_mutex_unlock(&log_lock);
	return found;
}

static void assert_logged(const char *needle)
{
	if (!logged(needle))
		fail_msg("the log lacks \"%s\":\n%s", needle, log_text);
}

static int reset_env(void **state)
{
	(void)state;
	unsetenv("FAKE_CUDA_ARCH");
	setenv("FAKE_CUDA_DRIVER_VERSION", driver_matching_nvrtc, 1);
	return 0;
}

static odx_context *open_fake(void)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "backends", "cuda"));
	assert_ok(odx_config_set(cfg, "cuda.library", fake_path));
	assert_ok(odx_config_set(cfg, "log", "debug"));
	assert_ok(odx_config_set_log(cfg, log_capture, NULL));
	pthread_mutex_lock(&log_lock);
	log_text[0] = '\0';
	pthread_mutex_unlock(&log_lock);
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open(cuda, fake driver): %s: %s", odx_err_name(rc),
			 odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

static const odx_param axpy_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "x"},
	{ODX_ARG_BUFFER, ODX_RW, "y"},
	{ODX_ARG_F32, 0, "a"},
	{ODX_ARG_I32, 0, "n"},
};

static odx_kernel *source_kernel(odx_context *ctx, const char *src, size_t size, const char *entry)
{
	odx_kernel_variant v = {
		.backend = ODX_BACKEND_CUDA,
		.format = ODX_FORMAT_CUDA_C,
		.code = src,
		.code_size = size,
		.entry = entry,
	};
	odx_kernel *k = NULL;

	assert_ok(odx_kernel_create(ctx, entry, axpy_params, 4, &v, 1, &k));
	return k;
}

/* y = a * x + y over n floats with kernel k, waited for; the status, its message in msg. */
static int run_axpy(odx_context *ctx, odx_kernel *k, int n, char *msg, size_t msglen)
{
	float *xs = malloc((size_t)n * 4), *ys = malloc((size_t)n * 4),
	      *out = malloc((size_t)n * 4);
	odx_task_opts opts = {.grid = {(uint32_t)(n + 127) / 128, 1, 1}, .block = {128, 1, 1}};
	odx_buffer *x, *y;
	odx_event *ev = NULL;
	odx_arg args[4];
	int rc;

	for (int i = 0; i < n; i++) {
		xs[i] = (float)(i % 100);
		ys[i] = (float)(i % 3);
	}
	assert_ok(odx_buffer_create(ctx, (size_t)n * 4, 0, &x));
	assert_ok(odx_buffer_create(ctx, (size_t)n * 4, 0, &y));
	assert_ok(odx_buffer_write(x, 0, xs, (size_t)n * 4, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_write(y, 0, ys, (size_t)n * 4, TEST_TIMEOUT_MS));
	args[0] = ODX_BUF(x, ODX_R);
	args[1] = ODX_BUF(y, ODX_RW);
	args[2] = ODX_F32(2.0f);
	args[3] = ODX_I32(n);
	rc = odx_submit(ctx, k, args, 4, &opts, &ev);
	if (rc) {
		snprintf(msg, msglen, "%s", odx_last_error(ctx));
	} else {
		rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
		snprintf(msg, msglen, "%s", odx_event_message(ev));
		odx_event_release(ev);
	}
	if (rc == 0) {
		assert_ok(odx_buffer_read(y, 0, out, (size_t)n * 4, TEST_TIMEOUT_MS));
		for (int i = 0; i < n; i++)
			if (out[i] != 2.0f * xs[i] + ys[i])
				fail_msg("y[%d] = %g, expected %g", i, out[i],
					 2.0f * xs[i] + ys[i]);
	}
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	free(xs);
	free(ys);
	free(out);
	return rc;
}

/* The standard axpy's CUDA source on an sm_90 device: NVRTC lists sm_90, so SASS (a cubin),
 * which the fake finds odx_axpy_f32 in. */
static void nvrtc_cubin_for_the_device(void **state)
{
	odx_context *ctx = open_fake();
	odx_kernel *k = source_kernel(ctx, axpy_source, axpy_source_size, "odx_axpy_f32");
	char msg[1024];

	(void)state;
	assert_rc(run_axpy(ctx, k, 5000, msg, sizeof(msg)), 0);
	assert_logged("CUDA source variants are compiled by NVRTC");
	assert_logged("CUDA source compiled by NVRTC");
	assert_logged("to a cubin for sm_90");
	assert_ok(odx_close(ctx));
}

/* A device newer than every architecture NVRTC lists: PTX for the newest one, which the
 * driver (here the fake, checking .version, .target and .entry) JIT-compiles forward. */
static void nvrtc_ptx_for_a_newer_device(void **state)
{
	odx_context *ctx;
	odx_kernel *k;
	char msg[1024];

	(void)state;
	setenv("FAKE_CUDA_ARCH", "150", 1);
	ctx = open_fake();
	k = source_kernel(ctx, axpy_source, axpy_source_size, "odx_axpy_f32");
	assert_rc(run_axpy(ctx, k, 777, msg, sizeof(msg)), 0);
	assert_logged("to PTX for compute_");
	assert_ok(odx_close(ctx));
}

/* The same PTX on a driver older than NVRTC: refused with the native error, the JIT's log and
 * a hint naming both versions. */
static void nvrtc_ptx_on_an_older_driver(void **state)
{
	odx_context *ctx;
	odx_kernel *k;
	char msg[1024];

	(void)state;
	if (nvrtc_major < 12)
		skip(); /* its PTX is 7.x, which a CUDA 11.8 driver reads */
	setenv("FAKE_CUDA_ARCH", "150", 1);
	setenv("FAKE_CUDA_DRIVER_VERSION", "11080", 1);
	ctx = open_fake();
	k = source_kernel(ctx, axpy_source, axpy_source_size, "odx_axpy_f32");
	assert_rc(run_axpy(ctx, k, 64, msg, sizeof(msg)), ODX_ENOVARIANT);
	print_message("%s\n", msg);
	assert_contains(msg, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)");
	assert_contains(msg, "Unsupported .version");
	assert_contains(msg, "is newer than the driver, CUDA 11.8");
	assert_ok(odx_close(ctx));
}

/* A source that does not compile: the task fails with NVRTC's error lines in its message, and
 * the whole log goes to the log sink. */
static void nvrtc_syntax_error(void **state)
{
	static const char bad[] = "extern \"C\" __global__ void odx_bad(const float *x, float *y, "
				  "float a, int n)\n{\n\ty[0] = a * x[0]\n\tundeclared = n;\n}\n";
	odx_context *ctx = open_fake();
	odx_kernel *k = source_kernel(ctx, bad, sizeof(bad) - 1, "odx_bad");
	char msg[1024];

	(void)state;
	assert_rc(run_axpy(ctx, k, 64, msg, sizeof(msg)), ODX_EBACKEND);
	print_message("%s\n", msg);
	assert_contains(msg, "NVRTC log: odx_bad.cu(4): error");
	assert_contains(msg, "NVRTC_ERROR_COMPILATION (6)");
	assert_contains(msg, "--gpu-architecture=sm_90");
	assert_logged("failed:\nodx_bad.cu(4): error");
	/* The failure is kept: the next task on the device gets the same message at once. */
	assert_rc(run_axpy(ctx, k, 64, msg, sizeof(msg)), ODX_EBACKEND);
	assert_contains(msg, "odx_bad.cu(4): error");
	assert_ok(odx_close(ctx));
}

/* A device older than every architecture NVRTC targets: the source variant is skipped. */
static void nvrtc_device_too_old(void **state)
{
	odx_context *ctx;
	odx_kernel *k;
	char msg[1024];

	(void)state;
	setenv("FAKE_CUDA_ARCH", "30", 1);
	ctx = open_fake();
	k = source_kernel(ctx, axpy_source, axpy_source_size, "odx_axpy_f32");
	assert_rc(run_axpy(ctx, k, 64, msg, sizeof(msg)), ODX_ENOVARIANT);
	assert_logged("(arch 30) skips a CUDA source variant of kernel 'odx_axpy_f32'");
	assert_ok(odx_close(ctx));
}

/* The built-in odx.axpy_f32 on an sm_75 device: its fatbin has no sm_75 code and its PTX is for
 * compute_80, so its CUDA source variant is compiled here. */
static void nvrtc_builtin_on_sm_75(void **state)
{
	odx_context *ctx;
	odx_kernel *k = NULL;
	char msg[1024];

	(void)state;
	setenv("FAKE_CUDA_ARCH", "75", 1);
	ctx = open_fake();
	assert_ok(odx_kernel_builtin(ctx, "odx.axpy_f32", &k));
	assert_rc(run_axpy(ctx, k, 4099, msg, sizeof(msg)), 0);
	assert_logged("to a cubin for sm_75");
	assert_ok(odx_close(ctx));
}

static char *read_all(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n)) != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		*size = (size_t)n;
	fclose(f);
	return buf;
}

/* Whether the backend opens NVRTC here; its version from the log line that says so. */
static bool probe_nvrtc(void)
{
	odx_context *ctx;
	const char *p;

	setenv("FAKE_CUDA_DRIVER_VERSION", "13000", 1);
	ctx = open_fake();
	source_kernel(ctx, axpy_source, axpy_source_size, "odx_axpy_f32");
	odx_close(ctx);
	p = strstr(log_text, "compiled by NVRTC ");
	if (!p ||
	    sscanf(p + strlen("compiled by NVRTC "), "%d.%d", &nvrtc_major, &nvrtc_minor) != 2)
		return false;
	snprintf(driver_matching_nvrtc, sizeof(driver_matching_nvrtc), "%d",
		 nvrtc_major * 1000 + nvrtc_minor * 10);
	return true;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(nvrtc_cubin_for_the_device, reset_env),
		cmocka_unit_test_teardown(nvrtc_ptx_for_a_newer_device, reset_env),
		cmocka_unit_test_teardown(nvrtc_ptx_on_an_older_driver, reset_env),
		cmocka_unit_test_teardown(nvrtc_syntax_error, reset_env),
		cmocka_unit_test_teardown(nvrtc_device_too_old, reset_env),
		cmocka_unit_test_teardown(nvrtc_builtin_on_sm_75, reset_env),
	};
	char *header, *body;
	size_t header_size = 0, body_size = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: %s FAKE_LIBCUDA DIALECT_H AXPY_SOURCE\n", argv[0]);
		return 2;
	}
	fake_path = argv[1];
	header = read_all(argv[2], &header_size);
	body = read_all(argv[3], &body_size);
	if (!header || !body || !(axpy_source = malloc(header_size + body_size))) {
		fprintf(stderr, "cannot read %s and %s\n", argv[2], argv[3]);
		return 1;
	}
	memcpy(axpy_source, header, header_size);
	memcpy(axpy_source + header_size, body, body_size);
	axpy_source_size = header_size + body_size;
	free(header);
	free(body);
	if (!probe_nvrtc()) {
		const char *why = strstr(log_text, "CUDA source variants are skipped: ");

		printf("SKIP: the CUDA backend cannot open NVRTC here: %s", why ? why : log_text);
		free(axpy_source);
		return 77;
	}
	printf("NVRTC %d.%d found; the fake driver reports CUDA %s\n", nvrtc_major, nvrtc_minor,
	       driver_matching_nvrtc);
	reset_env(NULL);
	return _cmocka_run_group_tests("cuda_nvrtc_fake_driver", tests,
				       sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
