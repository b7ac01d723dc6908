#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.groupby_sum_i32 - GLSL twin of kernels/src/groupby_sum_i32.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 12u;
layout(set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(set = 0, binding = 1) readonly buffer Values { int values[]; };
layout(set = 0, binding = 2) buffer Sums { int sums[]; };
layout(push_constant, std430) uniform Args { int n; int nkeys; };

void main()
{
	if (ODX_LOOP_KERNEL == 0u)
		return;
	uint gsize = gl_NumWorkGroups.x * gl_WorkGroupSize.x;

	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize) {
		uint k = keys[i];

		if (k < uint(nkeys))
			atomicAdd(sums[k], values[i]);
	}
}
