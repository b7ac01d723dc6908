/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.c - copy jobs between tiers: picking a source, starting the copy on the right lane
 * (host to device, device to host, device to device, through a host bounce buffer, from the disk
 * tier, or from zero pages), and applying a finished copy to the replicas.
 *
 * Separate from staging and eviction, which decide what to copy: this file only moves bytes and
 * keeps replica states right. A finished copy reports up through the completion door
 * (odx__mem_done) and nothing else of the floors above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem.h"
#include "pool.h"

odx__copy_job *odx__copy_job_new(odx_buffer *b, int src, int dst, int kind)
{
	odx__copy_job *job = calloc(1, sizeof(*job));

	if (!job)
		return NULL;
	odx__transfer_begin(b);
	*job = (odx__copy_job){.buf = b,
			       .src = src,
			       .dst = dst,
			       .kind = kind,
			       .wversion = b->wversion,
			       .nsegs = -1,
			       .moved = b->size};
	return job;
}

/*
 * Which bytes the job moves: its buffer's valid runs (docs/sizes.md), read under the buffer's
 * lock when it starts. A buffer whose bytes are all valid, a part of a partition (whose length is
 * always its size) and zero pages move whole, by the paths below that existed before lengths.
 * For parts with lengths, each part's valid prefix is its own run (adjacent full parts merged):
 * a strided 2D copy cannot express runs of different lengths, and the span up to the last valid
 * byte of every part would move the gaps too.
 */
static int job_segs(odx__copy_job *job)
{
	odx_buffer *b = job->buf;
	odx__seg *s;
	size_t bytes;
	int n;

	job->nsegs = -1;
	job->moved = b->size;
	if (b->part_of || job->src == ODX__SRC_ZERO)
		return 0;
	pthread_mutex_lock(&b->lock);
	n = odx__valid_segs(b, &job->seg1, 1, &s, &bytes);
	pthread_mutex_unlock(&b->lock);
	if (n < 0)
		return n;
	if (n == 1 && s[0].off == 0 && s[0].len == b->size)
		return 0;
	job->segs = s;
	job->nsegs = n;
	job->moved = bytes;
	return 0;
}

static void job_free(odx__copy_job *job)
{
	if (job->segs != &job->seg1)
		free(job->segs);
	free(job);
}

/* The memory node to copy from: host RAM first (every lane can reach it), then any device, then
 * the disk tier; -1 if no valid copy exists. */
int odx__copy_pick_source(const odx_context *ctx, const odx_buffer *b, int dst)
{
	int m;

	for (m = 0; m < ctx->nmemnodes; m++)
		if (m != dst && atomic_load(&b->replicas[m].state) != ODX__INVALID)
			return m;
	if (atomic_load(&b->disk_state) != ODX__INVALID)
		return ODX__SRC_DISK;
	return -1;
}

static void copy_start(odx_context *ctx, odx__copy_job *job);

