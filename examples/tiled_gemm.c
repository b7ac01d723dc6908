/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiled_gemm.c - C = A x B in single precision, one task per tile product.
 *
 * The N x N matrices are cut into T x T tiles, each tile its own ODX buffer. The task
 * "gemm i,j,k" computes C[i][j] += A[i][k] * B[k][j] (C tile RW, A and B tiles R); ODX orders the
 * k-chain of each C tile from the access modes and runs different C tiles side by side on every
 * device. Inside a task the tile's rows are split into work-groups, so a host device with several
 * threads also parallelises within one tile.
 *
 *	usage: tiled_gemm [N [T]]	(default 1024 128; T must divide N)
 *	       ODX_HOST_DEVICES=2 ODX_TRACE=gemm.json tiled_gemm
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <odx/odx.h>

#define PROGRAM "tiled_gemm"

#define ROWS_PER_GROUP 16	/* rows of a C tile per work-group */
#define SAMPLES 16		/* rows and columns checked when N is too large to check fully */

static void check(odx_context *ctx, int rc, const char *what)
{
	if (rc >= 0)
		return;
	fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", PROGRAM, what, odx_err_name(rc),
		odx_strerror(rc), ctx ? ": " : "", ctx ? odx_last_error(ctx) : "");
	exit(1);
}

/*
 * Opens a context from the environment (ODX_*) and the config file, as odx_open(&ctx, NULL)
 * would; the empty odx_config is only there to say why opening failed.
 */
static odx_context *open_context(void)
{
	odx_config *cfg;
	odx_context *ctx;
	int rc = odx_config_create(&cfg);

	check(NULL, rc, "odx_config_create");
	rc = odx_open(&ctx, cfg);
	if (rc < 0) {
		fprintf(stderr, "%s: odx_open failed: %s (%s): %s\n", PROGRAM, odx_err_name(rc),
			odx_strerror(rc), odx_config_error(cfg));
		exit(1);
	}
	odx_config_destroy(cfg);
	return ctx;
}

