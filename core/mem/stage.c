/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage.c - a task's working set on its memory node: admission (reserve all of it or nothing),
 * staging (allocate, pin, fetch what it reads), unstaging (replica states after it ran), and
 * prefetch of the inputs of queued tasks.
 *
 * Before a task runs, staging makes every buffer it reads valid on the memory node it runs
 * against and pins the replicas it uses; after it ran, a writer's replica becomes MODIFIED and
 * every other copy INVALID. A pinned replica is never freed or moved. When the working set does
 * not fit, eviction (evict.c) makes room and the task waits on its device until
 * odx__tier_changed says room may have appeared; a working set that can never fit fails the task
 * with an explanation instead of hanging.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem.h"
#include "pool.h"

int odx__task_memnode(const odx__task *t)
{
	if (odx__task_caller_runs(t))
		return t->node;
	if (t->kind != ODX__TASK_KERNEL)
		return t->nargs > 0 ? odx__buffer_home(t->ctx, t->args[0].v.buffer, -1) : 0;
	return t->ctx->devices[t->device].memnode;
}

/* ---- staging --------------------------------------------------------------------------------- */

static bool stage_fetches(const odx__task *t, const odx__task *producer, const odx_buffer *b);

/* Node m's lock held. Allocates (reserved room) and pins b's replica on m for t, and queues a
 * fetch if t reads it and it is not valid there. `stale`: alloc_missing's pass was skipped
 * (odx__stage: every replica already allocated, no pool), so its one job for an allocated
 * replica is done here, under the same buffer lock as the pin. */
static int stage_one(odx__task *t, const odx__task *producer, odx_buffer *b, int m, bool reads,
		     bool stale, odx__copy_job **job, uint64_t clock)
{
	odx_context *ctx = t->ctx;
	odx__replica *r = &b->replicas[m];
	odx__fetch_waiter *w;
	int rc = 0, src;

	*job = NULL;
	/* as alloc_missing would: the buffer's home is chosen (an atomic load once it is) */
	if (stale && odx__is_host_node(ctx, m))
		odx__buffer_home(ctx, b, m);
	pthread_mutex_lock(&b->lock);
	/* a never-written buffer's replica holding bytes of a failed writer: reallocated below */
	if (stale && b->zero && r->allocated && !r->fetching &&
	    atomic_load(&r->state) == ODX__INVALID && stage_fetches(t, producer, b))
		odx__replica_free(ctx, b, m);
	/* alloc_missing allocated it under the node lock we still hold; defensive. */
	if (!r->allocated && (rc = odx__replica_alloc(ctx, b, m, b->zero)) != 0)
		goto out_unlock;
	r->pins++;
	/* The hint covers the uses already submitted; a task submitted after it ends it. */
	if (b->wont_use && t->id > b->wont_use_task)
		b->wont_use = false;
	r->last_use = b->wont_use ? 0 : clock;
	/* A copy landing in this replica (a write-back, a prefetch) is waited for even by a task
	 * that only writes it: its bytes would otherwise be overwritten by old ones. */
	if (!r->fetching && (!reads || atomic_load(&r->state) != ODX__INVALID))
		goto out_unlock;
	if (b->zero && !r->fetching) {
		odx__replica_set_state(b, m, ODX__SHARED);
		goto out_unlock;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		rc = ODX_ENOMEM;
		goto out_unlock;
	}
	if (!r->fetching) {
		src = odx__copy_pick_source(ctx, b, m);
		if (src == -1 || !(*job = odx__copy_job_new(b, src, m, ODX__COPY_FETCH))) {
			free(w);
			rc = src == -1 ? ODX_EIO : ODX_ENOMEM;
			goto out_unlock;
		}
		if (src == ODX__SRC_DISK)
			b->disk_readers++;
		else
			b->replicas[src].pins++;
		r->fetching = true;
	}
	w->task = t;
	w->next = r->waiters;
	r->waiters = w;
	atomic_fetch_add(&t->fetches, 1);
	if (!odx__task_caller_runs(t) && !t->demand_counted) {
		t->demand_counted = true;
		atomic_fetch_add(&ctx->devices[t->device].demand_fetches, 1);
	}
out_unlock:
	pthread_mutex_unlock(&b->lock);
	return rc;
}

