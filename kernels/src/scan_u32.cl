/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.scan_u32(in: R u32[n], out: W u32[n + 1], n: i32): exclusive prefix sum,
 * out[i] = in[0] + ... + in[i - 1] (mod 2^32), and out[n] = the total. One work-group does it
 * all: grid = {1} (other groups do nothing), block.x in [1, ODX_DATA_MAX_BLOCK]. Work-item t
 * sums a contiguous segment of ceil(n / block) elements, the block's totals are scanned in
 * shared memory, then each work-item writes its segment. Integer sums: the same bits for any
 * block. Sized for the counts of odx.partition_count (parts x groups), not for billions.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_scan_u32, ODX_GLOBAL const ODX_U32 *in, ODX_GLOBAL ODX_U32 *out, int n)
{
#if ODX_DIALECT_C
	ODX_U32 acc = 0;

	if (ODX_GROUP_ID(0) != 0 || ODX_LOCAL_ID(0) != 0)
		return;
	for (ODX_IDX i = 0; i < n; i++) {
		ODX_U32 v = in[i];

		out[i] = acc;
		acc += v;
	}
	out[n] = acc;
#else
	ODX_SHARED ODX_U32 tot[ODX_DATA_MAX_BLOCK];
	int lid = ODX_LOCAL_ID(0), lsize = ODX_LOCAL_SIZE(0);
	ODX_IDX seg = ((ODX_IDX)n + lsize - 1) / lsize;
	ODX_IDX first = (ODX_IDX)lid * seg, end = first + seg < n ? first + seg : n;
	ODX_U32 acc = 0;

	if (ODX_GROUP_ID(0) != 0)
		return;
	for (ODX_IDX i = first; i < end; i++)
		acc += in[i];
	tot[lid] = acc;
	ODX_BARRIER();
	if (lid == 0) {
		ODX_U32 run = 0;

		for (int t = 0; t < lsize; t++) {
			ODX_U32 v = tot[t];

			tot[t] = run;
			run += v;
		}
		out[n] = run;
	}
	ODX_BARRIER();
	acc = tot[lid];
	for (ODX_IDX i = first; i < end; i++) {
		ODX_U32 v = in[i];

		out[i] = acc;
		acc += v;
	}
#endif
}
