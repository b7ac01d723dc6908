/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_lengths.c - run-time lengths across ranks (docs/sizes.md, "Several ranks"), run as
 * every rank of a job started by scripts/odx-run (2 or 4 ranks, tcp or shm).
 *
 * The last rank writes a plain buffer and a buffer with one part per rank, setting their lengths
 * (empty parts, one part holding all its capacity); rank 0 then runs a task on each: the lengths
 * must arrive with the bytes (odx_host_launch.buffer_lengths, ODX_LEN), and the collective
 * queries (odx_buffer_length, odx_buffer_part_lengths) give every rank the same values, taken from
 * a rank that got them by transfer. The per-peer statistics say exactly how many bytes the last
 * rank sent rank 0: the valid ones, not the capacities (a transfer of a whole buffer fails it).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "odx/odx.h"

#define TIMEOUT_MS 120000
#define CAP (256 * 1024) /* bytes of each buffer */

static int rank_ = -1;

#include "dist_check.h"

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "rank %d: ", rank_);                                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static int64_t i64_arg(const odx_host_launch *l, int i)
{
	return *(const int64_t *)l->scalars[i];
}

/* The valid bytes the last rank's tasks make: the plain buffer's length, and part d's of P. */
static size_t plain_len(int size)
{
	return 1000 + 37 * (size_t)size;
}

static size_t part_len(int d, int size)
{
	size_t pcap = CAP / (size_t)size;

	if (d == 0)
		return 0; /* an empty part */
	if (d == 1)
		return pcap; /* one part holding all it can */
	return 7 * (size_t)d + 1;
}

static unsigned char pattern(size_t at, int d)
{
	return (unsigned char)(at * 31 + (size_t)d * 7 + 5);
}

/* (buf W, I64 nparts): nparts 0: byte i = pattern(i, 0) over [0, plain_len); else part d gets
 * pattern(j, d) over its part_len. Lengths set accordingly. */
static int make_fn(const odx_host_launch *l)
{
	unsigned char *x = l->buffers[0];
	int64_t nparts = i64_arg(l, 1);

	if (nparts == 0) {
		/* plain: the size of the job is coded in the buffer's use: size = ranks */
		size_t n = (size_t)i64_arg(l, 2);

		for (size_t i = 0; i < n; i++)
			x[i] = pattern(i, 0);
		l->set_length(l, 0, ODX_WHOLE_BUFFER, n);
		return 0;
	}
	for (int d = 0; d < (int)nparts; d++) {
		size_t pcap = CAP / (size_t)nparts, n = part_len(d, (int)nparts);

		for (size_t j = 0; j < n; j++)
			x[(size_t)d * pcap + j] = pattern(j, d);
		l->set_length(l, 0, d, n);
	}
	return 0;
}

/* (buf R, I64 n, out W, I64 nparts): out = {buffer_lengths[0], n, 1 if the valid bytes hold the
 * pattern else 0}; with parts, the part lengths are the expected ones (part_len). */
static int check_fn(const odx_host_launch *l)
{
	const unsigned char *x = l->buffers[0];
	int64_t *out = l->buffers[1];
	int64_t nparts = i64_arg(l, 3);
	int64_t ok = 1;

	out[0] = (int64_t)l->buffer_lengths[0];
	out[1] = i64_arg(l, 1);
	if (nparts == 0) {
		for (size_t i = 0; i < l->buffer_lengths[0]; i++)
			ok &= x[i] == pattern(i, 0);
	} else {
		for (int d = 0; d < (int)nparts; d++) {
			size_t pcap = CAP / (size_t)nparts;

			for (size_t j = 0; j < part_len(d, (int)nparts); j++)
				ok &= x[(size_t)d * pcap + j] == pattern(j, d);
		}
	}
	out[2] = ok;
	return 0;
}

/* Everything the log sink got (the statistics at close). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[1 << 16];
static size_t nlogged;

static void sink(void *user, odx_log_level level, const char *msg)
{
	size_t n = strlen(msg);

	(void)user;
	(void)level;
	pthread_mutex_lock(&log_lock);
	if (nlogged + n + 1 < sizeof(logged)) {
		memcpy(logged + nlogged, msg, n);
		logged[nlogged + n] = '\n';
		nlogged += n + 1;
		logged[nlogged] = '\0';
	}
	pthread_mutex_unlock(&log_lock);
}

/* Bytes this rank sent to `peer`, from the per-peer statistics line ("rank a <-> rank b: sent N
 * transfers (B bytes)"); -1 when there is none. */
static long long sent_to(int peer)
{
	char key[64];
	const char *p;
	unsigned long long n, bytes;

	snprintf(key, sizeof(key), "rank %d <-> rank %d: sent ", rank_, peer);
	p = strstr(logged, key);
	if (!p || sscanf(p + strlen(key), "%llu transfers (%llu bytes)", &n, &bytes) != 2)
		return -1;
	return (long long)bytes;
}

static void run_check(odx_context *ctx, odx_kernel *check, odx_buffer *b, int nparts,
		      int64_t got[3])
{
	odx_buffer *out;
	odx_arg a[4];

	/* out on rank 0: the check runs there (the owner of the buffer it writes). */
	CHECK(ctx, odx_buffer_create(ctx, 3 * sizeof(int64_t), 0, &out));
	a[0] = ODX_BUF(b, 0);
	a[1] = ODX_LEN(0, 4);
	a[2] = ODX_BUF(out, 0);
	a[3] = ODX_I64(nparts);
	CHECK(ctx, odx_submit(ctx, check, a, 4, NULL, NULL));
	CHECK(ctx, odx_buffer_read(out, 0, got, 3 * sizeof(int64_t), TIMEOUT_MS));
	CHECK(ctx, odx_buffer_destroy(out));
}