/* Does kernel task `p` write buffer `b`? */
static bool task_writes(const odx__task *p, const odx_buffer *b)
{
	int i;

	for (i = 0; i < p->nargs; i++)
		if (p->args[i].kind == ODX_ARG_BUFFER && p->args[i].v.buffer == b &&
		    (p->args[i].access & ODX_W))
			return true;
	return false;
}

bool odx__can_stage_behind(const odx__task *t, const odx__task *producer, int m)
{
	int i;

	for (i = 0; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		bool missing;

		if (t->args[i].kind != ODX_ARG_BUFFER || !odx__task_stage_reads(t, i) ||
		    task_writes(producer, b))
			continue;
		/* Nothing can invalidate it before t runs: a writer would be ordered after t. The
		 * lock: a writer finishing elsewhere changes `zero` and the states together. */
		pthread_mutex_lock(&b->lock);
		missing = atomic_load(&b->replicas[m].state) == ODX__INVALID && !b->zero;
		pthread_mutex_unlock(&b->lock);
		if (missing)
			return false;
	}
	return true;
}

/* Is argument i a buffer that staging places on the task's node? */
static bool stages_arg(const odx__task *t, int i)
{
	if (t->args[i].kind != ODX_ARG_BUFFER || !odx__task_dep_access(t, i))
		return false;
	/* A partition switch stages its parent (its latest bytes into the host copy the parts will
	 * alias), an unpartition its parts (each one's latest bytes into its alias, all fetches
	 * at once); the other side is only ordered (partition.c). */
	if (t->kind == ODX__TASK_PARTITION)
		return i == 0;
	if (t->kind == ODX__TASK_UNPARTITION)
		return i > 0;
	/* Releasing a runtime-owned buffer needs no copy anywhere: nothing to stage. */
	return !(t->kind == ODX__TASK_DESTROY && !odx__buffer_keeps_bytes(t->args[i].v.buffer));
}

/* Is argument i the first occurrence of its buffer among the task's arguments? */
static bool first_use(const odx__task *t, int i)
{
	int j;

	if (odx__task_is_switch(t)) /* each buffer once (odx__task_dep_access) */
		return true;
	for (j = 0; j < i; j++)
		if (t->args[j].kind == ODX_ARG_BUFFER && t->args[j].v.buffer == t->args[i].v.buffer)
			return false;
	return true;
}

static void stage_fail(odx__task *t, int rc, const char *why)
{
	int expected = 0;

	if (atomic_compare_exchange_strong(&t->fetch_error, &expected, rc))
		t->fetch_msg = strdup(why);
	odx__log(t->ctx, ODX_LOG_ERROR, "task #%llu: %s", (unsigned long long)t->id, why);
}

typedef struct working_set {
	uint64_t total;       /* bytes of the task's distinct buffers */
	uint64_t charged;     /* what they count on the node (pooled: rounded sizes) */
	uint64_t missing;     /* what the ones not allocated there yet will count */
	uint64_t missing_raw; /* the same, unrounded */
} working_set;

/* Node m's lock held: the task's working set on m, and what of it is not allocated there yet. */
static void working_set_get(const odx__task *t, int m, working_set *ws)
{
	const odx__pool *pool = t->ctx->memnodes[m].pool;
	int i;

	*ws = (working_set){0};
	for (i = 0; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		uint64_t c;

		if (!stages_arg(t, i) || !first_use(t, i))
			continue;
		c = odx__pool_charge(pool, b->size);
		ws->total += b->size;
		ws->charged += c;
		if (!b->replicas[m].allocated) {
			ws->missing += c;
			ws->missing_raw += b->size;
		}
	}
}

/* Does some argument of t fetch b when staged (reads it, and the producer ahead of t on its lane
 * does not write it)? */
static bool stage_fetches(const odx__task *t, const odx__task *producer, const odx_buffer *b)
{
	int i;

	for (i = 0; i < t->nargs; i++)
		if (t->args[i].kind == ODX_ARG_BUFFER && t->args[i].v.buffer == b &&
		    stages_arg(t, i) && odx__task_stage_reads(t, i) &&
		    !(producer && task_writes(producer, b)))
			return true;
	return false;
}

