/* SPDX-License-Identifier: Apache-2.0 */
/* odx.axpy_f32(x: R f32[n], y: RW f32[n], a: f32, n: i32): y[i] = a * x[i] + y[i].
 * Grid-stride, any grid. */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_axpy_f32, ODX_GLOBAL const float *x, ODX_GLOBAL float *y, float a, int n)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0))
		y[i] = a * x[i] + y[i];
}
