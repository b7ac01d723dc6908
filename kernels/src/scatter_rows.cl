/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.scatter_rows(src: R u32[n * width], dest: R u32[n], dst: W u32[m * width], n: i32,
 * width: i32, m: i32): row i (width u32 words) of src goes to row dest[i] of dst; rows whose
 * dest is m or more (ODX_NO_PART: dropped by odx.partition_rank) are not written. With dest
 * from odx.partition_rank this is the compaction by partition; call it once per column
 * (keys, values: width 1 for 32-bit, 2 for 64-bit elements). Grid-stride over rows, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_scatter_rows, ODX_GLOBAL const ODX_U32 *src, ODX_GLOBAL const ODX_U32 *dest,
	   ODX_GLOBAL ODX_U32 *dst, int n, int width, int m)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U32 d = dest[i];

		if (d >= (ODX_U32)m)
			continue;
		for (int w = 0; w < width; w++)
			dst[(ODX_IDX)d * width + w] = src[i * width + w];
	}
}
