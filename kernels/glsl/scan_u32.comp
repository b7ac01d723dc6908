#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.scan_u32 - GLSL twin of kernels/src/scan_u32.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 9u;
layout(set = 0, binding = 0) readonly buffer In { uint inp[]; };
layout(set = 0, binding = 1) writeonly buffer Out { uint outp[]; };
layout(push_constant, std430) uniform Args { int n; };

/* block.x <= ODX_DATA_MAX_BLOCK */
shared uint tot[256];

void main()
{
	if (ODX_LOOP_KERNEL == 0u)
		return;
	uint lid = gl_LocalInvocationID.x, lsize = gl_WorkGroupSize.x;
	uint seg = (uint(n) + lsize - 1u) / lsize;
	uint first = min(lid * seg, uint(n)), end = min(first + seg, uint(n));
	uint acc = 0u;

	if (gl_WorkGroupID.x != 0u)
		return;
	for (uint i = first; i < end; i++)
		acc += inp[i];
	tot[lid] = acc;
	barrier();
	if (lid == 0u) {
		uint run = 0u;

		for (uint t = 0u; t < lsize; t++) {
			uint v = tot[t];

			tot[t] = run;
			run += v;
		}
		outp[uint(n)] = run;
	}
	barrier();
	acc = tot[lid];
	for (uint i = first; i < end; i++) {
		uint v = inp[i];

		outp[i] = acc;
		acc += v;
	}
}
