/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host_kernels.c - the host (C) variants of the standard kernels.
 *
 * The kernel sources in src/ are compiled here as C through odx_dialect.h: each kernel becomes a
 * static function run once per work-item, and the wrappers below unpack an odx_host_launch,
 * check that every buffer holds what the scalars promise (a GPU variant cannot refuse a launch;
 * the reference can), and walk the work-groups [group_first, group_first + group_count) and
 * their work-items. Several threads of a host device may run disjoint group ranges at once.
 *
 * A buffer may be a tile of a partitioned matrix used in place (backend ABI 1.7: buffer_shapes
 * says `count` runs of `width` bytes, `pitch` apart; docs/partitions.md). The element-wise
 * kernels run over stretches where every buffer is contiguous; reduce_sum and gemm read strided
 * inputs from a packed copy and write strided outputs through a packed one, each thread only
 * the elements of its own groups; buffers indexed by value (histogram counts, group-by sums)
 * must be contiguous and are refused otherwise (docs/kernels.md, "Tiles").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int fail(const odx_host_launch *l, const char *msg)
{
	snprintf(l->error, l->error_size, "%s", msg);
	return -1;
}

/* ---- layouts ------------------------------------------------------------------------------- */

/* Buffer parameter b's layout: the backend's shape (ABI 1.7), or one run of its size. */
static odx_shape shape_of(const odx_host_launch *l, int b)
{
	if (l->buffer_shapes && l->buffer_shapes[b].count > 0 && l->buffer_shapes[b].width > 0)
		return l->buffer_shapes[b];
	return (odx_shape){l->buffer_sizes[b], 1, l->buffer_sizes[b]};
}

static bool is_strided(odx_shape s)
{
	return s.count > 1 && s.pitch != s.width;
}

/* The bytes buffer b holds, its runs end to end (a tile's span has gaps). */
static size_t packed_bytes(const odx_host_launch *l, int b)
{
	odx_shape s = shape_of(l, b);

	return is_strided(s) ? s.width * s.count : l->buffer_sizes[b];
}

/* Byte `at` of a buffer's packed contents, in its memory. */
static char *byte_at(void *base, odx_shape s, uint64_t at)
{
	return (char *)base + at / s.width * s.pitch + at % s.width;
}

/* A strided buffer's runs must hold whole elements of `elem` bytes (one never straddles two). */
static int check_runs(const odx_host_launch *l, const char *kernel, int b, size_t elem)
{
	odx_shape s = shape_of(l, b);

	if (!is_strided(s) || s.width % elem == 0)
		return 0;
	snprintf(l->error, l->error_size,
		 "%s: buffer %d is %zu runs of %zu bytes, not a whole number of %zu-byte elements",
		 kernel, b, s.count, s.width, elem);
	return -1;
}

/* Buffer b is indexed by value (an accumulator): a strided one is refused. */
static int check_contiguous(const odx_host_launch *l, const char *kernel, int b, const char *name)
{
	odx_shape s = shape_of(l, b);

	if (!is_strided(s))
		return 0;
	snprintf(l->error, l->error_size,
		 "%s: %s (buffer %d) is a tile in place (%zu runs of %zu bytes, %zu apart); it is "
		 "indexed by value and must be contiguous: a plain buffer or a 1D block",
		 kernel, name, b, s.count, s.width, s.pitch);
	return -1;
}

/* Copies the first `bytes` packed bytes of a strided buffer into `dst`, run by run. */
static void pack(void *dst, const void *src, odx_shape s, size_t bytes)
{
	for (size_t at = 0; at < bytes; at += s.width) {
		size_t n = bytes - at < s.width ? bytes - at : s.width;

		memcpy((char *)dst + at, byte_at((void *)(uintptr_t)src, s, at), n);
	}
}

/* Input buffer b as contiguous memory of `bytes` packed bytes: itself, or a packed copy in
 * *copy (freed by the caller). Each thread packs its own: inputs are never written. */
