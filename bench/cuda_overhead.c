/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_overhead.c - the CUDA backend against the raw CUDA driver, side by side in one run.
 *
 * The raw loops open the driver the same way the backend does (dlopen of libcuda.so.1 and
 * cuGetProcAddress at CUB_API_VERSION, with backends/cuda/cuda_api.h) and run the same hand-written
 * PTX kernel. One JSON line per figure:
 *   {"bench":"backend_overhead","variant":"cuda/...","value":..,"unit":"..","anchor":"raw cuda
 *    driver","anchor_value":..,"ratio":..}
 * ratio = value / anchor_value (for us/launch lower is better, for GB/s higher is better).
 * Exits 77 when no CUDA device opens.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "odx/odx.h"
#include "axpy_ptx.h"
#include "cuda_api.h"

#define TIMEOUT_MS 120000
#define LAUNCHES 1000
#define CHAINS 64
#define COPY_BYTES ((size_t)64 << 20)
#define SAXPY_N (1 << 28)
#define PEAK_GBS 3350.0

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report(const char *variant, double value, const char *unit, double anchor,
		   const char *extra)
{
	printf("{\"bench\":\"backend_overhead\",\"variant\":\"%s\",\"value\":%.3f,\"unit\":\"%s\","
	       "\"anchor\":\"raw cuda driver\",\"anchor_value\":%.3f,\"ratio\":%.3f%s}\n",
	       variant, value, unit, anchor, anchor > 0 ? value / anchor : 0.0, extra ? extra : "");
	fflush(stdout);
}

/* ---- raw driver ---------------------------------------------------------------------------- */

typedef struct raw {
	void *lib;
	cub_table f;
	CUcontext ctx;
	CUstream s;
	CUmodule mod;
	CUfunction axpy;
} raw;

#define RAW_CHECK(call)                                                                            \
	do {                                                                                       \
		CUresult rc_ = (call);                                                             \
		if (rc_ != CUDA_SUCCESS) {                                                         \
			fprintf(stderr, "raw: %s failed: %d\n", #call, rc_);                     \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)

static int raw_open(raw *r)
{
	PFN_cuGetProcAddress_v2 gpa;
	CUdriverProcAddressQueryResult st;
	CUdevice dev;
	void *sym;

	r->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!r->lib || !(sym = dlsym(r->lib, "cuGetProcAddress_v2")))
		return -1;
	memcpy(&gpa, &sym, sizeof(sym));
#define RAW_RESOLVE(fn, params)                                                                    \
	if (gpa(#fn, &sym, CUB_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)     \
		return -1;                                                                         \
	memcpy(&r->f.fn, &sym, sizeof(sym));
	CUB_FUNCTIONS(RAW_RESOLVE)
#undef RAW_RESOLVE
	RAW_CHECK(r->f.cuInit(0));
	RAW_CHECK(r->f.cuDeviceGet(&dev, 0));
	RAW_CHECK(r->f.cuDevicePrimaryCtxRetain(&r->ctx, dev));
	RAW_CHECK(r->f.cuCtxSetCurrent(r->ctx));
	RAW_CHECK(r->f.cuStreamCreate(&r->s, CU_STREAM_NON_BLOCKING));
	RAW_CHECK(r->f.cuModuleLoadDataEx(&r->mod, odx_test_axpy_ptx, 0, NULL, NULL));
	RAW_CHECK(r->f.cuModuleGetFunction(&r->axpy, r->mod, "odx_test_axpy"));
	return 0;
}

static int raw_launch(raw *r, CUdeviceptr x, CUdeviceptr y, float a, int n, unsigned grid)
{
	void *params[4] = {&x, &y, &a, &n};

	return r->f.cuLaunchKernel(r->axpy, grid, 1, 1, 256, 1, 1, 0, r->s, params, NULL);
}

/* Each launch waited for, as ODX's dependent tasks are. */
static double raw_launch_us(raw *r)
{
	CUdeviceptr x, y;
	double t0, t1;
	int i;

	if (r->f.cuMemAlloc(&x, 4096) || r->f.cuMemAlloc(&y, 4096))
		return -1;
	r->f.cuMemsetD8Async(x, 0, 4096, r->s);
	r->f.cuMemsetD8Async(y, 0, 4096, r->s);
	raw_launch(r, x, y, 1.0f, 1024, 4);
	r->f.cuStreamSynchronize(r->s);
	t0 = now_s();
	for (i = 0; i < LAUNCHES; i++) {
		raw_launch(r, x, y, 1.0f, 1024, 4);
		r->f.cuStreamSynchronize(r->s);
	}
	t1 = now_s();
	r->f.cuMemFree(x);
	r->f.cuMemFree(y);
	return (t1 - t0) * 1e6 / LAUNCHES;
}

/* Launches in a stream without waiting for each (64 output buffers in turn), synchronised once:
 * the launch throughput a raw cuLaunchKernel loop gets. */
static double raw_launch_indep_us(raw *r)
{
	CUdeviceptr x, y[CHAINS];
	double t0, t1;
	int i;

	if (r->f.cuMemAlloc(&x, 4096))
		return -1;
	for (i = 0; i < CHAINS; i++)
		if (r->f.cuMemAlloc(&y[i], 4096))
			return -1;
	r->f.cuMemsetD8Async(x, 0, 4096, r->s);
	raw_launch(r, x, y[0], 1.0f, 1024, 4);
	r->f.cuStreamSynchronize(r->s);
	t0 = now_s();
	for (i = 0; i < LAUNCHES; i++)
		raw_launch(r, x, y[i % CHAINS], 1.0f, 1024, 4);
	r->f.cuStreamSynchronize(r->s);
	t1 = now_s();
	r->f.cuMemFree(x);
	for (i = 0; i < CHAINS; i++)
		r->f.cuMemFree(y[i]);
	return (t1 - t0) * 1e6 / LAUNCHES;
}

static double raw_h2d_gbs(raw *r, bool pinned)
{
	CUdeviceptr d;
	void *h = NULL;
	double best = 0, t0, t1;
	int i;

	if (r->f.cuMemAlloc(&d, COPY_BYTES))
		return -1;
	if (pinned) {
		if (r->f.cuMemHostAlloc(&h, COPY_BYTES, CU_MEMHOSTALLOC_PORTABLE))
			return -1;
	} else {
		h = malloc(COPY_BYTES);
	}
	memset(h, 1, COPY_BYTES);
	for (i = 0; i < 5; i++) {
		t0 = now_s();
		r->f.cuMemcpyHtoDAsync(d, h, COPY_BYTES, r->s);
		r->f.cuStreamSynchronize(r->s);
		t1 = now_s();
		if ((double)COPY_BYTES / (t1 - t0) / 1e9 > best)
			best = (double)COPY_BYTES / (t1 - t0) / 1e9;
	}
	if (pinned)
		r->f.cuMemFreeHost(h);
	else
		free(h);
	r->f.cuMemFree(d);
	return best;
}

static double raw_saxpy_gbs(raw *r)
{
	size_t bytes = (size_t)SAXPY_N * 4;
	CUdeviceptr x, y;
	double t0, t1;
	int i, reps = 10;

	if (r->f.cuMemAlloc(&x, bytes) || r->f.cuMemAlloc(&y, bytes))
		return -1;
	r->f.cuMemsetD8Async(x, 0, bytes, r->s);
	r->f.cuMemsetD8Async(y, 0, bytes, r->s);
	raw_launch(r, x, y, 1.0f, SAXPY_N, 65536);
	r->f.cuStreamSynchronize(r->s);
	t0 = now_s();
	for (i = 0; i < reps; i++)
		raw_launch(r, x, y, 1.0f, SAXPY_N, 65536);
	r->f.cuStreamSynchronize(r->s);
	t1 = now_s();
	r->f.cuMemFree(x);
	r->f.cuMemFree(y);
	return 3.0 * (double)bytes * reps / (t1 - t0) / 1e9;
}

/* ---- through ODX --------------------------------------------------------------------------- */

static const odx_param axpy_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "x"},
	{ODX_ARG_BUFFER, ODX_RW, "y"},
	{ODX_ARG_F32, 0, "a"},
	{ODX_ARG_I32, 0, "n"},
};

static int submit(odx_context *ctx, odx_kernel *k, odx_buffer *x, odx_buffer *y, int n,
		  unsigned grid)
{
	odx_arg args[4] = {ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(1.0f), ODX_I32(n)};
	odx_task_opts opts = {.grid = {grid, 1, 1}, .block = {256, 1, 1}};

	return odx_submit(ctx, k, args, 4, &opts, NULL);
}

static double odx_launch_us(odx_context *ctx, odx_kernel *k)
{
	odx_buffer *x, *y;
	double t0, t1;
	int i, rc;

	if (odx_buffer_create(ctx, 4096, 0, &x) || odx_buffer_create(ctx, 4096, 0, &y))
		return -1;
	rc = submit(ctx, k, x, y, 1024, 4);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t0 = now_s();
	for (i = 0; !rc && i < LAUNCHES; i++)
		rc = submit(ctx, k, x, y, 1024, 4);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t1 = now_s();
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	return rc ? -1 : (t1 - t0) * 1e6 / LAUNCHES;
}

/* The same launches as independent tasks: 64 chains, so ODX has work to launch while earlier
 * tasks run, as a raw launch loop does. */
static double odx_launch_indep_us(odx_context *ctx, odx_kernel *k)
{
	odx_buffer *x, *y[CHAINS];
	double t0, t1;
	int i, rc = 0;

	if (odx_buffer_create(ctx, 4096, 0, &x))
		return -1;
	for (i = 0; i < CHAINS; i++)
		if (odx_buffer_create(ctx, 4096, 0, &y[i]))
			return -1;
	for (i = 0; !rc && i < CHAINS; i++) /* every buffer on the device first */
		rc = submit(ctx, k, x, y[i], 1024, 4);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t0 = now_s();
	for (i = 0; !rc && i < LAUNCHES; i++)
		rc = submit(ctx, k, x, y[i % CHAINS], 1024, 4);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t1 = now_s();
	odx_buffer_destroy(x);
	for (i = 0; i < CHAINS; i++)
		odx_buffer_destroy(y[i]);
	return rc ? -1 : (t1 - t0) * 1e6 / LAUNCHES;
}

/* A 64 MiB buffer written on the host, then read by a one-element task: only it moves. */
static double odx_h2d_gbs(odx_context *ctx, odx_kernel *k)
{
	char *h = malloc(COPY_BYTES);
	odx_buffer *x, *y;
	double best = 0, t0, t1;
	int i, rc = 0;

	if (!h || odx_buffer_create(ctx, COPY_BYTES, 0, &x) || odx_buffer_create(ctx, 4096, 0, &y))
		return -1;
	memset(h, 1, COPY_BYTES);
	rc = submit(ctx, k, x, y, 1, 1); /* y and the module on the device first */
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	for (i = 0; !rc && i < 5; i++) {
		rc = odx_buffer_write(x, 0, h, COPY_BYTES, TIMEOUT_MS);
		t0 = now_s();
		rc = rc ? rc : submit(ctx, k, x, y, 1, 1);
		rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
		t1 = now_s();
		if (!rc && (double)COPY_BYTES / (t1 - t0) / 1e9 > best)
			best = (double)COPY_BYTES / (t1 - t0) / 1e9;
	}
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	free(h);
	return rc ? -1 : best;
}

static double odx_saxpy_gbs(odx_context *ctx, odx_kernel *k)
{
	size_t bytes = (size_t)SAXPY_N * 4;
	odx_buffer *x, *y;
	double t0, t1;
	int i, rc, reps = 10;

	if (odx_buffer_create(ctx, bytes, 0, &x) || odx_buffer_create(ctx, bytes, 0, &y))
		return -1;
	rc = submit(ctx, k, x, y, SAXPY_N, 65536);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t0 = now_s();
	for (i = 0; !rc && i < reps; i++)
		rc = submit(ctx, k, x, y, SAXPY_N, 65536);
	rc = rc ? rc : odx_wait_all(ctx, TIMEOUT_MS);
	t1 = now_s();
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	return rc ? -1 : 3.0 * (double)bytes * reps / (t1 - t0) / 1e9;
}

int main(void)
{
	odx_kernel_variant v = {.backend = ODX_BACKEND_CUDA, .format = ODX_FORMAT_PTX,
				.code = odx_test_axpy_ptx, .code_size = sizeof(odx_test_axpy_ptx) - 1,
				.entry = "odx_test_axpy"};
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel *k = NULL;
	double o_launch, o_h2d, o_saxpy, r_launch, r_pinned, r_pageable, r_saxpy;
	double o_indep, r_indep;
	char extra[128];
	raw r = {0};
	int rc;

	if (odx_config_create(&cfg) || odx_config_set(cfg, "backends", "cuda"))
		return 1;
	rc = odx_open(&ctx, cfg);
	if (rc) {
		printf("SKIP: no CUDA device: %s\n", odx_config_error(cfg));
		odx_config_destroy(cfg);
		return rc == ODX_EUNAVAIL ? 77 : 1;
	}
	odx_config_destroy(cfg);
	if (odx_kernel_create(ctx, "axpy", axpy_params, 4, &v, 1, &k) != 0) {
		fprintf(stderr, "kernel: %s\n", odx_last_error(ctx));
		return 1;
	}
	o_launch = odx_launch_us(ctx, k);
	o_indep = odx_launch_indep_us(ctx, k);
	o_h2d = odx_h2d_gbs(ctx, k);
	o_saxpy = odx_saxpy_gbs(ctx, k);
	odx_close(ctx);

	if (raw_open(&r) != 0) {
		fprintf(stderr, "raw driver: cannot open libcuda.so.1 through cuGetProcAddress\n");
		return 1;
	}
	r_launch = raw_launch_us(&r);
	r_indep = raw_launch_indep_us(&r);
	r_pinned = raw_h2d_gbs(&r, true);
	r_pageable = raw_h2d_gbs(&r, false);
	r_saxpy = raw_saxpy_gbs(&r);

	report("cuda/launch_small_dependent", o_launch, "us/launch", r_launch,
	       ",\"note\":\"1000 launches of a 1024-element axpy, each after the previous\"");
	report("cuda/launch_small_independent", o_indep, "us/launch", r_indep,
	       ",\"note\":\"1000 launches of a 1024-element axpy over 64 output buffers in turn; "
	       "raw: one stream, one synchronisation at the end\"");
	report("cuda/h2d_64MiB_pinned", o_h2d, "GB/s", r_pinned,
	       ",\"note\":\"ODX from its pageable host replica through pinned staging; raw from "
	       "cuMemHostAlloc memory\"");
	report("cuda/h2d_64MiB_pageable", o_h2d, "GB/s", r_pageable,
	       ",\"note\":\"ODX from its pageable host replica through pinned staging; raw from "
	       "malloc memory\"");
	snprintf(extra, sizeof(extra), ",\"percent_of_peak\":%.1f,\"peak_gbs\":%.0f",
		 100.0 * o_saxpy / PEAK_GBS, PEAK_GBS);
	report("cuda/saxpy_2^28_f32", o_saxpy, "GB/s", r_saxpy, extra);
	return 0;
}
