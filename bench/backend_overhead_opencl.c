/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_overhead_opencl.c - what ODX's OpenCL backend costs over hand-written OpenCL, in one
 * run: (1) small dispatches, each after a host-to-device write of its input; (2) one large SAXPY
 * with its uploads and the download of the result. The raw loop beside it does the same on one
 * device with one in-order queue (blocking writes, as odx_buffer_write returns once the bytes
 * are taken). One JSON line per figure.
 *
 * The raw side speaks OpenCL through the backend's own entry point table (backends/opencl/clb.h)
 * and, like the backend, opens libOpenCL.so.1 at run time. Both sides use the first device of
 * the first platform (ODX_OPENCL_ALLOW_CPU=true for PoCL).
 *
 * Usage: backend_overhead_opencl [-n small_iterations] [-s saxpy_elements]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clb.h"
#include "odx/odx.h"

#define SMALL_N 256
#define BLOCK 64

static const char axpy_src[] =
	"__kernel void axpy(__global const float *x, __global float *y, long n, float a)\n"
	"{\n"
	"	long i = get_global_id(0);\n"
	"	if (i < n)\n"
	"		y[i] = a * x[i] + y[i];\n"
	"}\n";

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void report(const char *variant, double odx, double raw)
{
	printf("{\"bench\":\"backend_overhead\",\"variant\":\"opencl/%s\",\"value\":%.2f,"
	       "\"unit\":\"us\",\"anchor\":\"raw opencl\",\"anchor_value\":%.2f,\"ratio\":%.3f}\n",
	       variant, odx, raw, raw > 0 ? odx / raw : 0.0);
}

/* ---- through ODX ---------------------------------------------------------------------------- */

#define ODX_CHECK(expr)                                                                            \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_) {                                                                         \
			fprintf(stderr, "%s: %s: %s\n", #expr, odx_err_name(rc_),                  \
				ctx ? odx_last_error(ctx) : "");                                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void run_odx(int iters, size_t big, double *small_us, double *saxpy_us)
{
	static const odx_param params[] = {
		{ODX_ARG_BUFFER, ODX_R, "x"},
		{ODX_ARG_BUFFER, ODX_RW, "y"},
		{ODX_ARG_I64, 0, "n"},
		{ODX_ARG_F32, 0, "a"},
	};
	odx_kernel_variant v = {.backend = ODX_BACKEND_OPENCL,
				.format = ODX_FORMAT_OPENCL_C,
				.code = axpy_src,
				.code_size = sizeof(axpy_src) - 1,
				.entry = "axpy"};
	odx_context *ctx = NULL;
	odx_config *cfg = NULL;
	odx_kernel *k = NULL;
	odx_buffer *bx = NULL, *by = NULL;
	float x[SMALL_N], *hx, *hy;
	odx_task_opts o = {.grid = {SMALL_N / BLOCK, 1, 1}, .block = {BLOCK, 1, 1}, .device = 1};
	odx_arg args[4];
	double t0;
	int i;

	ODX_CHECK(odx_config_create(&cfg));
	ODX_CHECK(odx_config_set(cfg, "backends", "opencl"));
	ODX_CHECK(odx_config_set(cfg, "opencl.allow_cpu", "true"));
	if (odx_open(&ctx, cfg)) {
		fprintf(stderr, "odx_open: %s\n", odx_config_error(cfg));
		exit(77);
	}
	odx_config_destroy(cfg);
	ODX_CHECK(odx_kernel_create(ctx, "axpy", params, 4, &v, 1, &k));

	for (i = 0; i < SMALL_N; i++)
		x[i] = 1.0f;
	ODX_CHECK(odx_buffer_create(ctx, sizeof(x), 0, &bx));
	ODX_CHECK(odx_buffer_create(ctx, sizeof(x), 0, &by));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64(SMALL_N);
	args[3] = ODX_F32(1.0f);
	/* Warm-up: the program is built (or loaded from the cache) at the first launch. */
	ODX_CHECK(odx_buffer_write(bx, 0, x, sizeof(x), -1));
	ODX_CHECK(odx_submit(ctx, k, args, 4, &o, NULL));
	ODX_CHECK(odx_wait_all(ctx, -1));
	t0 = now_us();
	for (i = 0; i < iters; i++) {
		x[0] = (float)i;
		ODX_CHECK(odx_buffer_write(bx, 0, x, sizeof(x), -1));
		ODX_CHECK(odx_submit(ctx, k, args, 4, &o, NULL));
	}
	ODX_CHECK(odx_wait_all(ctx, -1));
	*small_us = (now_us() - t0) / iters;
	ODX_CHECK(odx_buffer_destroy(bx));
	ODX_CHECK(odx_buffer_destroy(by));

	hx = malloc(big * sizeof(float));
	hy = malloc(big * sizeof(float));
	if (!hx || !hy)
		exit(1);
	for (size_t j = 0; j < big; j++) {
		hx[j] = (float)j;
		hy[j] = 1.0f;
	}
	ODX_CHECK(odx_buffer_create(ctx, big * sizeof(float), 0, &bx));
	ODX_CHECK(odx_buffer_create(ctx, big * sizeof(float), 0, &by));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64((int64_t)big);
	args[3] = ODX_F32(2.0f);
	o.grid[0] = (uint32_t)((big + BLOCK - 1) / BLOCK);
	t0 = now_us();
	ODX_CHECK(odx_buffer_write(bx, 0, hx, big * sizeof(float), -1));
	ODX_CHECK(odx_buffer_write(by, 0, hy, big * sizeof(float), -1));
	ODX_CHECK(odx_submit(ctx, k, args, 4, &o, NULL));
	ODX_CHECK(odx_buffer_read(by, 0, hy, big * sizeof(float), -1));
	*saxpy_us = now_us() - t0;
	if (hy[big - 1] != 2.0f * (float)(big - 1) + 1.0f)
		fprintf(stderr, "odx saxpy: wrong result %g\n", (double)hy[big - 1]);
	free(hx);
	free(hy);
	odx_close(ctx);
}

