/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_shuffle.c - odx_shuffle (docs/distributed.md, "Shuffle"), run as every rank of a job
 * started by scripts/odx-run (1, 2 or 4 ranks, tcp or shm).
 *
 * Each round, rank s's src[s] gets n parts (odx_buffer_set_parts) that a host task on rank s
 * fills with rows of u32 and sizes at run time (set_length per part); the shuffle moves part d
 * of every src to dst[d] on rank d; a consumer task on rank d sees dst's length (ODX_LEN, and
 * buffer_lengths) and the counts, and hashes the rows it was given. Every rank then reads every
 * dst, counts and consumer output (collective reads) and compares them byte for byte with the
 * same shuffle done sequentially here. Rounds: random sizes (small and up to 1.5 MiB, so parts
 * go in several chunks), parts mostly empty, every part empty, one part holding everything,
 * large own parts (copied on the worker), each src written on another rank (it moves to its
 * rank first, its part lengths with it); dst[0] half too small (rank 0's shuffle fails with
 * ODX_ENOSPC naming the bytes, the parts that do not fit are drained, the other dsts are right,
 * every rank's odx_wait_all_ranks returns it, nobody hangs); a producer that fails on one rank (every shuffle ends ODX_ECANCELED naming it); and
 * after each failure a good round again. Every wait has a deadline.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "odx/odx.h"

#define TIMEOUT_MS 120000

static int rank_ = -1;

#include "dist_check.h"

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "rank %d: ", rank_);                                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

enum {
	MODE_RANDOM = 0,
	MODE_SPARSE,
	MODE_EMPTY,
	MODE_ONE_PART,
	MODE_BIG_OWN
};

static uint32_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return (uint32_t)(x ^ (x >> 32));
}

/* Rows rank s puts in part d (at most caprows). */
static uint64_t rows_of(int mode, uint64_t seed, int s, int d, uint64_t caprows)
{
	uint32_t h = mix(seed * 1000003u + (uint64_t)s * 7919u + (uint64_t)d * 104729u);

	switch (mode) {
	case MODE_SPARSE:
		return (s + d) % 3 == 0 ? h % (caprows + 1) : 0;
	case MODE_EMPTY:
		return 0;
	case MODE_ONE_PART:
		return d == 0 ? caprows : 0;
	case MODE_BIG_OWN:
		return s == d ? caprows : h % 64;
	default:
		return h % 5 == 0 ? 0 : h % (caprows + 1);
	}
}

static uint32_t row_value(uint64_t seed, int s, int d, uint64_t i)
{
	return mix((seed << 40) ^ ((uint64_t)s << 32) ^ ((uint64_t)d << 24) ^ i);
}

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

/* gen(W src, I64 nparts, I64 caprows, I64 seed, I64 mode, I64 s, I64 fail): fills each part d
 * with its rows and sets its length; fails on purpose when `fail`. */
static int gen_fn(const odx_host_launch *l)
{
	uint32_t *x = l->buffers[0];
	int64_t n = i64_arg(l, 1), cap = i64_arg(l, 2), seed = i64_arg(l, 3), mode = i64_arg(l, 4);
	int s = (int)i64_arg(l, 5);

	if (i64_arg(l, 6))
		return 5;
	/* Rank 0's producer late: the others' sides start first and learn rank 0's size from a
	 * callback, where a large own part is handed to the worker (either way the bytes are
	 * checked; only which path copies it depends on the timing). */
	if (mode == MODE_BIG_OWN && s == 0)
		usleep(100000);
	for (int d = 0; d < n; d++) {
		uint64_t rows = rows_of((int)mode, (uint64_t)seed, s, d, (uint64_t)cap);

		for (uint64_t i = 0; i < rows; i++)
			x[(uint64_t)d * (uint64_t)cap + i] = row_value((uint64_t)seed, s, d, i);
		l->set_length(l, 0, d, rows * sizeof(uint32_t));
	}
	return 0;
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* consume(R dst, R counts, I64 n (ODX_LEN(0, 4)), W out): out = {n, dst's length in bytes as
 * the task saw it, hash of the n rows, sum of the counts}. */
static int consume_fn(const odx_host_launch *l)
{
	const uint32_t *x = l->buffers[0];
	const uint64_t *counts = l->buffers[1];
	uint64_t *out = l->buffers[2];
	int64_t n = i64_arg(l, 2);
	uint64_t sum = 0;

	for (size_t i = 0; i < l->buffer_sizes[1] / sizeof(uint64_t); i++)
		sum += counts[i];
	out[0] = (uint64_t)n;
	out[1] = l->buffer_lengths[0];
	out[2] = fnv(x, (size_t)n * sizeof(uint32_t));
	out[3] = sum;
	return 0;
}

static odx_kernel *make_kernel(odx_context *ctx, const char *name, const odx_param *p, int n,
			       odx_host_fn fn)
{
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST,
				.format = ODX_FORMAT_HOST_FN,
				.host_fn = fn};
	odx_kernel *k = NULL;

	CHECK(ctx, odx_kernel_create(ctx, name, p, n, &v, 1, &k));
	return k;
}

