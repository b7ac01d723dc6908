#version 450
/* SPDX-License-Identifier: Apache-2.0 */
/*
 * record.comp - GLSL twin of record.cl, compiled once per K (data buffers: glslc -DK=1..3).
 * Bindings 0..K-1 data (u64 words as uint pairs, low word first), binding K the witness; push
 * constants {id, modes}. 64-bit arithmetic is spelt with 32-bit halves so that the shader needs
 * no shaderInt64 feature.
 */
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#define NELEM 64u
#define NWIT 16u

layout(set = 0, binding = 0) buffer D0 { uint d0[]; };
#if K >= 2
layout(set = 0, binding = 1) buffer D1 { uint d1[]; };
#endif
#if K >= 3
layout(set = 0, binding = 2) buffer D2 { uint d2[]; };
#endif
layout(set = 0, binding = K) writeonly buffer Wit { uint wit[]; };
layout(push_constant, std430) uniform Args { int id; int modes; };

uvec2 add64(uvec2 a, uvec2 b)
{
	uint carry;
	uint lo = uaddCarry(a.x, b.x, carry);

	return uvec2(lo, a.y + b.y + carry);
}

uvec2 mul64(uvec2 a, uvec2 b)
{
	uint hi, lo;

	umulExtended(a.x, b.x, hi, lo);
	return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}

/* a >> s for 0 < s < 32 */
uvec2 shr64(uvec2 a, uint s)
{
	return uvec2((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}

const uvec2 GOLDEN = uvec2(0x7f4a7c15u, 0x9e3779b9u);

uvec2 splitmix(uvec2 s)
{
	uvec2 z = add64(s, GOLDEN);

	z = mul64(z ^ shr64(z, 30u), uvec2(0x1ce4e5b9u, 0xbf58476du));
	z = mul64(z ^ shr64(z, 27u), uvec2(0x133111ebu, 0x94d049bbu));
	return z ^ shr64(z, 31u);
}

uvec2 mix64(uvec2 a, uvec2 b)
{
	return splitmix(a ^ mul64(b, GOLDEN));
}

uvec2 load(int i, uint e)
{
#if K >= 2
	if (i == 1)
		return uvec2(d1[2u * e], d1[2u * e + 1u]);
#endif
#if K >= 3
	if (i == 2)
		return uvec2(d2[2u * e], d2[2u * e + 1u]);
#endif
	return uvec2(d0[2u * e], d0[2u * e + 1u]);
}

void store(int i, uint e, uvec2 v)
{
#if K >= 2
	if (i == 1) {
		d1[2u * e] = v.x;
		d1[2u * e + 1u] = v.y;
		return;
	}
#endif
#if K >= 3
	if (i == 2) {
		d2[2u * e] = v.x;
		d2[2u * e + 1u] = v.y;
		return;
	}
#endif
	d0[2u * e] = v.x;
	d0[2u * e + 1u] = v.y;
}

void main()
{
	uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
	uvec2 uid = uvec2(uint(id), 0u); /* id >= 0 */
	uvec2 reads = uid;

	if (gl_LocalInvocationID.x != 0u)
		return;
	for (int i = 0; i < K; i++) {
		if (((modes >> (2 * i)) & 3) != 1)
			continue;
		for (uint e = 0u; e < NELEM; e++)
			reads = mix64(reads, load(i, e));
	}
	for (int i = 0; i < K; i++) {
		int mode = (modes >> (2 * i)) & 3;

		for (uint e = g * NELEM / groups; e < (g + 1u) * NELEM / groups; e++) {
			if (mode == 2)
				store(i, e, mix64(mix64(uid, reads), uvec2(e * 8u + uint(i), 0u)));
			else if (mode == 3)
				store(i, e, add64(add64(add64(mul64(load(i, e), uvec2(31u, 0u)), uid),
							reads), uvec2(e, 0u)));
		}
	}
	for (uint e = g * NWIT / groups; e < (g + 1u) * NWIT / groups; e++) {
		uvec2 w = mix64(reads, uvec2(e, 0u));

		wit[2u * e] = w.x;
		wit[2u * e + 1u] = w.y;
	}
}
