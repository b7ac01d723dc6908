/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiled_gemm.c - C = A x B in single precision, one task per tile product.
 *
 * The N x N matrices are cut into T x T tiles, each tile its own ODX buffer. It uses the
 * standard kernels, which have a variant for every backend, so the same binary runs on host
 * devices, Vulkan, OpenCL or CUDA by configuration alone (ODX_BACKENDS=vulkan tiled_gemm):
 *
 *   "gemm i,j,k"  P = A[i][k] * B[k][j]       odx.gemm_f32 (A, B read; P written)
 *   "acc i,j,k"   C[i][j] = 1 * P + C[i][j]   odx.axpy_f32 (P read; C tile read-write)
 *
 * ODX orders everything from the access modes alone: the k-chain of each C tile, and the reuse of
 * its two product tiles P (double-buffered, so product k+1 overlaps accumulation k). Different C
 * tiles run side by side on every device.
 *
 *	usage: tiled_gemm [N [T]]	(default 1024 128; T must divide N and be a multiple of 16)
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

#define SAMPLES 16		/* rows and columns checked when N is too large to check fully */

static void check(odx_context *ctx, int rc, const char *what)
{
	if (rc >= 0)
		return;
	/* with ctx NULL: why odx_open failed, if it did */
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", PROGRAM, what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
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

	if (n == 0 || t == 0 || n % t || t % 16 || t > 46340) {
		fprintf(stderr, "usage: %s [N [T]]  (tile size T: a multiple of 16 dividing N)\n",
			argv[0]);
		return 2;
	}
	size_t nt = n / t;			 /* tiles per dimension */
	size_t tile_bytes = t * t * sizeof(float);

	odx_context *ctx = open_context();

	/* The standard kernels: one variant per backend, all built into libodx. */
	odx_kernel *gemm, *axpy;
	check(ctx, odx_kernel_builtin(ctx, "odx.gemm_f32", &gemm), "odx_kernel_builtin");
	check(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &axpy), "odx_kernel_builtin");

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
	odx_buffer **pt = xmalloc(2 * nt * nt * sizeof(*pt)); /* two product tiles per C tile */
	for (size_t id = 0; id < nt * nt; id++) {
		at[id] = tile_buffer(ctx, a, tile, n, t, id / nt, id % nt);
		bt[id] = tile_buffer(ctx, b, tile, n, t, id / nt, id % nt);
		ct[id] = tile_buffer(ctx, NULL, NULL, n, t, 0, 0);
		pt[2 * id] = tile_buffer(ctx, NULL, NULL, n, t, 0, 0);
		pt[2 * id + 1] = tile_buffer(ctx, NULL, NULL, n, t, 0, 0);
		/* On several ranks (scripts/odx-run -n N): C tiles in contiguous blocks per rank; a
		 * tile's products live with it, so only A and B tiles ever cross ranks. */
		int owner = odx_owner_block((long)id, (long)(nt * nt), odx_size(ctx));
		check(ctx, odx_buffer_set_owner(ct[id], owner), "odx_buffer_set_owner");
		check(ctx, odx_buffer_set_owner(pt[2 * id], owner), "odx_buffer_set_owner");
		check(ctx, odx_buffer_set_owner(pt[2 * id + 1], owner), "odx_buffer_set_owner");
	}

	/*
	 * k outermost: each wave submits nt * nt independent tile products, so every device has
	 * work at once; the k-chain of one C tile is ordered by its RW access.
	 */
	const int32_t ti = (int32_t)t, tt = (int32_t)(t * t);
	const odx_task_opts gemm_opts = {.grid = {(uint32_t)t / 16, (uint32_t)t / 16, 1},
					 .block = {16, 16, 1}};
	const odx_task_opts acc_opts = {.grid = {(uint32_t)((t * t + 255) / 256), 1, 1},
					.block = {256, 1, 1}};
	double t0 = now_s();
	for (size_t k = 0; k < nt; k++) {
		for (size_t i = 0; i < nt; i++) {
			for (size_t j = 0; j < nt; j++) {
				odx_buffer *p = pt[2 * (i * nt + j) + k % 2];
				char tag[72]; /* fits any "gemm i,j,k"; ODX keeps 63 chars */
				odx_task_opts opts = gemm_opts;
				const odx_arg gemm_args[] = {
					ODX_BUF(at[i * nt + k], ODX_R), ODX_BUF(bt[k * nt + j], ODX_R),
					ODX_BUF(p, ODX_W), ODX_I32(ti), ODX_I32(ti), ODX_I32(ti),
				};
				const odx_arg acc_args[] = {
					ODX_BUF(p, ODX_R), ODX_BUF(ct[i * nt + j], ODX_RW),
					ODX_F32(1.0f), ODX_I32(tt),
				};

				snprintf(tag, sizeof(tag), "gemm %zu,%zu,%zu", i, j, k);
				opts.tag = tag;
				check(ctx, odx_submit(ctx, gemm, gemm_args, 6, &opts, NULL),
				      "odx_submit");
				opts = acc_opts;
				snprintf(tag, sizeof(tag), "acc %zu,%zu,%zu", i, j, k);
				opts.tag = tag;
				check(ctx, odx_submit(ctx, axpy, acc_args, 4, &opts, NULL),
				      "odx_submit");
			}
		}
	}
	check(ctx, odx_wait_all_ranks(ctx, -1), "odx_wait_all_ranks");
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
	odx_device_info dev;
	check(ctx, odx_device_get_info(ctx, 0, &dev), "odx_device_get_info");
	printf("tiled_gemm: N=%zu T=%zu tiles=%zux%zu tasks=%zu devices=%d (%s: %s)\n", n, t, nt,
	       nt, 2 * nt * nt * nt, odx_device_count(ctx), dev.kind_name,
	       dev.name);
	printf("  verify  %s (%zu of %zu elements checked wrong, worst relative error %.2g)\n",
	       bad ? "FAILED" : "ok", bad, checked, worst);
	{
		/* FNV-1a of C's bytes: the same on one rank and on many (scripts/demo compares). */
		uint64_t h = 0xcbf29ce484222325ull;
		const unsigned char *p = (const unsigned char *)c;

		for (size_t i = 0; i < n * n * sizeof(float); i++)
			h = (h ^ p[i]) * 0x100000001b3ull;
		printf("  result  checksum %016llx, rank %d of %d\n", (unsigned long long)h,
		       odx_rank(ctx), odx_size(ctx));
	}
	printf("  time    %.3f s (first submit to odx_wait_all)\n", elapsed);
	printf("  rate    %.2f GFLOP/s\n", flops / elapsed * 1e-9);

	for (size_t i = 0; i < nt * nt; i++) {
		check(ctx, odx_buffer_destroy(at[i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(bt[i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(ct[i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(pt[2 * i]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(pt[2 * i + 1]), "odx_buffer_destroy");
	}
	/* The trace, if asked for, is written by odx_close. */
	check(NULL, odx_close(ctx), "odx_close");
	const char *trace = getenv("ODX_TRACE");
	if (trace && *trace)
		printf("  trace   %s (open it in https://ui.perfetto.dev)\n", trace);

	free(pt);
	free(ct);
	free(bt);
	free(at);
	free(tile);
	free(c);
	free(b);
	free(a);
	return bad ? 1 : 0;
}
