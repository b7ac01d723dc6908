/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_trace.c - a 2-rank ping-pong whose transfers are known in advance, run by
 * tests/dist/dist_trace.sh (under scripts/odx-run with ODX_TRACE and ODX_STATS set), which checks
 * each rank's trace file and statistics against what this program says it moved.
 *
 * Buffer a is rank 0's, b rank 1's. A kernel on rank 0 writes a; then each of ROUNDS rounds runs
 * "ping" (reads a, writes b: on rank 1, so a goes 0 -> 1) and "pong" (reads b, writes a: on rank
 * 0, so b goes 1 -> 0). The final collective read of a sends it to rank 1 once more (rank 1
 * already holds b's latest). Each rank prints one EXPECT line: its transfers with the other rank
 * by direction, how many were for a tagged task, and their size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "odx/odx.h"

#define TIMEOUT_MS 60000
#define ROUNDS 6
#define WORDS 8192 /* 32 KiB buffers */

static int rank_ = -1;

#include "dist_check.h"

/* dst = src + 1, word by word */
static int step(const odx_host_launch *l)
{
	const uint32_t *src = l->buffers[0];
	uint32_t *dst = l->buffers[1];
	size_t i;

	for (i = 0; i < l->buffer_sizes[1] / sizeof(uint32_t); i++)
		dst[i] = src[i] + 1;
	return 0;
}

static void run(odx_context *ctx, odx_kernel *k, odx_buffer *src, odx_buffer *dst,
		const char *tag)
{
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .tag = tag};

	CHECK(ctx, odx_submit(ctx, k, (odx_arg[]){ODX_BUF(src, ODX_R), ODX_BUF(dst, ODX_W)}, 2, &o,
			      NULL));
}

int main(void)
{
	static const odx_param params[] = {{ODX_ARG_BUFFER, ODX_R, "src"},
					   {ODX_ARG_BUFFER, ODX_W, "dst"}};
	const odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN,
				      .host_fn = step};
	static uint32_t out[WORDS];
	odx_buffer *z, *a, *b;
	odx_context *ctx;
	odx_kernel *k;
	int i;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	if (odx_size(ctx) != 2) {
		fprintf(stderr, "run me with scripts/odx-run -n 2\n");
		return 1;
	}
	CHECK(ctx, odx_kernel_create(ctx, "step", params, 2, &v, 1, &k));
	CHECK(ctx, odx_buffer_create(ctx, sizeof(out), 0, &z)); /* zeros everywhere: no transfer */
	CHECK(ctx, odx_buffer_create(ctx, sizeof(out), 0, &a));
	CHECK(ctx, odx_buffer_create(ctx, sizeof(out), 0, &b));
	CHECK(ctx, odx_buffer_set_owner(b, 1));
	/* a's transfers are named by its label, b's by number */
	CHECK(ctx, odx_buffer_set_label(a, "first label"));
	CHECK(ctx, odx_buffer_set_label(a, "ping-a"));
	run(ctx, k, z, a, "start");
	for (i = 0; i < ROUNDS; i++) {
		run(ctx, k, a, b, "ping");
		run(ctx, k, b, a, "pong");
	}
	CHECK(ctx, odx_buffer_read(a, 0, out, sizeof(out), TIMEOUT_MS));
	for (i = 0; i < WORDS; i++)
		if (out[i] != 1 + 2 * ROUNDS) {
			fprintf(stderr, "rank %d: a[%d] = %u, want %d\n", rank_, i, out[i],
				1 + 2 * ROUNDS);
			return 1;
		}
	/* Rank 0 sends a for every ping and the read, receives b for every pong; rank 1 the
	 * mirror image. */
	printf("EXPECT rank=%d peer=%d sent=%d sent_tag=%s sent_tagged=%d recv=%d recv_tag=%s "
	       "recv_tagged=%d bytes=%zu labelled=%s\n",
	       rank_, 1 - rank_, rank_ == 0 ? ROUNDS + 1 : ROUNDS, rank_ == 0 ? "ping" : "pong",
	       ROUNDS, rank_ == 0 ? ROUNDS : ROUNDS + 1, rank_ == 0 ? "pong" : "ping", ROUNDS,
	       sizeof(out), rank_ == 0 ? "sent" : "recv");
	odx_buffer_destroy(z);
	odx_buffer_destroy(a);
	odx_buffer_destroy(b);
	CHECK(ctx, odx_close(ctx));
	return 0;
}
