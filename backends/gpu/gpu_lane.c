/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_lane.c - the GPU skeleton's lanes and copies: pending records, the completion thread of
 * every lane and the issue thread of every copy lane, the copies queued on them (h2d, d2h, d2d,
 * 2D) and the blocking copies of copy_sync (see gpu.h for the design, gpu.c for devices, memory,
 * page-locked host memory and launches).
 *
 * Done callbacks run only on completion threads, never inside the call that queued the work, and
 * never with a lock of ours held (a callback may queue more work on any device). copy_sync runs
 * on the application's thread, on a stream of its copy lane's, and calls no callback.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy2d.h"
#include "gpu.h"

enum { GPU_H2D, GPU_D2H, GPU_D2D, GPU_2D };

/* A queued copy. The issue thread owns issue_*, the completion thread status/msg; the final
 * pending record hands the job over (through the lane lock) so both are read in order. */
struct gpu_xfer {
	odx__lane_link link;     /* in the issue thread's queue */
	int kind;
	uint64_t dev_addr;       /* h2d: destination; d2h: source; d2d: destination */
	void *host;              /* h2d: source; d2h: destination */
	size_t n;
	gpu_dev *peer;           /* d2d: source device and address */
	uint64_t peer_addr;
	gpu_copy2d c2d;          /* GPU_2D: the whole copy (n is width * rows) */
	odx_backend_done_fn done;
	void *arg;
	int issue_status;
	char issue_msg[GPU_MSG_MAX];
	int status;
	char msg[GPU_MSG_MAX];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- lanes: pending records, completion and issue threads -------------------------------------- */

/* A record with an event, recycled or new. Needs the device's context current. */
int gpu_pending_get(gpu_lane *lane, gpu_pending **out, char *msg, size_t n)
{
	gpu_dev *d = lane->dev;
	gpu_pending *p;
	int native;

	pthread_mutex_lock(&lane->completion.lock);
	p = lane->spare;
	if (p)
		lane->spare = p->next;
	pthread_mutex_unlock(&lane->completion.lock);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			snprintf(msg, n, "out of memory");
			return ODX_ENOMEM;
		}
		native = d->st->v->event_create(d->st->api, &p->event);
		if (native) {
			free(p);
			return gpu_fail(d->st, d, GPU_CALL_EVENT_CREATE, native, msg, n);
		}
	}
	p->next = NULL;
	*out = p;
	return 0;
}

void gpu_pending_recycle(gpu_lane *lane, gpu_pending *p)
{
	gpu_handle ev = p->event;

	*p = (gpu_pending){.event = ev};
	pthread_mutex_lock(&lane->completion.lock);
	p->next = lane->spare;
	lane->spare = p;
	pthread_mutex_unlock(&lane->completion.lock);
}

void gpu_pending_push(gpu_lane *lane, gpu_pending *p)
{
	pthread_mutex_lock(&lane->completion.lock);
	odx__lane_push(&lane->completion, &p->link);
	pthread_mutex_unlock(&lane->completion.lock);
}

/* A bounded poll (cheap when work is short), then a blocking wait (events are created with
 * blocking sync, so the thread sleeps in the driver instead of spinning). */
static int wait_event(gpu_lane *lane, gpu_handle ev)
{
	const gpu_state *st = lane->dev->st;
	int native;

	if (st->poll_ns > 0) {
		uint64_t deadline = now_ns() + st->poll_ns;

		do {
			native = st->v->event_query(st->api, ev);
			if (native != st->v->not_ready)
				return native;
		} while (now_ns() < deadline);
	}
	return st->v->event_sync(st->api, ev);
}

static void block_release(gpu_lane *lane, gpu_block *b)
{
	pthread_mutex_lock(&lane->completion.lock);
	b->next = lane->free_blocks;
	lane->free_blocks = b;
	pthread_cond_signal(&lane->block_cond);
	pthread_mutex_unlock(&lane->completion.lock);
}

static gpu_block *block_take(gpu_lane *lane)
{
	gpu_block *b;

	pthread_mutex_lock(&lane->completion.lock);
	while (!lane->free_blocks)
		pthread_cond_wait(&lane->block_cond, &lane->completion.lock);
	b = lane->free_blocks;
	lane->free_blocks = b->next;
	pthread_mutex_unlock(&lane->completion.lock);
	return b;
}

