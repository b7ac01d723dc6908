/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance_data.c - the data kernels of the backend conformance suite: partition count, scan,
 * stable rank, scatter, the private-count histogram, hash group-by with u32 and u64 keys over
 * f32, f64 and i64 values, table overflow and regrowth, the combiner before a partition (special
 * values, blocks of rows) and the loop budget, each against a sequential reference, exact.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "conformance.h"
#include "test_util.h"

/* ---- the data kernels (docs/kernels.md, "Data kernels") ---------------------------------- */

#define NO_PART 0xffffffffu

static uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

/* count -> scan -> rank -> scatter of `pids` (some dropped) on the device, every step checked
 * against a sequential stable partition; scatters a 1-word and a 2-word column. */
static void partition_pipeline(int d, const uint32_t *pids, int n, int parts, uint32_t groups,
			       uint32_t block, uint64_t *rng)
{
	size_t ncounts = (size_t)parts * groups;
	uint32_t *counts = xmalloc(ncounts * 4), *offs = xmalloc((ncounts + 1) * 4);
	uint32_t *want_dest = xmalloc((size_t)n * 4);
	uint32_t *got = xmalloc(((size_t)n > ncounts ? (size_t)n : ncounts) * 8 + 8);
	uint32_t *col1 = xmalloc((size_t)n * 4), *col2 = xmalloc((size_t)n * 8);
	uint32_t *want1 = xmalloc((size_t)n * 4 + 4), *want2 = xmalloc((size_t)n * 8 + 8);
	int64_t chunk = ((int64_t)n + groups - 1) / groups;
	uint32_t m = 0, run = 0;
	odx_buffer *bp, *bc, *bo, *bd, *b1, *b2, *o1, *o2;

	memset(counts, 0, ncounts * 4);
	for (int i = 0; i < n; i++) {
		col1[i] = (uint32_t)test_rand(rng);
		col2[2 * i] = (uint32_t)test_rand(rng);
		col2[2 * i + 1] = (uint32_t)test_rand(rng);
		if (pids[i] < (uint32_t)parts)
			counts[(size_t)pids[i] * groups + (size_t)(i / chunk)]++;
	}
	for (size_t c = 0; c < ncounts; c++) {
		offs[c] = run;
		run += counts[c];
	}
	offs[ncounts] = m = run;
	/* the sequential stable partition: partition by partition, rows in input order */
	{
		uint32_t next = 0;

		for (int p = 0; p < parts; p++)
			for (int i = 0; i < n; i++)
				if (pids[i] == (uint32_t)p)
					want_dest[i] = next++;
		for (int i = 0; i < n; i++)
			if (pids[i] >= (uint32_t)parts)
				want_dest[i] = NO_PART;
	}
	for (int i = 0; i < n; i++) {
		if (want_dest[i] == NO_PART)
			continue;
		want1[want_dest[i]] = col1[i];
		memcpy(want2 + 2 * (size_t)want_dest[i], col2 + 2 * (size_t)i, 8);
	}
	bp = new_buffer((size_t)n * 4, pids);
	bc = new_buffer(ncounts * 4, NULL);
	bo = new_buffer((ncounts + 1) * 4, NULL);
	bd = new_buffer((size_t)n * 4, NULL);
	b1 = new_buffer((size_t)n * 4, col1);
	b2 = new_buffer((size_t)n * 8, col2);
	o1 = new_buffer((size_t)m * 4 + 4, NULL);
	o2 = new_buffer((size_t)m * 8 + 8, NULL);
	{
		odx_arg cnt[] = {ODX_BUF(bp, 0), ODX_BUF(bc, 0), ODX_I32(n), ODX_I32(parts)};
		odx_arg scan[] = {ODX_BUF(bc, 0), ODX_BUF(bo, 0), ODX_I32((int32_t)ncounts)};
		odx_arg rank[] = {ODX_BUF(bp, 0), ODX_BUF(bo, 0), ODX_BUF(bd, 0), ODX_I32(n),
				  ODX_I32(parts)};
		odx_arg sc1[] = {ODX_BUF(b1, 0), ODX_BUF(bd, 0), ODX_BUF(o1, 0), ODX_I32(n),
				 ODX_I32(1), ODX_I32((int32_t)m)};
		odx_arg sc2[] = {ODX_BUF(b2, 0), ODX_BUF(bd, 0), ODX_BUF(o2, 0), ODX_I32(n),
				 ODX_I32(2), ODX_I32((int32_t)m)};

		/* the whole chain on the device, no host step between */
		odx_event_release(launch("odx.partition_count", cnt, 4, d, groups, 1, block, 1));
		odx_event_release(launch("odx.scan_u32", scan, 3, d, 1, 1, 100, 1));
		odx_event_release(launch("odx.partition_rank", rank, 5, d, groups, 1, block, 1));
		odx_event_release(launch("odx.scatter_rows", sc1, 6, d, 5, 1, 64, 1));
		wait_ok(launch("odx.scatter_rows", sc2, 6, d, 3, 1, 96, 1), "scatter_rows");
	}
	read_all(bc, got, ncounts * 4);
	check_u32("partition_count", d, got, counts, (int)ncounts);
	read_all(bo, got, (ncounts + 1) * 4);
	check_u32("scan_u32 (of the counts)", d, got, offs, (int)ncounts + 1);
	read_all(bd, got, (size_t)n * 4);
	check_u32("partition_rank (stable)", d, got, want_dest, n);
	read_all(o1, got, (size_t)m * 4);
	check_u32("scatter_rows (width 1)", d, got, want1, (int)m);
	read_all(o2, got, (size_t)m * 8);
	check_u32("scatter_rows (width 2)", d, got, want2, 2 * (int)m);
	assert_ok(odx_buffer_destroy(bp));
	assert_ok(odx_buffer_destroy(bc));
	assert_ok(odx_buffer_destroy(bo));
	assert_ok(odx_buffer_destroy(bd));
	assert_ok(odx_buffer_destroy(b1));
	assert_ok(odx_buffer_destroy(b2));
	assert_ok(odx_buffer_destroy(o1));
	assert_ok(odx_buffer_destroy(o2));
	free(counts);
	free(offs);
	free(want_dest);
	free(got);
	free(col1);
	free(col2);
	free(want1);
	free(want2);
}

