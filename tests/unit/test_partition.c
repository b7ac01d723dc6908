/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_partition.c - buffer partitions (docs/partitions.md): 1D blocks and 2D tiles (column- and
 * row-major, edge tiles) used by tasks on two host devices with memory of their own
 * (host.memnode=private: every tile moves between its alias in the parent and packed device
 * copies) and sharing host RAM (tiles used in place), every access mode, then the parent read
 * back whole; ODX_LD as each device sees it; the parent's refusals while partitioned; dead part
 * handles; registered memory; eviction of tiles to a small device tier; reads and writes of a part;
 * asynchronous switches behind a closed gate (no call waits), failures through switches, the
 * synchronous timeouts, destruction behind pending switches, and the parent spilled to and
 * reloaded from the disk tier around its partitions.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"

/* Two host devices, memory private or shared, plus extra settings. */
static odx_context *open2(const char *memnode, const char *const *extra)
{
	odx_context *ctx;
	const char *kv[] = {"backends", "host", "host.devices", "2", "host.bind", "false",
			    "host.memnode", memnode, "stats", "true", "log", "warn", NULL};

	ctx = test_open_logged(kv, extra);
	assert_int_equal(odx_device_count(ctx), 2);
	return ctx;
}

/* ---- kernels ------------------------------------------------------------------------------- */

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

static float f32_arg(const odx_host_launch *l, int i)
{
	return *(const float *)l->scalars[i];
}

/* The tile's layout as given: its span must hold runs x ld, and buffer_shapes (when the backend
 * fills them, ABI 1.7) must agree with ODX_LD. */
static int check_layout(const odx_host_launch *l, int buf, int64_t len, int64_t runs, int64_t ld,
			size_t elem)
{
	size_t span = (size_t)((runs - 1) * ld + len) * elem;

	if (ld < len || l->buffer_sizes[buf] < span) {
		snprintf(l->error, l->error_size, "ld %lld, run %lld: span %zu given, %zu needed",
			 (long long)ld, (long long)len, l->buffer_sizes[buf], span);
		return 1;
	}
	if (l->buffer_shapes && runs > 1 &&
	    (l->buffer_shapes[buf].pitch != (size_t)ld * elem ||
	     l->buffer_shapes[buf].width != (size_t)len * elem)) {
		snprintf(l->error, l->error_size, "shape {%zu, %zu, %zu} against ODX_LD %lld",
			 l->buffer_shapes[buf].width, l->buffer_shapes[buf].count,
			 l->buffer_shapes[buf].pitch, (long long)ld);
		return 1;
	}
	return 0;
}

/* x = x * a + b over a tile: (buf RW, len, runs, ld, a, b). */
static int affine_fn(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	int64_t len = i64_arg(l, 1), runs = i64_arg(l, 2), ld = i64_arg(l, 3);
	float a = f32_arg(l, 4), b = f32_arg(l, 5);

	if (check_layout(l, 0, len, runs, ld, sizeof(float)))
		return 1;
	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			x[j * ld + i] = x[j * ld + i] * a + b;
	return 0;
}

/* x = base + i + 100 j, written only (buf W, len, runs, ld, base). */
static int fill_fn(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	int64_t len = i64_arg(l, 1), runs = i64_arg(l, 2), ld = i64_arg(l, 3);
	float base = f32_arg(l, 4);

	if (check_layout(l, 0, len, runs, ld, sizeof(float)))
		return 1;
	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			x[j * ld + i] = base + (float)i + 100.0f * (float)j;
	return 0;
}

/* Reads a tile: out[0] = ODX_LD as an I32, out[1] = the sum of the tile's elements
 * (buf R, I32 ld, len, runs, out W). */
static int probe_fn(const odx_host_launch *l)
{
	const float *x = l->buffers[0];
	int32_t ld = *(const int32_t *)l->scalars[1];
	int64_t len = i64_arg(l, 2), runs = i64_arg(l, 3);
	float *out = l->buffers[1]; /* buffers are numbered among buffers */
	double sum = 0;

	if (check_layout(l, 0, len, runs, ld, sizeof(float)))
		return 1;
	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			sum += x[j * ld + i];
	out[0] = (float)ld;
	out[1] = (float)sum;
	return 0;
}

/* Fails the task (buf RW, v): its output has no defined bytes. */
static int fail_fn(const odx_host_launch *l)
{
	snprintf(l->error, l->error_size, "this kernel fails on purpose");
	return 7;
}

/* Adds v to every uint32 of a block (buf RW, v). */
static int add_fn(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	uint32_t v = (uint32_t)*(const int32_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / 4; i++)
		x[i] += v;
	return 0;
}

typedef struct kernels {
	odx_kernel *affine, *fill, *probe, *add;
} kernels;

static kernels make_kernels(odx_context *ctx)
{
	static const odx_param affine[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I64, 0, "len"},
					   {ODX_ARG_I64, 0, "runs"},	  {ODX_ARG_I64, 0, "ld"},
					   {ODX_ARG_F32, 0, "a"},	  {ODX_ARG_F32, 0, "b"}};
	static const odx_param fill[] = {{ODX_ARG_BUFFER, ODX_W, "x"}, {ODX_ARG_I64, 0, "len"},
					 {ODX_ARG_I64, 0, "runs"},     {ODX_ARG_I64, 0, "ld"},
					 {ODX_ARG_F32, 0, "base"}};
	static const odx_param probe[] = {{ODX_ARG_BUFFER, ODX_R, "x"}, {ODX_ARG_I32, 0, "ld"},
					  {ODX_ARG_I64, 0, "len"},	{ODX_ARG_I64, 0, "runs"},
					  {ODX_ARG_BUFFER, ODX_W, "out"}};
	static const odx_param add[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I32, 0, "v"}};

	return (kernels){
		.affine = test_host_kernel(ctx, "part_affine", affine, 6, affine_fn),
		.fill = test_host_kernel(ctx, "part_fill", fill, 5, fill_fn),
		.probe = test_host_kernel(ctx, "part_probe", probe, 5, probe_fn),
		.add = test_host_kernel(ctx, "part_add", add, 2, add_fn),
	};
}

static void submit_on(odx_context *ctx, odx_kernel *k, const odx_arg *args, int n, int dev)
{
	odx_task_opts o = {.device = dev + 1};
	int rc = odx_submit(ctx, k, args, n, &o, NULL);

	if (rc)
		fail_msg("odx_submit(%s) on device %d: %s: %s", "kernel", dev, odx_err_name(rc),
			 odx_last_error(ctx));
}

/* ---- 2D tiles -------------------------------------------------------------------------------- */

/* A rows x cols float matrix with ld (column-major, or row-major), 4 x 4 tiles with edges. */
typedef struct matrix {
	size_t rows, cols, ld, tr, tc;
	bool row_major;
} matrix;

