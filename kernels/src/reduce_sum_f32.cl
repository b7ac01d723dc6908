/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.reduce_sum_f32(x: R f32[n], partial: W f32[groups], n: i32), stage one of a sum:
 * work-group g writes partial[g], the sum of the elements it visited. 1-D: block.x in [1, 256]
 * (any value, a power of two is fastest), any grid.x; partial holds grid.x floats.
 * Work-item t of group g sums x[g * block + t + k * grid * block] for k = 0, 1, ... in order,
 * then the group folds its values as a tree (stride p/2, p/4, ... with p the power of two
 * >= block). Finish by summing partial[0..grid.x) on the host, or with a second launch over
 * partial with grid.x = 1.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_reduce_sum_f32, ODX_GLOBAL const float *x, ODX_GLOBAL float *partial, int n)
{
	int lid = ODX_LOCAL_ID(0), lsize = ODX_LOCAL_SIZE(0);
	int p = 1;

	while (p < lsize)
		p <<= 1;
#if ODX_DIALECT_C
	/* No barrier between sequential work-items: work-item 0 runs the whole group, in the
	 * same order as the parallel variants. */
	float acc[ODX_REDUCE_MAX_BLOCK];
	int g = ODX_GROUP_ID(0), gsize = ODX_GLOBAL_SIZE(0);

	if (lid != 0)
		return;
	for (int t = 0; t < lsize; t++) {
		acc[t] = 0.0f;
		for (ODX_IDX i = (ODX_IDX)g * lsize + t; i < n; i += gsize)
			acc[t] += x[i];
	}
	for (int s = p / 2; s > 0; s >>= 1)
		for (int t = 0; t < s && t + s < lsize; t++)
			acc[t] += acc[t + s];
	partial[g] = acc[0];
#else
	ODX_SHARED float acc[ODX_REDUCE_MAX_BLOCK];
	float v = 0.0f;

	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0))
		v += x[i];
	acc[lid] = v;
	ODX_BARRIER();
	for (int s = p / 2; s > 0; s >>= 1) {
		if (lid < s && lid + s < lsize)
			acc[lid] += acc[lid + s];
		ODX_BARRIER();
	}
	if (lid == 0)
		partial[ODX_GROUP_ID(0)] = acc[0];
#endif
}
