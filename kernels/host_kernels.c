/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host_kernels.c - the host (C) variants of the standard kernels.
 *
 * The kernel sources in src/ are compiled here as C through odx_dialect.h: each kernel becomes a
 * static function run once per work-item, and the wrappers below unpack an odx_host_launch,
 * check that every buffer holds what the scalars promise (a GPU variant cannot refuse a launch;
 * the reference can), and walk the work-groups [group_first, group_first + group_count) and
 * their work-items. Several threads of a host device may run disjoint group ranges at once.
 */
#include <stdio.h>
#include <stdlib.h>

#include "builtin.h"
#include "odx_dialect.h"

#include "src/axpy_f32.cl"
#include "src/copy_u32.cl"
#include "src/fill_u32.cl"
#include "src/gemm_f32.cl"
#include "src/groupby_sum_i32.cl"
#include "src/hash_combine.cl"
#include "src/hash_groupby.cl"
#include "src/hash_partition_u32.cl"
#include "src/hash_partition_u64.cl"
#include "src/histogram_u32.cl"
#include "src/partition_count.cl"
#include "src/partition_rank.cl"
#include "src/reduce_sum_f32.cl"
#include "src/scale_f32.cl"
#include "src/scan_u32.cl"
#include "src/scatter_rows.cl"

/*
 * The work-items a host variant runs: at most 2^31 - 1 per dimension (the kernels' ids are
 * ints, so ODX_GLOBAL_ID and ODX_GLOBAL_SIZE never overflow) and at most HOST_MAX_ITEMS in a
 * launch, counted after skipping the groups that can do nothing, so a mistaken huge grid
 * finishes soon or is refused, never runs for hours.
 */
#define HOST_MAX_ITEMS (1ull << 32)

/* A position in the launch: the work-item `it` of linear group `g` (< end). Groups whose
 * dimension-0 index is ext0 or more are skipped (all their ids are past the data). */
typedef struct walk {
	odx_item it;
	uint64_t g, end;
	uint64_t ext0;
} walk;

static void walk_group(walk *w)
{
	uint64_t g, g0;

	/* Jump over the rest of a row past ext0: a whole row costs one step. */
	while (w->g < w->end && (g0 = w->g % w->it.grid[0]) >= w->ext0)
		w->g += w->it.grid[0] - g0;
	g = w->g;
	w->it.group[0] = (uint32_t)(g % w->it.grid[0]);
	g /= w->it.grid[0];
	w->it.group[1] = (uint32_t)(g % w->it.grid[1]);
	w->it.group[2] = (uint32_t)(g / w->it.grid[1]);
	w->it.local[0] = w->it.local[1] = w->it.local[2] = 0;
}

/* Starts the walk, or refuses the launch (-1, message in l->error). `n0` < 0: every group runs;
 * else a work-item whose dimension-0 id is n0 or more does nothing (a grid-stride kernel over
 * n0 elements), so only ceil(n0 / block.x) groups of each row are visited. */
static int walk_first(walk *w, const odx_host_launch *l, const char *kernel, int64_t n0)
{
	uint64_t items = 1, rows;

	for (int d = 0; d < 3; d++) {
		w->it.grid[d] = l->grid[d] ? l->grid[d] : 1;
		w->it.block[d] = l->block[d] ? l->block[d] : 1;
		if ((uint64_t)w->it.grid[d] * w->it.block[d] > INT32_MAX) {
			snprintf(l->error, l->error_size,
				 "%s: dimension %d has %u x %u work-items, more than 2^31 - 1", kernel,
				 d, w->it.grid[d], w->it.block[d]);
			return -1;
		}
	}
	w->ext0 = w->it.grid[0];
	if (n0 >= 0 && (uint64_t)(n0 + w->it.block[0] - 1) / w->it.block[0] < w->ext0)
		w->ext0 = (uint64_t)(n0 + w->it.block[0] - 1) / w->it.block[0];
	rows = (uint64_t)w->it.grid[1] * w->it.grid[2];
	if (__builtin_mul_overflow(w->ext0 * w->it.block[0], rows, &items) ||
	    __builtin_mul_overflow(items, (uint64_t)w->it.block[1] * w->it.block[2], &items) ||
	    items > HOST_MAX_ITEMS) {
		snprintf(l->error, l->error_size,
			 "%s: grid %u x %u x %u of blocks %u x %u x %u would run more than 2^32 "
			 "work-items on the host (a grid of ceil(n / block) groups is enough)",
			 kernel, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
			 l->block[2]);
		return -1;
	}
	w->g = l->group_first;
	w->end = l->group_first + l->group_count;
	if (w->ext0 == 0) /* no data: not even the rows are worth stepping over */
		w->g = w->end;
	walk_group(w);
	return 0;
}