/* What the completion thread does with a copy chunk once its event completed. */
static void chunk_complete(gpu_lane *lane, gpu_pending *p, int status, const char *msg)
{
	gpu_xfer *x = p->xfer;

	if (status && !x->status) {
		x->status = status;
		snprintf(x->msg, sizeof(x->msg), "%s", msg);
	}
	if (!x->status && x->kind == GPU_D2H && p->blk)
		memcpy((char *)x->host + p->off, p->blk->ptr, p->len);
	if (p->blk)
		block_release(lane, p->blk);
	if (p->last && !x->status && x->issue_status) {
		x->status = x->issue_status;
		snprintf(x->msg, sizeof(x->msg), "%s", x->issue_msg);
	}
}

static void *completer_main(void *arg)
{
	gpu_lane *lane = arg;
	gpu_dev *d = lane->dev;
	char msg[GPU_MSG_MAX];
	odx__lane_link *e;
	gpu_pending *p;

	gpu_make_current(d, msg, sizeof(msg)); /* a failure shows again in the first event wait */
	pthread_mutex_lock(&lane->completion.lock);
	for (;;) {
		int status = 0, native;

		e = odx__lane_wait(&lane->completion);
		p = ODX__LANE_ENTRY(e, gpu_pending, link);
		if (!p)
			break; /* stopping and drained */
		pthread_mutex_unlock(&lane->completion.lock);

		msg[0] = '\0';
		if (p->armed && (native = wait_event(lane, p->event)) != 0) {
			status = gpu_fail(d->st, d, GPU_CALL_EVENT_SYNC, native, msg, sizeof(msg));
		}
		if (p->xfer)
			chunk_complete(lane, p, status, msg);

		pthread_mutex_lock(&lane->completion.lock);
		odx__lane_pop(&lane->completion);
		pthread_mutex_unlock(&lane->completion.lock);

		/* Callbacks run with no lock of ours held. */
		if (p->xfer && p->last) {
			gpu_xfer *x = p->xfer;

			x->done(x->arg, x->status, x->status ? x->msg : NULL);
			free(x);
		} else if (!p->xfer && p->done) {
			p->done(p->arg, status, status ? msg : NULL);
		}
		gpu_pending_recycle(lane, p);
		pthread_mutex_lock(&lane->completion.lock);
	}
	pthread_mutex_unlock(&lane->completion.lock);
	return NULL;
}

/* Ends a copy job that could not be (fully) issued: the completion thread reports it in order. */
static void issue_failed(gpu_lane *lane, gpu_xfer *x, gpu_pending *p, int rc, const char *msg)
{
	x->issue_status = rc;
	snprintf(x->issue_msg, sizeof(x->issue_msg), "%s", msg);
	if (!p) {
		/* No record to be had (out of memory): one without an event, allocated plainly. */
		p = calloc(1, sizeof(*p));
		if (!p) {
			/* Nothing left to report through: complete here, on the issue thread,
			 * which is not the thread that queued the job. */
			x->done(x->arg, rc, x->issue_msg);
			free(x);
			return;
		}
	}
	p->armed = false;
	p->blk = NULL;
	p->xfer = x;
	p->last = true;
	gpu_pending_push(lane, p);
}

