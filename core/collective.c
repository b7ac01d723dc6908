/* SPDX-License-Identifier: Apache-2.0 */
/*
 * collective.c - the calls every rank makes together outside the task flow: the small
 * collectives (odx_allgather, odx_allreduce), for values a program needs on every rank, and the
 * job-wide barrier of odx_wait_all_ranks (docs/distributed.md). Beside dist.c, which carries the
 * replicated task flow; both reach the transport through fabric/fabric.h only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "fabric.h"

/* ---- small collectives ---------------------------------------------------------------------- */

struct coll {
	pthread_mutex_t lock;
	int pending, status;
	char msg[ODX__MSG_MAX];
};

static void coll_done(void *arg, int status, const char *msg)
{
	struct coll *c = arg;

	pthread_mutex_lock(&c->lock);
	c->pending--;
	if (status && !c->status) {
		c->status = status;
		snprintf(c->msg, sizeof(c->msg), "%s", msg ? msg : odx_strerror(status));
	}
	pthread_mutex_unlock(&c->lock);
}

static bool coll_finished(void *arg)
{
	struct coll *c = arg;
	bool done;

	pthread_mutex_lock(&c->lock);
	done = c->pending == 0;
	pthread_mutex_unlock(&c->lock);
	return done;
}

/* Every rank sends its bytes to every other and receives theirs (key: buffer field 0, the
 * collective's sequence number: every rank numbers its collectives alike, as it calls them in
 * the same order). Small values are the point: counts, sizes, timings. */
ODX_API int odx_allgather(odx_context *ctx, const void *mine, size_t len, void *all,
			  int timeout_ms)
{
	struct coll c = {.status = 0};
	uint64_t key;
	int r, rc = 0, posted = 0;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, (mine && all) || len == 0, "mine/all");
	if (len && (char *)all + (size_t)ctx->rank * len != (const char *)mine)
		memmove((char *)all + (size_t)ctx->rank * len, mine, len);
	if (!ctx->fab || ctx->size == 1)
		return 0;
	mine = (const char *)all + (size_t)ctx->rank * len;
	key = atomic_fetch_add(&ctx->coll_seq, 1) & 0xffffff;
	pthread_mutex_init(&c.lock, NULL);
	c.pending = 2 * (ctx->size - 1);
	for (r = 0; r < ctx->size && !rc; r++) {
		if (r == ctx->rank)
			continue;
		rc = odx_fab_recv(ctx->fab, r, key, (char *)all + (size_t)r * len, len, coll_done,
				  &c);
		if (!rc) {
			posted++;
			rc = odx_fab_send(ctx->fab, r, key, mine, len, coll_done, &c);
			if (!rc)
				posted++;
		}
	}
	if (rc) {
		/* what was posted completes (fails at worst) before the buffers go back */
		pthread_mutex_lock(&c.lock);
		c.pending -= 2 * (ctx->size - 1) - posted;
		pthread_mutex_unlock(&c.lock);
	}
	odx_fab_kick(ctx->fab);
	int wrc;
	do
		wrc = odx_fab_wait(ctx->fab, coll_finished, &c,
				   timeout_ms < 0 ? 60000 : timeout_ms == 0 ? 1 : timeout_ms);
	while (wrc == ODX_ETIMEDOUT && timeout_ms < 0);
	pthread_mutex_destroy(&c.lock);
	if (rc)
		return odx__fail(ctx, rc, "odx_allgather: the fabric refused a transfer: %s",
				 odx_strerror(rc));
	if (wrc)
		return odx__fail(ctx, wrc, "odx_allgather: %d of %d transfers unfinished after %d ms",
				 c.pending, 2 * (ctx->size - 1), timeout_ms);
	if (c.status)
		return odx__fail(ctx, c.status, "odx_allgather: %s", c.msg);
	return 0;
}

ODX_API int odx_allreduce(odx_context *ctx, odx_arg_kind kind, odx_reduce_op op, void *inout,
			  int n, int timeout_ms)
{
	size_t len;
	unsigned char *all;
	int rc, r, i;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, kind == ODX_ARG_I64 || kind == ODX_ARG_F64, "kind");
	ODX__CHECK_ARG(ctx, op == ODX_REDUCE_SUM || op == ODX_REDUCE_MIN || op == ODX_REDUCE_MAX,
		       "op");
	ODX__CHECK_ARG(ctx, n >= 0 && (inout || n == 0), "inout/n");
	len = (size_t)n * 8;
	all = malloc(len * (size_t)ctx->size + 1);
	if (!all)
		return odx__fail(ctx, ODX_ENOMEM, "odx_allreduce: out of memory");
	rc = odx_allgather(ctx, inout, len, all, timeout_ms);
	/* in rank order on every rank: the same bits everywhere, floating point included */
	for (i = 0; !rc && i < n; i++) {
		if (kind == ODX_ARG_I64) {
			int64_t v, acc;

			memcpy(&acc, all + (size_t)i * 8, 8);
			for (r = 1; r < ctx->size; r++) {
				memcpy(&v, all + (size_t)r * len + (size_t)i * 8, 8);
				acc = op == ODX_REDUCE_SUM ? (int64_t)((uint64_t)acc + (uint64_t)v)
				      : op == ODX_REDUCE_MIN ? (v < acc ? v : acc)
							     : (v > acc ? v : acc);
			}
			memcpy((char *)inout + (size_t)i * 8, &acc, 8);
		} else {
			double v, acc;

			memcpy(&acc, all + (size_t)i * 8, 8);
			for (r = 1; r < ctx->size; r++) {
				memcpy(&v, all + (size_t)r * len + (size_t)i * 8, 8);
				acc = op == ODX_REDUCE_SUM ? acc + v
				      : op == ODX_REDUCE_MIN ? (v < acc ? v : acc)
							     : (v > acc ? v : acc);
			}
			memcpy((char *)inout + (size_t)i * 8, &acc, 8);
		}
	}
	free(all);
	return rc;
}

ODX_API int odx_wait_all_ranks(odx_context *ctx, int timeout_ms)
{
	odx_fab_bar_result res;
	char local[ODX__MSG_MAX];
	const char *text = local;
	size_t skip;
	int rc, brc;

	if (!ctx)
		return ODX_EINVAL;
	rc = odx_wait_all(ctx, timeout_ms);
	if (!ctx->fab)
		return rc;
	/* This rank's outcome travels with the barrier, without its "ODX_E...: " prefix. */
	snprintf(local, sizeof(local), "%s", rc ? odx_last_error(ctx) : "");
	skip = strlen(odx_err_name(rc));
	if (rc && strncmp(local, odx_err_name(rc), skip) == 0 && local[skip] == ':')
		text = local + skip + (local[skip + 1] == ' ' ? 2 : 1);
	/* The barrier runs even after a local failure: the other ranks are waiting in it. */
	brc = odx_fab_barrier_status(ctx->fab, timeout_ms, rc, text, &res);
	if (brc) {
		if (rc)
			return rc; /* this rank's own failure, its message as odx_wait_all left it */
		return odx__fail(ctx, brc, "odx_wait_all_ranks: the barrier of %d ranks failed: %s",
				 ctx->size, res.msg[0] ? res.msg : odx_strerror(brc));
	}
	/* Every rank reports the same outcome: the first failure (a failed task over the
	 * cancellations it caused, then the lowest rank), as odx_wait_all does on one rank. */
	if (res.status)
		return odx__fail(ctx, res.status, "rank %d: %s", res.rank, res.msg);
	return 0;
}