static void *xmalloc(size_t size)
{
	void *p = malloc(size);

	if (!p) {
		fprintf(stderr, "%s: out of memory (%zu bytes)\n", PROGRAM, size);
		exit(1);
	}
	return p;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A small deterministic generator (xorshift64*), so every run checks the same matrices. */
static uint64_t rng_next(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545f4914f6cdd1dull;
}

/* Uniform in [-1, 1). */
static float rng_float(uint64_t *state)
{
	return (float)((rng_next(state) >> 40) * (2.0 / (1u << 24)) - 1.0);
}

/*
 * gemm(C RW, A R, B R, T i32): C += A * B on T x T row-major tiles, for the rows of the
 * work-groups [group_first, group_first + group_count). i-k-j order: the inner loop streams a
 * row of B and a row of C, both contiguous, and vectorises.
 */
static int gemm_kernel(const odx_host_launch *l)
{
	float *restrict c = l->buffers[0];
	const float *restrict a = l->buffers[1];
	const float *restrict b = l->buffers[2];
	size_t t = (size_t)*(const int32_t *)l->scalars[3];
	size_t rows = (t + l->grid[0] - 1) / l->grid[0];
	size_t row_lo = l->group_first * rows;
	size_t row_hi = (l->group_first + l->group_count) * rows;

	if (row_hi > t)
		row_hi = t;
	for (size_t i = row_lo; i < row_hi; i++) {
		float *restrict crow = c + i * t;

		for (size_t k = 0; k < t; k++) {
			const float aik = a[i * t + k];
			const float *restrict brow = b + k * t;

			for (size_t j = 0; j < t; j++)
				crow[j] += aik * brow[j];
		}
	}
	return 0;
}

/* Copies tile (ti, tj) of the n x n matrix m into or out of a contiguous t x t tile. */
static void tile_copy(float *m, float *tile, size_t n, size_t t, size_t ti, size_t tj, int out)
{
	for (size_t r = 0; r < t; r++) {
		float *row = m + (ti * t + r) * n + tj * t;

		if (out)
			memcpy(tile + r * t, row, t * sizeof(float));
		else
			memcpy(row, tile + r * t, t * sizeof(float));
	}
}

/* A new buffer for one tile, holding tile (ti, tj) of `m`, or zeros if m is NULL. */
static odx_buffer *tile_buffer(odx_context *ctx, float *m, float *scratch, size_t n, size_t t,
			       size_t ti, size_t tj)
{
	odx_buffer *buf;

	check(ctx, odx_buffer_create(ctx, t * t * sizeof(float), 0, &buf), "odx_buffer_create");
	if (m) {
		tile_copy(m, scratch, n, t, ti, tj, 1);
		check(ctx, odx_buffer_write(buf, 0, scratch, t * t * sizeof(float), -1),
		      "odx_buffer_write");
	}
	return buf;
}

/*
 * Checks C[i][j] against a double-precision dot product. The float result may differ by
 * rounding: the bound is relative to sum |a_ik * b_kj| and grows with the length of the sum.
 */
static int check_element(const float *a, const float *b, const float *c, size_t n, size_t i,
			 size_t j, double *worst)
{
	double ref = 0.0, mag = 0.0;

	for (size_t k = 0; k < n; k++) {
		ref += (double)a[i * n + k] * b[k * n + j];
		mag += fabs((double)a[i * n + k] * b[k * n + j]);
	}
	double rel = fabs(c[i * n + j] - ref) / (mag > 0.0 ? mag : 1.0);
	if (rel > *worst)
		*worst = rel;
	if (rel <= 2.0 * n * FLT_EPSILON)
		return 0;
	fprintf(stderr, "C[%zu][%zu] = %.9g, expected %.9g (relative error %.3g)\n", i, j,
		(double)c[i * n + j], ref, rel);
	return 1;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1024;
	size_t t = argc > 2 ? strtoull(argv[2], NULL, 0) : 128;

	if (n == 0 || t == 0 || n % t || t > INT32_MAX) {
		fprintf(stderr, "usage: %s [N [T]]  (tile size T must divide N)\n", argv[0]);
		return 2;
	}
	size_t nt = n / t;			 /* tiles per dimension */
	size_t tile_bytes = t * t * sizeof(float);

	odx_context *ctx = open_context();

	const odx_param params[] = {
		{ODX_ARG_BUFFER, ODX_RW, "C"},
		{ODX_ARG_BUFFER, ODX_R, "A"},
		{ODX_ARG_BUFFER, ODX_R, "B"},
		{ODX_ARG_I32, 0, "T"},
	};
	const odx_kernel_variant variant = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = gemm_kernel,
	};
	odx_kernel *gemm;
	check(ctx, odx_kernel_create(ctx, "gemm", params, 4, &variant, 1, &gemm),
	      "odx_kernel_create");

	/* A and B in host memory for the reference; each tile is written into its own buffer. */
	float *a = xmalloc(n * n * sizeof(float));
	float *b = xmalloc(n * n * sizeof(float));
	float *c = xmalloc(n * n * sizeof(float));
	float *tile = xmalloc(tile_bytes);
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n * n; i++)
		a[i] = rng_float(&rng);
	for (size_t i = 0; i < n * n; i++)
		b[i] = rng_float(&rng);

	/* Tile (i, j) of matrix M is M_tiles[i * nt + j]. C tiles start as zeros (new buffers). */
	odx_buffer **at = xmalloc(nt * nt * sizeof(*at));
	odx_buffer **bt = xmalloc(nt * nt * sizeof(*bt));
	odx_buffer **ct = xmalloc(nt * nt * sizeof(*ct));
	for (size_t id = 0; id < nt * nt; id++) {
		at[id] = tile_buffer(ctx, a, tile, n, t, id / nt, id % nt);
		bt[id] = tile_buffer(ctx, b, tile, n, t, id / nt, id % nt);
		ct[id] = tile_buffer(ctx, NULL, NULL, n, t, 0, 0);
	}

	/*
	 * k outermost: each wave submits nt * nt independent tile products, so every device has
	 * work at once; the k-chain of one C tile is ordered by its RW access.
	 */
	uint32_t groups = (uint32_t)((t + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP);
	double t0 = now_s();
	for (size_t k = 0; k < nt; k++) {
		for (size_t i = 0; i < nt; i++) {
			for (size_t j = 0; j < nt; j++) {
				char tag[72]; /* fits any "gemm i,j,k"; ODX keeps 63 chars */
				odx_task_opts opts = {.tag = tag, .grid = {groups, 1, 1}};
				const odx_arg args[] = {
					ODX_BUF(ct[i * nt + j], ODX_RW),
					ODX_BUF(at[i * nt + k], ODX_R),
					ODX_BUF(bt[k * nt + j], ODX_R),
					ODX_I32((int32_t)t),
				};

				snprintf(tag, sizeof(tag), "gemm %zu,%zu,%zu", i, j, k);
				check(ctx, odx_submit(ctx, gemm, args, 4, &opts, NULL),
				      "odx_submit");
			}
		}
	}
	check(ctx, odx_wait_all(ctx, -1), "odx_wait_all");
	double elapsed = now_s() - t0;

	for (size_t i = 0; i < nt; i++) {
		for (size_t j = 0; j < nt; j++) {
			check(ctx, odx_buffer_read(ct[i * nt + j], 0, tile, tile_bytes, -1),
			      "odx_buffer_read");
			tile_copy(c, tile, n, t, i, j, 0);
		}
	}

	/* Every element for small N; otherwise SAMPLES random full rows and full columns. */
	size_t bad = 0, checked = 0;
	double worst = 0.0;
	if (n <= 512) {
		for (size_t i = 0; i < n; i++)
			for (size_t j = 0; j < n; j++, checked++)
				bad += check_element(a, b, c, n, i, j, &worst);
	} else {
		for (int s = 0; s < SAMPLES; s++) {
			size_t row = rng_next(&rng) % n, col = rng_next(&rng) % n;

			for (size_t j = 0; j < n; j++, checked++)
				bad += check_element(a, b, c, n, row, j, &worst);
			for (size_t i = 0; i < n; i++, checked++)
				bad += check_element(a, b, c, n, i, col, &worst);
		}
	}

	double flops = 2.0 * n * n * n;
	printf("tiled_gemm: N=%zu T=%zu tiles=%zux%zu tasks=%zu devices=%d\n", n, t, nt, nt,
	       nt * nt * nt, odx_device_count(ctx));
	printf("  verify  %s (%zu of %zu elements checked wrong, worst relative error %.2g)\n",
	       bad ? "FAILED" : "ok", bad, checked, worst);
	printf("  time    %.3f s (first submit to odx_wait_all)\n", elapsed);
	printf("  rate    %.2f GFLOP/s\n", flops / elapsed * 1e-9);

	for (size_t i = 0; i < nt * nt; i++) {
		check(ctx, odx_buffer_destroy(at[i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(bt[i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(ct[i]), "odx_buffer_destroy");
	}
	/* The trace, if asked for, is written by odx_close. */
	check(NULL, odx_close(ctx), "odx_close");
	const char *trace = getenv("ODX_TRACE");
	if (trace && *trace)
		printf("  trace   %s (open it in https://ui.perfetto.dev)\n", trace);

	free(ct);
	free(bt);
	free(at);
	free(tile);
	free(c);
	free(b);
	free(a);
	return bad ? 1 : 0;
}
