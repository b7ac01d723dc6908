/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buffer.c - buffers, their replicas and coherence.
 *
 * Each buffer has a replica slot per memory node in an MSI state. Before a task runs, staging
 * makes every buffer it reads valid on the memory node it runs against (fetching from a valid
 * replica on a copy lane) and pins the replicas it uses; after it ran, a writer's replica becomes
 * MODIFIED and every other copy INVALID. A pinned replica is never freed or moved. Reads, writes
 * and destruction from the API are internal tasks against the buffer's host memory node (its
 * home: host RAM of one NUMA node), so they are ordered with the tasks around them by the same
 * dependency rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "policy.h"
#include "mem/pool.h"

int odx__task_memnode(const odx__task *t)
{
	if (odx__task_caller_runs(t))
		return t->node;
	if (t->kind != ODX__TASK_KERNEL)
		return t->nargs > 0 ? odx__buffer_home(t->ctx, t->args[0].v.buffer, -1) : 0;
	return t->ctx->devices[t->device].memnode;
}

/* The host node with the most room left. */
static int roomiest_host(odx_context *ctx)
{
	uint64_t best_room = 0;
	int m, best = 0;

	for (m = 0; m < ctx->nhost; m++) {
		const odx__memnode *node = &ctx->memnodes[m];
		uint64_t used = atomic_load(&node->used);
		uint64_t room = used < node->capacity ? node->capacity - used : 0;

		if (room > best_room) {
			best_room = room;
			best = m;
		}
	}
	return best;
}

int odx__buffer_home(odx_context *ctx, odx_buffer *b, int near)
{
	int h = atomic_load_explicit(&b->home, memory_order_acquire), want, unset = -1;
	const odx__memnode *node;

	if (h >= 0)
		return h;
	if (near < 0) {
		near = odx__topo_numa_of_self(ctx->topo);
		if (near < 0 || near >= ctx->nhost)
			near = roomiest_host(ctx);
	}
	want = ctx->memnodes[near].near;
	node = &ctx->memnodes[want];
	if (atomic_load(&node->used) + b->size > node->capacity)
		want = roomiest_host(ctx);
	/* Set once: whoever comes first decides, everyone uses that. */
	if (atomic_compare_exchange_strong(&b->home, &unset, want))
		return want;
	return unset;
}

/* ---- replica memory ------------------------------------------------------------------------- */

/*
 * A device node with a pool (core/pool.c, backends of ABI 1.2) carves replicas out of a few large
 * chunks: r->mem is the chunk's handle, r->off the replica's offset in it, and the node's `used`
 * counts the pool's rounded size, so that reservations agree with what the pool will take.
 * Three cases bypass the pool with a dedicated mem_alloc of the exact size (offset 0, counted at
 * b->size, as without a pool): zero-filled memory asked through odx__replica_alloc (staging
 * zero-fills pooled memory with a copy instead, see zero_fill), a task whose working set fits
 * the tier only unrounded (stage_direct), and a pool the driver refused a chunk to even after
 * it gave back its empty ones. Freeing tells them apart by asking the pool whether the handle is
 * one of its own.
 */
static int replica_alloc_as(odx_context *ctx, odx_buffer *b, int m, bool zero, bool direct)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t used, bytes = b->size;
	int rc;

	if (!node->device) {
		/* Host memory node m is NUMA node m. */
		void *p = odx__topo_alloc_on(ctx->topo, m, b->size);

		if (!p)
			return ODX_ENOMEM;
		if (zero)
			memset(p, 0, b->size);
		r->mem = (uint64_t)(uintptr_t)p;
		r->off = 0;
	} else {
		rc = ODX_ENOSYS;
		if (node->pool && !zero && !direct) {
			rc = odx__pool_alloc(node->pool, b->size, &r->mem, &r->off);
			if (rc) {
				/* Empty chunks may be what stands in the way of a new one. */
				odx__pool_trim(node->pool);
				rc = odx__pool_alloc(node->pool, b->size, &r->mem, &r->off);
			}
			if (rc == 0)
				bytes = odx__pool_rounded_size(node->pool, b->size);
		}
		if (rc) {
			/* What the node does without a pool. */
			rc = node->device->ops->mem_alloc(node->device->bdev, b->size, zero, &r->mem);
			if (rc)
				return rc;
			r->off = 0;
		}
	}
	r->allocated = true;
	used = atomic_fetch_add(&node->used, bytes) + bytes;
	if (used > node->peak)
		node->peak = used;
	return 0;
}

int odx__replica_alloc(odx_context *ctx, odx_buffer *b, int m, bool zero)
{
	return replica_alloc_as(ctx, b, m, zero, false);
}

void odx__replica_free(odx_context *ctx, odx_buffer *b, int m)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t bytes = b->size;

	if (!r->allocated)
		return;
	if (!node->device) {
		if (!b->registered)
			odx__topo_free(ctx->topo, (void *)(uintptr_t)r->mem, b->size);
	} else if (node->pool && odx__pool_release(node->pool, r->mem, r->off, b->size)) {
		bytes = odx__pool_rounded_size(node->pool, b->size);
	} else {
		node->device->ops->mem_free(node->device->bdev, r->mem, b->size);
	}
	r->allocated = false;
	r->holds = 0;
	atomic_store(&r->state, ODX__INVALID);
	atomic_fetch_sub(&node->used, bytes);
}

void odx__replica_set_state(odx_buffer *b, int m, int state)
{
	atomic_store_explicit(&b->replicas[m].state, (uint8_t)state, memory_order_relaxed);
}

int odx__valid_copies(const odx_buffer *b)
{
	int m, n = atomic_load(&b->disk_state) != ODX__INVALID;

	for (m = 0; m < b->ctx->nmemnodes; m++)
		n += atomic_load(&b->replicas[m].state) != ODX__INVALID;
	return n;
}

/* ---- copies between memory nodes ------------------------------------------------------------ */

#define SRC_DISK (-2) /* a copy's source is the buffer's disk-tier copy */
#define SRC_ZERO (-3) /* zero-fills pooled device memory for a buffer never written */

enum copy_kind {
	COPY_FETCH = 0,     /* for tasks waiting on the destination replica */
	COPY_WRITEBACK = 1, /* eviction: a dirty device copy to host RAM, then free the source */
};

void odx__transfer_begin(odx_buffer *b)
{
	atomic_fetch_add(&b->transfers, 1);
	atomic_fetch_add(&b->ctx->transfers, 1);
}

void odx__transfer_end(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	/* b may be released once its count is zero, ctx closed once its count is: touch neither
	 * after its own decrement. */
	atomic_fetch_sub(&b->transfers, 1);
	odx__wake_waiters(ctx);
	atomic_fetch_sub(&ctx->transfers, 1);
}

static bool no_transfers(void *arg)
{
	return atomic_load(&((odx_context *)arg)->transfers) == 0;
}

