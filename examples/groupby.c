/* SPDX-License-Identifier: Apache-2.0 */
/*
 * groupby.c - a distributed hash group-by with skewed keys: per distinct u32 key, the count of its
 * rows and the sum of their f32 values in f64, over the rows of every rank.
 *
 * Every rank holds ROWS rows made by a seeded generator (bench/shuffle_common.h: K distinct keys,
 * uniform or Zipf-distributed, small integer values). Per rank r, on rank r (the owner of the
 * buffers its tasks write), with the standard kernels:
 *
 *   gen            keys[r], vals[r]              this program's host kernel (the generator)
 *   hash_combine   hot keys pre-aggregated into records, the other rows keep their partition
 *   partition_count / partition_rank / scatter_rows
 *                  rows (and records) of partition d into part d of the shuffle's sources
 *   exchange       part d of every rank's sources to rank d
 *   hash_groupby   rows, then records, into rank d's table (count, f64 sum, min, max)
 *
 * Keys hash to ranks with fmix32(key) % P, so every key ends on one rank and the tables of the
 * ranks are disjoint. The result is checked EXACTLY against a sequential reference computed here
 * from the same generator (a plain hash table over every rank's rows, shuffle_common.h): same
 * keys, same counts, same f64 sums bit for bit. The sums can be compared bit for bit because the
 * values are small integers stored as f32: every partial sum is an integer below 2^53, exact in
 * f64 whatever the order in which rows and records reach the table.
 *
 *	usage: groupby [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] [-s SEED] [-g GROUPS] [-r REPS]
 *		       [--no-check] [--slack F]
 *	       scripts/odx-run -n 4 build/examples/groupby -n 1000000 -z 1.1
 *
 * -z 0 draws keys uniformly (the default), -z 1.1 from Zipf 1.1. -g is the work-groups of the
 * combiner and of the partition steps' scatter (about the threads of a rank). --no-check skips
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
/* an offset past any part: partition_rank's ranks from it stay >= m, scatter_rows skips them */
#define ELSEWHERE 0x80000000u

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

/* digest(table R u64[(capacity + 1) * 5], out W u64[3], capacity i32): the digest of one rank's
 * table (sc_digest: keys, rows, checksum), so that a large result need not cross ranks to be
 * compared with the MPI program's. */
