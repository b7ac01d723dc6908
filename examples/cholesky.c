/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cholesky.c - tiled Cholesky factorisation A = L L^T of a symmetric positive definite matrix.
 *
 * The N x N matrix is one column-major array of doubles in the program's memory, registered with
 * ODX as one buffer and partitioned into NT x NT tiles of T x T (odx_buffer_partition_async: the
 * partition and the gather are tasks in the stream, so the program never waits for them): each
 * tile is a buffer of its own for tasks, used in place inside the matrix on the host (its leading
 * dimension N, ODX_LD) and copied packed to a device that needs it; only the lower triangle of
 * tiles is used. Nothing is packed or unpacked in this program: once the gather
 * (odx_buffer_unpartition_async) ran, the matrix holds the factor. The factorisation is
 * right-looking, in the order (and with the priorities) of StarPU's cholesky_implicit example:
 *
 *   for k:  POTRF  A[k][k] = chol(A[k][k])                      (dpotrf)
 *           TRSM   A[m][k] = A[m][k] A[k][k]^-T     for m > k   (dtrsm)
 *           SYRK   A[n][n] -= A[n][k] A[n][k]^T     for n > k   (dsyrk)
 *           GEMM   A[m][n] -= A[m][k] A[n][k]^T     for m > n > k (dgemm)
 *
 * Each kernel is a one-call host variant (ODX_FORMAT_HOST_CALL) calling OpenBLAS once per task
 * with the tiles' leading dimensions from ODX_LD, and the host device's threads for OpenBLAS
 * (l->threads) unless OPENBLAS_NUM_THREADS fixes their count; ODX orders the tasks from the access
 * modes alone and runs independent ones side by side on every host device. On several ranks
 * (scripts/odx-run -n R) every rank registers its own copy of the matrix, the tiles are owned 2D
 * block-cyclic and ODX moves them between ranks (packed); the unpartition brings every rank the
 * whole factor, the same bit for bit (the checksum line), since every tile sees the same
 * operations in the same order wherever it runs.
 *
 * --f32 factorises in single precision with the same four OpenBLAS calls (spotrf, strsm, ssyrk,
 * sgemm): what StarPU's cholesky_implicit computes, so bench/cholesky.sh compares the same work.
 * --std-gemm factorises in single precision and runs GEMM through the standard kernels
 * odx.gemm_f32 and odx.axpy_f32 (there is no f64 standard gemm), which have a variant for every
 * backend: with ODX_BACKENDS=host,vulkan the GEMMs may run on the GPU while POTRF, TRSM and SYRK
 * stay on the host. odx.gemm_f32 is row-major c = a b, so TRSM also writes each panel tile
 * transposed into a buffer of its own (a column-major tile read row-major is its transpose); the
 * standard kernels take the tiles in place on the host (docs/kernels.md, "Tiles"). --gemm-on KIND
 * runs them on the first device of that kind ("vulkan", "opencl", "host"...) only: where they run
 * is then the same on every run and rank, so the factor is too, bit for bit.
 *
 *	usage: cholesky [--f32 | --std-gemm [--gemm-on KIND]] [--no-check] [--no-prio] [N [T]]
 *	       (default 1920 320)
 *	       ODX_HOST_DEVICES=2 OPENBLAS_NUM_THREADS=1 cholesky 3840 320
 *
 * The residual ||A - L L^T||_F / ||A||_F is checked against a bound (exit status 1 above it).
 */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <odx/odx.h>

#define PROGRAM "cholesky"

/* LAPACK's Cholesky, from OpenBLAS (Debian ships no LAPACKE with it). */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
extern void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);

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

/*
 * Element (r, c) of the test matrix: a symmetric hash of the pair in [-1, 1), plus N on the
 * diagonal, which makes the matrix diagonally dominant and so positive definite. A formula rather
 * than a stored matrix: every rank and the residual check regenerate any tile alone.
 */
static double matrix_element(size_t r, size_t c, size_t n)
{
	uint64_t lo = r < c ? r : c, hi = r < c ? c : r;
	uint64_t h = (hi << 32 | lo) * 0x9e3779b97f4a7c15ull;

	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 32;
	double v = (h >> 11) * (2.0 / 9007199254740992.0) - 1.0;
	return r == c ? v + (double)n : v;
}

/* ---- the kernels: one call of OpenBLAS per task (ODX_FORMAT_HOST_CALL) ------------------- */