void odx__transfers_drain(odx_context *ctx)
{
	while (!no_transfers(ctx))
		odx__wait_until(ctx, no_transfers, ctx, 10);
}

static odx__copy_job *job_new(odx_buffer *b, int src, int dst, int kind)
{
	odx__copy_job *job = calloc(1, sizeof(*job));

	if (!job)
		return NULL;
	odx__transfer_begin(b);
	*job = (odx__copy_job){
		.buf = b, .src = src, .dst = dst, .kind = kind, .wversion = b->wversion};
	return job;
}

/* The memory node to copy from: host RAM first (every lane can reach it), then any device, then
 * the disk tier; -1 if no valid copy exists. */
static int pick_source(const odx_context *ctx, const odx_buffer *b, int dst)
{
	int m;

	for (m = 0; m < ctx->nmemnodes; m++)
		if (m != dst && atomic_load(&b->replicas[m].state) != ODX__INVALID)
			return m;
	if (atomic_load(&b->disk_state) != ODX__INVALID)
		return SRC_DISK;
	return -1;
}

static void copy_start(odx_context *ctx, odx__copy_job *job);

static void source_release(odx_buffer *b, int src)
{
	if (src == SRC_DISK)
		b->disk_readers--;
	else if (src >= 0)
		b->replicas[src].pins--;
}

/* A host bounce buffer for a copy: blocks of the pinned staging pool when a run of free ones
 * holds it, else malloc (counted by the pool as a fallback). */
static void *bounce_get(odx_context *ctx, size_t n)
{
	void *p = odx__pinned_get(odx__tier_pinned(ctx), n);

	return p ? p : malloc(n);
}

static void bounce_put(odx_context *ctx, void *p, size_t n)
{
	if (p && !odx__pinned_put(odx__tier_pinned(ctx), p, n))
		free(p);
}

static void copy_done(void *arg, int status, const char *msg)
{
	odx__copy_job *job = arg;
	odx_buffer *b = job->buf;
	odx_context *ctx = b->ctx;
	odx__replica *dst = &b->replicas[job->dst];
	odx__memnode *snode = job->src >= 0 ? &ctx->memnodes[job->src] : NULL;
	odx__fetch_waiter *w, *next;
	odx__copy_job *refetch = NULL;
	bool stale = job->wversion != b->wversion;
	bool freed = false;

	bounce_put(ctx, job->bounce, b->size);
	job->bounce = NULL;
	/* A write-back frees its source: that is the source node's business (its lock first). */
	if (job->kind == COPY_WRITEBACK)
		pthread_mutex_lock(&snode->lock);
	pthread_mutex_lock(&b->lock);
	stale = job->wversion != b->wversion; /* read under the lock */
	dst->fetching = false;
	if (status == 0 && !stale) {
		odx__replica_set_state(b, job->dst, ODX__SHARED);
		/* Two valid copies now: neither is the only one. */
		if (job->src >= 0 && atomic_load(&b->replicas[job->src].state) == ODX__MODIFIED)
			odx__replica_set_state(b, job->src, ODX__SHARED);
	}
	source_release(b, job->src);
	if (job->kind == COPY_WRITEBACK) {
		odx__replica *src = &b->replicas[job->src];

		src->evicting = false;
		snode->evicting -= odx__pool_charge(snode->pool, b->size);
		/* Freed only if the host copy is now valid and nobody started using the source. */
		if (status == 0 && !stale && src->pins == 0 && src->holds == 0 && src->allocated) {
			odx__replica_free(ctx, b, job->src);
			freed = true;
			atomic_fetch_add(&snode->writebacks, 1);
			atomic_fetch_add(&snode->evicted_bytes, b->size);
		}
	}
	w = dst->waiters;
	dst->waiters = NULL;
	/* A write landed while this copy ran, so it carries old bytes: tasks waiting for the
	 * destination get a new copy of the current data instead. */
	if (w && status == 0 && stale) {
		int src = pick_source(ctx, b, job->dst);

		if (src != -1 && (refetch = job_new(b, src, job->dst, COPY_FETCH)) != NULL) {
			if (src == SRC_DISK)
				b->disk_readers++;
			else
				b->replicas[src].pins++;
			dst->fetching = true;
			dst->waiters = w;
			w = NULL;
		} else {
			status = ODX_EIO;
			msg = "the buffer changed during the copy and no valid copy is left";
		}
	}
	pthread_mutex_unlock(&b->lock);
	if (job->kind == COPY_WRITEBACK)
		pthread_mutex_unlock(&snode->lock);

	if (status == 0 && job->src != SRC_ZERO) {
		int s = job->src >= 0 ? job->src : job->dst; /* reloads count on their node */

		atomic_fetch_add(&ctx->bytes_copied[s * ctx->nmemnodes + job->dst], b->size);
		atomic_fetch_add(&ctx->copies, 1);
		/* A Lua policy's transfer estimates come from measured links: copies big enough
		 * that their time is bandwidth, not latency (from issue, so a queued copy reads
		 * slower than the link: an estimate on the safe side). */
		if (ctx->policy && job->src >= 0 && job->t_issue && b->size >= (64u << 10)) {
			uint64_t ns = odx__now_ns() - job->t_issue;

			if (ns > 0)
				odx__policy_set_bandwidth(ctx, job->src, job->dst,
							  (double)b->size * 1e9 / (double)ns);
		}
	} else if (status != 0) {
		odx__log(ctx, ODX_LOG_ERROR, "copy of buffer %llu from %s %d to memory node %d failed: %s",
			 (unsigned long long)b->id,
			 job->src == SRC_DISK	? "disk tier"
			 : job->src == SRC_ZERO ? "zero pages"
						: "memory node",
			 job->src, job->dst, msg ? msg : "");
	}
	odx__tier_progress(ctx);
	if (ctx->tracing && job->lane) {
		uint64_t now = odx__now_ns();
		uint64_t t0 = job->t_issue > job->lane->copy_lane_free_ns
				      ? job->t_issue
				      : job->lane->copy_lane_free_ns;

		odx__trace_span(job->lane->copy_trace,
				job->kind == COPY_WRITEBACK ? "write-back"
				: job->src == SRC_DISK	    ? "reload"
				: job->src == SRC_ZERO	    ? "zero-fill"
							    : "copy",
				"copy", t0, now, b->id);
		job->lane->copy_lane_free_ns = now;
	}
	for (; w; w = next) {
		int expected = 0;
		bool caller;

		next = w->next;
		if (status != 0 &&
		    atomic_compare_exchange_strong(&w->task->fetch_error, &expected, status)) {
			char why[ODX__MSG_MAX];

			snprintf(why, sizeof(why), "copy of buffer %llu from %s %d to memory node %d: %s",
				 (unsigned long long)b->id,
				 job->src == SRC_DISK	? "the disk tier"
				 : job->src == SRC_ZERO ? "zero pages"
							: "memory node",
				 job->src, job->dst, msg ? msg : odx_strerror(status));
			w->task->fetch_msg = strdup(why);
		}
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
	if (job->kind == COPY_WRITEBACK)
		odx__tier_changed(ctx, job->src);
	if (freed || odx__is_host_node(ctx, job->dst))
		odx__tier_changed(ctx, odx__home(b));
	free(job);
	if (refetch)
		copy_start(ctx, refetch);
	/* A copy lane has one fewer demand copy, or room appeared: prefetch requests may start.
	 * Before the transfer's end: ctx may be closed once the count drops. */
	odx__prefetch_pump(ctx);
	odx__transfer_end(b); /* the last access to b and ctx */
}

/* Second hop of a copy staged through host memory: the bounce buffer to the destination. */
static void bounce_done(void *arg, int status, const char *msg)
{
	odx__copy_job *job = arg;
	odx__device *ddev = job->buf->ctx->memnodes[job->dst].device;
	odx__replica *dst = &job->buf->replicas[job->dst];
	int rc;

	if (status) {
		copy_done(job, status, msg);
		return;
	}
	rc = ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off, job->bounce, job->buf->size,
				 copy_done, job);
	if (rc)
		copy_done(job, rc, "could not queue the second hop of a staged copy");
}

