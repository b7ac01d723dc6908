/* SPDX-License-Identifier: Apache-2.0 */
/*
 * budget.c - lavapipe's loop budget. Mesa's llvmpipe, which compiles lavapipe's shaders, ends
 * every loop of a shader call silently once all its loops have gone round 65535 times together
 * (LP_MAX_TGSI_LOOP_ITERATIONS; docs/kernels.md): a kernel that loops longer leaves part of its
 * output unwritten and reports success. For the standard kernels the rounds a work-item needs
 * follow from the launch (n, grid, block, the kernel's rows a round), so on lavapipe a launch that
 * would need more is refused here, with what to do, instead of returning wrong data. A kernel
 * says which it is by the specialization constant ODX_LOOP_KERNEL (spirv.h); kernels without it
 * (the application's own) are not checked.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "vkb.h"

#define VKB_LOOP_BUDGET 65535u

typedef enum budget_model {
	GRID_STRIDE,  /* rows i = global id, += grid.x x block.x; scatter_rows: width a row more */
	CHUNK_COUNT,  /* partition_count: a group's chunk block.x a round, parts twice */
	CHUNK_RANK,   /* partition_rank: a tile of block.x rows, its comparisons 16 a round */
	CHUNK_EIGHT,  /* hash_combine: one work-item a group, 8 rows a round, <= 128 rounds more */
	SCAN_ONE,     /* scan_u32: group 0 only, its segment twice, block.x once */
} budget_model;

typedef struct budget_kernel {
	const char *name;
	budget_model model;
	int n_arg;     /* the scalar (push-constant member) holding n */
	int other_arg; /* parts (CHUNK_*), width (GRID_STRIDE scatter_rows); -1: none */
	/* its signature: a module that says it is this kernel but has another interface (an
	 * application's own SpecId 100) is not checked */
	int scalars, buffers;
} budget_kernel;

/* Indexed by ODX_LOOP_KERNEL - 1: the values in kernels/glsl/<name>.comp. */
static const budget_kernel budget_kernels[] = {
	{"odx.fill_u32", GRID_STRIDE, 1, -1, 2, 1},
	{"odx.copy_u32", GRID_STRIDE, 0, -1, 1, 2},
	{"odx.scale_f32", GRID_STRIDE, 1, -1, 2, 1},
	{"odx.axpy_f32", GRID_STRIDE, 1, -1, 2, 2},
	{"odx.hash_partition_u32", GRID_STRIDE, 0, -1, 2, 2},
	{"odx.hash_partition_u64", GRID_STRIDE, 0, -1, 2, 2},
	{"odx.partition_count", CHUNK_COUNT, 0, 1, 2, 2},
	{"odx.partition_rank", CHUNK_RANK, 0, 1, 2, 3},
	{"odx.scan_u32", SCAN_ONE, 0, -1, 1, 2},
	{"odx.scatter_rows", GRID_STRIDE, 0, 1, 3, 3},
	{"odx.hash_combine", CHUNK_EIGHT, 0, -1, 4, 6},
	{"odx.groupby_sum_i32", GRID_STRIDE, 0, -1, 2, 3},
};

#define NBUDGET ((uint32_t)(sizeof(budget_kernels) / sizeof(budget_kernels[0])))

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return b ? (a + b - 1) / b : 0;
}

/* The launch's i32 scalar `k` (negative values count as 0); -1 if it is not an i32. */
static int64_t scalar(const vkb_module *m, const uint8_t *push, int k)
{
	int32_t v;

	if (k < 0 || k >= m->iface.push_members || m->iface.member_kind[k] != ODX_ARG_I32)
		return -1;
	memcpy(&v, push + m->iface.member_offset[k], sizeof(v));
	return v < 0 ? 0 : v;
}

/*
 * The loop rounds one work-item of kernel `k` needs with `groups` work-groups of `block`. A loop
 * run of k rounds is counted k + 1 (its last test: measured, a chunk of partition_rank written
 * 8 comparisons a round went wrong after 10 rounds a tile, not 9); a single loop of k rounds
 * needs k + 1 <= 65535 here, which is one row short of what lavapipe does (fill_u32 on one
 * work-item writes 65535): a margin on the safe side.
 */
