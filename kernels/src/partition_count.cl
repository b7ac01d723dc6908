/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.partition_count(pids: R u32[n], counts: W u32[parts * grid.x], n: i32, parts: i32):
 * work-group g counts the rows of its chunk, [g * c, min(n, (g + 1) * c)) with
 * c = ceil(n / grid.x), per partition, and writes counts[p * grid.x + g]. Ids >= parts (e.g.
 * ODX_NO_PART) are counted nowhere. The counts live in the group's shared memory (private to a
 * thread on the host): no global atomic per row. parts in [1, ODX_PARTITION_MAX_PARTS]; 1-D
 * launch, any grid and block. An exclusive scan of counts (odx.scan_u32) gives each group's
 * first output row per partition, partition-major: the input to odx.partition_rank.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_partition_count, ODX_GLOBAL const ODX_U32 *pids, ODX_GLOBAL ODX_U32 *counts, int n,
	   int parts)
{
	int g = ODX_GROUP_ID(0), groups = ODX_NUM_GROUPS(0);
	ODX_IDX chunk = ((ODX_IDX)n + groups - 1) / groups;
	ODX_IDX first = (ODX_IDX)g * chunk, end = first + chunk < n ? first + chunk : n;
#if ODX_DIALECT_C
	/* One work-item runs the group: a plain private array, and four more counters that take
	 * the rows of no partition without a branch (pids of combined rows, ODX_NO_PART, come
	 * in no order a predictor can follow), row i the (i % 4)th: under skew most rows are
	 * such, and with one counter each increment waited for the one before it (a load and a
	 * store of the same word, row after row: about 2 ns a row, docs/performance-log.md). */
	ODX_U32 cnt[ODX_PARTITION_MAX_PARTS + 4];

	if (ODX_LOCAL_ID(0) != 0)
		return;
	for (int p = 0; p < parts + 4; p++)
		cnt[p] = 0;
	for (ODX_IDX i = first; i < end; i++) {
		ODX_U32 p = pids[i];

		cnt[p < (ODX_U32)parts ? p : (ODX_U32)parts + (ODX_U32)(i & 3)]++;
	}
	for (int p = 0; p < parts; p++)
		counts[(ODX_IDX)p * groups + g] = cnt[p];
#else
	ODX_SHARED ODX_U32 cnt[ODX_PARTITION_MAX_PARTS];
	int lid = ODX_LOCAL_ID(0), lsize = ODX_LOCAL_SIZE(0);

	for (int p = lid; p < parts; p += lsize)
		cnt[p] = 0;
	ODX_BARRIER();
	for (ODX_IDX i = first + lid; i < end; i += lsize) {
		ODX_U32 p = pids[i];

		if (p < (ODX_U32)parts)
			ODX_LOCAL_ATOMIC_ADD_U32(&cnt[p], 1u);
	}
	ODX_BARRIER();
	for (int p = lid; p < parts; p += lsize)
		counts[(ODX_IDX)p * groups + g] = cnt[p];
#endif
}