static void walk_next(walk *w)
{
	odx_item *it = &w->it;

	if (++it->local[0] < it->block[0])
		return;
	it->local[0] = 0;
	if (++it->local[1] < it->block[1])
		return;
	it->local[1] = 0;
	if (++it->local[2] < it->block[2])
		return;
	w->g++;
	walk_group(w);
}

static int32_t arg_i32(const odx_host_launch *l, int p)
{
	return *(const int32_t *)l->scalars[p];
}

static float arg_f32(const odx_host_launch *l, int p)
{
	return *(const float *)l->scalars[p];
}

/* Buffer parameter `b` must hold `count` elements of `elem` bytes (count >= 0). */
static int check_buffer(const odx_host_launch *l, const char *kernel, int b, int64_t count,
			size_t elem)
{
	if (count < 0) {
		snprintf(l->error, l->error_size, "%s: negative element count %lld", kernel,
			 (long long)count);
		return -1;
	}
	if ((uint64_t)count * elem > l->buffer_sizes[b]) {
		snprintf(l->error, l->error_size,
			 "%s: buffer %d holds %zu bytes, the launch needs %llu x %zu", kernel, b,
			 l->buffer_sizes[b], (unsigned long long)count, elem);
		return -1;
	}
	return 0;
}

static int fail(const odx_host_launch *l, const char *msg)
{
	snprintf(l->error, l->error_size, "%s", msg);
	return -1;
}

