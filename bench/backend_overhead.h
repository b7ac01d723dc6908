/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_overhead.h - the ODX side of the backend-overhead benchmarks, shared by every backend's
 * program (backend_overhead_<name>.c holds only its raw API loop): (1) `iters` small dispatches
 * of an axpy over SMALL_N floats, each after a host-to-device write of its input; (2) one SAXPY
 * over `big` floats with its uploads and the download of the result.
 */
#ifndef ODX_BENCH_BACKEND_OVERHEAD_H
#define ODX_BENCH_BACKEND_OVERHEAD_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "odx/odx.h"

#define SMALL_N 256

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One JSON line; ratio = ODX time / raw time (lower is better). */
static void report(const char *backend, const char *variant, double odx, double raw)
{
	printf("{\"bench\":\"backend_overhead\",\"variant\":\"%s/%s\",\"value\":%.2f,"
	       "\"unit\":\"us\",\"anchor\":\"raw %s\",\"anchor_value\":%.2f,\"ratio\":%.3f}\n",
	       backend, variant, odx, backend, raw, raw > 0 ? odx / raw : 0.0);
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
			   .device = 1};
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