/* Scalar parameter i of a launch, an i32 (the tile size, a leading dimension). */
static int launch_i32(const odx_host_launch *l, int i)
{
	return *(const int32_t *)l->scalars[i];
}

/* Set in main: OpenBLAS takes each call's thread count from the device (OPENBLAS_NUM_THREADS
 * unset), which is 1 per device with host.threads = 1, all of a device's cores otherwise. */
static int blas_follows_device;

static void blas_threads(const odx_host_launch *l)
{
	if (blas_follows_device)
		openblas_set_num_threads(l->threads);
}

/* potrf(A RW, T, lda): A = chol(A), lower. */
static int potrf_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 1), lda = launch_i32(l, 2), info = 0;

	blas_threads(l);
	dpotrf_("L", &t, l->buffers[0], &lda, &info);
	if (info)
		snprintf(l->error, l->error_size, "dpotrf: info %d (not positive definite)", info);
	return info;
}

/* trsm(Lkk R, A RW, T, ldl, lda): A = A Lkk^-T. */
static int trsm_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	blas_threads(l);
	cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, t, t, 1.0,
		    l->buffers[0], launch_i32(l, 3), l->buffers[1], launch_i32(l, 4));
	return 0;
}

/* syrk(Lnk R, A RW, T, ldl, lda): A -= Lnk Lnk^T, lower. */
static int syrk_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	blas_threads(l);
	cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, t, t, -1.0, l->buffers[0],
		    launch_i32(l, 3), 1.0, l->buffers[1], launch_i32(l, 4));
	return 0;
}

/* gemm(Lmk R, Lnk R, A RW, T, ldm, ldn, lda): A -= Lmk Lnk^T. */
static int gemm_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 3);

	blas_threads(l);
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, t, t, t, -1.0, l->buffers[0],
		    launch_i32(l, 4), l->buffers[1], launch_i32(l, 5), 1.0, l->buffers[2],
		    launch_i32(l, 6));
	return 0;
}

/* The single-precision twins of --std-gemm. */
static int potrf_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 1), lda = launch_i32(l, 2), info = 0;

	blas_threads(l);
	spotrf_("L", &t, l->buffers[0], &lda, &info);
	if (info)
		snprintf(l->error, l->error_size, "spotrf: info %d (not positive definite)", info);
	return info;
}

/* trsm(Lkk R, A RW, AT W, T, ldl, lda): A = A Lkk^-T, and AT = A transposed (T x T, packed
 * row-major: a buffer of its own), for odx.gemm_f32. */
static int trsm_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 3), lda = launch_i32(l, 5);
	const float *a = l->buffers[1];
	float *at = l->buffers[2];

	blas_threads(l);
	cblas_strsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, t, t, 1.0f,
		    l->buffers[0], launch_i32(l, 4), l->buffers[1], lda);
	for (int c = 0; c < t; c++)
		for (int r = 0; r < t; r++)
			at[(size_t)r * t + c] = a[(size_t)c * lda + r];
	return 0;
}

/* --f32: trsm(Lkk R, A RW, T, ldl, lda) and gemm(Lmk R, Lnk R, A RW, T, ldm, ldn, lda) as the
 * f64 ones, in single precision (what StarPU's cholesky_implicit computes). */
static int trsm_f32_blas(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	blas_threads(l);
	cblas_strsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, t, t, 1.0f,
		    l->buffers[0], launch_i32(l, 3), l->buffers[1], launch_i32(l, 4));
	return 0;
}

static int gemm_f32_blas(const odx_host_launch *l)
{
	int t = launch_i32(l, 3);

	blas_threads(l);
	cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, t, t, t, -1.0f, l->buffers[0],
		    launch_i32(l, 4), l->buffers[1], launch_i32(l, 5), 1.0f, l->buffers[2],
		    launch_i32(l, 6));
	return 0;
}

static int syrk_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	blas_threads(l);
	cblas_ssyrk(CblasColMajor, CblasLower, CblasNoTrans, t, t, -1.0f, l->buffers[0],
		    launch_i32(l, 3), 1.0f, l->buffers[1], launch_i32(l, 4));
	return 0;
}

static odx_kernel *host_kernel(odx_context *ctx, const char *name, odx_host_fn fn,
			       const odx_param *params, int nparams)
{
	const odx_kernel_variant variant = {
		.backend_name = "host", .format = ODX_FORMAT_HOST_CALL, .host_fn = fn,
	};
	odx_kernel *kernel;

	check(ctx, odx_kernel_create(ctx, name, params, nparams, &variant, 1, &kernel),
	      "odx_kernel_create");
	return kernel;
}