static void source_release(odx_buffer *b, int src)
{
	if (src == ODX__SRC_DISK)
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
	odx__fetch_waiter *w;
	odx__copy_job *refetch = NULL;
	odx__mem_event ev = {.kind = ODX__MEM_COPY, .buf = b};
	char why[ODX__MSG_MAX] = "";
	bool stale = job->wversion != b->wversion;
	bool freed = false;

	bounce_put(ctx, job->bounce, b->size);
	job->bounce = NULL;
	/* A write-back frees its source: that is the source node's business (its lock first). */
	if (job->kind == ODX__COPY_WRITEBACK)
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
	if (job->kind == ODX__COPY_WRITEBACK) {
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
		int src = odx__copy_pick_source(ctx, b, job->dst);

		if (src != -1 &&
		    (refetch = odx__copy_job_new(b, src, job->dst, ODX__COPY_FETCH)) != NULL) {
			if (src == ODX__SRC_DISK)
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
	if (job->kind == ODX__COPY_WRITEBACK)
		pthread_mutex_unlock(&snode->lock);

	if (status == 0 && job->src != ODX__SRC_ZERO) {
		int s = job->src >= 0 ? job->src : job->dst; /* reloads count on their node */

		atomic_fetch_add(&ctx->bytes_copied[s * ctx->nmemnodes + job->dst], job->moved);
		atomic_fetch_add(&ctx->copies, 1);
		/* A Lua policy's transfer estimates come from measured links: copies big enough
		 * that their time is bandwidth, not latency (from issue, so a queued copy reads
		 * slower than the link: an estimate on the safe side). */
		if (ctx->policy && job->src >= 0 && job->t_issue && job->moved >= (64u << 10)) {
			uint64_t ns = odx__now_ns() - job->t_issue;

			if (ns > 0)
				ev.bandwidth = (double)job->moved * 1e9 / (double)ns;
		}
	} else if (status != 0) {
		odx__log(ctx, ODX_LOG_ERROR, "copy of buffer %llu from %s %d to memory node %d failed: %s",
			 (unsigned long long)b->id,
			 job->src == ODX__SRC_DISK   ? "disk tier"
			 : job->src == ODX__SRC_ZERO ? "zero pages"
						     : "memory node",
			 job->src, job->dst, msg ? msg : "");
	}
	if (ctx->tracing && job->lane) {
		uint64_t now = odx__now_ns();
		uint64_t t0 = job->t_issue > job->lane->copy_lane_free_ns
				      ? job->t_issue
				      : job->lane->copy_lane_free_ns;

		odx__trace_span_buf(job->lane->copy_trace,
				    job->kind == ODX__COPY_WRITEBACK ? "write-back"
				    : job->src == ODX__SRC_DISK	     ? "reload"
				    : job->src == ODX__SRC_ZERO	     ? "zero-fill"
								     : "copy",
				    "copy", t0, now, 0, b, job->moved);
		job->lane->copy_lane_free_ns = now;
	}
	/* What the tasks waiting for the destination are told when it failed. */
	if (w && status != 0)
		snprintf(why, sizeof(why), "copy of buffer %llu from %s %d to memory node %d: %s",
			 (unsigned long long)b->id,
			 job->src == ODX__SRC_DISK   ? "the disk tier"
			 : job->src == ODX__SRC_ZERO ? "zero pages"
						     : "memory node",
			 job->src, job->dst, msg ? msg : odx_strerror(status));
	/* Room may have appeared where a write-back freed its source, and on the buffer's host
	 * node when a copy there or a freed source changed what eviction can take. */
	if (job->kind == ODX__COPY_WRITEBACK)
		ev.changed[ev.nchanged++] = job->src;
	if (freed || odx__is_host_node(ctx, job->dst))
		ev.changed[ev.nchanged++] = odx__home(b);
	ev.status = status;
	ev.src = job->src;
	ev.dst = job->dst;
	ev.waiters = w;
	ev.why = why;
	ev.refetch = refetch;
	job_free(job);
	/* Up through the door: policy, watchdog, waiting tasks, tasks waiting for room, the
	 * refetch, prefetch requests. Before the transfer's end: ctx may be closed once the count
	 * drops. */
	odx__mem_done(ctx, &ev);
	odx__transfer_end(b); /* the last access to b and ctx */
}

/* ---- valid runs (docs/sizes.md): one 1D copy per run ------------------------------------- */

/* The runs of one hop in flight: the hop ends once, when the last landed, with the first
 * failure, and goes on to `then` (copy_done, or the second hop of a staged copy). */
typedef struct seg_copies {
	odx__copy_job *job;
	odx_backend_done_fn then;
	_Atomic int left;   /* runs in flight + 1 for the issuing thread */
	_Atomic int status; /* the first failure */
	char msg[256];
} seg_copies;

static void seg_done(void *arg, int status, const char *msg)
{
	seg_copies *sc = arg;
	int expected = 0;

	if (status && atomic_compare_exchange_strong(&sc->status, &expected, status))
		snprintf(sc->msg, sizeof(sc->msg), "%s", msg ? msg : odx_strerror(status));
	if (atomic_fetch_sub(&sc->left, 1) != 1)
		return;
	status = atomic_load(&sc->status);
	{
		odx__copy_job *job = sc->job;
		odx_backend_done_fn then = sc->then;
		char why[256];

		snprintf(why, sizeof(why), "%s", sc->msg);
		free(sc);
		then(job, status, status ? why : NULL);
	}
}

/* Which 1D copy moves one run: the same offset on both sides (run.off into each). */
enum seg_dir { SEG_H2D, SEG_D2H, SEG_D2D };

/* The job's runs from (src side) to (dst side) on `dev`'s lane: host sides are pointers to the
 * buffer's first byte, device sides a handle and offset. 0: `then` will be called. */
static int copy_segs(odx__copy_job *job, odx__device *dev, enum seg_dir dir, char *dst_host,
		     uint64_t dst, size_t dst_off, const char *src_host, void *src_dev, uint64_t src,
		     size_t src_off, odx_backend_done_fn then)
{
	seg_copies *sc = calloc(1, sizeof(*sc));
	int i, rc = 0;

	if (!sc)
		return ODX_ENOMEM;
	sc->job = job;
	sc->then = then;
	atomic_init(&sc->left, job->nsegs + 1);
	for (i = 0; i < job->nsegs; i++) {
		const odx__seg *g = &job->segs[i];

		if (dir == SEG_H2D)
			rc = dev->ops->copy_h2d(dev->bdev, dst, dst_off + g->off, src_host + g->off,
						g->len, seg_done, sc);
		else if (dir == SEG_D2H)
			rc = dev->ops->copy_d2h(dev->bdev, dst_host + g->off, src, src_off + g->off,
						g->len, seg_done, sc);
		else
			rc = dev->ops->copy_d2d(dev->bdev, dst, dst_off + g->off, src_dev, src,
						src_off + g->off, g->len, seg_done, sc);
		if (rc) {
			int expected = 0;

			if (atomic_compare_exchange_strong(&sc->status, &expected, rc))
				snprintf(sc->msg, sizeof(sc->msg),
					 "could not queue run %d of %d of the valid bytes", i,
					 job->nsegs);
			/* The runs never queued will not call back. */
			atomic_fetch_sub(&sc->left, job->nsegs - i);
			break;
		}
	}
	seg_done(sc, 0, NULL); /* the issuing thread's share */
	return 0;
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
	if (job->nsegs >= 0)
		rc = copy_segs(job, ddev, SEG_H2D, NULL, dst->mem, dst->off, job->bounce, NULL, 0, 0,
			       copy_done);
	else
		rc = ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off, job->bounce,
					 job->buf->size, copy_done, job);
	if (rc)
		copy_done(job, rc, "could not queue the second hop of a staged copy");
}

/* A strided copy done as one 1D copy per run (the backend has no copy_2d, or not for this
 * direction): the job completes once, when the last run landed, with the first failure. */
typedef struct run_copies {
	odx__copy_job *job;
	_Atomic int left;   /* runs in flight + 1 for the issuing thread */
	_Atomic int status; /* the first failure */
	char msg[256];
} run_copies;

static void run_done(void *arg, int status, const char *msg)
{
	run_copies *rc = arg;
	int expected = 0;

	if (status && atomic_compare_exchange_strong(&rc->status, &expected, status))
		snprintf(rc->msg, sizeof(rc->msg), "%s", msg ? msg : odx_strerror(status));
	if (atomic_fetch_sub(&rc->left, 1) != 1)
		return;
	status = atomic_load(&rc->status);
	{
		odx__copy_job *job = rc->job;
		char why[256];

		snprintf(why, sizeof(why), "%s", rc->msg);
		free(rc);
		copy_done(job, status, status ? why : NULL);
	}
}

/*
 * Between a host side laid out in runs (a part's alias: `host`, `hpitch` between runs) and a
 * packed device replica (`mem` at `off`): the backend's copy_2d (ABI 1.7) when it has one and
 * takes the direction, else one copy_h2d/copy_d2h per run. 0: copy_done will be called.
 */
static int copy_strided(odx__copy_job *job, odx__device *dev, bool h2d, char *host, size_t hpitch,
			uint64_t mem, size_t off, size_t width, size_t rows)
{
	run_copies *st;
	size_t r;
	int rc;

	if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, copy_2d) && dev->ops->copy_2d) {
		odx_backend_copy2d c = {.width = width, .rows = rows};

		if (h2d) {
			c.dst = mem;
			c.dst_off = off;
			c.dst_pitch = width;
			c.src_host = host;
			c.src_pitch = hpitch;
		} else {
			c.dst_host = host;
			c.dst_pitch = hpitch;
			c.src = mem;
			c.src_off = off;
			c.src_pitch = width;
		}
		rc = dev->ops->copy_2d(dev->bdev, &c, copy_done, job);
		if (rc != ODX_ENOSYS)
			return rc;
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return ODX_ENOMEM;
	st->job = job;
	atomic_init(&st->left, (int)rows + 1);
	for (r = 0; r < rows; r++) {
		rc = h2d ? dev->ops->copy_h2d(dev->bdev, mem, off + r * width, host + r * hpitch,
					      width, run_done, st)
			 : dev->ops->copy_d2h(dev->bdev, host + r * hpitch, mem, off + r * width,
					      width, run_done, st);
		if (rc) {
			int expected = 0;

			if (atomic_compare_exchange_strong(&st->status, &expected, rc))
				snprintf(st->msg, sizeof(st->msg),
					 "could not queue run %zu of %zu of a strided copy", r, rows);
			/* The runs never queued will not call back. */
			atomic_fetch_sub(&st->left, (int)(rows - r));
			break;
		}
	}
	run_done(st, 0, NULL); /* the issuing thread's share */
	return 0;
}

