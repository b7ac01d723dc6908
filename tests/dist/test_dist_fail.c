/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist_fail.c - a kernel fails on purpose on one rank in the middle of a distributed
 * workload, run as every rank of a job (scripts/odx-run).
 *
 * Rank F (DIST_FAIL_RANK, default 0) runs the failing task "boom" on a buffer it owns. What needs
 * its output, on every rank, must end ODX_ECANCELED with a message naming rank F, the task's tag,
 * its kernel and the kernel's own message: a chain that crosses every rank (F -> F+1 -> ...), one
 * buffer sent to every other rank, a large buffer cut into chunks (and copy lanes on shm), and
 * collective reads of the poisoned buffers (a rank that only got a failure notice must forward
 * it). Independent work crossing the ranks completes with correct results; odx_wait_all_ranks
 * returns ODX_EKERNEL on every rank, naming rank F; a later write makes each buffer usable again.
 * Exit 0 on success; every wait has a deadline (and alarm() bounds the whole run).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "odx/odx.h"

#define TIMEOUT_MS 60000
#define N 1024				      /* uint64 elements in a small buffer */
#define BIG ((16u << 20) / 8 + 512)	      /* elements: 16 MiB + 4 KiB, over chunks and lanes */
#define WHY "deliberate failure of the test"  /* the failing kernel's own message */

static int rank_ = -1, fails_;

#include "dist_check.h"

static void expect(bool ok, const char *what, const char *detail)
{
	if (ok)
		return;
	fprintf(stderr, "rank %d: FAIL: %s (%s)\n", rank_, what, detail ? detail : "");
	fails_++;
}

/* step(RW buf, i64 add, i32 fail): adds `add` to every element; fails when `fail` is set. */
static int step_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	int64_t add = *(const int64_t *)l->scalars[1];
	int32_t fail = *(const int32_t *)l->scalars[2];

	if (fail) {
		/* late: the receives waiting for its output are posted meanwhile, so the failure
		 * notices meet posted receives (chunks and lanes included) */
		usleep(200000);
		p[0] = 0xdead; /* a failed kernel may have scribbled */
		snprintf(l->error, l->error_size, WHY " on rank %d", rank_);
		return 5;
	}
	for (size_t i = 0; i < l->buffer_sizes[0] / 8; i++)
		p[i] += (uint64_t)add;
	return 0;
}

/* acc(R src, RW dst): dst[i] += src[i % src elements]. */
static int acc_kernel(const odx_host_launch *l)
{
	const uint64_t *s = l->buffers[0];
	uint64_t *d = l->buffers[1];
	size_t ns = l->buffer_sizes[0] / 8;

	for (size_t i = 0; i < l->buffer_sizes[1] / 8; i++)
		d[i] += s[i % ns];
	return 0;
}

/* slow(R src, W dst): waits a second, then copies the first elements of src. */
static int slow_kernel(const odx_host_launch *l)
{
	usleep(1000000);
	memcpy(l->buffers[1], l->buffers[0], l->buffer_sizes[1]);
	return 0;
}

/* fill(W buf, i64 v) */
static int fill_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	int64_t v = *(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / 8; i++)
		p[i] = (uint64_t)v + i;
	return 0;
}

static odx_kernel *host_kernel(odx_context *ctx, const char *name, const odx_param *params,
			       int n, odx_host_fn fn)
{
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN,
				.host_fn = fn};
	odx_kernel *k = NULL;

	CHECK(ctx, odx_kernel_create(ctx, name, params, n, &v, 1, &k));
	return k;
}

static odx_kernel *kstep, *kacc, *kfill, *kslow;

/* Submits one task; returns its event on the rank that runs it, NULL elsewhere. */
static odx_event *submit(odx_context *ctx, odx_kernel *k, odx_arg *args, int n, const char *tag)
{
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .tag = tag};
	odx_event *ev = NULL;

	CHECK(ctx, odx_submit(ctx, k, args, n, &o, &ev));
	return ev;
}

static odx_buffer *buffer(odx_context *ctx, size_t elems, int owner, uint64_t v)
{
	odx_buffer *b;
	uint64_t *host = malloc(elems * 8);

	if (!host)
		exit(1);
	for (size_t i = 0; i < elems; i++)
		host[i] = v + i;
	CHECK(ctx, odx_buffer_create(ctx, elems * 8, 0, &b));
	CHECK(ctx, odx_buffer_set_owner(b, owner));
	CHECK(ctx, odx_buffer_write(b, 0, host, elems * 8, TIMEOUT_MS));
	free(host);
	return b;
}