static void kernel_data_partition(int d, uint64_t *rng)
{
	enum {
		N = 10007,
		N2 = 5003
	};
	uint32_t *keys = xmalloc(N * 8), *pids = xmalloc(N * 4), *got = xmalloc(N * 4);
	odx_buffer *bk, *bb;

	/* u64 keys -> partitions, against fmix64 */
	for (int i = 0; i < 2 * N; i++)
		keys[i] = (uint32_t)test_rand(rng);
	bk = new_buffer(N * 8, keys);
	bb = new_buffer(N * 4, NULL);
	{
		odx_arg hp[] = {ODX_BUF(bk, 0), ODX_BUF(bb, 0), ODX_I32(N), ODX_I32(11)};

		wait_ok(launch("odx.hash_partition_u64", hp, 4, d, 9, 1, 64, 1),
			"hash_partition_u64");
		for (int i = 0; i < N; i++)
			pids[i] = (uint32_t)(fmix64((uint64_t)keys[2 * i] |
						    (uint64_t)keys[2 * i + 1] << 32) %
					     11);
		read_all(bb, got, N * 4);
		check_u32("hash_partition_u64", d, got, pids, N);
	}
	/* those partitions: groups that do not divide n, a block larger than a chunk's tail */
	partition_pipeline(d, pids, N, 11, 7, 64, rng);
	partition_pipeline(d, pids, N, 11, 1, 256, rng);
	/* dropped rows (ODX_NO_PART and ids >= parts), one partition far larger than the rest,
	 * an empty one, a block that is not a power of two */
	for (int i = 0; i < N2; i++) {
		uint32_t r = (uint32_t)test_rand_below(rng, 20);

		pids[i] = r < 2 ? NO_PART : r == 2 ? 5 : r < 12 ? 0 : r % 4;
		if (pids[i] == 2)
			pids[i] = 1;
	}
	partition_pipeline(d, pids, N2, 5, 3, 33, rng);
	/* more groups than rows: empty chunks */
	partition_pipeline(d, pids, 5, 5, 16, 8, rng);
	{
		/* one group of 100,000 rows at block 64: past lavapipe's loop budget for the
		 * GLSL partition_rank written with a loop round an entry of a tile (wrong from row
		 * 63,551 of a group there); whole with the comparisons 8 a round (docs/kernels.md) */
		enum {
			NL = 100000
		};
		uint32_t *lp = xmalloc(NL * 4);

		for (int i = 0; i < NL; i++)
			lp[i] = (uint32_t)test_rand_below(rng, 7);
		partition_pipeline(d, lp, NL, 7, 1, 64, rng);
		free(lp);
	}
	{
		/* a long scan: segments of many elements per work-item */
		enum {
			NS = 100003
		};
		uint32_t *in = xmalloc(NS * 4), *want = xmalloc(NS * 4 + 4), *out = xmalloc(NS * 4 + 4);
		uint32_t acc = 0;
		odx_buffer *bi, *bo;

		for (int i = 0; i < NS; i++) {
			in[i] = (uint32_t)test_rand(rng) >> 8; /* wraps mod 2^32 */
			want[i] = acc;
			acc += in[i];
		}
		want[NS] = acc;
		bi = new_buffer(NS * 4, in);
		bo = new_buffer(NS * 4 + 4, NULL);
		odx_arg scan[] = {ODX_BUF(bi, 0), ODX_BUF(bo, 0), ODX_I32(NS)};

		wait_ok(launch("odx.scan_u32", scan, 3, d, 1, 1, 256, 1), "scan_u32");
		read_all(bo, out, NS * 4 + 4);
		check_u32("scan_u32", d, out, want, NS + 1);
		assert_ok(odx_buffer_destroy(bi));
		assert_ok(odx_buffer_destroy(bo));
		free(in);
		free(want);
		free(out);
	}
	assert_ok(odx_buffer_destroy(bk));
	assert_ok(odx_buffer_destroy(bb));
	free(keys);
	free(pids);
	free(got);
}

/* Lavapipe's loop budget (docs/kernels.md): a launch whose work-items would loop more than 65535
 * rounds is refused on lavapipe (ODX_ERANGE, the kernel named and the grid that fits), and runs
 * whole everywhere else; the grid the message names runs whole on every device. */
