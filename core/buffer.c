/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buffer.c - buffers, their replicas and coherence.
 *
 * Each buffer has a replica slot per memory node in an MSI state. Before a task runs, staging
 * makes every buffer it reads valid on the memory node it runs against (fetching from a valid
 * replica on a copy lane) and pins the replicas it uses; after it ran, a writer's replica becomes
 * MODIFIED and every other copy INVALID. A pinned replica is never freed or moved. Reads, writes
 * and destruction from the API are internal tasks against memory node 0 (host RAM), so they are
 * ordered with the tasks around them by the same dependency rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

int odx__task_memnode(const odx__task *t)
{
	if (t->kind != ODX__TASK_KERNEL)
		return 0;
	return t->ctx->devices[t->device].memnode;
}

/* ---- replica memory ------------------------------------------------------------------------- */

static int replica_alloc(odx_context *ctx, odx_buffer *b, int m, bool zero)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];
	int rc;

	if (m == 0) {
		size_t rounded = (b->size + 63) & ~(size_t)63;
		void *p = aligned_alloc(64, rounded);

		if (!p)
			return ODX_ENOMEM;
		if (zero)
			memset(p, 0, b->size);
		r->mem = (uint64_t)(uintptr_t)p;
	} else {
		rc = node->device->ops->mem_alloc(node->device->bdev, b->size, zero, &r->mem);
		if (rc)
			return rc;
	}
	r->allocated = true;
	atomic_fetch_add(&node->used, b->size);
	return 0;
}

static void replica_free(odx_context *ctx, odx_buffer *b, int m)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];

	if (!r->allocated)
		return;
	if (m == 0) {
		if (!b->registered)
			free((void *)(uintptr_t)r->mem);
	} else {
		node->device->ops->mem_free(node->device->bdev, r->mem, b->size);
	}
	r->allocated = false;
	atomic_store(&r->state, ODX__INVALID);
	atomic_fetch_sub(&node->used, b->size);
}

void odx__replica_set_state(odx_buffer *b, int m, int state)
{
	atomic_store_explicit(&b->replicas[m].state, (uint8_t)state, memory_order_relaxed);
}

/* ---- copies between memory nodes ------------------------------------------------------------ */

typedef struct copy_job {
	odx_buffer *buf;
	int src, dst;
	void *bounce;      /* host staging between devices of different backends */
	odx__device *lane; /* whose copy lane runs it, for the trace */
	uint64_t t_issue;
} copy_job;

static void copy_done(void *arg, int status, const char *msg)
{
	copy_job *job = arg;
	odx_buffer *b = job->buf;
	odx_context *ctx = b->ctx;
	odx__replica *dst = &b->replicas[job->dst], *src = &b->replicas[job->src];
	odx__fetch_waiter *w, *next;

	free(job->bounce);
	pthread_mutex_lock(&b->lock);
	dst->fetching = false;
	if (status == 0) {
		odx__replica_set_state(b, job->dst, ODX__SHARED);
		/* Two valid copies now: neither is the only one. */
		if (atomic_load(&src->state) == ODX__MODIFIED)
			odx__replica_set_state(b, job->src, ODX__SHARED);
	}
	src->pins--;
	w = dst->waiters;
	dst->waiters = NULL;
	pthread_mutex_unlock(&b->lock);

	if (status == 0) {
		atomic_fetch_add(&ctx->bytes_copied[job->src * ctx->nmemnodes + job->dst], b->size);
		atomic_fetch_add(&ctx->copies, 1);
	} else {
		odx__log(ctx, ODX_LOG_ERROR, "copy of buffer %llu from memory node %d to %d failed: %s",
			 (unsigned long long)b->id, job->src, job->dst, msg ? msg : "");
	}
	if (ctx->tracing) {
		uint64_t now = odx__now_ns();
		uint64_t t0 = job->t_issue > job->lane->copy_lane_free_ns
				      ? job->t_issue
				      : job->lane->copy_lane_free_ns;

		odx__trace_span(job->lane->copy_trace, "copy", "copy", t0, now, b->id);
		job->lane->copy_lane_free_ns = now;
	}
	for (; w; w = next) {
		int expected = 0;
		bool caller;

		next = w->next;
		if (status != 0 &&
		    atomic_compare_exchange_strong(&w->task->fetch_error, &expected, status)) {
			char why[ODX__MSG_MAX];

			snprintf(why, sizeof(why), "copy of buffer %llu from memory node %d to %d: %s",
				 (unsigned long long)b->id, job->src, job->dst,
				 msg ? msg : odx_strerror(status));
			w->task->fetch_msg = strdup(why);
		}
		/* Decide before the last decrement: a caller-run task may be finished and reused
		 * by its thread as soon as the count reaches zero. */
		caller = odx__task_caller_runs(w->task);
		if (atomic_fetch_sub(&w->task->fetches, 1) == 1) {
			if (caller)
				odx__wake_waiters(ctx); /* the thread in odx_buffer_read/write */
			else
				odx__device_push_staged(&ctx->devices[w->task->device], w->task);
		}
		free(w);
	}
	free(job);
}