/*
 * Node m's lock held, the room reserved: allocates the replicas t lacks on m before any of them
 * is pinned, so that a refusal from the driver can still turn into evictions and a retry rather
 * than a failed task. `direct`: bypass the pool (see odx__replica_alloc_as). A buffer never written
 * must read as zeros; pooled memory still holds its last user's bytes, so it gets a zero-fill
 * copy, queued on *jobs, that t and later users wait for like a fetch. On failure *failed is the
 * buffer that got no memory.
 */
static int alloc_missing(odx__task *t, const odx__task *producer, int m, bool direct,
			 odx__copy_job **jobs, odx_buffer **failed)
{
	odx_context *ctx = t->ctx;
	const odx__memnode *node = &ctx->memnodes[m];
	int i, rc = 0;

	for (i = 0; i < t->nargs && rc == 0; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx__replica *r;
		odx__copy_job *job;
		bool zero, fill;

		if (!stages_arg(t, i) || !first_use(t, i))
			continue;
		r = &b->replicas[m]; /* only now: a scalar argument's union holds no buffer */
		/* A host device sharing host node m: the buffer's home is chosen before any host
		 * replica exists (odx_buffer's `home`), near m when m has room. */
		if (odx__is_host_node(ctx, m))
			odx__buffer_home(ctx, b, m);
		pthread_mutex_lock(&b->lock);
		if (b->zero && r->allocated && !r->fetching &&
		    atomic_load(&r->state) == ODX__INVALID && stage_fetches(t, producer, b))
			odx__replica_free(ctx, b, m); /* holds bytes of a failed writer: reallocate */
		if (r->allocated) {
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		/* A write of the whole buffer from user memory needs no zeros underneath, nor does
		 * a shuffle's output (its bytes past the length it sets are not valid). */
		zero = b->zero && !((t->kind == ODX__TASK_WRITE || t->kind == ODX__TASK_SHUFFLE) &&
				    t->args[i].access == ODX_W);
		fill = zero && node->pool && !direct;
		rc = odx__replica_alloc_as(ctx, b, m, zero && !fill, direct);
		if (rc == 0 && fill) {
			job = odx__copy_job_new(b, ODX__SRC_ZERO, m, ODX__COPY_FETCH);
			if (job) {
				r->fetching = true;
				job->next = *jobs;
				*jobs = job;
			} else {
				odx__replica_free(ctx, b, m);
				rc = ODX_ENOMEM;
			}
		}
		if (rc)
			*failed = b;
		pthread_mutex_unlock(&b->lock);
	}
	return rc;
}

/* Releases the prefetch holds the task took (node m's lock held). */
static void release_holds(odx__task *t, int m)
{
	odx__device *dev = t->kind == ODX__TASK_KERNEL ? &t->ctx->devices[t->device] : NULL;
	int i;

	for (i = 0; t->hold_mask && i < t->nargs && i < 64; i++) {
		odx_buffer *b;

		if (!(t->hold_mask & (1ull << i)))
			continue;
		t->hold_mask &= ~(1ull << i);
		b = t->args[i].v.buffer;
		pthread_mutex_lock(&b->lock);
		if (b->replicas[m].holds > 0) {
			b->replicas[m].holds--;
			if (dev)
				atomic_fetch_add(&dev->prefetch_hits, 1);
		}
		pthread_mutex_unlock(&b->lock);
	}
	t->hold_mask = 0;
}

int odx__stage(odx__task *t, const odx__task *producer)
{
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t);
	odx__memnode *node = &ctx->memnodes[m];
	int i, rc = 0, room;
	odx__copy_job *jobs = NULL, *evictions = NULL;
	odx_buffer *failed = NULL;
	uint64_t missing, clock;
	working_set ws;
	bool direct, skip_alloc;
	char why[ODX__MSG_MAX];

	if (t->nargs == 0) {
		t->staged = true;
		return ODX__STAGE_READY;
	}
	clock = atomic_fetch_add_explicit(&ctx->lru_clock, 1, memory_order_relaxed) + 1;
	pthread_mutex_lock(&node->lock);
	/* A copy being written one tier down is read by that transfer: a task that writes it waits
	 * until the write-back landed (node lock held: `evicting` changes only under it). */
	for (i = 0; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;

		if (stages_arg(t, i) && b->replicas[m].evicting &&
		    (t->kind == ODX__TASK_WRITE || t->kind == ODX__TASK_PARTITION ||
		     ((t->kind == ODX__TASK_KERNEL || t->kind == ODX__TASK_SHUFFLE) &&
		      (odx__task_dep_access(t, i) & ODX_W)))) {
			pthread_mutex_unlock(&node->lock);
			atomic_fetch_add(&node->noroom, 1);
			return ODX__STAGE_NOROOM;
		}
	}
	/* Reserve before allocating, admit before running: all of the working set or nothing,
	 * so two tasks can never each hold part of what the other needs. */
	working_set_get(t, m, &ws);
	if (ws.charged > atomic_load(&node->ws_max) && ws.charged <= node->capacity)
		atomic_store(&node->ws_max, ws.charged);
	if (ws.total > node->capacity) {
		pthread_mutex_unlock(&node->lock);
		snprintf(why, sizeof(why),
			 "task #%llu '%s' (%s) needs %llu bytes on memory node %d%s%s, whose tier "
			 "holds %llu bytes (%s)",
			 (unsigned long long)t->id, t->tag, odx__task_kind_name(t, true), (unsigned long long)ws.total,
			 m, node->device ? ", " : "", node->device ? node->device->name : "",
			 (unsigned long long)node->capacity,
			 node->device ? "tier.device.limit" : "tier.host.limit");
		stage_fail(t, ODX_ENOSPC, why);
		t->staged = true;
		return ODX__STAGE_READY;
	}
	/* A working set that fits the tier only unrounded gets its missing copies outside the pool,
	 * counted at their size: the pool never fails a task that would run without it. */
	direct = node->pool && ws.charged > node->capacity;
	missing = direct ? ws.missing_raw : ws.missing;
	if (missing > 0 && atomic_load(&node->used) + missing > node->capacity) {
		why[0] = '\0';
		room = odx__tier_make_room(ctx, m, missing, t, &evictions, why, sizeof(why));
		if (room != ODX__ROOM) {
			pthread_mutex_unlock(&node->lock);
			odx__copy_start_all(ctx, evictions);
			if (room == ODX__ROOM_WAIT) {
				atomic_fetch_add(&node->noroom, 1);
				return ODX__STAGE_NOROOM;
			}
			{
				char msg[ODX__MSG_MAX];

				snprintf(msg, sizeof(msg),
					 "task #%llu '%s' (%s) cannot get %llu bytes on memory node "
					 "%d%s%s: %s",
					 (unsigned long long)t->id, t->tag, odx__task_kind_name(t, true),
					 (unsigned long long)missing, m, node->device ? ", " : "",
					 node->device ? node->device->name : "", why);
				stage_fail(t, ODX_ENOSPC, msg);
			}
			t->staged = true;
			return ODX__STAGE_READY;
		}
	}
	/* Every replica already allocated here and no pool (a chain's buffers, after its first
	 * task): alloc_missing would only lock each buffer to find that out; stage_one does the
	 * rest. Two lock round trips fewer per 2-buffer task. */
	skip_alloc = ws.missing == 0 && !node->pool;
	if (skip_alloc)
		atomic_fetch_add_explicit(&node->alloc_skips, 1, memory_order_relaxed);
	for (i = 0; !skip_alloc &&
		    (rc = alloc_missing(t, producer, m, direct, &jobs, &failed)) != 0 && node->pool &&
		    i < 4;
	     i++) {
		/* The driver refused memory that our accounting says is free (chunks too fragmented
		 * for a new one, or memory used outside ODX): evict that much more, then retry. */
		uint64_t used = atomic_load(&node->used);
		uint64_t need = odx__pool_charge(node->pool, failed->size) +
				(used < node->capacity ? node->capacity - used : 0);

		room = odx__tier_make_room(ctx, m, need, t, &evictions, why, sizeof(why));
		if (room == ODX__ROOM_WAIT) {
			pthread_mutex_unlock(&node->lock);
			odx__copy_start_all(ctx, evictions);
			odx__copy_start_all(ctx, jobs);
			atomic_fetch_add(&node->noroom, 1);
			return ODX__STAGE_NOROOM;
		}
		if (room == ODX__ROOM_NEVER)
			break;
	}
	if (rc) {
		char detail[ODX__MSG_MAX];

		pthread_mutex_unlock(&node->lock);
		odx__copy_start_all(ctx, evictions);
		odx__copy_start_all(ctx, jobs);
		odx__backend_detail_take(detail, sizeof(detail));
		snprintf(why, sizeof(why),
			 "cannot place buffer %llu (%zu bytes) on memory node %d%s%s: %s%s%s",
			 (unsigned long long)failed->id, failed->size, m, node->device ? ", " : "",
			 node->device ? node->device->name : "", odx_strerror(rc),
			 detail[0] ? ": " : "", detail);
		stage_fail(t, rc, why);
		t->staged = true;
		return ODX__STAGE_READY;
	}
	release_holds(t, m);
	t->staged = true;
	atomic_store(&t->fetches, 1);
	for (i = 0; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx__copy_job *job;

		if (!stages_arg(t, i))
			continue;
		/* What the producer ahead on the same in-order lane writes will be there when t
		 * runs: no fetch (its replica's state changes when the producer completes). */
		rc = stage_one(t, producer, b, m,
			       odx__task_stage_reads(t, i) && !(producer && task_writes(producer, b)),
			       skip_alloc && first_use(t, i), &job, clock);
		if (rc) {
			char detail[ODX__MSG_MAX];

			odx__backend_detail_take(detail, sizeof(detail));
			snprintf(why, sizeof(why),
				 "cannot place buffer %llu (%zu bytes) on memory node %d%s%s: %s%s%s",
				 (unsigned long long)b->id, b->size, m,
				 ctx->memnodes[m].device ? ", " : "",
				 ctx->memnodes[m].device ? ctx->memnodes[m].device->name : "",
				 odx_strerror(rc), detail[0] ? ": " : "", detail);
			stage_fail(t, rc, why);
			break;
		}
		if (job) {
			job->next = jobs;
			jobs = job;
		}
	}
	pthread_mutex_unlock(&node->lock);
	/* Arguments 0..i-1 are pinned; unstaging walks exactly those. */
	t->nstaged = rc ? i : t->nargs;
	odx__copy_start_all(ctx, evictions);
	odx__copy_start_all(ctx, jobs);
	if (missing > 0)
		odx__tier_kick(ctx, m);
	if (atomic_fetch_sub(&t->fetches, 1) != 1)
		return ODX__STAGE_FETCHING;
	/* Its fetches landed before this: the demand is over here, not in copy_done. */
	if (t->demand_counted) {
		t->demand_counted = false;
		atomic_fetch_sub(&ctx->devices[t->device].demand_fetches, 1);
	}
	return ODX__STAGE_READY;
}

