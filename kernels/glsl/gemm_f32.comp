#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.gemm_f32 - GLSL twin of kernels/src/gemm_f32.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant, std430) uniform Args { int m; int n; int k; };

/* block = (16, 16, 1) exactly (ODX_GEMM_TILE) */
const int T = 16;
shared float as[T][T];
shared float bs[T][T];

void main()
{
	int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
	int col = int(gl_WorkGroupID.x) * T + tx, row = int(gl_WorkGroupID.y) * T + ty;
	float acc = 0.0;

	for (int t = 0; t < k; t += T) {
		as[ty][tx] = row < m && t + tx < k ? a[row * k + t + tx] : 0.0;
		bs[ty][tx] = t + ty < k && col < n ? b[(t + ty) * n + col] : 0.0;
		barrier();
		for (int kk = 0; kk < T; kk++)
			acc += as[ty][kk] * bs[kk][tx];
		barrier();
	}
	if (row < m && col < n)
		c[row * n + col] = acc;
}
