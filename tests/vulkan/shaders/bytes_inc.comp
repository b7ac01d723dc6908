#version 450
// bytes_inc(RW bytes, i64 n): adds 1 (mod 256) to each of the first n bytes, one word per
// work-item; bytes past n in the last word are left alone.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) buffer B { uint w[]; };
layout(push_constant) uniform Args { int64_t n; } p;

void main()
{
	uint word = gl_GlobalInvocationID.x;
	uint v, r = 0;

	if (uint64_t(word) * 4 >= uint64_t(p.n))
		return;
	v = w[word];
	for (uint j = 0; j < 4; j++) {
		uint b = (v >> (8 * j)) & 0xffu;

		if (uint64_t(word) * 4 + j < uint64_t(p.n))
			b = (b + 1) & 0xffu;
		r |= b << (8 * j);
	}
	w[word] = r;
}
