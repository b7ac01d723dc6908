/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buffer.c - the public buffer API and host access: creating, registering and destroying
 * buffers, and reads and writes from user memory.
 *
 * Reads, writes and destruction from the API are internal tasks against the buffer's host memory
 * node (its home: host RAM of one NUMA node), so they are ordered with the tasks around them by
 * the same dependency rules; they are staged like any task (core/mem/stage.c). Replicas, copies,
 * eviction and the disk tier live in core/mem/, below this file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem/mem.h"

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

odx_buffer *odx__buffer_new(odx_context *ctx, size_t size)
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
	b->length = size; /* a new buffer's bytes are all valid (zeros) */
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
	b = odx__buffer_new(ctx, size);
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
	b = odx__buffer_new(ctx, size);
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

	/* A gather (no user memory: odx__buffer_gather) is about the host copy itself. */
	if (!ctx->direct_access || b->registered || ctx->nmemnodes == ctx->nhost || !t->host_ptr)
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
			odx__trace_span_buf(dev->copy_trace,
					    t->kind == ODX__TASK_READ ? "read" : "write", "copy", t0,
					    odx__now_ns(), t->id, b, t->host_len);
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

	if (t->after_dev < 0 || !ctx->direct_access || b->registered || !t->host_ptr ||
	    (t->kind == ODX__TASK_READ && t->host_len > ODX__BEHIND_READ_MAX))
		return -1;
	dev = &ctx->devices[t->after_dev];
	/* A host device sharing a host node: the access copies on this thread, so it waits. */
	if (!ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, copy_sync_after) ||
	    atomic_load(&dev->lost) || odx__is_host_node(ctx, dev->memnode))
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
	if (rc != 0 || (read_behind && !bounce) || !t->host_ptr) {
		/* nothing to copy now (or at all: a gather) */
	} else if (!odx__is_host_node(t->ctx, t->node)) {
		rc = direct_access(t, behind >= 0);
	} else if (odx__replica_is_alias(b, t->node)) {
		/* A part inside its parent: its packed bytes are runs there. */
		odx_shape sh = odx__replica_shape(b, t->node);

		odx__shape_copy(&sh, (char *)(uintptr_t)b->replicas[t->node].mem, t->host_off,
				t->host_ptr, t->host_len, t->kind == ODX__TASK_READ);
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
	/* The bytes written are valid now: the length reaches their end (docs/sizes.md), before
	 * the new version is published. */
	if (rc == 0 && t->kind == ODX__TASK_WRITE && user && !t->no_effect) {
		pthread_mutex_lock(&b->lock);
		odx__length_written(b, t->host_off, t->host_len);
		pthread_mutex_unlock(&b->lock);
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
	/* A gather (ptr NULL) reads the latest bytes into the host copy and owns it. */
	t->args[0] = ODX_BUF(b, kind == ODX__TASK_READ	 ? ODX_R
				: !ptr			     ? ODX_RW
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

	if (rc || (rc = odx__buffer_partitioned(buf, "odx_buffer_write")) != 0)
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

	if (rc || (rc = odx__buffer_partitioned(buf, "odx_buffer_read")) != 0)
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

	if (atomic_load(&buf->nparts) > 0)
		return odx__partition_destroy(buf);
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
	if (buf->part_of && !atomic_load(&buf->destroyed))
		return odx__fail(buf->ctx, ODX_EINVAL,
				 "odx_buffer_destroy: buffer #%llu is part of a partition of buffer "
				 "#%llu: it dies at odx_buffer_unpartition or with its parent",
				 (unsigned long long)buf->id, (unsigned long long)buf->part_of->id);
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
		/* Parts die with their parent (partition.c). */
		for (b = ctx->buffers; b && (b->destroyed || b->part_of); b = b->next)
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

ODX_API int odx_buffer_set_label(odx_buffer *buf, const char *label)
{
	int rc = odx__buffer_check(buf, "odx_buffer_set_label");
	size_t n;
	odx__label *l;

	if (rc)
		return rc;
	ODX__CHECK_ARG(buf->ctx, label != NULL, "label");
	n = strnlen(label, ODX_LABEL_MAX);
	l = malloc(sizeof(*l) + n + 1);
	if (!l)
		return odx__fail(buf->ctx, ODX_ENOMEM, "odx_buffer_set_label: out of memory");
	memcpy(l->text, label, n);
	l->text[n] = '\0';
	/* the old one stays readable (linked) until the buffer's memory goes */
	l->older = atomic_load(&buf->label);
	while (!atomic_compare_exchange_weak(&buf->label, &l->older, l))
		;
	return 0;
}

void odx__buffer_name(const odx_buffer *buf, char *out, size_t n)
{
	const odx__label *l = atomic_load(&((odx_buffer *)buf)->label);

	if (l)
		snprintf(out, n, "'%s'", l->text);
	else
		snprintf(out, n, "buffer %llu", (unsigned long long)buf->id);
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
	odx__length_release(b);
	pthread_mutex_unlock(&b->lock);
	if (b->host_registered)
		host_unregister(b);
	for (i = 0; i < b->nreaders; i++)
		odx__task_put(b->readers[i]);
	free(b->readers);
	if (b->last_writer)
		odx__task_put(b->last_writer);
	free(b->valid_set);
	for (odx__label *l = atomic_exchange(&b->label, NULL), *older; l; l = older) {
		older = l->older;
		free(l);
	}
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


/* ---- partitions: the host copy as the one copy (partition.c) --------------------------------- */

int odx__buffer_gather(odx_buffer *b, int timeout_ms, const char *fn)
{
	/* A read-write access with no user memory: ordered after every earlier user, staged on
	 * the host node (fetching the latest bytes), and the host copy is the only valid one when
	 * it completes (odx__unstage of a write). */
	return host_access(b, ODX__TASK_WRITE, NULL, 0, b->size, timeout_ms, fn);
}

void odx__buffer_drop_copies(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	int m, home = odx__home(b);

	/* Prefetches and write-backs started before the gather may still be moving. */
	odx__prefetch_cancel(b);
	while (!transfers_idle(b))
		odx__wait_until(ctx, transfers_idle, b, 100);
	for (m = ctx->nmemnodes - 1; m >= 0; m--) {
		bool had;

		if (m == home)
			continue;
		pthread_mutex_lock(&ctx->memnodes[m].lock);
		pthread_mutex_lock(&b->lock);
		had = b->replicas[m].allocated && !b->replicas[m].pins && !b->replicas[m].fetching &&
		      !b->replicas[m].evicting;
		if (had)
			odx__replica_free(ctx, b, m);
		pthread_mutex_unlock(&b->lock);
		pthread_mutex_unlock(&ctx->memnodes[m].lock);
		if (had)
			odx__tier_changed(ctx, m);
	}
}
