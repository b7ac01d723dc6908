/* SPDX-License-Identifier: Apache-2.0 */
/*
 * groupby.c - a distributed hash group-by with skewed keys: per distinct u32 key, the count of its
 * rows and the sum of their f32 values in f64, over the rows of every rank.
 *
 * Every rank holds ROWS rows made by a seeded generator (bench/shuffle_common.h: K distinct keys,
 * uniform or Zipf-distributed, small integer values). Per rank r, on rank r (the owner of the
 * buffers its tasks write), with the standard kernels:
 *
 *   gen            keys[r], vals[r]: this program's host kernel (the generator)
 *   hash_combine   hot keys pre-aggregated into records (count, sum, min, max); the other rows
 *                  pass through with their partition
 *   partition_count, partition_rank, scatter_rows
 *                  the rows of partition d, and the records of partition d, into part d of
 *                  buffers with P parts (odx_buffer_set_parts), each part's length set by a
 *                  length rule from the counts (no host round trip)
 *   odx_shuffle    part d of every rank's buffers to rank d, packed (one per column)
 *   hash_groupby   what arrived, rows then records, into rank d's table; n = ODX_LEN; count and
 *                  sum only (value_kind | ODX_GB_SUM_COUNT: 24-byte slots)
 *
 * Every rank submits every task (the replicated flow); each runs where its output lives, and
 * nothing is read back until the end.
 *
 * Keys hash to ranks with fmix32(key) % P, so every key ends on one rank and the tables of the
 * ranks are disjoint. The result is checked EXACTLY against a sequential reference computed here
 * from the same generator (a plain hash table over every rank's rows, shuffle_common.h): same
 * keys, same counts, same f64 sums bit for bit. The sums can be compared bit for bit because the
 * values are small integers stored as f32: every partial sum is an integer below 2^53, exact in
 * f64 whatever the order in which rows and records reach the table.
 *
 *	usage: groupby [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] [-s SEED] [-g GROUPS] [-r REPS]
 *		       [-D DEVICE] [--no-check]
 *	       scripts/odx-run -n 4 build/examples/groupby -n 1000000 -z 1.1
 *
 * -z 0 draws keys uniformly (the default), -z 1.1 from Zipf 1.1. -g is the work-groups of the
 * combiner (default 32): its records, 256 a group, are the slots of its tables; the host variant
 * keeps one table per call (the groups a thread runs) of up to 8192 slots, so 32 groups give a
 * thread with all of them 8192 slots, a table that holds the hot keys of Zipf 1.1 over 1M keys
 * (about 3/4 of the rows) and still fits the caches (docs/kernels.md); -r repeats the timed
 * part (tables reset in between) and reports the median. -D runs the standard kernels on device
 * DEVICE (an odx device index: with ODX_BACKENDS=host,vulkan and one host device, 1 is the Vulkan
 * device); the generator and the digest stay on the host. --no-check skips
 * the per-key comparison (the digest is still printed; bench/shuffle.sh compares it with the MPI
 * program's). Prints the time from the first task after the rows exist to the last task of the
 * group-by on every rank, the rows per second, and one JSON line (bench/shuffle.sh reads it).
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <odx/odx.h>

#include "shuffle_common.h"

#define PROGRAM "groupby"
/* ODX_COMBINE_SLOTS: records each combiner work-group writes (docs/kernels.md) */
#define COMBINE_SLOTS 256
/* hash_groupby's value_kind flag ODX_GB_SUM_COUNT: count and sum only (all this program needs),
 * in slots of SLOT_WORDS u64 [~key, count, sum], 24 bytes like the MPI program's (docs/kernels.md) */
#define GB_SUM_COUNT 8
#define SLOT_WORDS 3

static void check(odx_context *ctx, int rc, const char *what)
{
	if (rc >= 0)
		return;
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", PROGRAM, what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
	exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p) {
		fprintf(stderr, "%s: out of memory (%zu x %zu bytes)\n", PROGRAM, n, size);
		exit(1);
	}
	return p;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- this program's two host kernels ----------------------------------------------------- */

/* The key distribution, built in main before any task: the generator reads it on every rank. */
static sc_keys key_dist;
static uint64_t gen_seed;

