/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.hash_combine(keys: R u32[n * key_words], values: R u32[n * value words],
 * pids: W u32[n], rec_keys: W u32[grid.x * S * key_words], rec_vals: W u32[grid.x * S * 8],
 * rec_pids: W u32[grid.x * S], n: i32, parts: i32, key_words: i32, value_kind: i32), with
 * S = ODX_COMBINE_SLOTS (256): pre-aggregates hot keys before a shuffle.
 *
 * Work-group g reads its chunk [g * c, min(n, (g + 1) * c)), c = ceil(n / grid.x), in order
 * into a private table of S slots (home fmix64(key) & (S - 1), at most ODX_COMBINE_PROBES
 * probes). A row whose key has or finds a slot is aggregated there and gets
 * pids[i] = ODX_NO_PART (it leaves the row stream); a row that finds none passes through
 * unchanged: pids[i] = its partition, fmix32(key) % parts for u32 keys (odx.hash_partition_u32),
 * fmix64(key) % parts for u64 keys (odx.hash_partition_u64). The group then writes its used
 * slots in slot order as records r = g * S + 0, 1, ...: the key in rec_keys, (count, sum, min,
 * max) as 4 little-endian u64 in rec_vals (f64 for value_kind 0 and 1, i64 for 2), the key's
 * partition in rec_pids; the remaining records of the group get count 0 and ODX_NO_PART.
 * Rows and records then go through odx.partition_count / scan_u32 / partition_rank /
 * scatter_rows like any columns, and the receiver aggregates rows with odx.hash_groupby
 * (value_kind as here) and records with value_kind 3 (f64) or 4 (i64).
 *
 * value_kind: 0 f32 (summed in f64), 1 f64, 2 i64. key_words: 1 or 2. parts >= 1. 1-D launch;
 * work-item 0 of each group does the group's work in sequence (deterministic for a given
 * grid): launch block = {1} and as many groups as the device has threads to spare.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif
#ifdef ODX_DIALECT_OPENCL
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define ODX_COMBINE_PROBES 8

ODX_FUNC ODX_U64 odx__cb_fmix64(ODX_U64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

ODX_FUNC ODX_U32 odx__cb_part(ODX_U64 key, int key_words, int parts)
{
	ODX_U32 h = (ODX_U32)key;

	if (key_words == 2)
		return (ODX_U32)(odx__cb_fmix64(key) % (ODX_U64)parts);
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h % (ODX_U32)parts;
}

ODX_KERNEL(odx_hash_combine, ODX_GLOBAL const ODX_U32 *keys, ODX_GLOBAL const ODX_U32 *values,
	   ODX_GLOBAL ODX_U32 *pids, ODX_GLOBAL ODX_U32 *rec_keys, ODX_GLOBAL ODX_U32 *rec_vals,
	   ODX_GLOBAL ODX_U32 *rec_pids, int n, int parts, int key_words, int value_kind)
{
	ODX_U64 tkey[ODX_COMBINE_SLOTS], tcnt[ODX_COMBINE_SLOTS], tsum[ODX_COMBINE_SLOTS];
	ODX_U64 tmin[ODX_COMBINE_SLOTS], tmax[ODX_COMBINE_SLOTS];
	int g = ODX_GROUP_ID(0), groups = ODX_NUM_GROUPS(0);
	ODX_IDX chunk = ((ODX_IDX)n + groups - 1) / groups;
	ODX_IDX first = (ODX_IDX)g * chunk, end = first + chunk < n ? first + chunk : n;
	ODX_IDX r0 = (ODX_IDX)g * ODX_COMBINE_SLOTS;
	int used = 0;

	if (ODX_LOCAL_ID(0) != 0)
		return;
	for (int s = 0; s < ODX_COMBINE_SLOTS; s++)
		tcnt[s] = 0;
	for (ODX_IDX i = first; i < end; i++) {
		ODX_U64 key = key_words == 2 ? (ODX_U64)keys[2 * i] | (ODX_U64)keys[2 * i + 1] << 32
					     : (ODX_U64)keys[i];
		ODX_U64 vb = value_kind == 0
				     ? ODX_F64_BITS((double)ODX_BITS_F32(values[i]))
				     : (ODX_U64)values[2 * i] | (ODX_U64)values[2 * i + 1] << 32;
		ODX_U32 h = (ODX_U32)(odx__cb_fmix64(key) & (ODX_COMBINE_SLOTS - 1));
		int s = -1;

		for (int j = 0; j < ODX_COMBINE_PROBES && s < 0; j++) {
			int at = (int)((h + (ODX_U32)j) & (ODX_COMBINE_SLOTS - 1));

			if (tcnt[at] == 0 || tkey[at] == key)
				s = at;
		}
		if (s < 0) {
			pids[i] = odx__cb_part(key, key_words, parts);
			continue;
		}
		pids[i] = ODX_NO_PART;
		if (tcnt[s] == 0) {
			tkey[s] = key;
			tsum[s] = vb;
			tmin[s] = tmax[s] = vb;
		} else if (value_kind == 2) {
			tsum[s] += vb;
			tmin[s] = (long)vb < (long)tmin[s] ? vb : tmin[s];
			tmax[s] = (long)vb > (long)tmax[s] ? vb : tmax[s];
		} else {
			double v = ODX_BITS_F64(vb), mn = ODX_BITS_F64(tmin[s]);
			double mx = ODX_BITS_F64(tmax[s]);

			tsum[s] = ODX_F64_BITS(ODX_BITS_F64(tsum[s]) + v);
			/* NaN never replaces a minimum or maximum (as in odx.hash_groupby) */
			if ((v < mn || mn != mn) && v == v)
				tmin[s] = vb;
			if ((v > mx || mx != mx) && v == v)
				tmax[s] = vb;
		}
		tcnt[s]++;
	}
	for (int s = 0; s < ODX_COMBINE_SLOTS; s++) {
		ODX_IDX r;
		ODX_U64 w[4];

		if (tcnt[s] == 0)
			continue;
		r = r0 + used++;
		w[0] = tcnt[s];
		w[1] = tsum[s];
		w[2] = tmin[s];
		w[3] = tmax[s];
		rec_keys[r * key_words] = (ODX_U32)tkey[s];
		if (key_words == 2)
			rec_keys[r * 2 + 1] = (ODX_U32)(tkey[s] >> 32);
		for (int k = 0; k < 4; k++) {
			rec_vals[r * 8 + 2 * k] = (ODX_U32)w[k];
			rec_vals[r * 8 + 2 * k + 1] = (ODX_U32)(w[k] >> 32);
		}
		rec_pids[r] = odx__cb_part(tkey[s], key_words, parts);
	}
	for (ODX_IDX r = r0 + used; r < r0 + ODX_COMBINE_SLOTS; r++) {
		for (int k = 0; k < key_words; k++)
			rec_keys[r * key_words + k] = 0;
		for (int k = 0; k < 8; k++)
			rec_vals[r * 8 + k] = 0;
		rec_pids[r] = ODX_NO_PART;
	}
}