static const void *packed_input(const odx_host_launch *l, const char *kernel, int b, size_t bytes,
				void **copy)
{
	odx_shape s = shape_of(l, b);

	*copy = NULL;
	if (!is_strided(s))
		return l->buffers[b];
	*copy = malloc(bytes ? bytes : 1);
	if (!*copy) {
		snprintf(l->error, l->error_size, "%s: out of memory packing buffer %d (%zu bytes)",
			 kernel, b, bytes);
		return NULL;
	}
	pack(*copy, l->buffers[b], s, bytes);
	return *copy;
}

/* Buffer b's size against the scalars: it must hold `count` elements of `elem` bytes. */
static int check_buffer(const odx_host_launch *l, const char *kernel, int b, int64_t count,
			size_t elem)
{
	if (count < 0) {
		snprintf(l->error, l->error_size, "%s: negative element count %lld", kernel,
			 (long long)count);
		return -1;
	}
	if ((uint64_t)count * elem > packed_bytes(l, b)) {
		snprintf(l->error, l->error_size,
			 "%s: buffer %d holds %zu bytes, the launch needs %llu x %zu", kernel, b,
			 packed_bytes(l, b), (unsigned long long)count, elem);
		return -1;
	}
	return 0;
}

/* ---- element-wise kernels ------------------------------------------------------------------ */

#define MAX_WISE 3 /* buffers walked element by element in one kernel */

/* Runs the launch's work-items (the walk w) over n elements at p[0 .. nb). */
typedef void (*items_fn)(const odx_host_launch *l, walk *w, void *const *p, int32_t n);

/*
 * An element-wise kernel over n 4-byte elements of the buffers `bufs`: one pass when they are
 * all contiguous, else one pass per stretch of elements that is contiguous in every one of them
 * (a tile's column, or less where two layouts cut differently). Which work-item handles which
 * element does not matter to these kernels, so each stretch is a grid-stride launch of its own.
 */
static int run_wise(const odx_host_launch *l, const char *kernel, const int *bufs, int nb,
		    int32_t n, items_fn fn)
{
	odx_shape s[MAX_WISE];
	void *p[MAX_WISE];
	bool strided = false;
	int64_t done;
	walk w;

	for (int i = 0; i < nb; i++) {
		s[i] = shape_of(l, bufs[i]);
		p[i] = l->buffers[bufs[i]];
		if (check_runs(l, kernel, bufs[i], 4))
			return -1;
		strided |= is_strided(s[i]);
	}
	if (!strided) {
		if (walk_first(&w, l, kernel, n))
			return -1;
		fn(l, &w, p, n);
		return 0;
	}
	for (done = 0; done < n;) {
		uint64_t at = (uint64_t)done * 4;
		int64_t len = n - done;

		for (int i = 0; i < nb; i++) {
			if (!is_strided(s[i])) {
				p[i] = (char *)l->buffers[bufs[i]] + at;
				continue;
			}
			if ((int64_t)((s[i].width - at % s[i].width) / 4) < len)
				len = (int64_t)((s[i].width - at % s[i].width) / 4);
			p[i] = byte_at(l->buffers[bufs[i]], s[i], at);
		}
		if (walk_first(&w, l, kernel, len))
			return -1;
		fn(l, &w, p, (int32_t)len);
		done += len;
	}
	return 0;
}

static void fill_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_fill_u32(&w->it, p[0], arg_i32(l, 1), n);
}

int odx__host_fill_u32(const odx_host_launch *l)
{
	static const int bufs[] = {0};
	int32_t n = arg_i32(l, 2);

	if (check_buffer(l, "odx.fill_u32", 0, n, 4) ||
	    run_wise(l, "odx.fill_u32", bufs, 1, n, fill_items))
		return 1;
	return 0;
}

static void copy_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	(void)l;
	for (; w->g < w->end; walk_next(w))
		odx_copy_u32(&w->it, p[0], p[1], n);
}

int odx__host_copy_u32(const odx_host_launch *l)
{
	static const int bufs[] = {0, 1};
	int32_t n = arg_i32(l, 2);

	if (check_buffer(l, "odx.copy_u32", 0, n, 4) || check_buffer(l, "odx.copy_u32", 1, n, 4) ||
	    run_wise(l, "odx.copy_u32", bufs, 2, n, copy_items))
		return 1;
	return 0;
}

