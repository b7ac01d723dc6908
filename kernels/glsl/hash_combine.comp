#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/* odx.hash_combine - GLSL twin of kernels/src/hash_combine.cl; bindings and push constants follow docs/kernel-abi.md.
 * Needs shaderInt64 and shaderFloat64.
 *
 * Written for Mesa's llvmpipe (lavapipe) too: its compiled shader ends every loop, silently, once
 * all loops of an invocation (one call runs a SIMD batch of invocations) have gone round 65535
 * times together (LP_MAX_TGSI_LOOP_ITERATIONS: one counter, not one per loop). A loop round a row,
 * plus a round a probe, stopped the first version of this shader at row 6671 of a chunk of
 * distinct keys. So no loop here goes round once a row: the 8 probes are written out, the rows go
 * ROWS_PER_ROUND a round (the last < ROWS_PER_ROUND one a round), the slots and records 8 a round:
 * at most 128 rounds besides the rows' rounds. A group's chunk of up to (65535 - 128) x
 * ROWS_PER_ROUND = 523,256 rows is whole on lavapipe; past that it is not (docs/kernels.md).
 * Other drivers have no such limit. ROWS_PER_ROUND is not larger because each written-out row
 * costs lavapipe's first compile of the shader about 0.35 s of CPU (8: 3 s, 32: 18 s). */
#extension GL_ARB_gpu_shader_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
/* For the Vulkan backend's check of lavapipe's loop budget (backends/vulkan/budget.c): which
 * standard kernel this is. Read from the SPIR-V, never specialized; main's first line keeps it. */
layout(constant_id = 100) const uint ODX_LOOP_KERNEL = 11u;
layout(set = 0, binding = 0) readonly buffer Keys { uint keys[]; };
layout(set = 0, binding = 1) readonly buffer Values { uint values[]; };
layout(set = 0, binding = 2) writeonly buffer Pids { uint pids[]; };
layout(set = 0, binding = 3) writeonly buffer RecKeys { uint rec_keys[]; };
layout(set = 0, binding = 4) writeonly buffer RecVals { uint rec_vals[]; };
layout(set = 0, binding = 5) writeonly buffer RecPids { uint rec_pids[]; };
layout(push_constant, std430) uniform Args { int n; int parts; int key_words; int value_kind; };

const uint SLOTS = 256u; /* ODX_COMBINE_SLOTS */
const uint NO_PART = 0xffffffffu;
const uint ROWS_PER_ROUND = 8u; /* the main loop's rows a round: see above */

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

/* The first of slots h, h + 1, ... h + 7 (mod SLOTS: ODX_COMBINE_PROBES probes) that is empty or
 * holds key, or -1. Written out: a loop here would cost a loop round a probe (see above). */
int find_slot(uint h, uint64_t key)
{
	int s = -1;
	/* no branch: both words read, the first fit chosen by select */
#define PROBE(j)                                                                                   \
	{                                                                                          \
		uint at = (h + (j)) & (SLOTS - 1u);                                                \
		bool fits = any(bvec2(tcnt[at] == 0UL, tkey[at] == key));                          \
		s = all(bvec2(s < 0, fits)) ? int(at) : s;                                         \
	}
	PROBE(0u) PROBE(1u) PROBE(2u) PROBE(3u) PROBE(4u) PROBE(5u) PROBE(6u) PROBE(7u)
#undef PROBE
	return s;
}

/* Row i: into its slot, or passed through to its partition. */
void add_row(uint i)
{
	uint64_t key = key_words == 2 ? uint64_t(keys[2u * i]) | (uint64_t(keys[2u * i + 1u]) << 32)
				      : uint64_t(keys[i]);
	uint64_t vb = value_kind == 0
			      ? doubleBitsToUint64(double(uintBitsToFloat(values[i])))
			      : uint64_t(values[2u * i]) | (uint64_t(values[2u * i + 1u]) << 32);
	int s = find_slot(uint(fmix64(key)) & (SLOTS - 1u), key);

	if (s < 0) {
		pids[i] = part_of(key);
		return;
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

/* Record r: key k, the 4 aggregates w, partition pid. */
void put_record(uint r, uint64_t k, uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, uint pid)
{
	if (key_words == 2) {
		rec_keys[r * 2u] = uint(k);
		rec_keys[r * 2u + 1u] = uint(k >> 32);
	} else {
		rec_keys[r] = uint(k);
	}
	rec_vals[r * 8u] = uint(w0);
	rec_vals[r * 8u + 1u] = uint(w0 >> 32);
	rec_vals[r * 8u + 2u] = uint(w1);
	rec_vals[r * 8u + 3u] = uint(w1 >> 32);
	rec_vals[r * 8u + 4u] = uint(w2);
	rec_vals[r * 8u + 5u] = uint(w2 >> 32);
	rec_vals[r * 8u + 6u] = uint(w3);
	rec_vals[r * 8u + 7u] = uint(w3 >> 32);
	rec_pids[r] = pid;
}

#define ROWS4(i) add_row(i); add_row((i) + 1u); add_row((i) + 2u); add_row((i) + 3u);
#define ROWS8(i) ROWS4(i) ROWS4((i) + 4u)

void main()
{
	if (ODX_LOOP_KERNEL == 0u)
		return;
	uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
	uint chunk = (uint(n) + groups - 1u) / groups;
	uint first = min(g * chunk, uint(n)), end = min(first + chunk, uint(n));
	uint r0 = g * SLOTS, used = 0u, i = first;

	if (gl_LocalInvocationID.x != 0u)
		return;
	for (uint s = 0u; s < SLOTS; s += 8u) {
		tcnt[s] = 0UL;
		tcnt[s + 1u] = 0UL;
		tcnt[s + 2u] = 0UL;
		tcnt[s + 3u] = 0UL;
		tcnt[s + 4u] = 0UL;
		tcnt[s + 5u] = 0UL;
		tcnt[s + 6u] = 0UL;
		tcnt[s + 7u] = 0UL;
	}
	/* end <= n < 2^31: i + ROWS_PER_ROUND does not wrap */
	for (; i + ROWS_PER_ROUND <= end; i += ROWS_PER_ROUND) {
		ROWS8(i)
	}
	for (; i < end; i++)
		add_row(i);
	/* the used slots in slot order, then count 0 to the group's last record */
	for (uint s = 0u; s < SLOTS; s += 8u) {
#define PUT(j)                                                                                     \
	if (tcnt[s + (j)] != 0UL) {                                                                \
		uint t = s + (j);                                                                  \
		put_record(r0 + used, tkey[t], tcnt[t], tsum[t], tmin[t], tmax[t],                 \
			   part_of(tkey[t]));                                                      \
		used++;                                                                            \
	}
		PUT(0u) PUT(1u) PUT(2u) PUT(3u) PUT(4u) PUT(5u) PUT(6u) PUT(7u)
#undef PUT
	}
	for (uint r = used; r < SLOTS; r += 8u) {
#define EMPTY(j)                                                                                   \
	if (r + (j) < SLOTS)                                                                       \
		put_record(r0 + r + (j), 0UL, 0UL, 0UL, 0UL, 0UL, NO_PART);
		EMPTY(0u) EMPTY(1u) EMPTY(2u) EMPTY(3u) EMPTY(4u) EMPTY(5u) EMPTY(6u) EMPTY(7u)
#undef EMPTY
	}
}