int odx__prefetch(odx__task *t)
{
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t);
	odx__memnode *node = &ctx->memnodes[m];
	odx__device *dev = &ctx->devices[t->device];
	odx__copy_job *jobs = NULL;
	uint64_t limit, stop;
	int i, n = 0, rc;

	odx__tier_watermarks(ctx, m, &limit, &stop);
	pthread_mutex_lock(&node->lock);
	for (i = 0; i < t->nargs && i < 64; i++) {
		odx_buffer *b;

		if (!stages_arg(t, i) || !odx__task_stage_reads(t, i) || !first_use(t, i) ||
		    (t->hold_mask & (1ull << i)))
			continue;
		b = t->args[i].v.buffer;
		rc = odx__prefetch_copy(ctx, b, m, limit, &jobs);
		if (rc < 0 && rc != ODX_ENOSPC)
			break;
		if (rc != 1)
			continue;
		/* Held for t: evicted before t ran only as a last resort (node lock still held). */
		pthread_mutex_lock(&b->lock);
		b->replicas[m].holds++;
		pthread_mutex_unlock(&b->lock);
		t->hold_mask |= 1ull << i;
		n++;
	}
	pthread_mutex_unlock(&node->lock);
	if (n)
		atomic_fetch_add(&dev->prefetches, (uint64_t)n);
	odx__copy_start_all(ctx, jobs);
	return n;
}

