/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.gemm_f32(a: R f32[m*k], b: R f32[k*n], c: W f32[m*n], m: i32, n: i32, k: i32):
 * c = a * b, all row-major. Tiled: block = (16, 16, 1) exactly, grid = (ceil(n/16), ceil(m/16),
 * 1); work-item (tx, ty) of group (gx, gy) computes c[gy*16+ty][gx*16+tx], staging 16x16 tiles
 * of a and b in shared memory. Each element sums its products in increasing k.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_gemm_f32, ODX_GLOBAL const float *a, ODX_GLOBAL const float *b,
	   ODX_GLOBAL float *c, int m, int n, int k)
{
	const int T = ODX_GEMM_TILE;
	int tx = ODX_LOCAL_ID(0), ty = ODX_LOCAL_ID(1);
	int col = ODX_GROUP_ID(0) * T + tx, row = ODX_GROUP_ID(1) * T + ty;
#if ODX_DIALECT_C
	/* A plain blocked loop: work-item (0, 0) computes the group's whole tile. */
	if (tx != 0 || ty != 0)
		return;
	for (int r = row; r < row + T && r < m; r++) {
		for (int cc = col; cc < col + T && cc < n; cc++) {
			float acc = 0.0f;

			for (int kk = 0; kk < k; kk++)
				acc += a[(ODX_IDX)r * k + kk] * b[(ODX_IDX)kk * n + cc];
			c[(ODX_IDX)r * n + cc] = acc;
		}
	}
#else
	ODX_SHARED float as[ODX_GEMM_TILE][ODX_GEMM_TILE];
	ODX_SHARED float bs[ODX_GEMM_TILE][ODX_GEMM_TILE];
	float acc = 0.0f;

	for (int t = 0; t < k; t += T) {
		as[ty][tx] = row < m && t + tx < k ? a[(ODX_IDX)row * k + t + tx] : 0.0f;
		bs[ty][tx] = t + ty < k && col < n ? b[(ODX_IDX)(t + ty) * n + col] : 0.0f;
		ODX_BARRIER();
		for (int kk = 0; kk < T; kk++)
			acc += as[ty][kk] * bs[kk][tx];
		ODX_BARRIER();
	}
	if (row < m && col < n)
		c[(ODX_IDX)row * n + col] = acc;
#endif
}
