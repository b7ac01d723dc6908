/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda_real.c - the CUDA backend on a real NVIDIA GPU (suite 'gpu', not run by default).
 *
 * Exits 77 (skipped) with "SKIP: no CUDA device: <reason>" when ODX_BACKENDS=cuda cannot open.
 * Otherwise checks, in order: enumeration; round trips of odd sizes through the device; an axpy
 * kernel from every image it has (hand-written PTX always; nvcc PTX, cubin and fatbin when given
 * on the command line as --ptx/--cubin/--fatbin/--cubin-other FILE); the same kernel as CUDA
 * source compiled through NVRTC (reported as skipped when the backend cannot open NVRTC);
 * variant choice (a cubin for another architecture is skipped for the next variant); a broken
 * image's error message; 1000 tiny dependent launches; timings; reads and writes straight to and
 * from a device's copy (copy_sync: 256 MiB staged both ways, 4 KiB straight to the driver);
 * registered user memory (odx_buffer_register, page-locked by cuMemHostRegister, copied with no
 * bounce, written back exactly); and last the device-lost path (an illegal address), which
 * poisons the process's CUDA context. Results and timings are JSON lines on stdout:
 *   {"check":"...","ok":true,...}   {"timing":"...","value":...,"unit":"..."}
 * Exit status: 0 all checks passed, 1 a check failed, 77 no CUDA device.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "odx/odx.h"
#include "axpy_ptx.h"

#define TIMEOUT_MS 120000

static int failures;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prints a JSON string value (quotes and backslashes escaped, control characters dropped). */
static void json_str(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
}

static void check(const char *name, bool ok, const char *detail)
{
	printf("{\"check\":\"%s\",\"ok\":%s,\"detail\":", name, ok ? "true" : "false");
	json_str(detail ? detail : "");
	printf("}\n");
	fflush(stdout);
	if (!ok)
		failures++;
}

static void timing(const char *name, double value, const char *unit, const char *note)
{
	printf("{\"timing\":\"%s\",\"value\":%.3f,\"unit\":\"%s\",\"note\":", name, value, unit);
	json_str(note);
	printf("}\n");
	fflush(stdout);
}

static void *read_file(const char *path, size_t *size)
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

static const odx_param axpy_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "x"},
	{ODX_ARG_BUFFER, ODX_RW, "y"},
	{ODX_ARG_F32, 0, "a"},
	{ODX_ARG_I32, 0, "n"},
};

static odx_kernel *make_kernel(odx_context *ctx, const char *name, const odx_kernel_variant *v,
			       int nv)
{
	odx_kernel *k = NULL;
	int rc = odx_kernel_create(ctx, name, axpy_params, 4, v, nv, &k);

	if (rc) {
		char msg[512];

		snprintf(msg, sizeof(msg), "odx_kernel_create(%s): %s: %s", name, odx_err_name(rc),
			 odx_last_error(ctx));
		check("kernel_create", false, msg);
		return NULL;
	}
	return k;
}

static odx_kernel_variant ptx_variant(const void *code, size_t size, const char *entry)
{
	return (odx_kernel_variant){.backend = ODX_BACKEND_CUDA, .format = ODX_FORMAT_PTX,
				    .code = code, .code_size = size, .entry = entry};
}

static odx_kernel_variant cubin_variant(const void *code, size_t size, const char *entry)
{
	return (odx_kernel_variant){.backend = ODX_BACKEND_CUDA, .format = ODX_FORMAT_CUBIN,
				    .code = code, .code_size = size, .entry = entry};
}

/* Runs y = a * x + y over n floats and waits; returns the task's status, message in msg. */
static int run_axpy(odx_context *ctx, odx_kernel *k, odx_buffer *x, odx_buffer *y, float a, int n,
		    char *msg, size_t msglen)
{
	odx_arg args[4] = {ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(a), ODX_I32(n)};
	odx_task_opts opts = {.grid = {n > 0 ? (uint32_t)((n + 255) / 256) : 1, 1, 1},
			      .block = {256, 1, 1}};
	odx_event *ev = NULL;
	int rc;

	if (opts.grid[0] > 65536)
		opts.grid[0] = 65536; /* grid-stride kernel */
	rc = odx_submit(ctx, k, args, 4, &opts, &ev);
	if (rc) {
		snprintf(msg, msglen, "odx_submit: %s: %s", odx_err_name(rc), odx_last_error(ctx));
		return rc;
	}
	rc = odx_event_wait(ev, TIMEOUT_MS);
	snprintf(msg, msglen, "%s", rc ? odx_event_message(ev) : "");
	odx_event_release(ev);
	return rc;
}

