/* SPDX-License-Identifier: Apache-2.0 */
/* odx.fill_u32(dst: W u32[n], value: i32, n: i32): dst[i] = (u32)value. Grid-stride, any grid. */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_fill_u32, ODX_GLOBAL ODX_U32 *dst, int value, int n)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0))
		dst[i] = (ODX_U32)value;
}
