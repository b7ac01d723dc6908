#version 450
// mixed(R ints, R floats, W out, i32 a, f64 b, i32 n, i64 d, f32 e): std430 offsets 0, 8, 16,
// 24, 32. out[i] = ints[i] * b + floats[i] * e + a + d for i < n.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer I { int ints[]; };
layout(set = 0, binding = 1) readonly buffer F { float floats[]; };
layout(set = 0, binding = 2) writeonly buffer O { double outv[]; };
layout(push_constant) uniform Args { int a; double b; int n; int64_t d; float e; } p;

void main()
{
	uint i = gl_GlobalInvocationID.x;

	if (i < uint(p.n))
		outv[i] = double(ints[i]) * p.b + double(floats[i]) * double(p.e) + double(p.a) +
			  double(p.d);
}
