#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.hash_combine - GLSL twin of kernels/src/hash_combine.cl; bindings and push constants follow docs/kernel-abi.md.
 * Needs shaderInt64 and shaderFloat64. */
#extension GL_ARB_gpu_shader_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(set = 0, binding = 1) readonly buffer Values { uint values[]; };
layout(set = 0, binding = 2) writeonly buffer Pids { uint pids[]; };
layout(set = 0, binding = 3) writeonly buffer RecKeys { uint rec_keys[]; };
layout(set = 0, binding = 4) writeonly buffer RecVals { uint rec_vals[]; };
layout(set = 0, binding = 5) writeonly buffer RecPids { uint rec_pids[]; };
layout(push_constant, std430) uniform Args { int n; int parts; int key_words; int value_kind; };

const uint SLOTS = 256u; /* ODX_COMBINE_SLOTS */
const int PROBES = 8;    /* ODX_COMBINE_PROBES */
const uint NO_PART = 0xffffffffu;

uint64_t tkey[SLOTS], tcnt[SLOTS], tsum[SLOTS], tmin[SLOTS], tmax[SLOTS];

uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdUL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53UL;
	k ^= k >> 33;
	return k;
}

uint part_of(uint64_t key)
{
	if (key_words == 2)
		return uint(fmix64(key) % uint64_t(parts));
	uint h = uint(key);

	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h % uint(parts);
}

void main()
{
	uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
	uint chunk = (uint(n) + groups - 1u) / groups;
	uint first = min(g * chunk, uint(n)), end = min(first + chunk, uint(n));
	uint r0 = g * SLOTS, used = 0u, kw = uint(key_words);

	if (gl_LocalInvocationID.x != 0u)
		return;
	for (uint s = 0u; s < SLOTS; s++)
		tcnt[s] = 0UL;
	for (uint i = first; i < end; i++) {
		uint64_t key = key_words == 2 ? uint64_t(keys[2u * i]) | (uint64_t(keys[2u * i + 1u]) << 32)
					      : uint64_t(keys[i]);
		uint64_t vb = value_kind == 0
				      ? doubleBitsToUint64(double(uintBitsToFloat(values[i])))
				      : uint64_t(values[2u * i]) | (uint64_t(values[2u * i + 1u]) << 32);
		uint h = uint(fmix64(key)) & (SLOTS - 1u);
		int s = -1;

		for (int j = 0; j < PROBES && s < 0; j++) {
			uint at = (h + uint(j)) & (SLOTS - 1u);

			if (tcnt[at] == 0UL || tkey[at] == key)
				s = int(at);
		}
		if (s < 0) {
			pids[i] = part_of(key);
			continue;
		}
		pids[i] = NO_PART;
		if (tcnt[s] == 0UL) {
			tkey[s] = key;
			tsum[s] = vb;
			tmin[s] = vb;
			tmax[s] = vb;
		} else if (value_kind == 2) {
			tsum[s] += vb;
			tmin[s] = int64_t(vb) < int64_t(tmin[s]) ? vb : tmin[s];
			tmax[s] = int64_t(vb) > int64_t(tmax[s]) ? vb : tmax[s];
		} else {
			double v = uint64BitsToDouble(vb);
			double mn = uint64BitsToDouble(tmin[s]), mx = uint64BitsToDouble(tmax[s]);

			tsum[s] = doubleBitsToUint64(uint64BitsToDouble(tsum[s]) + v);
			/* NaN never replaces a minimum or maximum (as in odx.hash_groupby) */
			if ((v < mn || mn != mn) && v == v)
				tmin[s] = vb;
			if ((v > mx || mx != mx) && v == v)
				tmax[s] = vb;
		}
		tcnt[s]++;
	}
	for (uint s = 0u; s < SLOTS; s++) {
		if (tcnt[s] == 0UL)
			continue;
		uint r = r0 + used++;
		uint64_t w[4] = uint64_t[4](tcnt[s], tsum[s], tmin[s], tmax[s]);

		rec_keys[r * kw] = uint(tkey[s]);
		if (kw == 2u)
			rec_keys[r * 2u + 1u] = uint(tkey[s] >> 32);
		for (uint k = 0u; k < 4u; k++) {
			rec_vals[r * 8u + 2u * k] = uint(w[k]);
			rec_vals[r * 8u + 2u * k + 1u] = uint(w[k] >> 32);
		}
		rec_pids[r] = part_of(tkey[s]);
	}
	for (uint r = r0 + used; r < r0 + SLOTS; r++) {
		for (uint k = 0u; k < kw; k++)
			rec_keys[r * kw + k] = 0u;
		for (uint k = 0u; k < 8u; k++)
			rec_vals[r * 8u + k] = 0u;
		rec_pids[r] = NO_PART;
	}
}