static void issue_xfer(gpu_lane *lane, gpu_xfer *x)
{
	gpu_dev *d = lane->dev;
	const gpu_vendor *v = d->st->v;
	char msg[GPU_MSG_MAX];
	gpu_pending *p = NULL;
	/* Once the last chunk is pushed the completion thread may free x: keep copies. */
	const size_t n = x->n;
	const uint64_t dev_addr = x->dev_addr;
	char *host = x->host;
	const int kind = x->kind;
	size_t off = 0, len;
	int rc, native;

	if ((rc = gpu_check_lost(d, msg, sizeof(msg))) != 0)
		goto out_fail;
	if (kind == GPU_2D) {
		/* The vendor's 2D copy in one call, no staging: from pageable host memory the
		 * driver stages it (and may return only once it has), on this thread. */
		if ((rc = gpu_pending_get(lane, &p, msg, sizeof(msg))) != 0)
			goto out_fail;
		native = v->copy_2d_async(d->st->api, &x->c2d, lane->stream);
		if (native) {
			rc = gpu_fail(d->st, d, GPU_CALL_COPY_2D, native, msg, sizeof(msg));
			goto out_fail;
		}
		native = v->event_record(d->st->api, p->event, lane->stream);
		if (native) {
			rc = gpu_fail(d->st, d, GPU_CALL_EVENT_RECORD, native, msg, sizeof(msg));
			goto out_fail;
		}
		*p = (gpu_pending){.event = p->event, .armed = true, .xfer = x, .last = true};
		gpu_pending_push(lane, p);
		return;
	}
	if (kind == GPU_D2D || (n > 0 && gpu_pinned_covers(host, n))) {
		/* Device to device, or page-locked host memory: one copy, no bounce. */
		gpu_call call = kind == GPU_D2D ? GPU_CALL_PEER
				: kind == GPU_H2D ? GPU_CALL_H2D
						  : GPU_CALL_D2H;

		if ((rc = gpu_pending_get(lane, &p, msg, sizeof(msg))) != 0)
			goto out_fail;
		if (kind == GPU_D2D)
			native = v->peer_async(d->st->api, dev_addr, d, x->peer_addr, x->peer, n,
					       lane->stream);
		else if (kind == GPU_H2D)
			native = v->h2d_async(d->st->api, dev_addr, host, n, lane->stream);
		else
			native = v->d2h_async(d->st->api, host, dev_addr, n, lane->stream);
		if (native) {
			rc = gpu_fail(d->st, d, call, native, msg, sizeof(msg));
			goto out_fail;
		}
		native = v->event_record(d->st->api, p->event, lane->stream);
		if (native) {
			rc = gpu_fail(d->st, d, GPU_CALL_EVENT_RECORD, native, msg, sizeof(msg));
			goto out_fail;
		}
		*p = (gpu_pending){.event = p->event, .armed = true, .xfer = x, .last = true};
		gpu_pending_push(lane, p);
		return;
	}
	do {
		gpu_block *blk;

		len = n - off < GPU_STAGE_BLOCK ? n - off : GPU_STAGE_BLOCK;
		if ((rc = gpu_pending_get(lane, &p, msg, sizeof(msg))) != 0)
			goto out_fail;
		blk = len ? block_take(lane) : NULL;
		native = 0;
		if (len && kind == GPU_H2D) {
			memcpy(blk->ptr, host + off, len);
			native = v->h2d_async(d->st->api, dev_addr + off, blk->ptr, len,
					      lane->stream);
			if (native)
				rc = gpu_fail(d->st, d, GPU_CALL_H2D, native, msg, sizeof(msg));
		} else if (len) {
			native = v->d2h_async(d->st->api, blk->ptr, dev_addr + off, len,
					      lane->stream);
			if (native)
				rc = gpu_fail(d->st, d, GPU_CALL_D2H, native, msg, sizeof(msg));
		}
		if (!native && (native = v->event_record(d->st->api, p->event, lane->stream)))
			rc = gpu_fail(d->st, d, GPU_CALL_EVENT_RECORD, native, msg, sizeof(msg));
		if (native) {
			if (blk)
				block_release(lane, blk);
			goto out_fail;
		}
		*p = (gpu_pending){.event = p->event, .armed = true, .xfer = x, .blk = blk,
				   .off = off, .len = len, .last = off + len == n};
		gpu_pending_push(lane, p);
		p = NULL;
		off += len;
	} while (off < n);
	return;

out_fail:
	{
		char full[GPU_MSG_MAX];

		snprintf(full, sizeof(full), "%s copy of %zu bytes (at byte %zu): %s", lane->name,
			 n, off, msg);
		issue_failed(lane, x, p, rc, full);
	}
}

static void *issuer_main(void *arg)
{
	gpu_lane *lane = arg;
	char msg[GPU_MSG_MAX];
	odx__lane_link *e;
	gpu_xfer *x;

	gpu_make_current(lane->dev, msg, sizeof(msg));
	pthread_mutex_lock(&lane->issue.lock);
	for (;;) {
		odx__lane_wait(&lane->issue);
		e = odx__lane_pop(&lane->issue);
		x = ODX__LANE_ENTRY(e, gpu_xfer, link);
		if (!x)
			break; /* stopping and drained */
		pthread_mutex_unlock(&lane->issue.lock);
		issue_xfer(lane, x);
		pthread_mutex_lock(&lane->issue.lock);
	}
	pthread_mutex_unlock(&lane->issue.lock);
	return NULL;
}

