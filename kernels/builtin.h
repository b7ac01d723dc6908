/* SPDX-License-Identifier: Apache-2.0 */
/* builtin.h - internal: the standard kernel set's list and its host variants. */
#ifndef ODX_KERNELS_BUILTIN_H
#define ODX_KERNELS_BUILTIN_H

#include "odx/odx.h"

/* X(name): every kernel of the standard set, registered as "odx.<name>". */
#define ODX__STD_KERNELS(X)                                                                        \
	X(fill_u32)                                                                                \
	X(copy_u32)                                                                                \
	X(scale_f32)                                                                               \
	X(axpy_f32)                                                                                \
	X(reduce_sum_f32)                                                                          \
	X(gemm_f32)                                                                                \
	X(hash_partition_u32)                                                                      \
	X(histogram_u32)                                                                           \
	X(groupby_sum_i32)                                                                         \
	X(hash_partition_u64)                                                                      \
	X(partition_count)                                                                         \
	X(scan_u32)                                                                                \
	X(partition_rank)                                                                          \
	X(scatter_rows)                                                                            \
	X(hash_groupby)                                                                            \
	X(hash_combine)

#define ODX__DECLARE_HOST(k) int odx__host_##k(const odx_host_launch *l);
ODX__STD_KERNELS(ODX__DECLARE_HOST)
#undef ODX__DECLARE_HOST

/* odx.hash_combine's host variant for u32 keys and f32 values, after the launch was checked
 * (host_combine.c): 0, or -1 if it could not run (no memory for its table; nothing written). */
int odx__host_combine_u32_f32(const odx_host_launch *l, int32_t n, int32_t parts);

#endif /* ODX_KERNELS_BUILTIN_H */