typedef struct gen_job {
	uint32_t *keys;
	float *vals;
	uint64_t n, chunk;
	uint32_t rank;
} gen_job;

static int gen_chunk(void *arg, uint64_t i, int thread)
{
	const gen_job *j = arg;
	uint64_t first = i * j->chunk, count = j->n - first < j->chunk ? j->n - first : j->chunk;

	(void)thread;
	sc_rows(&key_dist, gen_seed, j->rank, first, count, j->keys + first, j->vals + first);
	return 0;
}

/* gen(keys W u32[n], vals W f32[n], n i32, rank i32): rank's rows, on the device's threads. */
static int gen_host(const odx_host_launch *l)
{
	gen_job j = {.keys = l->buffers[0], .vals = l->buffers[1],
		     .n = (uint64_t)*(const int32_t *)l->scalars[2],
		     .rank = (uint32_t)*(const int32_t *)l->scalars[3], .chunk = 1 << 16};

	return l->run(l, (j.n + j.chunk - 1) / j.chunk, gen_chunk, &j);
}

/* digest(table R u64[(capacity + 1) * SLOT_WORDS], out W u64[3], capacity i32): the digest of
 * one rank's table (sc_digest: keys, rows, checksum), so that a large result need not cross
 * ranks to be compared with the MPI program's. */
static int digest_host(const odx_host_launch *l)
{
	const uint64_t *w = l->buffers[0];
	uint64_t *out = l->buffers[1];
	int32_t cap = *(const int32_t *)l->scalars[2];
	sc_digest d = {0, 0, 0};

	for (int64_t s = 0; s <= cap; s++, w += SLOT_WORDS) {
		double sum;

		if (s < cap ? w[0] == 0 : w[1] == 0)
			continue;
		memcpy(&sum, &w[2], sizeof(sum));
		sc_digest_add(&d, (uint32_t)~w[0], w[1], sum);
	}
	out[0] = d.keys;
	out[1] = d.rows;
	out[2] = d.checksum;
	return 0;
}

static odx_kernel *host_kernel(odx_context *ctx, const char *name, odx_host_fn fn,
			       const odx_param *params, int nparams)
{
	const odx_kernel_variant variant = {.backend_name = "host", .format = ODX_FORMAT_HOST_CALL,
					    .host_fn = fn};
	odx_kernel *k;

	check(ctx, odx_kernel_create(ctx, name, params, nparams, &variant, 1, &k),
	      "odx_kernel_create");
	return k;
}

static odx_kernel *builtin(odx_context *ctx, const char *name)
{
	odx_kernel *k;

	check(ctx, odx_kernel_builtin(ctx, name, &k), name);
	return k;
}

/* ---- the distributed group-by ------------------------------------------------------------ */

typedef struct kernels {
	odx_kernel *gen, *digest, *fill, *combine, *count, *rank, *scatter, *groupby;
} kernels;

/* A stream of rows on its way to the shuffle: the rows themselves (pass-through rows, or the
 * combiner's records), their partitions, and each one's place in the shuffle's sources. */
typedef struct stream {
	odx_buffer *keys, *vals;   /* the columns: u32 keys, and f32 values or 8-word records */
	odx_buffer *pids;          /* u32[rows]: partition of each row (0xffffffff: not in it) */
	odx_buffer *cnt;           /* u32[P]: rows of each partition */
	odx_buffer *dest;          /* u32[rows + P]: the row's place in src, then the counts again */
	odx_buffer *skeys, *svals; /* the shuffle's sources: P parts of `cap` rows */
	odx_buffer *dkeys, *dvals; /* and its destinations: what this rank receives, packed */
} stream;

/* One rank's buffers, all owned by that rank (its tasks run there). */
typedef struct rank_bufs {
	stream rows, recs;
	odx_buffer *table, *status, *digest; /* the group-by table of the keys of this rank */
} rank_bufs;