static void copy_start(odx_context *ctx, odx__copy_job *job)
{
	odx_buffer *b = job->buf;
	odx__replica *dst = &b->replicas[job->dst];
	odx__replica *src = job->src >= 0 ? &b->replicas[job->src] : NULL;
	odx__device *sdev = job->src >= 0 ? ctx->memnodes[job->src].device : NULL;
	odx__device *ddev = ctx->memnodes[job->dst].device;
	int rc;

	job->t_issue = ctx->tracing || ctx->policy ? odx__now_ns() : 0;
	if (job->src == SRC_ZERO) {
		/* Zero pages to pooled memory (whose last user's bytes are still there). */
		const void *zeros = odx__tier_zeros(ctx, b->size);

		job->lane = ddev;
		rc = zeros ? ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off, zeros, b->size,
						 copy_done, job)
			   : ODX_ENOMEM;
	} else if (job->src == SRC_DISK) {
		/* From the disk tier: straight into host RAM, or through a bounce buffer. */
		job->lane = ddev;
		if (!ddev) {
			rc = odx__tier_reload(ctx, b, (void *)(uintptr_t)dst->mem, copy_done, job);
		} else {
			job->bounce = bounce_get(ctx, b->size);
			rc = job->bounce ? odx__tier_reload(ctx, b, job->bounce, bounce_done, job)
					 : ODX_ENOMEM;
		}
	} else if (!sdev) {
		job->lane = ddev;
		rc = ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off,
					 (const char *)(uintptr_t)src->mem + src->off, b->size,
					 copy_done, job);
	} else if (!ddev) {
		job->lane = sdev;
		rc = sdev->ops->copy_d2h(sdev->bdev, (char *)(uintptr_t)dst->mem + dst->off, src->mem,
					 src->off, b->size, copy_done, job);
	} else if (sdev->ops == ddev->ops &&
		   ODX_BACKEND_HAS_OP(ddev->ops, odx_backend_ops, copy_d2d)) {
		job->lane = ddev;
		rc = ddev->ops->copy_d2d(ddev->bdev, dst->mem, dst->off, sdev->bdev, src->mem,
					 src->off, b->size, copy_done, job);
	} else {
		/* Different backends (or no direct path): through a host bounce buffer. */
		job->lane = sdev;
		job->bounce = bounce_get(ctx, b->size);
		rc = job->bounce ? sdev->ops->copy_d2h(sdev->bdev, job->bounce, src->mem, src->off,
						       b->size, bounce_done, job)
				 : ODX_ENOMEM;
	}
	if (rc)
		copy_done(job, rc, "could not queue the copy");
}

void odx__copy_start_all(odx_context *ctx, odx__copy_job *jobs)
{
	while (jobs) {
		odx__copy_job *next = jobs->next;

		jobs->next = NULL;
		copy_start(ctx, jobs);
		jobs = next;
	}
}

/* With the source node's lock, the buffer's host node's lock and the buffer's lock held, and the
 * host replica allocated: the dirty copy on `src` goes to host RAM; the source is freed when that
 * landed. */
odx__copy_job *odx__copy_writeback(odx_buffer *b, int src)
{
	int home = odx__home(b);
	odx__copy_job *job = job_new(b, src, home, COPY_WRITEBACK);

	if (!job)
		return NULL;
	b->replicas[src].pins++;
	b->replicas[src].evicting = true;
	b->replicas[home].fetching = true;
	b->ctx->memnodes[src].evicting += odx__pool_charge(b->ctx->memnodes[src].pool, b->size);
	return job;
}

/* ---- staging -------------------------------------------------------------------------------- */

/* Node m's lock held. Allocates (reserved room) and pins b's replica on m for t, and queues a
 * fetch if t reads it and it is not valid there. */
static int stage_one(odx__task *t, odx_buffer *b, int m, bool reads, odx__copy_job **job,
		     uint64_t clock)
{
	odx_context *ctx = t->ctx;
	odx__replica *r = &b->replicas[m];
	odx__fetch_waiter *w;
	int rc = 0, src;

	*job = NULL;
	pthread_mutex_lock(&b->lock);
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
		src = pick_source(ctx, b, m);
		if (src == -1 || !(*job = job_new(b, src, m, COPY_FETCH))) {
			free(w);
			rc = src == -1 ? ODX_EIO : ODX_ENOMEM;
			goto out_unlock;
		}
		if (src == SRC_DISK)
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
	/* Releasing a runtime-owned buffer needs no copy anywhere: nothing to stage. */
	return !(t->kind == ODX__TASK_DESTROY && !t->args[i].v.buffer->registered);
}

/* Is argument i the first occurrence of its buffer among the task's arguments? */
static bool first_use(const odx__task *t, int i)
{
	int j;

	for (j = 0; j < i; j++)
		if (t->args[j].kind == ODX_ARG_BUFFER && t->args[j].v.buffer == t->args[i].v.buffer)
			return false;
	return true;
}

