/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.hash_partition_u64(keys: R u64[n] (as 2n u32 words, little-endian), buckets: W u32[n],
 * n: i32, parts: i32): buckets[i] = fmix64(keys[i]) % parts, fmix64 being MurmurHash3's 64-bit
 * finaliser (k ^= k >> 33; k *= 0xff51afd7ed558ccd; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53;
 * k ^= k >> 33). parts >= 1. Grid-stride, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_hash_partition_u64, ODX_GLOBAL const ODX_U32 *keys, ODX_GLOBAL ODX_U32 *buckets,
	   int n, int parts)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U64 k = (ODX_U64)keys[2 * i] | (ODX_U64)keys[2 * i + 1] << 32;

		k ^= k >> 33;
		k *= 0xff51afd7ed558ccdull;
		k ^= k >> 33;
		k *= 0xc4ceb9fe1a85ec53ull;
		k ^= k >> 33;
		buckets[i] = (ODX_U32)(k % (ODX_U64)parts);
	}
}