/* axpy with one kernel over n floats; checks every element exactly. */
static void check_axpy(odx_context *ctx, odx_kernel *k, const char *name, int n)
{
	float *xs = malloc((size_t)n * 4), *ys = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
	odx_buffer *x = NULL, *y = NULL;
	char msg[1024] = "", detail[1200];
	int i, rc, bad = -1;

	for (i = 0; i < n; i++) {
		xs[i] = (float)(i % 1000) * 0.5f;
		ys[i] = (float)(i % 7);
	}
	rc = odx_buffer_create(ctx, (size_t)n * 4, 0, &x);
	rc = rc ? rc : odx_buffer_create(ctx, (size_t)n * 4, 0, &y);
	rc = rc ? rc : odx_buffer_write(x, 0, xs, (size_t)n * 4, TIMEOUT_MS);
	rc = rc ? rc : odx_buffer_write(y, 0, ys, (size_t)n * 4, TIMEOUT_MS);
	rc = rc ? rc : run_axpy(ctx, k, x, y, 3.0f, n, msg, sizeof(msg));
	if (!rc && (rc = odx_buffer_read(y, 0, out, (size_t)n * 4, TIMEOUT_MS)) != 0)
		snprintf(msg, sizeof(msg), "read: %s", odx_last_error(ctx));
	for (i = 0; !rc && i < n && bad < 0; i++)
		if (out[i] != 3.0f * xs[i] + ys[i])
			bad = i;
	if (rc)
		snprintf(detail, sizeof(detail), "%s: %s: %s", name, odx_err_name(rc), msg);
	else if (bad >= 0)
		snprintf(detail, sizeof(detail), "%s: y[%d] = %g, expected %g", name, bad,
			 out[bad], 3.0f * xs[bad] + ys[bad]);
	else
		snprintf(detail, sizeof(detail), "%s: %d elements exact", name, n);
	check("axpy", !rc && bad < 0, detail);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	free(xs);
	free(ys);
	free(out);
}

/* Bytes written, moved to the device by a task that leaves them as they are (a = 0 over a zero
 * x), and read back. Sizes straddle the staging blocks' size. */
static void check_round_trips(odx_context *ctx, odx_kernel *k)
{
	static const size_t sizes[] = {1, 3, 4095, 65537, (8u << 20) + 13, (32u << 20) + 7,
				       (100u << 20) + 3};
	size_t i, j;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		unsigned char *in = malloc(n), *out = malloc(n);
		odx_buffer *x = NULL, *y = NULL;
		char msg[1024] = "", detail[1200];
		int rc;

		for (j = 0; j < n; j++)
			in[j] = (unsigned char)(j * 131 + 7);
		memset(out, 0, n);
		rc = odx_buffer_create(ctx, n, 0, &x);
		rc = rc ? rc : odx_buffer_create(ctx, n, 0, &y);
		rc = rc ? rc : odx_buffer_write(y, 0, in, n, TIMEOUT_MS);
		rc = rc ? rc : run_axpy(ctx, k, x, y, 0.0f, (int)(n / 4), msg, sizeof(msg));
		rc = rc ? rc : odx_buffer_read(y, 0, out, n, TIMEOUT_MS);
		if (rc)
			snprintf(detail, sizeof(detail), "%zu bytes: %s: %s %s", n, odx_err_name(rc),
				 msg, odx_last_error(ctx));
		else if (memcmp(in, out, n) != 0)
			snprintf(detail, sizeof(detail), "%zu bytes: contents differ", n);
		else
			snprintf(detail, sizeof(detail), "%zu bytes", n);
		check("round_trip", !rc && memcmp(in, out, n) == 0, detail);
		odx_buffer_destroy(x);
		odx_buffer_destroy(y);
		free(in);
		free(out);
	}
}

