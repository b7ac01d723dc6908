/* SPDX-License-Identifier: Apache-2.0 */
/* odx.scale_f32(x: RW f32[n], a: f32, n: i32): x[i] = a * x[i]. Grid-stride, any grid. */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_scale_f32, ODX_GLOBAL float *x, float a, int n)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0))
		x[i] = a * x[i];
}