int odx__prefetch_copy(odx_context *ctx, odx_buffer *b, int m, uint64_t limit,
		       odx__copy_job **jobs)
{
	odx__memnode *node = &ctx->memnodes[m];
	odx__replica *r = &b->replicas[m];
	odx__copy_job *job;
	int src, rc = 0;

	pthread_mutex_lock(&b->lock);
	/* Already there or on its way; never written (reads as zeros where it lands). */
	if (r->allocated || b->zero || atomic_load(&b->dead))
		goto out;
	if (atomic_load(&node->used) + odx__pool_charge(node->pool, b->size) > limit) {
		rc = ODX_ENOSPC;
		goto out;
	}
	src = odx__copy_pick_source(ctx, b, m);
	if (src == -1)
		goto out;
	job = odx__copy_job_new(b, src, m, ODX__COPY_FETCH);
	if (!job) {
		rc = ODX_ENOMEM;
		goto out;
	}
	rc = odx__replica_alloc(ctx, b, m, false);
	if (rc) {
		free(job);
		odx__transfer_end(b);
		goto out;
	}
	if (src == ODX__SRC_DISK)
		b->disk_readers++;
	else
		b->replicas[src].pins++;
	r->fetching = true;
	/* The most recently used: least-recently-used eviction keeps it for the tasks to come. */
	r->last_use = atomic_fetch_add_explicit(&ctx->lru_clock, 1, memory_order_relaxed) + 1;
	job->next = *jobs;
	*jobs = job;
	rc = 1;
out:
	pthread_mutex_unlock(&b->lock);
	return rc;
}