static void check_many_launches(odx_context *ctx, odx_kernel *k)
{
	enum { N = 1024, LAUNCHES = 1000 };
	float xs[N], ys[N];
	odx_buffer *x = NULL, *y = NULL;
	odx_arg args[4];
	odx_task_opts opts = {.grid = {N / 256, 1, 1}, .block = {256, 1, 1}};
	char detail[512];
	double t0, t1;
	int i, rc, bad = -1;

	for (i = 0; i < N; i++)
		xs[i] = (float)(i % 5);
	odx_wait_all(ctx, TIMEOUT_MS); /* clears the failure of an earlier check */
	rc = odx_buffer_create(ctx, sizeof(xs), 0, &x);
	rc = rc ? rc : odx_buffer_create(ctx, sizeof(ys), 0, &y);
	rc = rc ? rc : odx_buffer_write(x, 0, xs, sizeof(xs), TIMEOUT_MS);
	args[0] = ODX_BUF(x, ODX_R);
	args[1] = ODX_BUF(y, ODX_RW);
	args[2] = ODX_F32(1.0f);
	args[3] = ODX_I32(N);
	/* Warm-up: the module load and the first copies are not the launches' cost. */
	rc = rc ? rc : odx_submit(ctx, k, args, 4, &opts, NULL);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t0 = now_s();
	for (i = 1; !rc && i < LAUNCHES; i++)
		rc = odx_submit(ctx, k, args, 4, &opts, NULL);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t1 = now_s();
	rc = rc ? rc : odx_buffer_read(y, 0, ys, sizeof(ys), TIMEOUT_MS);
	for (i = 0; !rc && i < N && bad < 0; i++)
		if (ys[i] != (float)LAUNCHES * xs[i])
			bad = i;
	if (rc)
		snprintf(detail, sizeof(detail), "%s: %s", odx_err_name(rc), odx_last_error(ctx));
	else if (bad >= 0)
		snprintf(detail, sizeof(detail), "y[%d] = %g, expected %g", bad, ys[bad],
			 (float)LAUNCHES * xs[bad]);
	else
		snprintf(detail, sizeof(detail), "%d dependent launches, results exact", LAUNCHES);
	check("many_launches", !rc && bad < 0, detail);
	if (!rc)
		timing("dependent_launch", (t1 - t0) * 1e6 / (LAUNCHES - 1), "us/launch",
		       "1000 launches of one kernel on the same buffer (each waits for the last), "
		       "submit to completion");
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
}

/* Copies through ODX (pageable user memory, staged through ODX's pinned blocks) and SAXPY. */
static void timings(odx_context *ctx, odx_kernel *k)
{
	const int n = 1 << 26; /* 256 MiB of floats */
	const size_t bytes = (size_t)n * 4, half = bytes / 2;
	float *host = malloc(bytes);
	odx_buffer *x = NULL, *y = NULL;
	char msg[1024] = "";
	double t0, t1;
	int i, rc, reps = 10;

	if (!host)
		return;
	for (i = 0; i < n; i++)
		host[i] = (float)(i & 1023);
	rc = odx_buffer_create(ctx, bytes, 0, &x);
	rc = rc ? rc : odx_buffer_create(ctx, bytes, 0, &y);
	/* In halves: a partial write of a buffer held nowhere goes to host RAM, so the task below
	 * moves both buffers through the h2d lane (a whole first write would land on the device
	 * at once: copy_sync, timed in sync_timings). */
	rc = rc ? rc : odx_buffer_write(x, 0, host, half, TIMEOUT_MS);
	rc = rc ? rc : odx_buffer_write(x, half, (char *)host + half, half, TIMEOUT_MS);
	rc = rc ? rc : odx_buffer_write(y, 0, host, half, TIMEOUT_MS);
	rc = rc ? rc : odx_buffer_write(y, half, (char *)host + half, half, TIMEOUT_MS);
	/* h2d: a one-element task needs both buffers on the device: 512 MiB move. */
	t0 = now_s();
	rc = rc ? rc : run_axpy(ctx, k, x, y, 1.0f, 1, msg, sizeof(msg));
	t1 = now_s();
	if (!rc)
		timing("odx_h2d", 2.0 * (double)bytes / (t1 - t0) / 1e9, "GB/s",
		       "two 256 MiB buffers staged to the device by one tiny task (pageable "
		       "host replica -> pinned staging -> device)");
	/* SAXPY on device-resident vectors. */
	if (!rc) {
		odx_arg args[4] = {ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(1.0f), ODX_I32(n)};
		odx_task_opts opts = {.grid = {65536, 1, 1}, .block = {256, 1, 1}};

		rc = run_axpy(ctx, k, x, y, 1.0f, n, msg, sizeof(msg)); /* warm */
		t0 = now_s();
		for (i = 0; !rc && i < reps; i++)
			rc = odx_submit(ctx, k, args, 4, &opts, NULL);
		rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
		t1 = now_s();
		if (!rc) {
			double gbs = 3.0 * (double)bytes * reps / (t1 - t0) / 1e9;
			char note[256];

			snprintf(note, sizeof(note),
				 "2^26 floats, 12 B/element, 10 dependent tasks; %.1f%% of 3350 "
				 "GB/s (H100 SXM HBM3)",
				 100.0 * gbs / 3350.0);
			timing("odx_saxpy", gbs, "GB/s", note);
		}
	}
	/* d2h: y was written on the device; reading it brings 256 MiB back. */
	if (!rc) {
		t0 = now_s();
		rc = odx_buffer_read(y, 0, host, bytes, TIMEOUT_MS);
		t1 = now_s();
		if (!rc)
			timing("odx_d2h", (double)bytes / (t1 - t0) / 1e9, "GB/s",
			       "256 MiB read from the device's copy into pageable user memory "
			       "(copy_sync: staged through a pinned block in 2 MiB pieces)");
	}
	if (rc) {
		char detail[1200];

		snprintf(detail, sizeof(detail), "%s: %s %s", odx_err_name(rc), msg,
			 odx_last_error(ctx));
		check("timings", false, detail);
	}
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	free(host);
}

