/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_forever.c - odx_wait_all_ranks(ctx, -1) waits as long as the other ranks take, run as
 * every rank of a 2-rank job (scripts/odx-run) with a short fabric.peer_timeout_ms.
 *
 * Rank 1 computes outside ODX (it sleeps, calling nothing of ODX) for 2.5 peer timeouts before it
 * joins; rank 0 waits for it with timeout -1. Before the fix rank 0's barrier gave up after one
 * peer timeout (ODX_ETIMEDOUT); a rank that stops calling into ODX must also not be declared dead
 * (its progress thread keeps answering heartbeats). That rank 0 really waited is checked
 * causally, not by durations: rank 1 reads the clock (CLOCK_MONOTONIC, one clock for every
 * process of the host odx-run starts them on) before it enters the barrier, rank 0 after it left,
 * and rank 0's time must not be the earlier one (odx_allgather brings both). Afterwards a task on
 * rank 0 writes a buffer that both ranks read (a transfer right after the barrier), and both
 * check the bytes; the time from the barrier to that read is printed, not checked.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "odx/odx.h"

#define N 4096
#define TIMEOUT_MS 120000

static int rank_ = -1;

#include "dist_check.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
	const char *pt = getenv("ODX_FABRIC_PEER_TIMEOUT_MS");
	uint32_t out[N];
	odx_context *ctx;
	odx_buffer *buf;
	odx_kernel *fill;
	double t0, t1;
	int i, peer_ms = pt ? atoi(pt) : 0;

	if (peer_ms <= 0) {
		fprintf(stderr, "set ODX_FABRIC_PEER_TIMEOUT_MS (the test outlasts it)\n");
		return 1;
	}
	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	if (odx_size(ctx) != 2) {
		fprintf(stderr, "run me with scripts/odx-run -n 2\n");
		return 1;
	}
	/* everyone is up: from here rank 1 stays away for 2.5 peer timeouts */
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	if (rank_ == 1)
		usleep((useconds_t)peer_ms * 2500);
	t0 = now_s();
	CHECK(ctx, odx_wait_all_ranks(ctx, -1));
	t1 = now_s();
	printf("rank %d: odx_wait_all_ranks(-1) returned 0 after %.2f s (peer timeout %.2f s)\n",
	       rank_, t1 - t0, peer_ms / 1000.0);
	/* rank 1's arrival and rank 0's departure, on every rank */
	double mine = rank_ == 1 ? t0 : t1, both[2];
	CHECK(ctx, odx_allgather(ctx, &mine, sizeof(mine), both, TIMEOUT_MS));
	if (both[0] < both[1]) {
		fprintf(stderr, "rank %d: rank 0 left the barrier (%.6f) before rank 1 entered it "
			"(%.6f)\n", rank_, both[0], both[1]);
		return 1;
	}

	/* a transfer right after the barrier: rank 0 fills, both read */
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.fill_u32", &fill));
	CHECK(ctx, odx_buffer_create(ctx, sizeof(out), 0, &buf));
	CHECK(ctx, odx_buffer_set_owner(buf, 0));
	odx_task_opts o = {.grid = {N / 64, 1, 1}, .block = {64, 1, 1}};
	CHECK(ctx, odx_submit(ctx, fill,
			      (odx_arg[]){ODX_BUF(buf, ODX_W), ODX_I32(0x5eed), ODX_I32(N)}, 3, &o,
			      NULL));
	CHECK(ctx, odx_buffer_read(buf, 0, out, sizeof(out), TIMEOUT_MS));
	for (i = 0; i < N; i++)
		if (out[i] != 0x5eed) {
			fprintf(stderr, "rank %d: word %d is %#x, not 0x5eed\n", rank_, i, out[i]);
			return 1;
		}
	printf("rank %d: the transfer after the barrier landed %.2f ms after it\n", rank_,
	       (now_s() - t1) * 1e3);
	odx_buffer_destroy(buf);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));
	return 0;
}