static void kernel_data_loop_budget(int d)
{
	enum {
		N = 70000 /* > 65535 rows for one work-item */
	};
	uint32_t *got = xmalloc(N * 4);
	odx_device_info di;
	bool lavapipe;
	odx_buffer *b;
	odx_event *ev;
	int rc, wrong = 0;

	assert_ok(odx_device_get_info(conf.ctx, d, &di));
	lavapipe = di.kind == ODX_BACKEND_VULKAN && strstr(di.name, "llvmpipe") != NULL;
	b = new_buffer(N * 4, NULL);
	/* odx_wait_all reports the refusal below: nothing else may fail before it */
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
	{
		odx_arg fill[] = {ODX_BUF(b, 0), ODX_I32(7), ODX_I32(N)};

		ev = launch("odx.fill_u32", fill, 3, d, 1, 1, 1, 1);
		rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
		if (lavapipe) {
			if (rc != ODX_ERANGE || !strstr(odx_event_message(ev), "odx.fill_u32") ||
			    !strstr(odx_event_message(ev), "at least 2 work-groups"))
				fail_msg("fill_u32 of %d rows on 1 work-item on device %d (%s): %s "
					 "\"%s\"; want ODX_ERANGE naming the kernel and 2 "
					 "work-groups", N, d, di.name, odx_err_name(rc),
					 odx_event_message(ev));
		} else if (rc != 0) {
			fail_msg("fill_u32 of %d rows on 1 work-item on device %d: %s: %s", N, d,
				 odx_err_name(rc), odx_event_message(ev));
		}
		odx_event_release(ev);
		/* the grid the refusal asks for */
		if (lavapipe) {
			assert_int_equal(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS), ODX_ERANGE);
			fill[1] = ODX_I32(9);
			wait_ok(launch("odx.fill_u32", fill, 3, d, 2, 1, 1, 1), "fill_u32 (2 groups)");
		}
	}
	read_all(b, got, N * 4);
	for (int i = 0; i < N; i++)
		wrong += got[i] != (lavapipe ? 9u : 7u);
	if (wrong)
		fail_msg("fill_u32 on device %d: %d of %d elements wrong", d, wrong, N);
	if (lavapipe) {
		/* partition_rank: one group of 800,000 rows at block 64 needs 75,003 rounds */
		enum {
			NR = 800000
		};
		odx_buffer *bp = new_buffer((size_t)NR * 4, NULL), *bo = new_buffer(64, NULL);
		odx_buffer *bd = new_buffer((size_t)NR * 4, NULL);
		odx_arg rank[] = {ODX_BUF(bp, 0), ODX_BUF(bo, 0), ODX_BUF(bd, 0), ODX_I32(NR),
				  ODX_I32(3)};

		ev = launch("odx.partition_rank", rank, 5, d, 1, 1, 64, 1);
		rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
		if (rc != ODX_ERANGE || !strstr(odx_event_message(ev), "odx.partition_rank"))
			fail_msg("partition_rank of %d rows in one group on device %d: %s \"%s\"; "
				 "want ODX_ERANGE", NR, d, odx_err_name(rc), odx_event_message(ev));
		odx_event_release(ev);
		assert_int_equal(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS), ODX_ERANGE);
		assert_ok(odx_buffer_destroy(bp));
		assert_ok(odx_buffer_destroy(bo));
		assert_ok(odx_buffer_destroy(bd));
	}
	assert_ok(odx_buffer_destroy(b));
	free(got);
}

/* histogram_u32 wider than a work-group's shared bins, and wider than the rows (the host's
 * per-row atomics): the same counts as the narrow case in kernel_partition. */
static void kernel_data_histogram(int d, uint64_t *rng)
{
	enum {
		N = 10007
	};
	static const int32_t widths[] = {1024, 5000, 100000};
	uint32_t *bins = xmalloc(N * 4);

	for (size_t c = 0; c < sizeof(widths) / sizeof(widths[0]); c++) {
		int32_t nb = widths[c];
		uint32_t *want = xmalloc((size_t)nb * 4), *got = xmalloc((size_t)nb * 4);
		odx_buffer *bb, *bc;

		for (int i = 0; i < N; i++)
			bins[i] = (uint32_t)test_rand_below(rng, (uint64_t)nb + nb / 8);
		for (int32_t b = 0; b < nb; b++)
			want[b] = (uint32_t)b; /* counts add to what the buffer holds */
		bb = new_buffer(N * 4, bins);
		bc = new_buffer((size_t)nb * 4, want);
		for (int i = 0; i < N; i++)
			if (bins[i] < (uint32_t)nb)
				want[bins[i]]++;
		odx_arg hi[] = {ODX_BUF(bb, 0), ODX_BUF(bc, 0), ODX_I32(N), ODX_I32(nb)};

		wait_ok(launch("odx.histogram_u32", hi, 4, d, 6, 1, 128, 1), "histogram_u32");
		read_all(bc, got, (size_t)nb * 4);
		check_u32("histogram_u32 (wide)", d, got, want, nb);
		assert_ok(odx_buffer_destroy(bb));
		assert_ok(odx_buffer_destroy(bc));
		free(want);
		free(got);
	}
	free(bins);
}

/* A group-by reference: per distinct key (index into the key list), count, sum, min, max.
 * Sums of doubles are exact here (values are multiples of 1/8 well inside 2^53), so the
 * table's bits are compared with no tolerance whatever order the device added in. */
typedef struct gb_ref {
	int nkeys;
	uint64_t *key;
	uint64_t *count;
	uint64_t *sum; /* f64 bits or i64 */
	uint64_t *min, *max;
	bool is_f64;
} gb_ref;

static void gb_ref_init(gb_ref *r, const uint64_t *klist, int nkeys, bool is_f64)
{
	r->nkeys = nkeys;
	r->is_f64 = is_f64;
	r->key = xmalloc((size_t)nkeys * 8);
	memcpy(r->key, klist, (size_t)nkeys * 8);
	r->count = calloc((size_t)nkeys, 8);
	r->sum = calloc((size_t)nkeys, 8);
	r->min = xmalloc((size_t)nkeys * 8);
	r->max = xmalloc((size_t)nkeys * 8);
	assert_non_null(r->count);
	assert_non_null(r->sum);
}

static void gb_ref_add(gb_ref *r, int k, uint64_t vb)
{
	if (r->is_f64) {
		double v, s, lo, hi;

		memcpy(&v, &vb, 8);
		memcpy(&s, &r->sum[k], 8);
		memcpy(&lo, &r->min[k], 8);
		memcpy(&hi, &r->max[k], 8);
		s += v;
		memcpy(&r->sum[k], &s, 8);
		if (r->count[k] == 0 || v < lo)
			r->min[k] = vb;
		if (r->count[k] == 0 || v > hi)
			r->max[k] = vb;
	} else {
		r->sum[k] += vb;
		if (r->count[k] == 0 || (int64_t)vb < (int64_t)r->min[k])
			r->min[k] = vb;
		if (r->count[k] == 0 || (int64_t)vb > (int64_t)r->max[k])
			r->max[k] = vb;
	}
	r->count[k]++;
}

static void gb_ref_free(gb_ref *r)
{
	free(r->key);
	free(r->count);
	free(r->sum);
	free(r->min);
	free(r->max);
}