int odx__host_fill_u32(const odx_host_launch *l)
{
	int32_t value = arg_i32(l, 1), n = arg_i32(l, 2);
	walk w;

	if (check_buffer(l, "odx.fill_u32", 0, n, 4) || walk_first(&w, l, "odx.fill_u32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_fill_u32(&w.it, l->buffers[0], value, n);
	return 0;
}

int odx__host_copy_u32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2);
	walk w;

	if (check_buffer(l, "odx.copy_u32", 0, n, 4) || check_buffer(l, "odx.copy_u32", 1, n, 4) ||
	    walk_first(&w, l, "odx.copy_u32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_copy_u32(&w.it, l->buffers[0], l->buffers[1], n);
	return 0;
}

int odx__host_scale_f32(const odx_host_launch *l)
{
	float a = arg_f32(l, 1);
	int32_t n = arg_i32(l, 2);
	walk w;

	if (check_buffer(l, "odx.scale_f32", 0, n, 4) || walk_first(&w, l, "odx.scale_f32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_scale_f32(&w.it, l->buffers[0], a, n);
	return 0;
}

int odx__host_axpy_f32(const odx_host_launch *l)
{
	float a = arg_f32(l, 2);
	int32_t n = arg_i32(l, 3);
	walk w;

	if (check_buffer(l, "odx.axpy_f32", 0, n, 4) || check_buffer(l, "odx.axpy_f32", 1, n, 4) ||
	    walk_first(&w, l, "odx.axpy_f32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_axpy_f32(&w.it, l->buffers[0], l->buffers[1], a, n);
	return 0;
}

int odx__host_reduce_sum_f32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2);
	walk w;

	if (l->block[0] > ODX_REDUCE_MAX_BLOCK || l->block[1] > 1 || l->block[2] > 1 ||
	    l->grid[1] > 1 || l->grid[2] > 1)
		return fail(l, "odx.reduce_sum_f32: needs a 1-D launch with block.x <= 256");
	if (check_buffer(l, "odx.reduce_sum_f32", 0, n, 4) ||
	    check_buffer(l, "odx.reduce_sum_f32", 1, l->grid[0], 4) ||
	    walk_first(&w, l, "odx.reduce_sum_f32", -1))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_reduce_sum_f32(&w.it, l->buffers[0], l->buffers[1], n);
	return 0;
}

int odx__host_gemm_f32(const odx_host_launch *l)
{
	int32_t m = arg_i32(l, 3), n = arg_i32(l, 4), k = arg_i32(l, 5);
	walk w;

	if (l->block[0] != ODX_GEMM_TILE || l->block[1] != ODX_GEMM_TILE || l->block[2] > 1)
		return fail(l, "odx.gemm_f32: needs block = (16, 16, 1)");
	if (m < 0 || n < 0 || k < 0)
		return fail(l, "odx.gemm_f32: negative dimension");
	if (check_buffer(l, "odx.gemm_f32", 0, (int64_t)m * k, 4) ||
	    check_buffer(l, "odx.gemm_f32", 1, (int64_t)k * n, 4) ||
	    check_buffer(l, "odx.gemm_f32", 2, (int64_t)m * n, 4) ||
	    walk_first(&w, l, "odx.gemm_f32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_gemm_f32(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], m, n, k);
	return 0;
}

int odx__host_hash_partition_u32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2), parts = arg_i32(l, 3);
	walk w;

	if (parts < 1)
		return fail(l, "odx.hash_partition_u32: parts must be >= 1");
	if (check_buffer(l, "odx.hash_partition_u32", 0, n, 4) ||
	    check_buffer(l, "odx.hash_partition_u32", 1, n, 4) ||
	    walk_first(&w, l, "odx.hash_partition_u32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_hash_partition_u32(&w.it, l->buffers[0], l->buffers[1], n, parts);
	return 0;
}

/*
 * Private counts, then a merge: the rows this call's groups visit (the kernel's grid-stride
 * order) are counted in memory of this thread, and each nonzero bin is added to `counts` with
 * one atomic add, where the kernel source would take one per row (0.11 s against 0.02 s for
 * 16M rows into a few bins on 2 cores, issue 20). Histograms much wider than the call's rows
 * keep the per-row atomics: clearing and scanning the private copy would cost more.
 */
int odx__host_histogram_u32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2), nbins = arg_i32(l, 3);
	const uint32_t *bins = l->buffers[0];
	uint32_t *counts = l->buffers[1], *priv = NULL;
	uint64_t groups = (uint64_t)l->grid[0] * (l->grid[1] ? l->grid[1] : 1) *
			  (l->grid[2] ? l->grid[2] : 1);
	uint64_t rows = groups ? (uint64_t)(n > 0 ? n : 0) * l->group_count / groups + 1 : 0;
	walk w;

	if (check_buffer(l, "odx.histogram_u32", 0, n, 4) ||
	    check_buffer(l, "odx.histogram_u32", 1, nbins, 4) ||
	    walk_first(&w, l, "odx.histogram_u32", n))
		return 1;
	if (nbins > 0 && (uint64_t)nbins <= 4 * rows + 1024)
		priv = calloc((size_t)nbins, sizeof(*priv));
	if (!priv) { /* wide histogram, or no memory: the kernel's per-row atomics */
		for (; w.g < w.end; walk_next(&w))
			odx_histogram_u32(&w.it, bins, counts, n, nbins);
		return 0;
	}
	for (; w.g < w.end; walk_next(&w)) {
		const odx_item *it = &w.it;
		int64_t step = (int64_t)it->grid[0] * it->block[0];

		for (int64_t i = (int64_t)it->group[0] * it->block[0] + it->local[0]; i < n;
		     i += step)
			if (bins[i] < (uint32_t)nbins)
				priv[bins[i]]++;
	}
	for (int32_t b = 0; b < nbins; b++)
		if (priv[b])
			__atomic_fetch_add(&counts[b], priv[b], __ATOMIC_RELAXED);
	free(priv);
	return 0;
}

int odx__host_groupby_sum_i32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 3), nkeys = arg_i32(l, 4);
	walk w;

	if (check_buffer(l, "odx.groupby_sum_i32", 0, n, 4) ||
	    check_buffer(l, "odx.groupby_sum_i32", 1, n, 4) ||
	    check_buffer(l, "odx.groupby_sum_i32", 2, nkeys, 4) ||
	    walk_first(&w, l, "odx.groupby_sum_i32", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_groupby_sum_i32(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], n, nkeys);
	return 0;
}

/* Launches of the data kernels that split rows into one chunk per group: 1-D only. */
static int check_1d(const odx_host_launch *l, const char *kernel, uint32_t max_block)
{
	if (l->grid[1] > 1 || l->grid[2] > 1 || l->block[1] > 1 || l->block[2] > 1 ||
	    l->block[0] > max_block) {
		snprintf(l->error, l->error_size, "%s: needs a 1-D launch with block.x <= %u",
			 kernel, max_block);
		return -1;
	}
	return 0;
}

static int check_parts(const odx_host_launch *l, const char *kernel, int32_t parts)
{
	if (parts < 1 || parts > ODX_PARTITION_MAX_PARTS) {
		snprintf(l->error, l->error_size, "%s: parts is %d, must be in [1, %d]", kernel,
			 parts, ODX_PARTITION_MAX_PARTS);
		return -1;
	}
	return 0;
}

int odx__host_hash_partition_u64(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2), parts = arg_i32(l, 3);
	walk w;

	if (parts < 1)
		return fail(l, "odx.hash_partition_u64: parts must be >= 1");
	if (check_buffer(l, "odx.hash_partition_u64", 0, n, 8) ||
	    check_buffer(l, "odx.hash_partition_u64", 1, n, 4) ||
	    walk_first(&w, l, "odx.hash_partition_u64", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_hash_partition_u64(&w.it, l->buffers[0], l->buffers[1], n, parts);
	return 0;
}

int odx__host_partition_count(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2), parts = arg_i32(l, 3);
	walk w;

	if (check_1d(l, "odx.partition_count", UINT32_MAX) ||
	    check_parts(l, "odx.partition_count", parts) ||
	    check_buffer(l, "odx.partition_count", 0, n, 4) ||
	    check_buffer(l, "odx.partition_count", 1, (int64_t)parts * l->grid[0], 4) ||
	    walk_first(&w, l, "odx.partition_count", -1))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_partition_count(&w.it, l->buffers[0], l->buffers[1], n, parts);
	return 0;
}

int odx__host_scan_u32(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 2);
	walk w;

	if (check_1d(l, "odx.scan_u32", ODX_DATA_MAX_BLOCK) ||
	    check_buffer(l, "odx.scan_u32", 0, n, 4) ||
	    check_buffer(l, "odx.scan_u32", 1, (int64_t)n + 1, 4) ||
	    walk_first(&w, l, "odx.scan_u32", -1))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_scan_u32(&w.it, l->buffers[0], l->buffers[1], n);
	return 0;
}

int odx__host_partition_rank(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 3), parts = arg_i32(l, 4);
	walk w;

	if (check_1d(l, "odx.partition_rank", ODX_DATA_MAX_BLOCK) ||
	    check_parts(l, "odx.partition_rank", parts) ||
	    check_buffer(l, "odx.partition_rank", 0, n, 4) ||
	    check_buffer(l, "odx.partition_rank", 1, (int64_t)parts * l->grid[0], 4) ||
	    check_buffer(l, "odx.partition_rank", 2, n, 4) ||
	    walk_first(&w, l, "odx.partition_rank", -1))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_partition_rank(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], n, parts);
	return 0;
}