/* A copy of a buffer whose valid bytes are some runs (job->nsegs >= 0, not from disk: a reload
 * restores what the disk copy holds, mem/disk.c): each run on its own, on the lanes the whole
 * copy would have used. */
static void copy_valid(odx_context *ctx, odx__copy_job *job)
{
	odx_buffer *b = job->buf;
	odx__replica *dst = &b->replicas[job->dst];
	odx__replica *src = &b->replicas[job->src];
	odx__device *sdev = ctx->memnodes[job->src].device;
	odx__device *ddev = ctx->memnodes[job->dst].device;
	char *dh = (char *)(uintptr_t)dst->mem + dst->off;
	const char *sh = (const char *)(uintptr_t)src->mem + src->off;
	int rc, i;

	if (!sdev && !ddev) {
		for (i = 0; i < job->nsegs; i++)
			memcpy(dh + job->segs[i].off, sh + job->segs[i].off, job->segs[i].len);
		copy_done(job, 0, NULL);
		return;
	}
	if (!sdev) {
		job->lane = ddev;
		rc = copy_segs(job, ddev, SEG_H2D, NULL, dst->mem, dst->off, sh, NULL, 0, 0,
			       copy_done);
	} else if (!ddev) {
		job->lane = sdev;
		rc = copy_segs(job, sdev, SEG_D2H, dh, 0, 0, NULL, NULL, src->mem, src->off,
			       copy_done);
	} else if (sdev->ops == ddev->ops &&
		   ODX_BACKEND_HAS_OP(ddev->ops, odx_backend_ops, copy_d2d)) {
		job->lane = ddev;
		rc = copy_segs(job, ddev, SEG_D2D, NULL, dst->mem, dst->off, NULL, sdev->bdev,
			       src->mem, src->off, copy_done);
	} else {
		/* Through a host bounce buffer laid out like the buffer: the runs at their offsets. */
		job->lane = sdev;
		job->bounce = bounce_get(ctx, b->size);
		rc = job->bounce ? copy_segs(job, sdev, SEG_D2H, job->bounce, 0, 0, NULL, NULL,
					     src->mem, src->off, bounce_done)
				 : ODX_ENOMEM;
	}
	if (rc)
		copy_done(job, rc, "could not queue the copy");
}

