/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_std_tiles.c - the standard kernels' host variants over tiles of partitioned matrices used
 * in place (docs/kernels.md, "Tiles"): every kernel runs once on tiles, whose bytes are runs a
 * leading dimension apart inside their parent, and once on plain buffers holding the same tiles
 * packed; both must give the same bits. Two matrices cut differently (runs of 16 and of 20
 * elements) make the element-wise kernels cross run boundaries at different places in their
 * operands. Run with 1 and 2 compute threads (2: the work-groups are split between two threads,
 * each writing only its own part of a strided output). The accumulators of histogram and group-by
 * are refused when they are strided tiles, with a message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"

/* A: column-major 37 x 29 (ld 41), tiles 16 x 12 (runs of 16, edge tiles 5 x 12, 16 x 5 ...).
 * B: row-major 45 x 45 (ld 47), tiles 20 x 20 (runs of 20, edge tiles 5 rows or columns). */
static const odx_partition part_a = {.kind = ODX_PART_TILES, .elem_size = 4, .rows = 37,
				     .cols = 29, .ld = 41, .tile_rows = 16, .tile_cols = 12};
static const odx_partition part_b = {.kind = ODX_PART_TILES, .elem_size = 4, .rows = 45,
				     .cols = 45, .ld = 47, .tile_rows = 20, .tile_cols = 20,
				     .row_major = true};
#define A_TILES (3 * 3)
#define B_TILES (3 * 3)
#define A_BYTES ((size_t)41 * 29 * 4)
#define B_BYTES ((size_t)45 * 47 * 4)

/* Tile (i, j) of A or B as a slot: the tile in place, and a plain buffer with its packed bytes. */
typedef struct twin {
	odx_buffer *tile, *plain;
	size_t size;
} twin;

typedef struct fixture {
	odx_context *ctx;
	odx_buffer *a, *b;
	twin ta[A_TILES], tb[B_TILES];
	odx_kernel *k[9];
	odx_buffer *counts[2], *sums[2]; /* plain accumulators: [0] the tiles' run, [1] the twins' */
} fixture;

enum { FILL, COPY, SCALE, AXPY, REDUCE, GEMM, HASH, HIST, GROUPBY };
static const char *const names[] = {"odx.fill_u32",	    "odx.copy_u32",	 "odx.scale_f32",
				    "odx.axpy_f32",	    "odx.reduce_sum_f32", "odx.gemm_f32",
				    "odx.hash_partition_u32", "odx.histogram_u32", "odx.groupby_sum_i32"};

/* Small floats (exact sums), their bits also small-ish keys after hashing. */
static void pattern(float *x, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((i * 7 + seed) % 61) * 0.25f - 3.0f;
}

