/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_overhead.h - the ODX side of the backend-overhead benchmarks, shared by every backend's
 * program (backend_overhead_<name>.c holds only its raw API loop): (1) `iters` small dispatches
 * of an axpy over SMALL_N floats, each after a host-to-device write of its input; (2) one SAXPY
 * over `big` floats with its uploads and the download of the result.
 */
#ifndef ODX_BENCH_BACKEND_OVERHEAD_H
#define ODX_BENCH_BACKEND_OVERHEAD_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "odx/odx.h"

#define SMALL_N 256

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

#define MAX_ROUNDS 64

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
	double s[MAX_ROUNDS];

	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/*
 * Runs fn(arg, small, saxpy) in a child process and returns its two figures: every measurement
 * starts from a fresh process, so neither side inherits the other's warm allocator or driver
 * state (a driver that reuses memory freed by an earlier run skips the page faults that a first
 * run pays). 0, or the child's exit status (77: the backend cannot open here).
 */
static int in_child(void (*fn)(const void *arg, double *small_us, double *saxpy_us),
		    const void *arg, double *small_us, double *saxpy_us)
{
	double v[2];
	int fd[2], status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if (pipe(fd) != 0)
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(fd[0]);
		fn(arg, &v[0], &v[1]);
		_exit(write(fd[1], v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : 1);
	}
	close(fd[1]);
	status = read(fd[0], v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : -1;
	close(fd[0]);
	{
		int ws;

		if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
			return 1;
		if (WEXITSTATUS(ws) != 0)
			return WEXITSTATUS(ws);
	}
	if (status)
		return 1;
	*small_us = v[0];
	*saxpy_us = v[1];
	return 0;
}

typedef void (*side_fn)(const void *arg, double *small_us, double *saxpy_us);

/* `rounds` rounds of the ODX side and the raw side, each in its own process, ODX first in even
 * rounds and raw first in odd ones. 0, or the exit status of the first child that failed. */
static int run_rounds(side_fn odx, side_fn raw, const void *arg, int rounds, double *odx_small,
		      double *odx_saxpy, double *raw_small, double *raw_saxpy)
{
	int i, j, rc;

	for (i = 0; i < rounds; i++)
		for (j = 0; j < 2; j++) {
			bool odx_now = (j == 0) == (i % 2 == 0);

			rc = odx_now ? in_child(odx, arg, &odx_small[i], &odx_saxpy[i])
				     : in_child(raw, arg, &raw_small[i], &raw_saxpy[i]);
			if (rc)
				return rc;
		}
	return 0;
}

/*
 * One JSON line for `n` rounds (each timed ODX and raw back to back, each in its own process,
 * alternating which goes first, so that drift in the machine's speed falls on both): the medians of the times, and
 * ratio = the median of the rounds' ODX time / raw time (lower is better), with its range.
 */
static void report(const char *backend, const char *variant, const double *odx, const double *raw,
		   int n)
{
	double r[MAX_ROUNDS];
	int i;

	for (i = 0; i < n; i++)
		r[i] = raw[i] > 0 ? odx[i] / raw[i] : 0.0;
	qsort(r, (size_t)n, sizeof(*r), cmp_double);
	printf("{\"bench\":\"backend_overhead\",\"variant\":\"%s/%s\",\"value\":%.2f,"
	       "\"unit\":\"us\",\"anchor\":\"raw %s\",\"anchor_value\":%.2f,\"ratio\":%.3f,"
	       "\"ratio_min\":%.3f,\"ratio_max\":%.3f,\"rounds\":%d}\n",
	       backend, variant, median(odx, n), backend, median(raw, n), median(r, n), r[0],
	       r[n - 1], n);
}

#define ODX_CHECK(expr)                                                                            \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_) {                                                                         \
			fprintf(stderr, "%s: %s: %s\n", #expr, odx_err_name(rc_),                  \
				ctx ? odx_last_error(ctx) : "");                                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/*
 * Runs both workloads through ODX on `backend` (`allow_key` = "true" lets it use CPU devices)
 * with the axpy variant `v` (R x, RW y, i64 n, f32 a) in work-groups of `block`. Exits 77 when
 * the backend cannot open (meson reports the benchmark as skipped).
 */
static void run_odx(const char *backend, const char *allow_key, const odx_kernel_variant *v,
		    unsigned block, int iters, size_t big, double *small_us, double *saxpy_us)
{
	static const odx_param params[] = {
		{ODX_ARG_BUFFER, ODX_R, "x"},
		{ODX_ARG_BUFFER, ODX_RW, "y"},
		{ODX_ARG_I64, 0, "n"},
		{ODX_ARG_F32, 0, "a"},
	};
	odx_context *ctx = NULL;
	odx_config *cfg = NULL;
	odx_kernel *k = NULL;
	odx_buffer *bx = NULL, *by = NULL;
	float x[SMALL_N], *hx, *hy;
	odx_task_opts o = {.grid = {(SMALL_N + block - 1) / block, 1, 1},
			   .block = {block, 1, 1},
			   .flags = ODX_SUBMIT_ON_DEVICE,
			   .on_device = 0};
	odx_arg args[4];
	double t0;
	int i;

	ODX_CHECK(odx_config_create(&cfg));
	ODX_CHECK(odx_config_set(cfg, "backends", backend));
	ODX_CHECK(odx_config_set(cfg, allow_key, "true"));
	if (odx_open(&ctx, cfg)) {
		fprintf(stderr, "odx_open: %s\n", odx_config_error(cfg));
		exit(77);
	}
	odx_config_destroy(cfg);
	ODX_CHECK(odx_kernel_create(ctx, "axpy", params, 4, v, 1, &k));

	for (i = 0; i < SMALL_N; i++)
		x[i] = 1.0f;
	ODX_CHECK(odx_buffer_create(ctx, sizeof(x), 0, &bx));
	ODX_CHECK(odx_buffer_create(ctx, sizeof(x), 0, &by));
	args[0] = ODX_BUF(bx, ODX_R);
	args[1] = ODX_BUF(by, ODX_RW);
	args[2] = ODX_I64(SMALL_N);
	args[3] = ODX_F32(1.0f);
	/* Warm-up: the kernel is built (or loaded from a cache) at its first launch. */
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
	o.grid[0] = (uint32_t)((big + block - 1) / block);
	t0 = now_us();
	ODX_CHECK(odx_buffer_write(bx, 0, hx, big * sizeof(float), -1));
	ODX_CHECK(odx_buffer_write(by, 0, hy, big * sizeof(float), -1));
	ODX_CHECK(odx_submit(ctx, k, args, 4, &o, NULL));
	ODX_CHECK(odx_buffer_read(by, 0, hy, big * sizeof(float), -1));
	*saxpy_us = now_us() - t0;
	if (hy[big - 1] != 2.0f * (float)(big - 1) + 1.0f)
		fprintf(stderr, "%s saxpy through odx: wrong result %g\n", backend,
			(double)hy[big - 1]);
	free(hx);
	free(hy);
	odx_close(ctx);
}

#endif /* ODX_BENCH_BACKEND_OVERHEAD_H */