/* What a stream's tasks need to know about its shape (the same for every rank). */
typedef struct shape {
	uint32_t rows;   /* rows of the stream per rank */
	int width;       /* value words per row: 1 (f32), 8 (a record: 4 u64) */
	uint32_t cap;    /* rows each part of the shuffle's sources can hold */
	uint32_t dcap;   /* rows the shuffle's destination can hold */
	odx_buffer *base; /* u32[P], base[p] = p * cap: where partition p starts in the sources */
	odx_buffer *tail; /* u32[P], tail[p] = rows + p: where the counts go in `dest` */
	int value_kind;  /* hash_groupby's: 0 f32 rows, 3 f64 records */
} shape;

typedef struct job {
	odx_context *ctx;
	kernels k;
	int size;
	uint32_t n, groups;        /* rows per rank, combiner work-groups (-g) */
	int device;                /* -D: the device of the standard kernels, or -1 (any) */
	int32_t capacity;          /* table slots (a power of two) */
	shape rows, recs;
	rank_bufs *r;
} job;

static odx_buffer *new_buffer(job *j, size_t bytes, int owner, const char *label, int r)
{
	odx_buffer *b;
	char name[ODX_LABEL_MAX + 1];

	check(j->ctx, odx_buffer_create(j->ctx, bytes ? bytes : 4, 0, &b), "odx_buffer_create");
	check(j->ctx, odx_buffer_set_owner(b, owner), "odx_buffer_set_owner");
	snprintf(name, sizeof(name), "%s[%d]", label, r);
	odx_buffer_set_label(b, name);
	return b;
}

/* A u32 array every rank writes with the same bytes: valid on every rank, moved by no one. */
static odx_buffer *constant(job *j, uint32_t first, uint32_t step, const char *label)
{
	uint32_t *v = xcalloc(j->size, sizeof(*v));
	odx_buffer *b;

	for (int p = 0; p < j->size; p++)
		v[p] = first + step * (uint32_t)p;
	check(j->ctx, odx_buffer_create(j->ctx, 4 * (size_t)j->size, 0, &b), "odx_buffer_create");
	odx_buffer_set_label(b, label);
	check(j->ctx, odx_buffer_write(b, 0, v, 4 * (size_t)j->size, -1), "odx_buffer_write");
	free(v);
	return b;
}

/* With -D, the standard kernels run on that device (this program's own two kernels have only a
 * host variant): a way to see the same pipeline on Vulkan, OpenCL or CUDA. */
static void submit_opts(job *j, odx_kernel *k, const odx_arg *args, int nargs,
			const odx_task_opts *o)
{
	odx_task_opts on = *o;

	if (j->device >= 0 && k != j->k.gen && k != j->k.digest) {
		on.flags |= ODX_SUBMIT_ON_DEVICE;
		on.on_device = j->device;
	}
	check(j->ctx, odx_submit(j->ctx, k, args, nargs, &on, NULL), o->tag);
}

/* Work-groups of 256 for a grid-stride kernel over n elements: one element per work-item. On a
 * GPU any grid does; on the host it matters: each work-item's loop steps by the whole grid, so a
 * small grid over many rows reads them a grid apart (a cache line, often a page, per row), while
 * one row per work-item reads them in order (and groups past n cost nothing: docs/kernels.md). */
static uint32_t blocks(uint64_t n)
{
	uint64_t g = (n + 255) / 256;

	return g < 65535 ? (uint32_t)g : 65535; /* what every GPU takes in x (docs/kernels.md) */
}

static void submit(job *j, odx_kernel *k, const odx_arg *args, int nargs, uint32_t grid,
		   uint32_t block, const char *tag)
{
	odx_task_opts o = {.grid = {grid}, .block = {block}, .tag = tag};

	submit_opts(j, k, args, nargs, &o);
}

/* The buffers of one stream of rank r: sources of P parts of sh->cap rows each (set_parts: the
 * part lengths are what the scatter's length rule sets), destinations that hold what the rank
 * can receive (sh->dcap rows; the shuffle fails cleanly, ODX_ENOSPC, if more comes). */