/* Reads and writes straight to and from a device's copy (ABI 1.3 copy_sync): a whole write of a
 * new buffer lands on the device (staged in pieces: pageable memory), then small reads and writes
 * of it, which go to the driver as they are. */
static void sync_timings(odx_context *ctx)
{
	const size_t bytes = (size_t)256 << 20, small = 4096;
	enum { SMALL_REPS = 1000 };
	unsigned char *host = malloc(bytes), *back = malloc(bytes);
	odx_buffer *z = NULL;
	char detail[1200];
	double t0, t1, t2;
	int i, rc;

	if (!host || !back) {
		free(host);
		free(back);
		return;
	}
	for (size_t j = 0; j < bytes; j++)
		host[j] = (unsigned char)(j * 131 + 7);
	memset(back, 0, bytes); /* its pages faulted in before the clock starts */
	odx_wait_all(ctx, TIMEOUT_MS); /* clears the failure of an earlier check */
	rc = odx_buffer_create(ctx, bytes, 0, &z);
	t0 = now_s();
	rc = rc ? rc : odx_buffer_write(z, 0, host, bytes, TIMEOUT_MS);
	t1 = now_s();
	rc = rc ? rc : odx_buffer_read(z, 0, back, bytes, TIMEOUT_MS);
	t2 = now_s();
	if (rc)
		snprintf(detail, sizeof(detail), "%s: %s", odx_err_name(rc), odx_last_error(ctx));
	else
		snprintf(detail, sizeof(detail), "256 MiB written whole and read back, %s",
			 memcmp(host, back, bytes) ? "contents differ" : "exact");
	check("copy_sync", !rc && memcmp(host, back, bytes) == 0, detail);
	if (!rc) {
		timing("odx_write_device", (double)bytes / (t1 - t0) / 1e9, "GB/s",
		       "a whole write of a new 256 MiB buffer into its device copy (copy_sync: "
		       "pageable user memory staged through a pinned block in 2 MiB pieces)");
		timing("odx_read_device", (double)bytes / (t2 - t1) / 1e9, "GB/s",
		       "the same 256 MiB read back into pageable user memory (copy_sync, staged)");
		t0 = now_s();
		for (i = 0; !rc && i < SMALL_REPS; i++) {
			rc = odx_buffer_write(z, (size_t)i * small, host, small, TIMEOUT_MS);
			rc = rc ? rc : odx_buffer_read(z, (size_t)i * small, back, small, TIMEOUT_MS);
		}
		t1 = now_s();
		if (rc) {
			snprintf(detail, sizeof(detail), "4 KiB copies: %s: %s", odx_err_name(rc),
				 odx_last_error(ctx));
			check("copy_sync_small", false, detail);
		} else {
			timing("odx_sync_4k", (t1 - t0) * 1e6 / (2.0 * SMALL_REPS), "us/copy",
			       "4 KiB writes and reads of a device-resident buffer, alternating "
			       "(copy_sync: pageable memory straight to the driver), call to return");
		}
	}
	if (z)
		odx_buffer_destroy(z);
	odx_wait_all(ctx, TIMEOUT_MS);
	free(host);
	free(back);
}