static int digest_host(const odx_host_launch *l)
{
	const uint64_t *w = l->buffers[0];
	uint64_t *out = l->buffers[1];
	int32_t cap = *(const int32_t *)l->scalars[2];
	sc_digest d = {0, 0, 0};

	for (int64_t s = 0; s <= cap; s++, w += 5) {
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

/* One rank's buffers, all owned by that rank. */
typedef struct rank_bufs {
	odx_buffer *keys, *vals, *pids, *dest;           /* its rows: u32 / f32 / u32 / u32 [n] */
	odx_buffer *rkeys, *rvals, *rpids, *rdest;       /* combiner records [G * 256] (rvals x 8) */
	odx_buffer *cnt, *rcnt;                          /* rows / records per partition, u32[P] */
	odx_buffer *table, *status, *digest;             /* the group-by table of its keys */
	odx_buffer **xkeys, **xvals, **xrkeys, **xrvals; /* exchange: what goes to rank d */
} rank_bufs;

typedef struct job {
	odx_context *ctx;
	kernels k;
	int size;
	uint32_t n, groups, nrec;  /* rows per rank, combiner groups, records per rank */
	int32_t capacity;          /* table slots (a power of two) */
	rank_bufs *r;
	odx_buffer **only;         /* only[d]: u32[P], 0 at d, ELSEWHERE elsewhere */
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

static void submit(job *j, odx_kernel *k, const odx_arg *args, int nargs, uint32_t grid,
		   uint32_t block, const char *tag)
{
	odx_task_opts o = {.grid = {grid}, .block = {block}, .tag = tag};

	check(j->ctx, odx_submit(j->ctx, k, args, nargs, &o, NULL), tag);
}

/* Zeroes rank r's table and status: a table accumulates over launches (docs/kernels.md). */
static void reset_table(job *j, int r)
{
	rank_bufs *b = &j->r[r];
	int32_t words = (j->capacity + 1) * 10;

	submit(j, j->k.fill, (odx_arg[]){ODX_BUF(b->table, ODX_W), ODX_I32(0), ODX_I32(words)}, 3,
	       64, 256, "reset table");
	submit(j, j->k.fill, (odx_arg[]){ODX_BUF(b->status, ODX_W), ODX_I32(0), ODX_I32(1)}, 3, 1,
	       1, "reset status");
}

/* Rank s's side before the exchange: combine, then count each partition's rows and records. */
static void partition_rows(job *j, int s)
{
	rank_bufs *b = &j->r[s];
	int P = j->size;

	submit(j, j->k.combine,
	       (odx_arg[]){ODX_BUF(b->keys, ODX_R), ODX_BUF(b->vals, ODX_R),
			   ODX_BUF(b->pids, ODX_W), ODX_BUF(b->rkeys, ODX_W),
			   ODX_BUF(b->rvals, ODX_W), ODX_BUF(b->rpids, ODX_W), ODX_I32(j->n),
			   ODX_I32(P), ODX_I32(1), ODX_I32(0)},
	       10, j->groups, 1, "combine");
	/* one group: counts[p] is partition p's total, what the exchange needs */
	submit(j, j->k.count,
	       (odx_arg[]){ODX_BUF(b->pids, ODX_R), ODX_BUF(b->cnt, ODX_W), ODX_I32(j->n),
			   ODX_I32(P)},
	       4, 1, 256, "count rows");
	submit(j, j->k.count,
	       (odx_arg[]){ODX_BUF(b->rpids, ODX_R), ODX_BUF(b->rcnt, ODX_W), ODX_I32(j->nrec),
			   ODX_I32(P)},
	       4, 1, 256, "count records");
}

/* Scatters the rows of rank s's partition d (ids `pids`, ranks `dest`) of column `col`
 * (width words per row) into `out`, which holds `m` rows. */
static void scatter_part(job *j, odx_buffer *pids, odx_buffer *dest, odx_buffer *only,
			 odx_buffer *col, odx_buffer *out, uint32_t nrows, int width, uint32_t m,
			 bool rank_first)
{
	if (rank_first)
		submit(j, j->k.rank,
		       (odx_arg[]){ODX_BUF(pids, ODX_R), ODX_BUF(only, ODX_R),
				   ODX_BUF(dest, ODX_W), ODX_I32(nrows), ODX_I32(j->size)},
		       5, 1, 64, "rank");
	submit(j, j->k.scatter,
	       (odx_arg[]){ODX_BUF(col, ODX_R), ODX_BUF(dest, ODX_R), ODX_BUF(out, ODX_W),
			   ODX_I32(nrows), ODX_I32(width), ODX_I32(m)},
	       6, j->groups, 256, "scatter");
}

/*
 * The exchange, with what ODX has without run-time lengths: the counts come back to the host (a
 * collective read in the middle of the pipeline), then every (source, destination) pair gets
 * buffers of exactly its size, filled by one rank + scatter pass per destination (partition_rank
 * with offset 0 for partition d and ELSEWHERE for the others drops every other row), and the
 * destination aggregates each source's rows straight from them.
 */
static void exchange_and_aggregate(job *j, uint32_t *counts, uint32_t *rcounts)
{
	int P = j->size;

	for (int s = 0; s < P; s++) {
		check(j->ctx, odx_buffer_read(j->r[s].cnt, 0, counts + s * P, 4 * P, -1),
		      "read the counts");
		check(j->ctx, odx_buffer_read(j->r[s].rcnt, 0, rcounts + s * P, 4 * P, -1),
		      "read the record counts");
	}
	for (int s = 0; s < P; s++) {
		rank_bufs *b = &j->r[s];

		for (int d = 0; d < P; d++) {
			uint32_t m = counts[s * P + d], mr = rcounts[s * P + d];

			if (!b->xkeys[d]) {
				b->xkeys[d] = new_buffer(j, 4 * (size_t)m, s, "xkeys", s);
				b->xvals[d] = new_buffer(j, 4 * (size_t)m, s, "xvals", s);
				b->xrkeys[d] = new_buffer(j, 4 * (size_t)mr, s, "xrkeys", s);
				b->xrvals[d] = new_buffer(j, 32 * (size_t)mr, s, "xrvals", s);
			}
			if (m) {
				scatter_part(j, b->pids, b->dest, j->only[d], b->keys, b->xkeys[d],
					     j->n, 1, m, true);
				scatter_part(j, b->pids, b->dest, j->only[d], b->vals, b->xvals[d],
					     j->n, 1, m, false);
			}
			if (mr) {
				scatter_part(j, b->rpids, b->rdest, j->only[d], b->rkeys,
					     b->xrkeys[d], j->nrec, 1, mr, true);
				scatter_part(j, b->rpids, b->rdest, j->only[d], b->rvals,
					     b->xrvals[d], j->nrec, 8, mr, false);
			}
		}
	}
	for (int d = 0; d < P; d++) {
		rank_bufs *b = &j->r[d];

		for (int s = 0; s < P; s++) {
			rank_bufs *src = &j->r[s];
			uint32_t m = counts[s * P + d], mr = rcounts[s * P + d];

			if (m)
				submit(j, j->k.groupby,
				       (odx_arg[]){ODX_BUF(src->xkeys[d], ODX_R),
						   ODX_BUF(src->xvals[d], ODX_R),
						   ODX_BUF(b->table, ODX_RW),
						   ODX_BUF(b->status, ODX_RW), ODX_I32(m),
						   ODX_I32(j->capacity), ODX_I32(1), ODX_I32(0)},
				       8, j->groups, 256, "groupby rows");
			if (mr)
				submit(j, j->k.groupby,
				       (odx_arg[]){ODX_BUF(src->xrkeys[d], ODX_R),
						   ODX_BUF(src->xrvals[d], ODX_R),
						   ODX_BUF(b->table, ODX_RW),
						   ODX_BUF(b->status, ODX_RW), ODX_I32(mr),
						   ODX_I32(j->capacity), ODX_I32(1), ODX_I32(3)},
				       8, j->groups, 256, "groupby records");
		}
	}
}

/* Frees the per-pair buffers: their sizes change with every repetition's counts. */
static void drop_exchange(job *j)
{
	for (int s = 0; s < j->size; s++) {
		rank_bufs *b = &j->r[s];

		for (int d = 0; d < j->size; d++) {
			odx_buffer **all[] = {&b->xkeys[d], &b->xvals[d], &b->xrkeys[d],
					      &b->xrvals[d]};

			for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
				if (*all[i])
					odx_buffer_destroy(*all[i]);
				*all[i] = NULL;
			}
		}
	}
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
	size_t words = ((size_t)j->capacity + 1) * 5;
	uint64_t *w = xcalloc(words, sizeof(*w)), bad = 0, keys = 0;

	for (int r = 0; r < j->size; r++) {
		check(j->ctx, odx_buffer_read(j->r[r].table, 0, w, words * 8, -1), "read a table");
		for (int64_t s = 0; s <= j->capacity; s++) {
			const uint64_t *slot = w + 5 * s;
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
	int reps = 1, groups = 4, verify = 1, opt;
	static const struct option longopts[] = {
		{"no-check", no_argument, NULL, 'C'},
		{"check", no_argument, NULL, 'c'},
		{0, 0, 0, 0},
	};

	while ((opt = getopt_long(argc, argv, "n:k:z:s:g:r:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n': rows = strtoull(optarg, NULL, 0); break;
		case 'k': nkeys = strtoull(optarg, NULL, 0); break;
		case 'z': zipf_s = strtod(optarg, NULL); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'g': groups = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'C': verify = 0; break;
		case 'c': verify = 1; break;
		default:
			fprintf(stderr, "usage: %s [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] [-s SEED] "
					"[-g GROUPS] [-r REPS] [--no-check]\n", PROGRAM);
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

	job j = {.n = (uint32_t)rows, .groups = (uint32_t)groups};
	check(NULL, odx_open(&j.ctx, NULL), "odx_open");
	j.size = odx_size(j.ctx);
	int me = odx_rank(j.ctx), P = j.size;
	j.nrec = j.groups * COMBINE_SLOTS;
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

	/* every rank creates every rank's buffers (the replicated flow); tasks run on the owner */
	j.r = xcalloc(P, sizeof(*j.r));
	j.only = xcalloc(P, sizeof(*j.only));
	uint32_t *only = xcalloc(P, sizeof(*only));
	for (int r = 0; r < P; r++) {
		rank_bufs *b = &j.r[r];
		size_t n = j.n, nr = j.nrec;

		b->keys = new_buffer(&j, 4 * n, r, "keys", r);
		b->vals = new_buffer(&j, 4 * n, r, "vals", r);
		b->pids = new_buffer(&j, 4 * n, r, "pids", r);
		b->dest = new_buffer(&j, 4 * n, r, "dest", r);
		b->rkeys = new_buffer(&j, 4 * nr, r, "rkeys", r);
		b->rvals = new_buffer(&j, 32 * nr, r, "rvals", r);
		b->rpids = new_buffer(&j, 4 * nr, r, "rpids", r);
		b->rdest = new_buffer(&j, 4 * nr, r, "rdest", r);
		b->cnt = new_buffer(&j, 4 * (size_t)P, r, "cnt", r);
		b->rcnt = new_buffer(&j, 4 * (size_t)P, r, "rcnt", r);
		b->table = new_buffer(&j, 40 * ((size_t)j.capacity + 1), r, "table", r);
		b->status = new_buffer(&j, 4, r, "status", r);
		b->digest = new_buffer(&j, 24, r, "digest", r);
		b->xkeys = xcalloc(P, sizeof(odx_buffer *));
		b->xvals = xcalloc(P, sizeof(odx_buffer *));
		b->xrkeys = xcalloc(P, sizeof(odx_buffer *));
		b->xrvals = xcalloc(P, sizeof(odx_buffer *));
		for (int p = 0; p < P; p++)
			only[p] = p == r ? 0 : ELSEWHERE;
		/* written by every rank with the same bytes: valid everywhere */
		check(j.ctx, odx_buffer_create(j.ctx, 4 * (size_t)P, 0, &j.only[r]), "create");
		check(j.ctx, odx_buffer_write(j.only[r], 0, only, 4 * (size_t)P, -1), "write");
	}
	free(only);

	/* the rows, made on their rank (untimed) */
	for (int r = 0; r < P; r++)
		submit(&j, j.k.gen,
		       (odx_arg[]){ODX_BUF(j.r[r].keys, ODX_W), ODX_BUF(j.r[r].vals, ODX_W),
				   ODX_I32(j.n), ODX_I32(r)},
		       4, 1, 1, "gen");
	check(j.ctx, odx_wait_all_ranks(j.ctx, -1), "generating the rows");

	uint32_t *counts = xcalloc((size_t)P * P, sizeof(*counts));
	uint32_t *rcounts = xcalloc((size_t)P * P, sizeof(*rcounts));
	double *times = xcalloc(reps, sizeof(*times));
	sc_digest total = {0, 0, 0};
	for (int rep = 0; rep < reps; rep++) {
		for (int r = 0; r < P; r++)
			reset_table(&j, r);
		check(j.ctx, odx_wait_all_ranks(j.ctx, -1), "resetting the tables");

		double t0 = now_s();
		for (int s = 0; s < P; s++)
			partition_rows(&j, s);
		exchange_and_aggregate(&j, counts, rcounts);
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
		if (rep + 1 < reps)
			drop_exchange(&j);
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

	free(counts);
	free(rcounts);
	free(times);
	for (int r = 0; r < P; r++) {
		free(j.r[r].xkeys);
		free(j.r[r].xvals);
		free(j.r[r].xrkeys);
		free(j.r[r].xrvals);
	}
	free(j.r);
	free(j.only);
	sc_keys_free(&key_dist);
	check(j.ctx, odx_close(j.ctx), "odx_close");
	return failed;
}
