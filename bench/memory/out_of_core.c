/* SPDX-License-Identifier: Apache-2.0 */
/*
 * out_of_core.c - streaming over data 4x the device tier, against the same work with everything
 * in device memory, in one run (issue: at least 50% of the in-memory throughput).
 *
 * The work: `passes` sweeps of y_i = a * x_i + y_i over n chunks (odx.axpy_f32). In memory, every
 * chunk stays on the device after the first sweep; out of core (tier.device.limit = total / 4),
 * every sweep brings each chunk in and writes the dirty ones back to make room. The device is
 * whatever ODX_BACKENDS selects (host by default). Prints one JSON line per run and a summary
 * line with the median ratio.
 *
 *   out_of_core [-s total_bytes] [-c chunk_bytes] [-p passes] [-r runs] [-f factor]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "odx/odx.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc, odx_context *ctx)
{
	fprintf(stderr, "out_of_core: %s: %s: %s\n", what, odx_err_name(rc),
		ctx ? odx_last_error(ctx) : "");
	exit(1);
}

#define CHECK(ctx, expr)                                                                           \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_)                                                                           \
			die(#expr, rc_, (ctx));                                                    \
	} while (0)

/* One run: returns the sweep throughput in bytes per second (x and y of every chunk, per
 * sweep), and a checksum of the result so both runs can be compared. */
static double run(const char *limit, size_t total, size_t chunk, int passes, double *sum)
{
	odx_config *cfg;
	odx_context *ctx;
	odx_kernel *axpy;
	int n = (int)(total / 2 / chunk), i, p;
	size_t words = chunk / sizeof(float);
	odx_buffer **x = calloc((size_t)n, sizeof(*x)), **y = calloc((size_t)n, sizeof(*y));
	float *host = malloc(chunk);
	double t0 = 0, t1;

	CHECK(NULL, odx_config_create(&cfg));
	if (limit)
		CHECK(NULL, odx_config_set(cfg, "tier.device.limit", limit));
	CHECK(NULL, odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &axpy));
	for (size_t w = 0; w < words; w++)
		host[w] = (float)(w % 97);
	for (i = 0; i < n; i++) {
		CHECK(ctx, odx_buffer_create(ctx, chunk, 0, &x[i]));
		CHECK(ctx, odx_buffer_create(ctx, chunk, 0, &y[i]));
		CHECK(ctx, odx_buffer_write(x[i], 0, host, chunk, -1));
	}
	/* the first sweep places the data; the timed ones stream it */
	for (p = 0; p <= passes; p++) {
		if (p == 1) {
			CHECK(ctx, odx_wait_all(ctx, -1));
			t0 = now_s();
		}
		for (i = 0; i < n; i++) {
			odx_arg args[] = {ODX_BUF(x[i], ODX_R), ODX_BUF(y[i], ODX_RW), ODX_F32(0.5f),
					  ODX_I32((int32_t)words)};
			odx_task_opts o = {.grid = {(uint32_t)(words + 255) / 256, 1, 1},
					   .block = {256, 1, 1}};

			CHECK(ctx, odx_submit(ctx, axpy, args, 4, &o, NULL));
		}
	}
	CHECK(ctx, odx_wait_all(ctx, -1));
	t1 = now_s();
	*sum = 0;
	for (i = 0; i < n; i++) {
		CHECK(ctx, odx_buffer_read(y[i], 0, host, chunk, -1));
		*sum += host[i % words] + host[words - 1];
		odx_buffer_destroy(x[i]);
		odx_buffer_destroy(y[i]);
	}
	CHECK(ctx, odx_close(ctx));
	free(x);
	free(y);
	free(host);
	return (double)passes * (double)n * 2.0 * (double)chunk / (t1 - t0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t total = 256u << 20, chunk = 4u << 20;
	int passes = 4, runs = 5, factor = 4, opt, r;
	double ratios[64], mem[64], ooc[64];
	char limit[32];

	while ((opt = getopt(argc, argv, "s:c:p:r:f:")) != -1) {
		switch (opt) {
		case 's':
			total = strtoull(optarg, NULL, 0);
			break;
		case 'c':
			chunk = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			passes = atoi(optarg);
			break;
		case 'r':
			runs = atoi(optarg);
			break;
		case 'f':
			factor = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: out_of_core [-s total] [-c chunk] [-p passes] [-r runs] "
					"[-f factor]\n");
			return 2;
		}
	}
	if (runs < 1 || runs > 64 || passes < 1 || factor < 1 || chunk == 0 || total < 4 * chunk) {
		fprintf(stderr, "out_of_core: bad arguments\n");
		return 2;
	}
	snprintf(limit, sizeof(limit), "%zu", total / (size_t)factor);
	for (r = 0; r < runs; r++) {
		double s_mem, s_ooc;

		/* alternate the order so neither side always runs on a warmer machine */
		if (r % 2 == 0) {
			mem[r] = run(NULL, total, chunk, passes, &s_mem);
			ooc[r] = run(limit, total, chunk, passes, &s_ooc);
		} else {
			ooc[r] = run(limit, total, chunk, passes, &s_ooc);
			mem[r] = run(NULL, total, chunk, passes, &s_mem);
		}
		if (s_mem != s_ooc) {
			fprintf(stderr, "out_of_core: results differ (%g vs %g)\n", s_mem, s_ooc);
			return 1;
		}
		ratios[r] = ooc[r] / mem[r];
		printf("{\"bench\":\"out_of_core\",\"run\":%d,\"total_bytes\":%zu,\"chunk_bytes\":%zu,"
		       "\"device_limit\":%s,\"in_memory_GBps\":%.3f,\"out_of_core_GBps\":%.3f,"
		       "\"ratio\":%.3f}\n",
		       r, total, chunk, limit, mem[r] / 1e9, ooc[r] / 1e9, ratios[r]);
		fflush(stdout);
	}
	qsort(ratios, (size_t)runs, sizeof(double), cmp_double);
	qsort(mem, (size_t)runs, sizeof(double), cmp_double);
	qsort(ooc, (size_t)runs, sizeof(double), cmp_double);
	printf("{\"bench\":\"out_of_core\",\"summary\":true,\"runs\":%d,\"factor\":%d,"
	       "\"median_in_memory_GBps\":%.3f,\"median_out_of_core_GBps\":%.3f,"
	       "\"median_ratio\":%.3f,\"goal\":0.5}\n",
	       runs, factor, mem[runs / 2] / 1e9, ooc[runs / 2] / 1e9, ratios[runs / 2]);
	return 0;
}
