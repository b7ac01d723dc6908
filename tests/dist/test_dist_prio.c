/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_prio.c - a transfer runs at its consumer's priority, run as both ranks of a job
 * (scripts/odx-run -n 2).
 *
 * Rank 1's device is held by a gate kernel while, on every rank alike, a consumer that needs a
 * buffer from rank 0 is submitted at priority 10, then N kernels at priority 5 that do not need
 * it (each counts itself and sleeps a little). Then rank 1 opens the gate. The consumer records
 * how many of the N had run when it ran. Were the receive it waits for queued below the N (at
 * priority 0, as before), it could only run after all N had finished: the count would be N. At
 * its consumer's priority it runs right after the gate, and the consumer long before the last
 * of them. How many ran first depends on when the sender's bytes arrive, so the program only
 * prints the count; tests/dist/dist_prio.sh checks in rank 1's trace the order that does not
 * depend on timing: the receive is posted before the first of the N starts.
 *
 * Phase 2 checks the raise: a first consumer at priority 0 makes the transfer, a second one at
 * priority 10 reads the same buffer while the receive is still queued: the receive is moved up.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "odx/odx.h"

#define TIMEOUT_MS 120000
#define N 300

static int rank_ = -1;
static atomic_int gate_open;
static atomic_int ran; /* kernels at priority 5 that ran so far (rank 1) */

#include "dist_check.h"

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Holds its device until the main thread opens the gate (at most 60 s, then fails). */
static int gate(const odx_host_launch *l)
{
	int i;

	for (i = 0; i < 60000 && !atomic_load(&gate_open); i++)
		sleep_ms(1);
	if (!atomic_load(&gate_open)) {
		snprintf(l->error, l->error_size, "the gate was never opened");
		return 1;
	}
	return 0;
}

static int busy(const odx_host_launch *l)
{
	(void)l;
	atomic_fetch_add(&ran, 1);
	sleep_ms(3);
	return 0;
}

static int fill(const odx_host_launch *l)
{
	int64_t *a = l->buffers[0];

	a[0] = 42;
	return 0;
}

/* out = how many busy kernels had run; fails if the input did not arrive. */
static int consume(const odx_host_launch *l)
{
	const int64_t *a = l->buffers[0];
	int64_t *out = l->buffers[1];

	if (a[0] != 42) {
		snprintf(l->error, l->error_size, "input %lld, not 42", (long long)a[0]);
		return 1;
	}
	out[0] = atomic_load(&ran);
	return 0;
}

static odx_kernel *make(odx_context *ctx, const char *name, odx_host_fn fn, const odx_param *p,
			int np)
{
	const odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN,
				      .host_fn = fn};
	odx_kernel *k;

	CHECK(ctx, odx_kernel_create(ctx, name, p, np, &v, 1, &k));
	return k;
}

static odx_buffer *buffer(odx_context *ctx, int owner)
{
	odx_buffer *b;

	CHECK(ctx, odx_buffer_create(ctx, sizeof(int64_t), 0, &b));
	CHECK(ctx, odx_buffer_set_owner(b, owner));
	return b;
}

static void submit(odx_context *ctx, odx_kernel *k, odx_arg *args, int n, int priority)
{
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .priority = priority};

	CHECK(ctx, odx_submit(ctx, k, args, n, &o, NULL));
}

/* One phase; `raise`: a priority-0 consumer makes the transfer, the priority-10 one follows. */
static int64_t phase(odx_context *ctx, bool raise)
{
	static const odx_param p_w[] = {{ODX_ARG_BUFFER, ODX_W, "g"}};
	static const odx_param p_r[] = {{ODX_ARG_BUFFER, ODX_R, "x"}};
	static const odx_param p_c[] = {{ODX_ARG_BUFFER, ODX_R, "a"}, {ODX_ARG_BUFFER, ODX_W, "o"}};
	odx_kernel *kg = make(ctx, "gate", gate, p_w, 1), *kb = make(ctx, "busy", busy, p_r, 1);
	odx_kernel *kf = make(ctx, "fill", fill, p_w, 1), *kc = make(ctx, "consume", consume, p_c, 2);
	odx_buffer *g = buffer(ctx, 1), *x = buffer(ctx, 1), *a = buffer(ctx, 0);
	odx_buffer *o = buffer(ctx, 1), *o0 = buffer(ctx, 1);
	int64_t seen = -1;
	int i;

	atomic_store(&gate_open, 0);
	atomic_store(&ran, 0);
	submit(ctx, kf, (odx_arg[]){ODX_BUF(a, ODX_W)}, 1, 0);      /* on rank 0 */
	submit(ctx, kg, (odx_arg[]){ODX_BUF(g, ODX_W)}, 1, 100);    /* holds rank 1 */
	if (raise) /* the transfer is made for this one, at its priority 0 */
		submit(ctx, kc, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(o0, ODX_W)}, 2, 0);
	submit(ctx, kc, (odx_arg[]){ODX_BUF(a, ODX_R), ODX_BUF(o, ODX_W)}, 2, 10);
	for (i = 0; i < N; i++)
		submit(ctx, kb, (odx_arg[]){ODX_BUF(x, ODX_R)}, 1, 5);
	if (rank_ == 1)
		atomic_store(&gate_open, 1);
	CHECK(ctx, odx_buffer_read(o, 0, &seen, sizeof(seen), TIMEOUT_MS));
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	odx_buffer_destroy(g);
	odx_buffer_destroy(x);
	odx_buffer_destroy(a);
	odx_buffer_destroy(o);
	odx_buffer_destroy(o0);
	return seen;
}

int main(void)
{
	odx_context *ctx;
	int64_t seen;
	int p;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	if (odx_size(ctx) != 2) {
		fprintf(stderr, "run me with scripts/odx-run -n 2\n");
		return 1;
	}
	for (p = 0; p < 2; p++) {
		seen = phase(ctx, p == 1);
		printf("rank %d: %s: the priority-10 consumer ran after %lld of the %d priority-5 "
		       "kernels\n",
		       rank_, p ? "raised transfer" : "transfer", (long long)seen, N);
		/* When the consumer ran depends on when the sender's bytes arrived: a count, not
		 * a check. The order that does not depend on timing (the receive is posted before
		 * the first lower-priority kernel starts) is checked in the trace (dist_prio.sh). */
		if (seen < 0) {
			fprintf(stderr, "rank %d: the consumer did not see its input\n", rank_);
			return 1;
		}
	}
	CHECK(ctx, odx_close(ctx));
	return 0;
}