/* Decodes a table (docs/kernels.md: [~key, count, sum, min ^ MIN0, max ^ MAX0], slot
 * `capacity` for the key ~0; sw = 3 words per slot: value_kind | ODX_GB_SUM_COUNT, no min and
 * max) and compares it with the reference, bit for bit. */
static void gb_check(const char *what, int d, const uint64_t *t, int cap, int sw, const gb_ref *r)
{
	uint64_t min0 = r->is_f64 ? 0x7ff0000000000000ull : 0x7fffffffffffffffull;
	uint64_t max0 = r->is_f64 ? 0xfff0000000000000ull : 0x8000000000000000ull;
	int found = 0, present = 0;

	for (int k = 0; k < r->nkeys; k++)
		present += r->count[k] != 0; /* a listed key may have no row */
	for (int s = 0; s <= cap; s++) {
		const uint64_t *e = t + (size_t)s * sw;
		uint64_t key;
		int k;

		if (s < cap ? e[0] == 0 : e[1] == 0)
			continue;
		key = s < cap ? ~e[0] : ~0ull;
		for (k = 0; k < r->nkeys && r->key[k] != key; k++)
			;
		if (k == r->nkeys)
			fail_msg("%s on device %d: slot %d holds key 0x%llx, not in the input", what,
				 d, s, (unsigned long long)key);
		found++;
		if (e[1] != r->count[k] || e[2] != r->sum[k] ||
		    (sw == 5 && ((e[3] ^ min0) != r->min[k] || (e[4] ^ max0) != r->max[k])))
			fail_msg(
				"%s on device %d: key 0x%llx: count %llu sum 0x%llx min 0x%llx max "
				"0x%llx, reference %llu 0x%llx 0x%llx 0x%llx",
				what, d, (unsigned long long)key, (unsigned long long)e[1],
				(unsigned long long)e[2],
				(unsigned long long)(sw == 5 ? e[3] ^ min0 : 0),
				(unsigned long long)(sw == 5 ? e[4] ^ max0 : 0),
				(unsigned long long)r->count[k], (unsigned long long)r->sum[k],
				(unsigned long long)r->min[k], (unsigned long long)r->max[k]);
	}
	if (found != present)
		fail_msg("%s on device %d: %d keys in the table, %d in the input", what, d, found,
			 present);
}

/* NKEYS distinct keys (0 and ~0 among them), value bits of row i for value_kind vk. */
static void gb_input(uint64_t *rng, int kw, int vk, int n, int nkeys, uint64_t *klist,
		     int *kidx, uint32_t *keys, uint32_t *vals, uint64_t *vbits)
{
	for (int k = 0; k < nkeys; k++) {
		bool dup;

		do { /* distinct */
			klist[k] = k == 0 ? 0 : k == 1 ? (kw == 2 ? ~0ull : 0xffffffffull)
				 : kw == 2 ? test_rand(rng)
					   : (uint32_t)test_rand(rng);
			dup = false;
			for (int j = 0; j < k; j++)
				dup |= klist[j] == klist[k];
		} while (dup);
	}
	for (int i = 0; i < n; i++) {
		/* skewed: a quarter of the rows on key 2 */
		int k = test_rand_below(rng, 4) == 0 ? 2 : (int)test_rand_below(rng, (uint64_t)nkeys);
		int64_t q = (int64_t)test_rand_below(rng, 1 << 16) - (1 << 15); /* in 1/8 */

		kidx[i] = k;
		keys[i * kw] = (uint32_t)klist[k];
		if (kw == 2)
			keys[i * 2 + 1] = (uint32_t)(klist[k] >> 32);
		if (vk == 0) {
			float f = (float)q / 8.0f;
			double v = f;

			memcpy(&vals[i], &f, 4);
			memcpy(&vbits[i], &v, 8);
		} else {
			uint64_t b;

			if (vk == 1) {
				double v = (double)q / 8.0;

				memcpy(&b, &v, 8);
			} else {
				b = test_rand(rng); /* whole range: sums wrap */
			}
			vbits[i] = b;
			vals[2 * i] = (uint32_t)b;
			vals[2 * i + 1] = (uint32_t)(b >> 32);
		}
	}
}