static size_t mat_index(const matrix *m, size_t r, size_t c)
{
	return m->row_major ? r * m->ld + c : c * m->ld + r;
}

static size_t mat_elems(const matrix *m)
{
	return (m->row_major ? m->rows : m->cols) * m->ld;
}

/* The tile (i, j): its element range and its runs as the kernels walk them. */
typedef struct tile {
	size_t r0, c0, h, w;
	int64_t len, runs; /* a run is a column (column-major) or a row (row-major) */
} tile;

static tile tile_of(const matrix *m, size_t i, size_t j)
{
	tile t = {.r0 = i * m->tr, .c0 = j * m->tc};

	t.h = m->rows - t.r0 < m->tr ? m->rows - t.r0 : m->tr;
	t.w = m->cols - t.c0 < m->tc ? m->cols - t.c0 : m->tc;
	t.len = (int64_t)(m->row_major ? t.w : t.h);
	t.runs = (int64_t)(m->row_major ? t.h : t.w);
	return t;
}

/* Element (run j, index i) of tile t in the matrix. */
static size_t tile_elem(const matrix *m, const tile *t, int64_t i, int64_t j)
{
	return m->row_major ? mat_index(m, t->r0 + (size_t)j, t->c0 + (size_t)i)
			    : mat_index(m, t->r0 + (size_t)i, t->c0 + (size_t)j);
}

/*
 * Every access mode on every tile from tasks on both devices: W (fill) on some, RW (affine) on
 * the first device, RW on the second, R (probe, with ODX_LD) on the first; then unpartition and
 * compare the whole parent, padding included, with the same steps done here.
 */
static void tiles_run(const char *memnode, bool row_major, const char *const *extra,
		      const matrix *shape_in, int rounds)
{
	matrix m = {shape_in->rows, shape_in->cols, shape_in->ld, shape_in->tr, shape_in->tc,
		    row_major};
	odx_context *ctx = open2(memnode, extra);
	kernels k = make_kernels(ctx);
	size_t n = mat_elems(&m), mt = (m.rows + m.tr - 1) / m.tr, nt = (m.cols + m.tc - 1) / m.tc;
	size_t bytes = n * sizeof(float);
	float *want = malloc(bytes), *got = malloc(bytes), probe[2];
	odx_buffer *a, **parts = calloc(mt * nt, sizeof(*parts)), **outs = calloc(mt * nt, sizeof(*outs));
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = m.rows,
			   .cols = m.cols, .ld = m.ld, .tile_rows = m.tr, .tile_cols = m.tc,
			   .row_major = row_major};
	bool shared = strcmp(memnode, "shared") == 0;

	for (size_t e = 0; e < n; e++)
		want[e] = (float)(e % 97);
	assert_ok(odx_buffer_create(ctx, bytes, 0, &a));
	assert_ok(odx_buffer_write(a, 0, want, bytes, TEST_TIMEOUT_MS));
	/* A count other than the description's is refused with the number it makes. */
	assert_rc(odx_buffer_partition(a, &p, (int)(mt * nt) + 1, parts, TEST_TIMEOUT_MS),
		  ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "makes");
	assert_ok(odx_buffer_partition(a, &p, (int)(mt * nt), parts, TEST_TIMEOUT_MS));
	for (size_t q = 0; q < mt * nt; q++)
		assert_ok(odx_buffer_create(ctx, 2 * sizeof(float), 0, &outs[q]));

	for (int round = 0; round < rounds; round++)
		for (size_t j = 0; j < nt; j++)
			for (size_t i = 0; i < mt; i++) {
				size_t q = i + j * mt;
				tile t = tile_of(&m, i, j);
				int d = (int)((i + j + (size_t)round) % 2);
				float base = (float)(q * 1000), b1 = (float)(i * 10 + j);
				odx_arg fill[] = {ODX_BUF(parts[q], ODX_W), ODX_I64(t.len),
						  ODX_I64(t.runs), ODX_LD(0), ODX_F32(base)};
				odx_arg aff1[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(t.len),
						  ODX_I64(t.runs), ODX_LD(0), ODX_F32(2.0f),
						  ODX_F32(1.0f)};
				odx_arg aff2[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(t.len),
						  ODX_I64(t.runs), ODX_LD(0), ODX_F32(1.0f),
						  ODX_F32(b1)};
				odx_arg prb[] = {ODX_BUF(parts[q], ODX_R), ODX_LD(0),
						 ODX_I64(t.len), ODX_I64(t.runs),
						 ODX_BUF(outs[q], ODX_W)};
				bool do_fill = (q + (size_t)round) % 3 == 0;

				if (do_fill)
					submit_on(ctx, k.fill, fill, 5, d);
				submit_on(ctx, k.affine, aff1, 6, d);
				submit_on(ctx, k.affine, aff2, 6, 1 - d);
				submit_on(ctx, k.probe, prb, 5, d);
				for (int64_t jj = 0; jj < t.runs; jj++)
					for (int64_t ii = 0; ii < t.len; ii++) {
						float *x = &want[tile_elem(&m, &t, ii, jj)];

						if (do_fill)
							*x = base + (float)ii + 100.0f * (float)jj;
						*x = *x * 2.0f + 1.0f + b1;
					}
			}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	/* ODX_LD where the probe ran: the parent's ld in place (shared host RAM), the run length
	 * of the packed copy in a device's own memory; the sum of the tile it read. */
	for (size_t j = 0; j < nt; j++)
		for (size_t i = 0; i < mt; i++) {
			size_t q = i + j * mt;
			tile t = tile_of(&m, i, j);
			double sum = 0;

			assert_ok(odx_buffer_read(outs[q], 0, probe, sizeof(probe), TEST_TIMEOUT_MS));
			assert_int_equal((int64_t)probe[0], shared ? (int64_t)m.ld : t.len);
			for (int64_t jj = 0; jj < t.runs; jj++)
				for (int64_t ii = 0; ii < t.len; ii++)
					sum += want[tile_elem(&m, &t, ii, jj)];
			assert_true(probe[1] == (float)sum);
		}
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	memset(got, 0, bytes);
	assert_ok(odx_buffer_read(a, 0, got, bytes, TEST_TIMEOUT_MS));
	for (size_t e = 0; e < n; e++)
		if (got[e] != want[e])
			fail_msg("%s, %s: element %zu is %g, expected %g", memnode,
				 row_major ? "row-major" : "column-major", e, (double)got[e],
				 (double)want[e]);
	/* The part handles are dead. */
	assert_rc(odx_buffer_read(parts[0], 0, got, 4, TEST_TIMEOUT_MS), ODX_EINVAL);
	for (size_t q = 0; q < mt * nt; q++)
		assert_ok(odx_buffer_destroy(outs[q]));
	assert_ok(odx_buffer_destroy(a));
	assert_ok(odx_close(ctx));
	free(want);
	free(got);
	free(parts);
	free(outs);
}