static const char *task_label(const odx__task *t)
{
	if (t->kind == ODX__TASK_KERNEL)
		return t->kernel->name;
	return t->kind == ODX__TASK_READ ? "buffer read" : t->kind == ODX__TASK_WRITE ? "buffer write"
										    : "buffer destroy";
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
 * than a failed task. `direct`: bypass the pool (see replica_alloc_as). A buffer never written
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
		pthread_mutex_lock(&b->lock);
		if (b->zero && r->allocated && !r->fetching &&
		    atomic_load(&r->state) == ODX__INVALID && stage_fetches(t, producer, b))
			odx__replica_free(ctx, b, m); /* holds bytes of a failed writer: reallocate */
		if (r->allocated) {
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		/* A write of the whole buffer from user memory needs no zeros underneath. */
		zero = b->zero && !(t->kind == ODX__TASK_WRITE && t->args[i].access == ODX_W);
		fill = zero && node->pool && !direct;
		rc = replica_alloc_as(ctx, b, m, zero && !fill, direct);
		if (rc == 0 && fill) {
			job = job_new(b, SRC_ZERO, m, COPY_FETCH);
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
	bool direct;
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
		    (t->kind == ODX__TASK_WRITE ||
		     (t->kind == ODX__TASK_KERNEL && (odx__task_dep_access(t, i) & ODX_W)))) {
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
			 (unsigned long long)t->id, t->tag, task_label(t), (unsigned long long)ws.total,
			 m, node->device ? ", " : "", node->device ? node->device->name : "",
			 (unsigned long long)node->capacity,
			 m ? "tier.device.limit" : "tier.host.limit");
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
					 (unsigned long long)t->id, t->tag, task_label(t),
					 (unsigned long long)missing, m, node->device ? ", " : "",
					 node->device ? node->device->name : "", why);
				stage_fail(t, ODX_ENOSPC, msg);
			}
			t->staged = true;
			return ODX__STAGE_READY;
		}
	}
	for (i = 0; (rc = alloc_missing(t, producer, m, direct, &jobs, &failed)) != 0 && node->pool &&
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
		rc = stage_one(t, b, m,
			       odx__task_stage_reads(t, i) && !(producer && task_writes(producer, b)),
			       &job, clock);
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
	src = pick_source(ctx, b, m);
	if (src == -1)
		goto out;
	job = job_new(b, src, m, COPY_FETCH);
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
	if (src == SRC_DISK)
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

void odx__unstage(odx__task *t, int status)
{
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t);
	int i, k;
	bool idle = false;

	for (i = 0; i < t->nstaged; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx_access mode;
		bool writes;

		if (!stages_arg(t, i))
			continue;
		mode = odx__task_dep_access(t, i);
		writes = !t->no_effect && ((t->kind == ODX__TASK_KERNEL && (mode & ODX_W)) ||
					   t->kind == ODX__TASK_WRITE || t->kind == ODX__TASK_RECV);
		pthread_mutex_lock(&b->lock);
		if (writes && status == 0) {
			for (k = 0; k < ctx->nmemnodes; k++)
				if (k != m)
					odx__replica_set_state(b, k, ODX__INVALID);
			odx__replica_set_state(b, m, ODX__MODIFIED);
			b->zero = false;
			b->wversion++;
			b->spill_failed = false;
			if (atomic_load(&b->disk_state) != ODX__INVALID)
				odx__tier_disk_free(ctx, b);
		} else if (writes && (status == ODX_EKERNEL || (t->chained && t->launched))) {
			/* It may have written part of the replica (or, launched behind a producer that
			 * failed, written garbage): that copy is no longer valid. */
			odx__replica_set_state(b, m, ODX__INVALID);
		}
		if (--b->replicas[m].pins == 0)
			idle = true;
		pthread_mutex_unlock(&b->lock);
	}
	t->nstaged = 0;
	if (idle)
		odx__tier_changed(ctx, m);
}

/* ---- buffers -------------------------------------------------------------------------------- */

/*
 * Buffer structs are never handed back to malloc before close: they come from slabs of
 * BUF_SLAB, and a released one waits in a FIFO quarantine until ODX__BUF_QUARANTINE others
 * were released after it. A stale handle therefore points at mapped memory marked destroyed
 * (refused by odx__buffer_check) for that long, and memory stays bounded by the most buffers
 * alive at once plus the quarantine, however many are created over a run.
 */
#define BUF_SLAB 64

static size_t buffer_bytes(const odx_context *ctx)
{
	size_t n = sizeof(odx_buffer) + (size_t)ctx->nmemnodes * sizeof(odx__replica);

	return (n + 63) & ~(size_t)63; /* each struct on its own cache lines */
}

/* A struct for a new buffer (objects_lock held): the oldest quarantined one once the
 * quarantine is full, else the next one carved from a slab. */
static odx_buffer *buffer_slot_get(odx_context *ctx)
{
	odx_buffer *b;

	if (ctx->bufq_n >= ODX__BUF_QUARANTINE) {
		b = ctx->bufq_head;
		ctx->bufq_head = b->next;
		if (!ctx->bufq_head)
			ctx->bufq_tail = NULL;
		ctx->bufq_n--;
		return b;
	}
	if (ctx->buf_carve_left == 0) {
		char *slab;

		if (ctx->nbuf_slabs == ctx->capbuf_slabs) {
			int cap = ctx->capbuf_slabs ? 2 * ctx->capbuf_slabs : 16;
			void **v = realloc(ctx->buf_slabs, (size_t)cap * sizeof(*v));

			if (!v)
				return NULL;
			ctx->buf_slabs = v;
			ctx->capbuf_slabs = cap;
		}
		slab = malloc(BUF_SLAB * buffer_bytes(ctx));
		if (!slab)
			return NULL;
		ctx->buf_slabs[ctx->nbuf_slabs++] = slab;
		ctx->buf_carve = slab;
		ctx->buf_carve_left = BUF_SLAB;
	}
	b = (odx_buffer *)ctx->buf_carve;
	ctx->buf_carve += buffer_bytes(ctx);
	ctx->buf_carve_left--;
	return b;
}

/* Its struct joins the quarantine's tail, still marked destroyed. */
static void buffer_slot_put(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	atomic_store(&b->destroyed, true);
	pthread_mutex_lock(&ctx->objects_lock);
	b->next = NULL;
	if (ctx->bufq_tail)
		ctx->bufq_tail->next = b;
	else
		ctx->bufq_head = b;
	ctx->bufq_tail = b;
	ctx->bufq_n++;
	pthread_mutex_unlock(&ctx->objects_lock);
}

int odx__buffer_check(const odx_buffer *buf, const char *fn)
{
	if (!buf)
		return ODX_EINVAL;
	if (atomic_load_explicit(&buf->destroyed, memory_order_acquire))
		return odx__fail(buf->ctx, ODX_EINVAL,
				 "%s: buffer %llu was destroyed (odx_buffer_destroy or odx_close): "
				 "its handle must not be used again",
				 fn, (unsigned long long)buf->id);
	return 0;
}

