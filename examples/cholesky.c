/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cholesky.c - tiled Cholesky factorisation A = L L^T of a symmetric positive definite matrix.
 *
 * The N x N matrix is cut into NT x NT tiles of T x T doubles, each stored column-major in its
 * own ODX buffer; only the lower triangle of tiles exists. The factorisation is right-looking, in
 * the order (and with the priorities) of StarPU's cholesky_implicit example:
 *
 *   for k:  POTRF  A[k][k] = chol(A[k][k])                      (dpotrf)
 *           TRSM   A[m][k] = A[m][k] A[k][k]^-T     for m > k   (dtrsm)
 *           SYRK   A[n][n] -= A[n][k] A[n][k]^T     for n > k   (dsyrk)
 *           GEMM   A[m][n] -= A[m][k] A[n][k]^T     for m > n > k (dgemm)
 *
 * Each kernel is a host variant calling OpenBLAS; ODX orders the tasks from the access modes alone
 * and runs independent ones side by side on every host device. On several ranks (scripts/odx-run
 * -n R) the tiles are owned 2D block-cyclic and ODX moves them between ranks; the factor is the
 * same bit for bit (the checksum line), since every tile sees the same operations in the same
 * order wherever it runs.
 *
 * --std-gemm factorises in single precision and runs GEMM through the standard kernels
 * odx.gemm_f32 and odx.axpy_f32 (there is no f64 standard gemm), which have a variant for every
 * backend: with ODX_BACKENDS=host,vulkan the GEMMs may run on the GPU while POTRF, TRSM and SYRK
 * stay on the host. odx.gemm_f32 is row-major c = a b, so TRSM also writes each panel tile
 * transposed (a column-major tile read row-major is its transpose).
 *
 *	usage: cholesky [--std-gemm] [--no-check] [--no-prio] [N [T]]   (default 1920 320)
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

/* ---- the kernels: one host variant each, a single call per task (grid 1) ------------------ */

/* Scalar parameter i of a launch, an i32 (the tile size). */
static int launch_i32(const odx_host_launch *l, int i)
{
	return *(const int32_t *)l->scalars[i];
}

/* potrf(A RW, T): A = chol(A), lower. */
static int potrf_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 1), info = 0;

	dpotrf_("L", &t, l->buffers[0], &t, &info);
	if (info)
		snprintf(l->error, l->error_size, "dpotrf: info %d (not positive definite)", info);
	return info;
}

/* trsm(Lkk R, A RW, T): A = A Lkk^-T. */
static int trsm_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, t, t, 1.0,
		    l->buffers[0], t, l->buffers[1], t);
	return 0;
}

/* syrk(Lnk R, A RW, T): A -= Lnk Lnk^T, lower. */
static int syrk_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, t, t, -1.0, l->buffers[0], t, 1.0,
		    l->buffers[1], t);
	return 0;
}

/* gemm(Lmk R, Lnk R, A RW, T): A -= Lmk Lnk^T. */
static int gemm_f64(const odx_host_launch *l)
{
	int t = launch_i32(l, 3);

	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, t, t, t, -1.0, l->buffers[0], t,
		    l->buffers[1], t, 1.0, l->buffers[2], t);
	return 0;
}

/* The single-precision twins of --std-gemm. */
static int potrf_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 1), info = 0;

	spotrf_("L", &t, l->buffers[0], &t, &info);
	if (info)
		snprintf(l->error, l->error_size, "spotrf: info %d (not positive definite)", info);
	return info;
}

/* trsm(Lkk R, A RW, AT W, T): A = A Lkk^-T, and AT = A transposed, for odx.gemm_f32. */
static int trsm_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 3);
	const float *a = l->buffers[1];
	float *at = l->buffers[2];

	cblas_strsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, t, t, 1.0f,
		    l->buffers[0], t, l->buffers[1], t);
	for (int c = 0; c < t; c++)
		for (int r = 0; r < t; r++)
			at[(size_t)r * t + c] = a[(size_t)c * t + r];
	return 0;
}

