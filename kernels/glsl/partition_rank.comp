#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.partition_rank - GLSL twin of kernels/src/partition_rank.cl; bindings and push constants follow docs/kernel-abi.md.
 *
 * Written for Mesa's llvmpipe (lavapipe) too: its compiled shader ends every loop, silently, once
 * all loops of an invocation have gone round 65535 times together (see hash_combine.comp and
 * docs/kernels.md; a loop run of k rounds costs k + 1 of it, its last test included). A tile
 * costs 1 + ceil(block.x / 16) + 1 here (the comparisons 16 a round), the offsets
 * ceil(parts / block.x) + 1: a group's chunk is whole on lavapipe while
 * ceil(chunk / block.x) x (ceil(block.x / 16) + 2) + ceil(parts / block.x) + 2 <= 65535 (block
 * 64: 699,008 rows). The Vulkan backend refuses a launch past that on lavapipe (budget.c). */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 8u;
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
	if (ODX_LOOP_KERNEL == 0u)
		return;
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
		/* the tile's block.x entries 16 a round, written out, counted without a branch (a
		 * round an entry ran out of lavapipe's loop budget at row 63,551 of a group at block
		 * 64: see the head of this file); entries past block.x do not count */
		for (uint j = 0u; j < lsize; j += 16u) {
#define CMP(k)                                                                                     \
	{                                                                                          \
		uint at = j + (k);                                                                 \
		bool same = all(bvec2(at < lsize, tile[min(at, 255u)] == p));                      \
		before += all(bvec2(same, at < lid)) ? 1u : 0u;                                    \
		after += all(bvec2(same, at > lid)) ? 1u : 0u;                                     \
	}
			CMP(0u) CMP(1u) CMP(2u) CMP(3u) CMP(4u) CMP(5u) CMP(6u) CMP(7u)
			CMP(8u) CMP(9u) CMP(10u) CMP(11u) CMP(12u) CMP(13u) CMP(14u) CMP(15u)
#undef CMP
		}
		if (i < end)
			dest[i] = p == NO_PART ? NO_PART : base[p] + before;
		barrier();
		if (p != NO_PART && after == 0u)
			base[p] += before + 1u;
		barrier();
	}
}
