#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.histogram_u32 - GLSL twin of kernels/src/histogram_u32.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer Bins { uint bins[]; };
layout(set = 0, binding = 1) buffer Counts { uint counts[]; };
layout(push_constant, std430) uniform Args { int n; int nbins; };

/* ODX_HISTOGRAM_SHARED_BINS: a group counts this many bins in shared memory, then merges */
shared uint cnt[1024];

void main()
{
	uint gsize = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
	uint lid = gl_LocalInvocationID.x, lsize = gl_WorkGroupSize.x;

	if (nbins <= 1024) {
		for (uint b = lid; b < uint(nbins); b += lsize)
			cnt[b] = 0u;
		barrier();
		for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize) {
			uint b = bins[i];

			if (b < uint(nbins))
				atomicAdd(cnt[b], 1u);
		}
		barrier();
		for (uint b = lid; b < uint(nbins); b += lsize)
			if (cnt[b] != 0u)
				atomicAdd(counts[b], cnt[b]);
		return;
	}
	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize) {
		uint b = bins[i];

		if (b < uint(nbins))
			atomicAdd(counts[b], 1u);
	}
}