void odx__stage_fetched(odx_context *ctx, odx__fetch_waiter *w, int status, const char *why)
{
	odx__fetch_waiter *next;

	for (; w; w = next) {
		int expected = 0;
		bool caller;

		next = w->next;
		if (status != 0 &&
		    atomic_compare_exchange_strong(&w->task->fetch_error, &expected, status))
			w->task->fetch_msg = strdup(why);
		/* Decide before the last decrement: a caller-run task may be finished and reused
		 * by its thread as soon as the count reaches zero. */
		caller = odx__task_caller_runs(w->task);
		if (atomic_fetch_sub(&w->task->fetches, 1) == 1) {
			if (caller) {
				odx__wake_waiters(ctx); /* the thread in odx_buffer_read/write */
			} else {
				odx__device *dev = &ctx->devices[w->task->device];

				if (w->task->demand_counted) {
					w->task->demand_counted = false;
					atomic_fetch_sub(&dev->demand_fetches, 1);
				}
				odx__device_push_staged(dev, w->task);
			}
		}
		free(w);
	}
}

void odx__replica_written(odx_buffer *b, int m)
{
	odx_context *ctx = b->ctx;
	int k;

	for (k = 0; k < ctx->nmemnodes; k++)
		if (k != m)
			odx__replica_set_state(b, k, ODX__INVALID);
	odx__replica_set_state(b, m, ODX__MODIFIED);
	b->zero = false;
	b->wversion++;
	b->spill_failed = false;
	if (atomic_load(&b->disk_state) != ODX__INVALID)
		odx__tier_disk_free(ctx, b);
}

void odx__unstage(odx__task *t, int status)
{
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t);
	int i;
	bool idle = false;

	for (i = 0; i < t->nstaged; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx_access mode;
		bool writes;

		if (!stages_arg(t, i))
			continue;
		mode = odx__task_dep_access(t, i);
		writes = !t->no_effect &&
			 (((t->kind == ODX__TASK_KERNEL || t->kind == ODX__TASK_SHUFFLE) &&
			   (mode & ODX_W)) ||
			  t->kind == ODX__TASK_WRITE || t->kind == ODX__TASK_RECV);
		pthread_mutex_lock(&b->lock);
		if (writes && status == 0) {
			odx__replica_written(b, m);
		} else if (writes && (status == ODX_EKERNEL || (t->chained && t->launched) ||
				      t->kind == ODX__TASK_SHUFFLE)) {
			/* It may have written part of the replica (or, launched behind a producer that
			 * failed, written garbage; a failed shuffle, some parts): that copy is no
			 * longer valid. */
			odx__replica_set_state(b, m, ODX__INVALID);
		}
		if (--b->replicas[m].pins == 0)
			idle = true;
		pthread_mutex_unlock(&b->lock);
	}
	t->nstaged = 0;
	/* An unpinned replica can be evicted: tasks waiting for room retry (through the door). */
	if (idle)
		odx__mem_done(ctx, &(odx__mem_event){.kind = ODX__MEM_ROOM, .changed = {m}, .nchanged = 1});
}