static void new_stream(job *j, stream *s, const shape *sh, int r)
{
	const char *name = sh->width == 1 ? "rows" : "recs";
	uint32_t dcap = sh->dcap;
	size_t rows = sh->rows, P = j->size, vbytes = 4 * (size_t)sh->width;
	char label[32];
	odx_partition parts = {.kind = ODX_PART_BLOCKS};

	snprintf(label, sizeof(label), "%s.pids", name);
	s->pids = new_buffer(j, 4 * rows, r, label, r);
	snprintf(label, sizeof(label), "%s.cnt", name);
	s->cnt = new_buffer(j, 4 * P, r, label, r);
	snprintf(label, sizeof(label), "%s.dest", name);
	s->dest = new_buffer(j, 4 * (rows + P), r, label, r);
	snprintf(label, sizeof(label), "%s.skeys", name);
	s->skeys = new_buffer(j, 4 * P * sh->cap, r, label, r);
	snprintf(label, sizeof(label), "%s.svals", name);
	s->svals = new_buffer(j, vbytes * P * sh->cap, r, label, r);
	snprintf(label, sizeof(label), "%s.dkeys", name);
	s->dkeys = new_buffer(j, 4 * (size_t)dcap, r, label, r);
	snprintf(label, sizeof(label), "%s.dvals", name);
	s->dvals = new_buffer(j, vbytes * dcap, r, label, r);
	parts.elem_size = 4;
	check(j->ctx, odx_buffer_set_parts(s->skeys, &parts, j->size), "odx_buffer_set_parts");
	parts.elem_size = vbytes;
	check(j->ctx, odx_buffer_set_parts(s->svals, &parts, j->size), "odx_buffer_set_parts");
}

/* Zeroes rank r's table and status: a table accumulates over launches (docs/kernels.md). */
static void reset_table(job *j, int r)
{
	rank_bufs *b = &j->r[r];
	int32_t words = (j->capacity + 1) * 2 * SLOT_WORDS;

	submit(j, j->k.fill, (odx_arg[]){ODX_BUF(b->table, ODX_W), ODX_I32(0), ODX_I32(words)}, 3,
	       blocks((uint64_t)words), 256, "reset table");
	submit(j, j->k.fill, (odx_arg[]){ODX_BUF(b->status, ODX_W), ODX_I32(0), ODX_I32(1)}, 3, 1,
	       1, "reset status");
}

/*
 * A stream of rank s into the shuffle's sources, part d holding the rows for rank d:
 *   partition_count   cnt[d] = rows of partition d (one work-group: the partition's total)
 *   partition_rank    dest[i] = d * cap + (rows of d before i): part d's place, in input order
 *   scatter_rows      cnt into dest[rows .. rows + P): the counts, where the next tasks see them
 *   scatter_rows      each column into its part, with a length rule: part d's length becomes
 *                     dest[rows + d] rows. A length rule reads a u32 array the same task writes,
 *                     and no standard kernel writes both the rows and their counts: so the counts
 *                     ride at the end of `dest` (declared RW by the column scatters).
 * A partition with more than cap rows fails the column scatters (the rule's length exceeds the
 * part's capacity; the rows that overflowed went into the next part, which no task then reads).
 */
static void stream_to_parts(job *j, stream *s, const shape *sh)
{
	int P = j->size;
	odx_length_rule rule = {.arg = 2, .from_arg = 1, .index = sh->rows, .unit = 4,
				.part = ODX_ALL_PARTS};

	submit(j, j->k.count,
	       (odx_arg[]){ODX_BUF(s->pids, ODX_R), ODX_BUF(s->cnt, ODX_W), ODX_I32(sh->rows),
			   ODX_I32(P)},
	       4, 1, 256, "count");
	submit(j, j->k.rank,
	       (odx_arg[]){ODX_BUF(s->pids, ODX_R), ODX_BUF(sh->base, ODX_R),
			   ODX_BUF(s->dest, ODX_W), ODX_I32(sh->rows), ODX_I32(P)},
	       5, 1, 64, "rank");
	submit(j, j->k.scatter,
	       (odx_arg[]){ODX_BUF(s->cnt, ODX_R), ODX_BUF(sh->tail, ODX_R),
			   ODX_BUF(s->dest, ODX_RW), ODX_I32(P), ODX_I32(1),
			   ODX_I32(sh->rows + P)},
	       6, 1, 64, "counts");
	for (int c = 0; c < 2; c++) {
		odx_buffer *col = c ? s->vals : s->keys, *out = c ? s->svals : s->skeys;
		int width = c ? sh->width : 1;
		odx_task_opts o = {.grid = {blocks(sh->rows)}, .block = {256}, .tag = "scatter",
				   .flags = ODX_SUBMIT_LENGTHS, .lengths = &rule, .nlengths = 1};

		rule.unit = 4 * (uint32_t)width;
		submit_opts(j, j->k.scatter,
			    (odx_arg[]){ODX_BUF(col, ODX_R), ODX_BUF(s->dest, ODX_RW),
					ODX_BUF(out, ODX_W), ODX_I32(sh->rows), ODX_I32(width),
					ODX_I32((int32_t)(sh->cap * P))},
			    6, &o);
	}
}