static int syrk_f32(const odx_host_launch *l)
{
	int t = launch_i32(l, 2);

	cblas_ssyrk(CblasColMajor, CblasLower, CblasNoTrans, t, t, -1.0f, l->buffers[0], t, 1.0f,
		    l->buffers[1], t);
	return 0;
}

static odx_kernel *host_kernel(odx_context *ctx, const char *name, odx_host_fn fn,
			       const odx_param *params, int nparams)
{
	const odx_kernel_variant variant = {
		.backend_name = "host", .format = ODX_FORMAT_HOST_FN, .host_fn = fn,
	};
	odx_kernel *kernel;

	check(ctx, odx_kernel_create(ctx, name, params, nparams, &variant, 1, &kernel),
	      "odx_kernel_create");
	return kernel;
}

/* ---- the tiles ------------------------------------------------------------------------------ */

/*
 * Today one ODX buffer per tile, as tiled_gemm.c does. Everything below reaches a tile only
 * through tile_buf() and tiles_create(): when buffer partitions exist, tiles_create() makes one
 * buffer for the whole matrix and partitions it into tiles, tile_buf() returns the partition, and
 * the rest of the program stays as it is.
 */
struct tiles {
	odx_context *ctx;
	size_t n, t, nt;	/* matrix size, tile size, tiles per dimension */
	size_t elem;		/* sizeof(double), or sizeof(float) with --std-gemm */
	odx_buffer **a;		/* lower tiles: a[i * nt + j], j <= i */
	odx_buffer **at;	/* --std-gemm: panel tiles transposed (row-major), same index */
	odx_buffer **p;		/* --std-gemm: the product of a GEMM before it is subtracted */
};

