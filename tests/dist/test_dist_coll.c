/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_coll.c - the small collectives (odx_allgather, odx_allreduce), run as every rank of a
 * job (scripts/odx-run), and on one rank (a copy).
 *
 * Rounds of allgathers of rank-specific bytes of varying length (0 bytes to 256 KiB), the bytes
 * checked on every rank; allreduce of i64 (sum, min, max) against the known answer, and of f64
 * sums whose bits every rank must agree on (gathered and compared); collectives interleaved with
 * tasks whose buffers move between ranks (their transfers share the fabric with the collectives'),
 * and a last odx_wait_all_ranks. Every wait has a deadline.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "odx/odx.h"

#define TIMEOUT_MS 60000
#define ROUNDS 40

static int rank_ = -1;

#include "dist_check.h"

static unsigned char byte_of(int rank, int round, size_t i)
{
	return (unsigned char)(rank * 31 + round * 7 + i * 13 + (i >> 8));
}

int main(void)
{
	static const size_t lens[] = {0, 1, 7, 64, 4096, 65537, 262144};
	odx_context *ctx;
	odx_kernel *fill;
	int size;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	size = odx_size(ctx);
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	for (int round = 0; round < ROUNDS; round++) {
		size_t len = lens[round % (sizeof(lens) / sizeof(lens[0]))];
		unsigned char *mine = malloc(len + 1), *all = malloc(len * (size_t)size + 1);

		for (size_t i = 0; i < len; i++)
			mine[i] = byte_of(rank_, round, i);
		CHECK(ctx, odx_allgather(ctx, mine, len, all, round % 3 ? TIMEOUT_MS : -1));
		for (int r = 0; r < size; r++)
			for (size_t i = 0; i < len; i++)
				if (all[(size_t)r * len + i] != byte_of(r, round, i)) {
					fprintf(stderr, "rank %d: round %d: byte %zu of rank %d wrong\n",
						rank_, round, i, r);
					return 1;
				}
		free(mine);
		free(all);

		/* i64: sum, min, max of rank-derived values */
		int64_t v[3] = {rank_ + 1000 * round, -rank_ - round, rank_ * round};
		CHECK(ctx, odx_allreduce(ctx, ODX_ARG_I64, ODX_REDUCE_SUM, &v[0], 1, TIMEOUT_MS));
		CHECK(ctx, odx_allreduce(ctx, ODX_ARG_I64, ODX_REDUCE_MIN, &v[1], 1, TIMEOUT_MS));
		CHECK(ctx, odx_allreduce(ctx, ODX_ARG_I64, ODX_REDUCE_MAX, &v[2], 1, TIMEOUT_MS));
		int64_t want_sum = (int64_t)size * (size - 1) / 2 + (int64_t)1000 * round * size;
		if (v[0] != want_sum || v[1] != -(size - 1) - round ||
		    v[2] != (int64_t)(size - 1) * round) {
			fprintf(stderr, "rank %d: round %d: i64 reduce %lld %lld %lld\n", rank_, round,
				(long long)v[0], (long long)v[1], (long long)v[2]);
			return 1;
		}
		/* f64 sums in rank order: every rank holds the same bits */
		double d[2] = {1.0 / (rank_ + 3) + round, 1e16 * (rank_ % 2 ? -1 : 1) + rank_};
		double *got = malloc(sizeof(d) * (size_t)size);
		CHECK(ctx, odx_allreduce(ctx, ODX_ARG_F64, ODX_REDUCE_SUM, d, 2, TIMEOUT_MS));
		CHECK(ctx, odx_allgather(ctx, d, sizeof(d), got, TIMEOUT_MS));
		for (int r = 0; r < size; r++)
			if (memcmp(&got[2 * r], d, sizeof(d))) {
				fprintf(stderr, "rank %d: round %d: rank %d's f64 sum differs\n", rank_,
					round, r);
				return 1;
			}
		free(got);

		/* a task whose output moves to every rank, between collectives */
		odx_buffer *b;
		uint32_t out[256];
		odx_task_opts o = {.grid = {4, 1, 1}, .block = {64, 1, 1}};

		CHECK(ctx, odx_buffer_create(ctx, sizeof(out), 0, &b));
		CHECK(ctx, odx_buffer_set_owner(b, round % size));
		CHECK(ctx, odx_submit(ctx, fill,
				      (odx_arg[]){ODX_BUF(b, ODX_W), ODX_I32(round), ODX_I32(256)}, 3,
				      &o, NULL));
		CHECK(ctx, odx_buffer_read(b, 0, out, sizeof(out), TIMEOUT_MS));
		for (int i = 0; i < 256; i++)
			if (out[i] != (uint32_t)round) {
				fprintf(stderr, "rank %d: round %d: task output wrong\n", rank_, round);
				return 1;
			}
		odx_buffer_destroy(b);
	}
	/* refusals */
	if (odx_allreduce(ctx, ODX_ARG_I32, ODX_REDUCE_SUM, &(int64_t){0}, 1, TIMEOUT_MS) !=
	    ODX_EINVAL) {
		fprintf(stderr, "rank %d: an i32 allreduce was not refused\n", rank_);
		return 1;
	}
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));
	printf("rank %d of %d: %d rounds of collectives checked\n", rank_, size, ROUNDS);
	return 0;
}