/* User memory given to odx_buffer_register: the backend page-locks it (cuMemHostRegister), so
 * copies go between it and the device with no bounce; the result is written back into it when
 * the buffer is destroyed, and the memory is unlocked before it returns. */
static void check_host_register(odx_context *ctx, odx_kernel *k)
{
	const int n = 1 << 26; /* 256 MiB of floats per buffer */
	const size_t bytes = (size_t)n * 4;
	float *xs = malloc(bytes), *ys = malloc(bytes);
	odx_buffer *x = NULL, *y = NULL;
	char msg[1024] = "", detail[1200];
	double t0, t1, t2, reg_ms = 0, h2d = 0, d2h = 0;
	int i, rc, bad = -1;

	if (!xs || !ys) {
		free(xs);
		free(ys);
		return;
	}
	for (i = 0; i < n; i++) {
		xs[i] = (float)(i & 1023);
		ys[i] = (float)(i % 7);
	}
	odx_wait_all(ctx, TIMEOUT_MS); /* clears the failure of an earlier check */
	t0 = now_s();
	rc = odx_buffer_register(ctx, xs, bytes, 0, &x);
	rc = rc ? rc : odx_buffer_register(ctx, ys, bytes, 0, &y);
	t1 = now_s();
	reg_ms = (t1 - t0) * 1e3;
	/* A one-element task needs both buffers on the device: 512 MiB move. */
	rc = rc ? rc : run_axpy(ctx, k, x, y, 1.0f, 1, msg, sizeof(msg));
	t2 = now_s();
	if (!rc)
		h2d = 2.0 * (double)bytes / (t2 - t1) / 1e9;
	rc = rc ? rc : run_axpy(ctx, k, x, y, 2.0f, n, msg, sizeof(msg));
	if (!rc) {
		t1 = now_s();
		odx_buffer_destroy(y);
		y = NULL;
		rc = odx_wait_all(ctx, TIMEOUT_MS);
		d2h = (double)bytes / (now_s() - t1) / 1e9;
	}
	/* y[0] got x[0] once more from the one-element task. */
	for (i = 0; !rc && i < n && bad < 0; i++)
		if (ys[i] != (i ? 2.0f : 3.0f) * xs[i] + (float)(i % 7))
			bad = i;
	if (rc)
		snprintf(detail, sizeof(detail), "%s: %s %s", odx_err_name(rc), msg,
			 odx_last_error(ctx));
	else if (bad >= 0)
		snprintf(detail, sizeof(detail), "y[%d] = %g after write-back, expected %g", bad,
			 ys[bad], (bad ? 2.0f : 3.0f) * xs[bad] + (float)(bad % 7));
	else
		snprintf(detail, sizeof(detail),
			 "two registered 256 MiB buffers, axpy exact after write-back; registration "
			 "took %.1f ms",
			 reg_ms);
	check("host_register", !rc && bad < 0, detail);
	if (!rc) {
		timing("odx_h2d_registered", h2d, "GB/s",
		       "two registered 256 MiB buffers to the device by one tiny task (page-locked "
		       "user memory -> device, no staging); compare odx_h2d");
		timing("odx_d2h_registered", d2h, "GB/s",
		       "a registered 256 MiB buffer written back at its destruction (device -> "
		       "page-locked user memory), cuMemHostUnregister included");
	}
	if (x)
		odx_buffer_destroy(x);
	if (y)
		odx_buffer_destroy(y);
	odx_wait_all(ctx, TIMEOUT_MS);
	free(xs);
	free(ys);
}

/* axpy.cu's kernel as a CUDA source variant: NVRTC compiles it for this GPU (SASS for an
 * architecture NVRTC lists, else PTX the driver JIT-compiles). */