int main(void)
{
	static const odx_param make_p[] = {{ODX_ARG_BUFFER, ODX_W, "buf"},
					   {ODX_ARG_I64, 0, "nparts"},
					   {ODX_ARG_I64, 0, "n"}};
	static const odx_param check_p[] = {{ODX_ARG_BUFFER, ODX_R, "buf"},
					    {ODX_ARG_I64, 0, "n"},
					    {ODX_ARG_BUFFER, ODX_W, "out"},
					    {ODX_ARG_I64, 0, "nparts"}};
	odx_kernel_variant mv = {.backend = ODX_BACKEND_HOST,
				 .format = ODX_FORMAT_HOST_FN,
				 .host_fn = make_fn};
	odx_kernel_variant cv = {.backend = ODX_BACKEND_HOST,
				 .format = ODX_FORMAT_HOST_FN,
				 .host_fn = check_fn};
	odx_config *cfg;
	odx_context *ctx;
	odx_kernel *make, *check;
	odx_buffer *plain, *parted;
	int size, last;
	int64_t got[3];
	size_t len, *lens, total = 0;

	CHECK(NULL, odx_config_create(&cfg));
	CHECK(NULL, odx_config_set(cfg, "stats", "true"));
	CHECK(NULL, odx_config_set_log(cfg, sink, NULL));
	CHECK(NULL, odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	rank_ = odx_rank(ctx);
	size = odx_size(ctx);
	last = size - 1;
	if (size < 2) {
		fprintf(stderr, "run me with scripts/odx-run -n 2 (or more)\n");
		return 1;
	}
	CHECK(ctx, odx_kernel_create(ctx, "make", make_p, 3, &mv, 1, &make));
	CHECK(ctx, odx_kernel_create(ctx, "check", check_p, 4, &cv, 1, &check));

	/* A plain buffer written on the last rank, its length set there. */
	CHECK(ctx, odx_buffer_create(ctx, CAP, 0, &plain));
	CHECK(ctx, odx_buffer_set_owner(plain, last));
	{
		odx_arg a[] = {ODX_BUF(plain, 0), ODX_I64(0), ODX_I64((int64_t)plain_len(size))};

		CHECK(ctx, odx_submit(ctx, make, a, 3, NULL, NULL));
	}
	/* Every rank gets the writer's rank's length (collective). */
	CHECK(ctx, odx_buffer_length(plain, &len, TIMEOUT_MS));
	if (len != plain_len(size))
		FAIL("odx_buffer_length of the plain buffer: %zu, expected %zu", len,
		     plain_len(size));
	/* Read on rank 0: the length came with the bytes. */
	run_check(ctx, check, plain, 0, got);
	if (got[0] != (int64_t)plain_len(size) || got[1] != (int64_t)plain_len(size) / 4 ||
	    got[2] != 1)
		FAIL("plain buffer on rank 0: length %lld, ODX_LEN %lld, bytes %s",
		     (long long)got[0], (long long)got[1], got[2] ? "right" : "wrong");

	/* One part per rank, written on the last rank: an empty part, a full one, short ones. */
	CHECK(ctx, odx_buffer_create(ctx, CAP, 0, &parted));
	CHECK(ctx, odx_buffer_set_owner(parted, last));
	{
		odx_partition blocks = {.kind = ODX_PART_BLOCKS, .elem_size = 4};
		odx_arg a[] = {ODX_BUF(parted, 0), ODX_I64(size), ODX_I64(0)};

		CHECK(ctx, odx_buffer_set_parts(parted, &blocks, size));
		CHECK(ctx, odx_submit(ctx, make, a, 3, NULL, NULL));
	}
	run_check(ctx, check, parted, size, got);
	for (int d = 0; d < size; d++)
		total += part_len(d, size);
	if (got[0] != (int64_t)total || got[2] != 1)
		FAIL("buffer with parts on rank 0: length %lld (expected %zu), bytes %s",
		     (long long)got[0], total, got[2] ? "right" : "wrong");
	/* Rank 0 holds it now by transfer: the lowest rank holding it answers for everyone. */
	lens = calloc((size_t)size, sizeof(*lens));
	CHECK(ctx, odx_buffer_part_lengths(parted, lens, size, TIMEOUT_MS));
	for (int d = 0; d < size; d++)
		if (lens[d] != part_len(d, size))
			FAIL("part %d: length %zu, expected %zu", d, lens[d], part_len(d, size));
	CHECK(ctx, odx_buffer_length(parted, &len, TIMEOUT_MS));
	if (len != total)
		FAIL("odx_buffer_length of the buffer with parts: %zu, expected %zu", len, total);
	/* A collective read brings every rank the valid bytes, at their places. */
	{
		unsigned char *host = malloc(CAP);
		size_t pcap = CAP / (size_t)size;

		CHECK(ctx, odx_buffer_read(parted, 0, host, CAP, TIMEOUT_MS));
		for (int d = 0; d < size; d++)
			for (size_t j = 0; j < part_len(d, size); j++)
				if (host[(size_t)d * pcap + j] != pattern(j, d))
					FAIL("part %d byte %zu after the read: %u", d, j,
					     host[(size_t)d * pcap + j]);
		free(host);
	}
	free(lens);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));

	/* The last rank sent rank 0 the valid bytes of both buffers, nothing more. */
	if (rank_ == last) {
		long long sent = sent_to(0);

		if (sent != (long long)(plain_len(size) + total))
			FAIL("sent rank 0 %lld bytes, expected %zu (the valid ones; each buffer holds "
			     "%d)",
			     sent, plain_len(size) + total, CAP);
	}
	printf("rank %d of %d: lengths across ranks OK\n", rank_, size);
	return 0;
}