static void scale_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_scale_f32(&w->it, p[0], arg_f32(l, 1), n);
}

int odx__host_scale_f32(const odx_host_launch *l)
{
	static const int bufs[] = {0};
	int32_t n = arg_i32(l, 2);

	if (check_buffer(l, "odx.scale_f32", 0, n, 4) ||
	    run_wise(l, "odx.scale_f32", bufs, 1, n, scale_items))
		return 1;
	return 0;
}

static void axpy_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_axpy_f32(&w->it, p[0], p[1], arg_f32(l, 2), n);
}

int odx__host_axpy_f32(const odx_host_launch *l)
{
	static const int bufs[] = {0, 1};
	int32_t n = arg_i32(l, 3);

	if (check_buffer(l, "odx.axpy_f32", 0, n, 4) || check_buffer(l, "odx.axpy_f32", 1, n, 4) ||
	    run_wise(l, "odx.axpy_f32", bufs, 2, n, axpy_items))
		return 1;
	return 0;
}

static void hash_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_hash_partition_u32(&w->it, p[0], p[1], n, arg_i32(l, 3));
}

int odx__host_hash_partition_u32(const odx_host_launch *l)
{
	static const int bufs[] = {0, 1};
	int32_t n = arg_i32(l, 2), parts = arg_i32(l, 3);

	if (parts < 1)
		return fail(l, "odx.hash_partition_u32: parts must be >= 1");
	if (check_buffer(l, "odx.hash_partition_u32", 0, n, 4) ||
	    check_buffer(l, "odx.hash_partition_u32", 1, n, 4) ||
	    run_wise(l, "odx.hash_partition_u32", bufs, 2, n, hash_items))
		return 1;
	return 0;
}

/* counts (buffer 1) is indexed by bin: contiguous, checked by the caller. */
static void histogram_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_histogram_u32(&w->it, p[0], l->buffers[1], n, arg_i32(l, 3));
}

/*
 * Private counts, then a merge: the rows this call's groups visit (the kernel's grid-stride
 * order) are counted in memory of this thread, and each nonzero bin is added to `counts` with
 * one atomic add, where the kernel source takes one per row (about 4x faster on 16M rows into
 * a few bins, issue 20; docs/performance-log.md). Histograms much wider than the call's rows, and
 * bins in a tile in place (strided), keep the per-row atomics.
 */