/* ---- raw OpenCL ----------------------------------------------------------------------------- */

static clb_api cl;

#define CL_OK(expr)                                                                                \
	do {                                                                                       \
		cl_int e_ = (expr);                                                                \
		if (e_ != CL_SUCCESS) {                                                            \
			fprintf(stderr, "%s: cl_int %d\n", #expr, (int)e_);                        \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void raw_open(void)
{
	cl.lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cl.lib) {
		fprintf(stderr, "libOpenCL.so.1: %s\n", dlerror());
		exit(77);
	}
#define RESOLVE(name, ret, params)                                                                 \
	*(void **)&cl.name = dlsym(cl.lib, #name);                                                 \
	if (!cl.name) {                                                                            \
		fprintf(stderr, "libOpenCL.so.1 lacks %s\n", #name);                               \
		exit(77);                                                                          \
	}
	CLB_API(RESOLVE)
#undef RESOLVE
}

static void run_raw(int iters, size_t big, double *small_us, double *saxpy_us)
{
	cl_platform_id plat;
	cl_device_id dev;
	cl_context ctx;
	cl_command_queue q;
	cl_program prog;
	cl_kernel k;
	cl_mem bx, by;
	cl_int err;
	const char *src = axpy_src;
	size_t len = sizeof(axpy_src) - 1, global = SMALL_N, local = BLOCK;
	float x[SMALL_N], a = 1.0f, *hx, *hy;
	cl_long n = SMALL_N;
	double t0;
	int i;

	raw_open();
	CL_OK(cl.clGetPlatformIDs(1, &plat, NULL));
	CL_OK(cl.clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	ctx = cl.clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CL_OK(err);
	q = cl.clCreateCommandQueue(ctx, dev, 0, &err);
	CL_OK(err);
	prog = cl.clCreateProgramWithSource(ctx, 1, &src, &len, &err);
	CL_OK(err);
	CL_OK(cl.clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
	k = cl.clCreateKernel(prog, "axpy", &err);
	CL_OK(err);

	for (i = 0; i < SMALL_N; i++)
		x[i] = 1.0f;
	bx = cl.clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(x), NULL, &err);
	CL_OK(err);
	by = cl.clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(x), NULL, &err);
	CL_OK(err);
	CL_OK(cl.clSetKernelArg(k, 0, sizeof(bx), &bx));
	CL_OK(cl.clSetKernelArg(k, 1, sizeof(by), &by));
	CL_OK(cl.clSetKernelArg(k, 2, sizeof(n), &n));
	CL_OK(cl.clSetKernelArg(k, 3, sizeof(a), &a));
	/* Warm-up, as on the ODX side. */
	CL_OK(cl.clEnqueueWriteBuffer(q, bx, CL_TRUE, 0, sizeof(x), x, 0, NULL, NULL));
	CL_OK(cl.clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
	CL_OK(cl.clFinish(q));
	t0 = now_us();
	for (i = 0; i < iters; i++) {
		x[0] = (float)i;
		CL_OK(cl.clEnqueueWriteBuffer(q, bx, CL_TRUE, 0, sizeof(x), x, 0, NULL, NULL));
		CL_OK(cl.clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
	}
	CL_OK(cl.clFinish(q));
	*small_us = (now_us() - t0) / iters;
	cl.clReleaseMemObject(bx);
	cl.clReleaseMemObject(by);

	hx = malloc(big * sizeof(float));
	hy = malloc(big * sizeof(float));
	if (!hx || !hy)
		exit(1);
	for (size_t j = 0; j < big; j++) {
		hx[j] = (float)j;
		hy[j] = 1.0f;
	}
	t0 = now_us();
	/* Allocation inside the timed region: ODX allocates device memory at first use too. */
	bx = cl.clCreateBuffer(ctx, CL_MEM_READ_WRITE, big * sizeof(float), NULL, &err);
	CL_OK(err);
	by = cl.clCreateBuffer(ctx, CL_MEM_READ_WRITE, big * sizeof(float), NULL, &err);
	CL_OK(err);
	n = (cl_long)big;
	a = 2.0f;
	global = (big + BLOCK - 1) / BLOCK * BLOCK;
	CL_OK(cl.clSetKernelArg(k, 0, sizeof(bx), &bx));
	CL_OK(cl.clSetKernelArg(k, 1, sizeof(by), &by));
	CL_OK(cl.clSetKernelArg(k, 2, sizeof(n), &n));
	CL_OK(cl.clSetKernelArg(k, 3, sizeof(a), &a));
	CL_OK(cl.clEnqueueWriteBuffer(q, bx, CL_FALSE, 0, big * sizeof(float), hx, 0, NULL, NULL));
	CL_OK(cl.clEnqueueWriteBuffer(q, by, CL_FALSE, 0, big * sizeof(float), hy, 0, NULL, NULL));
	CL_OK(cl.clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
	CL_OK(cl.clEnqueueReadBuffer(q, by, CL_TRUE, 0, big * sizeof(float), hy, 0, NULL, NULL));
	*saxpy_us = now_us() - t0;
	if (hy[big - 1] != 2.0f * (float)(big - 1) + 1.0f)
		fprintf(stderr, "raw saxpy: wrong result %g\n", (double)hy[big - 1]);
	free(hx);
	free(hy);
	cl.clReleaseMemObject(bx);
	cl.clReleaseMemObject(by);
	cl.clReleaseKernel(k);
	cl.clReleaseProgram(prog);
	cl.clReleaseCommandQueue(q);
	cl.clReleaseContext(ctx);
}

int main(int argc, char **argv)
{
	int iters = 1000, opt;
	size_t big = 1u << 24;
	double odx_small, odx_saxpy, raw_small, raw_saxpy;

	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		if (opt == 'n')
			iters = atoi(optarg);
		else if (opt == 's')
			big = (size_t)strtoull(optarg, NULL, 10);
		else {
			fprintf(stderr, "usage: %s [-n small_iterations] [-s saxpy_elements]\n",
				argv[0]);
			return 2;
		}
	}
	if (iters < 1 || big < 1)
		return 2;
	run_odx(iters, big, &odx_small, &odx_saxpy);
	run_raw(iters, big, &raw_small, &raw_saxpy);
	report("small-dispatch", odx_small, raw_small);
	report("saxpy", odx_saxpy, raw_saxpy);
	return 0;
}
