/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.hash_partition_u32(keys: R u32[n], buckets: W u32[n], n: i32, parts: i32):
 * buckets[i] = fmix32(keys[i]) % parts, fmix32 being MurmurHash3's 32-bit finaliser
 * (h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13; h *= 0xc2b2ae35; h ^= h >> 16). parts >= 1.
 * Grid-stride, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif

ODX_KERNEL(odx_hash_partition_u32, ODX_GLOBAL const ODX_U32 *keys, ODX_GLOBAL ODX_U32 *buckets,
	   int n, int parts)
{
	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U32 h = keys[i];

		h ^= h >> 16;
		h *= 0x85ebca6bu;
		h ^= h >> 13;
		h *= 0xc2b2ae35u;
		h ^= h >> 16;
		buckets[i] = h % (ODX_U32)parts;
	}
}
