/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_partition.c - partitions on several ranks (docs/partitions.md, "Several ranks"), run as
 * every rank of a job started by scripts/odx-run (2 or 4 ranks, tcp or shm).
 *
 * Three parents: a registered column-major matrix (every rank's own memory, the same bytes), a
 * row-major one whose latest bytes are on the last rank only when it is partitioned (a task there
 * wrote them: the partition brings them to every rank), and a buffer cut into 1D blocks. Tiles
 * get owners round-robin over the ranks, so each one is written on its owner; every tile then
 * adds a neighbour tile that another rank wrote (a strided part sent packed and received into its
 * runs inside the parent), and is written again (some tiles first overwritten whole, write-only).
 * After unpartition every rank's parent, and every rank's registered memory itself, must equal
 * the same computation done here, padding between the tiles untouched. Each matrix goes through
 * this twice, with synchronous and then with asynchronous switches (inserted at the same point of
 * every rank's stream), and the blocks end with two asynchronous partitions back to back, nothing
 * waited for in between.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "odx/odx.h"

#define TIMEOUT_MS 120000

static int rank_ = -1;

#include "dist_check.h"

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

/* x = x * 2 + v over a tile in place (RW x, I64 len, I64 runs, I64 ld, F32 v). */
static int update_fn(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	int64_t len = i64_arg(l, 1), runs = i64_arg(l, 2), ld = i64_arg(l, 3);
	float v = *(const float *)l->scalars[4];

	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			x[j * ld + i] = x[j * ld + i] * 2.0f + v;
	return 0;
}

/* x = v + i + 10 j over a tile, written only (W x, I64 len, I64 runs, I64 ld, F32 v). */
static int fill_fn(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	int64_t len = i64_arg(l, 1), runs = i64_arg(l, 2), ld = i64_arg(l, 3);
	float v = *(const float *)l->scalars[4];

	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			x[j * ld + i] = v + (float)i + 10.0f * (float)j;
	return 0;
}

/* x += y, two tiles of one shape (RW x, R y, I64 len, I64 runs, I64 ldx, I64 ldy). */
static int add_fn(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	const float *y = l->buffers[1];
	int64_t len = i64_arg(l, 2), runs = i64_arg(l, 3), ldx = i64_arg(l, 4), ldy = i64_arg(l, 5);

	for (int64_t j = 0; j < runs; j++)
		for (int64_t i = 0; i < len; i++)
			x[j * ldx + i] += y[j * ldy + i];
	return 0;
}

static odx_kernel *make_kernel(odx_context *ctx, const char *name, const odx_param *p, int n,
			       odx_host_fn fn)
{
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN,
				.host_fn = fn};
	odx_kernel *k = NULL;

	CHECK(ctx, odx_kernel_create(ctx, name, p, n, &v, 1, &k));
	return k;
}

typedef struct kernels {
	odx_kernel *update, *add, *fill;
} kernels;

/* A matrix as the test sees it, and its tile (i, j): first element, run length, runs. */
typedef struct tile {
	size_t first, len, runs;
} tile;

static tile tile_of(const odx_partition *p, size_t i, size_t j)
{
	size_t r0 = i * p->tile_rows, c0 = j * p->tile_cols;
	size_t h = p->rows - r0 < p->tile_rows ? p->rows - r0 : p->tile_rows;
	size_t w = p->cols - c0 < p->tile_cols ? p->cols - c0 : p->tile_cols;

	if (p->row_major)
		return (tile){r0 * p->ld + c0, w, h};
	return (tile){c0 * p->ld + r0, h, w};
}

static void model_update(float *m, const odx_partition *p, tile t, float v)
{
	for (size_t j = 0; j < t.runs; j++)
		for (size_t i = 0; i < t.len; i++)
			m[t.first + j * p->ld + i] = m[t.first + j * p->ld + i] * 2.0f + v;
}

static void model_fill(float *m, const odx_partition *p, tile t, float v)
{
	for (size_t j = 0; j < t.runs; j++)
		for (size_t i = 0; i < t.len; i++)
			m[t.first + j * p->ld + i] = v + (float)i + 10.0f * (float)j;
}

static void model_add(float *m, const odx_partition *p, tile x, tile y)
{
	for (size_t j = 0; j < x.runs; j++)
		for (size_t i = 0; i < x.len; i++)
			m[x.first + j * p->ld + i] += m[y.first + j * p->ld + i];
}

/*
 * Partitions `a` (whose bytes are `model`), gives tile q to rank q % size, and runs: an update of
 * every tile on its owner, then every tile adds the next tile of the same shape in its tile
 * column (another owner: a transfer of a strided part), then a second update. Unpartitions and
 * checks the parent (and `user`, registered memory, when not NULL) against the model.
 */
static void tiles_run(odx_context *ctx, kernels *k, odx_buffer *a, const odx_partition *p,
		      float *model, const float *user, size_t bytes, const char *what, bool async)
{
	size_t mt = (p->rows + p->tile_rows - 1) / p->tile_rows;
	size_t nt = (p->cols + p->tile_cols - 1) / p->tile_cols, n = mt * nt;
	int size = odx_size(ctx);
	odx_buffer **parts = calloc(n, sizeof(*parts));
	float *got = malloc(bytes);

	/* Asynchronous switches: every rank inserts them at the same point of its stream. */
	if (async)
		CHECK(ctx, odx_buffer_partition_async(a, p, (int)n, parts, NULL));
	else
		CHECK(ctx, odx_buffer_partition(a, p, (int)n, parts, TIMEOUT_MS));
	for (size_t q = 0; q < n; q++)
		CHECK(ctx, odx_buffer_set_owner(parts[q], (int)(q % (size_t)size)));
	for (int round = 0; round < 2; round++) {
		for (size_t j = 0; j < nt; j++)
			for (size_t i = 0; i < mt; i++) {
				size_t q = i + j * mt;
				tile t = tile_of(p, i, j);
				float v = (float)(q + 10 * (size_t)round);
				odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64((int64_t)t.len),
						  ODX_I64((int64_t)t.runs), ODX_LD(0), ODX_F32(v)};

				/* Some tiles overwritten whole first (write-only access). */
				if (round == 1 && q % 3 == 1) {
					args[0].access = ODX_W;
					args[4] = ODX_F32(-v);
					CHECK(ctx, odx_submit(ctx, k->fill, args, 5, NULL, NULL));
					model_fill(model, p, t, -v);
					args[0].access = ODX_RW;
					args[4] = ODX_F32(v);
				}
				CHECK(ctx, odx_submit(ctx, k->update, args, 5, NULL, NULL));
				model_update(model, p, t, v);
			}
		if (round == 1)
			break;
		/* Tile (i, j) += tile (i + 1, j) where both have full size: a neighbour's part. */
		for (size_t j = 0; j < nt; j++)
			for (size_t i = 0; i + 2 < mt; i++) {
				size_t q = i + j * mt;
				tile x = tile_of(p, i, j), y = tile_of(p, i + 1, j);
				odx_arg args[] = {ODX_BUF(parts[q], ODX_RW),
						  ODX_BUF(parts[q + 1], ODX_R),
						  ODX_I64((int64_t)x.len),
						  ODX_I64((int64_t)x.runs),
						  ODX_LD(0),
						  ODX_LD(1)};

				if (x.len != y.len || x.runs != y.runs)
					continue;
				CHECK(ctx, odx_submit(ctx, k->add, args, 6, NULL, NULL));
				model_add(model, p, x, y);
			}
	}
	if (async) {
		/* The read waits for the gather (its writer): then the memory holds it too. */
		CHECK(ctx, odx_buffer_unpartition_async(a, NULL));
		CHECK(ctx, odx_buffer_read(a, 0, got, bytes, TIMEOUT_MS));
	} else {
		CHECK(ctx, odx_buffer_unpartition(a, TIMEOUT_MS));
	}
	/* The registered memory itself holds every part on every rank: the gather is collective. */
	if (user && memcmp(user, model, bytes) != 0) {
		for (size_t e = 0; e < bytes / 4; e++)
			if (user[e] != model[e]) {
				fprintf(stderr, "rank %d: %s: registered memory, element %zu: %g, "
					"expected %g\n", rank_, what, e, (double)user[e],
					(double)model[e]);
				break;
			}
		exit(1);
	}
	CHECK(ctx, odx_buffer_read(a, 0, got, bytes, TIMEOUT_MS));
	for (size_t e = 0; e < bytes / 4; e++)
		if (got[e] != model[e]) {
			fprintf(stderr, "rank %d: %s: element %zu: %g, expected %g\n", rank_, what, e,
				(double)got[e], (double)model[e]);
			exit(1);
		}
	free(got);
	free(parts);
}