/* Every rank's side: combine, both streams into their parts, the shuffles, the group-by. */
static void groupby(job *j)
{
	int P = j->size;
	odx_buffer **src = xcalloc(P, sizeof(*src)), **dst = xcalloc(P, sizeof(*dst));
	odx_task_opts so = {.tag = "shuffle"};

	for (int s = 0; s < P; s++) {
		rank_bufs *b = &j->r[s];

		/* hot keys into records; the other rows keep their partition (pids) */
		submit(j, j->k.combine,
		       (odx_arg[]){ODX_BUF(b->rows.keys, ODX_R), ODX_BUF(b->rows.vals, ODX_R),
				   ODX_BUF(b->rows.pids, ODX_W), ODX_BUF(b->recs.keys, ODX_W),
				   ODX_BUF(b->recs.vals, ODX_W), ODX_BUF(b->recs.pids, ODX_W),
				   ODX_I32(j->n), ODX_I32(P), ODX_I32(1), ODX_I32(0)},
		       10, j->groups, 1, "combine");
		stream_to_parts(j, &b->rows, &j->rows);
		stream_to_parts(j, &b->recs, &j->recs);
	}
	/* four shuffles, one per column: part d of every rank's sources to rank d */
	for (int c = 0; c < 4; c++) {
		for (int r = 0; r < P; r++) {
			stream *st = c < 2 ? &j->r[r].rows : &j->r[r].recs;

			src[r] = c % 2 ? st->svals : st->skeys;
			dst[r] = c % 2 ? st->dvals : st->dkeys;
		}
		check(j->ctx, odx_shuffle(j->ctx, src, dst, NULL, &so, NULL), "odx_shuffle");
	}
	/* what arrived, rows then records, into the table; n is what arrived (ODX_LEN) */
	for (int d = 0; d < P; d++) {
		rank_bufs *b = &j->r[d];
		const stream *st[2] = {&b->rows, &b->recs};
		const shape *sh[2] = {&j->rows, &j->recs};

		for (int i = 0; i < 2; i++)
			submit(j, j->k.groupby,
			       (odx_arg[]){ODX_BUF(st[i]->dkeys, ODX_R),
					   ODX_BUF(st[i]->dvals, ODX_R), ODX_BUF(b->table, ODX_RW),
					   ODX_BUF(b->status, ODX_RW), ODX_LEN(0, 4),
					   ODX_I32(j->capacity), ODX_I32(1),
					   ODX_I32(sh[i]->value_kind | GB_SUM_COUNT)},
			       8, blocks(sh[i]->dcap), 256, i ? "groupby records" : "groupby rows");
	}
	free(src);
	free(dst);
}

/* ---- the sequential reference ------------------------------------------------------------ */

/* Every rank's rows, aggregated one by one into one table, with no ODX involved. */
static void reference(sc_table *t, uint32_t size, uint32_t n, uint64_t cap)
{
	uint32_t *keys = xcalloc(n, sizeof(*keys));
	float *vals = xcalloc(n, sizeof(*vals));

	if (sc_table_init(t, cap))
		goto out_of_memory;
	for (uint32_t r = 0; r < size; r++) {
		sc_rows(&key_dist, gen_seed, r, 0, n, keys, vals);
		for (uint32_t i = 0; i < n; i++)
			if (sc_table_add(t, keys[i], 1, (double)vals[i]))
				goto out_of_memory;
	}
	free(keys);
	free(vals);
	return;
out_of_memory:
	fprintf(stderr, "%s: out of memory (reference table)\n", PROGRAM);
	exit(1);
}