static void copy_start(odx_context *ctx, odx__copy_job *job)
{
	odx_buffer *b = job->buf;
	odx__replica *dst = &b->replicas[job->dst];
	odx__replica *src = job->src >= 0 ? &b->replicas[job->src] : NULL;
	odx__device *sdev = job->src >= 0 ? ctx->memnodes[job->src].device : NULL;
	odx__device *ddev = ctx->memnodes[job->dst].device;
	/* Host sides of a part's copies: its alias runs inside the parent (docs/partitions.md). */
	odx_shape ss = odx__replica_shape(b, job->src >= 0 ? job->src : job->dst);
	odx_shape ds = odx__replica_shape(b, job->dst);
	int rc;

	job->t_issue = ctx->tracing || ctx->policy ? odx__now_ns() : 0;
	rc = job_segs(job);
	if (rc) {
		copy_done(job, rc, "out of memory for the runs of a copy");
		return;
	}
	if (job->nsegs >= 0 && job->src != ODX__SRC_DISK) {
		copy_valid(ctx, job);
		return;
	}
	if (job->src == ODX__SRC_ZERO) {
		/* Zero pages to pooled memory (whose last user's bytes are still there). */
		const void *zeros = odx__tier_zeros(ctx, b->size);

		job->lane = ddev;
		rc = zeros ? ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off, zeros, b->size,
						 copy_done, job)
			   : ODX_ENOMEM;
	} else if (job->src == ODX__SRC_DISK) {
		/* From the disk tier: straight into host RAM, or through a bounce buffer. */
		job->lane = ddev;
		if (!ddev) {
			rc = odx__tier_reload(ctx, b, (void *)(uintptr_t)dst->mem, copy_done, job);
		} else {
			job->bounce = bounce_get(ctx, b->size);
			rc = job->bounce ? odx__tier_reload(ctx, b, job->bounce, bounce_done, job)
					 : ODX_ENOMEM;
		}
	} else if (!sdev && !ddev) {
		/* Between two host nodes (a host device sharing another NUMA node's memory): the
		 * bytes move on this thread, as a copy lane would have moved them; a part's alias
		 * run by run. */
		odx__strided_copy((char *)(uintptr_t)dst->mem + dst->off, ds.pitch,
				  (const char *)(uintptr_t)src->mem + src->off, ss.pitch, ds.width,
				  ds.count);
		rc = 0;
		copy_done(job, 0, NULL);
	} else if (!sdev && odx__shape_strided(&ss)) {
		job->lane = ddev;
		rc = copy_strided(job, ddev, true, (char *)(uintptr_t)src->mem + src->off, ss.pitch,
				  dst->mem, dst->off, ss.width, ss.count);
	} else if (!sdev) {
		job->lane = ddev;
		rc = ddev->ops->copy_h2d(ddev->bdev, dst->mem, dst->off,
					 (const char *)(uintptr_t)src->mem + src->off, b->size,
					 copy_done, job);
	} else if (!ddev && odx__shape_strided(&ds)) {
		job->lane = sdev;
		rc = copy_strided(job, sdev, false, (char *)(uintptr_t)dst->mem + dst->off, ds.pitch,
				  src->mem, src->off, ds.width, ds.count);
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
	odx__copy_job *job = odx__copy_job_new(b, src, home, ODX__COPY_WRITEBACK);

	if (!job)
		return NULL;
	b->replicas[src].pins++;
	b->replicas[src].evicting = true;
	b->replicas[home].fetching = true;
	b->ctx->memnodes[src].evicting += odx__pool_charge(b->ctx->memnodes[src].pool, b->size);
	return job;
}

const void *odx__tier_zeros(odx_context *ctx, size_t n)
{
	return ctx->tier && n <= ctx->tier->zeros_bytes ? ctx->tier->zeros : NULL;
}

odx__pinned *odx__tier_pinned(odx_context *ctx)
{
	return ctx->tier ? ctx->tier->pinned : NULL;
}
