/* SPDX-License-Identifier: Apache-2.0 */
/*
 * axpy_ptx.h - hand-written PTX kernels for the CUDA tests and benchmarks, so that they need no
 * CUDA toolkit at build time. PTX ISA 7.0 for sm_70 and newer: any driver since CUDA 11.0 JITs
 * it for the GPU at hand.
 *
 * odx_test_axpy(x: R f32[n], y: RW f32[n], a: f32, n: i32): y[i] = a * x[i] + y[i], grid-stride,
 * rounded like C (a multiply, then an add: no fused multiply-add), so results compare exactly.
 * odx_test_fault(p: RW f32[1]): stores through a null pointer (an illegal address).
 */
#ifndef ODX_TESTS_GPU_AXPY_PTX_H
#define ODX_TESTS_GPU_AXPY_PTX_H

static const char odx_test_axpy_ptx[] =
	".version 7.0\n"
	".target sm_70\n"
	".address_size 64\n"
	"\n"
	".visible .entry odx_test_axpy(\n"
	"\t.param .u64 px,\n"
	"\t.param .u64 py,\n"
	"\t.param .f32 pa,\n"
	"\t.param .u32 pn\n"
	")\n"
	"{\n"
	"\t.reg .pred %p<2>;\n"
	"\t.reg .f32 %f<6>;\n"
	"\t.reg .b32 %r<8>;\n"
	"\t.reg .b64 %rd<8>;\n"
	"\tld.param.u64 %rd1, [px];\n"
	"\tld.param.u64 %rd2, [py];\n"
	"\tld.param.f32 %f1, [pa];\n"
	"\tld.param.u32 %r1, [pn];\n"
	"\tcvta.to.global.u64 %rd3, %rd1;\n"
	"\tcvta.to.global.u64 %rd4, %rd2;\n"
	"\tmov.u32 %r2, %ctaid.x;\n"
	"\tmov.u32 %r3, %ntid.x;\n"
	"\tmov.u32 %r4, %tid.x;\n"
	"\tmad.lo.s32 %r5, %r2, %r3, %r4;\n"
	"\tmov.u32 %r6, %nctaid.x;\n"
	"\tmul.lo.s32 %r7, %r6, %r3;\n"
	"LOOP:\n"
	"\tsetp.ge.s32 %p1, %r5, %r1;\n"
	"\t@%p1 bra DONE;\n"
	"\tmul.wide.s32 %rd5, %r5, 4;\n"
	"\tadd.s64 %rd6, %rd3, %rd5;\n"
	"\tadd.s64 %rd7, %rd4, %rd5;\n"
	"\tld.global.f32 %f2, [%rd6];\n"
	"\tld.global.f32 %f3, [%rd7];\n"
	"\tmul.rn.f32 %f4, %f1, %f2;\n"
	"\tadd.rn.f32 %f5, %f4, %f3;\n"
	"\tst.global.f32 [%rd7], %f5;\n"
	"\tadd.s32 %r5, %r5, %r7;\n"
	"\tbra LOOP;\n"
	"DONE:\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry odx_test_fault(\n"
	"\t.param .u64 pp\n"
	")\n"
	"{\n"
	"\t.reg .f32 %f<2>;\n"
	"\t.reg .b64 %rd<2>;\n"
	"\tmov.f32 %f1, 0f3F800000;\n"
	"\tmov.u64 %rd1, 0;\n"
	"\tst.global.f32 [%rd1], %f1;\n"
	"\tret;\n"
	"}\n";

#endif /* ODX_TESTS_GPU_AXPY_PTX_H */