static void kernel_data_groupby(int d, uint64_t *rng)
{
	enum {
		N = 20011,
		NKEYS = 600,
		CAP = 1024
	};
	uint64_t *klist = xmalloc(NKEYS * 8), *vbits = xmalloc(N * 8);
	uint64_t *table = xmalloc((CAP + 1) * 40);
	uint32_t *keys = xmalloc(N * 8), *vals = xmalloc(N * 8);
	int *kidx = xmalloc(N * sizeof(int));

	/* every key width, with all four aggregates, then with value_kind | ODX_GB_SUM_COUNT
	 * (sc = 8: count and sum only, 3-word slots) */
	for (int ks = 0; ks < 4; ks++) {
		int kw = ks % 2 + 1, sc = ks / 2 * 8;

		for (int vk = 0; vk <= 2; vk++) {
			int sw = sc ? 3 : 5;
			gb_ref r;
			char what[64];
			uint32_t status;
			odx_buffer *bk, *bv, *bt, *bs;

			gb_input(rng, kw, vk, N, NKEYS, klist, kidx, keys, vals, vbits);
			gb_ref_init(&r, klist, NKEYS, vk != 2);
			for (int i = 0; i < N; i++)
				gb_ref_add(&r, kidx[i], vbits[i]);
			bk = new_buffer((size_t)N * 4 * kw, keys);
			bv = new_buffer((size_t)N * (vk == 0 ? 4 : 8), vals);
			bt = new_buffer((CAP + 1) * 8 * sw, NULL); /* zeros: an empty table */
			bs = new_buffer(4, NULL);
			{
				/* in two launches: the second adds to the first's table */
				odx_arg a1[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0),	 ODX_BUF(bt, 0),
						ODX_BUF(bs, 0), ODX_I32(N / 3),	 ODX_I32(CAP),
						ODX_I32(kw),	ODX_I32(vk | sc)};
				odx_arg a2[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0),	 ODX_BUF(bt, 0),
						ODX_BUF(bs, 0), ODX_I32(N),	 ODX_I32(CAP),
						ODX_I32(kw),	ODX_I32(vk | sc)};

				wait_ok(launch("odx.hash_groupby", a1, 8, d, 4, 1, 64, 1),
					"hash_groupby");
				/* then all rows again into a fresh table: the first launch was only
				 * a third; reset by writing zeros */
				memset(table, 0, (CAP + 1) * 8 * sw);
				assert_ok(odx_buffer_write(bt, 0, table, (CAP + 1) * 8 * sw,
							   TEST_TIMEOUT_MS));
				wait_ok(launch("odx.hash_groupby", a2, 8, d, 13, 1, 96, 1),
					"hash_groupby");
			}
			read_all(bt, table, (CAP + 1) * 8 * sw);
			read_all(bs, &status, 4);
			snprintf(what, sizeof(what), "hash_groupby (key_words %d, value_kind %d)",
				 kw, vk | sc);
			if (status != 0)
				fail_msg("%s on device %d: status %u, the table had room", what, d,
					 status);
			gb_check(what, d, table, CAP, sw, &r);
			{
				/* too small a table: every row is aggregated or counted in status,
				 * never lost silently; then the pass again, twice as large
				 * (docs/kernels.md, "growing"), is complete */
				enum {
					SMALL = 256
				};
				odx_buffer *small = new_buffer((SMALL + 1) * 8 * sw, NULL);
				odx_arg a3[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0),	 ODX_BUF(small, 0),
						ODX_BUF(bs, 0), ODX_I32(N),	 ODX_I32(SMALL),
						ODX_I32(kw),	ODX_I32(vk | sc)};
				uint64_t counted = 0;

				status = 0;
				assert_ok(odx_buffer_write(bs, 0, &status, 4, TEST_TIMEOUT_MS));
				wait_ok(launch("odx.hash_groupby", a3, 8, d, 13, 1, 96, 1),
					"hash_groupby (full)");
				read_all(small, table, (SMALL + 1) * 8 * sw);
				read_all(bs, &status, 4);
				for (int s = 0; s <= SMALL; s++)
					counted += table[s * sw + 1];
				if (status == 0 || counted + status != N)
					fail_msg("%s on device %d, capacity %d for %d keys: status %u, "
						 "%llu rows in the table, %d rows",
						 what, d, SMALL, NKEYS, status,
						 (unsigned long long)counted, N);
				assert_ok(odx_buffer_destroy(small));
				{
					/* the documented growth: the next power of two at or above
					 * 2 x (capacity + status), one rerun over all rows */
					int32_t cap2 = 1;

					while (cap2 < 2 * (SMALL + (int32_t)status))
						cap2 *= 2;
					small = new_buffer(((size_t)cap2 + 1) * 8 * sw, NULL);
					status = 0;
					assert_ok(odx_buffer_write(bs, 0, &status, 4, TEST_TIMEOUT_MS));
					odx_arg a4[] = {ODX_BUF(bk, 0),	   ODX_BUF(bv, 0),
							ODX_BUF(small, 0), ODX_BUF(bs, 0),
							ODX_I32(N),	   ODX_I32(cap2),
							ODX_I32(kw),	   ODX_I32(vk | sc)};

					wait_ok(launch("odx.hash_groupby", a4, 8, d, 7, 1, 32, 1),
						"hash_groupby (regrown)");
					free(table);
					table = xmalloc(((size_t)cap2 + 1) * 8 * sw);
					read_all(small, table, ((size_t)cap2 + 1) * 8 * sw);
					read_all(bs, &status, 4);
					assert_int_equal(status, 0);
					gb_check("hash_groupby (regrown)", d, table, cap2, sw, &r);
					assert_ok(odx_buffer_destroy(small));
					free(table);
					table = xmalloc((CAP + 1) * 40);
				}
			}
			assert_ok(odx_buffer_destroy(bk));
			assert_ok(odx_buffer_destroy(bv));
			assert_ok(odx_buffer_destroy(bt));
			assert_ok(odx_buffer_destroy(bs));
			gb_ref_free(&r);
		}
	}
	free(klist);
	free(vbits);
	free(table);
	free(keys);
	free(vals);
	free(kidx);
}

/* The combiner before a partition, then everything aggregated on the device: rows that passed
 * through with value_kind vk, records with vk's record kind, into one table that must equal
 * the reference over the original rows. */
