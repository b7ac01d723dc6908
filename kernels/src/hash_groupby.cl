/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.hash_groupby(keys: R u32[n * key_words], values: R u32[n * value words],
 * table: RW u64[(capacity + 1) * 5], status: RW u32[1], n: i32, capacity: i32,
 * key_words: i32, value_kind: i32): count, sum, min and max of the values of every distinct
 * key, aggregated into an open-addressing hash table that lives in a buffer.
 *
 * Keys: u32 (key_words 1) or u64 (key_words 2, little-endian word pairs), any value.
 * Values (value_kind): 0 f32 (summed in f64), 1 f64, 2 i64 (sums wrap mod 2^64), or partial
 * aggregates (records of 4 u64: count, sum, min, max, as odx.hash_combine writes them) to merge:
 * 3 with f64 sums and min/max, 4 with i64 ones; records of count 0 are skipped.
 * value_kind | ODX_GB_SUM_COUNT (8): count and sum only, in slots of 3 u64 words [~key, count,
 * sum] (a table 3/5 the size, one cache line touched per row more often than two).
 *
 * Table: capacity (a power of two) slots of 5 u64 words, [~key, count, sum, min ^ MIN0,
 * max ^ MAX0], plus slot `capacity` for the key 0xffff...ff (whose ~key is 0, the mark of an
 * empty slot). All-zero bytes are an empty table: every field's zero encodes its identity
 * (sum 0, min +inf or INT64_MAX, max -inf or INT64_MIN; MIN0/MAX0 are those values' bits).
 * A key's home slot is fmix64(key) & (capacity - 1), then linear probing over the whole table:
 * a row finds its slot whenever the table has fewer than capacity distinct keys. A row that
 * finds none is not aggregated and adds 1 to status[0]: then the table is incomplete and the
 * caller redoes the pass with a larger table (docs/kernels.md, "growing"). Keys are claimed
 * with a 64-bit compare-and-swap, counts and integer sums added with 64-bit atomics, float
 * sums, minima and maxima updated with compare-and-swap loops. Grid-stride, any grid.
 */
#ifndef ODX_DIALECT_H
#include "odx_dialect.h"
#endif
#ifdef ODX_DIALECT_OPENCL
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#endif

#define ODX_GB_MIN0_F64 0x7ff0000000000000ull
#define ODX_GB_MAX0_F64 0xfff0000000000000ull
#define ODX_GB_MIN0_I64 0x7fffffffffffffffull
#define ODX_GB_MAX0_I64 0x8000000000000000ull

ODX_FUNC ODX_U64 odx__gb_fmix64(ODX_U64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

/* sum += v (f64 bits), by compare-and-swap */
ODX_FUNC void odx__gb_add_f64(ODX_GLOBAL ODX_U64 *p, double v)
{
	ODX_U64 old = *p, prev;

	for (;;) {
		prev = ODX_ATOMIC_CAS_U64(p, old, ODX_F64_BITS(ODX_BITS_F64(old) + v));
		if (prev == old)
			break;
		old = prev;
	}
}

/* *p holds x ^ mask; keeps the smaller (want_min) or larger of x and the value `v` (bits vb).
 * NaN never replaces anything (its comparisons are false). */
ODX_FUNC void odx__gb_minmax(ODX_GLOBAL ODX_U64 *p, ODX_U64 vb, ODX_U64 mask, int is_f64,
			     int want_min)
{
	ODX_U64 old = *p, prev;

	for (;;) {
		ODX_U64 cur = old ^ mask;
		int better;

		if (is_f64)
			better = want_min ? ODX_BITS_F64(vb) < ODX_BITS_F64(cur)
					  : ODX_BITS_F64(vb) > ODX_BITS_F64(cur);
		else
			better = want_min ? (long)vb < (long)cur : (long)vb > (long)cur;
		if (!better)
			return;
		prev = ODX_ATOMIC_CAS_U64(p, old, vb ^ mask);
		if (prev == old)
			return;
		old = prev;
	}
}

ODX_KERNEL(odx_hash_groupby, ODX_GLOBAL const ODX_U32 *keys, ODX_GLOBAL const ODX_U32 *values,
	   ODX_GLOBAL ODX_U64 *table, ODX_GLOBAL ODX_U32 *status, int n, int capacity,
	   int key_words, int value_kind)
{
	ODX_U64 mask = (ODX_U64)capacity - 1;
	int sw = value_kind & ODX_GB_SUM_COUNT ? 3 : 5; /* words per slot */
	int vw, is_f64;

	value_kind &= ~ODX_GB_SUM_COUNT;
	vw = value_kind == 0 ? 1 : value_kind <= 2 ? 2 : 8;
	is_f64 = value_kind != 2 && value_kind != 4;

	for (ODX_IDX i = ODX_GLOBAL_ID(0); i < n; i += ODX_GLOBAL_SIZE(0)) {
		ODX_U64 key = key_words == 2 ? (ODX_U64)keys[2 * i] | (ODX_U64)keys[2 * i + 1] << 32
					     : (ODX_U64)keys[i];
		ODX_GLOBAL const ODX_U32 *v = values + i * vw;
		ODX_U64 cnt = 1, sum, lo, hi, slot = (ODX_U64)capacity;
		ODX_GLOBAL ODX_U64 *s;

		/* the row as a partial aggregate (count, sum, min, max bits) */
		if (value_kind == 0) {
			sum = ODX_F64_BITS((double)ODX_BITS_F32(v[0]));
			lo = hi = sum;
		} else if (value_kind <= 2) {
			sum = (ODX_U64)v[0] | (ODX_U64)v[1] << 32;
			lo = hi = sum;
		} else {
			cnt = (ODX_U64)v[0] | (ODX_U64)v[1] << 32;
			sum = (ODX_U64)v[2] | (ODX_U64)v[3] << 32;
			lo = (ODX_U64)v[4] | (ODX_U64)v[5] << 32;
			hi = (ODX_U64)v[6] | (ODX_U64)v[7] << 32;
			if (cnt == 0)
				continue;
		}
		if (~key != 0) {
			ODX_U64 h = odx__gb_fmix64(key) & mask;
			ODX_U64 j;

			for (j = 0; j <= mask; j++) {
				ODX_U64 at = (h + j) & mask, cur = table[at * sw];

				if (cur == 0)
					cur = ODX_ATOMIC_CAS_U64(&table[at * sw], 0, ~key);
				if (cur == 0 || cur == ~key) {
					slot = at;
					break;
				}
			}
			if (j > mask) {
				ODX_ATOMIC_ADD_U32(&status[0], 1u);
				continue;
			}
		}
		s = table + slot * sw;
		ODX_ATOMIC_ADD_U64(&s[1], cnt);
		if (is_f64)
			odx__gb_add_f64(&s[2], ODX_BITS_F64(sum));
		else
			ODX_ATOMIC_ADD_U64(&s[2], sum);
		if (sw == 3)
			continue;
		odx__gb_minmax(&s[3], lo, is_f64 ? ODX_GB_MIN0_F64 : ODX_GB_MIN0_I64, is_f64, 1);
		odx__gb_minmax(&s[4], hi, is_f64 ? ODX_GB_MAX0_F64 : ODX_GB_MAX0_I64, is_f64, 0);
	}
}
