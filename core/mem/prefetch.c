/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch.c - prefetch requests with a level (odx_buffer_prefetch), waiting for their turn.
 *
 * A request names a buffer, a device and how soon the copy is wanted. It holds the buffer's data
 * version of the call and, when a task writing the buffer was still unfinished then, that task:
 * the copy starts after it. Requests wait in one list per level and are looked at again (pumped)
 * whenever something that could let one start happened: a task finished, a copy finished, room
 * appeared on a tier, a request arrived, the monitor ticked. Each level has its own condition:
 *
 *   NOW   room up to the tier's capacity, making room like staging does (evictions start, the
 *         request waits for them);
 *   NEXT  room below the tier's start watermark, no eviction;
 *   SOON  as NEXT, and no demand fetch (a staged task waiting for data) on the device;
 *   IDLE  as SOON, and no task queued or running on the device.
 *
 * A request is cancelled, with nothing moved, when the plan it was made for changed before its
 * copy started: the buffer was written again (a later writer was submitted), the buffer's last
 * writer (the one it waited for, or one that finished before the call) failed, the buffer was
 * destroyed, or the device was lost. A copy that already started is not stopped; if a write
 * lands meanwhile its bytes are dropped (the copy's version check).
 *
 * Locks: pf_lock is the outermost of the wing (mem/mem.h). Pumps run with no core lock held; one
 * runs at a time (a pump asked for meanwhile makes the running one go round again).
 */
#include <stdlib.h>

#include "core.h"
#include "mem.h"
#include "pool.h"

struct odx__prefetch_req {
	struct odx__prefetch_req *next;
	odx_buffer *b;
	int device;
	uint64_t version; /* b->version at the call: a later writer cancels the request */
	odx__task *after; /* the writer to wait for (referenced), or NULL */
};

static void req_free(odx__prefetch_req *q)
{
	if (q->after)
		odx__task_put(q->after);
	odx__transfer_end(q->b); /* the last access to b: it may be released after this */
	free(q);
}

/* Frees a list of requests taken off the levels (no lock held: their buffers may go). */
static void req_free_all(odx__prefetch_req *drop)
{
	while (drop) {
		odx__prefetch_req *next = drop->next;

		req_free(drop);
		drop = next;
	}
}

/* pf_lock held: takes the requests `match` selects off every level, counted as cancelled, onto a
 * list for req_free_all. */
static odx__prefetch_req *take(odx_context *ctx, bool (*match)(odx__prefetch_req *, void *),
			       void *arg)
{
	odx__prefetch_req *drop = NULL;
	int lv;

	for (lv = 0; lv < ODX__PREFETCH_LEVELS; lv++) {
		odx__prefetch_req **pp = &ctx->pf_head[lv], *q;

		while ((q = *pp) != NULL) {
			if (!match(q, arg)) {
				pp = &q->next;
				continue;
			}
			*pp = q->next;
			q->next = drop;
			drop = q;
			atomic_fetch_sub(&ctx->pf_pending, 1);
			atomic_fetch_add(&ctx->pf_cancelled, 1);
		}
	}
	return drop;
}

static bool of_buffer(odx__prefetch_req *q, void *b)
{
	return q->b == b;
}

static bool any(odx__prefetch_req *q, void *arg)
{
	(void)q;
	(void)arg;
	return true;
}

enum verdict { WAIT = 0, START = 1, DROP = 2 };

/* Is request q (level lv) to start now, wait, or go? Counts why it goes. */
static int decide(odx_context *ctx, odx__prefetch_req *q, int lv)
{
	odx__device *dev = &ctx->devices[q->device];
	odx_buffer *b = q->b;

	if (atomic_load(&b->dead) || atomic_load(&dev->lost)) {
		atomic_fetch_add(&ctx->pf_cancelled, 1);
		return DROP;
	}
	if (q->after && !atomic_load(&q->after->done))
		return WAIT;
	if (q->after && q->after->status != 0) {
		atomic_fetch_add(&ctx->pf_cancelled, 1);
		return DROP;
	}
	if (atomic_load_explicit(&b->version, memory_order_relaxed) != q->version) {
		atomic_fetch_add(&ctx->pf_cancelled, 1);
		return DROP;
	}
	if (lv >= ODX_PREFETCH_SOON && atomic_load(&dev->demand_fetches) > 0)
		return WAIT;
	if (lv >= ODX_PREFETCH_IDLE && atomic_load_explicit(&dev->load, memory_order_relaxed) > 0)
		return WAIT;
	return START;
}

/* Starts q's copy if its tier has room for its level. 1: started or nothing to do (q is done
 * with); 0: no room yet. */
static int start(odx_context *ctx, odx__prefetch_req *q, int lv, odx__copy_job **jobs)
{
	int m = ctx->devices[q->device].memnode;
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t limit, stop;
	int rc;

	odx__tier_watermarks(ctx, m, &limit, &stop);
	if (lv == ODX_PREFETCH_NOW)
		limit = node->capacity;
	pthread_mutex_lock(&node->lock);
	rc = odx__prefetch_copy(ctx, q->b, m, limit, jobs);
	if (rc == ODX_ENOSPC && lv == ODX_PREFETCH_NOW) {
		char why[256];

		/* Needed now: make room the way staging does; the request waits for it, unless
		 * nothing could ever make that room. */
		if (odx__tier_make_room(ctx, m, odx__pool_charge(node->pool, q->b->size), NULL,
					jobs, why, sizeof(why)) == ODX__ROOM_NEVER) {
			atomic_fetch_add(&ctx->pf_cancelled, 1);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&node->lock);
	if (rc == 1) {
		atomic_fetch_add(&ctx->devices[q->device].prefetches, 1);
		atomic_fetch_add(&ctx->pf_started, 1);
	}
	return rc != ODX_ENOSPC;
}

void odx__prefetch_pump(odx_context *ctx)
{
	if (atomic_load_explicit(&ctx->pf_pending, memory_order_relaxed) == 0)
		return;
	/* One pump at a time: a pump asked for while one runs makes it go round again. */
	atomic_store(&ctx->pf_again, true);
	while (atomic_load(&ctx->pf_again) && pthread_mutex_trylock(&ctx->pf_lock) == 0) {
		odx__prefetch_req *drop = NULL;
		odx__copy_job *jobs = NULL;
		int lv;

		atomic_store(&ctx->pf_again, false);
		for (lv = 0; lv < ODX__PREFETCH_LEVELS; lv++) {
			odx__prefetch_req **pp = &ctx->pf_head[lv], *q;

			while ((q = *pp) != NULL) {
				int v = decide(ctx, q, lv);

				if (v == START && !start(ctx, q, lv, &jobs))
					v = WAIT;
				if (v == WAIT) {
					pp = &q->next;
					continue;
				}
				*pp = q->next;
				q->next = drop;
				drop = q;
				atomic_fetch_sub(&ctx->pf_pending, 1);
			}
		}
		pthread_mutex_unlock(&ctx->pf_lock);
		odx__copy_start_all(ctx, jobs);
		req_free_all(drop);
	}
}

void odx__prefetch_cancel(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	odx__prefetch_req *drop;

	if (atomic_load(&ctx->pf_pending) == 0)
		return;
	pthread_mutex_lock(&ctx->pf_lock);
	drop = take(ctx, of_buffer, b);
	pthread_mutex_unlock(&ctx->pf_lock);
	req_free_all(drop);
}

void odx__prefetch_close(odx_context *ctx)
{
	odx__prefetch_req *drop;

	/* Every task finished: what still waits (for an idle device, for room) never will. */
	pthread_mutex_lock(&ctx->pf_lock);
	drop = take(ctx, any, NULL);
	pthread_mutex_unlock(&ctx->pf_lock);
	req_free_all(drop);
}

ODX_API int odx_buffer_prefetch(odx_buffer *buf, int device, odx_prefetch_level level)
{
	odx_context *ctx;
	odx__prefetch_req *q, **pp;

	if (odx__buffer_check(buf, "odx_buffer_prefetch"))
		return ODX_EINVAL;
	if (atomic_load(&buf->nparts) > 0)
		return odx__buffer_partitioned(buf, "odx_buffer_prefetch");
	ctx = buf->ctx;
	if (device < 0 || device >= ctx->ndevices)
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_buffer_prefetch: device %d does not exist (the context has %d)",
				 device, ctx->ndevices);
	if ((int)level < 0 || (int)level >= ODX__PREFETCH_LEVELS)
		return odx__fail(ctx, ODX_EINVAL, "odx_buffer_prefetch: level %d is not one of "
						 "ODX_PREFETCH_NOW .. ODX_PREFETCH_IDLE",
				 (int)level);
	if (ctx->closing)
		return odx__fail(ctx, ODX_ECLOSED, "odx_buffer_prefetch: the context is closing");
	q = calloc(1, sizeof(*q));
	if (!q)
		return odx__fail(ctx, ODX_ENOMEM, "odx_buffer_prefetch: out of memory");
	q->b = buf;
	q->device = device;
	/* The buffer stays until the request is done with (its release waits for transfers). */
	odx__transfer_begin(buf);
	/* The writers' bookkeeping is under submit_lock: a consistent pair (version, last writer)
	 * even if another thread submits meanwhile. */
	pthread_mutex_lock(&ctx->submit_lock);
	q->version = atomic_load_explicit(&buf->version, memory_order_relaxed);
	/* Finished or not: a writer that failed leaves nothing worth prefetching. */
	if (buf->last_writer) {
		q->after = buf->last_writer;
		atomic_fetch_add(&q->after->refs, 1);
	}
	pthread_mutex_unlock(&ctx->submit_lock);
	pthread_mutex_lock(&ctx->pf_lock);
	for (pp = &ctx->pf_head[level]; *pp; pp = &(*pp)->next)
		;
	*pp = q;
	atomic_fetch_add(&ctx->pf_pending, 1);
	atomic_fetch_add(&ctx->pf_requests, 1);
	pthread_mutex_unlock(&ctx->pf_lock);
	odx__prefetch_pump(ctx);
	return 0;
}