/* Second hop of a copy staged through host memory: the bounce buffer to the destination. */
static void bounce_done(void *arg, int status, const char *msg)
{
	copy_job *job = arg;
	odx__device *ddev = job->buf->ctx->memnodes[job->dst].device;
	int rc;

	if (status) {
		copy_done(job, status, msg);
		return;
	}
	rc = ddev->ops->copy_h2d(ddev->bdev, job->buf->replicas[job->dst].mem, 0, job->bounce,
				 job->buf->size, copy_done, job);
	if (rc)
		copy_done(job, rc, "could not queue the second hop of a staged copy");
}

static void copy_start(odx_context *ctx, copy_job *job)
{
	odx_buffer *b = job->buf;
	odx__replica *src = &b->replicas[job->src], *dst = &b->replicas[job->dst];
	odx__device *sdev = ctx->memnodes[job->src].device, *ddev = ctx->memnodes[job->dst].device;
	int rc;

	job->t_issue = ctx->tracing ? odx__now_ns() : 0;
	if (!sdev) {
		job->lane = ddev;
		rc = ddev->ops->copy_h2d(ddev->bdev, dst->mem, 0, (const void *)(uintptr_t)src->mem,
					 b->size, copy_done, job);
	} else if (!ddev) {
		job->lane = sdev;
		rc = sdev->ops->copy_d2h(sdev->bdev, (void *)(uintptr_t)dst->mem, src->mem, 0,
					 b->size, copy_done, job);
	} else if (sdev->ops == ddev->ops &&
		   ODX_BACKEND_HAS_OP(ddev->ops, odx_backend_ops, copy_d2d)) {
		job->lane = ddev;
		rc = ddev->ops->copy_d2d(ddev->bdev, dst->mem, 0, sdev->bdev, src->mem, 0, b->size,
					 copy_done, job);
	} else {
		/* Different backends (or no direct path): through a host bounce buffer. */
		job->lane = sdev;
		job->bounce = malloc(b->size);
		rc = job->bounce ? sdev->ops->copy_d2h(sdev->bdev, job->bounce, src->mem, 0,
						       b->size, bounce_done, job)
				 : ODX_ENOMEM;
	}
	if (rc)
		copy_done(job, rc, "could not queue the copy");
}

/* The memory node to copy from: host RAM first (every lane can reach it), else any valid copy. */
static int pick_source(const odx_context *ctx, const odx_buffer *b, int dst)
{
	int m;

	for (m = 0; m < ctx->nmemnodes; m++)
		if (m != dst && atomic_load(&b->replicas[m].state) != ODX__INVALID)
			return m;
	return -1;
}

/* ---- staging -------------------------------------------------------------------------------- */

static int stage_one(odx__task *t, odx_buffer *b, int m, bool reads, copy_job **job)
{
	odx_context *ctx = t->ctx;
	odx__replica *r = &b->replicas[m];
	odx__fetch_waiter *w;
	int rc = 0, src;

	*job = NULL;
	pthread_mutex_lock(&b->lock);
	if (reads && b->zero && atomic_load(&r->state) == ODX__INVALID && r->allocated &&
	    !r->fetching)
		replica_free(ctx, b, m); /* holds bytes of a failed writer: reallocate zeroed */
	/* Zero-filled while the buffer was never written, so bytes a first W task leaves alone
	 * read as zeros, like the rest of a new buffer. */
	if (!r->allocated && (rc = replica_alloc(ctx, b, m, b->zero)) != 0)
		goto out_unlock;
	r->pins++;
	if (!reads || atomic_load(&r->state) != ODX__INVALID)
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
		if (src < 0 || !(*job = malloc(sizeof(**job)))) {
			free(w);
			rc = src < 0 ? ODX_EIO : ODX_ENOMEM;
			goto out_unlock;
		}
		**job = (copy_job){.buf = b, .src = src, .dst = m};
		b->replicas[src].pins++;
		r->fetching = true;
	}
	w->task = t;
	w->next = r->waiters;
	r->waiters = w;
	atomic_fetch_add(&t->fetches, 1);
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
		const odx_buffer *b = t->args[i].v.buffer;

		if (t->args[i].kind != ODX_ARG_BUFFER || !odx__task_stage_reads(t, i) ||
		    task_writes(producer, b))
			continue;
		/* Nothing can invalidate it before t runs: a writer would be ordered after t. */
		if (atomic_load(&b->replicas[m].state) == ODX__INVALID && !b->zero)
			return false;
	}
	return true;
}