/* ---- the tiles ------------------------------------------------------------------------------ */

/*
 * The matrix and its tiles. One registered buffer for the whole matrix, partitioned into tiles:
 * tile (i, j) is the partition's part i + j * NT, a buffer for tasks whose bytes stay inside the
 * matrix. --std-gemm adds two plain buffers per panel tile (its transpose, and a GEMM's product).
 */
struct tiles {
	odx_context *ctx;
	size_t n, t, nt;	/* matrix size, tile size, tiles per dimension */
	size_t elem;		/* sizeof(double), or sizeof(float) with --f32 and --std-gemm */
	void *matrix;		/* n x n, column-major, ld n: the program's own memory */
	odx_buffer *whole;	/* the matrix registered, partitioned while factorising */
	odx_buffer **a;		/* its tiles: a[i + j * nt] */
	odx_buffer **at;	/* --std-gemm: panel tiles transposed (row-major), at[i * nt + j] */
	odx_buffer **p;		/* --std-gemm: the product of a GEMM before it is subtracted */
};

static odx_buffer *tile_buf(const struct tiles *m, size_t i, size_t j)
{
	return m->a[i + j * m->nt];
}

/*
 * Owner of tile (i, j) on `size` ranks: 2D block-cyclic over a P x Q grid of ranks, P the
 * largest divisor of size not above its square root (2 ranks: 1 x 2, tile columns alternate).
 */
static int tile_owner(size_t i, size_t j, int size)
{
	int p = 1;

	for (int d = 1; d * d <= size; d++)
		if (size % d == 0)
			p = d;
	int q = size / p;
	return (int)(i % (size_t)p) * q + (int)(j % (size_t)q);
}

/* Fills the whole test matrix (symmetric: POTRF reads the lower triangle only). */
static void matrix_fill(const struct tiles *m)
{
	for (size_t c = 0; c < m->n; c++) {
		for (size_t r = 0; r < m->n; r++) {
			double v = matrix_element(r, c, m->n);

			if (m->elem == sizeof(double))
				((double *)m->matrix)[c * m->n + r] = v;
			else
				((float *)m->matrix)[c * m->n + r] = (float)v;
		}
	}
}

static odx_buffer *new_tile_buffer(odx_context *ctx, size_t bytes, int owner)
{
	odx_buffer *buf;

	check(ctx, odx_buffer_create(ctx, bytes, 0, &buf), "odx_buffer_create");
	check(ctx, odx_buffer_set_owner(buf, owner), "odx_buffer_set_owner");
	return buf;
}

static void tiles_create(struct tiles *m, int std_gemm)
{
	size_t nt = m->nt, bytes = m->n * m->n * m->elem;
	int size = odx_size(m->ctx);
	const odx_partition part = {.kind = ODX_PART_TILES, .elem_size = m->elem, .rows = m->n,
				    .cols = m->n, .ld = m->n, .tile_rows = m->t,
				    .tile_cols = m->t};

	/* Every rank fills its own copy with the same bytes, so the partition moves nothing. */
	m->matrix = xmalloc(bytes);
	matrix_fill(m);
	check(m->ctx, odx_buffer_register(m->ctx, m->matrix, bytes, 0, &m->whole),
	      "odx_buffer_register");
	m->a = calloc(nt * nt, sizeof(*m->a));
	m->at = calloc(nt * nt, sizeof(*m->at));
	m->p = calloc(nt * nt, sizeof(*m->p));
	if (!m->a || !m->at || !m->p)
		check(m->ctx, ODX_ENOMEM, "calloc");
	/* No wait: the tiles' first tasks are ordered after the switch. */
	check(m->ctx, odx_buffer_partition_async(m->whole, &part, (int)(nt * nt), m->a, NULL),
	      "odx_buffer_partition_async");
	for (size_t i = 0; i < nt; i++) {
		for (size_t j = 0; j <= i; j++) {
			int owner = tile_owner(i, j, size);

			check(m->ctx, odx_buffer_set_owner(tile_buf(m, i, j), owner),
			      "odx_buffer_set_owner");
			if (std_gemm && j < i) {
				size_t tb = m->t * m->t * m->elem;

				m->at[i * nt + j] = new_tile_buffer(m->ctx, tb, owner);
				m->p[i * nt + j] = new_tile_buffer(m->ctx, tb, owner);
			}
		}
	}
}