static const matrix small = {.rows = 10, .cols = 9, .ld = 12, .tr = 4, .tc = 4};

static void test_tiles_col_private(void **state)
{
	(void)state;
	tiles_run("private", false, NULL, &small, 2);
}

static void test_tiles_row_private(void **state)
{
	(void)state;
	tiles_run("private", true, NULL, &small, 2);
}

static void test_tiles_col_shared(void **state)
{
	(void)state;
	tiles_run("shared", false, NULL, &small, 2);
}

static void test_tiles_row_shared(void **state)
{
	(void)state;
	tiles_run("shared", true, NULL, &small, 2);
}

/* More tile bytes than the devices' tiers hold: dirty tiles are written back into their aliases
 * (the parent's memory) to make room; results stay exact. */
static void test_tiles_evicted(void **state)
{
	static const matrix big = {.rows = 100, .cols = 96, .ld = 104, .tr = 16, .tc = 16};
	const char *kv[] = {"tier.device.limit", "16KiB", NULL};

	(void)state;
	tiles_run("private", false, kv, &big, 3);
	/* close printed the statistics */
	print_message("tiles evicted: %llu clean drops, %llu write-backs\n",
		      test_stat_sum("tier node", "clean"), test_stat_sum("tier node", "dirty"));
	assert_true(test_stat_sum("tier node", "dirty") > 0);
}

/* ---- 1D blocks ------------------------------------------------------------------------------- */

static void blocks_run(const char *memnode)
{
	odx_context *ctx = open2(memnode, NULL);
	kernels k = make_kernels(ctx);
	enum { N = 1000 };
	uint32_t want[N], got[N];
	static const size_t sizes[] = {400, 1200, 4, 2000};
	odx_partition eq = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_partition ex = {.kind = ODX_PART_BLOCKS, .elem_size = 4, .sizes = sizes};
	odx_buffer *a, *parts[4];

	for (int i = 0; i < N; i++)
		want[i] = (uint32_t)i;
	assert_ok(odx_buffer_create(ctx, sizeof(want), 0, &a));
	assert_ok(odx_buffer_write(a, 0, want, sizeof(want), TEST_TIMEOUT_MS));
	/* 1000 elements in 3: 334, 334, 332. */
	assert_ok(odx_buffer_partition(a, &eq, 3, parts, TEST_TIMEOUT_MS));
	assert_int_equal(odx_buffer_size(parts[0]), 334 * 4);
	assert_int_equal(odx_buffer_size(parts[2]), 332 * 4);
	for (int r = 0; r < 4; r++)
		for (int q = 0; q < 3; q++) {
			odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I32(q + 1)};

			submit_on(ctx, k.add, args, 2, (q + r) % 2);
		}
	for (int i = 0; i < N; i++)
		want[i] += 4u * (uint32_t)(i < 334 ? 1 : i < 668 ? 2 : 3);
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	/* Explicit sizes next, after the first partition was gathered: 3600 of 4000 bytes. */
	assert_ok(odx_buffer_partition(a, &ex, 4, parts, TEST_TIMEOUT_MS));
	for (int q = 0; q < 4; q++) {
		odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I32(10 * (q + 1))};

		submit_on(ctx, k.add, args, 2, q % 2);
	}
	{
		size_t off = 0;

		for (int q = 0; q < 4; q++) {
			for (size_t e = off / 4; e < (off + sizes[q]) / 4; e++)
				want[e] += 10u * (uint32_t)(q + 1);
			off += sizes[q];
		}
	}
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	assert_memory_equal(got, want, sizeof(want));
	/* Sizes past the end are refused. */
	{
		static const size_t too_big[] = {4000, 4};
		odx_partition bad = {.kind = ODX_PART_BLOCKS, .elem_size = 4, .sizes = too_big};

		assert_rc(odx_buffer_partition(a, &bad, 2, parts, TEST_TIMEOUT_MS), ODX_EINVAL);
	}
	assert_ok(odx_close(ctx));
}

static void test_blocks_private(void **state)
{
	(void)state;
	blocks_run("private");
}

static void test_blocks_shared(void **state)
{
	(void)state;
	blocks_run("shared");
}

/* ---- refusals, dead handles, partition again ------------------------------------------------- */