static odx_buffer *tile_buf(const struct tiles *m, size_t i, size_t j)
{
	return m->a[i * m->nt + j];
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

/* Fills a column-major tile (i, j) of the test matrix, in doubles or floats. */
static void tile_fill(const struct tiles *m, size_t i, size_t j, void *tile)
{
	for (size_t c = 0; c < m->t; c++) {
		for (size_t r = 0; r < m->t; r++) {
			double v = matrix_element(i * m->t + r, j * m->t + c, m->n);

			if (m->elem == sizeof(double))
				((double *)tile)[c * m->t + r] = v;
			else
				((float *)tile)[c * m->t + r] = (float)v;
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
	size_t nt = m->nt, bytes = m->t * m->t * m->elem;
	void *scratch = xmalloc(bytes);
	int size = odx_size(m->ctx);

	m->a = calloc(nt * nt, sizeof(*m->a));
	m->at = calloc(nt * nt, sizeof(*m->at));
	m->p = calloc(nt * nt, sizeof(*m->p));
	if (!m->a || !m->at || !m->p)
		check(m->ctx, ODX_ENOMEM, "calloc");
	for (size_t i = 0; i < nt; i++) {
		for (size_t j = 0; j <= i; j++) {
			int owner = tile_owner(i, j, size);

			m->a[i * nt + j] = new_tile_buffer(m->ctx, bytes, owner);
			tile_fill(m, i, j, scratch);
			/* every rank writes the same bytes (docs/distributed.md) */
			check(m->ctx, odx_buffer_write(m->a[i * nt + j], 0, scratch, bytes, -1),
			      "odx_buffer_write");
			if (std_gemm && j < i) {
				m->at[i * nt + j] = new_tile_buffer(m->ctx, bytes, owner);
				m->p[i * nt + j] = new_tile_buffer(m->ctx, bytes, owner);
			}
		}
	}
	free(scratch);
}

static void tiles_destroy(struct tiles *m)
{
	for (size_t id = 0; id < m->nt * m->nt; id++) {
		odx_buffer *bufs[3] = {m->a[id], m->at[id], m->p[id]};

		for (int b = 0; b < 3; b++)
			if (bufs[b])
				check(m->ctx, odx_buffer_destroy(bufs[b]), "odx_buffer_destroy");
	}
	free(m->p);
	free(m->at);
	free(m->a);
}

/* ---- the factorisation ---------------------------------------------------------------------- */

struct kernels {
	odx_kernel *potrf, *trsm, *syrk, *gemm;	/* gemm: the f64 host one */
	odx_kernel *std_gemm, *std_axpy;	/* --std-gemm: odx.gemm_f32, odx.axpy_f32 */
};

/*
 * Submits one task on a single work-group: the host variants call BLAS once per task. (A one-call
 * host kernel that hands BLAS the device's threads would change only this function's options.)
 */
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
		const odx_arg potrf_args[] = {ODX_BUF(tile_buf(m, kk, kk), ODX_RW), ODX_I32(ti)};

		submit(m->ctx, k->potrf, potrf_args, 2, use_prio ? base : 0, "potrf",
		       kk, kk, kk);
		for (size_t row = kk + 1; row < nt; row++) {
			const odx_arg args[] = {
				ODX_BUF(tile_buf(m, kk, kk), ODX_R),
				ODX_BUF(tile_buf(m, row, kk), ODX_RW),
				std_gemm ? ODX_BUF(m->at[row * nt + kk], ODX_W) : ODX_I32(ti),
				ODX_I32(ti),
			};

			submit(m->ctx, k->trsm, args, std_gemm ? 4 : 3,
			       use_prio ? base - (int)row : 0, "trsm", row, kk, kk);
		}
		for (size_t col = kk + 1; col < nt; col++) {
			for (size_t row = col; row < nt; row++) {
				int prio = use_prio ? base - (int)(row + col) : 0;

				if (row == col) {
					const odx_arg args[] = {
						ODX_BUF(tile_buf(m, row, kk), ODX_R),
						ODX_BUF(tile_buf(m, row, row), ODX_RW), ODX_I32(ti),
					};
					submit(m->ctx, k->syrk, args, 3, prio, "syrk",
					       row, row, kk);
				} else if (std_gemm) {
					submit_std_gemm(m, k, row, col, kk, prio);
				} else {
					const odx_arg args[] = {
						ODX_BUF(tile_buf(m, row, kk), ODX_R),
						ODX_BUF(tile_buf(m, col, kk), ODX_R),
						ODX_BUF(tile_buf(m, row, col), ODX_RW), ODX_I32(ti),
					};
					submit(m->ctx, k->gemm, args, 4, prio, "gemm",
					       row, col, kk);
				}
			}
		}
	}
}

/* ---- checking ------------------------------------------------------------------------------- */

/*
 * Reads the factor back (collective: every rank gets every tile) into a column-major n x n
 * matrix of doubles, zero above the diagonal, and hashes the tiles' bytes as computed
 * (FNV-1a), so that runs on different rank counts can be compared bit for bit.
 */
static double *read_factor(const struct tiles *m, uint64_t *checksum)
{
	size_t n = m->n, t = m->t, bytes = t * t * m->elem;
	double *l = calloc(n * n, sizeof(double));
	unsigned char *tile = xmalloc(bytes);
	uint64_t h = 0xcbf29ce484222325ull;

	if (!l)
		check(m->ctx, ODX_ENOMEM, "calloc");
	for (size_t i = 0; i < m->nt; i++) {
		for (size_t j = 0; j <= i; j++) {
			check(m->ctx, odx_buffer_read(tile_buf(m, i, j), 0, tile, bytes, -1),
			      "odx_buffer_read");
			for (size_t b = 0; b < bytes; b++)
				h = (h ^ tile[b]) * 0x100000001b3ull;
			for (size_t c = 0; c < t; c++) {
				for (size_t r = 0; r < t; r++) {
					size_t gr = i * t + r, gc = j * t + c;
					double v = m->elem == sizeof(double)
						? ((double *)tile)[c * t + r]
						: ((float *)tile)[c * t + r];

					/* POTRF leaves the upper triangle of diagonal tiles alone */
					if (gr >= gc)
						l[gc * n + gr] = v;
				}
			}
		}
	}
	free(tile);
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
	fprintf(stderr, "usage: %s [--std-gemm] [--no-check] [--no-prio] [N [T]]\n"
		"  T divides N (default 1920 320); with --std-gemm T is a multiple of 16\n", argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	size_t n = 1920, t = 320;
	int std_gemm = 0, do_check = 1, use_prio = 1, npos = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--std-gemm"))
			std_gemm = 1;
		else if (!strcmp(argv[i], "--no-check"))
			do_check = 0;
		else if (!strcmp(argv[i], "--no-prio"))
			use_prio = 0;
		else if (argv[i][0] != '-' && npos < 2)
			*(npos++ ? &t : &n) = strtoull(argv[i], NULL, 0);
		else
			usage(argv[0]);
	}
	if (n == 0 || t == 0 || n % t || t > 46340 || n > 1u << 20 || (std_gemm && t % 16))
		usage(argv[0]);

	/*
	 * Parallelism comes from running tiles side by side on every device thread: BLAS itself
	 * runs on one thread unless OPENBLAS_NUM_THREADS says otherwise.
	 */
	if (!getenv("OPENBLAS_NUM_THREADS"))
		openblas_set_num_threads(1);

	odx_context *ctx;
	check(NULL, odx_open(&ctx, NULL), "odx_open");

	const odx_param potrf_p[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_I32, 0, "t"}};
	const odx_param trsm_p[] = {{ODX_ARG_BUFFER, ODX_R, "lkk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				    {ODX_ARG_I32, 0, "t"}};
	const odx_param trsm_t_p[] = {{ODX_ARG_BUFFER, ODX_R, "lkk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				      {ODX_ARG_BUFFER, ODX_W, "at"}, {ODX_ARG_I32, 0, "t"}};
	const odx_param syrk_p[] = {{ODX_ARG_BUFFER, ODX_R, "lnk"}, {ODX_ARG_BUFFER, ODX_RW, "a"},
				    {ODX_ARG_I32, 0, "t"}};
	const odx_param gemm_p[] = {{ODX_ARG_BUFFER, ODX_R, "lmk"}, {ODX_ARG_BUFFER, ODX_R, "lnk"},
				    {ODX_ARG_BUFFER, ODX_RW, "a"}, {ODX_ARG_I32, 0, "t"}};
	struct kernels k = {0};
	if (std_gemm) {
		k.potrf = host_kernel(ctx, "cholesky.spotrf", potrf_f32, potrf_p, 2);
		k.trsm = host_kernel(ctx, "cholesky.strsm_t", trsm_f32, trsm_t_p, 4);
		k.syrk = host_kernel(ctx, "cholesky.ssyrk", syrk_f32, syrk_p, 3);
		check(ctx, odx_kernel_builtin(ctx, "odx.gemm_f32", &k.std_gemm),
		      "odx_kernel_builtin");
		check(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &k.std_axpy),
		      "odx_kernel_builtin");
	} else {
		k.potrf = host_kernel(ctx, "cholesky.dpotrf", potrf_f64, potrf_p, 2);
		k.trsm = host_kernel(ctx, "cholesky.dtrsm", trsm_f64, trsm_p, 3);
		k.syrk = host_kernel(ctx, "cholesky.dsyrk", syrk_f64, syrk_p, 3);
		k.gemm = host_kernel(ctx, "cholesky.dgemm", gemm_f64, gemm_p, 4);
	}

	struct tiles m = {.ctx = ctx, .n = n, .t = t, .nt = n / t,
			  .elem = std_gemm ? sizeof(float) : sizeof(double)};
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
	double bound = (double)n * (std_gemm ? FLT_EPSILON : DBL_EPSILON);
	int failed = do_check && !(res <= bound);

	size_t nt = m.nt;
	odx_device_info dev;
	check(ctx, odx_device_get_info(ctx, 0, &dev), "odx_device_get_info");
	printf("cholesky: N=%zu T=%zu tiles=%zux%zu tasks=%zu %s devices=%d (%s: %s)\n", n, t, nt,
	       nt, nt * (nt + 1) * (nt + 2) / 6 + (std_gemm ? nt * (nt - 1) * (nt - 2) / 6 : 0),
	       std_gemm ? "f32 std-gemm" : "f64", odx_device_count(ctx),
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
	return failed ? 1 : 0;
}
