/* SPDX-License-Identifier: Apache-2.0 */
/* odx.copy_u32(src: R u32[n], dst: W u32[n], n: i32): dst[i] = src[i]. Grid-stride, any grid. */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_copy_u32, ODX_GLOBAL const ODX_U32 *src, ODX_GLOBAL ODX_U32 *dst, int n)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0))
		dst[i] = src[i];
}