/* 1D blocks of u32 written on their owners, then the parent read on every rank. */
static void blocks_run(odx_context *ctx, kernels *k)
{
	enum { ELEMS = 1000, NB = 7 };
	odx_partition p = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
	float model[ELEMS], got[ELEMS];
	odx_buffer *b, *parts[NB];
	int size = odx_size(ctx);

	for (int e = 0; e < ELEMS; e++)
		model[e] = (float)e;
	CHECK(ctx, odx_buffer_create(ctx, sizeof(model), 0, &b));
	CHECK(ctx, odx_buffer_write(b, 0, model, sizeof(model), TIMEOUT_MS));
	CHECK(ctx, odx_buffer_partition(b, &p, NB, parts, TIMEOUT_MS));
	for (int q = 0; q < NB; q++) {
		size_t len = odx_buffer_size(parts[q]) / 4, first = (size_t)q * 143;
		odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64((int64_t)len), ODX_I64(1),
				  ODX_LD(0), ODX_F32((float)q)};

		CHECK(ctx, odx_buffer_set_owner(parts[q], (q + 1) % size));
		CHECK(ctx, odx_submit(ctx, k->update, args, 5, NULL, NULL));
		for (size_t e = first; e < first + len; e++)
			model[e] = model[e] * 2.0f + (float)q;
	}
	CHECK(ctx, odx_buffer_unpartition(b, TIMEOUT_MS));
	/* Asynchronous switches back to back, nothing waited for in between: two partitions of
	 * 2 and 4 blocks, each block written on another rank than the last. */
	for (int round = 0; round < 2; round++) {
		int nb = 2 * (round + 1);
		odx_partition eq = {.kind = ODX_PART_BLOCKS, .elem_size = 4};

		CHECK(ctx, odx_buffer_partition_async(b, &eq, nb, parts, NULL));
		for (int q = 0; q < nb; q++) {
			size_t len = odx_buffer_size(parts[q]) / 4, first = (size_t)q * (ELEMS / nb);
			odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_I64((int64_t)len),
					  ODX_I64(1), ODX_LD(0), ODX_F32((float)(q + round))};

			CHECK(ctx, odx_buffer_set_owner(parts[q], (q + round) % size));
			CHECK(ctx, odx_submit(ctx, k->update, args, 5, NULL, NULL));
			for (size_t e = first; e < first + len; e++)
				model[e] = model[e] * 2.0f + (float)(q + round);
		}
		CHECK(ctx, odx_buffer_unpartition_async(b, NULL));
	}
	CHECK(ctx, odx_buffer_read(b, 0, got, sizeof(got), TIMEOUT_MS));
	if (memcmp(got, model, sizeof(got)) != 0) {
		fprintf(stderr, "rank %d: blocks: the parent differs from the model\n", rank_);
		exit(1);
	}
	CHECK(ctx, odx_buffer_destroy(b));
}

