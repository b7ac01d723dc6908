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
 * Usage: backend_overhead_opencl [-n small_iterations] [-s saxpy_elements] [-r rounds]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_overhead.h"
#include "clb.h"

#define BLOCK 64

static const char axpy_src[] =
	"__kernel void axpy(__global const float *x, __global float *y, long n, float a)\n"
	"{\n"
	"	long i = get_global_id(0);\n"
	"	if (i < n)\n"
	"		y[i] = a * x[i] + y[i];\n"
	"}\n";

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

typedef struct sides {
	int iters;
	size_t big;
} sides;

static void odx_side(const void *arg, double *small_us, double *saxpy_us)
{
	const sides *s = arg;

	run_odx("opencl", "opencl.allow_cpu",
		&(odx_kernel_variant){.backend = ODX_BACKEND_OPENCL,
				      .format = ODX_FORMAT_OPENCL_C,
				      .code = axpy_src,
				      .code_size = sizeof(axpy_src) - 1,
				      .entry = "axpy"},
		BLOCK, s->iters, s->big, small_us, saxpy_us);
}

static void raw_side(const void *arg, double *small_us, double *saxpy_us)
{
	const sides *s = arg;

	run_raw(s->iters, s->big, small_us, saxpy_us);
}

int main(int argc, char **argv)
{
	int rounds = 5, opt, rc;
	sides s = {.iters = 1000, .big = 1u << 24};
	double odx_small[MAX_ROUNDS], odx_saxpy[MAX_ROUNDS], raw_small[MAX_ROUNDS],
		raw_saxpy[MAX_ROUNDS];

	while ((opt = getopt(argc, argv, "n:s:r:")) != -1) {
		if (opt == 'n')
			s.iters = atoi(optarg);
		else if (opt == 's')
			s.big = (size_t)strtoull(optarg, NULL, 10);
		else if (opt == 'r')
			rounds = atoi(optarg);
		else {
			fprintf(stderr,
				"usage: %s [-n small_iterations] [-s saxpy_elements] [-r rounds]\n",
				argv[0]);
			return 2;
		}
	}
	if (s.iters < 1 || s.big < 1 || rounds < 1 || rounds > MAX_ROUNDS)
		return 2;
	rc = run_rounds(odx_side, raw_side, &s, rounds, odx_small, odx_saxpy, raw_small,
			raw_saxpy);
	if (rc)
		return rc;
	report("opencl", "small-dispatch", odx_small, raw_small, rounds);
	report("opencl", "saxpy", odx_saxpy, raw_saxpy, rounds);
	return 0;
}