static void test_refusals(void **state)
{
	odx_context *ctx = open2("private", NULL);
	kernels k = make_kernels(ctx);
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_buffer *a, *parts[2], *sub[2];
	uint32_t x[4] = {0};
	odx_arg args[] = {ODX_BUF(NULL, ODX_RW), ODX_I32(1)};

	(void)state;
	assert_ok(odx_buffer_create(ctx, 64, 0, &a));
	args[0].v.buffer = a;
	assert_rc(odx_buffer_unpartition(a, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_rc(odx_buffer_unpartition_async(a, NULL), ODX_EINVAL);
	assert_rc(odx_buffer_partition(a, &p, 2, NULL, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_rc(odx_buffer_partition_async(a, &p, 2, NULL, NULL), ODX_EINVAL);
	assert_rc(odx_buffer_partition_async(a, &p, 5, parts, NULL), ODX_EINVAL); /* 16 in 4 */
	assert_ok(odx_buffer_partition(a, &p, 2, parts, TEST_TIMEOUT_MS));
	assert_rc(odx_submit(ctx, k.add, args, 2, NULL, NULL), ODX_EBUSY);
	assert_contains(odx_last_error(ctx), "is partitioned into 2 parts");
	assert_contains(odx_last_error(ctx), "odx_buffer_unpartition");
	assert_rc(odx_buffer_read(a, 0, x, 4, TEST_TIMEOUT_MS), ODX_EBUSY);
	assert_rc(odx_buffer_write(a, 0, x, 4, TEST_TIMEOUT_MS), ODX_EBUSY);
	assert_rc(odx_buffer_prefetch(a, 0, ODX_PREFETCH_NOW), ODX_EBUSY);
	assert_rc(odx_buffer_set_owner(a, 0), ODX_EBUSY);
	assert_rc(odx_buffer_partition(a, &p, 2, sub, TEST_TIMEOUT_MS), ODX_EBUSY);
	/* Parts: no second level, no destruction of their own. */
	assert_rc(odx_buffer_partition(parts[0], &p, 2, sub, TEST_TIMEOUT_MS), ODX_ENOSYS);
	assert_contains(odx_last_error(ctx), "cannot be partitioned again");
	assert_rc(odx_buffer_destroy(parts[1]), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "part of a partition");
	/* A part is a buffer: tasks, prefetch, read (a never-written parent reads as zeros). */
	args[0].v.buffer = parts[1];
	assert_ok(odx_submit(ctx, k.add, args, 2, NULL, NULL));
	assert_ok(odx_buffer_prefetch(parts[0], 1, ODX_PREFETCH_NOW));
	assert_ok(odx_buffer_read(parts[1], 0, x, sizeof(x), TEST_TIMEOUT_MS));
	assert_int_equal(x[0], 1);
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	/* Dead part handles, a usable parent, and a new partition. */
	assert_rc(odx_buffer_read(parts[1], 0, x, 4, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_rc(odx_submit(ctx, k.add, args, 2, NULL, NULL), ODX_EINVAL);
	assert_ok(odx_buffer_read(a, 32, x, 16, TEST_TIMEOUT_MS));
	assert_int_equal(x[0], 1);
	assert_int_equal(x[3], 1);
	assert_ok(odx_buffer_read(a, 0, x, 16, TEST_TIMEOUT_MS));
	assert_int_equal(x[0], 0);
	assert_ok(odx_buffer_partition(a, &p, 2, parts, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	/* Destroying a partitioned parent takes its parts with it. */
	assert_ok(odx_buffer_partition(a, &p, 2, parts, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_destroy(a));
	assert_rc(odx_buffer_read(parts[0], 0, x, 4, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

/* ---- registered memory ---------------------------------------------------------------------- */

/* Tiles of user memory: the parts' latest bytes land in it at unpartition, and at the parent's
 * destruction without one (the parts written on the devices' own memory). */
/* A part whose writer failed: unpartition refuses (ODX_ECANCELED, with the cause) every time
 * until the part is written again; then the parent holds the new bytes and the other part's. */
static void test_failed_part(void **state)
{
	static const odx_param p1[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I32, 0, "v"}};
	odx_context *ctx = open2("shared", NULL);
	kernels k = make_kernels(ctx);
	odx_kernel *bad = test_host_kernel(ctx, "part_fail", p1, 2, fail_fn);
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_buffer *a, *parts[2];
	uint32_t x[16], fresh[8];

	(void)state;
	assert_ok(odx_buffer_create(ctx, sizeof(x), 0, &a));
	assert_ok(odx_buffer_partition(a, &p, 2, parts, TEST_TIMEOUT_MS));
	assert_ok(odx_submit(ctx, bad, (odx_arg[]){ODX_BUF(parts[0], ODX_RW), ODX_I32(1)}, 2, NULL,
			     NULL));
	assert_ok(odx_submit(ctx, k.add, (odx_arg[]){ODX_BUF(parts[1], ODX_RW), ODX_I32(5)}, 2,
			     NULL, NULL));
	for (int round = 0; round < 2; round++) {
		assert_rc(odx_buffer_unpartition(a, TEST_TIMEOUT_MS), ODX_ECANCELED);
		assert_contains(odx_last_error(ctx), "fails on purpose");
	}
	odx_wait_all(ctx, TEST_TIMEOUT_MS); /* takes the failure off the context */
	for (int i = 0; i < 8; i++)
		fresh[i] = 100u + (uint32_t)i;
	assert_ok(odx_buffer_write(parts[0], 0, fresh, sizeof(fresh), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, x, sizeof(x), TEST_TIMEOUT_MS));
	for (int i = 0; i < 16; i++)
		assert_int_equal(x[i], i < 8 ? 100u + (uint32_t)i : 5u);
	odx_buffer_destroy(a);
	assert_ok(odx_close(ctx));
}

static void test_registered(void **state)
{
	enum { R = 8, C = 6, LD = 9 };
	odx_context *ctx = open2("private", NULL);
	kernels k = make_kernels(ctx);
	float *user = malloc(LD * C * sizeof(float)), want[LD * C];
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = R,
			   .cols = C, .ld = LD, .tile_rows = 4, .tile_cols = 3};
	odx_buffer *a, *parts[4];

	(void)state;
	for (int pass = 0; pass < 2; pass++) {
		for (int e = 0; e < LD * C; e++)
			user[e] = want[e] = (float)e;
		assert_ok(odx_buffer_register(ctx, user, LD * C * sizeof(float), 0, &a));
		assert_ok(odx_buffer_partition(a, &p, 4, parts, TEST_TIMEOUT_MS));
		for (int q = 0; q < 4; q++) {
			int i = q % 2, j = q / 2;
			odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(4), ODX_I64(3),
					  ODX_LD(0),		     ODX_F32(3.0f), ODX_F32((float)q)};

			submit_on(ctx, k.affine, args, 6, q % 2);
			for (int jj = 0; jj < 3; jj++)
				for (int ii = 0; ii < 4; ii++) {
					float *x = &want[(j * 3 + jj) * LD + i * 4 + ii];

					*x = *x * 3.0f + (float)q;
				}
		}
		if (pass == 0)
			assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_destroy(a));
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		for (int e = 0; e < LD * C; e++)
			if (user[e] != want[e])
				fail_msg("pass %d: user memory element %d is %g, expected %g", pass, e,
					 (double)user[e], (double)want[e]);
	}
	assert_ok(odx_close(ctx));
	free(user);
}

/* ---- reads and writes of a part ---------------------------------------------------------- */

/* odx_buffer_read/write of a tile address its packed bytes, whether its latest copy is the alias
 * inside the parent (strided) or a device's packed copy. */
static void part_access_run(const char *memnode)
{
	enum { R = 7, C = 5, LD = 8 };
	odx_context *ctx = open2(memnode, NULL);
	kernels k = make_kernels(ctx);
	float init[LD * C], got[LD * C], tilebuf[4 * 3], back[4 * 3];
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = R,
			   .cols = C, .ld = LD, .tile_rows = 4, .tile_cols = 3};
	odx_buffer *a, *parts[4];

	for (int e = 0; e < LD * C; e++)
		init[e] = (float)e;
	assert_ok(odx_buffer_create(ctx, sizeof(init), 0, &a));
	assert_ok(odx_buffer_write(a, 0, init, sizeof(init), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_partition(a, &p, 4, parts, TEST_TIMEOUT_MS));
	/* Tile (1, 0): rows 4..6, columns 0..2, 3 x 3 packed. */
	assert_int_equal(odx_buffer_size(parts[1]), 9 * sizeof(float));
	assert_ok(odx_buffer_read(parts[1], 0, tilebuf, 9 * sizeof(float), TEST_TIMEOUT_MS));
	for (int j = 0; j < 3; j++)
		for (int i = 0; i < 3; i++)
			assert_true(tilebuf[i + 3 * j] == init[j * LD + 4 + i]);
	/* A partial write across a run boundary: packed bytes 2..5 (elements). */
	for (int e = 0; e < 4; e++)
		tilebuf[e] = -1.0f - (float)e;
	assert_ok(odx_buffer_write(parts[1], 2 * sizeof(float), tilebuf, 4 * sizeof(float),
				   TEST_TIMEOUT_MS));
	/* A kernel on device 1 moves the tile (private: to its own memory), then a read of part
	 * of it comes from there. */
	{
		odx_arg args[] = {ODX_BUF(parts[1], ODX_RW), ODX_I64(3), ODX_I64(3), ODX_LD(0),
				  ODX_F32(1.0f), ODX_F32(0.5f)};

		submit_on(ctx, k.affine, args, 6, 1);
	}
	assert_ok(odx_buffer_read(parts[1], 3 * sizeof(float), back, 5 * sizeof(float),
				  TEST_TIMEOUT_MS));
	assert_true(back[0] == -2.0f + 0.5f); /* packed element 3 = written element 1 */
	assert_true(back[2] == -4.0f + 0.5f);
	assert_true(back[3] == init[2 * LD + 4] + 0.5f); /* packed element 6: column 2, row 4 */
	assert_true(back[4] == init[2 * LD + 5] + 0.5f);
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int e = 0; e < LD * C; e++) {
		int r = e % LD, c = e / LD;
		float w = init[e];

		if (r >= 4 && r < 7 && c < 3) {
			int packed = (r - 4) + 3 * c;

			if (packed >= 2 && packed < 6)
				w = -1.0f - (float)(packed - 2);
			w += 0.5f;
		}
		if (got[e] != w)
			fail_msg("%s: element %d (row %d, col %d) is %g, expected %g", memnode, e, r,
				 c, (double)got[e], (double)w);
	}
	assert_ok(odx_close(ctx));
}

static void test_part_access_private(void **state)
{
	(void)state;
	part_access_run("private");
}

static void test_part_access_shared(void **state)
{
	(void)state;
	part_access_run("shared");
}

/* ---- asynchronous switches ------------------------------------------------------------------ */

static odx_kernel *gate_kernel(odx_context *ctx)
{
	static const odx_param gp[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}};

	return test_host_kernel(ctx, "part_gate", gp, 1, test_gate_fn);
}

/*
 * The switches go into the task stream and return at once. Behind a task that holds the parent
 * (a closed gate): a partition into tiles, every access mode on them from both devices, the
 * gather, a second partition (blocks) with tasks and its gather. None of those calls waits: the
 * gate's task and the first switch are still pending when the last call returns. Then the gate
 * opens, and a read of the parent (ordered after the last gather) sees every step.
 */
static void async_run(const char *memnode)
{
	matrix m = {.rows = 10, .cols = 9, .ld = 12, .tr = 4, .tc = 4};
	odx_context *ctx = open2(memnode, NULL);
	kernels k = make_kernels(ctx);
	odx_kernel *gate = gate_kernel(ctx);
	size_t n = mat_elems(&m), mt = 3, nt = 3;
	float want[12 * 9], got[12 * 9];
	odx_buffer *a, *parts[9], *blocks[3];
	odx_event *ev_gate, *ev_part, *ev_gather;
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = m.rows,
			   .cols = m.cols, .ld = m.ld, .tile_rows = m.tr, .tile_cols = m.tc};
	odx_partition bp = {.kind = ODX_PART_BLOCKS, .elem_size = sizeof(float)};
	odx_task_opts on0 = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0};

	atomic_store(test_gate(), 0);
	for (size_t e = 0; e < n; e++)
		want[e] = (float)(e % 31);
	assert_ok(odx_buffer_create(ctx, sizeof(want), 0, &a));
	assert_ok(odx_buffer_write(a, 0, want, sizeof(want), TEST_TIMEOUT_MS));
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(a, ODX_RW)}, 1, &on0, &ev_gate));
	assert_ok(odx_buffer_partition_async(a, &p, 9, parts, &ev_part));
	assert_rc(odx_event_query(ev_part), ODX_EAGAIN);
	/* The parent refuses its users from the call on, as after a synchronous partition. */
	assert_rc(odx_buffer_read(a, 0, got, 4, TEST_TIMEOUT_MS), ODX_EBUSY);
	assert_rc(odx_buffer_partition_async(a, &p, 9, blocks, NULL), ODX_EBUSY);
	for (size_t j = 0; j < nt; j++)
		for (size_t i = 0; i < mt; i++) {
			size_t q = i + j * mt;
			tile t = tile_of(&m, i, j);
			int d = (int)((i + j) % 2);
			float base = (float)(q * 100);
			bool do_fill = q % 3 == 0;
			odx_arg fill[] = {ODX_BUF(parts[q], ODX_W), ODX_I64(t.len), ODX_I64(t.runs),
					  ODX_LD(0), ODX_F32(base)};
			odx_arg aff[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(t.len), ODX_I64(t.runs),
					 ODX_LD(0), ODX_F32(2.0f), ODX_F32((float)q)};

			if (do_fill)
				submit_on(ctx, k.fill, fill, 5, d);
			submit_on(ctx, k.affine, aff, 6, 1 - d);
			for (int64_t jj = 0; jj < t.runs; jj++)
				for (int64_t ii = 0; ii < t.len; ii++) {
					float *x = &want[tile_elem(&m, &t, ii, jj)];

					if (do_fill)
						*x = base + (float)ii + 100.0f * (float)jj;
					*x = *x * 2.0f + (float)q;
				}
		}
	assert_ok(odx_buffer_unpartition_async(a, &ev_gather));
	/* The part handles are dead from the call on; the parent is usable again. */
	assert_rc(odx_submit(ctx, k.affine,
			     (odx_arg[]){ODX_BUF(parts[0], ODX_RW), ODX_I64(4), ODX_I64(4), ODX_LD(0),
					 ODX_F32(1.0f), ODX_F32(0.0f)},
			     6, NULL, NULL),
		  ODX_EINVAL);
	assert_rc(odx_buffer_unpartition_async(a, NULL), ODX_EINVAL);
	/* Blocks over the whole ld x cols storage, padding included: 108 elements in 3. */
	assert_ok(odx_buffer_partition_async(a, &bp, 3, blocks, NULL));
	for (int q = 0; q < 3; q++) {
		odx_arg aff[] = {ODX_BUF(blocks[q], ODX_RW), ODX_I64(36), ODX_I64(1), ODX_LD(0),
				 ODX_F32(1.0f), ODX_F32(1000.0f * (float)(q + 1))};

		submit_on(ctx, k.affine, aff, 6, q % 2);
		for (int e = 36 * q; e < 36 * (q + 1); e++)
			want[e] += 1000.0f * (float)(q + 1);
	}
	assert_ok(odx_buffer_unpartition_async(a, NULL));
	/* Nothing above waited: the gate still holds the parent, and the first switch with it. */
	assert_rc(odx_event_query(ev_gate), ODX_EAGAIN);
	assert_rc(odx_event_query(ev_part), ODX_EAGAIN);
	assert_rc(odx_event_query(ev_gather), ODX_EAGAIN);
	atomic_store(test_gate(), 1);
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (size_t e = 0; e < n; e++)
		if (got[e] != want[e])
			fail_msg("%s: element %zu is %g, expected %g", memnode, e, (double)got[e],
				 (double)want[e]);
	assert_ok(odx_event_wait(ev_gate, TEST_TIMEOUT_MS));
	assert_ok(odx_event_wait(ev_part, TEST_TIMEOUT_MS));
	assert_ok(odx_event_wait(ev_gather, TEST_TIMEOUT_MS));
	odx_event_release(ev_gate);
	odx_event_release(ev_part);
	odx_event_release(ev_gather);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_close(ctx));
}

