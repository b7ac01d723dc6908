/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.histogram_u32(bins: R u32[n], counts: RW u32[nbins], n: i32, nbins: i32):
 * counts[bins[i]] += 1 with 32-bit atomic adds; values >= nbins are ignored. Counts accumulate
 * onto what the buffer holds (a new buffer reads as zeros). Grid-stride, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_histogram_u32, ODX_GLOBAL const ODX_U32 *bins, ODX_GLOBAL ODX_U32 *counts, int n,
	   int nbins)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U32 b = bins[i];

		if (b < (ODX_U32)nbins)
			ODX_ATOMIC_ADD_U32(&counts[b], 1u);
	}
}
