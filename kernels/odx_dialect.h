/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx_dialect.h - one kernel source, four languages: OpenCL C, CUDA, HIP and C.
 *
 * A kernel of the standard set is written once against the macros below and compiled as:
 *  - OpenCL C: the text of this header followed by the kernel source, built by the OpenCL
 *    backend at run time (__OPENCL_VERSION__ is defined);
 *  - CUDA: nvcc -x cu (fatbin and PTX embedded in libodx) (__CUDACC__);
 *  - HIP: clang -x hip --cuda-device-only -nogpuinc (__HIP__), with no HIP header: the few
 *    builtins needed are spelled with clang's amdgcn intrinsics;
 *  - C: kernels/host_kernels.c includes the source; a kernel becomes a static function called
 *    once per work-item by a host wrapper that loops over the work-groups
 *    [group_first, group_first + group_count) of an odx_host_launch and the work-items of each.
 *
 * Vocabulary:
 *   ODX_KERNEL(name, params...)   a kernel entry point (extern "C" for CUDA/HIP)
 *   ODX_FUNC                      a helper function callable from kernels
 *   ODX_GLOBAL                    address space of buffer parameters
 *   ODX_GLOBAL_ID(d)              group_id * block + local_id in dimension d (int)
 *   ODX_GLOBAL_SIZE(d)            grid * block in dimension d (int)
 *   ODX_LOCAL_ID(d), ODX_LOCAL_SIZE(d), ODX_GROUP_ID(d), ODX_NUM_GROUPS(d)
 *   ODX_SHARED                    work-group shared memory (declare inside the kernel)
 *   ODX_BARRIER()                 work-group barrier with shared-memory fence
 *   ODX_ATOMIC_ADD_U32(p, v)      relaxed 32-bit atomic add on global memory
 *   ODX_ATOMIC_ADD_I32(p, v)
 *   ODX_LOCAL_ATOMIC_ADD_U32(p, v) the same on ODX_SHARED memory (not in C: no shared memory)
 *   ODX_ATOMIC_ADD_U64(p, v)      relaxed 64-bit atomic add on global memory; returns nothing
 *   ODX_ATOMIC_CAS_U64(p, c, v)   64-bit compare-and-swap on global memory: returns the old
 *                                 value (stored v when it equalled c). OpenCL needs
 *                                 cl_khr_int64_base_atomics, enabled by the kernels using it
 *   ODX_F64_BITS(d), ODX_BITS_F64(u), ODX_BITS_F32(u)   bit casts (double <-> u64, u32 -> float)
 *   ODX_U64                       64-bit unsigned integer type
 *   ODX_IDX                       64-bit signed index: grid-stride loops and row * width
 *                                 products (i + ODX_GLOBAL_SIZE never wraps an int)
 *
 * C has no barrier between sequentially run work-items: ODX_SHARED and ODX_BARRIER are not
 * defined there, and a kernel that needs them (reduce_sum_f32, gemm_f32) carries a separate C
 * body under `#if ODX_DIALECT_C` that computes the same result in the same order.
 */
#ifndef ODX_DIALECT_H
#define ODX_DIALECT_H

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
/* ---- OpenCL C 1.2 ---------------------------------------------------------------------- */
#define ODX_DIALECT_OPENCL 1
#define ODX_KERNEL(name, ...) __kernel void name(__VA_ARGS__)
#define ODX_FUNC static inline
#define ODX_GLOBAL __global
#define ODX_GLOBAL_ID(d) ((int)get_global_id(d))
#define ODX_GLOBAL_SIZE(d) ((int)get_global_size(d))
#define ODX_LOCAL_ID(d) ((int)get_local_id(d))
#define ODX_LOCAL_SIZE(d) ((int)get_local_size(d))
#define ODX_GROUP_ID(d) ((int)get_group_id(d))
#define ODX_NUM_GROUPS(d) ((int)get_num_groups(d))
#define ODX_SHARED __local
#define ODX_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define ODX_ATOMIC_ADD_U32(p, v) atomic_add((volatile __global uint *)(p), (uint)(v))
#define ODX_ATOMIC_ADD_I32(p, v) atomic_add((volatile __global int *)(p), (int)(v))
#define ODX_LOCAL_ATOMIC_ADD_U32(p, v) atomic_add((volatile __local uint *)(p), (uint)(v))
#define ODX_ATOMIC_ADD_U64(p, v) atom_add((volatile __global ulong *)(p), (ulong)(v))
#define ODX_ATOMIC_CAS_U64(p, c, v) atom_cmpxchg((volatile __global ulong *)(p), (ulong)(c), (ulong)(v))
#define ODX_F64_BITS(d) as_ulong(d)
#define ODX_BITS_F64(u) as_double(u)
#define ODX_BITS_F32(u) as_float(u)
#define ODX_U64 ulong
#define ODX_IDX long
#define ODX_U32 uint