static void test_async_private(void **state)
{
	(void)state;
	async_run("private");
}

static void test_async_shared(void **state)
{
	(void)state;
	async_run("shared");
}

/*
 * Failures through asynchronous switches: a partition whose parent's last writer failed still
 * makes its parts but fails with that cause, and so do the tasks that read them; a gather whose
 * part's writer failed ends the partition, fails with the cause, and so does a read of the
 * parent, until the parent is written again.
 */
static void test_async_failures(void **state)
{
	static const odx_param p1[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I32, 0, "v"}};
	odx_context *ctx = open2("shared", NULL);
	kernels k = make_kernels(ctx);
	odx_kernel *bad = test_host_kernel(ctx, "part_fail", p1, 2, fail_fn);
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_buffer *a, *parts[2];
	odx_event *ev, *ev_r, *ev_w;
	uint32_t x[16], zeros[16] = {0};

	(void)state;
	assert_ok(odx_buffer_create(ctx, sizeof(x), 0, &a));
	assert_ok(odx_submit(ctx, bad, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I32(1)}, 2, NULL, NULL));
	assert_ok(odx_buffer_partition_async(a, &p, 2, parts, &ev));
	/* A reader of a part is canceled; a task that writes one whole runs. */
	assert_ok(odx_submit(ctx, k.add, (odx_arg[]){ODX_BUF(parts[0], ODX_RW), ODX_I32(1)}, 2,
			     NULL, &ev_r));
	assert_ok(odx_submit(ctx, k.fill,
			     (odx_arg[]){ODX_BUF(parts[1], ODX_W), ODX_I64(8), ODX_I64(1), ODX_LD(0),
					 ODX_F32(0.0f)},
			     5, NULL, &ev_w));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_event_message(ev), "fails on purpose");
	assert_rc(odx_event_wait(ev_r, TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_ok(odx_event_wait(ev_w, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	odx_event_release(ev_r);
	odx_event_release(ev_w);
	/* parts[0]'s last writer was canceled: the gather fails with the first cause, and the
	 * parent's readers with it. */
	assert_ok(odx_buffer_unpartition_async(a, &ev));
	assert_rc(odx_buffer_read(a, 0, x, sizeof(x), TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_last_error(ctx), "fails on purpose");
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_ECANCELED);
	odx_event_release(ev);
	/* odx_wait_all reports the first failure (the kernel), then the context is clean. */
	assert_rc(odx_wait_all(ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_ok(odx_buffer_write(a, 0, zeros, sizeof(zeros), TEST_TIMEOUT_MS));
	/* The same failure inside a partition: a part's writer fails. */
	assert_ok(odx_buffer_partition_async(a, &p, 2, parts, &ev));
	assert_ok(odx_submit(ctx, bad, (odx_arg[]){ODX_BUF(parts[0], ODX_RW), ODX_I32(1)}, 2, NULL,
			     NULL));
	assert_ok(odx_submit(ctx, k.add, (odx_arg[]){ODX_BUF(parts[1], ODX_RW), ODX_I32(5)}, 2,
			     NULL, NULL));
	assert_ok(odx_buffer_unpartition_async(a, NULL));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_rc(odx_buffer_read(a, 0, x, sizeof(x), TEST_TIMEOUT_MS), ODX_ECANCELED);
	assert_contains(odx_last_error(ctx), "fails on purpose");
	assert_rc(odx_wait_all(ctx, TEST_TIMEOUT_MS), ODX_EKERNEL);
	/* The partition ended: written again (whole: a partial write reads the failed bytes
	 * around it, and is canceled), the parent is a plain buffer. */
	assert_rc(odx_buffer_write(a, 0, zeros, 8 * sizeof(uint32_t), TEST_TIMEOUT_MS),
		  ODX_ECANCELED);
	zeros[9] = 9;
	assert_ok(odx_buffer_write(a, 0, zeros, sizeof(zeros), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, x, sizeof(x), TEST_TIMEOUT_MS));
	assert_memory_equal(x, zeros, sizeof(x));
	assert_ok(odx_close(ctx));
}

/* The synchronous calls' timeout covers the users they wait for: past it nothing changed. */
static void test_sync_timeout(void **state)
{
	odx_context *ctx = open2("shared", NULL);
	kernels k = make_kernels(ctx);
	odx_kernel *gate = gate_kernel(ctx);
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	odx_buffer *a, *parts[2], *more[2];
	uint32_t x[8];

	(void)state;
	atomic_store(test_gate(), 0);
	assert_ok(odx_buffer_create(ctx, sizeof(x), 0, &a));
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(a, ODX_RW)}, 1, NULL, NULL));
	assert_rc(odx_buffer_partition(a, &p, 2, parts, 20), ODX_ETIMEDOUT);
	/* Not partitioned: the parent takes tasks. */
	assert_ok(odx_submit(ctx, k.add, (odx_arg[]){ODX_BUF(a, ODX_RW), ODX_I32(3)}, 2, NULL,
			     NULL));
	atomic_store(test_gate(), 1);
	assert_ok(odx_buffer_partition(a, &p, 2, parts, TEST_TIMEOUT_MS));
	atomic_store(test_gate(), 0);
	assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(parts[1], ODX_RW)}, 1, NULL, NULL));
	assert_rc(odx_buffer_unpartition(a, 20), ODX_ETIMEDOUT);
	/* Still partitioned: the parts take tasks, the parent refuses them. */
	assert_ok(odx_submit(ctx, k.add, (odx_arg[]){ODX_BUF(parts[1], ODX_RW), ODX_I32(4)}, 2,
			     NULL, NULL));
	assert_rc(odx_buffer_partition(a, &p, 2, more, 0), ODX_EBUSY);
	atomic_store(test_gate(), 1);
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, x, sizeof(x), TEST_TIMEOUT_MS));
	for (int i = 0; i < 8; i++)
		assert_int_equal(x[i], i < 4 ? 3u : 7u);
	assert_ok(odx_close(ctx));
}

