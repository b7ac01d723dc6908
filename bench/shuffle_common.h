/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shuffle_common.h - what both sides of bench/shuffle share, so that they do the same work on the
 * same rows: the ODX group-by (examples/groupby.c) and the plain MPI program (bench/shuffle_mpi.c).
 *
 *  - The rows of rank r: a counter-based generator (row i of rank r depends only on the seed, r
 *    and i), so any chunk of rows is made by any thread in any order, and the sequential
 *    reference regenerates every rank's rows alone.
 *  - Keys: K distinct u32 keys, drawn uniformly or from Zipf(s) over their popularity rank, each
 *    rank scrambled by an odd multiplier (a bijection of u32) so that hot keys are not small ids.
 *  - Values: small integers (-128 .. 127) stored as f32. Every partial sum of them is an integer
 *    far below 2^53, so f64 sums are exact in ANY order: the ODX table (atomic adds in arrival
 *    order), the MPI table and the sequential reference must agree bit for bit, and do.
 *  - The partition of a key: fmix32(key) % parts, as odx.hash_partition_u32 and odx.hash_combine.
 *  - The group-by table: open addressing, home slot fmix64(key) & (capacity - 1), linear probing
 *    (the probing of odx.hash_groupby), slots of (~key, count, f64 sum); sequential.
 *  - The digest of a result: key count, row count and a checksum that is a sum over keys
 *    (mod 2^64) of a hash of (key, count, sum bits): independent of the order of the keys, so
 *    per-rank digests add up to the digest of the whole result.
 *
 * Header only (static functions), plain C11, no ODX or MPI headers.
 */
#ifndef ODX_BENCH_SHUFFLE_COMMON_H
#define ODX_BENCH_SHUFFLE_COMMON_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* SplitMix64's finaliser: the generator's mixing function. */
static inline uint64_t sc_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* MurmurHash3's finalisers, as docs/kernels.md fixes them. */
static inline uint32_t sc_fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static inline uint64_t sc_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

/* The partition (destination rank) of a key: odx.hash_partition_u32's. */
static inline uint32_t sc_part(uint32_t key, uint32_t parts)
{
	return sc_fmix32(key) % parts;
}

/* ---- the rows ---------------------------------------------------------------------------- */

/* How keys are drawn. zipf_s == 0: uniform over K keys; else popularity rank k (0-based) has
 * weight 1 / (k + 1)^s. Zipf draws invert the CDF, kept as 64-bit thresholds (2^-64 units),
 * through a guide table: the search starts at the first rank whose threshold passes u's bucket,
 * so it takes about one step. */
typedef struct sc_keys {
	uint32_t nkeys;
	double zipf_s;
	uint64_t *cdf;     /* nkeys thresholds, the last UINT64_MAX; NULL when uniform */
	uint32_t *guide;   /* nkeys + 1 entries: guide[b]: where bucket b's search starts */
} sc_keys;

static inline void sc_keys_free(sc_keys *ks)
{
	free(ks->cdf);
	free(ks->guide);
	ks->cdf = NULL;
	ks->guide = NULL;
}

/* u (64 random bits) scaled to [0, n): its top 32 bits times n, over 2^32 (n < 2^32). */
static inline uint32_t sc_bucket(uint64_t u, uint32_t n)
{
	return (uint32_t)(((u >> 32) * n) >> 32);
}

/* Returns 0, or -1 when out of memory (nothing to free then). */
static inline int sc_keys_init(sc_keys *ks, uint32_t nkeys, double zipf_s)
{
	double total = 0, acc = 0;
	uint32_t k, b;

	memset(ks, 0, sizeof(*ks));
	ks->nkeys = nkeys ? nkeys : 1;
	ks->zipf_s = zipf_s;
	if (zipf_s <= 0)
		return 0;
	ks->cdf = malloc(sizeof(*ks->cdf) * ks->nkeys);
	ks->guide = malloc(sizeof(*ks->guide) * ((size_t)ks->nkeys + 1));
	if (!ks->cdf || !ks->guide) {
		sc_keys_free(ks);
		return -1;
	}
	/* in the same order on every side: the same doubles, hence the same thresholds */
	for (k = 0; k < ks->nkeys; k++)
		total += pow((double)k + 1, -zipf_s);
	for (k = 0; k < ks->nkeys; k++) {
		acc += pow((double)k + 1, -zipf_s);
		double f = acc / total;
		ks->cdf[k] = f >= 1.0 ? UINT64_MAX : (uint64_t)ldexp(f, 64);
	}
	ks->cdf[ks->nkeys - 1] = UINT64_MAX;
	for (b = 0, k = 0; b <= ks->nkeys; b++) {
		/* at most the smallest u of bucket b (sc_bucket): u's top half times nkeys,
		 * over 2^32, is b */
		uint64_t lo = b == ks->nkeys ? UINT64_MAX
					     : (((uint64_t)b << 32) / ks->nkeys) << 32;

		while (k < ks->nkeys - 1 && ks->cdf[k] < lo)
			k++;
		ks->guide[b] = k;
	}
	return 0;
}

/* The u32 key of popularity rank k. */
static inline uint32_t sc_key_of(uint32_t k)
{
	return k * 0x9e3779b1u + 0x7f4a7c15u;
}

