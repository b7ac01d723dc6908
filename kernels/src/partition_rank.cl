/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.partition_rank(pids: R u32[n], offsets: R u32[parts * grid.x], dest: W u32[n], n: i32,
 * parts: i32): the output row of every input row for a stable partition. `offsets` is the
 * exclusive scan (odx.scan_u32) of the counts odx.partition_count wrote for the same pids,
 * n, parts and grid.x. Row i of partition p in group g's chunk goes to
 * offsets[p * grid.x + g] + (rows of p before it in the chunk): partition p's rows are
 * contiguous and keep their input order, whatever the grid. Ids >= parts get
 * dest = ODX_NO_PART. parts in [1, ODX_PARTITION_MAX_PARTS], block.x in
 * [1, ODX_DATA_MAX_BLOCK], 1-D. Devices rank a tile of block.x rows at a time in shared
 * memory (O(block.x) shared reads per row); the host runs a chunk sequentially.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_partition_rank, ODX_GLOBAL const ODX_U32 *pids, ODX_GLOBAL const ODX_U32 *offsets,
	   ODX_GLOBAL ODX_U32 *dest, int n, int parts)
{
	int g = ODX_GROUP_ID(0), groups = ODX_NUM_GROUPS(0);
	ODX_IDX chunk = ((ODX_IDX)n + groups - 1) / groups;
	ODX_IDX first = (ODX_IDX)g * chunk, end = first + chunk < n ? first + chunk : n;
#if ODX_DIALECT_C
	/* base[parts .. parts + 3]: ODX_NO_PART, never moved on, for the rows of no partition,
	 * row i the (i % 4)th: no branch (their pids come in no order a predictor can follow),
	 * and consecutive such rows (most rows under skew) do not each wait for the store of
	 * the one before to the same word */
	ODX_U32 base[ODX_PARTITION_MAX_PARTS + 4];

	if (ODX_LOCAL_ID(0) != 0)
		return;
	for (int p = 0; p < parts; p++)
		base[p] = offsets[(ODX_IDX)p * groups + g];
	for (int p = parts; p < parts + 4; p++)
		base[p] = ODX_NO_PART;
	for (ODX_IDX i = first; i < end; i++) {
		ODX_U32 p = pids[i];
		ODX_U32 q = p < (ODX_U32)parts ? p : (ODX_U32)parts + (ODX_U32)(i & 3);

		dest[i] = base[q];
		base[q] += q < (ODX_U32)parts;
	}
#else
	ODX_SHARED ODX_U32 base[ODX_PARTITION_MAX_PARTS];
	ODX_SHARED ODX_U32 tile[ODX_DATA_MAX_BLOCK];
	int lid = ODX_LOCAL_ID(0), lsize = ODX_LOCAL_SIZE(0);

	for (int p = lid; p < parts; p += lsize)
		base[p] = offsets[(ODX_IDX)p * groups + g];
	ODX_BARRIER();
	/* Every work-item runs the same number of tiles: the barriers stay uniform. */
	for (ODX_IDX t = first; t < end; t += lsize) {
		ODX_IDX i = t + lid;
		ODX_U32 p = i < end ? pids[i] : ODX_NO_PART;
		ODX_U32 before = 0, after = 0;

		if (p >= (ODX_U32)parts)
			p = ODX_NO_PART;
		tile[lid] = p;
		ODX_BARRIER();
		for (int j = 0; j < lsize; j++) {
			if (tile[j] != p)
				continue;
			if (j < lid)
				before++;
			else if (j > lid)
				after++;
		}
		if (i < end)
			dest[i] = p == ODX_NO_PART ? ODX_NO_PART : base[p] + before;
		ODX_BARRIER();
		/* the tile's last row of each partition moves that partition's base on */
		if (p != ODX_NO_PART && after == 0)
			base[p] += before + 1;
		ODX_BARRIER();
	}
#endif
}