/* Compares every rank's ODX table with the reference, key by key; returns the mismatches. */
static uint64_t compare(job *j, const sc_table *ref)
{
	size_t words = ((size_t)j->capacity + 1) * SLOT_WORDS;
	uint64_t *w = xcalloc(words, sizeof(*w)), bad = 0, keys = 0;

	for (int r = 0; r < j->size; r++) {
		check(j->ctx, odx_buffer_read(j->r[r].table, 0, w, words * 8, -1), "read a table");
		for (int64_t s = 0; s <= j->capacity; s++) {
			const uint64_t *slot = w + SLOT_WORDS * s;
			uint32_t key = (uint32_t)~slot[0];
			double sum;

			if (s < j->capacity ? slot[0] == 0 : slot[1] == 0)
				continue;
			memcpy(&sum, &slot[2], sizeof(sum));
			keys++;
			sc_slot *want = sc_table_find((sc_table *)ref, key);
			if (want->nkey == 0 || sc_part(key, j->size) != (uint32_t)r ||
			    want->count != slot[1] || memcmp(&want->sum, &sum, sizeof(sum)) != 0) {
				if (bad++ < 5)
					fprintf(stderr, "%s: rank %d key %08x: count %llu sum %.17g, "
						"reference count %llu sum %.17g\n", PROGRAM, r, key,
						(unsigned long long)slot[1], sum,
						(unsigned long long)want->count, want->sum);
			}
		}
	}
	if (keys != ref->used) {
		fprintf(stderr, "%s: %llu keys in the tables, %llu in the reference\n", PROGRAM,
			(unsigned long long)keys, (unsigned long long)ref->used);
		bad++;
	}
	free(w);
	return bad;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t rows = 1u << 20, nkeys = 1000000, seed = 42;
	double zipf_s = 0;
	int reps = 1, groups = 32, verify = 1, device = -1, opt;
	static const struct option longopts[] = {
		{"no-check", no_argument, NULL, 'C'},
		{"check", no_argument, NULL, 'c'},
		{0, 0, 0, 0},
	};

	while ((opt = getopt_long(argc, argv, "n:k:z:s:g:r:D:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n': rows = strtoull(optarg, NULL, 0); break;
		case 'k': nkeys = strtoull(optarg, NULL, 0); break;
		case 'z': zipf_s = strtod(optarg, NULL); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'g': groups = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'D': device = atoi(optarg); break;
		case 'C': verify = 0; break;
		case 'c': verify = 1; break;
		default:
			fprintf(stderr, "usage: %s [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] [-s SEED] "
					"[-g GROUPS] [-r REPS] [-D DEVICE] [--no-check]\n", PROGRAM);
			return 2;
		}
	}
	if (rows == 0 || rows > INT32_MAX / 8 || nkeys == 0 || nkeys > UINT32_MAX ||
	    groups < 1 || groups > 4096 || reps < 1) {
		fprintf(stderr, "%s: bad sizes: 1 <= rows < 2^28, 1 <= keys < 2^32, groups in "
				"[1, 4096], reps >= 1\n", PROGRAM);
		return 2;
	}
	gen_seed = seed;
	if (sc_keys_init(&key_dist, (uint32_t)nkeys, zipf_s)) {
		fprintf(stderr, "%s: out of memory (key distribution)\n", PROGRAM);
		return 1;
	}

	job j = {.n = (uint32_t)rows, .groups = (uint32_t)groups, .device = device};
	check(NULL, odx_open(&j.ctx, NULL), "odx_open");
	j.size = odx_size(j.ctx);
	int me = odx_rank(j.ctx), P = j.size;
	j.capacity = (int32_t)sc_capacity(nkeys, rows * P, (uint32_t)P);

	j.k.gen = host_kernel(j.ctx, "groupby.gen", gen_host,
			      (odx_param[]){{ODX_ARG_BUFFER, ODX_W, "keys"},
					    {ODX_ARG_BUFFER, ODX_W, "vals"},
					    {ODX_ARG_I32, 0, "n"},
					    {ODX_ARG_I32, 0, "rank"}}, 4);
	j.k.digest = host_kernel(j.ctx, "groupby.digest", digest_host,
				 (odx_param[]){{ODX_ARG_BUFFER, ODX_R, "table"},
					       {ODX_ARG_BUFFER, ODX_W, "digest"},
					       {ODX_ARG_I32, 0, "capacity"}}, 3);
	j.k.fill = builtin(j.ctx, "odx.fill_u32");
	j.k.combine = builtin(j.ctx, "odx.hash_combine");
	j.k.count = builtin(j.ctx, "odx.partition_count");
	j.k.rank = builtin(j.ctx, "odx.partition_rank");
	j.k.scatter = builtin(j.ctx, "odx.scatter_rows");
	j.k.groupby = builtin(j.ctx, "odx.hash_groupby");

	/*
	 * Capacities. A source part holds up to cap rows: every row of the rank when that is
	 * small, else twice a fair share (hashed keys spread evenly; a hot key's rows became
	 * records). A destination holds what a rank can receive: every row of the job when that
	 * is small, else twice its share. Beyond them the run fails cleanly (a length above a
	 * part's capacity, or ODX_ENOSPC from the shuffle), never silently.
	 */
	uint64_t nrec = (uint64_t)j.groups * COMBINE_SLOTS;
	uint64_t cap = rows <= (1u << 20) ? rows : 2 * ((rows + P - 1) / P) + 65536;
	uint64_t dcap = rows * P <= (1u << 22) ? rows * P : 2 * rows + 65536 * (uint64_t)P;

	j.rows = (shape){.rows = j.n, .width = 1, .cap = (uint32_t)(cap < rows ? cap : rows),
			 .dcap = (uint32_t)dcap, .value_kind = 0};
	j.recs = (shape){.rows = (uint32_t)nrec, .width = 8, .cap = (uint32_t)nrec,
			 .dcap = (uint32_t)(nrec * P), .value_kind = 3};
	j.rows.base = constant(&j, 0, j.rows.cap, "rows.base");
	j.rows.tail = constant(&j, j.rows.rows, 1, "rows.tail");
	j.recs.base = constant(&j, 0, j.recs.cap, "recs.base");
	j.recs.tail = constant(&j, j.recs.rows, 1, "recs.tail");

	/* every rank creates every rank's buffers (the replicated flow); tasks run on the owner */
	j.r = xcalloc(P, sizeof(*j.r));
	for (int r = 0; r < P; r++) {
		rank_bufs *b = &j.r[r];

		b->rows.keys = new_buffer(&j, 4 * (size_t)j.n, r, "keys", r);
		b->rows.vals = new_buffer(&j, 4 * (size_t)j.n, r, "vals", r);
		b->recs.keys = new_buffer(&j, 4 * nrec, r, "recs.keys", r);
		b->recs.vals = new_buffer(&j, 32 * nrec, r, "recs.vals", r);
		new_stream(&j, &b->rows, &j.rows, r);
		new_stream(&j, &b->recs, &j.recs, r);
		b->table = new_buffer(&j, 8 * SLOT_WORDS * ((size_t)j.capacity + 1), r, "table", r);
		b->status = new_buffer(&j, 4, r, "status", r);
		b->digest = new_buffer(&j, 24, r, "digest", r);
	}

	/* the rows, made on their rank (untimed) */
	for (int r = 0; r < P; r++)
		submit(&j, j.k.gen,
		       (odx_arg[]){ODX_BUF(j.r[r].rows.keys, ODX_W),
				   ODX_BUF(j.r[r].rows.vals, ODX_W),
				   ODX_I32(j.n), ODX_I32(r)},
		       4, 1, 1, "gen");
	check(j.ctx, odx_wait_all_ranks(j.ctx, -1), "generating the rows");

	double *times = xcalloc(reps, sizeof(*times));
	sc_digest total = {0, 0, 0};
	for (int rep = 0; rep < reps; rep++) {
		for (int r = 0; r < P; r++)
			reset_table(&j, r);
		check(j.ctx, odx_wait_all_ranks(j.ctx, -1), "resetting the tables");

		double t0 = now_s();
		groupby(&j);
		check(j.ctx, odx_wait_all_ranks(j.ctx, -1), "the group-by");
		times[rep] = now_s() - t0;

		/* a full table would have counted the rows it missed (never with this capacity) */
		for (int r = 0; r < P; r++) {
			uint32_t missed;

			check(j.ctx, odx_buffer_read(j.r[r].status, 0, &missed, 4, -1), "status");
			if (missed) {
				fprintf(stderr, "%s: rank %d's table (%d slots) missed %u rows\n",
					PROGRAM, r, j.capacity, missed);
				return 1;
			}
		}
		sc_digest all = {0, 0, 0};
		for (int r = 0; r < P; r++) {
			uint64_t d[3];

			submit(&j, j.k.digest,
			       (odx_arg[]){ODX_BUF(j.r[r].table, ODX_R),
					   ODX_BUF(j.r[r].digest, ODX_W), ODX_I32(j.capacity)},
			       3, 1, 1, "digest");
			check(j.ctx, odx_buffer_read(j.r[r].digest, 0, d, sizeof(d), -1), "digest");
			sc_digest_merge(&all, &(sc_digest){d[0], d[1], d[2]});
		}
		if (rep == 0) {
			total = all;
		} else if (memcmp(&all, &total, sizeof(all)) != 0) {
			fprintf(stderr, "%s: repetition %d disagrees with the first\n", PROGRAM, rep);
			return 1;
		}
	}

	int failed = 0;
	const char *verdict = "not checked";
	if (total.rows != rows * P) {
		fprintf(stderr, "%s: %llu rows in the tables, %llu generated\n", PROGRAM,
			(unsigned long long)total.rows, (unsigned long long)(rows * P));
		failed = 1;
		verdict = "FAILED";
	}
	if (verify && !failed) {
		sc_table ref;

		reference(&ref, (uint32_t)P, j.n, sc_capacity(nkeys, rows * P, 1));
		sc_digest want = sc_table_digest(&ref);
		uint64_t bad = compare(&j, &ref);

		if (bad || memcmp(&want, &total, sizeof(want)) != 0) {
			fprintf(stderr, "%s: %llu keys differ from the sequential reference\n",
				PROGRAM, (unsigned long long)bad);
			failed = 1;
			verdict = "FAILED";
		} else {
			verdict = "ok";
		}
		sc_table_free(&ref);
	}

	qsort(times, reps, sizeof(*times), cmp_double);
	double t = times[reps / 2], rate = (double)rows * P / t;
	printf("%s: %d ranks x %llu rows, %llu keys, %s: %.4f s (median of %d), %.1f Mrows/s, "
	       "%llu groups, checksum %016llx\n", PROGRAM, P, (unsigned long long)rows,
	       (unsigned long long)nkeys, zipf_s > 0 ? "zipf" : "uniform", t, reps, rate / 1e6,
	       (unsigned long long)total.keys, (unsigned long long)total.checksum);
	printf("verify  %s\n", verdict);
	if (me == 0)
		printf("{\"bench\":\"shuffle\",\"side\":\"odx\",\"ranks\":%d,\"rows_per_rank\":%llu,"
		       "\"keys\":%llu,\"zipf_s\":%g,\"seed\":%llu,\"seconds\":%.6f,"
		       "\"rows_per_s\":%.0f,\"groups\":%llu,\"rows\":%llu,"
		       "\"checksum\":\"%016llx\",\"verified\":%s}\n", P,
		       (unsigned long long)rows, (unsigned long long)nkeys, zipf_s,
		       (unsigned long long)seed, t, rate, (unsigned long long)total.keys,
		       (unsigned long long)total.rows, (unsigned long long)total.checksum,
		       verify && !failed ? "true" : "false");

	free(times);
	free(j.r);
	sc_keys_free(&key_dist);
	check(j.ctx, odx_close(j.ctx), "odx_close");
	return failed;
}