static void twins_make(fixture *f, odx_buffer *parent, const odx_partition *p, twin *t, int n)
{
	odx_buffer *parts[16];
	void *tmp = malloc(B_BYTES);

	assert_ok(odx_buffer_partition(parent, p, n, parts, TEST_TIMEOUT_MS));
	for (int q = 0; q < n; q++) {
		t[q].tile = parts[q];
		t[q].size = odx_buffer_size(parts[q]);
		assert_ok(odx_buffer_create(f->ctx, t[q].size, 0, &t[q].plain));
		assert_ok(odx_buffer_read(parts[q], 0, tmp, t[q].size, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_write(t[q].plain, 0, tmp, t[q].size, TEST_TIMEOUT_MS));
	}
	free(tmp);
}

static fixture *open_fixture(const char *threads)
{
	const char *kv[] = {"backends",     "host",	     "host.devices", "1",    "host.threads",
			    threads,	    "host.bind",     "false",	     "host.memnode", "shared",
			    "log",	    "warn",	     NULL};
	fixture *f = calloc(1, sizeof(*f));
	float *init = malloc(B_BYTES);

	f->ctx = test_open_ctx(kv);
	for (int i = 0; i < 9; i++)
		assert_ok(odx_kernel_builtin(f->ctx, names[i], &f->k[i]));
	assert_ok(odx_buffer_create(f->ctx, A_BYTES, 0, &f->a));
	assert_ok(odx_buffer_create(f->ctx, B_BYTES, 0, &f->b));
	pattern(init, A_BYTES / 4, 1);
	assert_ok(odx_buffer_write(f->a, 0, init, A_BYTES, TEST_TIMEOUT_MS));
	pattern(init, B_BYTES / 4, 2);
	assert_ok(odx_buffer_write(f->b, 0, init, B_BYTES, TEST_TIMEOUT_MS));
	free(init);
	twins_make(f, f->a, &part_a, f->ta, A_TILES);
	twins_make(f, f->b, &part_b, f->tb, B_TILES);
	return f;
}

/* Element count of a twin. */
static int32_t elems(const twin *t)
{
	return (int32_t)(t->size / 4);
}

/* Runs `k` twice: on the tiles (side 0) and on their plain twins (side 1), args built by `mk`. */
typedef int (*args_fn)(const fixture *f, int side, odx_arg *args, odx_task_opts *o);

static void twice(fixture *f, int kernel, args_fn mk)
{
	for (int side = 0; side < 2; side++) {
		odx_arg args[8];
		odx_task_opts o = {.block = {64, 1, 1}, .grid = {3, 1, 1}};
		int n = mk(f, side, args, &o);
		odx_event *ev = NULL;
		int rc = odx_submit(f->ctx, f->k[kernel], args, n, &o, &ev);

		if (rc)
			fail_msg("%s: odx_submit: %s: %s", names[kernel], odx_err_name(rc),
				 odx_last_error(f->ctx));
		rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
		if (rc)
			fail_msg("%s on %s: %s: %s", names[kernel], side ? "plain buffers" : "tiles",
				 odx_err_name(rc), odx_event_message(ev));
		odx_event_release(ev);
	}
}

#define SIDE(t) (side ? (t).plain : (t).tile)

static int mk_fill(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->ta[4]), ODX_W);
	a[1] = ODX_I32(0x3f800000 + 5); /* a float just above 1 */
	a[2] = ODX_I32(elems(&f->ta[4]) - 3);
	return 3;
}

/* A's runs of 16 into B's runs of 20: the stretches are cut by both. */
static int mk_copy(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->ta[0]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->tb[4]), ODX_W);
	a[2] = ODX_I32(elems(&f->ta[0]));
	return 3;
}

static int mk_scale(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	o->grid[0] = 2;
	o->block[0] = 7;
	a[0] = ODX_BUF(SIDE(f->ta[1]), ODX_RW);
	a[1] = ODX_F32(1.5f);
	a[2] = ODX_I32(elems(&f->ta[1]));
	return 3;
}

/* An edge tile of B (5 x 20) into an edge tile of A (5 x 12, runs of 5). */
static int mk_axpy(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->tb[2]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->ta[2]), ODX_RW);
	a[2] = ODX_F32(-0.75f);
	a[3] = ODX_I32(elems(&f->ta[2]));
	return 4;
}

/* partial: 30 floats written into a tile with runs of 20 (a strided output). */
static int mk_reduce(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	o->grid[0] = 30;
	o->block[0] = 5;
	a[0] = ODX_BUF(SIDE(f->ta[3]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->tb[5]), ODX_W);
	a[2] = ODX_I32(elems(&f->ta[3]));
	return 3;
}

/* c (B(1,1), 20 x 20) = a (B(0,0)) * b (B(1,0)), all row-major tiles: 2 x 2 groups. */
static int mk_gemm(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	*o = (odx_task_opts){.grid = {2, 2, 1}, .block = {16, 16, 1}};
	a[0] = ODX_BUF(SIDE(f->tb[0]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->tb[1]), ODX_R);
	a[2] = ODX_BUF(SIDE(f->tb[4]), ODX_W);
	a[3] = ODX_I32(20);
	a[4] = ODX_I32(20);
	a[5] = ODX_I32(20);
	return 6;
}

/* c (B(2,1), 5 x 20) = a (B(2,0), 5 x 20) * b (B(0,1), 20 x 20). */
static int mk_gemm_edge(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	*o = (odx_task_opts){.grid = {2, 1, 1}, .block = {16, 16, 1}};
	a[0] = ODX_BUF(SIDE(f->tb[2]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->tb[3]), ODX_R);
	a[2] = ODX_BUF(SIDE(f->tb[5]), ODX_W);
	a[3] = ODX_I32(5);
	a[4] = ODX_I32(20);
	a[5] = ODX_I32(20);
	return 6;
}