/*
 * A registered parent destroyed behind asynchronous switches, the gate holding it: with its
 * partition pending (the destruction takes the parts and writes their bytes into user memory),
 * and with its gather pending. odx_buffer_destroy never blocks; the memory holds the results once
 * odx_wait_all returns.
 */
static void test_async_destroy(void **state)
{
	odx_context *ctx = open2("private", NULL);
	kernels k = make_kernels(ctx);
	odx_kernel *gate = gate_kernel(ctx);
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	uint32_t user[12];
	odx_buffer *a, *parts[3];

	(void)state;
	for (int pass = 0; pass < 2; pass++) {
		atomic_store(test_gate(), 0);
		for (int i = 0; i < 12; i++)
			user[i] = (uint32_t)i;
		assert_ok(odx_buffer_register(ctx, user, sizeof(user), 0, &a));
		assert_ok(odx_submit(ctx, gate, (odx_arg[]){ODX_BUF(a, ODX_RW)}, 1, NULL, NULL));
		assert_ok(odx_buffer_partition_async(a, &p, 3, parts, NULL));
		for (int q = 0; q < 3; q++)
			submit_on(ctx, k.add,
				  (odx_arg[]){ODX_BUF(parts[q], ODX_RW), ODX_I32(100 * (q + 1))}, 2,
				  (q + 1) % 2);
		if (pass == 1)
			assert_ok(odx_buffer_unpartition_async(a, NULL));
		assert_ok(odx_buffer_destroy(a));
		atomic_store(test_gate(), 1);
		assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
		for (int i = 0; i < 12; i++)
			assert_int_equal(user[i], (uint32_t)i + 100u * (uint32_t)(i / 4 + 1));
	}
	assert_ok(odx_close(ctx));
}

