#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.reduce_sum_f32 - GLSL twin of kernels/src/reduce_sum_f32.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Partial { float partial[]; };
layout(push_constant, std430) uniform Args { int n; };

/* block.x <= 256 (ODX_REDUCE_MAX_BLOCK) */
shared float acc[256];

void main()
{
	uint lid = gl_LocalInvocationID.x, lsize = gl_WorkGroupSize.x;
	uint gsize = gl_NumWorkGroups.x * lsize;
	uint p = 1u;
	float v = 0.0;

	while (p < lsize)
		p <<= 1;
	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize)
		v += x[i];
	acc[lid] = v;
	barrier();
	for (uint s = p / 2u; s > 0u; s >>= 1) {
		if (lid < s && lid + s < lsize)
			acc[lid] += acc[lid + s];
		barrier();
	}
	if (lid == 0u)
		partial[gl_WorkGroupID.x] = acc[0];
}