bool odx__stage(odx__task *t, const odx__task *producer)
{
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t);
	int i, rc = 0, njobs = 0;
	copy_job *jobs[64];

	t->staged = true;
	if (t->nargs == 0)
		return true;
	atomic_store(&t->fetches, 1);
	for (i = 0; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		copy_job *job;

		if (t->args[i].kind != ODX_ARG_BUFFER || !odx__task_dep_access(t, i))
			continue;
		/* Releasing a runtime-owned buffer needs no copy anywhere: nothing to stage. */
		if (t->kind == ODX__TASK_DESTROY && !b->registered)
			continue;
		/* What the producer ahead on the same in-order lane writes will be there when t
		 * runs: no fetch (its replica's state changes when the producer completes). */
		rc = stage_one(t, b, m,
			       odx__task_stage_reads(t, i) && !(producer && task_writes(producer, b)),
			       &job);
		if (rc) {
			char detail[ODX__MSG_MAX], why[ODX__MSG_MAX];
			int expected = 0;

			odx__backend_detail_take(detail, sizeof(detail));
			snprintf(why, sizeof(why),
				 "cannot place buffer %llu (%zu bytes) on memory node %d%s%s: %s%s%s",
				 (unsigned long long)b->id, b->size, m,
				 ctx->memnodes[m].device ? ", " : "",
				 ctx->memnodes[m].device ? ctx->memnodes[m].device->name : "",
				 odx_strerror(rc), detail[0] ? ": " : "", detail);
			if (atomic_compare_exchange_strong(&t->fetch_error, &expected, rc))
				t->fetch_msg = strdup(why);
			odx__log(ctx, ODX_LOG_ERROR, "task #%llu: %s", (unsigned long long)t->id,
				 why);
			break;
		}
		if (job)
			jobs[njobs++] = job;
	}
	/* Arguments 0..i-1 are pinned; unstaging walks exactly those. */
	t->staged = true;
	t->nstaged = rc ? i : t->nargs;
	for (i = 0; i < njobs; i++)
		copy_start(ctx, jobs[i]);
	return atomic_fetch_sub(&t->fetches, 1) == 1;
}

void odx__unstage(odx__task *t, int status)
{
	int m = odx__task_memnode(t);
	int i, k;

	for (i = 0; i < t->nstaged; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx_access mode;
		bool writes;

		if (t->args[i].kind != ODX_ARG_BUFFER || !(mode = odx__task_dep_access(t, i)))
			continue;
		if (t->kind == ODX__TASK_DESTROY && !b->registered)
			continue; /* not staged, see odx__stage */
		writes = !t->no_effect && ((t->kind == ODX__TASK_KERNEL && (mode & ODX_W)) ||
					   t->kind == ODX__TASK_WRITE);
		pthread_mutex_lock(&b->lock);
		if (writes && status == 0) {
			for (k = 0; k < t->ctx->nmemnodes; k++)
				if (k != m)
					odx__replica_set_state(b, k, ODX__INVALID);
			odx__replica_set_state(b, m, ODX__MODIFIED);
			b->zero = false;
		} else if (writes && (status == ODX_EKERNEL || (t->chained && t->launched))) {
			/* It may have written part of the replica (or, launched behind a producer that
			 * failed, written garbage): that copy is no longer valid. */
			odx__replica_set_state(b, m, ODX__INVALID);
		}
		b->replicas[m].pins--;
		pthread_mutex_unlock(&b->lock);
	}
	t->nstaged = 0;
}

/* ---- buffers -------------------------------------------------------------------------------- */