typedef struct kernels {
	odx_kernel *gen, *consume;
} kernels;

typedef struct round_spec {
	int mode;
	uint64_t seed, caprows;
	int small_rank; /* dst[small_rank] one row too small (-1: none) */
	int fail_rank;	/* the producer fails there (-1: none) */
	int shift;	/* src[r] is owned (and written) by rank r + shift: it moves to r first */
} round_spec;

/* One shuffle and its checks; returns what odx_wait_all_ranks returned. */
static int run_round(odx_context *ctx, kernels *k, const round_spec *rs)
{
	int n = odx_size(ctx), me = odx_rank(ctx);
	uint64_t cap = rs->caprows;
	odx_buffer **src = calloc((size_t)n, sizeof(*src)), **dst = calloc((size_t)n, sizeof(*dst));
	odx_buffer **counts = calloc((size_t)n, sizeof(*counts));
	odx_buffer **out = calloc((size_t)n, sizeof(*out));
	uint64_t *want_bytes = calloc((size_t)n, sizeof(uint64_t));
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = sizeof(uint32_t)};
	char tag[64];
	odx_event *ev = NULL;
	int rc, wrc, want_ev;

	for (int d = 0; d < n; d++)
		for (int s = 0; s < n; s++)
			want_bytes[d] += rows_of(rs->mode, rs->seed, s, d, cap) * sizeof(uint32_t);
	for (int r = 0; r < n; r++) {
		size_t dcap = (size_t)n * cap * sizeof(uint32_t);

		if (r == rs->small_rank) {
			if (want_bytes[r] < 2 * sizeof(uint32_t))
				FAIL("seed %llu gives dst[%d] too few rows: pick another",
				     (unsigned long long)rs->seed, r);
			dcap = want_bytes[r] / 2;
		}
		CHECK(ctx, odx_buffer_create(ctx, (size_t)n * cap * sizeof(uint32_t), 0, &src[r]));
		CHECK(ctx, odx_buffer_create(ctx, dcap ? dcap : 1, 0, &dst[r]));
		CHECK(ctx, odx_buffer_create(ctx, (size_t)n * sizeof(uint64_t), 0, &counts[r]));
		CHECK(ctx, odx_buffer_create(ctx, 4 * sizeof(uint64_t), 0, &out[r]));
		CHECK(ctx, odx_buffer_set_owner(src[r], (r + rs->shift) % n));
		CHECK(ctx, odx_buffer_set_owner(dst[r], r));
		CHECK(ctx, odx_buffer_set_owner(counts[r], r));
		CHECK(ctx, odx_buffer_set_owner(out[r], r));
		CHECK(ctx, odx_buffer_set_parts(src[r], &blocks, n));
		snprintf(tag, sizeof(tag), "dst %d", r);
		CHECK(ctx, odx_buffer_set_label(dst[r], tag));
	}
	for (int s = 0; s < n; s++) {
		/* on src[s]'s owner (rank s, or another one with a shift) */
		odx_arg a[] = {ODX_BUF(src[s], ODX_W),	   ODX_I64(n),	      ODX_I64((int64_t)cap),
			       ODX_I64((int64_t)rs->seed), ODX_I64(rs->mode), ODX_I64(s),
			       ODX_I64(s == rs->fail_rank)};
		odx_task_opts o = {.tag = "gen"};

		CHECK(ctx, odx_submit(ctx, k->gen, a, 7, &o, NULL));
	}
	odx_task_opts so = {.tag = "shuffle"};
	CHECK(ctx, odx_shuffle(ctx, src, dst, counts, &so, &ev));
	if (!ev)
		FAIL("odx_shuffle gave no event");
	for (int d = 0; d < n; d++) {
		odx_arg a[] = {ODX_BUF(dst[d], ODX_R), ODX_BUF(counts[d], ODX_R),
			       ODX_LEN(0, sizeof(uint32_t)), ODX_BUF(out[d], ODX_W)};
		odx_task_opts o = {.tag = "consume"};

		CHECK(ctx, odx_submit(ctx, k->consume, a, 4, &o, NULL));
	}
	rc = odx_event_wait(ev, TIMEOUT_MS);
	want_ev = rs->fail_rank >= 0 ? ODX_ECANCELED : me == rs->small_rank ? ODX_ENOSPC : 0;
	if (rc != want_ev)
		FAIL("round mode %d seed %llu: the shuffle's event gave %s, %s expected (%s)",
		     rs->mode, (unsigned long long)rs->seed, odx_err_name(rc),
		     odx_err_name(want_ev), odx_event_message(ev));
	if (rc == ODX_ENOSPC) {
		char need[64];

		snprintf(need, sizeof(need), "take %llu bytes", (unsigned long long)want_bytes[me]);
		if (!strstr(odx_event_message(ev), need))
			FAIL("the ODX_ENOSPC message does not say '%s': %s", need,
			     odx_event_message(ev));
	}
	if (rc == ODX_ECANCELED) {
		char who[64];

		snprintf(who, sizeof(who), "on rank %d", rs->fail_rank);
		if ((n > 1 && !strstr(odx_event_message(ev), who)) ||
		    !strstr(odx_event_message(ev), "'gen'"))
			FAIL("the canceled shuffle does not name the failed producer %s: %s", who,
			     odx_event_message(ev));
	}
	odx_event_release(ev);
	wrc = odx_wait_all_ranks(ctx, TIMEOUT_MS);

	/* Every dst that was not too small, unless a producer failed. */
	for (int d = 0; d < n && rs->fail_rank < 0; d++) {
		size_t len = 0, nb = want_bytes[d], at = 0;
		uint32_t *got, *ref;
		uint64_t *cnt, o[4];

		if (d == rs->small_rank)
			continue;
		got = malloc(nb + 4);
		ref = malloc(nb + 4);
		cnt = malloc((size_t)n * sizeof(uint64_t));
		for (int s = 0; s < n; s++) {
			uint64_t rows = rows_of(rs->mode, rs->seed, s, d, cap);

			for (uint64_t i = 0; i < rows; i++)
				ref[at++] = row_value(rs->seed, s, d, i);
		}
		CHECK(ctx, odx_buffer_length(dst[d], &len, TIMEOUT_MS));
		if (len != nb)
			FAIL("dst[%d]'s length is %zu, %zu expected", d, len, nb);
		CHECK(ctx, odx_buffer_read(dst[d], 0, got, nb, TIMEOUT_MS));
		if (memcmp(got, ref, nb))
			FAIL("dst[%d]'s bytes differ from the sequential shuffle", d);
		CHECK(ctx,
		      odx_buffer_read(counts[d], 0, cnt, (size_t)n * sizeof(uint64_t), TIMEOUT_MS));
		for (int s = 0; s < n; s++)
			if (cnt[s] != rows_of(rs->mode, rs->seed, s, d, cap) * sizeof(uint32_t))
				FAIL("counts[%d][%d] = %llu, %llu expected", d, s,
				     (unsigned long long)cnt[s],
				     (unsigned long long)(rows_of(rs->mode, rs->seed, s, d, cap) *
							  sizeof(uint32_t)));
		CHECK(ctx, odx_buffer_read(out[d], 0, o, sizeof(o), TIMEOUT_MS));
		if (o[0] != nb / sizeof(uint32_t) || o[1] != nb || o[2] != fnv(ref, nb) ||
		    o[3] != nb)
			FAIL("the consumer of dst[%d] saw n %llu, length %llu, counts summing to "
			     "%llu (%zu bytes expected), or other rows",
			     d, (unsigned long long)o[0], (unsigned long long)o[1],
			     (unsigned long long)o[3], nb);
		free(got);
		free(ref);
		free(cnt);
	}
	for (int r = 0; r < n; r++) {
		CHECK(ctx, odx_buffer_destroy(src[r]));
		CHECK(ctx, odx_buffer_destroy(dst[r]));
		CHECK(ctx, odx_buffer_destroy(counts[r]));
		CHECK(ctx, odx_buffer_destroy(out[r]));
	}
	free(src);
	free(dst);
	free(counts);
	free(out);
	free(want_bytes);
	return wrc;
}