/* What every message about this failure must name: the rank, the task, the kernel, the cause. */
static void expect_cause(const char *msg, int frank, const char *what)
{
	char r[32];

	snprintf(r, sizeof(r), "rank %d", frank);
	expect(strstr(msg, r) != NULL, what, msg);
	expect(strstr(msg, "'boom'") != NULL, what, msg);
	expect(strstr(msg, "kernel 'step'") != NULL, what, msg);
	expect(strstr(msg, WHY) != NULL, what, msg);
}

/* A dependent task's event (on the rank that runs it): canceled, naming the first failure. */
static void expect_canceled(odx_event *ev, int frank, const char *what)
{
	int rc;

	if (!ev)
		return;
	rc = odx_event_wait(ev, TIMEOUT_MS);
	if (rc != ODX_ECANCELED) {
		fprintf(stderr, "rank %d: FAIL: %s: %s (%s), expected ODX_ECANCELED\n", rank_, what,
			odx_err_name(rc), odx_event_message(ev));
		fails_++;
	} else {
		static bool shown;

		if (!shown) /* one example per rank in the log */
			printf("rank %d: %s\n", rank_, odx_event_message(ev));
		shown = true;
		expect_cause(odx_event_message(ev), frank, what);
	}
	odx_event_release(ev);
}

static void expect_ok(odx_event *ev, const char *what)
{
	int rc;

	if (!ev)
		return;
	rc = odx_event_wait(ev, TIMEOUT_MS);
	expect(rc == 0, what, odx_event_message(ev));
	odx_event_release(ev);
}

/* Reads the whole buffer (collective) and checks every element against v + i (+ add). */
static void expect_values(odx_context *ctx, odx_buffer *b, size_t elems, uint64_t v,
			  const char *what)
{
	uint64_t *host = malloc(elems * 8);
	size_t bad = elems;
	int rc;

	if (!host)
		exit(1);
	rc = odx_buffer_read(b, 0, host, elems * 8, TIMEOUT_MS);
	expect(rc == 0, what, odx_last_error(ctx));
	for (size_t i = 0; rc == 0 && i < elems && bad == elems; i++)
		if (host[i] != v + i)
			bad = i;
	if (rc == 0 && bad < elems) {
		fprintf(stderr, "rank %d: FAIL: %s: element %zu is %llu, expected %llu\n", rank_,
			what, bad, (unsigned long long)host[bad], (unsigned long long)(v + bad));
		fails_++;
	}
	free(host);
}

/* A read of a poisoned buffer: refused on every rank, naming the first failure. */
static void expect_read_fails(odx_context *ctx, odx_buffer *b, size_t elems, int frank,
			      const char *what)
{
	uint64_t *host = malloc(elems * 8);
	int rc;

	if (!host)
		exit(1);
	rc = odx_buffer_read(b, 0, host, elems * 8, TIMEOUT_MS);
	if (rc == 0 || rc == ODX_ETIMEDOUT) {
		fprintf(stderr, "rank %d: FAIL: %s: read returned %s (%s)\n", rank_, what,
			odx_err_name(rc), odx_last_error(ctx));
		fails_++;
	} else {
		expect_cause(odx_last_error(ctx), frank, what);
	}
	free(host);
}

