#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.hash_partition_u64 - GLSL twin of kernels/src/hash_partition_u64.cl; bindings and push constants follow docs/kernel-abi.md. */
#extension GL_ARB_gpu_shader_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 6u;
layout(set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(set = 0, binding = 1) writeonly buffer Buckets { uint buckets[]; };
layout(push_constant, std430) uniform Args { int n; int parts; };

void main()
{
	if (ODX_LOOP_KERNEL == 0u)
		return;
	uint gsize = gl_NumWorkGroups.x * gl_WorkGroupSize.x;

	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize) {
		uint64_t k = uint64_t(keys[2u * i]) | (uint64_t(keys[2u * i + 1u]) << 32);

		/* MurmurHash3 fmix64 */
		k ^= k >> 33;
		k *= 0xff51afd7ed558ccdUL;
		k ^= k >> 33;
		k *= 0xc4ceb9fe1a85ec53UL;
		k ^= k >> 33;
		buckets[i] = uint(k % uint64_t(parts));
	}
}
