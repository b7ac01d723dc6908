/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.histogram_u32(bins: R u32[n], counts: RW u32[nbins], n: i32, nbins: i32):
 * counts[bins[i]] += 1; values >= nbins are ignored. Counts accumulate onto what the buffer
 * holds (a new buffer reads as zeros). Grid-stride, any grid. Private counts, then a merge:
 * with nbins <= ODX_HISTOGRAM_SHARED_BINS a work-group counts in shared memory and adds each
 * nonzero bin to `counts` once (one global atomic per group and bin, not per row); larger
 * histograms take a global atomic per row. The host variant (host_kernels.c) counts in memory
 * private to its thread and merges once per thread.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_histogram_u32, ODX_GLOBAL const ODX_U32 *bins, ODX_GLOBAL ODX_U32 *counts, int n,
	   int nbins)
{
#if !ODX_DIALECT_C
	ODX_SHARED ODX_U32 cnt[ODX_HISTOGRAM_SHARED_BINS];
	int lid = ODX_LOCAL_ID(0), lsize = ODX_LOCAL_SIZE(0);

	if (nbins <= ODX_HISTOGRAM_SHARED_BINS) {
		for (int b = lid; b < nbins; b += lsize)
			cnt[b] = 0;
		ODX_BARRIER();
		for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
			ODX_U32 b = bins[i];

			if (b < (ODX_U32)nbins)
				ODX_LOCAL_ATOMIC_ADD_U32(&cnt[b], 1u);
		}
		ODX_BARRIER();
		for (int b = lid; b < nbins; b += lsize)
			if (cnt[b] != 0)
				ODX_ATOMIC_ADD_U32(&counts[b], cnt[b]);
		return;
	}
#endif
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U32 b = bins[i];

		if (b < (ODX_U32)nbins)
			ODX_ATOMIC_ADD_U32(&counts[b], 1u);
	}
}