/* The tiles and buffers go; the matrix itself is freed after odx_close. */
static void tiles_destroy(struct tiles *m)
{
	for (size_t id = 0; id < m->nt * m->nt; id++) {
		odx_buffer *bufs[2] = {m->at[id], m->p[id]};

		for (int b = 0; b < 2; b++)
			if (bufs[b])
				check(m->ctx, odx_buffer_destroy(bufs[b]), "odx_buffer_destroy");
	}
	check(m->ctx, odx_buffer_destroy(m->whole), "odx_buffer_destroy");
	free(m->p);
	free(m->at);
	free(m->a);
}

/* ---- the factorisation ---------------------------------------------------------------------- */

struct kernels {
	odx_kernel *potrf, *trsm, *syrk, *gemm;	/* gemm: the f64 host one */
	odx_kernel *std_gemm, *std_axpy;	/* --std-gemm: odx.gemm_f32, odx.axpy_f32 */
	int std_device;				/* --gemm-on: their device, else -1 (any) */
};

/* Submits one task: a one-call host variant, run once with the device's threads. */
static void submit(odx_context *ctx, odx_kernel *k, const odx_arg *args, int nargs, int prio,
		   const char *name, size_t row, size_t col, size_t kk)
{
	char tag[64]; /* "gemm m,n,k": the tile written, then the step */
	odx_task_opts opts = {.priority = prio, .tag = tag};

	snprintf(tag, sizeof(tag), "%s %zu,%zu,%zu", name, row, col, kk);
	check(ctx, odx_submit(ctx, k, args, nargs, &opts, NULL), "odx_submit");
}

/* -A[m][n] += A[m][k] A[n][k]^T through the standard kernels: P = A[m][k] A[n][k]^T, A -= P. */
static void submit_std_gemm(const struct tiles *m, const struct kernels *k, size_t row,
			    size_t col, size_t kk, int prio)
{
	const int32_t ti = (int32_t)m->t;
	odx_buffer *p = m->p[row * m->nt + col];
	/* Row-major views: AT[n][k] is A[n][k], A[m][k] is A[m][k]^T; c = P^T row-major = P. */
	/* The tiles go in place to the host variants, packed to devices. */
	const odx_arg gemm_args[] = {
		ODX_BUF(m->at[col * m->nt + kk], ODX_R), ODX_BUF(tile_buf(m, row, kk), ODX_R),
		ODX_BUF(p, ODX_W), ODX_I32(ti), ODX_I32(ti), ODX_I32(ti),
	};
	const odx_arg axpy_args[] = {
		ODX_BUF(p, ODX_R), ODX_BUF(tile_buf(m, row, col), ODX_RW), ODX_F32(-1.0f),
		ODX_I32(ti * ti),
	};
	char tag[64];
	odx_task_opts opts = {.priority = prio, .tag = tag,
			      .grid = {(uint32_t)m->t / 16, (uint32_t)m->t / 16, 1},
			      .block = {16, 16, 1}};

	if (k->std_device >= 0) {
		opts.flags = ODX_SUBMIT_ON_DEVICE;
		opts.on_device = k->std_device;
	}

	snprintf(tag, sizeof(tag), "gemm %zu,%zu,%zu", row, col, kk);
	check(m->ctx, odx_submit(m->ctx, k->std_gemm, gemm_args, 6, &opts, NULL), "odx_submit");
	opts.grid[0] = (uint32_t)((m->t * m->t + 255) / 256);
	opts.grid[1] = 1;
	opts.block[0] = 256;
	opts.block[1] = 1;
	snprintf(tag, sizeof(tag), "axpy %zu,%zu,%zu", row, col, kk);
	check(m->ctx, odx_submit(m->ctx, k->std_axpy, axpy_args, 4, &opts, NULL), "odx_submit");
}

/*
 * StarPU's submission order, and the priorities of cholesky_implicit's unbound mode: a task of
 * step k on tile (m, n) gets 2 NT - 2 k - m - n (POTRF 2 NT - 2 k, TRSM 2 NT - 2 k - m): the
 * panel of step k first, the tiles next to it before those far away, so the next POTRF is ready
 * as soon as possible.
 */