int odx__host_scatter_rows(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 3), width = arg_i32(l, 4), m = arg_i32(l, 5);
	walk w;

	if (width < 0 || m < 0)
		return fail(l, "odx.scatter_rows: negative width or m");
	if (check_buffer(l, "odx.scatter_rows", 0, (int64_t)n * width, 4) ||
	    check_buffer(l, "odx.scatter_rows", 1, n, 4) ||
	    check_buffer(l, "odx.scatter_rows", 2, (int64_t)m * width, 4) ||
	    walk_first(&w, l, "odx.scatter_rows", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_scatter_rows(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], n, width, m);
	return 0;
}

int odx__host_hash_groupby(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 4), cap = arg_i32(l, 5), kw = arg_i32(l, 6), vk = arg_i32(l, 7);
	static const int value_words[] = {1, 2, 2, 8, 8};
	walk w;

	if (cap < 1 || cap > (1 << 30) || (cap & (cap - 1)) != 0)
		return fail(l, "odx.hash_groupby: capacity must be a power of two in [1, 2^30]");
	if (kw != 1 && kw != 2)
		return fail(l, "odx.hash_groupby: key_words must be 1 (u32 keys) or 2 (u64)");
	if (vk < 0 || vk > 4)
		return fail(l, "odx.hash_groupby: value_kind must be 0 (f32), 1 (f64), 2 (i64), "
			       "3 (f64 records) or 4 (i64 records)");
	if (check_buffer(l, "odx.hash_groupby", 0, (int64_t)n * kw, 4) ||
	    check_buffer(l, "odx.hash_groupby", 1, (int64_t)n * value_words[vk], 4) ||
	    check_buffer(l, "odx.hash_groupby", 2, ((int64_t)cap + 1) * 5, 8) ||
	    check_buffer(l, "odx.hash_groupby", 3, 1, 4) ||
	    walk_first(&w, l, "odx.hash_groupby", n))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_hash_groupby(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], l->buffers[3],
				 n, cap, kw, vk);
	return 0;
}

