#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.partition_count - GLSL twin of kernels/src/partition_count.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 7u;
layout(set = 0, binding = 0) readonly buffer Pids { uint pids[]; };
layout(set = 0, binding = 1) writeonly buffer Counts { uint counts[]; };
layout(push_constant, std430) uniform Args { int n; int parts; };

/* parts <= ODX_PARTITION_MAX_PARTS */
shared uint cnt[4096];

void main()
{
	if (ODX_LOOP_KERNEL == 0u)
		return;
	uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
	uint lid = gl_LocalInvocationID.x, lsize = gl_WorkGroupSize.x;
	uint chunk = (uint(n) + groups - 1u) / groups;
	uint first = min(g * chunk, uint(n)), end = min(first + chunk, uint(n));

	for (uint p = lid; p < uint(parts); p += lsize)
		cnt[p] = 0u;
	barrier();
	for (uint i = first + lid; i < end; i += lsize) {
		uint p = pids[i];

		if (p < uint(parts))
			atomicAdd(cnt[p], 1u);
	}
	barrier();
	for (uint p = lid; p < uint(parts); p += lsize)
		counts[p * groups + g] = cnt[p];
}