/*
 * DIST_SHUFFLE_KILL=1: the last rank vanishes (exits without closing) once its src is written,
 * before its shuffle call. Every other rank's shuffle must fail with ODX_EPEER within the peer
 * timeout (normally naming that rank), and so must odx_wait_all_ranks: no rank waits for its
 * parts forever.
 */
static int killed_rank(odx_context *ctx, kernels *k)
{
	int n = odx_size(ctx), last = n - 1, rc;
	odx_buffer **src = calloc((size_t)n, sizeof(*src)), **dst = calloc((size_t)n, sizeof(*dst));
	odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = sizeof(uint32_t)};
	odx_event *ev = NULL;
	char who[32];

	for (int r = 0; r < n; r++) {
		CHECK(ctx, odx_buffer_create(ctx, (size_t)n * 1000 * sizeof(uint32_t), 0, &src[r]));
		CHECK(ctx, odx_buffer_create(ctx, (size_t)n * 1000 * sizeof(uint32_t), 0, &dst[r]));
		CHECK(ctx, odx_buffer_set_owner(src[r], r));
		CHECK(ctx, odx_buffer_set_owner(dst[r], r));
		CHECK(ctx, odx_buffer_set_parts(src[r], &blocks, n));
		odx_arg a[] = {ODX_BUF(src[r], ODX_W), ODX_I64(n), ODX_I64(1000), ODX_I64(21),
			       ODX_I64(MODE_RANDOM),   ODX_I64(r), ODX_I64(0)};
		CHECK(ctx, odx_submit(ctx, k->gen, a, 7, NULL, NULL));
	}
	if (rank_ == last) {
		CHECK(ctx, odx_wait_all(ctx, TIMEOUT_MS));
		printf("rank %d: leaving without a word\n", rank_);
		fflush(stdout);
		_exit(0);
	}
	CHECK(ctx, odx_shuffle(ctx, src, dst, NULL, NULL, &ev));
	rc = odx_event_wait(ev, TIMEOUT_MS);
	snprintf(who, sizeof(who), "rank %d", last);
	printf("rank %d: the shuffle: %s: %s\n", rank_, odx_err_name(rc), odx_event_message(ev));
	if (rc != ODX_EPEER)
		FAIL("the shuffle did not fail with ODX_EPEER");
	/* Under heavy load the survivors sometimes stop hearing each other too and blame each
	 * other (a fabric matter, docs/distributed.md "Shuffle"): said, not failed. */
	if (!strstr(odx_event_message(ev), who))
		printf("rank %d: the shuffle's failure does not name %s\n", rank_, who);
	odx_event_release(ev);
	rc = odx_wait_all_ranks(ctx, TIMEOUT_MS);
	if (rc != ODX_EPEER)
		FAIL("odx_wait_all_ranks: %s (%s): the vanished rank went unnoticed",
		     odx_err_name(rc), odx_last_error(ctx));
	odx_close(ctx);
	free(src);
	free(dst);
	return 0;
}