static odx_buffer *buffer_new(odx_context *ctx, size_t size)
{
	odx_buffer *b;

	pthread_mutex_lock(&ctx->objects_lock);
	b = buffer_slot_get(ctx);
	pthread_mutex_unlock(&ctx->objects_lock);
	if (!b)
		return NULL;
	memset(b, 0, buffer_bytes(ctx));
	b->ctx = ctx;
	b->id = atomic_fetch_add(&ctx->next_buffer_id, 1) + 1;
	b->size = size;
	b->home_rank = 0;
	atomic_init(&b->home, ctx->nhost == 1 ? 0 : -1);
	b->zero = true;
	pthread_mutex_init(&b->lock, NULL);
	pthread_mutex_lock(&ctx->objects_lock);
	b->next = ctx->buffers;
	if (ctx->buffers)
		ctx->buffers->prev = b;
	ctx->buffers = b;
	pthread_mutex_unlock(&ctx->objects_lock);
	return b;
}

static void buffer_unlist(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	pthread_mutex_lock(&ctx->objects_lock);
	if (b->prev)
		b->prev->next = b->next;
	else
		ctx->buffers = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->prev = b->next = NULL;
	pthread_mutex_unlock(&ctx->objects_lock);
}

ODX_API int odx_buffer_create(odx_context *ctx, size_t size, unsigned flags, odx_buffer **out)
{
	odx_buffer *b;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, size > 0, "size");
	ODX__CHECK_ARG(ctx, flags == 0, "flags");
	ODX__CHECK_ARG(ctx, out, "out");
	{
		/* Some tier must be able to hold it whole. */
		uint64_t largest = odx__tier_disk_capacity(ctx);
		int m;

		for (m = 0; m < ctx->nmemnodes; m++)
			if (ctx->memnodes[m].capacity > largest)
				largest = ctx->memnodes[m].capacity;
		if (size > largest)
			return odx__fail(ctx, ODX_ENOSPC,
					 "odx_buffer_create: a buffer of %zu bytes is larger than "
					 "every memory tier (the largest holds %llu bytes; see "
					 "tier.device.limit, tier.host.limit, tier.disk.limit)",
					 size, (unsigned long long)largest);
	}
	b = buffer_new(ctx, size);
	if (!b)
		return odx__fail(ctx, ODX_ENOMEM, "odx_buffer_create: out of memory (%zu bytes)",
				 size);
	*out = b;
	return 0;
}

/* Lets every device that can page-lock the user's memory do so, for fast copies (ABI 1.3). */
static void host_register(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	int d, rc;

	for (d = 0; d < ctx->ndevices && d < 64; d++) {
		odx__device *dev = &ctx->devices[d];

		if (!ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, host_register) ||
		    !ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, host_unregister))
			continue;
		rc = dev->ops->host_register(dev->bdev, b->user_ptr, b->size);
		if (rc == 0)
			b->host_registered |= 1ull << d;
		else if (rc != ODX_ENOSYS)
			odx__log(ctx, ODX_LOG_WARN,
				 "odx_buffer_register: device %d (%s) could not page-lock %zu bytes "
				 "at %p (%s): its copies of buffer %llu go through bounce buffers",
				 d, dev->name, b->size, b->user_ptr, odx_strerror(rc),
				 (unsigned long long)b->id);
	}
}

static void host_unregister(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	int d;

	for (d = 0; d < ctx->ndevices && d < 64; d++)
		if (b->host_registered & (1ull << d))
			ctx->devices[d].ops->host_unregister(ctx->devices[d].bdev, b->user_ptr,
							     b->size);
	b->host_registered = 0;
}

ODX_API int odx_buffer_register(odx_context *ctx, void *ptr, size_t size, unsigned flags,
				odx_buffer **out)
{
	odx_buffer *b;
	int home;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, ptr, "ptr");
	ODX__CHECK_ARG(ctx, size > 0, "size");
	ODX__CHECK_ARG(ctx, flags == 0, "flags");
	ODX__CHECK_ARG(ctx, out, "out");
	b = buffer_new(ctx, size);
	if (!b)
		return odx__fail(ctx, ODX_ENOMEM, "odx_buffer_register: out of memory");
	/* The user's memory is the host replica and, for now, the only valid copy; its host node
	 * is the NUMA node its pages are on (where that can be told). */
	home = ctx->nhost == 1 ? 0 : odx__topo_numa_of_area(ctx->topo, ptr, size);
	atomic_store(&b->home, home >= 0 && home < ctx->nhost ? home : 0);
	home = odx__home(b);
	b->registered = true;
	b->user_ptr = ptr;
	b->zero = false;
	b->replicas[home].allocated = true;
	b->replicas[home].mem = (uint64_t)(uintptr_t)ptr;
	odx__replica_set_state(b, home, ODX__MODIFIED);
	/* User memory counts against host RAM but is never evicted (it is the user's). */
	atomic_fetch_add(&ctx->memnodes[home].used, size);
	host_register(b);
	*out = b;
	return 0;
}

ODX_API size_t odx_buffer_size(const odx_buffer *buf)
{
	return odx__buffer_check(buf, "odx_buffer_size") == 0 ? buf->size : 0;
}

static bool ready_or_done(void *arg)
{
	odx__task *t = arg;

	return atomic_load(&t->exec) == ODX__EXEC_READY || atomic_load(&t->done);
}

static bool fetched(void *arg)
{
	return atomic_load(&((odx__task *)arg)->fetches) == 0;
}

typedef struct epoch_wait {
	odx_context *ctx;
	uint64_t seen;
} epoch_wait;

/* Something moved or completed since `seen`: room may have appeared. */
static bool progressed(void *arg)
{
	epoch_wait *e = arg;

	return atomic_load(&e->ctx->progress) != e->seen;
}

/*
 * The memory node that a read or write (predecessors finished) copies from or to. Host RAM
 * whenever it holds a copy worth using; otherwise the bytes move in one hop between user memory
 * and a device's copy, with no host copy in between (one copy instead of two, and no host memory
 * for a buffer that lives on a device):
 *  - a read, from a device holding a valid copy, when host RAM holds none;
 *  - a write, into the device copy the buffer already has (the most recently used one), which
 *    must be valid unless the write covers the whole buffer;
 *  - a whole-buffer write of a buffer with no copy anywhere, when the context has one device
 *    memory node and it has room below the monitor's start watermark (where its first task will
 *    most likely run).
 * Registered buffers stay on the user's memory. tier.direct_access = false: always host RAM.
 */