int odx__host_histogram_u32(const odx_host_launch *l)
{
	static const int bufs[] = {0};
	int32_t n = arg_i32(l, 2), nbins = arg_i32(l, 3);
	const uint32_t *bins = l->buffers[0];
	uint32_t *counts = l->buffers[1], *priv = NULL;
	uint64_t groups = (uint64_t)l->grid[0] * (l->grid[1] ? l->grid[1] : 1) *
			  (l->grid[2] ? l->grid[2] : 1);
	uint64_t rows = groups ? (uint64_t)(n > 0 ? n : 0) * l->group_count / groups + 1 : 0;
	walk w;

	if (check_buffer(l, "odx.histogram_u32", 0, n, 4) ||
	    check_buffer(l, "odx.histogram_u32", 1, nbins, 4) ||
	    check_contiguous(l, "odx.histogram_u32", 1, "counts"))
		return 1;
	if (!is_strided(shape_of(l, 0)) && nbins > 0 && (uint64_t)nbins <= 4 * rows + 1024)
		priv = calloc((size_t)nbins, sizeof(*priv));
	if (!priv) /* strided or wide, or no memory: the kernel's per-row atomics */
		return run_wise(l, "odx.histogram_u32", bufs, 1, n, histogram_items) ? 1 : 0;
	if (walk_first(&w, l, "odx.histogram_u32", n)) {
		free(priv);
		return 1;
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

/* sums (buffer 2) is indexed by key: contiguous, checked by the caller. */
static void groupby_items(const odx_host_launch *l, walk *w, void *const *p, int32_t n)
{
	for (; w->g < w->end; walk_next(w))
		odx_groupby_sum_i32(&w->it, p[0], p[1], l->buffers[2], n, arg_i32(l, 4));
}

int odx__host_groupby_sum_i32(const odx_host_launch *l)
{
	static const int bufs[] = {0, 1};
	int32_t n = arg_i32(l, 3), nkeys = arg_i32(l, 4);

	if (check_buffer(l, "odx.groupby_sum_i32", 0, n, 4) ||
	    check_buffer(l, "odx.groupby_sum_i32", 1, n, 4) ||
	    check_buffer(l, "odx.groupby_sum_i32", 2, nkeys, 4) ||
	    check_contiguous(l, "odx.groupby_sum_i32", 2, "sums") ||
	    run_wise(l, "odx.groupby_sum_i32", bufs, 2, n, groupby_items))
		return 1;
	return 0;
}

/* ---- kernels whose work-items are not interchangeable ---------------------------------------- */

/* Output buffer b of `bytes` packed bytes: itself when contiguous, else a scratch the caller
 * scatters back (only the elements its own groups wrote: other threads write the rest). */
static void *packed_output(const odx_host_launch *l, const char *kernel, int b, size_t bytes,
			   void **scratch)
{
	*scratch = NULL;
	if (!is_strided(shape_of(l, b)))
		return l->buffers[b];
	if (check_runs(l, kernel, b, 4))
		return NULL;
	*scratch = calloc(bytes / 4 ? bytes / 4 : 1, 4);
	if (!*scratch)
		snprintf(l->error, l->error_size, "%s: out of memory for buffer %d (%zu bytes)",
			 kernel, b, bytes);
	return *scratch;
}

/* Float i of a scratch into its place in strided buffer b. */
static void scatter_f32(const odx_host_launch *l, int b, const float *scratch, uint64_t i)
{
	memcpy(byte_at(l->buffers[b], shape_of(l, b), i * 4), &scratch[i], 4);
}

int odx__host_reduce_sum_f32(const odx_host_launch *l)
{
	static const char kernel[] = "odx.reduce_sum_f32";
	int32_t n = arg_i32(l, 2);
	void *xcopy = NULL, *pscratch = NULL;
	const float *x;
	float *partial;
	int rc = 1;
	walk w;

	if (l->block[0] > ODX_REDUCE_MAX_BLOCK || l->block[1] > 1 || l->block[2] > 1 ||
	    l->grid[1] > 1 || l->grid[2] > 1)
		return fail(l, "odx.reduce_sum_f32: needs a 1-D launch with block.x <= 256");
	if (check_buffer(l, kernel, 0, n, 4) || check_buffer(l, kernel, 1, l->grid[0], 4) ||
	    walk_first(&w, l, kernel, -1))
		return 1;
	x = packed_input(l, kernel, 0, (size_t)n * 4, &xcopy);
	partial = x ? packed_output(l, kernel, 1, (size_t)l->grid[0] * 4, &pscratch) : NULL;
	if (!partial)
		goto out_free;
	for (; w.g < w.end; walk_next(&w))
		odx_reduce_sum_f32(&w.it, x, partial, n);
	/* 1-D: group g wrote partial[g]. */
	for (uint64_t g = l->group_first; pscratch && g < l->group_first + l->group_count; g++)
		scatter_f32(l, 1, pscratch, g);
	rc = 0;
out_free:
	free(pscratch);
	free(xcopy);
	return rc;
}

int odx__host_gemm_f32(const odx_host_launch *l)
{
	static const char kernel[] = "odx.gemm_f32";
	int32_t m = arg_i32(l, 3), n = arg_i32(l, 4), k = arg_i32(l, 5);
	void *acopy = NULL, *bcopy = NULL, *cscratch = NULL;
	const float *a, *b;
	float *c = NULL;
	int rc = 1;
	walk w;

	if (l->block[0] != ODX_GEMM_TILE || l->block[1] != ODX_GEMM_TILE || l->block[2] > 1)
		return fail(l, "odx.gemm_f32: needs block = (16, 16, 1)");
	if (m < 0 || n < 0 || k < 0)
		return fail(l, "odx.gemm_f32: negative dimension");
	if (check_buffer(l, kernel, 0, (int64_t)m * k, 4) ||
	    check_buffer(l, kernel, 1, (int64_t)k * n, 4) ||
	    check_buffer(l, kernel, 2, (int64_t)m * n, 4) || walk_first(&w, l, kernel, n))
		return 1;
	a = packed_input(l, kernel, 0, (size_t)m * (size_t)k * 4, &acopy);
	b = a ? packed_input(l, kernel, 1, (size_t)k * (size_t)n * 4, &bcopy) : NULL;
	if (b)
		c = packed_output(l, kernel, 2, (size_t)m * (size_t)n * 4, &cscratch);
	if (!c)
		goto out_free;
	for (; w.g < w.end; walk_next(&w))
		odx_gemm_f32(&w.it, a, b, c, m, n, k);
	/* Group (gx, gy) wrote the 16 x 16 block of c at row gy * 16, column gx * 16. */
	for (uint64_t g = l->group_first; cscratch && g < l->group_first + l->group_count; g++) {
		uint64_t gx = g % l->grid[0], gy = g / l->grid[0] % (l->grid[1] ? l->grid[1] : 1);

		for (uint64_t r = gy * ODX_GEMM_TILE;
		     r < (gy + 1) * ODX_GEMM_TILE && r < (uint64_t)m; r++)
			for (uint64_t cc = gx * ODX_GEMM_TILE;
			     cc < (gx + 1) * ODX_GEMM_TILE && cc < (uint64_t)n; cc++)
				scatter_f32(l, 2, cscratch, r * (uint64_t)n + cc);
	}
	rc = 0;
out_free:
	free(cscratch);
	free(bcopy);
	free(acopy);
	return rc;
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
	if (l->grid[1] <= 1 && l->grid[2] <= 1 && l->block[1] <= 1 && l->block[2] <= 1) {
		/* A 1-D launch: this call's rows as a plain loop (hash_groupby's reasoning below:
		 * work-item t takes rows t, t + items, ...; the call's groups own [lo, hi) of each
		 * stretch of `items` rows). The kernel body per work-item costs a call and its index
		 * arithmetic per row (docs/performance-log.md: the example's scatters at 16M rows). */
		const uint32_t *src = l->buffers[0], *dest = l->buffers[1];
		uint32_t *dst = l->buffers[2];
		int64_t block = w.it.block[0], items = (int64_t)w.it.grid[0] * block;
		int64_t lo = (int64_t)l->group_first * block;
		int64_t hi = lo + (int64_t)l->group_count * block;

		if (hi > items)
			hi = items;
		for (int64_t base = 0; base < n && lo < hi; base += items) {
			int64_t end = base + hi < n ? base + hi : n;
			uint32_t sink;

			if (width == 1) {
				/* a dropped row writes `sink`, the address picked with masks: no
				 * branch on dest (dropped rows come in no order a predictor can
				 * follow, and compilers turn a ?: of two addresses into one) */
				for (int64_t i = base + lo; i < end; i++) {
					uint32_t d = dest[i];
					uintptr_t ok = (uintptr_t)0 - (uintptr_t)(d < (uint32_t)m);
					uintptr_t at = (uintptr_t)dst + ((uintptr_t)d << 2);

					*(uint32_t *)((at & ok) | ((uintptr_t)&sink & ~ok)) =
						src[i];
				}
				continue;
			}
			for (int64_t i = base + lo; i < end; i++) {
				uint32_t d = dest[i];

				if (d < (uint32_t)m)
					memcpy(dst + (size_t)d * width, src + i * width,
					       4 * (size_t)width);
			}
		}
		return 0;
	}
	for (; w.g < w.end; walk_next(&w))
		odx_scatter_rows(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], n, width, m);
	return 0;
}

/*
 * odx.hash_groupby on the host, the rows of this call in order. The kernel body run once per
 * work-item (the other variants' way) takes its rows a grid apart, each with 64-bit atomics:
 * every row then waits for its own cache misses (a row, a table slot), where a plain loop over
 * a table overlaps the misses of consecutive rows. Here the call's rows go in index order, the
 * slot of the row GB_AHEAD rows on is prefetched, and, when the device has one thread (no
 * other chunk of the launch runs meanwhile, and every other task using the table is ordered by
 * its dependencies), the updates are plain loads and stores. The same slots, the same counts,
 * sums, minima and maxima as the kernel body (the f64 sums in the rows' order, which
 * docs/kernels.md leaves free); the rows a work-item would have taken are exactly these.
 */
#define GB_AHEAD 16

typedef struct gb_row {
	uint64_t key, cnt, sum, lo, hi;
} gb_row;

/* Row i as a partial aggregate (the kernel body's first step); false: a record of count 0. */
static bool gb_read(const uint32_t *keys, const uint32_t *values, int64_t i, int kw, int vk,
		    gb_row *r)
{
	const uint32_t *v;

	r->key = kw == 2 ? (uint64_t)keys[2 * i] | (uint64_t)keys[2 * i + 1] << 32 : keys[i];
	r->cnt = 1;
	if (vk == 0) {
		float f;
		double d;

		memcpy(&f, &values[i], 4);
		d = f;
		memcpy(&r->sum, &d, 8);
		r->lo = r->hi = r->sum;
		return true;
	}
	v = values + i * (vk <= 2 ? 2 : 8);
	r->sum = (uint64_t)v[0] | (uint64_t)v[1] << 32;
	r->lo = r->hi = r->sum;
	if (vk <= 2)
		return true;
	r->cnt = r->sum;
	r->sum = (uint64_t)v[2] | (uint64_t)v[3] << 32;
	r->lo = (uint64_t)v[4] | (uint64_t)v[5] << 32;
	r->hi = (uint64_t)v[6] | (uint64_t)v[7] << 32;
	return r->cnt != 0;
}

static bool gb_better(uint64_t v, uint64_t cur, bool is_f64, bool want_min)
{
	if (is_f64) {
		double a, b;

		memcpy(&a, &v, 8);
		memcpy(&b, &cur, 8);
		return want_min ? a < b : a > b; /* NaN: false, never replaces */
	}
	return want_min ? (int64_t)v < (int64_t)cur : (int64_t)v > (int64_t)cur;
}

static void gb_rows(const uint32_t *keys, const uint32_t *values, uint64_t *table, uint32_t *status,
		    int64_t first, int64_t end, int32_t cap, int kw, int vk, int sw, bool atomic)
{
	uint64_t mask = (uint64_t)cap - 1;
	bool is_f64 = vk != 2 && vk != 4;
	uint64_t min0 = is_f64 ? ODX_GB_MIN0_F64 : ODX_GB_MIN0_I64;
	uint64_t max0 = is_f64 ? ODX_GB_MAX0_F64 : ODX_GB_MAX0_I64;

	for (int64_t i = first; i < end; i++) {
		uint64_t slot = (uint64_t)cap, *s;
		gb_row r;

		if (i + GB_AHEAD < end) {
			int64_t a = i + GB_AHEAD;
			uint64_t k = kw == 2 ? (uint64_t)keys[2 * a] | (uint64_t)keys[2 * a + 1] << 32
					     : keys[a];

			__builtin_prefetch(&table[(odx__gb_fmix64(k) & mask) * sw], 1);
		}
		if (!gb_read(keys, values, i, kw, vk, &r))
			continue;
		if (~r.key != 0) {
			uint64_t h = odx__gb_fmix64(r.key) & mask, j;

			for (j = 0; j <= mask; j++) {
				uint64_t at = (h + j) & mask, cur = table[at * sw];

				if (cur == 0) {
					if (atomic)
						cur = odx__cas_u64(&table[at * sw], 0, ~r.key);
					else
						table[at * sw] = ~r.key;
				}
				if (cur == 0 || cur == ~r.key) {
					slot = at;
					break;
				}
			}
			if (j > mask) {
				if (atomic)
					__atomic_fetch_add(&status[0], 1u, __ATOMIC_RELAXED);
				else
					status[0]++;
				continue;
			}
		}
		s = table + slot * sw;
		if (atomic) {
			__atomic_fetch_add(&s[1], r.cnt, __ATOMIC_RELAXED);
			if (is_f64)
				odx__gb_add_f64(&s[2], odx__bits_f64(r.sum));
			else
				__atomic_fetch_add(&s[2], r.sum, __ATOMIC_RELAXED);
			if (sw == 3)
				continue;
			odx__gb_minmax(&s[3], r.lo, min0, is_f64, 1);
			odx__gb_minmax(&s[4], r.hi, max0, is_f64, 0);
			continue;
		}
		s[1] += r.cnt;
		s[2] = is_f64 ? odx__f64_bits(odx__bits_f64(s[2]) + odx__bits_f64(r.sum))
			      : s[2] + r.sum;
		if (sw == 3)
			continue;
		if (gb_better(r.lo, s[3] ^ min0, is_f64, true))
			s[3] = r.lo ^ min0;
		if (gb_better(r.hi, s[4] ^ max0, is_f64, false))
			s[4] = r.hi ^ max0;
	}
}

int odx__host_hash_groupby(const odx_host_launch *l)
{
	int32_t n = arg_i32(l, 4), cap = arg_i32(l, 5), kw = arg_i32(l, 6), vk = arg_i32(l, 7);
	static const int value_words[] = {1, 2, 2, 8, 8};
	int sw = vk & ODX_GB_SUM_COUNT ? 3 : 5; /* words per slot */
	int kind = vk;
	walk w;

	vk &= ~ODX_GB_SUM_COUNT;
	if (cap < 1 || cap > (1 << 30) || (cap & (cap - 1)) != 0)
		return fail(l, "odx.hash_groupby: capacity must be a power of two in [1, 2^30]");
	if (kw != 1 && kw != 2)
		return fail(l, "odx.hash_groupby: key_words must be 1 (u32 keys) or 2 (u64)");
	if (vk < 0 || vk > 4)
		return fail(l, "odx.hash_groupby: value_kind must be 0 (f32), 1 (f64), 2 (i64), "
			       "3 (f64 records) or 4 (i64 records), plus 8 for count and sum only");
	if (check_buffer(l, "odx.hash_groupby", 0, (int64_t)n * kw, 4) ||
	    check_buffer(l, "odx.hash_groupby", 1, (int64_t)n * value_words[vk], 4) ||
	    check_buffer(l, "odx.hash_groupby", 2, ((int64_t)cap + 1) * sw, 8) ||
	    check_buffer(l, "odx.hash_groupby", 3, 1, 4) ||
	    walk_first(&w, l, "odx.hash_groupby", n))
		return 1;
	if (l->grid[1] <= 1 && l->grid[2] <= 1 && l->block[1] <= 1 && l->block[2] <= 1) {
		/* a 1-D launch: work-item t of the grid takes rows t, t + items, t + 2 items, ...,
		 * so this call's groups take, in every stretch of `items` rows, the rows
		 * [lo, hi) of it */
		int64_t block = w.it.block[0], items = (int64_t)w.it.grid[0] * block;
		int64_t lo = (int64_t)l->group_first * block;
		int64_t hi = lo + (int64_t)l->group_count * block;

		if (hi > items)
			hi = items;
		for (int64_t base = 0; base < n && lo < hi; base += items)
			gb_rows(l->buffers[0], l->buffers[1], l->buffers[2], l->buffers[3],
				base + lo, base + hi < n ? base + hi : n, cap, kw, vk, sw,
				l->threads > 1);
		return 0;
	}
	for (; w.g < w.end; walk_next(&w))
		odx_hash_groupby(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], l->buffers[3],
				 n, cap, kw, kind);
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
	/* u32 keys and f32 values: one table per call (host_combine.c) */
	if (kw == 1 && vk == 0 && l->block[0] <= 1 && odx__host_combine_u32_f32(l, n, parts) == 0)
		return 0;
	for (; w.g < w.end; walk_next(&w))
		odx_hash_combine(&w.it, l->buffers[0], l->buffers[1], l->buffers[2], l->buffers[3],
				 l->buffers[4], l->buffers[5], n, parts, kw, vk);
	return 0;
}