int main(void)
{
	odx_param gen_p[] = {{ODX_ARG_BUFFER, ODX_W, "src"}, {ODX_ARG_I64, 0, "nparts"},
			     {ODX_ARG_I64, 0, "caprows"},    {ODX_ARG_I64, 0, "seed"},
			     {ODX_ARG_I64, 0, "mode"},	     {ODX_ARG_I64, 0, "s"},
			     {ODX_ARG_I64, 0, "fail"}};
	odx_param con_p[] = {{ODX_ARG_BUFFER, ODX_R, "dst"},
			     {ODX_ARG_BUFFER, ODX_R, "counts"},
			     {ODX_ARG_I64, 0, "n"},
			     {ODX_ARG_BUFFER, ODX_W, "out"}};
	odx_context *ctx;
	kernels k;
	int n, rc;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	n = odx_size(ctx);
	k.gen = make_kernel(ctx, "gen", gen_p, 7, gen_fn);
	k.consume = make_kernel(ctx, "consume", con_p, 4, consume_fn);
	if (getenv("DIST_SHUFFLE_KILL"))
		return killed_rank(ctx, &k);

	static const round_spec good[] = {
		{MODE_RANDOM, 1, 1000, -1, -1, 0},    {MODE_SPARSE, 2, 700, -1, -1, 0},
		{MODE_EMPTY, 3, 100, -1, -1, 0},      {MODE_ONE_PART, 4, 5000, -1, -1, 0},
		{MODE_RANDOM, 5, 400000, -1, -1, 0},  {MODE_RANDOM, 6, 3, -1, -1, 0},
		{MODE_BIG_OWN, 7, 100000, -1, -1, 0}, {MODE_RANDOM, 8, 5000, -1, -1, 1},
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		rc = run_round(ctx, &k, &good[i]);
		if (rc)
			FAIL("round %zu: odx_wait_all_ranks: %s: %s", i, odx_err_name(rc),
			     odx_last_error(ctx));
	}
	if (getenv("DIST_SHUFFLE_TRACE")) {
		/* dist_shuffle_trace.sh: what the trace and ODX_STATS must show for those rounds */
		unsigned long long sent = 0, recvd = 0, copied = 0;

		for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
			for (int p = 0; p < n; p++) {
				const round_spec *g = &good[i];
				unsigned long long out =
					rows_of(g->mode, g->seed, rank_, p, g->caprows) * 4;
				unsigned long long in =
					rows_of(g->mode, g->seed, p, rank_, g->caprows) * 4;

				if (p == rank_) {
					copied += out;
					continue;
				}
				if (out)
					printf("EXPECT send %d %llu\n", p, out);
				if (in)
					printf("EXPECT recv %d %llu\n", p, in);
				sent += out;
				recvd += in;
			}
		printf("EXPECT stats %zu %llu %llu %llu\n", sizeof(good) / sizeof(good[0]), sent,
		       recvd, copied);
		fflush(stdout);
		CHECK(ctx, odx_close(ctx));
		return 0;
	}
	/* dst[0] half as large as its parts: the own part (source 0) is placed first, so every
	 * later part that does not fit comes from another rank and is drained. */
	round_spec small = {MODE_RANDOM, 11, 2000, 0, -1, 0};
	rc = run_round(ctx, &k, &small);
	if (rc != ODX_ENOSPC || !strstr(odx_last_error(ctx), "holds"))
		FAIL("a dst too small: odx_wait_all_ranks gave %s (%s), ODX_ENOSPC expected",
		     odx_err_name(rc), odx_last_error(ctx));
	rc = run_round(ctx, &k, &(round_spec){MODE_RANDOM, 12, 800, -1, -1, 0});
	if (rc)
		FAIL("after the overflow: %s: %s", odx_err_name(rc), odx_last_error(ctx));
	/* A producer fails on the last rank: every shuffle is canceled naming it. */
	rc = run_round(ctx, &k, &(round_spec){MODE_RANDOM, 13, 600, -1, n - 1, 0});
	if (rc != ODX_EKERNEL)
		FAIL("a failed producer: odx_wait_all_ranks gave %s (%s), ODX_EKERNEL expected",
		     odx_err_name(rc), odx_last_error(ctx));
	rc = run_round(ctx, &k, &(round_spec){MODE_SPARSE, 14, 900, -1, -1, 0});
	if (rc)
		FAIL("after the failed producer: %s: %s", odx_err_name(rc), odx_last_error(ctx));
	CHECK(ctx, odx_close(ctx));
	if (rank_ == 0)
		printf("shuffle: %d ranks, all rounds match the sequential shuffle\n", n);
	return 0;
}