static void kernel_data_combine(int d, uint64_t *rng)
{
	enum {
		N = 20011,
		NKEYS = 3000,
		P = 3,
		G = 5,
		SLOTS = 256,
		CAP = 4096
	};
	uint64_t *klist = xmalloc(NKEYS * 8), *vbits = xmalloc(N * 8);
	uint64_t *table = xmalloc((CAP + 1) * 40);
	uint32_t *keys = xmalloc(N * 8), *vals = xmalloc(N * 8), *pids = xmalloc(N * 4);
	uint32_t *rpids = xmalloc(G * SLOTS * 4), *rvals = xmalloc(G * SLOTS * 32);
	int *kidx = xmalloc(N * sizeof(int));
	/* key_words, value_kind, ODX_GB_SUM_COUNT or 0 (the last: examples/groupby's way) */
	static const int cases[][3] = {{1, 0, 0}, {2, 2, 0}, {1, 1, 0}, {1, 0, 8}};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int kw = cases[c][0], vk = cases[c][1], vw = vk == 0 ? 1 : 2;
		int sc = cases[c][2], sw = sc ? 3 : 5;
		uint64_t passed = 0, combined = 0;
		uint32_t status;
		gb_ref r;
		odx_buffer *bk, *bv, *bp, *rk, *rv, *rp, *bt, *bs;

		gb_input(rng, kw, vk, N, NKEYS, klist, kidx, keys, vals, vbits);
		gb_ref_init(&r, klist, NKEYS, vk != 2);
		for (int i = 0; i < N; i++)
			gb_ref_add(&r, kidx[i], vbits[i]);
		bk = new_buffer((size_t)N * 4 * kw, keys);
		bv = new_buffer((size_t)N * 4 * vw, vals);
		bp = new_buffer(N * 4, NULL);
		rk = new_buffer((size_t)G * SLOTS * 4 * kw, NULL);
		rv = new_buffer(G * SLOTS * 32, NULL);
		rp = new_buffer(G * SLOTS * 4, NULL);
		odx_arg cb[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0), ODX_BUF(bp, 0), ODX_BUF(rk, 0),
				ODX_BUF(rv, 0), ODX_BUF(rp, 0), ODX_I32(N),	ODX_I32(P),
				ODX_I32(kw),	ODX_I32(vk)};

		wait_ok(launch("odx.hash_combine", cb, 10, d, G, 1, 1, 1), "hash_combine");
		read_all(bp, pids, N * 4);
		read_all(rp, rpids, G * SLOTS * 4);
		read_all(rv, rvals, G * SLOTS * 32);
		/* each row passed to its partition or was combined; records carry the rest */
		for (int i = 0; i < N; i++) {
			uint32_t want = kw == 2 ? (uint32_t)(fmix64(klist[kidx[i]]) % P)
						: fmix32((uint32_t)klist[kidx[i]]) % P;

			if (pids[i] != NO_PART && pids[i] != want)
				fail_msg("hash_combine on device %d: row %d to partition %u, not %u",
					 d, i, pids[i], want);
			passed += pids[i] != NO_PART;
		}
		for (int j = 0; j < G * SLOTS; j++) {
			uint64_t cnt = (uint64_t)rvals[8 * j] | (uint64_t)rvals[8 * j + 1] << 32;

			combined += cnt;
			if ((cnt == 0) != (rpids[j] == NO_PART))
				fail_msg("hash_combine on device %d: record %d counts %llu, partition "
					 "%u",
					 d, j, (unsigned long long)cnt, rpids[j]);
		}
		/* the hot key is combined: far fewer rows move than came in */
		if (passed + combined != N || passed >= N - N / 8)
			fail_msg("hash_combine on device %d: %llu rows passed, %llu combined, of %d",
				 d, (unsigned long long)passed, (unsigned long long)combined, N);
		/* rows and records through the stable partition, checked on the way */
		partition_pipeline(d, pids, N, P, 4, 64, rng);
		partition_pipeline(d, rpids, G * SLOTS, P, 2, 32, rng);
		/* all of it into one table: rows, then records */
		bt = new_buffer((CAP + 1) * 8 * sw, NULL);
		bs = new_buffer(4, NULL);
		{
			odx_buffer *zk = new_buffer((size_t)N * 4 * kw, NULL);
			odx_buffer *zv = new_buffer((size_t)N * 4 * vw, NULL);
			uint32_t *tk = xmalloc((size_t)N * 8), *tv = xmalloc((size_t)N * 8);
			int m = 0;

			/* the passed rows, compacted here (the pipeline above checked the device's
			 * compaction): the table must not see the combined ones twice */
			for (int i = 0; i < N; i++) {
				if (pids[i] == NO_PART)
					continue;
				memcpy(tk + (size_t)m * kw, keys + (size_t)i * kw, 4 * (size_t)kw);
				memcpy(tv + (size_t)m * vw, vals + (size_t)i * vw, 4 * (size_t)vw);
				m++;
			}
			assert_ok(odx_buffer_write(zk, 0, tk, (size_t)N * 4 * kw, TEST_TIMEOUT_MS));
			assert_ok(odx_buffer_write(zv, 0, tv, (size_t)N * 4 * vw, TEST_TIMEOUT_MS));
			odx_arg rows[] = {ODX_BUF(zk, 0), ODX_BUF(zv, 0),  ODX_BUF(bt, 0),
					  ODX_BUF(bs, 0), ODX_I32(m),	   ODX_I32(CAP),
					  ODX_I32(kw),	  ODX_I32(vk | sc)};
			/* records of count 0 (unused) are skipped by the merge */
			odx_arg recs[] = {ODX_BUF(rk, 0),     ODX_BUF(rv, 0),
					  ODX_BUF(bt, 0),     ODX_BUF(bs, 0),
					  ODX_I32(G * SLOTS), ODX_I32(CAP),
					  ODX_I32(kw),	      ODX_I32((vk == 2 ? 4 : 3) | sc)};

			odx_event_release(launch("odx.hash_groupby", rows, 8, d, 8, 1, 64, 1));
			wait_ok(launch("odx.hash_groupby", recs, 8, d, 8, 1, 64, 1),
				"hash_groupby (records)");
			assert_ok(odx_buffer_destroy(zk));
			assert_ok(odx_buffer_destroy(zv));
			free(tk);
			free(tv);
		}
		read_all(bt, table, (CAP + 1) * 8 * sw);
		read_all(bs, &status, 4);
		assert_int_equal(status, 0);
		gb_check(sc ? "hash_combine + hash_groupby (count, sum)"
			    : "hash_combine + hash_groupby",
			 d, table, CAP, sw, &r);
		assert_ok(odx_buffer_destroy(bk));
		assert_ok(odx_buffer_destroy(bv));
		assert_ok(odx_buffer_destroy(bp));
		assert_ok(odx_buffer_destroy(rk));
		assert_ok(odx_buffer_destroy(rv));
		assert_ok(odx_buffer_destroy(rp));
		assert_ok(odx_buffer_destroy(bt));
		assert_ok(odx_buffer_destroy(bs));
		gb_ref_free(&r);
	}
	free(klist);
	free(vbits);
	free(table);
	free(keys);
	free(vals);
	free(pids);
	free(rpids);
	free(rvals);
	free(kidx);
}