/* Keys of A(1,1) hashed into 7 buckets, in B(0,0). */
static int mk_hash(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->ta[5]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->tb[0]), ODX_W);
	a[2] = ODX_I32(elems(&f->ta[5]));
	a[3] = ODX_I32(7);
	return 4;
}

/* The buckets as bins; counts are plain on both sides. */
static int mk_hist(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->tb[0]), ODX_R);
	a[1] = ODX_BUF(f->counts[side], ODX_RW);
	a[2] = ODX_I32(elems(&f->ta[5]));
	a[3] = ODX_I32(7);
	return 4;
}

static int mk_groupby(const fixture *f, int side, odx_arg *a, odx_task_opts *o)
{
	(void)o;
	a[0] = ODX_BUF(SIDE(f->tb[0]), ODX_R);
	a[1] = ODX_BUF(SIDE(f->ta[5]), ODX_R);
	a[2] = ODX_BUF(f->sums[side], ODX_RW);
	a[3] = ODX_I32(elems(&f->ta[5]));
	a[4] = ODX_I32(7);
	return 5;
}

/* Every twin's tile and plain buffer hold the same bytes (the parts read packed). */
static void compare_twins(fixture *f, const char *when)
{
	uint32_t *x = malloc(B_BYTES), *y = malloc(B_BYTES);

	for (int q = 0; q < A_TILES + B_TILES; q++) {
		twin *t = q < A_TILES ? &f->ta[q] : &f->tb[q - A_TILES];

		assert_ok(odx_buffer_read(t->tile, 0, x, t->size, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_read(t->plain, 0, y, t->size, TEST_TIMEOUT_MS));
		for (size_t e = 0; e < t->size / 4; e++)
			if (x[e] != y[e])
				fail_msg("%s: %c tile %d, element %zu: %08x in place, %08x packed",
					 when, q < A_TILES ? 'A' : 'B', q % A_TILES, e, x[e], y[e]);
	}
	free(x);
	free(y);
}

/* The histogram and group-by results of the tiles' run and of the plain one. */
static void compare_plain(odx_buffer *x, odx_buffer *y, const char *what)
{
	uint32_t u[64], v[64];

	assert_ok(odx_buffer_read(x, 0, u, 7 * 4, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(y, 0, v, 7 * 4, TEST_TIMEOUT_MS));
	for (int i = 0; i < 7; i++)
		if (u[i] != v[i])
			fail_msg("%s[%d]: %u from tiles, %u from plain buffers", what, i, u[i], v[i]);
}

/* The parents after unpartition hold every twin's bytes in their tiles, padding untouched. */
static void check_parent(fixture *f, odx_buffer *parent, const odx_partition *p, twin *t,
			 size_t bytes, unsigned seed)
{
	float *want = malloc(bytes), *got = malloc(bytes), *packed = malloc(B_BYTES);
	size_t mt = (p->rows + p->tile_rows - 1) / p->tile_rows;
	size_t nt = (p->cols + p->tile_cols - 1) / p->tile_cols;

	pattern(want, bytes / 4, seed);
	for (size_t j = 0; j < nt; j++)
		for (size_t i = 0; i < mt; i++) {
			size_t r0 = i * p->tile_rows, c0 = j * p->tile_cols;
			size_t h = p->rows - r0 < p->tile_rows ? p->rows - r0 : p->tile_rows;
			size_t w = p->cols - c0 < p->tile_cols ? p->cols - c0 : p->tile_cols;
			size_t e = 0;

			assert_ok(odx_buffer_read(t[i + j * mt].plain, 0, packed,
						  t[i + j * mt].size, TEST_TIMEOUT_MS));
			/* Packed order: runs (columns, or rows when row-major) one after another. */
			for (size_t run = 0; run < (p->row_major ? h : w); run++)
				for (size_t k = 0; k < (p->row_major ? w : h); k++)
					want[p->row_major ? (r0 + run) * p->ld + c0 + k
							  : (c0 + run) * p->ld + r0 + k] = packed[e++];
		}
	assert_ok(odx_buffer_unpartition(parent, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(parent, 0, got, bytes, TEST_TIMEOUT_MS));
	assert_memory_equal(got, want, bytes);
	(void)f;
	free(want);
	free(got);
	free(packed);
}

static void close_fixture(fixture *f)
{
	for (int q = 0; q < A_TILES; q++)
		assert_ok(odx_buffer_destroy(f->ta[q].plain));
	for (int q = 0; q < B_TILES; q++)
		assert_ok(odx_buffer_destroy(f->tb[q].plain));
	assert_ok(odx_close(f->ctx));
	free(f);
}

static void kernels_run(const char *threads)
{
	fixture *f = open_fixture(threads);
	static const uint32_t zeros[16];

	/* Clean accumulators for the two histogram and group-by runs. */
	for (int side = 0; side < 2; side++) {
		assert_ok(odx_buffer_create(f->ctx, 7 * 4, 0, &f->counts[side]));
		assert_ok(odx_buffer_create(f->ctx, 7 * 4, 0, &f->sums[side]));
		assert_ok(odx_buffer_write(f->counts[side], 0, zeros, 7 * 4, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_write(f->sums[side], 0, zeros, 7 * 4, TEST_TIMEOUT_MS));
	}
	twice(f, FILL, mk_fill);
	twice(f, COPY, mk_copy);
	twice(f, SCALE, mk_scale);
	twice(f, AXPY, mk_axpy);
	twice(f, REDUCE, mk_reduce);
	compare_twins(f, "element-wise and reduce_sum");
	twice(f, GEMM, mk_gemm);
	twice(f, GEMM, mk_gemm_edge);
	compare_twins(f, "gemm");
	twice(f, HASH, mk_hash);
	twice(f, HIST, mk_hist);
	twice(f, GROUPBY, mk_groupby);
	compare_plain(f->counts[0], f->counts[1], "counts");
	compare_plain(f->sums[0], f->sums[1], "sums");
	compare_twins(f, "hash, histogram, group-by");
	/* The kernels did change the tiles (a test that cannot fail is a defect). */
	{
		float x[4];

		assert_ok(odx_buffer_read(f->tb[4].tile, 0, x, sizeof(x), TEST_TIMEOUT_MS));
		assert_true(x[0] != 0.0f || x[1] != 0.0f);
	}
	check_parent(f, f->a, &part_a, f->ta, A_BYTES, 1);
	check_parent(f, f->b, &part_b, f->tb, B_BYTES, 2);
	close_fixture(f);
}

static void test_one_thread(void **state)
{
	(void)state;
	kernels_run("1");
}

static void test_two_threads(void **state)
{
	(void)state;
	kernels_run("2");
}

/* A strided accumulator is refused with a message. */
static void test_refusals(void **state)
{
	fixture *f = open_fixture("1");
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {64, 1, 1}};
	odx_arg hist[] = {ODX_BUF(f->ta[0].plain, ODX_R), ODX_BUF(f->tb[0].tile, ODX_RW),
			  ODX_I32(16), ODX_I32(7)};
	odx_arg gby[] = {ODX_BUF(f->ta[0].plain, ODX_R), ODX_BUF(f->ta[1].plain, ODX_R),
			 ODX_BUF(f->tb[1].tile, ODX_RW), ODX_I32(16), ODX_I32(7)};
	odx_event *ev;

	(void)state;
	assert_ok(odx_submit(f->ctx, f->k[HIST], hist, 4, &o, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "counts (buffer 1) is a tile in place");
	odx_event_release(ev);
	assert_ok(odx_submit(f->ctx, f->k[GROUPBY], gby, 5, &o, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "sums (buffer 2) is a tile in place");
	odx_event_release(ev);
	/* The failed tasks' outputs stay failed (their readers are canceled): odx_close takes
	 * the partitioned parents with their parts. */
	assert_rc(odx_wait_all(f->ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	close_fixture(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_thread),
		cmocka_unit_test(test_two_threads),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