static void check_nvrtc(odx_context *ctx)
{
	static const char src[] =
		"extern \"C\" __global__ void odx_test_axpy(const float *x, float *y, float a, "
		"int n)\n{\n\tfor (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; "
		"i += gridDim.x * blockDim.x)\n\t\ty[i] = __fadd_rn(__fmul_rn(a, x[i]), "
		"y[i]);\n}\n";
	odx_kernel_variant v = {.backend = ODX_BACKEND_CUDA, .format = ODX_FORMAT_CUDA_C,
				.code = src, .code_size = sizeof(src) - 1,
				.entry = "odx_test_axpy"};
	odx_kernel *k = make_kernel(ctx, "axpy_nvrtc", &v, 1);
	odx_buffer *x = NULL, *y = NULL;
	char msg[1024] = "";
	int rc;

	if (!k)
		return;
	/* Without NVRTC the variant is skipped, and the kernel has none for this device. */
	odx_buffer_create(ctx, 64, 0, &x);
	odx_buffer_create(ctx, 64, 0, &y);
	rc = run_axpy(ctx, k, x, y, 1.0f, 16, msg, sizeof(msg));
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	if (rc == ODX_ENOVARIANT && strstr(msg, "odx_submit")) {
		printf("{\"check\":\"nvrtc\",\"skipped\":true,\"detail\":");
		json_str("the CUDA backend cannot open NVRTC here (see the log)");
		printf("}\n");
		return;
	}
	check_axpy(ctx, k, "CUDA source through NVRTC", 1000003);
}

static void check_bad_image(odx_context *ctx)
{
	static const char junk[] = "\177ELF this is not a cubin, only a broken image for the test";
	odx_kernel_variant v = cubin_variant(junk, sizeof(junk), "odx_test_axpy");
	odx_kernel *k = make_kernel(ctx, "broken_image", &v, 1);
	odx_buffer *x = NULL, *y = NULL;
	char msg[1024] = "", detail[1200];
	int rc;

	if (!k)
		return;
	odx_buffer_create(ctx, 64, 0, &x);
	odx_buffer_create(ctx, 64, 0, &y);
	rc = run_axpy(ctx, k, x, y, 1.0f, 16, msg, sizeof(msg));
	snprintf(detail, sizeof(detail), "%s: %s", odx_err_name(rc), msg);
	check("bad_image_message", rc != 0 && strstr(msg, "CUDA_ERROR_") != NULL, detail);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
}