static int access_node(const odx__task *t)
{
	odx_buffer *b = t->args[0].v.buffer;
	odx_context *ctx = t->ctx;
	bool whole = t->args[0].access == ODX_W;
	uint64_t best_use = 0;
	bool anywhere;
	int m, home = odx__home(b), best = -1, dev0 = ctx->nhost;

	if (!ctx->direct_access || b->registered || ctx->nmemnodes == ctx->nhost)
		return odx__buffer_home(ctx, b, -1);
	pthread_mutex_lock(&b->lock);
	anywhere = b->replicas[home].allocated || atomic_load(&b->disk_state) != ODX__INVALID;
	for (m = dev0; m < ctx->nmemnodes; m++) {
		const odx__replica *r = &b->replicas[m];
		const odx__device *dev = ctx->memnodes[m].device;
		bool valid = atomic_load(&r->state) != ODX__INVALID;

		anywhere |= r->allocated;
		if (!r->allocated || !dev || atomic_load(&dev->lost) || r->last_use < best_use)
			continue;
		if (t->kind == ODX__TASK_READ ? valid && !r->fetching
					      : (whole || valid) && !r->evicting) {
			best = m;
			best_use = r->last_use;
		}
	}
	if (t->kind == ODX__TASK_READ && atomic_load(&b->replicas[home].state) != ODX__INVALID)
		best = -1;
	pthread_mutex_unlock(&b->lock);
	if (t->kind == ODX__TASK_WRITE && whole && !anywhere && ctx->nmemnodes == dev0 + 1 &&
	    ctx->memnodes[dev0].device && !atomic_load(&ctx->memnodes[dev0].device->lost)) {
		const odx__memnode *node = &ctx->memnodes[dev0];
		uint64_t start, stop;

		odx__tier_watermarks(ctx, dev0, &start, &stop);
		if (atomic_load(&node->used) + odx__pool_charge(node->pool, b->size) <= start)
			best = dev0;
	}
	/* Host RAM: the buffer's host node (chosen now if it has none yet). */
	return best >= 0 ? best : odx__buffer_home(ctx, b, -1);
}

typedef struct direct_copy {
	odx_context *ctx;
	_Atomic bool done;
	int status;
	char msg[ODX__MSG_MAX];
} direct_copy;

static void direct_copy_done(void *arg, int status, const char *msg)
{
	direct_copy *dc = arg;
	odx_context *ctx = dc->ctx;

	dc->status = status;
	if (status)
		snprintf(dc->msg, sizeof(dc->msg), "%s", msg ? msg : odx_strerror(status));
	/* The caller may return as soon as it sees `done`: dc is not touched after it. */
	atomic_store(&dc->done, true);
	odx__wake_waiters(ctx);
}

static bool direct_copied(void *arg)
{
	return atomic_load(&((direct_copy *)arg)->done);
}

/* A staged read or write on device node t->node: one copy between user memory and the device
 * replica: a memcpy through the backend's map, else the backend's blocking copy, else a copy
 * queued on its copy lane and waited for here. `after`: queued behind the launches on the
 * device's compute lane that it waits for (copy_sync_after; see host_access). */
static int direct_access(odx__task *t, bool after)
{
	odx_context *ctx = t->ctx;
	odx_buffer *b = t->args[0].v.buffer;
	int m = t->node;
	odx__replica *r = &b->replicas[m];
	odx__device *dev = ctx->memnodes[m].device;
	direct_copy dc = {.ctx = ctx};
	uint64_t t0 = ctx->tracing ? odx__now_ns() : 0;
	void *map;
	int rc;

	odx__transfer_begin(b);
	if (after) {
		/* The backend waits for the launches and the copy at once: one sleep. */
		rc = dev->ops->copy_sync_after(dev->bdev, t->kind == ODX__TASK_WRITE, r->mem,
					       r->off + t->host_off, t->host_ptr, t->host_len,
					       dc.msg, sizeof(dc.msg));
		dc.status = rc;
		dc.done = true;
		atomic_fetch_add_explicit(&dev->copied_behind, 1, memory_order_relaxed);
	} else if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, mem_map) &&
		   dev->ops->mem_map(dev->bdev, r->mem, &map) == 0) {
		/* Mapped: nothing of the device touches these bytes now (the access's predecessors
		 * finished), so a plain memcpy on this thread is the whole copy. */
		char *p = (char *)map + r->off + t->host_off;

		if (t->kind == ODX__TASK_READ)
			memcpy(t->host_ptr, p, t->host_len);
		else
			memcpy(p, t->host_ptr, t->host_len);
		dc.done = true;
	} else if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, copy_sync)) {
		/* The backend waits for its own copy: no callback, no hand-off to this thread. */
		rc = dev->ops->copy_sync(dev->bdev, t->kind == ODX__TASK_WRITE, r->mem,
					 r->off + t->host_off, t->host_ptr, t->host_len, dc.msg,
					 sizeof(dc.msg));
		dc.status = rc;
		dc.done = true;
	}
	if (dc.done) {
		rc = dc.status;
	} else {
		rc = t->kind == ODX__TASK_READ
			     ? dev->ops->copy_d2h(dev->bdev, t->host_ptr, r->mem,
						  r->off + t->host_off, t->host_len,
						  direct_copy_done, &dc)
			     : dev->ops->copy_h2d(dev->bdev, r->mem, r->off + t->host_off,
						  t->host_ptr, t->host_len, direct_copy_done, &dc);
		if (rc == 0) {
			odx__wait_app(ctx, direct_copied, &dc, -1);
			rc = dc.status;
		} else {
			snprintf(dc.msg, sizeof(dc.msg), "the copy could not be queued");
		}
	}
	if (rc == 0) {
		int home = odx__home(b);
		int from = t->kind == ODX__TASK_READ ? m : home;
		int to = t->kind == ODX__TASK_READ ? home : m;

		atomic_fetch_add(&ctx->bytes_copied[from * ctx->nmemnodes + to], t->host_len);
		atomic_fetch_add(&ctx->copies, 1);
		odx__tier_progress(ctx);
		if (ctx->tracing)
			odx__trace_span(dev->copy_trace,
					t->kind == ODX__TASK_READ ? "read" : "write", "copy", t0,
					odx__now_ns(), b->id);
	} else {
		char why[ODX__MSG_MAX];
		bool other = false;
		int k;

		/* A failed write may have left part of its bytes: that copy is no longer the
		 * buffer's unless it is the only one left. */
		pthread_mutex_lock(&b->lock);
		for (k = 0; k < ctx->nmemnodes; k++)
			other |= k != m && atomic_load(&b->replicas[k].state) != ODX__INVALID;
		if (t->kind == ODX__TASK_WRITE && other)
			odx__replica_set_state(b, m, ODX__INVALID);
		pthread_mutex_unlock(&b->lock);
		snprintf(why, sizeof(why), "%s %s %d (%s): %s%s",
			 t->kind == ODX__TASK_READ ? "copy from" : "copy to", "device",
			 dev->index, dev->name, dc.msg,
			 t->kind == ODX__TASK_WRITE && !other
				 ? "; the bytes written may be partly there"
				 : "");
		t->fetch_msg = strdup(why);
	}
	odx__transfer_end(b);
	return rc;
}

/* A read queued behind its producer lands in a bounce buffer first and reaches `dst` only once
 * the producer succeeded (odx_buffer_read leaves `dst` untouched when it failed): worth it for
 * the small reads whose second sleep it saves, not for large ones, where the copy dominates. */
#define ODX__BEHIND_READ_MAX ((size_t)256 << 10)