/* The combiner's records on values where the order of comparisons shows: NaN (never replaces a
 * minimum or maximum, unless every value is NaN: then the first), signed zeros (the first of
 * equal values stays), infinities, a single -0.0 (its sum is -0.0). One group, few keys: every
 * key takes a slot on every backend, so each key is one record, compared with the rule of
 * docs/kernels.md applied in row order. The host's own table (u32 keys, f32 values) and the
 * kernel body of the other backends must agree on it. */
static void kernel_data_combine_special(int d)
{
	enum { KEYS = 6, ROWS = 5, N = KEYS * ROWS, S = 256 };
	const float nan = __builtin_nanf(""), inf = __builtin_inff();
	static const uint32_t klist[KEYS] = {7, 0xffffffffu, 0, 12345, 0x80000000u, 99};
	/* per key, its rows' values, in row order (interleaved across keys below) */
	const float v[KEYS][ROWS] = {
		{nan, 1.0f, -inf, inf, nan},	 {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f},
		{nan, nan, nan, nan, nan},	 {0.0f, -0.0f, 0.0f, -0.0f, 0.0f},
		{-0.0f, 0.0f, -0.0f, 0.0f, 3.0f}, {inf, inf, 2.5f, -1.0f, nan},
	};
	uint32_t keys[N], pids[N], rpids[S], rkeys[S], rvals[S * 8];
	float vals[N];
	int seen[KEYS] = {0};

	for (int r = 0; r < ROWS; r++)
		for (int k = 0; k < KEYS; k++) {
			keys[r * KEYS + k] = klist[k];
			vals[r * KEYS + k] = v[k][r];
		}
	odx_buffer *bk = new_buffer(sizeof(keys), keys), *bv = new_buffer(sizeof(vals), vals);
	odx_buffer *bp = new_buffer(sizeof(pids), NULL), *rk = new_buffer(sizeof(rkeys), NULL);
	odx_buffer *rv = new_buffer(sizeof(rvals), NULL), *rp = new_buffer(sizeof(rpids), NULL);
	odx_arg cb[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0), ODX_BUF(bp, 0), ODX_BUF(rk, 0),
			ODX_BUF(rv, 0), ODX_BUF(rp, 0), ODX_I32(N),	ODX_I32(2),
			ODX_I32(1),	ODX_I32(0)};

	wait_ok(launch("odx.hash_combine", cb, 10, d, 1, 1, 1, 1), "hash_combine (special values)");
	read_all(bp, pids, sizeof(pids));
	read_all(rk, rkeys, sizeof(rkeys));
	read_all(rv, rvals, sizeof(rvals));
	read_all(rp, rpids, sizeof(rpids));
	for (int i = 0; i < N; i++)
		if (pids[i] != NO_PART)
			fail_msg("hash_combine (special values) on device %d: row %d passed through", d,
				 i);
	for (int j = 0; j < S; j++) {
		uint64_t w[4];
		double sum, lo, hi, want_sum, want_lo, want_hi;
		int k;

		for (int q = 0; q < 4; q++)
			w[q] = (uint64_t)rvals[8 * j + 2 * q] | (uint64_t)rvals[8 * j + 2 * q + 1] << 32;
		if (w[0] == 0)
			continue;
		for (k = 0; k < KEYS && klist[k] != rkeys[j]; k++)
			;
		if (k == KEYS || seen[k]++ || w[0] != ROWS || rpids[j] != fmix32(klist[k]) % 2)
			fail_msg("hash_combine (special values) on device %d: record %d: key 0x%x count "
				 "%llu partition %u", d, j, rkeys[j], (unsigned long long)w[0],
				 rpids[j]);
		want_sum = want_lo = want_hi = v[k][0];
		for (int r = 1; r < ROWS; r++) {
			double x = v[k][r];

			want_sum += x;
			if ((x < want_lo || want_lo != want_lo) && x == x)
				want_lo = x;
			if ((x > want_hi || want_hi != want_hi) && x == x)
				want_hi = x;
		}
		memcpy(&sum, &w[1], 8);
		memcpy(&lo, &w[2], 8);
		memcpy(&hi, &w[3], 8);
		/* NaN payloads may differ between devices; everything else bit for bit */
		if ((sum != sum) != (want_sum != want_sum) ||
		    (sum == sum && memcmp(&sum, &want_sum, 8) != 0) ||
		    (lo != lo) != (want_lo != want_lo) || (lo == lo && memcmp(&lo, &want_lo, 8)) ||
		    (hi != hi) != (want_hi != want_hi) || (hi == hi && memcmp(&hi, &want_hi, 8)))
			fail_msg("hash_combine (special values) on device %d: key 0x%x: sum %g min %g "
				 "max %g, want %g %g %g (signs %d%d%d, want %d%d%d)", d, klist[k], sum,
				 lo, hi, want_sum, want_lo, want_hi, signbit(sum) != 0,
				 signbit(lo) != 0, signbit(hi) != 0, signbit(want_sum) != 0,
				 signbit(want_lo) != 0, signbit(want_hi) != 0);
	}
	for (int k = 0; k < KEYS; k++)
		if (seen[k] != 1)
			fail_msg("hash_combine (special values) on device %d: key 0x%x in %d records",
				 d, klist[k], seen[k]);
	assert_ok(odx_buffer_destroy(bk));
	assert_ok(odx_buffer_destroy(bv));
	assert_ok(odx_buffer_destroy(bp));
	assert_ok(odx_buffer_destroy(rk));
	assert_ok(odx_buffer_destroy(rv));
	assert_ok(odx_buffer_destroy(rp));
}

/* The combiner over more rows than one block of the host's (65536), in one group (one call
 * whatever the device's threads; 3 groups on Vulkan, see G): the hot key first, then a block of
 * distinct keys (the table, 256 slots here, takes few of them), then the hot key only. Every row
 * passes to its partition or is counted in a record, and the rows and records add up to the input,
 * on every backend. On the host, where a block the table took less than half of makes the next 15
 * pass straight through, the hot key's rows in blocks 1-15 pass and the table takes them again
 * from block 16 on (docs/kernels.md); without the pass-through, or without the retry, the counts
 * differ. */