void gpu_lane_fini(gpu_lane *lane)
{
	const gpu_state *st = lane->dev->st;
	gpu_pending *p;
	int i;

	/* The issue thread first: what it issues last still reaches the completion thread. */
	odx__lane_stop(&lane->issue);
	odx__lane_stop(&lane->completion);
	while ((p = lane->spare) != NULL) {
		lane->spare = p->next;
		st->v->event_destroy(st->api, p->event);
		free(p);
	}
	for (i = 0; i < GPU_STAGE_BLOCKS; i++)
		if (lane->blocks[i].ptr)
			st->v->host_free(st->api, lane->blocks[i].ptr);
	for (i = 0; i < GPU_SYNC_PIECES; i++)
		if (lane->sync_events[i])
			st->v->event_destroy(st->api, lane->sync_events[i]);
	if (lane->sync_stream)
		st->v->stream_destroy(st->api, lane->sync_stream);
	if (lane->stream)
		st->v->stream_destroy(st->api, lane->stream);
	pthread_mutex_destroy(&lane->sync_lock);
	pthread_cond_destroy(&lane->block_cond);
	odx__lane_fini(&lane->issue);
	odx__lane_fini(&lane->completion);
}

/* Creates the lane's stream (and staging blocks for a copy lane) and starts its threads. The
 * device's context is current. On failure gpu_lane_fini undoes what was done. */
int gpu_lane_init(gpu_dev *d, gpu_lane *lane, const char *name, bool copy, char *msg,
		  size_t n)
{
	const gpu_state *st = d->st;
	char what[32];
	int native, i, rc;

	lane->dev = d;
	lane->name = name;
	odx__lane_init(&lane->completion);
	odx__lane_init(&lane->issue);
	pthread_cond_init(&lane->block_cond, NULL);
	pthread_mutex_init(&lane->sync_lock, NULL);
	native = st->v->stream_create(st->api, &lane->stream);
	if (native) {
		lane->stream = NULL;
		return gpu_fail(st, d, GPU_CALL_STREAM_CREATE, native, msg, n);
	}
	if (copy && (native = st->v->stream_create(st->api, &lane->sync_stream)) != 0) {
		lane->sync_stream = NULL;
		return gpu_fail(st, d, GPU_CALL_STREAM_CREATE, native, msg, n);
	}
	for (i = 0; copy && i < GPU_SYNC_PIECES; i++) {
		native = st->v->event_create(st->api, &lane->sync_events[i]);
		if (native) {
			lane->sync_events[i] = NULL;
			return gpu_fail(st, d, GPU_CALL_EVENT_CREATE, native, msg, n);
		}
	}
	for (i = 0; copy && i < GPU_STAGE_BLOCKS; i++) {
		native = st->v->host_alloc(st->api, &lane->blocks[i].ptr, GPU_STAGE_BLOCK);
		if (native) {
			lane->blocks[i].ptr = NULL;
			return gpu_fail(st, d, GPU_CALL_HOST_ALLOC, native, msg, n);
		}
		lane->blocks[i].next = lane->free_blocks;
		lane->free_blocks = &lane->blocks[i];
	}
	snprintf(what, sizeof(what), "%s completion", name);
	rc = odx__lane_start(&lane->completion, completer_main, lane, NULL, what, msg, n);
	if (rc || !copy)
		return rc;
	snprintf(what, sizeof(what), "%s issue", name);
	return odx__lane_start(&lane->issue, issuer_main, lane, NULL, what, msg, n);
}

/* ---- copies ------------------------------------------------------------------------------------ */

static int queue_xfer(gpu_lane *lane, const gpu_xfer *proto)
{
	gpu_xfer *x = malloc(sizeof(*x));

	if (!x)
		return ODX_ENOMEM;
	*x = *proto;
	x->status = x->issue_status = 0;
	x->msg[0] = x->issue_msg[0] = '\0';
	pthread_mutex_lock(&lane->issue.lock);
	odx__lane_push(&lane->issue, &x->link);
	pthread_mutex_unlock(&lane->issue.lock);
	return 0;
}

int gpu_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
		 odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;

	return queue_xfer(&d->h2d, &(gpu_xfer){.kind = GPU_H2D, .dev_addr = dst + dst_off,
					       .host = (void *)src, .n = n, .done = done,
					       .arg = arg});
}

int gpu_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
		 odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;

	return queue_xfer(&d->d2h, &(gpu_xfer){.kind = GPU_D2H, .dev_addr = src + src_off,
					       .host = dst, .n = n, .done = done, .arg = arg});
}