/*
 * The memory node of a read or write that can be copied behind its unfinished predecessors on
 * their device's compute lane (t->after_dev, from odx__task_submit), or -1. The device must offer
 * copy_sync_after (ABI 1.5), and the buffer must have the copy there that the access would use
 * anyway once they finished: for a read, the one its producer writes; for a write, the one the
 * kernels before it read (valid, or overwritten whole).
 */
static int behind_node(const odx__task *t)
{
	odx_context *ctx = t->ctx;
	odx_buffer *b = t->args[0].v.buffer;
	const odx__device *dev;
	const odx__replica *r;
	bool ok;

	if (t->after_dev < 0 || !ctx->direct_access || b->registered ||
	    (t->kind == ODX__TASK_READ && t->host_len > ODX__BEHIND_READ_MAX))
		return -1;
	dev = &ctx->devices[t->after_dev];
	if (!ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, copy_sync_after) ||
	    atomic_load(&dev->lost))
		return -1;
	r = &b->replicas[dev->memnode];
	pthread_mutex_lock(&b->lock);
	ok = r->allocated && !r->fetching && !r->evicting &&
	     (t->kind == ODX__TASK_READ ? t->after_producer != NULL
					 : t->args[0].access == ODX_W ||
						   atomic_load(&r->state) != ODX__INVALID);
	pthread_mutex_unlock(&b->lock);
	return ok ? dev->memnode : -1;
}

static bool exec_ready(void *arg)
{
	return atomic_load(&((odx__task *)arg)->exec) == ODX__EXEC_READY;
}

/* Runs a read or write whose predecessors finished, on the calling thread: stage the copy it
 * uses (waiting for a copy from another node if needed), copy the bytes, complete. With
 * `behind` >= 0 (behind_node) its predecessors may still run: the copy is queued behind them,
 * and the task completes only once they have (a read whose producer failed fails with it). */
static int host_access_run(odx__task *t, int behind)
{
	odx_buffer *b = t->args[0].v.buffer;
	void *user = t->host_ptr, *bounce = NULL;
	char *replica0;
	bool read_behind;
	int rc;

	t->node = behind >= 0 ? behind : access_node(t);
	for (;;) {
		epoch_wait e = {.ctx = t->ctx, .seen = atomic_load(&t->ctx->progress)};

		/* Behind a producer: what it writes there needs no fetch. */
		rc = odx__stage(t, behind >= 0 ? t->after_producer : NULL);
		if (rc != ODX__STAGE_NOROOM)
			break;
		/* Host RAM is full: evictions (spills) are under way; retry when something moved.
		 * The timeout is only a safety net: progress wakes this thread. */
		odx__wait_until(t->ctx, progressed, &e, 100);
	}
	if (rc == ODX__STAGE_FETCHING)
		odx__wait_app(t->ctx, fetched, t, -1);
	rc = atomic_load(&t->fetch_error);
	/* A read behind its producer goes into a bounce first: `dst` stays untouched if the
	 * producer fails. Without memory for one, it copies once the producer finished. */
	read_behind = behind >= 0 && t->kind == ODX__TASK_READ;
	if (rc == 0 && read_behind && (bounce = malloc(t->host_len)) != NULL)
		t->host_ptr = bounce;
	if (rc != 0 || (read_behind && !bounce)) {
		/* nothing to copy now */
	} else if (!odx__is_host_node(t->ctx, t->node)) {
		rc = direct_access(t, behind >= 0);
	} else {
		replica0 = (char *)(uintptr_t)b->replicas[t->node].mem + t->host_off;
		if (t->kind == ODX__TASK_READ)
			memcpy(t->host_ptr, replica0, t->host_len);
		else
			memcpy(replica0, t->host_ptr, t->host_len);
	}
	t->host_ptr = user;
	if (behind >= 0) {
		/* Their completions update the replicas' states before this one does. */
		odx__wait_app(t->ctx, exec_ready, t, -1);
		if (rc == 0)
			rc = atomic_load(&t->cancel);
	}
	if (rc == 0 && read_behind && bounce)
		memcpy(user, bounce, t->host_len);
	else if (rc == 0 && read_behind)
		rc = direct_access(t, false);
	free(bounce);
	odx__unstage(t, rc);
	odx__task_complete(t, rc, t->fetch_msg);
	return rc;
}

/* Runs a read or a write as an internal task: ordered with the tasks around it by the same
 * dependency rules, but executed by the calling thread, which waits anyway (no worker hand-off). */
static int host_access(odx_buffer *b, int kind, void *ptr, size_t off, size_t len, int timeout_ms,
		       const char *fn)
{
	odx_context *ctx = b->ctx;
	odx__task *t;
	int rc, expected = ODX__EXEC_WAITING, expected_chain = ODX__CHAIN_FREE, behind = -1;

	if (off > b->size || len > b->size - off)
		return odx__fail(ctx, ODX_ERANGE,
				 "%s: range [%zu, %zu + %zu) is outside buffer %llu of %zu bytes", fn,
				 off, off, len, (unsigned long long)b->id, b->size);
	if (len == 0)
		return 0;
	if (ctx->closing)
		return odx__fail(ctx, ODX_ECLOSED, "%s: the context is closing", fn);
	t = odx__task_new(ctx);
	if (!t)
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory", fn);
	t->kind = (uint8_t)kind;
	t->nargs = 1;
	t->args[0] = ODX_BUF(b, kind == ODX__TASK_READ	 ? ODX_R
				: off == 0 && len == b->size ? ODX_W
							     : ODX_RW);
	t->host_ptr = ptr;
	t->host_off = off;
	t->host_len = len;
	atomic_fetch_add(&t->refs, 1); /* ours, until we return */
	rc = odx__task_submit(ctx, t, ODX__ADMIT_WAIT);
	if (rc) {
		odx__task_put(t);
		return rc;
	}
	/*
	 * Waiting forever for kernels already queued on one device whose backend can queue the
	 * copy behind them: do that, and sleep once for both (a read of a kernel's output, a write
	 * of a kernel's input). Not with a timeout: a copy handed to the device cannot be
	 * withdrawn when it expires.
	 */
	if (timeout_ms < 0 && !ready_or_done(t) && (behind = behind_node(t)) >= 0 &&
	    !atomic_compare_exchange_strong(&t->chain, &expected_chain, ODX__CHAIN_BEHIND))
		behind = -1; /* they finished meanwhile: the usual way */
	if (behind >= 0) {
		rc = host_access_run(t, behind);
		goto out;
	}
	rc = odx__wait_app(ctx, ready_or_done, t, timeout_ms);
	if (rc == ODX_ETIMEDOUT &&
	    atomic_compare_exchange_strong(&t->exec, &expected, ODX__EXEC_ABANDONED)) {
		/* Withdrawn: when its turn comes it completes without touching anything. */
		rc = odx__fail(ctx, ODX_ETIMEDOUT,
			       "%s: buffer %llu: earlier tasks did not finish within %d ms; nothing "
			       "was %s",
			       fn, (unsigned long long)b->id, timeout_ms,
			       kind == ODX__TASK_READ ? "read" : "written");
		odx__task_put(t);
		return rc;
	}
	/* Ready (ours to run) or already done (canceled because its input failed). */
	rc = atomic_load(&t->done) ? t->status : host_access_run(t, -1);
out:
	if (rc)
		odx__fail(ctx, rc, "%s: buffer %llu: %s", fn, (unsigned long long)b->id,
			  t->message ? t->message : odx_strerror(rc));
	odx__task_put(t);
	return rc;
}