static void factorise(const struct tiles *m, const struct kernels *k, int std_gemm, int use_prio)
{
	const size_t nt = m->nt;
	const int32_t ti = (int32_t)m->t;

	for (size_t kk = 0; kk < nt; kk++) {
		int base = (int)(2 * nt - 2 * kk);
		const odx_arg potrf_args[] = {ODX_BUF(tile_buf(m, kk, kk), ODX_RW), ODX_I32(ti),
					      ODX_LD(0)};

		submit(m->ctx, k->potrf, potrf_args, 3, use_prio ? base : 0, "potrf",
		       kk, kk, kk);
		for (size_t row = kk + 1; row < nt; row++) {
			const odx_arg args_f64[] = {
				ODX_BUF(tile_buf(m, kk, kk), ODX_R),
				ODX_BUF(tile_buf(m, row, kk), ODX_RW), ODX_I32(ti), ODX_LD(0),
				ODX_LD(1),
			};
			const odx_arg args_f32[] = {
				ODX_BUF(tile_buf(m, kk, kk), ODX_R),
				ODX_BUF(tile_buf(m, row, kk), ODX_RW),
				ODX_BUF(m->at[row * nt + kk], ODX_W), ODX_I32(ti), ODX_LD(0),
				ODX_LD(1),
			};

			submit(m->ctx, k->trsm, std_gemm ? args_f32 : args_f64, std_gemm ? 6 : 5,
			       use_prio ? base - (int)row : 0, "trsm", row, kk, kk);
		}
		for (size_t col = kk + 1; col < nt; col++) {
			for (size_t row = col; row < nt; row++) {
				int prio = use_prio ? base - (int)(row + col) : 0;

				if (row == col) {
					const odx_arg args[] = {
						ODX_BUF(tile_buf(m, row, kk), ODX_R),
						ODX_BUF(tile_buf(m, row, row), ODX_RW), ODX_I32(ti),
						ODX_LD(0), ODX_LD(1),
					};
					submit(m->ctx, k->syrk, args, 5, prio, "syrk",
					       row, row, kk);
				} else if (std_gemm) {
					submit_std_gemm(m, k, row, col, kk, prio);
				} else {
					const odx_arg args[] = {
						ODX_BUF(tile_buf(m, row, kk), ODX_R),
						ODX_BUF(tile_buf(m, col, kk), ODX_R),
						ODX_BUF(tile_buf(m, row, col), ODX_RW), ODX_I32(ti),
						ODX_LD(0), ODX_LD(1), ODX_LD(2),
					};
					submit(m->ctx, k->gemm, args, 7, prio, "gemm",
					       row, col, kk);
				}
			}
		}
	}
}

/* ---- checking ------------------------------------------------------------------------------- */

/*
 * Gathers the tiles (odx_buffer_unpartition_async, collective: every rank's matrix gets every
 * tile; the program waits for that gather's event before it reads the matrix),
 * copies the factor into a column-major n x n matrix of doubles, zero above the diagonal, and
 * hashes the tiles' bytes as computed (FNV-1a, each tile column by column), so that runs on
 * different rank counts can be compared bit for bit.
 */
static double *read_factor(const struct tiles *m, uint64_t *checksum)
{
	size_t n = m->n, t = m->t;
	double *l = calloc(n * n, sizeof(double));
	const unsigned char *bytes = m->matrix;
	uint64_t h = 0xcbf29ce484222325ull;
	odx_event *gathered;

	if (!l)
		check(m->ctx, ODX_ENOMEM, "calloc");
	check(m->ctx, odx_buffer_unpartition_async(m->whole, &gathered),
	      "odx_buffer_unpartition_async");
	check(m->ctx, odx_event_wait(gathered, -1), "the gather");
	odx_event_release(gathered);
	for (size_t i = 0; i < m->nt; i++) {
		for (size_t j = 0; j <= i; j++) {
			for (size_t c = 0; c < t; c++) {
				size_t gc = j * t + c, first = (gc * n + i * t) * m->elem;

				for (size_t b = 0; b < t * m->elem; b++)
					h = (h ^ bytes[first + b]) * 0x100000001b3ull;
				for (size_t r = 0; r < t; r++) {
					size_t gr = i * t + r;
					double v = m->elem == sizeof(double)
						? ((const double *)m->matrix)[gc * n + gr]
						: ((const float *)m->matrix)[gc * n + gr];

					/* POTRF leaves the upper triangle of diagonal tiles alone */
					if (gr >= gc)
						l[gc * n + gr] = v;
				}
			}
		}
	}
	*checksum = h;
	return l;
}