int gpu_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
		 size_t src_off, size_t n, odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;

	if (!d->st->v->peer_async)
		return ODX_ENOSYS;
	/* Inbound traffic of the destination: its h2d lane. */
	return queue_xfer(&d->h2d, &(gpu_xfer){.kind = GPU_D2D, .dev_addr = dst + dst_off,
					       .peer = src_dev, .peer_addr = src + src_off, .n = n,
					       .done = done, .arg = arg});
}

/* ABI 1.7: one vendor 2D copy on the copy lane of its direction (device to device on the
 * destination's inbound lane, as copy_d2d), completed like the other copies. */
int gpu_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;
	const gpu_vendor *v = d->st->v;
	gpu_xfer x = {.kind = GPU_2D, .done = done, .arg = arg};
	int rc = odx__copy2d_check(c);

	if (rc)
		return rc;
	if (!v->copy_2d_async || !v->copy_2d_available(d->st->api))
		return ODX_ENOSYS;
	x.n = c->width * c->rows; /* fits: at most either side's span */
	x.c2d = (gpu_copy2d){
		.width = c->width,
		.rows = c->rows,
		.dst_host = c->dst_host,
		.dst = c->dst_host ? 0 : c->dst + c->dst_off,
		.dst_pitch = c->dst_pitch,
		.src_host = c->src_host,
		.src = c->src_host ? 0 : c->src + c->src_off,
		.src_pitch = c->src_pitch,
	};
	x.host = c->dst_host ? c->dst_host : (void *)(uintptr_t)c->src_host;
	return queue_xfer(c->dst_host ? &d->d2h : &d->h2d, &x);
}

/* ---- blocking copies (ABI 1.3 copy_sync) ------------------------------------------------------- */

/*
 * odx_buffer_read and odx_buffer_write between user memory and a device's copy, on the
 * application's thread, which waits anyway. The shape, chosen without a GPU to measure it on:
 *  - an asynchronous copy on the lane's sync stream and a wait for an event recorded behind it,
 *    one caller per lane at a time, so that the wait covers exactly this copy: not the lane's own
 *    stream, where a read would wait behind every prefetch and eviction queued there (and a
 *    cuStreamSynchronize there behind the copies queued after it); and an event, polled briefly
 *    and then slept on like the lanes' events, rather than cuStreamSynchronize, which spins or
 *    yields as the context's scheduling flags say.
 *  - not the synchronous cuMemcpyHtoD / hipMemcpyHtoD: they run on the legacy default stream,
 *    which does not order the non-blocking lane streams, and from pageable memory they may
 *    return before the bytes reached the device, so the core's next launch could miss them.
 *  - pageable memory up to one piece goes to the driver as it is: the driver stages it as we
 *    would, and a small read or write then never waits for a staging block held by the lane's
 *    copies. A larger pageable copy borrows one block of the lane and goes through it in pieces,
 *    the memcpy of one piece overlapping the transfer of the others. Page-locked memory
 *    (registered, host_alloc) is copied in one piece with no bounce, as on the lanes.
 */

/* Queues one copy on the sync stream and records the event of `slot` behind it. */
static int sync_issue(gpu_lane *lane, bool to_device, uint64_t addr, void *host, size_t n, int slot,
		      char *msg, size_t msg_size)
{
	gpu_dev *d = lane->dev;
	const gpu_state *st = d->st;
	int native = to_device ? st->v->h2d_async(st->api, addr, host, n, lane->sync_stream)
			       : st->v->d2h_async(st->api, host, addr, n, lane->sync_stream);

	if (native)
		return gpu_fail(st, d, to_device ? GPU_CALL_H2D : GPU_CALL_D2H, native, msg,
				msg_size);
	native = st->v->event_record(st->api, lane->sync_events[slot], lane->sync_stream);
	return native ? gpu_fail(st, d, GPU_CALL_EVENT_RECORD, native, msg, msg_size) : 0;
}

static int sync_wait(gpu_lane *lane, int slot, char *msg, size_t msg_size)
{
	int native = wait_event(lane, lane->sync_events[slot]);

	return native ? gpu_fail(lane->dev->st, lane->dev, GPU_CALL_EVENT_SYNC, native, msg,
				 msg_size)
		      : 0;
}

/* After a failure: no piece may still use the staging block when it goes back to the lane. The
 * first error is the one reported. */
static void sync_drain(gpu_lane *lane)
{
	const gpu_state *st = lane->dev->st;

	st->v->stream_sync(st->api, lane->sync_stream);
}