static uint64_t rounds(const budget_kernel *k, uint64_t n, uint64_t other, uint64_t groups,
		       uint64_t block)
{
	uint64_t chunk = ceil_div(n, groups), tiles = ceil_div(chunk, block);
	uint64_t rows = ceil_div(n, groups * block);

	switch (k->model) {
	case GRID_STRIDE: /* scatter_rows: `other` (width) rounds a row, inside the row loop */
		return rows + 1 + (other ? rows * (other + 1) : 0);
	case CHUNK_COUNT: /* zero the counts, the chunk, write the counts */
		return tiles + 1 + 2 * (ceil_div(other, block) + 1);
	case CHUNK_RANK: /* the offsets, the tiles, a tile's comparisons */
		return ceil_div(other, block) + 1 + tiles + 1 + tiles * (ceil_div(block, 16) + 1);
	case CHUNK_EIGHT: /* the rows 8 a round; the tail, slots and records: <= 108 */
		return ceil_div(chunk, 8) + 128;
	case SCAN_ONE: /* the segment twice, work-item 0's pass over the block's totals */
		return 2 * (ceil_div(n, block) + 1) + block + 1;
	}
	return 0;
}

int vkb_budget_check(const vkb_dev *d, const vkb_module *m, odx_backend_launch *l,
		     const uint8_t *push)
{
	const budget_kernel *k;
	uint64_t need, lo, hi, max_groups = d->limits.maxComputeWorkGroupCount[0];
	int64_t n, other = 0;

	if (!d->llvmpipe || m->iface.loop_kernel == 0 || m->iface.loop_kernel > NBUDGET)
		return 0;
	k = &budget_kernels[m->iface.loop_kernel - 1];
	if (m->iface.push_members != k->scalars ||
	    __builtin_popcountll(m->iface.bindings) != k->buffers)
		return 0;
	n = scalar(m, push, k->n_arg);
	if (k->other_arg >= 0)
		other = scalar(m, push, k->other_arg);
	if (n < 0 || other < 0)
		return 0; /* not the standard signature: vkb_marshal refused it already */
	need = rounds(k, (uint64_t)n, (uint64_t)other, l->grid[0], l->block[0]);
	if (need <= VKB_LOOP_BUDGET)
		return 0;
	/* the fewest work-groups that fit, when more of them help */
	lo = l->grid[0];
	hi = max_groups;
	if (k->model != SCAN_ONE &&
	    rounds(k, (uint64_t)n, (uint64_t)other, hi, l->block[0]) <= VKB_LOOP_BUDGET) {
		while (lo + 1 < hi) {
			uint64_t mid = lo + (hi - lo) / 2;

			if (rounds(k, (uint64_t)n, (uint64_t)other, mid, l->block[0]) <=
			    VKB_LOOP_BUDGET)
				hi = mid;
			else
				lo = mid;
		}
		snprintf(l->error, l->error_size,
			 "%s with n=%" PRId64 " on grid.x=%u, block.x=%u needs %" PRIu64
			 " loop rounds a work-item; %s (lavapipe) runs %u and then silently skips "
			 "the rest (docs/kernels.md, lavapipe's loop budget): refused rather than "
			 "return wrong data. Launch at least %" PRIu64 " work-groups (grid.x)",
			 k->name, n, l->grid[0], l->block[0], need, d->name, VKB_LOOP_BUDGET, hi);
	} else {
		snprintf(l->error, l->error_size,
			 "%s with n=%" PRId64 " on grid.x=%u, block.x=%u needs %" PRIu64
			 " loop rounds a work-item; %s (lavapipe) runs %u and then silently skips "
			 "the rest (docs/kernels.md, lavapipe's loop budget): refused rather than "
			 "return wrong data. No grid fits: %s",
			 k->name, n, l->grid[0], l->block[0], need, d->name, VKB_LOOP_BUDGET,
			 k->model == SCAN_ONE ? "use a larger block.x or split n into launches"
					      : "split n into launches");
	}
	return ODX_ERANGE;
}