static void check_device_lost(odx_context *ctx, odx_kernel *axpy)
{
	static const odx_param fparams[] = {{ODX_ARG_BUFFER, ODX_RW, "p"}};
	odx_kernel_variant v = ptx_variant(odx_test_axpy_ptx, sizeof(odx_test_axpy_ptx) - 1,
					   "odx_test_fault");
	odx_kernel *k = NULL;
	odx_buffer *p = NULL, *x = NULL, *y = NULL;
	odx_arg arg;
	odx_event *ev = NULL;
	char msg[1024] = "", detail[1400];
	int rc, rc2;

	if (odx_kernel_create(ctx, "fault", fparams, 1, &v, 1, &k) != 0)
		return;
	odx_buffer_create(ctx, 64, 0, &p);
	arg = ODX_BUF(p, ODX_RW);
	rc = odx_submit(ctx, k, &arg, 1, NULL, &ev);
	rc = rc ? rc : odx_event_wait(ev, TIMEOUT_MS);
	snprintf(detail, sizeof(detail), "%s: %s", odx_err_name(rc), ev ? odx_event_message(ev) : "");
	check("device_lost_first", rc == ODX_EDEVLOST &&
					   strstr(detail, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL,
	      detail);
	odx_event_release(ev);
	odx_buffer_create(ctx, 64, 0, &x);
	odx_buffer_create(ctx, 64, 0, &y);
	rc2 = run_axpy(ctx, axpy, x, y, 1.0f, 16, msg, sizeof(msg));
	snprintf(detail, sizeof(detail), "%s: %s", odx_err_name(rc2), msg);
	check("device_lost_after", rc2 == ODX_EDEVLOST && strstr(msg, "lost") != NULL, detail);
	odx_buffer_destroy(p);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
}

int main(int argc, char **argv)
{
	const char *ptx_path = NULL, *cubin_path = NULL, *fatbin_path = NULL, *other_path = NULL;
	void *ptx = NULL, *cubin = NULL, *fatbin = NULL, *other = NULL;
	size_t ptx_size = 0, cubin_size = 0, fatbin_size = 0, other_size = 0;
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel_variant hand = ptx_variant(odx_test_axpy_ptx, sizeof(odx_test_axpy_ptx) - 1,
					      "odx_test_axpy");
	odx_kernel *k_hand;
	char detail[512];
	int i, rc, ndev;

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--ptx") == 0)
			ptx_path = argv[i + 1];
		else if (strcmp(argv[i], "--cubin") == 0)
			cubin_path = argv[i + 1];
		else if (strcmp(argv[i], "--fatbin") == 0)
			fatbin_path = argv[i + 1];
		else if (strcmp(argv[i], "--cubin-other") == 0)
			other_path = argv[i + 1];
	}
	if (odx_config_create(&cfg) || odx_config_set(cfg, "backends", "cuda")) {
		fprintf(stderr, "FAIL: cannot configure: %s\n", cfg ? odx_config_error(cfg) : "");
		return 1;
	}
	rc = odx_open(&ctx, cfg);
	if (rc == ODX_EUNAVAIL) {
		printf("SKIP: no CUDA device: %s\n", odx_config_error(cfg));
		odx_config_destroy(cfg);
		return 77;
	}
	if (rc) {
		printf("FAIL: odx_open with backends = cuda: %s: %s\n", odx_err_name(rc),
		       odx_config_error(cfg));
		odx_config_destroy(cfg);
		return 1;
	}
	odx_config_destroy(cfg);

	ndev = odx_device_count(ctx);
	for (i = 0; i < ndev; i++) {
		odx_device_info info;

		if (odx_device_get_info(ctx, i, &info) == 0) {
			printf("{\"device\":%d,\"kind\":\"%s\",\"name\":", i,
			       odx_backend_kind_name(info.kind));
			json_str(info.name);
			printf(",\"memory_bytes\":%llu,\"compute_lanes\":%d,\"copy_lanes\":%d}\n",
			       (unsigned long long)info.memory_bytes, info.compute_lanes,
			       info.copy_lanes);
		}
	}
	snprintf(detail, sizeof(detail), "%d CUDA device(s)", ndev);
	check("enumeration", ndev > 0, detail);

	k_hand = make_kernel(ctx, "axpy_hand_ptx", &hand, 1);
	if (!k_hand)
		goto out_close;
	check_axpy(ctx, k_hand, "hand-written PTX 7.0", 1000003);
	if (ptx_path && (ptx = read_file(ptx_path, &ptx_size))) {
		odx_kernel_variant v = ptx_variant(ptx, ptx_size, "odx_test_axpy");
		odx_kernel *k = make_kernel(ctx, "axpy_nvcc_ptx", &v, 1);

		if (k)
			check_axpy(ctx, k, "nvcc PTX", 1000003);
	}
	if (cubin_path && (cubin = read_file(cubin_path, &cubin_size))) {
		odx_kernel_variant v = cubin_variant(cubin, cubin_size, "odx_test_axpy");
		odx_kernel *k = make_kernel(ctx, "axpy_nvcc_cubin", &v, 1);

		if (k)
			check_axpy(ctx, k, "nvcc cubin", 1000003);
	}
	if (fatbin_path && (fatbin = read_file(fatbin_path, &fatbin_size))) {
		odx_kernel_variant v = cubin_variant(fatbin, fatbin_size, "odx_test_axpy");
		odx_kernel *k = make_kernel(ctx, "axpy_nvcc_fatbin", &v, 1);

		if (k)
			check_axpy(ctx, k, "nvcc fatbin", 1000003);
	}
	if (other_path && (other = read_file(other_path, &other_size))) {
		/* A cubin for another architecture first: the device must skip to the PTX. */
		odx_kernel_variant v[2] = {cubin_variant(other, other_size, "odx_test_axpy"), hand};
		odx_kernel *k = make_kernel(ctx, "axpy_other_arch_then_ptx", v, 2);

		if (k)
			check_axpy(ctx, k, "cubin for another arch, then PTX (variant choice)",
				   4097);
	}
	check_nvrtc(ctx);
	check_round_trips(ctx, k_hand);
	check_bad_image(ctx);
	check_many_launches(ctx, k_hand);
	timings(ctx, k_hand);
	sync_timings(ctx);
	check_host_register(ctx, k_hand);
	if (!getenv("ODX_TEST_SKIP_DEVICE_LOST"))
		check_device_lost(ctx, k_hand);

out_close:
	rc = odx_close(ctx);
	check("close", rc == 0, odx_err_name(rc));
	free(ptx);
	free(cubin);
	free(fatbin);
	free(other);
	printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