/* Row i of rank r: its key and value. */
static inline void sc_row(const sc_keys *ks, uint64_t seed, uint32_t rank, uint64_t i,
			  uint32_t *key, float *value)
{
	uint64_t h = sc_mix64(sc_mix64(seed ^ ((uint64_t)rank << 48)) + i);
	uint64_t u = sc_mix64(h ^ 0x5851f42d4c957f2dull);
	uint32_t k;

	if (!ks->cdf) {
		k = sc_bucket(u, ks->nkeys);
	} else {
		k = ks->guide[sc_bucket(u, ks->nkeys)];
		while (ks->cdf[k] < u)
			k++;
	}
	*key = sc_key_of(k);
	*value = (float)((int)(h & 0xff) - 128);
}

/* Rows [first, first + count) of rank r. */
static inline void sc_rows(const sc_keys *ks, uint64_t seed, uint32_t rank, uint64_t first,
			   uint64_t count, uint32_t *keys, float *values)
{
	for (uint64_t i = 0; i < count; i++)
		sc_row(ks, seed, rank, first + i, &keys[i], &values[i]);
}

/* ---- the group-by table ------------------------------------------------------------------ */

typedef struct sc_slot {
	uint64_t nkey; /* ~key; 0: empty (u32 keys widened never make ~key 0) */
	uint64_t count;
	double sum;
} sc_slot;

typedef struct sc_table {
	sc_slot *slots;
	uint64_t capacity; /* a power of two */
	uint64_t used;
} sc_table;

/* The capacity both sides start from: at least twice the keys a rank can expect (K / P, bounded
 * by the rows), plus some slack, rounded up to a power of two. A table never fills: the MPI side
 * and the reference grow theirs (sc_table_add), the ODX side reruns with a larger one. */
static inline uint64_t sc_capacity(uint64_t nkeys, uint64_t rows_total, uint32_t ranks)
{
	uint64_t want = (nkeys < rows_total ? nkeys : rows_total) / (ranks ? ranks : 1);
	uint64_t cap = 1;

	want = 2 * want + 1024;
	while (cap < want)
		cap <<= 1;
	return cap;
}

static inline int sc_table_init(sc_table *t, uint64_t capacity)
{
	t->slots = calloc(capacity, sizeof(*t->slots));
	t->capacity = capacity;
	t->used = 0;
	return t->slots ? 0 : -1;
}

static inline void sc_table_free(sc_table *t)
{
	free(t->slots);
	t->slots = NULL;
}

static inline sc_slot *sc_table_find(sc_table *t, uint32_t key)
{
	uint64_t mask = t->capacity - 1, at = sc_fmix64(key) & mask;

	for (;;) {
		sc_slot *s = &t->slots[at];

		if (s->nkey == ~(uint64_t)key || s->nkey == 0)
			return s;
		at = (at + 1) & mask;
	}
}

static inline int sc_table_grow(sc_table *t)
{
	sc_table bigger;

	if (sc_table_init(&bigger, t->capacity * 2))
		return -1;
	for (uint64_t i = 0; i < t->capacity; i++) {
		if (t->slots[i].nkey) {
			*sc_table_find(&bigger, (uint32_t)~t->slots[i].nkey) = t->slots[i];
			bigger.used++;
		}
	}
	sc_table_free(t);
	*t = bigger;
	return 0;
}

/* Adds count rows summing to sum to key's slot; grows the table at half full. 0 or -1 (memory). */
static inline int sc_table_add(sc_table *t, uint32_t key, uint64_t count, double sum)
{
	sc_slot *s = sc_table_find(t, key);

	if (s->nkey == 0) {
		if (2 * (t->used + 1) > t->capacity) {
			if (sc_table_grow(t))
				return -1;
			s = sc_table_find(t, key);
		}
		s->nkey = ~(uint64_t)key;
		t->used++;
	}
	s->count += count;
	s->sum += sum;
	return 0;
}

/* ---- digests ----------------------------------------------------------------------------- */

typedef struct sc_digest {
	uint64_t keys;
	uint64_t rows;
	uint64_t checksum;
} sc_digest;

static inline void sc_digest_add(sc_digest *d, uint32_t key, uint64_t count, double sum)
{
	uint64_t bits;

	if (sum == 0)
		sum = 0; /* -0.0 and +0.0 are one sum */
	memcpy(&bits, &sum, sizeof(bits));
	d->keys++;
	d->rows += count;
	d->checksum += sc_mix64(((uint64_t)key << 32 | (count & 0xffffffffu)) ^ sc_mix64(bits));
}

static inline void sc_digest_merge(sc_digest *into, const sc_digest *d)
{
	into->keys += d->keys;
	into->rows += d->rows;
	into->checksum += d->checksum;
}

static inline sc_digest sc_table_digest(const sc_table *t)
{
	sc_digest d = {0, 0, 0};

	for (uint64_t i = 0; i < t->capacity; i++)
		if (t->slots[i].nkey)
			sc_digest_add(&d, (uint32_t)~t->slots[i].nkey, t->slots[i].count,
				      t->slots[i].sum);
	return d;
}

#endif /* ODX_BENCH_SHUFFLE_COMMON_H */