static odx_buffer *buffer_new(odx_context *ctx, size_t size)
{
	odx_buffer *b = calloc(1, sizeof(*b) + (size_t)ctx->nmemnodes * sizeof(odx__replica));

	if (!b)
		return NULL;
	b->ctx = ctx;
	b->id = atomic_fetch_add(&ctx->next_buffer_id, 1) + 1;
	b->size = size;
	b->home_rank = 0;
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
	b = buffer_new(ctx, size);
	if (!b)
		return odx__fail(ctx, ODX_ENOMEM, "odx_buffer_create: out of memory (%zu bytes)",
				 size);
	*out = b;
	return 0;
}

ODX_API int odx_buffer_register(odx_context *ctx, void *ptr, size_t size, unsigned flags,
				odx_buffer **out)
{
	odx_buffer *b;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, ptr, "ptr");
	ODX__CHECK_ARG(ctx, size > 0, "size");
	ODX__CHECK_ARG(ctx, flags == 0, "flags");
	ODX__CHECK_ARG(ctx, out, "out");
	b = buffer_new(ctx, size);
	if (!b)
		return odx__fail(ctx, ODX_ENOMEM, "odx_buffer_register: out of memory");
	/* The user's memory is the host replica and, for now, the only valid copy. */
	b->registered = true;
	b->user_ptr = ptr;
	b->zero = false;
	b->replicas[0].allocated = true;
	b->replicas[0].mem = (uint64_t)(uintptr_t)ptr;
	odx__replica_set_state(b, 0, ODX__MODIFIED);
	atomic_fetch_add(&ctx->memnodes[0].used, size);
	*out = b;
	return 0;
}

ODX_API size_t odx_buffer_size(const odx_buffer *buf)
{
	return buf ? buf->size : 0;
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

/* Runs a read or write whose predecessors finished, on the calling thread: stage the host copy
 * (waiting for a copy back from a device if needed), copy the bytes, complete. */
static int host_access_run(odx__task *t)
{
	odx_buffer *b = t->args[0].v.buffer;
	char *replica0;
	int rc;

	if (!odx__stage(t, NULL))
		odx__wait_until(t->ctx, fetched, t, -1);
	rc = atomic_load(&t->fetch_error);
	if (rc == 0) {
		replica0 = (char *)(uintptr_t)b->replicas[0].mem + t->host_off;
		if (t->kind == ODX__TASK_READ)
			memcpy(t->host_ptr, replica0, t->host_len);
		else
			memcpy(replica0, t->host_ptr, t->host_len);
	}
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
	int rc, expected = ODX__EXEC_WAITING;

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
	rc = odx__wait_until(ctx, ready_or_done, t, timeout_ms);
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
	rc = atomic_load(&t->done) ? t->status : host_access_run(t);
	if (rc)
		odx__fail(ctx, rc, "%s: buffer %llu: %s", fn, (unsigned long long)b->id,
			  t->message ? t->message : odx_strerror(rc));
	odx__task_put(t);
	return rc;
}

ODX_API int odx_buffer_write(odx_buffer *buf, size_t offset, const void *src, size_t len,
			     int timeout_ms)
{
	if (!buf)
		return ODX_EINVAL;
	ODX__CHECK_ARG(buf->ctx, src || len == 0, "src");
	return host_access(buf, ODX__TASK_WRITE, (void *)src, offset, len, timeout_ms,
			   "odx_buffer_write");
}

ODX_API int odx_buffer_read(odx_buffer *buf, size_t offset, void *dst, size_t len, int timeout_ms)
{
	if (!buf)
		return ODX_EINVAL;
	ODX__CHECK_ARG(buf->ctx, dst || len == 0, "dst");
	return host_access(buf, ODX__TASK_READ, dst, offset, len, timeout_ms, "odx_buffer_read");
}

ODX_API int odx_buffer_destroy(odx_buffer *buf)
{
	odx_context *ctx;
	odx__task *t;

	if (!buf)
		return ODX_EINVAL;
	ctx = buf->ctx;
	buffer_unlist(buf);
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

int odx__buffer_release_memory(odx_buffer *b)
{
	int m, i;

	for (m = 0; m < b->ctx->nmemnodes; m++)
		replica_free(b->ctx, b, m);
	for (i = 0; i < b->nreaders; i++)
		odx__task_put(b->readers[i]);
	free(b->readers);
	if (b->last_writer)
		odx__task_put(b->last_writer);
	pthread_mutex_destroy(&b->lock);
	free(b);
	return 0;
}

/* Called by close for buffers the user never destroyed (no task uses them any more). */
void odx__buffers_release_all(odx_context *ctx)
{
	odx_buffer *b;

	while ((b = ctx->buffers) != NULL) {
		buffer_unlist(b);
		odx__buffer_release_memory(b);
	}
}
