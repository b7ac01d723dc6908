// SPDX-License-Identifier: Apache-2.0
// The axpy of axpy_ptx.h in CUDA C++, compiled by nvcc at build time (when found) into PTX, a
// cubin and a fatbin for test_cuda_real. Multiply then add, rounded like C: results are exact.
extern "C" __global__ void odx_test_axpy(const float *x, float *y, float a, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