/* ||A - L L^T||_F / ||A||_F over the whole symmetric matrix (the lower triangle counted twice). */
static double residual(const double *l, size_t n)
{
	double *r = xmalloc(n * n * sizeof(double));
	double num = 0.0, den = 0.0;

	for (size_t c = 0; c < n; c++)
		for (size_t row = c; row < n; row++)
			r[c * n + row] = matrix_element(row, c, n);
	/* R = A - L L^T, lower triangle */
	cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, (int)n, (int)n, -1.0, l, (int)n, 1.0,
		    r, (int)n);
	for (size_t c = 0; c < n; c++) {
		for (size_t row = c; row < n; row++) {
			double a = matrix_element(row, c, n), w = row == c ? 1.0 : 2.0;

			num += w * r[c * n + row] * r[c * n + row];
			den += w * a * a;
		}
	}
	free(r);
	return sqrt(num / den);
}

/* ---- main ----------------------------------------------------------------------------------- */

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [--f32 | --std-gemm [--gemm-on KIND]] [--no-check] [--no-prio] "
		"[N [T]]\n  T divides N (default 1920 320); with --std-gemm T is a multiple of 16\n",
		argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	size_t n = 1920, t = 320;
	int std_gemm = 0, f32 = 0, do_check = 1, use_prio = 1, npos = 0;
	const char *gemm_on = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--std-gemm"))
			std_gemm = 1;
		else if (!strcmp(argv[i], "--f32"))
			f32 = 1;
		else if (!strcmp(argv[i], "--no-check"))
			do_check = 0;
		else if (!strcmp(argv[i], "--no-prio"))
			use_prio = 0;
		else if (!strcmp(argv[i], "--gemm-on") && i + 1 < argc)
			gemm_on = argv[++i];
		else if (argv[i][0] != '-' && npos < 2)
			*(npos++ ? &t : &n) = strtoull(argv[i], NULL, 0);
		else
			usage(argv[0]);
	}
	if (n == 0 || t == 0 || n % t || t > 46340 || n > 1u << 20 || (std_gemm && t % 16) ||
	    (std_gemm && f32) || (gemm_on && !std_gemm))
		usage(argv[0]);
	f32 |= std_gemm;

	/*
	 * Parallelism comes from running tiles side by side on every host device, and within a
	 * task from OpenBLAS on the device's threads (blas_threads) unless OPENBLAS_NUM_THREADS
	 * fixes their count.
	 */
	blas_follows_device = !getenv("OPENBLAS_NUM_THREADS");
	if (blas_follows_device)
		openblas_set_num_threads(1);

	odx_context *ctx;
	check(NULL, odx_open(&ctx, NULL), "odx_open");

	/* Each tile comes with its leading dimension (ODX_LD: n in place, t where packed). */
	const odx_param potrf_p[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_I32, 0, "t"},
				     {ODX_ARG_I32, 0, "lda"}};
	const odx_param trsm_p[] = {{ODX_ARG_BUFFER, ODX_R, "lkk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				    {ODX_ARG_I32, 0, "t"},	    {ODX_ARG_I32, 0, "ldl"},
				    {ODX_ARG_I32, 0, "lda"}};
	const odx_param trsm_t_p[] = {{ODX_ARG_BUFFER, ODX_R, "lkk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				      {ODX_ARG_BUFFER, ODX_W, "at"}, {ODX_ARG_I32, 0, "t"},
				      {ODX_ARG_I32, 0, "ldl"},	    {ODX_ARG_I32, 0, "lda"}};
	const odx_param syrk_p[] = {{ODX_ARG_BUFFER, ODX_R, "lnk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				    {ODX_ARG_I32, 0, "t"},	    {ODX_ARG_I32, 0, "ldl"},
				    {ODX_ARG_I32, 0, "lda"}};
	const odx_param gemm_p[] = {{ODX_ARG_BUFFER, ODX_R, "lmk"}, {ODX_ARG_BUFFER, ODX_R, "lnk"},
				    {ODX_ARG_BUFFER, ODX_RW, "a"},  {ODX_ARG_I32, 0, "t"},
				    {ODX_ARG_I32, 0, "ldm"},	    {ODX_ARG_I32, 0, "ldn"},
				    {ODX_ARG_I32, 0, "lda"}};
	struct kernels k = {.std_device = -1};
	if (std_gemm) {
		k.potrf = host_kernel(ctx, "cholesky.spotrf", potrf_f32, potrf_p, 3);
		k.trsm = host_kernel(ctx, "cholesky.strsm_t", trsm_f32, trsm_t_p, 6);
		k.syrk = host_kernel(ctx, "cholesky.ssyrk", syrk_f32, syrk_p, 5);
		check(ctx, odx_kernel_builtin(ctx, "odx.gemm_f32", &k.std_gemm),
		      "odx_kernel_builtin");
		check(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &k.std_axpy),
		      "odx_kernel_builtin");
		for (int d = 0; gemm_on && d < odx_device_count(ctx) && k.std_device < 0; d++) {
			odx_device_info info;

			check(ctx, odx_device_get_info(ctx, d, &info), "odx_device_get_info");
			if (!strcmp(info.kind_name, gemm_on))
				k.std_device = d;
		}
		if (gemm_on && k.std_device < 0) {
			fprintf(stderr, "cholesky: no device of kind '%s' (ODX_BACKENDS)\n", gemm_on);
			return 2;
		}
	} else if (f32) {
		k.potrf = host_kernel(ctx, "cholesky.spotrf", potrf_f32, potrf_p, 3);
		k.trsm = host_kernel(ctx, "cholesky.strsm", trsm_f32_blas, trsm_p, 5);
		k.syrk = host_kernel(ctx, "cholesky.ssyrk", syrk_f32, syrk_p, 5);
		k.gemm = host_kernel(ctx, "cholesky.sgemm", gemm_f32_blas, gemm_p, 7);
	} else {
		k.potrf = host_kernel(ctx, "cholesky.dpotrf", potrf_f64, potrf_p, 3);
		k.trsm = host_kernel(ctx, "cholesky.dtrsm", trsm_f64, trsm_p, 5);
		k.syrk = host_kernel(ctx, "cholesky.dsyrk", syrk_f64, syrk_p, 5);
		k.gemm = host_kernel(ctx, "cholesky.dgemm", gemm_f64, gemm_p, 7);
	}

	struct tiles m = {.ctx = ctx, .n = n, .t = t, .nt = n / t,
			  .elem = f32 ? sizeof(float) : sizeof(double)};
	tiles_create(&m, std_gemm);
	check(ctx, odx_wait_all_ranks(ctx, -1), "odx_wait_all_ranks");

	double t0 = now_s();
	factorise(&m, &k, std_gemm, use_prio);
	check(ctx, odx_wait_all_ranks(ctx, -1), "odx_wait_all_ranks");
	double elapsed = now_s() - t0;

	uint64_t checksum;
	double *l = read_factor(&m, &checksum);
	double res = do_check ? residual(l, n) : 0.0;
	/* a backward-stable Cholesky leaves a residual of a few eps; n eps is generous */
	double bound = (double)n * (f32 ? FLT_EPSILON : DBL_EPSILON);
	int failed = do_check && !(res <= bound);

	size_t nt = m.nt;
	odx_device_info dev;
	check(ctx, odx_device_get_info(ctx, 0, &dev), "odx_device_get_info");
	printf("cholesky: N=%zu T=%zu tiles=%zux%zu tasks=%zu %s devices=%d (%s: %s)\n", n, t, nt,
	       nt, nt * (nt + 1) * (nt + 2) / 6 + (std_gemm ? nt * (nt - 1) * (nt - 2) / 6 : 0),
	       std_gemm ? "f32 std-gemm" : f32 ? "f32" : "f64", odx_device_count(ctx),
	       dev.kind_name, dev.name);
	if (do_check)
		printf("  verify  %s (||A - L L^T|| / ||A|| = %.3g, bound %.3g)\n",
		       failed ? "FAILED" : "ok", res, bound);
	else
		printf("  verify  skipped (--no-check)\n");
	printf("  result  checksum %016llx, rank %d of %d\n", (unsigned long long)checksum,
	       odx_rank(ctx), odx_size(ctx));
	printf("  time    %.3f s (first submit to odx_wait_all_ranks)\n", elapsed);
	printf("  rate    %.2f GFLOP/s (N^3 / 3 flops)\n", (double)n * n * n / 3.0 / elapsed * 1e-9);

	free(l);
	tiles_destroy(&m);
	/* The trace, if asked for, is written by odx_close. */
	check(NULL, odx_close(ctx), "odx_close");
	free(m.matrix); /* registered: the program's until the buffer is gone */
	return failed ? 1 : 0;
}