ODX_API int odx_buffer_write(odx_buffer *buf, size_t offset, const void *src, size_t len,
			     int timeout_ms)
{
	int rc = odx__buffer_check(buf, "odx_buffer_write");

	if (rc)
		return rc;
	ODX__CHECK_ARG(buf->ctx, src || len == 0, "src");
	/* Several ranks: every rank writes the same bytes (dist.c). */
	if (buf->ctx->fab && offset <= buf->size && len <= buf->size - offset && len > 0)
		odx__dist_write(buf, offset == 0 && len == buf->size);
	return host_access(buf, ODX__TASK_WRITE, (void *)src, offset, len, timeout_ms,
			   "odx_buffer_write");
}

ODX_API int odx_buffer_read(odx_buffer *buf, size_t offset, void *dst, size_t len, int timeout_ms)
{
	int rc = odx__buffer_check(buf, "odx_buffer_read");

	if (rc)
		return rc;
	ODX__CHECK_ARG(buf->ctx, dst || len == 0, "dst");
	/* Several ranks: reads are collective; the latest version goes to every rank (dist.c). */
	if (buf->ctx->fab && offset <= buf->size && len <= buf->size - offset && len > 0) {
		rc = odx__dist_read(buf);
		if (rc)
			return rc;
	}
	return host_access(buf, ODX__TASK_READ, dst, offset, len, timeout_ms, "odx_buffer_read");
}

static int buffer_submit_destroy(odx_buffer *buf)
{
	odx_context *ctx = buf->ctx;
	odx__task *t;

	t = odx__task_new(ctx);
	if (!t) {
		/* Cannot defer: wait for the users, then free here. */
		odx_wait_all(ctx, -1);
		return odx__buffer_release_memory(buf);
	}
	t->kind = ODX__TASK_DESTROY;
	t->nargs = 1;
	t->args[0] = ODX_BUF(buf, ODX_RW);
	/* Never blocks, not even on the in-flight bound: admission is forced. */
	return odx__task_submit(ctx, t, ODX__ADMIT_FORCE);
}

ODX_API int odx_buffer_destroy(odx_buffer *buf)
{
	bool twice;

	if (!buf)
		return ODX_EINVAL;
	/* It stays listed until its memory is released, so the tiers still see its copies. */
	pthread_mutex_lock(&buf->ctx->objects_lock);
	twice = buf->destroyed;
	buf->destroyed = true;
	pthread_mutex_unlock(&buf->ctx->objects_lock);
	if (twice)
		return odx__fail(buf->ctx, ODX_EINVAL, "odx_buffer_destroy: buffer %llu was "
				 "already destroyed", (unsigned long long)buf->id);
	return buffer_submit_destroy(buf);
}

void odx__buffers_destroy_all(odx_context *ctx)
{
	for (;;) {
		odx_buffer *b;

		pthread_mutex_lock(&ctx->objects_lock);
		for (b = ctx->buffers; b && b->destroyed; b = b->next)
			;
		if (b)
			b->destroyed = true;
		pthread_mutex_unlock(&ctx->objects_lock);
		if (!b)
			return;
		buffer_submit_destroy(b);
	}
}

ODX_API int odx_buffer_wont_use(odx_buffer *buf)
{
	int m, rc = odx__buffer_check(buf, "odx_buffer_wont_use");

	if (rc)
		return rc;
	/* A hint, not a task: its copies become the first eviction candidates until a task
	 * submitted after this call uses the buffer (tasks submitted before it are the uses the
	 * program is finishing). */
	pthread_mutex_lock(&buf->lock);
	buf->wont_use = true;
	buf->wont_use_task = atomic_load(&buf->ctx->next_task_id);
	for (m = 0; m < buf->ctx->nmemnodes; m++)
		buf->replicas[m].last_use = 0;
	pthread_mutex_unlock(&buf->lock);
	return 0;
}

/* Copies the runtime made on its own (write-backs, prefetches, spills, reloads) are not tasks, so
 * the dependency rules do not order them before a buffer's release: wait for them here. */
static bool transfers_idle(void *arg)
{
	return atomic_load(&((odx_buffer *)arg)->transfers) == 0;
}

int odx__buffer_release_memory(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	int m, i;

	odx__prefetch_cancel(b);
	while (!transfers_idle(b))
		odx__wait_until(ctx, transfers_idle, b, 100);
	buffer_unlist(b);

	for (m = ctx->nmemnodes - 1; m >= 0; m--) {
		bool had;

		pthread_mutex_lock(&ctx->memnodes[m].lock);
		pthread_mutex_lock(&b->lock);
		had = b->replicas[m].allocated;
		odx__replica_free(ctx, b, m);
		pthread_mutex_unlock(&b->lock);
		pthread_mutex_unlock(&ctx->memnodes[m].lock);
		if (had)
			odx__tier_changed(ctx, m);
	}
	pthread_mutex_lock(&b->lock);
	odx__tier_disk_free(ctx, b);
	pthread_mutex_unlock(&b->lock);
	if (b->host_registered)
		host_unregister(b);
	for (i = 0; i < b->nreaders; i++)
		odx__task_put(b->readers[i]);
	free(b->readers);
	if (b->last_writer)
		odx__task_put(b->last_writer);
	free(b->valid_set);
	pthread_mutex_destroy(&b->lock);
	buffer_slot_put(b);
	return 0;
}

/* Called by close for buffers the user never destroyed (no task uses them any more). */
void odx__buffers_release_all(odx_context *ctx)
{
	odx_buffer *b;

	int i;

	while ((b = ctx->buffers) != NULL)
		odx__buffer_release_memory(b);
	/* Nothing may use a buffer handle after close: the structs go. */
	for (i = 0; i < ctx->nbuf_slabs; i++)
		free(ctx->buf_slabs[i]);
	free(ctx->buf_slabs);
	ctx->buf_slabs = NULL;
	ctx->nbuf_slabs = ctx->capbuf_slabs = 0;
	ctx->bufq_head = ctx->bufq_tail = NULL;
	ctx->bufq_n = 0;
	ctx->buf_carve_left = 0;
}