/* Pageable memory to the device through one staging block: piece k fills slot k % PIECES once
 * the piece before it in that slot has left. *at: where the failing piece starts. */
static int sync_staged_h2d(gpu_lane *lane, uint64_t addr, const char *host, size_t n, size_t *at,
			   char *msg, size_t msg_size)
{
	gpu_block *blk = block_take(lane);
	char *slots = blk->ptr;
	size_t off = 0, len, k = 0;
	int slot, rc = 0;

	while (off < n) {
		slot = (int)(k % GPU_SYNC_PIECES);
		len = n - off < GPU_SYNC_PIECE ? n - off : GPU_SYNC_PIECE;
		*at = off;
		if (k >= GPU_SYNC_PIECES && (rc = sync_wait(lane, slot, msg, msg_size)) != 0)
			break;
		memcpy(slots + (size_t)slot * GPU_SYNC_PIECE, host + off, len);
		rc = sync_issue(lane, true, addr + off, slots + (size_t)slot * GPU_SYNC_PIECE, len,
				slot, msg, msg_size);
		if (rc)
			break;
		off += len;
		k++;
	}
	/* One stream: the last piece's event completes after every piece before it. */
	if (!rc)
		rc = sync_wait(lane, (int)((k - 1) % GPU_SYNC_PIECES), msg, msg_size);
	else
		sync_drain(lane);
	block_release(lane, blk);
	return rc;
}

/* From the device into pageable memory through one staging block: every slot kept in flight,
 * each piece copied out in order once its event completed. */
static int sync_staged_d2h(gpu_lane *lane, uint64_t addr, char *host, size_t n, size_t *at,
			   char *msg, size_t msg_size)
{
	gpu_block *blk = block_take(lane);
	char *slots = blk->ptr;
	size_t issued = 0, done = 0, k_issued = 0, k_done = 0, len;
	int slot, rc = 0;

	while (done < n) {
		while (issued < n && k_issued - k_done < GPU_SYNC_PIECES) {
			slot = (int)(k_issued % GPU_SYNC_PIECES);
			len = n - issued < GPU_SYNC_PIECE ? n - issued : GPU_SYNC_PIECE;
			*at = issued;
			rc = sync_issue(lane, false, addr + issued,
					slots + (size_t)slot * GPU_SYNC_PIECE, len, slot, msg,
					msg_size);
			if (rc)
				goto out_drain;
			issued += len;
			k_issued++;
		}
		slot = (int)(k_done % GPU_SYNC_PIECES);
		len = n - done < GPU_SYNC_PIECE ? n - done : GPU_SYNC_PIECE;
		*at = done;
		if ((rc = sync_wait(lane, slot, msg, msg_size)) != 0)
			goto out_drain;
		memcpy(host + done, slots + (size_t)slot * GPU_SYNC_PIECE, len);
		done += len;
		k_done++;
	}
	block_release(lane, blk);
	return 0;

out_drain:
	sync_drain(lane);
	block_release(lane, blk);
	return rc;
}

int gpu_copy_sync(void *dev, bool to_device, uint64_t mem, size_t off, void *host, size_t n,
		  char *error, size_t error_size)
{
	gpu_dev *d = dev;
	gpu_lane *lane = to_device ? &d->h2d : &d->d2h;
	const uint64_t addr = mem + off;
	char msg[GPU_MSG_MAX];
	size_t at = 0;
	int rc;

	if (n == 0)
		return 0;
	if ((rc = gpu_check_lost(d, error, error_size)) != 0)
		return rc;
	if ((rc = gpu_make_current(d, msg, sizeof(msg))) != 0)
		goto out_msg;
	pthread_mutex_lock(&lane->sync_lock);
	if (n <= GPU_SYNC_PIECE || gpu_pinned_covers(host, n)) {
		rc = sync_issue(lane, to_device, addr, host, n, 0, msg, sizeof(msg));
		if (!rc)
			rc = sync_wait(lane, 0, msg, sizeof(msg));
	} else if (to_device) {
		rc = sync_staged_h2d(lane, addr, host, n, &at, msg, sizeof(msg));
	} else {
		rc = sync_staged_d2h(lane, addr, host, n, &at, msg, sizeof(msg));
	}
	pthread_mutex_unlock(&lane->sync_lock);
	if (!rc)
		return 0;
out_msg:
	snprintf(error, error_size, "blocking %s copy of %zu bytes (at byte %zu): %s", lane->name,
		 n, at, msg);
	return rc;
}