int odx__host_hash_combine(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 6), parts = arg_i32(l, 7), kw = arg_i32(l, 8), vk = arg_i32(l, 9);
	int64_t recs = (int64_t)l->grid[0] * ODX_COMBINE_SLOTS;
	walk w;

	if (parts < 1)
		return fail(l, "odx.hash_combine: parts must be >= 1");
	if (kw != 1 && kw != 2)
		return fail(l, "odx.hash_combine: key_words must be 1 (u32 keys) or 2 (u64)");
	if (vk < 0 || vk > 2)
		return fail(l, "odx.hash_combine: value_kind must be 0 (f32), 1 (f64) or 2 (i64)");
	if (check_1d(l, "odx.hash_combine", UINT32_MAX) ||
	    check_buffer(l, "odx.hash_combine", 0, (int64_t)n * kw, 4) ||
	    check_buffer(l, "odx.hash_combine", 1, (int64_t)n * (vk == 0 ? 1 : 2), 4) ||
	    check_buffer(l, "odx.hash_combine", 2, n, 4) ||
	    check_buffer(l, "odx.hash_combine", 3, recs * kw, 4) ||
	    check_buffer(l, "odx.hash_combine", 4, recs * 8, 4) ||
	    check_buffer(l, "odx.hash_combine", 5, recs, 4) ||
	    walk_first(&w, l, "odx.hash_combine", -1))
		return 1;
	for (; w.g < w.end; walk_next(&w))
		odx_hash_combine(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], l->buffers[3],
				 l->buffers[4], l->buffers[5], n, parts, kw, vk);
	return 0;
}
