/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host_combine.c - the host variant of odx.hash_combine for u32 keys and f32 values (the
 * distributed group-by's case); host_kernels.c checks the launch and calls it, and runs the
 * kernel body (src/hash_combine.cl) for the other key and value kinds.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "builtin.h"
#include "odx_dialect.h"

/*
 * odx.hash_combine on the host for u32 keys and f32 values (the group-by's case): one table for
 * all the groups of this call instead of one of ODX_COMBINE_SLOTS per group, as many slots as
 * the call has records (its groups x 256, rounded down to a power of two, at most CB_MAX_SLOTS:
 * L1/L2-sized). The kernel body's per-group tables of 256 slots, each over its own chunk, let
 * about half the rows of Zipf 1.1 keys over 1M keys through at 16M rows; one table of 4096-8192
 * slots over the call's rows takes 70-74% of them (docs/performance-log.md, issue 20).
 *
 * The table is buckets of CB_WAYS u32 keys, filled in order (a bucket's first `fill` slots are
 * used): a row compares its key with its bucket's CB_WAYS keys at once (SSE2) and, when the key
 * is not there and the bucket is full, passes through. The bucket is the high bits of fmix32(key)
 * and the partition fmix32(key) % parts (a multiply, not a division), so one hash serves both.
 * An unused slot holds a key whose bucket is another one: no row can match it, and no separate
 * "used" test sits on the path. No branch depends on whether a row hit (its outcome comes in no
 * order a predictor can follow): a row that misses updates one of CB_DUMMIES scratch slots
 * past the table; the only branch taken on data is the insertion of a new key into a bucket with
 * room, at most once per slot.
 *
 * Results are the kernel body's, but per call instead of per group: the same pids for the rows
 * that pass (their partition), records (count, sum in row order, min, max with NaN never
 * replacing a value) of the keys it kept, in slot order from the call's first record, the rest
 * count 0 and ODX_NO_PART. Which keys are kept depends on the grid and on how the device splits
 * it among threads; the merged result does not.
 */
#define CB_WAYS 8
#define CB_MAX_SLOTS 8192
#define CB_DUMMIES 8
#define CB_BLOCK 65536 /* rows between two looks at how much the table takes */
#define CB_SKIP 15     /* blocks passed straight through after one where it took too little */

/* A slot's aggregate, one 24-byte record (one address per row, not four). */
typedef struct cb_slot {
	double sum;
	uint32_t cnt;
	float lo, hi; /* minimum and maximum of the non-NaN values */
	float first;  /* the first value (the minimum and maximum if every value is NaN) */
} cb_slot;

typedef struct cb_table {
	uint32_t *key;    /* [slots], in buckets of CB_WAYS, 16-byte aligned */
	uint8_t *fill;    /* [slots / CB_WAYS]: used slots of each bucket */
	cb_slot *agg;     /* [slots + CB_DUMMIES] */
} cb_table;

static inline uint32_t cb_fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* The bucket of hash h among nb: its high bits. */
static inline uint32_t cb_bucket(uint32_t h, uint32_t nb)
{
	return (uint32_t)(((uint64_t)h * nb) >> 32);
}

__extension__ typedef unsigned __int128 cb_u128;

/* h % d for any u32 h and d >= 1, with m = UINT64_MAX / d + 1 (Lemire's fastmod). */
static inline uint32_t cb_mod(uint32_t h, uint64_t m, uint32_t d)
{
	return (uint32_t)(((cb_u128)(m * h) * d) >> 64);
}

/* A bit per slot of bucket `bk` (CB_WAYS keys) that holds `key`. */
static inline uint32_t cb_match(const uint32_t *bk, uint32_t key)
{
#if defined(__SSE2__)
	__m128i kv = _mm_set1_epi32((int)key);
	__m128i e0 = _mm_cmpeq_epi32(_mm_load_si128((const __m128i *)bk), kv);
	__m128i e1 = _mm_cmpeq_epi32(_mm_load_si128((const __m128i *)(bk + 4)), kv);

	return (uint32_t)_mm_movemask_ps(_mm_castsi128_ps(e0)) |
	       (uint32_t)_mm_movemask_ps(_mm_castsi128_ps(e1)) << 4;
#else
	uint32_t m = 0;

	for (int j = 0; j < CB_WAYS; j++)
		m |= (uint32_t)(bk[j] == key) << j;
	return m;
#endif
}

static void cb_table_free(cb_table *t)
{
	free(t->key);
	free(t->fill);
	free(t->agg);
}

static int cb_table_alloc(cb_table *t, uint32_t slots)
{
	t->key = aligned_alloc(64, 4 * (size_t)slots);
	t->fill = calloc(slots / CB_WAYS, 1);
	t->agg = calloc((size_t)slots + CB_DUMMIES, sizeof(*t->agg));
	if (t->key && t->fill && t->agg)
		return 0;
	cb_table_free(t);
	return -1;
}

/* Rows [first, end) into the table: each row's outcome is in pids (ODX_NO_PART: combined) and
 * in the table; returns the rows combined. */
__attribute__((noinline)) static int64_t cb_rows(const cb_table *t, uint32_t slots,
						 const uint32_t *keys, const float *vals,
						 uint32_t *pids, int64_t first, int64_t end,
						 uint32_t parts)
{
	/* the table's arrays in locals: the stores below cannot change them */
	uint32_t *restrict tkey = t->key;
	uint8_t *restrict fill = t->fill;
	cb_slot *restrict agg = t->agg;
	uint32_t nb = slots / CB_WAYS;
	uint64_t m = UINT64_MAX / parts + 1;
	int64_t combined = 0;

	for (int64_t i = first; i < end; i++) {
		uint32_t k = keys[i], h = cb_fmix32(k), b = cb_bucket(h, nb);
		uint32_t hit = cb_match(tkey + (size_t)b * CB_WAYS, k);
		uint32_t s = b * CB_WAYS + (uint32_t)__builtin_ctz(hit | 1u << CB_WAYS);
		/* one branch, rarely taken: no hit, and the bucket has room (sign bits) */
		uint32_t insert = ((hit - 1) & ((uint32_t)fill[b] - CB_WAYS)) >> 31;
		uint32_t miss, dummy = slots + ((uint32_t)i & (CB_DUMMIES - 1));
		float f = vals[i];
		cb_slot *a;

		if (__builtin_expect(insert, 0)) {
			s = b * CB_WAYS + fill[b]++;
			tkey[s] = k;
			/* x + -0.0 is x: a first value's sum is itself */
			agg[s] = (cb_slot){.sum = -0.0, .lo = INFINITY, .hi = -INFINITY, .first = f};
			hit = 1;
		}
		/* masks, not ?: (which compilers may turn into a branch on the hit) */
		miss = (uint32_t)0 - (uint32_t)(hit == 0);
		combined += 1 + (int32_t)miss;
		pids[i] = cb_mod(h, m, parts) | ~miss; /* ODX_NO_PART is all ones */
		a = &agg[s ^ ((s ^ dummy) & miss)];
		a->cnt++;
		a->sum += (double)f;
		/* NaN compares false: it never replaces a value (minss / maxss) */
		a->lo = f < a->lo ? f : a->lo;
		a->hi = f > a->hi ? f : a->hi;
	}
	return combined;
}

/* Rows [first, end) straight through: their partitions. */
static void cb_pass(const uint32_t *keys, uint32_t *pids, int64_t first, int64_t end,
		    uint32_t parts)
{
	uint64_t m = UINT64_MAX / parts + 1;

	for (int64_t i = first; i < end; i++)
		pids[i] = cb_mod(cb_fmix32(keys[i]), m, parts);
}

/* Rows [first, end) in blocks of CB_BLOCK: a block where the table took fewer than half the rows
 * (keys spread over many more than the slots: uniform keys over 1M) is followed by CB_SKIP
 * blocks that pass straight through, at the cost of a hash a row, then the table is tried
 * again. */
static void cb_stream(cb_table *t, uint32_t slots, const uint32_t *keys, const float *vals,
		      uint32_t *pids, int64_t first, int64_t end, uint32_t parts)
{
	uint32_t nb = slots / CB_WAYS;
	int skip = 0;

	for (uint32_t b = 0; b < nb; b++) {
		uint32_t e = 0;

		while (cb_bucket(cb_fmix32(e), nb) == b) /* a key that lives elsewhere */
			e++;
		for (int j = 0; j < CB_WAYS; j++)
			t->key[b * CB_WAYS + j] = e;
		t->fill[b] = 0;
	}
	for (int64_t i = first; i < end; i += CB_BLOCK) {
		int64_t stop = end - i < CB_BLOCK ? end : i + CB_BLOCK;

		if (skip > 0) {
			cb_pass(keys, pids, i, stop, parts);
			skip--;
		} else if (2 * cb_rows(t, slots, keys, vals, pids, i, stop, parts) < stop - i) {
			skip = CB_SKIP;
		}
	}
}

/* The table's keys as the records [r0, r1) of the launch, in slot order, the rest empty. */
static void cb_records(const cb_table *t, uint32_t slots, uint32_t *rec_keys, uint32_t *rec_vals,
		       uint32_t *rec_pids, int64_t r0, int64_t r1, uint32_t parts)
{
	uint64_t m = UINT64_MAX / parts + 1;
	int64_t r = r0;

	for (uint32_t b = 0; b < slots / CB_WAYS; b++) {
		for (uint32_t s = b * CB_WAYS; s < b * CB_WAYS + t->fill[b]; s++, r++) {
			const cb_slot *a = &t->agg[s];
			bool none = a->lo > a->hi; /* every value NaN: the first one */
			uint64_t w[4] = {a->cnt, odx__f64_bits(a->sum),
					 odx__f64_bits(none ? (double)a->first : (double)a->lo),
					 odx__f64_bits(none ? (double)a->first : (double)a->hi)};

			rec_keys[r] = t->key[s];
			for (int q = 0; q < 4; q++) {
				rec_vals[r * 8 + 2 * q] = (uint32_t)w[q];
				rec_vals[r * 8 + 2 * q + 1] = (uint32_t)(w[q] >> 32);
			}
			rec_pids[r] = cb_mod(cb_fmix32(t->key[s]), m, parts);
		}
	}
	for (; r < r1; r++) {
		rec_keys[r] = 0;
		memset(rec_vals + r * 8, 0, 32);
		rec_pids[r] = ODX_NO_PART;
	}
}

/* The call's rows through one table; -1 (nothing done) if it cannot have one. */
int odx__host_combine_u32_f32(const odx_host_launch *l, int32_t n, int32_t parts)
{
	uint64_t groups = l->grid[0] ? l->grid[0] : 1;
	int64_t chunk = ((int64_t)n + (int64_t)groups - 1) / (int64_t)groups;
	int64_t first = (int64_t)l->group_first * chunk;
	int64_t end = first + (int64_t)l->group_count * chunk;
	int64_t r0 = (int64_t)l->group_first * ODX_COMBINE_SLOTS;
	int64_t r1 = r0 + (int64_t)l->group_count * ODX_COMBINE_SLOTS;
	uint32_t slots = CB_WAYS;
	cb_table t;

	while (slots * 2 <= CB_MAX_SLOTS && (int64_t)slots * 2 <= r1 - r0)
		slots *= 2;
	if (cb_table_alloc(&t, slots))
		return -1;
	if (end > n)
		end = n;
	if (first < end)
		cb_stream(&t, slots, l->buffers[0], l->buffers[1], l->buffers[2], first, end,
			  (uint32_t)parts);
	cb_records(&t, slots, l->buffers[3], l->buffers[4], l->buffers[5], r0, r1,
		   (uint32_t)parts);
	cb_table_free(&t);
	return 0;
}