/*
 * Tiles under memory pressure on every tier: a small host tier with a disk tier, and small
 * private device tiers. The parent is spilled to disk before its partition (the switch reloads
 * it), stays in host memory while partitioned (other buffers spill instead), its tiles' device
 * copies are written back into it to make room, and it spills again after the gather; every byte
 * as computed here. Synchronous and asynchronous switches alternate.
 */
static void test_tiles_spilled(void **state)
{
	enum { R = 100, C = 96, LD = 104, T = 16, MT = 7, NT = 6, NF = 8, FN = 4096 };
	char dir[] = "/tmp/odx-part-XXXXXX";
	const char *kv[] = {"tier.device.limit", "16KiB",	"tier.host.limit", "112KiB",
			    "tier.disk.limit",	 "16MiB",	"tier.disk.path",  dir,
			    NULL};
	matrix m = {.rows = R, .cols = C, .ld = LD, .tr = T, .tc = T};
	odx_context *ctx;
	kernels k;
	static float want[LD * C], got[LD * C];
	static uint32_t fv[FN];
	odx_buffer *a, *parts[MT * NT], *f[NF];
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = R,
			   .cols = C, .ld = LD, .tile_rows = T, .tile_cols = T};

	(void)state;
	assert_non_null(mkdtemp(dir));
	ctx = open2("private", kv);
	k = make_kernels(ctx);
	for (size_t e = 0; e < LD * C; e++)
		want[e] = (float)(e % 113);
	assert_ok(odx_buffer_create(ctx, sizeof(want), 0, &a));
	assert_ok(odx_buffer_write(a, 0, want, sizeof(want), TEST_TIMEOUT_MS));
	/* Fillers of 16 KiB, written after the parent: 128 KiB more than host memory holds. */
	for (int i = 0; i < NF; i++) {
		for (int e = 0; e < FN; e++)
			fv[e] = (uint32_t)(i * 7 + e);
		assert_ok(odx_buffer_create(ctx, sizeof(fv), 0, &f[i]));
		assert_ok(odx_buffer_write(f[i], 0, fv, sizeof(fv), TEST_TIMEOUT_MS));
	}
	for (int round = 0; round < 2; round++) {
		bool async = round == 1;

		if (async)
			assert_ok(odx_buffer_partition_async(a, &p, MT * NT, parts, NULL));
		else
			assert_ok(odx_buffer_partition(a, &p, MT * NT, parts, TEST_TIMEOUT_MS));
		for (int pass = 0; pass < 2; pass++) {
			for (size_t j = 0; j < NT; j++)
				for (size_t i = 0; i < MT; i++) {
					size_t q = i + j * MT;
					tile t = tile_of(&m, i, j);
					float b = (float)(q + (size_t)pass);
					odx_arg aff[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(t.len),
							 ODX_I64(t.runs), ODX_LD(0), ODX_F32(3.0f),
							 ODX_F32(b)};

					submit_on(ctx, k.affine, aff, 6, (int)((q + (size_t)pass) % 2));
					for (int64_t jj = 0; jj < t.runs; jj++)
						for (int64_t ii = 0; ii < t.len; ii++) {
							float *x = &want[tile_elem(&m, &t, ii, jj)];

							*x = *x * 3.0f + b;
						}
				}
			/* Host pressure while partitioned: the fillers move through host memory. */
			for (int i = 0; i < NF; i++)
				submit_on(ctx, k.add, (odx_arg[]){ODX_BUF(f[i], ODX_RW), ODX_I32(1)},
					  2, i % 2);
		}
		if (async)
			assert_ok(odx_buffer_unpartition_async(a, NULL));
		else
			assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
		/* And after it, so that the parent may spill again. */
		for (int i = 0; i < NF; i++)
			submit_on(ctx, k.add, (odx_arg[]){ODX_BUF(f[i], ODX_RW), ODX_I32(1)}, 2,
				  (i + 1) % 2);
	}
	assert_ok(odx_buffer_read(a, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (size_t e = 0; e < LD * C; e++)
		if (got[e] != want[e])
			fail_msg("element %zu (row %zu, col %zu) is %g, expected %g", e, e % LD,
				 e / LD, (double)got[e], (double)want[e]);
	for (int i = 0; i < NF; i++) {
		assert_ok(odx_buffer_read(f[i], 0, fv, sizeof(fv), TEST_TIMEOUT_MS));
		for (int e = 0; e < FN; e++)
			if (fv[e] != (uint32_t)(i * 7 + e) + 6u)
				fail_msg("filler %d element %d is %u", i, e, fv[e]);
	}
	/* A parent larger than host memory cannot stay there while partitioned: refused. */
	{
		odx_buffer *big;
		odx_partition bp = {.kind = ODX_PART_BLOCKS, .elem_size = 4};

		assert_ok(odx_buffer_create(ctx, 256u << 10, 0, &big));
		assert_rc(odx_buffer_partition_async(big, &bp, 2, parts, NULL), ODX_ENOSPC);
		assert_contains(odx_last_error(ctx), "tier.host.limit");
		assert_rc(odx_buffer_partition(big, &bp, 2, parts, TEST_TIMEOUT_MS), ODX_ENOSPC);
	}
	assert_ok(odx_close(ctx));
	print_message("tiles spilled: %llu spills, %llu reloads, %llu device write-backs\n",
		      test_stat_sum("disk tier", "spills"), test_stat_sum("disk tier", "reloads"),
		      test_stat_sum("tier node", "dirty"));
	assert_true(test_stat_sum("disk tier", "spills") > 0);
	assert_true(test_stat_sum("disk tier", "reloads") > 0);
	assert_true(test_stat_sum("tier node", "dirty") > 0);
	assert_int_equal(rmdir(dir), 0); /* the spill area is gone at close */
}

/* ---- a GPU backend (Vulkan on lavapipe, OpenCL on PoCL), where one is available ------------- */

/* Tiles between a CPU device working on them in place (ODX_LD = the parent's ld) and a device of
 * `backend` working on packed copies with the standard scale_f32 (a packed tile is contiguous):
 * every move between them is a strided copy, the backend's copy_2d or one copy per run. Returns
 * false (and prints why) when the backend has no device here. */
static bool gpu_tiles_run(const char *backend)
{
	enum { R = 37, C = 29, LD = 41, TR = 16, TC = 8, MT = 3, NT = 4 };
	char key[64], backends[64];
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel *scale;
	kernels k;
	odx_buffer *a, *parts[MT * NT];
	float *want = malloc(LD * C * sizeof(float)), *got = malloc(LD * C * sizeof(float));
	odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = R,
			   .cols = C, .ld = LD, .tile_rows = TR, .tile_cols = TC};
	int gpu = -1, host = -1;

	snprintf(key, sizeof(key), "%s.allow_cpu", backend);
	snprintf(backends, sizeof(backends), "host,%s", backend);
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "backends", backends));
	assert_ok(odx_config_set(cfg, "host.devices", "1"));
	assert_ok(odx_config_set(cfg, "host.memnode", "shared"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, key, "true"));
	if (odx_open(&ctx, cfg) != 0) {
		print_message("%s: cannot open a context: %s\n", backend, odx_config_error(cfg));
		odx_config_destroy(cfg);
		free(want);
		free(got);
		return false;
	}
	odx_config_destroy(cfg);
	for (int d = 0; d < odx_device_count(ctx); d++) {
		odx_device_info info;

		assert_ok(odx_device_get_info(ctx, d, &info));
		if (info.kind == ODX_BACKEND_HOST)
			host = d;
		else if (gpu < 0)
			gpu = d;
	}
	if (gpu < 0 || host < 0) {
		print_message("%s: no device of that backend here: skipped\n", backend);
		assert_ok(odx_close(ctx));
		free(want);
		free(got);
		return false;
	}
	k = make_kernels(ctx);
	assert_ok(odx_kernel_builtin(ctx, "odx.scale_f32", &scale));
	for (int e = 0; e < LD * C; e++)
		want[e] = (float)(e % 89);
	assert_ok(odx_buffer_create(ctx, LD * C * sizeof(float), 0, &a));
	assert_ok(odx_buffer_write(a, 0, want, LD * C * sizeof(float), TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_partition(a, &p, MT * NT, parts, TEST_TIMEOUT_MS));
	for (int round = 0; round < 2; round++)
		for (int j = 0; j < NT; j++)
			for (int i = 0; i < MT; i++) {
				int q = i + j * MT, h = R - i * TR < TR ? R - i * TR : TR;
				int w = C - j * TC < TC ? C - j * TC : TC, n = h * w;
				odx_arg sc[] = {ODX_BUF(parts[q], ODX_RW), ODX_F32(2.0f), ODX_I32(n)};
				odx_arg af[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64(h), ODX_I64(w),
						ODX_LD(0), ODX_F32(1.0f), ODX_F32((float)q)};
				odx_task_opts o = {.device = gpu + 1,
						   .grid = {(uint32_t)(n + 63) / 64, 1, 1},
						   .block = {64, 1, 1}};

				assert_ok(odx_submit(ctx, scale, sc, 3, &o, NULL));
				submit_on(ctx, k.affine, af, 6, host);
				for (int jj = 0; jj < w; jj++)
					for (int ii = 0; ii < h; ii++) {
						float *x = &want[(j * TC + jj) * LD + i * TR + ii];

						*x = *x * 2.0f + (float)q;
					}
			}
	/* A last scale on the device: unpartition writes those tiles back from there. */
	for (int q = 0; q < MT * NT; q += 2) {
		int i = q % MT, j = q / MT, h = R - i * TR < TR ? R - i * TR : TR;
		int w = C - j * TC < TC ? C - j * TC : TC, n = h * w;
		odx_arg sc[] = {ODX_BUF(parts[q], ODX_RW), ODX_F32(3.0f), ODX_I32(n)};
		odx_task_opts o = {.device = gpu + 1, .grid = {(uint32_t)(n + 63) / 64, 1, 1},
				   .block = {64, 1, 1}};

		assert_ok(odx_submit(ctx, scale, sc, 3, &o, NULL));
		for (int jj = 0; jj < w; jj++)
			for (int ii = 0; ii < h; ii++)
				want[(j * TC + jj) * LD + i * TR + ii] *= 3.0f;
	}
	assert_ok(odx_buffer_unpartition(a, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(a, 0, got, LD * C * sizeof(float), TEST_TIMEOUT_MS));
	for (int e = 0; e < LD * C; e++)
		if (got[e] != want[e])
			fail_msg("%s: element %d (row %d, col %d) is %g, expected %g", backend, e,
				 e % LD, e / LD, (double)got[e], (double)want[e]);
	assert_ok(odx_close(ctx));
	free(want);
	free(got);
	return true;
}

static void test_gpu_backends(void **state)
{
	bool ran = false;

	(void)state;
	ran |= gpu_tiles_run("vulkan");
	ran |= gpu_tiles_run("opencl");
	if (!ran)
		skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tiles_col_private),   cmocka_unit_test(test_tiles_row_private),
		cmocka_unit_test(test_tiles_col_shared),    cmocka_unit_test(test_tiles_row_shared),
		cmocka_unit_test(test_blocks_private),	    cmocka_unit_test(test_blocks_shared),
		cmocka_unit_test(test_refusals),	    cmocka_unit_test(test_registered),
		cmocka_unit_test(test_failed_part),
		cmocka_unit_test(test_part_access_private), cmocka_unit_test(test_part_access_shared),
		cmocka_unit_test(test_tiles_evicted),	    cmocka_unit_test(test_gpu_backends),
		cmocka_unit_test(test_async_private),	    cmocka_unit_test(test_async_shared),
		cmocka_unit_test(test_async_failures),	    cmocka_unit_test(test_sync_timeout),
		cmocka_unit_test(test_async_destroy),	    cmocka_unit_test(test_tiles_spilled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