static void kernel_data_combine_blocks(int d)
{
	enum { BLOCK = 65536, N = 18 * BLOCK, P = 3, S = 256 };
	/* Vulkan: 3 groups of 393216 rows, as far past the 6671 rows where lavapipe's loop budget
	 * stopped the first GLSL kernel as lavapipe lets one invocation go (523256 rows with
	 * the kernel as written: docs/kernels.md) */
	const int G = conf.kind == ODX_BACKEND_VULKAN ? 3 : 1;
	const uint32_t hot = 0x5eed;
	uint32_t *keys = xmalloc(N * 4), *vals = xmalloc(N * 4), *pids = xmalloc(N * 4);
	uint32_t *rkeys = xmalloc(G * S * 4), *rvals = xmalloc(G * S * 32), *rpids = xmalloc(G * S * 4);
	uint64_t passed = 0, passed_hot = 0, counted = 0, counted_hot = 0;
	double sum = 0, want = 0;

	for (int i = 0; i < N; i++) {
		float f = (float)(i % 7);

		/* block 0: the hot key, then distinct keys (none is `hot`); then the hot key */
		keys[i] = i > 0 && i < BLOCK ? (uint32_t)(i * 2654435761u) | 0x80000000u : hot;
		memcpy(&vals[i], &f, 4);
		want += f;
	}
	odx_buffer *bk = new_buffer((size_t)N * 4, keys), *bv = new_buffer((size_t)N * 4, vals);
	odx_buffer *bp = new_buffer((size_t)N * 4, NULL), *rk = new_buffer(G * S * 4, NULL);
	odx_buffer *rv = new_buffer(G * S * 32, NULL), *rp = new_buffer(G * S * 4, NULL);
	odx_arg cb[] = {ODX_BUF(bk, 0), ODX_BUF(bv, 0), ODX_BUF(bp, 0), ODX_BUF(rk, 0),
			ODX_BUF(rv, 0), ODX_BUF(rp, 0), ODX_I32(N),	ODX_I32(P),
			ODX_I32(1),	ODX_I32(0)};

	wait_ok(launch("odx.hash_combine", cb, 10, d, G, 1, 1, 1), "hash_combine (blocks)");
	read_all(bp, pids, (size_t)N * 4);
	read_all(rk, rkeys, G * S * 4);
	read_all(rv, rvals, G * S * 32);
	read_all(rp, rpids, G * S * 4);
	for (int i = 0; i < N; i++) {
		float f;

		if (pids[i] == NO_PART)
			continue;
		if (pids[i] != fmix32(keys[i]) % P)
			fail_msg("hash_combine (blocks) on device %d: row %d to partition %u, not %u",
				 d, i, pids[i], fmix32(keys[i]) % P);
		memcpy(&f, &vals[i], 4);
		sum += f;
		passed++;
		passed_hot += keys[i] == hot;
	}
	for (int j = 0; j < G * S; j++) {
		uint64_t cnt = (uint64_t)rvals[8 * j] | (uint64_t)rvals[8 * j + 1] << 32;
		uint64_t sb = (uint64_t)rvals[8 * j + 2] | (uint64_t)rvals[8 * j + 3] << 32;
		double rs;

		if (cnt == 0)
			continue;
		if (rpids[j] != fmix32(rkeys[j]) % P)
			fail_msg("hash_combine (blocks) on device %d: record %d of key 0x%x to "
				 "partition %u", d, j, rkeys[j], rpids[j]);
		memcpy(&rs, &sb, 8);
		sum += rs;
		counted += cnt;
		counted_hot += rkeys[j] == hot ? cnt : 0;
	}
	/* the values are small integers: every sum is exact in any order */
	if (passed + counted != N || sum != want)
		fail_msg("hash_combine (blocks) on device %d: %llu rows passed, %llu in records, sum "
			 "%.1f, of %d rows summing to %.1f", d, (unsigned long long)passed,
			 (unsigned long long)counted, sum, N, want);
	/* host: block 0 combined at most 256 of its rows, the hot key's first among them; blocks
	 * 1-15 pass straight through; block 16 tries the table again, which has the hot key */
	if (conf.kind == ODX_BACKEND_HOST &&
	    (passed_hot != 15 * BLOCK || counted_hot != 2 * BLOCK + 1))
		fail_msg("hash_combine (blocks) on host device %d: hot key %llu rows passed, %llu "
			 "combined; want %d and %d", d, (unsigned long long)passed_hot,
			 (unsigned long long)counted_hot, 15 * BLOCK, 2 * BLOCK + 1);
	assert_ok(odx_buffer_destroy(bk));
	assert_ok(odx_buffer_destroy(bv));
	assert_ok(odx_buffer_destroy(bp));
	assert_ok(odx_buffer_destroy(rk));
	assert_ok(odx_buffer_destroy(rv));
	assert_ok(odx_buffer_destroy(rp));
	free(keys);
	free(vals);
	free(pids);
	free(rkeys);
	free(rvals);
	free(rpids);
}

void test_data_kernels(void **state)
{
	(void)state;
	for (int d = 0; d < conf.ndev; d++) {
		uint64_t rng = 4321 + (uint64_t)d;

		kernel_data_partition(d, &rng);
		kernel_data_histogram(d, &rng);
		kernel_data_groupby(d, &rng);
		kernel_data_combine(d, &rng);
		kernel_data_combine_special(d);
		/* on Vulkan too: the GLSL kernel written with a loop round a row stopped at row 6671
		 * of a group here, at lavapipe's loop budget (docs/kernels.md) */
		kernel_data_combine_blocks(d);
		kernel_data_loop_budget(d);
	}
	assert_ok(odx_wait_all(conf.ctx, TEST_TIMEOUT_MS));
}