#elif defined(__HIP__)
/* ---- HIP, device-only, no HIP headers (clang -nogpuinc) --------------------------------- */
#define ODX_DIALECT_HIP 1
#define ODX_KERNEL(name, ...) extern "C" __attribute__((global)) void name(__VA_ARGS__)
#define ODX_FUNC static inline __attribute__((device))
#define ODX_GLOBAL
#define ODX__HIP_PICK(d, f) ((d) == 0 ? f##_x() : (d) == 1 ? f##_y() : f##_z())
#define ODX_LOCAL_ID(d) ((int)ODX__HIP_PICK(d, __builtin_amdgcn_workitem_id))
#define ODX_GROUP_ID(d) ((int)ODX__HIP_PICK(d, __builtin_amdgcn_workgroup_id))
#define ODX_LOCAL_SIZE(d) ((int)ODX__HIP_PICK(d, __builtin_amdgcn_workgroup_size))
#define ODX_NUM_GROUPS(d) ((int)(ODX__HIP_PICK(d, __builtin_amdgcn_grid_size) / ODX_LOCAL_SIZE(d)))
#define ODX_GLOBAL_ID(d) (ODX_GROUP_ID(d) * ODX_LOCAL_SIZE(d) + ODX_LOCAL_ID(d))
#define ODX_GLOBAL_SIZE(d) ((int)ODX__HIP_PICK(d, __builtin_amdgcn_grid_size))
#define ODX_SHARED __attribute__((shared)) static
#define ODX_BARRIER()                                                                              \
	do {                                                                                       \
		__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");                             \
		__builtin_amdgcn_s_barrier();                                                      \
		__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");                             \
	} while (0)
#define ODX_ATOMIC_ADD_U32(p, v)                                                                   \
	__atomic_fetch_add((unsigned *)(p), (unsigned)(v), __ATOMIC_RELAXED)
#define ODX_ATOMIC_ADD_I32(p, v) __atomic_fetch_add((int *)(p), (int)(v), __ATOMIC_RELAXED)
#define ODX_LOCAL_ATOMIC_ADD_U32(p, v) ODX_ATOMIC_ADD_U32(p, v)
#define ODX_ATOMIC_ADD_U64(p, v)                                                                   \
	__atomic_fetch_add((unsigned long long *)(p), (unsigned long long)(v), __ATOMIC_RELAXED)
ODX_FUNC unsigned long long odx__cas_u64(unsigned long long *p, unsigned long long c,
					 unsigned long long v)
{
	__atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return c;
}
#define ODX_ATOMIC_CAS_U64(p, c, v) odx__cas_u64((unsigned long long *)(p), (c), (v))
#define ODX_F64_BITS(d) __builtin_bit_cast(unsigned long long, (double)(d))
#define ODX_BITS_F64(u) __builtin_bit_cast(double, (unsigned long long)(u))
#define ODX_BITS_F32(u) __builtin_bit_cast(float, (unsigned)(u))
#define ODX_U64 unsigned long long
#define ODX_IDX long long
#define ODX_U32 unsigned

#elif defined(__CUDACC__)
/* ---- CUDA -------------------------------------------------------------------------------- */
#define ODX_DIALECT_CUDA 1
#define ODX_KERNEL(name, ...) extern "C" __global__ void name(__VA_ARGS__)
#define ODX_FUNC static inline __device__
#define ODX_GLOBAL
#define ODX__CU_PICK(v, d) ((d) == 0 ? (v).x : (d) == 1 ? (v).y : (v).z)
#define ODX_LOCAL_ID(d) ((int)ODX__CU_PICK(threadIdx, d))
#define ODX_GROUP_ID(d) ((int)ODX__CU_PICK(blockIdx, d))
#define ODX_LOCAL_SIZE(d) ((int)ODX__CU_PICK(blockDim, d))
#define ODX_NUM_GROUPS(d) ((int)ODX__CU_PICK(gridDim, d))
#define ODX_GLOBAL_ID(d) (ODX_GROUP_ID(d) * ODX_LOCAL_SIZE(d) + ODX_LOCAL_ID(d))
#define ODX_GLOBAL_SIZE(d) (ODX_NUM_GROUPS(d) * ODX_LOCAL_SIZE(d))
#define ODX_SHARED __shared__
#define ODX_BARRIER() __syncthreads()
#define ODX_ATOMIC_ADD_U32(p, v) atomicAdd((unsigned *)(p), (unsigned)(v))
#define ODX_ATOMIC_ADD_I32(p, v) atomicAdd((int *)(p), (int)(v))
#define ODX_LOCAL_ATOMIC_ADD_U32(p, v) atomicAdd((unsigned *)(p), (unsigned)(v))
#define ODX_ATOMIC_ADD_U64(p, v) atomicAdd((unsigned long long *)(p), (unsigned long long)(v))
#define ODX_ATOMIC_CAS_U64(p, c, v)                                                                \
	atomicCAS((unsigned long long *)(p), (unsigned long long)(c), (unsigned long long)(v))
