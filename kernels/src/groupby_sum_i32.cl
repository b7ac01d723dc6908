/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.groupby_sum_i32(keys: R u32[n], values: R i32[n], sums: RW i32[nkeys], n: i32, nkeys: i32):
 * sums[keys[i]] += values[i] with 32-bit atomic adds (two's complement wrap-around); keys >=
 * nkeys are ignored; sums accumulate onto what the buffer holds. Integers, not floats: float
 * atomic adds exist neither in GLSL core nor in OpenCL 1.2, and integer sums are exact and
 * independent of the order in which work-items run. Grid-stride, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_groupby_sum_i32, ODX_GLOBAL const ODX_U32 *keys, ODX_GLOBAL const int *values,
	   ODX_GLOBAL int *sums, int n, int nkeys)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U32 k = keys[i];

		if (k < (ODX_U32)nkeys)
			ODX_ATOMIC_ADD_I32(&sums[k], values[i]);
	}
}