int main(void)
{
	odx_context *ctx;
	const char *fr = getenv("DIST_FAIL_RANK");
	int n, f, r, rc;

	alarm(150); /* the whole job's deadline, whatever hangs */
	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	n = odx_size(ctx);
	f = fr ? atoi(fr) % n : 0;
	printf("rank %d of %d; the failure is on rank %d\n", rank_, n, f);
	kstep = host_kernel(ctx, "step",
			    (odx_param[]){{ODX_ARG_BUFFER, ODX_RW, "buf"},
					  {ODX_ARG_I64, 0, "add"},
					  {ODX_ARG_I32, 0, "fail"}},
			    3, step_kernel);
	kacc = host_kernel(ctx, "acc",
			   (odx_param[]){{ODX_ARG_BUFFER, ODX_R, "src"},
					 {ODX_ARG_BUFFER, ODX_RW, "dst"}},
			   2, acc_kernel);
	kfill = host_kernel(ctx, "fill",
			    (odx_param[]){{ODX_ARG_BUFFER, ODX_W, "buf"}, {ODX_ARG_I64, 0, "v"}}, 2,
			    fill_kernel);
	kslow = host_kernel(ctx, "slow",
			    (odx_param[]){{ODX_ARG_BUFFER, ODX_R, "src"}, {ODX_ARG_BUFFER, ODX_W, "dst"}},
			    2, slow_kernel);

	/* a[r], c[r], ind[r] on rank r; big on rank f */
	odx_buffer *a[64], *c[64], *ind[64], *s[64], *big;
	odx_event *ev_dep[64 * 3 + 8], *ev_slow[64];
	int ndep = 0;

	if (n > 64)
		return 77;
	for (r = 0; r < n; r++) {
		a[r] = buffer(ctx, N, r, 1000 * (uint64_t)r);
		c[r] = buffer(ctx, N, r, 0);
		ind[r] = buffer(ctx, N, r, 7);
		s[r] = buffer(ctx, N, r, 0);
	}
	big = buffer(ctx, BIG, f, 3);

	/* independent work before the failure, crossing ranks */
	for (r = 0; r < n; r++)
		expect_ok(submit(ctx, kacc,
				 (odx_arg[]){ODX_BUF(ind[(r + n - 1) % n], ODX_R),
					     ODX_BUF(ind[r], ODX_RW)},
				 2, "indep-before"),
			  "independent work before the failure");

	/* on every rank, a slow reader of big's current version: the receives of big's next
	 * version wait for it, so its failure notice comes before they are posted */
	for (r = 0; r < n; r++)
		ev_slow[r] = submit(ctx, kslow, (odx_arg[]){ODX_BUF(big, 0), ODX_BUF(s[r], 0)}, 2,
				    "slow-reader");
	/* the failure, on rank f */
	odx_event *boom = submit(ctx, kstep,
				 (odx_arg[]){ODX_BUF(a[f], 0), ODX_I64(1), ODX_I32(1)}, 3, "boom");
	/* a large buffer written from it on rank f: its transfer would be cut in chunks */
	ev_dep[ndep++] = submit(ctx, kacc, (odx_arg[]){ODX_BUF(a[f], 0), ODX_BUF(big, 0)}, 2,
				"big-from-boom");
	/* a chain across every rank: a[f] -> a[f+1] -> ... -> a[f+n-1] */
	for (r = 1; r < n; r++)
		ev_dep[ndep++] = submit(ctx, kacc,
					(odx_arg[]){ODX_BUF(a[(f + r - 1) % n], 0),
						    ODX_BUF(a[(f + r) % n], 0)},
					2, "chain");
	/* a[f]'s output needed on every rank, and big on every rank */
	for (r = 0; r < n; r++) {
		ev_dep[ndep++] = submit(ctx, kacc, (odx_arg[]){ODX_BUF(a[f], 0), ODX_BUF(c[r], 0)},
					2, "fan-out");
		ev_dep[ndep++] = submit(ctx, kacc, (odx_arg[]){ODX_BUF(big, 0), ODX_BUF(c[r], 0)},
					2, "big-fan-out");
	}
	/* independent work after the failure, crossing ranks */
	for (r = 0; r < n; r++)
		expect_ok(submit(ctx, kacc,
				 (odx_arg[]){ODX_BUF(ind[(r + 1) % n], ODX_R),
					     ODX_BUF(ind[r], ODX_RW)},
				 2, "indep-after"),
			  "independent work after the failure");

	if (boom) {
		rc = odx_event_wait(boom, TIMEOUT_MS);
		expect(rc == ODX_EKERNEL, "the failing task ends ODX_EKERNEL", odx_event_message(boom));
		odx_event_release(boom);
	}
	for (int i = 0; i < ndep; i++)
		expect_canceled(ev_dep[i], f, "a dependent task");
	for (r = 0; r < n; r++)
		expect_ok(ev_slow[r], "a reader of the version before the failure");

	/* every rank reports the failure, as one rank does: ODX_EKERNEL naming rank f */
	rc = odx_wait_all_ranks(ctx, TIMEOUT_MS);
	printf("rank %d: odx_wait_all_ranks: %s: %s\n", rank_, odx_err_name(rc),
	       odx_last_error(ctx));
	expect(rc == ODX_EKERNEL, "odx_wait_all_ranks returns ODX_EKERNEL", odx_last_error(ctx));
	if (rc == ODX_EKERNEL)
		expect_cause(odx_last_error(ctx), f, "odx_wait_all_ranks");

	/* reads of the poisoned buffers return on every rank, naming the failure */
	expect_read_fails(ctx, a[f], N, f, "read of the failed task's output");
	expect_read_fails(ctx, a[(f + n - 1) % n], N, f, "read of the chain's end");
	expect_read_fails(ctx, big, BIG, f, "read of the large buffer");
	expect_read_fails(ctx, c[(f + 1) % n], N, f, "read of a fan-out output");
	rc = odx_wait_all_ranks(ctx, TIMEOUT_MS);
	expect(rc == 0, "odx_wait_all_ranks after the reads (reads report to their caller)",
	       odx_last_error(ctx));

	/* independent results are correct: ind[r] = 7 + i, then + ind[r-1], then + ind[r+1] */
	{
		uint64_t *host = malloc(N * 8), *mid = malloc((size_t)n * N * 8);

		if (!host || !mid)
			return 1;
		for (r = 0; r < n; r++)
			for (size_t i = 0; i < N; i++)
				mid[(size_t)r * N + i] = 7 + i;
		/* the "before" pass runs in rank order, each reading its (already updated) left
		 * neighbour, except the first, which reads the last one's initial value */
		for (r = 0; r < n; r++)
			for (size_t i = 0; i < N; i++)
				mid[(size_t)r * N + i] += mid[(size_t)((r + n - 1) % n) * N + i];
		for (r = 0; r < n; r++)
			for (size_t i = 0; i < N; i++)
				mid[(size_t)r * N + i] += mid[(size_t)((r + 1) % n) * N + i];
		for (r = 0; r < n; r++) {
			CHECK(ctx, odx_buffer_read(ind[r], 0, host, N * 8, TIMEOUT_MS));
			expect(memcmp(host, mid + (size_t)r * N, N * 8) == 0,
			       "independent work has correct results", NULL);
		}
		free(host);
		free(mid);
	}

	/* a later write makes each buffer usable again: a host write of a[f], a kernel that
	 * rewrites big on rank f (sent to every rank through chunks and lanes), a kernel that
	 * rewrites the chain's next buffer on its owner and is then read on another rank */
	{
		uint64_t *host = malloc(N * 8);

		if (!host)
			return 1;
		for (size_t i = 0; i < N; i++)
			host[i] = 500 + i;
		CHECK(ctx, odx_buffer_write(a[f], 0, host, N * 8, TIMEOUT_MS));
		free(host);
	}
	expect_ok(submit(ctx, kfill, (odx_arg[]){ODX_BUF(big, 0), ODX_I64(40)}, 2, "refill-big"),
		  "rewriting the large buffer");
	expect_ok(submit(ctx, kfill,
			 (odx_arg[]){ODX_BUF(a[(f + 1) % n], 0), ODX_I64(90)}, 2, "refill-next"),
		  "rewriting the chain's next buffer");
	/* c[f] (0 + i) += a[f+1], moved from rank f+1 after its rewrite, then += a[f] */
	expect_ok(submit(ctx, kfill, (odx_arg[]){ODX_BUF(c[f], 0), ODX_I64(0)}, 2, "refill-c"),
		  "rewriting a fan-out output");
	expect_ok(submit(ctx, kacc, (odx_arg[]){ODX_BUF(a[(f + 1) % n], 0), ODX_BUF(c[f], 0)}, 2,
			 "after-1"),
		  "a task reading a rewritten buffer from another rank");
	expect_ok(submit(ctx, kacc, (odx_arg[]){ODX_BUF(a[f], 0), ODX_BUF(c[f], 0)}, 2, "after-2"),
		  "a task reading a buffer written by the host after the failure");
	rc = odx_wait_all_ranks(ctx, TIMEOUT_MS);
	expect(rc == 0, "odx_wait_all_ranks after the rewrites", odx_last_error(ctx));
	expect_values(ctx, a[f], N, 500, "the host-written buffer");
	expect_values(ctx, big, BIG, 40, "the rewritten large buffer");
	expect_values(ctx, a[(f + 1) % n], N, 90, "the rewritten chain buffer");
	/* (0 + i) + (90 + i) + (500 + i) = 590 + 3i: checked against v + i with i's slope 3 */
	{
		uint64_t *host = malloc(N * 8);
		size_t bad = N;

		if (!host)
			return 1;
		CHECK(ctx, odx_buffer_read(c[f], 0, host, N * 8, TIMEOUT_MS));
		for (size_t i = 0; i < N && bad == N; i++)
			if (host[i] != 590 + 3 * i)
				bad = i;
		expect(bad == N, "a task after the rewrites has correct results", NULL);
		free(host);
	}

	for (r = 0; r < n; r++) {
		odx_buffer_destroy(a[r]);
		odx_buffer_destroy(c[r]);
		odx_buffer_destroy(ind[r]);
		odx_buffer_destroy(s[r]);
	}
	odx_buffer_destroy(big);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	CHECK(ctx, odx_close(ctx));
	printf("rank %d: %s\n", rank_, fails_ ? "FAILED" : "ok");
	return fails_ ? 1 : 0;
}
