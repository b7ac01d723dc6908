/* SPDX-License-Identifier: Apache-2.0 */
/*
 * record.cl - the property engine's task kernel for devices, in the ODX dialect (OpenCL C, CUDA,
 * HIP). It computes exactly what record_apply() in deps_property_engine.c does for one
 * work-group: group g of grid.x owns elements [g * N / groups, (g + 1) * N / groups) of every
 * buffer. Work-item 0 of each group does the work (launch with any block).
 * record_<k>(k data buffers, witness: W u64[NWIT], id: i32, modes: i32); mode of data buffer i
 * is (modes >> 2i) & 3 (1 R, 2 W, 3 RW). Values are u64 words.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

#define DPE_NELEM 64 /* u64 per data buffer: NELEM in deps_property_engine.c */
#define DPE_NWIT 16  /* u64 per witness: NWIT */

ODX_FUNC ODX_U64 dpe_splitmix(ODX_U64 s)
{
	ODX_U64 z = s + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

ODX_FUNC ODX_U64 dpe_mix(ODX_U64 a, ODX_U64 b)
{
	return dpe_splitmix(a ^ (b * 0x9e3779b97f4a7c15ull));
}

ODX_FUNC void dpe_record(ODX_GLOBAL ODX_U64 *d0, ODX_GLOBAL ODX_U64 *d1, ODX_GLOBAL ODX_U64 *d2,
			 int k, ODX_GLOBAL ODX_U64 *wit, int id, int modes, ODX_U64 g,
			 ODX_U64 groups)
{
	ODX_U64 reads = (ODX_U64)id;
	ODX_U64 lo = g * DPE_NELEM / groups, hi = (g + 1) * DPE_NELEM / groups;
	ODX_U64 wlo = g * DPE_NWIT / groups, whi = (g + 1) * DPE_NWIT / groups;

	for (int i = 0; i < k; i++) {
		ODX_GLOBAL ODX_U64 *d = i == 0 ? d0 : i == 1 ? d1 : d2;

		if (((modes >> (2 * i)) & 3) != 1)
			continue;
		for (int e = 0; e < DPE_NELEM; e++)
			reads = dpe_mix(reads, d[e]);
	}
	for (int i = 0; i < k; i++) {
		ODX_GLOBAL ODX_U64 *d = i == 0 ? d0 : i == 1 ? d1 : d2;
		int mode = (modes >> (2 * i)) & 3;

		for (ODX_U64 e = lo; e < hi; e++) {
			if (mode == 2)
				d[e] = dpe_mix(dpe_mix((ODX_U64)id, reads), e * 8 + (ODX_U64)i);
			else if (mode == 3)
				d[e] = d[e] * 31 + (ODX_U64)id + reads + e;
		}
	}
	for (ODX_U64 e = wlo; e < whi; e++)
		wit[e] = dpe_mix(reads, e);
}

ODX_KERNEL(record_1, ODX_GLOBAL ODX_U64 *d0, ODX_GLOBAL ODX_U64 *wit, int id, int modes)
{
	if (ODX_LOCAL_ID(0) == 0)
		dpe_record(d0, d0, d0, 1, wit, id, modes, (ODX_U64)ODX_GROUP_ID(0),
			   (ODX_U64)ODX_NUM_GROUPS(0));
}

ODX_KERNEL(record_2, ODX_GLOBAL ODX_U64 *d0, ODX_GLOBAL ODX_U64 *d1, ODX_GLOBAL ODX_U64 *wit,
	   int id, int modes)
{
	if (ODX_LOCAL_ID(0) == 0)
		dpe_record(d0, d1, d1, 2, wit, id, modes, (ODX_U64)ODX_GROUP_ID(0),
			   (ODX_U64)ODX_NUM_GROUPS(0));
}

ODX_KERNEL(record_3, ODX_GLOBAL ODX_U64 *d0, ODX_GLOBAL ODX_U64 *d1, ODX_GLOBAL ODX_U64 *d2,
	   ODX_GLOBAL ODX_U64 *wit, int id, int modes)
{
	if (ODX_LOCAL_ID(0) == 0)
		dpe_record(d0, d1, d2, 3, wit, id, modes, (ODX_U64)ODX_GROUP_ID(0),
			   (ODX_U64)ODX_NUM_GROUPS(0));
}