int main(void)
{
	static const odx_param update[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_I64, 0, "len"},
					   {ODX_ARG_I64, 0, "runs"},	  {ODX_ARG_I64, 0, "ld"},
					   {ODX_ARG_F32, 0, "v"}};
	static const odx_param fill[] = {{ODX_ARG_BUFFER, ODX_W, "x"}, {ODX_ARG_I64, 0, "len"},
					 {ODX_ARG_I64, 0, "runs"},     {ODX_ARG_I64, 0, "ld"},
					 {ODX_ARG_F32, 0, "v"}};
	static const odx_param add[] = {{ODX_ARG_BUFFER, ODX_RW, "x"}, {ODX_ARG_BUFFER, ODX_R, "y"},
					{ODX_ARG_I64, 0, "len"},       {ODX_ARG_I64, 0, "runs"},
					{ODX_ARG_I64, 0, "ldx"},       {ODX_ARG_I64, 0, "ldy"}};
	/* 50 x 45 column-major, ld 53, 16 x 16 tiles (4 x 3, edges of 2 rows and 13 columns);
	 * 45 x 50 row-major, ld 51, 12 x 20 tiles (4 x 3, edges). */
	odx_partition pa = {.kind = ODX_PART_TILES, .elem_size = 4, .rows = 50, .cols = 45,
			    .ld = 53, .tile_rows = 16, .tile_cols = 16};
	odx_partition pb = {.kind = ODX_PART_TILES, .elem_size = 4, .rows = 45, .cols = 50,
			    .ld = 51, .tile_rows = 12, .tile_cols = 20, .row_major = true};
	size_t abytes = 53 * 45 * 4, bbytes = 45 * 51 * 4;
	float *user = malloc(abytes), *model = malloc(abytes > bbytes ? abytes : bbytes);
	odx_context *ctx;
	odx_buffer *a, *b;
	kernels k;
	int size;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	size = odx_size(ctx);
	if (size < 2) {
		fprintf(stderr, "run me with scripts/odx-run -n 2 (or more)\n");
		return 1;
	}
	k.update = make_kernel(ctx, "part_update", update, 5, update_fn);
	k.add = make_kernel(ctx, "part_add", add, 6, add_fn);
	k.fill = make_kernel(ctx, "part_fill", fill, 5, fill_fn);

	/* A registered matrix: every rank's memory holds the same bytes. */
	for (size_t e = 0; e < abytes / 4; e++)
		user[e] = model[e] = (float)(e % 89);
	CHECK(ctx, odx_buffer_register(ctx, user, abytes, 0, &a));
	tiles_run(ctx, &k, a, &pa, model, user, abytes, "registered, column-major", false);
	tiles_run(ctx, &k, a, &pa, model, user, abytes, "registered, column-major, async", true);
	CHECK(ctx, odx_buffer_destroy(a));

	/* Its latest bytes on the last rank only (a task there wrote all of it). */
	CHECK(ctx, odx_buffer_create(ctx, bbytes, 0, &b));
	CHECK(ctx, odx_buffer_set_owner(b, size - 1));
	{
		odx_arg args[] = {ODX_BUF(b, ODX_RW), ODX_I64((int64_t)(bbytes / 4)), ODX_I64(1),
				  ODX_LD(0), ODX_F32(3.0f)};

		/* A new buffer reads as zeros: x * 2 + 3 = 3 everywhere, on the last rank. */
		CHECK(ctx, odx_submit(ctx, k.update, args, 5, NULL, NULL));
		for (size_t e = 0; e < bbytes / 4; e++)
			model[e] = 3.0f;
	}
	tiles_run(ctx, &k, b, &pb, model, NULL, bbytes, "written on one rank, row-major", false);
	/* Again with asynchronous switches, the latest bytes on the last rank again. */
	{
		odx_arg args[] = {ODX_BUF(b, ODX_RW), ODX_I64((int64_t)(bbytes / 4)), ODX_I64(1),
				  ODX_LD(0), ODX_F32(1.0f)};

		CHECK(ctx, odx_submit(ctx, k.update, args, 5, NULL, NULL));
		for (size_t e = 0; e < bbytes / 4; e++)
			model[e] = model[e] * 2.0f + 1.0f;
	}
	tiles_run(ctx, &k, b, &pb, model, NULL, bbytes, "written on one rank, row-major, async",
		  true);
	CHECK(ctx, odx_buffer_destroy(b));

	blocks_run(ctx, &k);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	printf("rank %d of %d: partitions across ranks OK\n", rank_, size);
	CHECK(ctx, odx_close(ctx));
	free(user);
	free(model);
	return 0;
}
