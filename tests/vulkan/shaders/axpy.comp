#version 450
// axpy(R x, RW y, i64 n, f32 a): y[i] = a * x[i] + y[i] for i < n, over a 1-D or 2-D grid.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Args { int64_t n; float a; } p;

void main()
{
	uint64_t width = uint64_t(gl_NumWorkGroups.x) * gl_WorkGroupSize.x;
	uint64_t i = uint64_t(gl_GlobalInvocationID.y) * width + gl_GlobalInvocationID.x;

	if (i < uint64_t(p.n))
		y[uint(i)] = p.a * x[uint(i)] + y[uint(i)];
}
