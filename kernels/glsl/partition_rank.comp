#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.partition_rank - GLSL twin of kernels/src/partition_rank.cl; bindings and push constants follow docs/kernel-abi.md. */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer Pids { uint pids[]; };
layout(set = 0, binding = 1) readonly buffer Offsets { uint offsets[]; };
layout(set = 0, binding = 2) writeonly buffer Dest { uint dest[]; };
layout(push_constant, std430) uniform Args { int n; int parts; };

const uint NO_PART = 0xffffffffu;
/* parts <= ODX_PARTITION_MAX_PARTS, block.x <= ODX_DATA_MAX_BLOCK */
shared uint base[4096];
shared uint tile[256];

void main()
{
	uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
	uint lid = gl_LocalInvocationID.x, lsize = gl_WorkGroupSize.x;
	uint chunk = (uint(n) + groups - 1u) / groups;
	uint first = min(g * chunk, uint(n)), end = min(first + chunk, uint(n));

	for (uint p = lid; p < uint(parts); p += lsize)
		base[p] = offsets[p * groups + g];
	barrier();
	/* every invocation runs the same number of tiles: the barriers stay uniform */
	for (uint t = first; t < end; t += lsize) {
		uint i = t + lid;
		uint p = i < end ? pids[i] : NO_PART;
		uint before = 0u, after = 0u;

		if (p >= uint(parts))
			p = NO_PART;
		tile[lid] = p;
		barrier();
		for (uint j = 0u; j < lsize; j++) {
			if (tile[j] != p)
				continue;
			if (j < lid)
				before++;
			else if (j > lid)
				after++;
		}
		if (i < end)
			dest[i] = p == NO_PART ? NO_PART : base[p] + before;
		barrier();
		if (p != NO_PART && after == 0u)
			base[p] += before + 1u;
		barrier();
	}
}