#define ODX_F64_BITS(d) ((unsigned long long)__double_as_longlong(d))
#define ODX_BITS_F64(u) __longlong_as_double((long long)(u))
#define ODX_BITS_F32(u) __uint_as_float(u)
#define ODX_U64 unsigned long long
#define ODX_IDX long long
#define ODX_U32 unsigned

#else
/* ---- C (host variants) ------------------------------------------------------------------- */
#include <stdint.h>
#include <string.h>

#define ODX_DIALECT_C 1

/* The work-item a C kernel body runs as; filled by the host wrapper's loops. */
typedef struct odx_item {
	uint32_t local[3];
	uint32_t group[3];
	uint32_t block[3];
	uint32_t grid[3];
} odx_item;

#define ODX_KERNEL(name, ...) static void name(const odx_item *odx__it, __VA_ARGS__)
#define ODX_FUNC static inline
#define ODX_GLOBAL
#define ODX_LOCAL_ID(d) ((int)odx__it->local[d])
#define ODX_GROUP_ID(d) ((int)odx__it->group[d])
#define ODX_LOCAL_SIZE(d) ((int)odx__it->block[d])
#define ODX_NUM_GROUPS(d) ((int)odx__it->grid[d])
#define ODX_GLOBAL_ID(d) (ODX_GROUP_ID(d) * ODX_LOCAL_SIZE(d) + ODX_LOCAL_ID(d))
#define ODX_GLOBAL_SIZE(d) (ODX_NUM_GROUPS(d) * ODX_LOCAL_SIZE(d))
/* Chunks of one launch may run on several threads of a host device at once. */
#define ODX_ATOMIC_ADD_U32(p, v)                                                                   \
	__atomic_fetch_add((uint32_t *)(p), (uint32_t)(v), __ATOMIC_RELAXED)
#define ODX_ATOMIC_ADD_I32(p, v) __atomic_fetch_add((int32_t *)(p), (int32_t)(v), __ATOMIC_RELAXED)
#define ODX_ATOMIC_ADD_U64(p, v)                                                                   \
	__atomic_fetch_add((uint64_t *)(p), (uint64_t)(v), __ATOMIC_RELAXED)
static inline uint64_t odx__cas_u64(uint64_t *p, uint64_t c, uint64_t v)
{
	__atomic_compare_exchange_n(p, &c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return c;
}
#define ODX_ATOMIC_CAS_U64(p, c, v) odx__cas_u64((uint64_t *)(p), (c), (v))
static inline uint64_t odx__f64_bits(double d)
{
	uint64_t u;

	memcpy(&u, &d, 8);
	return u;
}
static inline double odx__bits_f64(uint64_t u)
{
	double d;

	memcpy(&d, &u, 8);
	return d;
}
static inline float odx__bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}
#define ODX_F64_BITS(d) odx__f64_bits(d)
#define ODX_BITS_F64(u) odx__bits_f64(u)
#define ODX_BITS_F32(u) odx__bits_f32(u)
#define ODX_U64 uint64_t
#define ODX_IDX int64_t
#define ODX_U32 uint32_t
#endif

#ifndef ODX_DIALECT_C
#define ODX_DIALECT_C 0
#endif

/* Limits the standard kernels that use shared memory are compiled for. */
#define ODX_REDUCE_MAX_BLOCK 256
#define ODX_GEMM_TILE 16
/* The data kernels (docs/kernels.md): partitions counted in shared memory, the block of the
 * scan and the rank kernels, the bins a work-group histogram keeps in shared memory, the slots
 * of a combiner's private table. */
#define ODX_PARTITION_MAX_PARTS 4096
#define ODX_DATA_MAX_BLOCK 256
#define ODX_HISTOGRAM_SHARED_BINS 1024
#define ODX_COMBINE_SLOTS 256
/* A row that goes to no partition (dropped by the count, rank and scatter kernels). */
#define ODX_NO_PART 0xffffffffu
/* hash_groupby's value_kind flag: count and sum only, 3-word slots (docs/kernels.md) */
#define ODX_GB_SUM_COUNT 8

#endif /* ODX_DIALECT_H */
