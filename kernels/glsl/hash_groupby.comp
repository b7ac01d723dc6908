#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.hash_groupby - GLSL twin of kernels/src/hash_groupby.cl; bindings and push constants follow docs/kernel-abi.md.
 * Needs shaderInt64, shaderFloat64 and shaderBufferInt64Atomics. */
#extension GL_ARB_gpu_shader_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(set = 0, binding = 1) readonly buffer Values { uint values[]; };
layout(set = 0, binding = 2) buffer Table { uint64_t table[]; };
layout(set = 0, binding = 3) buffer Status { uint status[]; };
layout(push_constant, std430) uniform Args { int n; int capacity; int key_words; int value_kind; };

const uint64_t MIN0_F64 = 0x7ff0000000000000UL;
const uint64_t MAX0_F64 = 0xfff0000000000000UL;
const uint64_t MIN0_I64 = 0x7fffffffffffffffUL;
const uint64_t MAX0_I64 = 0x8000000000000000UL;

uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdUL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53UL;
	k ^= k >> 33;
	return k;
}

uint64_t word64(uint at)
{
	return uint64_t(values[at]) | (uint64_t(values[at + 1u]) << 32);
}

void add_f64(uint at, double v)
{
	uint64_t old = table[at];

	for (;;) {
		uint64_t nw = doubleBitsToUint64(uint64BitsToDouble(old) + v);
		uint64_t prev = atomicCompSwap(table[at], old, nw);

		if (prev == old)
			break;
		old = prev;
	}
}

/* table[at] holds x ^ mask; keeps the smaller (want_min) or larger of x and vb */
void minmax(uint at, uint64_t vb, uint64_t mask, bool is_f64, bool want_min)
{
	uint64_t old = table[at];

	for (;;) {
		uint64_t cur = old ^ mask;
		bool better;

		if (is_f64)
			better = want_min ? uint64BitsToDouble(vb) < uint64BitsToDouble(cur)
					  : uint64BitsToDouble(vb) > uint64BitsToDouble(cur);
		else
			better = want_min ? int64_t(vb) < int64_t(cur) : int64_t(vb) > int64_t(cur);
		if (!better)
			return;
		uint64_t prev = atomicCompSwap(table[at], old, vb ^ mask);

		if (prev == old)
			return;
		old = prev;
	}
}

void main()
{
	uint gsize = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
	uint mask = uint(capacity) - 1u;
	/* value_kind | 8: count and sum only, slots of 3 words */
	uint sw = (value_kind & 8) != 0 ? 3u : 5u;
	int vk = value_kind & 7;
	uint vw = vk == 0 ? 1u : vk <= 2 ? 2u : 8u;
	bool is_f64 = vk != 2 && vk != 4;

	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gsize) {
		uint64_t key = key_words == 2 ? uint64_t(keys[2u * i]) | (uint64_t(keys[2u * i + 1u]) << 32)
					      : uint64_t(keys[i]);
		uint v = i * vw;
		uint64_t cnt = 1UL, sum, lo, hi;
		uint slot = uint(capacity);

		if (vk == 0) {
			sum = doubleBitsToUint64(double(uintBitsToFloat(values[v])));
			lo = hi = sum;
		} else if (vk <= 2) {
			sum = word64(v);
			lo = hi = sum;
		} else {
			cnt = word64(v);
			sum = word64(v + 2u);
			lo = word64(v + 4u);
			hi = word64(v + 6u);
			if (cnt == 0UL)
				continue;
		}
		if (~key != 0UL) {
			uint h = uint(fmix64(key)) & mask;
			bool found = false;

			for (uint j = 0u; j <= mask; j++) {
				uint at = (h + j) & mask;
				uint64_t cur = table[at * sw];

				if (cur == 0UL)
					cur = atomicCompSwap(table[at * sw], 0UL, ~key);
				if (cur == 0UL || cur == ~key) {
					slot = at;
					found = true;
					break;
				}
			}
			if (!found) {
				atomicAdd(status[0], 1u);
				continue;
			}
		}
		uint s = slot * sw;
		atomicAdd(table[s + 1u], cnt);
		if (is_f64)
			add_f64(s + 2u, uint64BitsToDouble(sum));
		else
			atomicAdd(table[s + 2u], sum);
		if (sw == 3u)
			continue;
		minmax(s + 3u, lo, is_f64 ? MIN0_F64 : MIN0_I64, is_f64, true);
		minmax(s + 4u, hi, is_f64 ? MAX0_F64 : MAX0_I64, is_f64, false);
	}
}
