/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu.c - the GPU skeleton: the backend ABI over a gpu_vendor table (see gpu.h for the design).
 *
 * Threads per device: the core's worker (launches, allocations, module loads), one completion
 * thread per lane (compute, h2d, d2h) and one issue thread per copy lane. Done callbacks run only
 * on completion threads, never inside the call that queued the work, and never with a lock of
 * ours held (a callback may queue more work on any device). copy_sync runs on the application's
 * thread, on a stream of its copy lane's, and calls no callback.
 *
 * Page-locked host memory (host_register, host_alloc) is kept in one list per process, because
 * the driver's registrations are per process: see "page-locked host memory" below.
 *
 * One file of ~1,400 lines on purpose: it is the whole backend ABI for two vendors, each a
 * gpu_vendor table of driver calls; its sections (devices, memory, lanes, launches, page-locked
 * memory) share the device state, and splitting it would put the table's users in five files.
 */
#include <sched.h>
#include <stdarg.h>
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

/* One unit of work the completion thread waits for, in stream order. */
struct gpu_pending {
	odx__lane_link link;     /* in the completion thread's queue */
	gpu_pending *next;       /* in the spare list */
	gpu_handle event;        /* created once, reused with the record */
	bool armed;              /* the event was recorded: wait for it */
	odx_backend_done_fn done; /* compute lane: the launch's completion */
	void *arg;
	gpu_xfer *xfer;          /* copy lanes: the job and this chunk */
	bool last;
	gpu_block *blk;
	size_t off, len;
};

typedef struct gpu_module {
	gpu_handle mod;
	gpu_handle fn;
	char entry[128];
	int checked;             /* 0: arguments not checked yet, 1: they match, <0: they do not */
	char check_msg[256];
} gpu_module;

/*
 * Host memory the driver keeps page-locked for us; copies from and to it skip the staging blocks.
 * Process-wide, like the driver's own bookkeeping: a portable registration holds for every context
 * of the process and a second registration of the same pages is refused, so the devices of one
 * ODX context, and the contexts of one process, share one registration per range, counted. (One
 * driver per process: this file is compiled into each vendor's module separately.)
 */
typedef enum gpu_pinned_kind {
	GPU_PINNED_REGISTERED, /* host_register: ours, unregistered with the last reference */
	GPU_PINNED_FOREIGN,    /* host_register found the pages locked already: left alone, and
				* staged (how long and how much of it stays locked is not ours) */
	GPU_PINNED_ALLOC,      /* host_alloc memory, until gpu_host_free */
} gpu_pinned_kind;

typedef struct gpu_pinned {
	struct gpu_pinned *next;
	char *base;
	size_t size;
	int refs;                /* host_register calls not undone yet */
	gpu_pinned_kind kind;
} gpu_pinned;

/* pinned_lock guards the list (held briefly: the issue threads look ranges up); reg_lock
 * serialises the driver calls that change it, which can take long for a large range. */
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pinned_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static gpu_pinned *pinned_ranges;

static bool pinned_covers(const void *p, size_t n);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gpu_log(const gpu_state *st, odx_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	odx__backend_vlog(st->env, level, fmt, ap);
	va_end(ap);
}

/* ---- errors and device loss ---------------------------------------------------------------- */

int gpu_fail(const gpu_state *st, gpu_dev *d, gpu_call call, int native, char *msg, size_t n)
{
	const gpu_vendor *v = st->v;
	const char *name = v->err_name(st->api, native);
	const char *text = v->err_string(st->api, native);
	bool sticky = false;
	int rc = v->translate(native, &sticky);

	snprintf(msg, n, "%s: %s (%d)%s%s", v->calls[call], name ? name : "unknown error", native,
		 text ? ": " : "", text ? text : "");
	if (sticky && d) {
		pthread_mutex_lock(&d->lost_lock);
		if (atomic_load(&d->lost) == 0) {
			snprintf(d->lost_msg, sizeof(d->lost_msg), "%s", msg);
			atomic_store(&d->lost, native);
			gpu_log(st, ODX_LOG_ERROR,
				"%s device %d (%s) is lost: %s; every further operation on it "
				"fails with ODX_EDEVLOST",
				v->label, d->index, d->name, msg);
		}
		pthread_mutex_unlock(&d->lost_lock);
		rc = ODX_EDEVLOST;
	}
	return rc;
}

/* ODX_EDEVLOST with the first error in msg if the device is lost, else 0. */
static int check_lost(gpu_dev *d, char *msg, size_t n)
{
	if (atomic_load(&d->lost) == 0)
		return 0;
	pthread_mutex_lock(&d->lost_lock);
	snprintf(msg, n, "%s device %d (%s) was lost after an earlier error: %s",
		 d->st->v->label, d->index, d->name, d->lost_msg);
	pthread_mutex_unlock(&d->lost_lock);
	return ODX_EDEVLOST;
}

static int make_current(gpu_dev *d, char *msg, size_t n)
{
	int native = d->st->v->make_current(d->st->api, d->index, d->info.ctx);

	return native ? gpu_fail(d->st, d, GPU_CALL_MAKE_CURRENT, native, msg, n) : 0;
}

/* ---- lanes: pending records, completion and issue threads -------------------------------------- */

/* A record with an event, recycled or new. Needs the device's context current. */
static int pending_get(gpu_lane *lane, gpu_pending **out, char *msg, size_t n)
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

static void pending_recycle(gpu_lane *lane, gpu_pending *p)
{
	gpu_handle ev = p->event;

	*p = (gpu_pending){.event = ev};
	pthread_mutex_lock(&lane->completion.lock);
	p->next = lane->spare;
	lane->spare = p;
	pthread_mutex_unlock(&lane->completion.lock);
}

static void pending_push(gpu_lane *lane, gpu_pending *p)
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

	make_current(d, msg, sizeof(msg)); /* a failure shows again in the first event wait */
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
		pending_recycle(lane, p);
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
	pending_push(lane, p);
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

	if ((rc = check_lost(d, msg, sizeof(msg))) != 0)
		goto out_fail;
	if (kind == GPU_2D) {
		/* The vendor's 2D copy in one call, no staging: from pageable host memory the
		 * driver stages it (and may return only once it has), on this thread. */
		if ((rc = pending_get(lane, &p, msg, sizeof(msg))) != 0)
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
		pending_push(lane, p);
		return;
	}
	if (kind == GPU_D2D || (n > 0 && pinned_covers(host, n))) {
		/* Device to device, or page-locked host memory: one copy, no bounce. */
		gpu_call call = kind == GPU_D2D ? GPU_CALL_PEER
				: kind == GPU_H2D ? GPU_CALL_H2D
						  : GPU_CALL_D2H;

		if ((rc = pending_get(lane, &p, msg, sizeof(msg))) != 0)
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
		pending_push(lane, p);
		return;
	}
	do {
		gpu_block *blk;

		len = n - off < GPU_STAGE_BLOCK ? n - off : GPU_STAGE_BLOCK;
		if ((rc = pending_get(lane, &p, msg, sizeof(msg))) != 0)
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
		pending_push(lane, p);
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

	make_current(lane->dev, msg, sizeof(msg));
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

static void lane_fini(gpu_lane *lane)
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
 * device's context is current. On failure lane_fini undoes what was done. */
static int lane_init(gpu_dev *d, gpu_lane *lane, const char *name, bool copy, char *msg, size_t n)
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

/* ---- driver and devices ------------------------------------------------------------------------ */

int gpu_open(const gpu_vendor *v, const odx_backend_host *env, void **state, char *reason,
	     size_t n)
{
	gpu_state *st = calloc(1, sizeof(*st));
	char msg[GPU_MSG_MAX];
	int64_t spin_us = 20;
	int rc, native, count = 0;

	if (!st) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	st->v = v;
	st->env = env;
	rc = v->open(env, &st->api, reason, n);
	if (rc) {
		free(st);
		return rc;
	}
	native = v->device_count(st->api, &count);
	if (native) {
		rc = gpu_fail(st, NULL, GPU_CALL_DEVICE_COUNT, native, msg, sizeof(msg));
		snprintf(reason, n, "%s", msg);
		v->close(st->api);
		free(st);
		return rc == ODX_EUNAVAIL ? rc : ODX_EUNAVAIL;
	}
	if (count <= 0) {
		snprintf(reason, n, "the %s driver opened but reports no device", v->label);
		v->close(st->api);
		free(st);
		return ODX_EUNAVAIL;
	}
	/* The same bound the core's workers poll for before sleeping. */
	if (env->config_int)
		env->config_int(env->core, "sched.idle_spin_us", &spin_us);
	st->poll_ns = spin_us > 0 ? (uint64_t)spin_us * 1000u : 0;
	st->ndevices = count;
	gpu_log(st, ODX_LOG_INFO, "%s backend: %d device%s", v->label, count, count == 1 ? "" : "s");
	*state = st;
	return 0;
}

void gpu_close(void *state)
{
	gpu_state *st = state;

	st->v->close(st->api);
	free(st);
}

int gpu_device_count(void *state)
{
	return ((gpu_state *)state)->ndevices;
}

int gpu_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
		    void **out)
{
	gpu_state *st = state;
	const gpu_vendor *v = st->v;
	gpu_dev *d = calloc(1, sizeof(*d));
	char msg[GPU_MSG_MAX];
	int rc, native;

	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->index = index;
	d->odx_device = odx_device;
	pthread_mutex_init(&d->lost_lock, NULL);
	pthread_mutex_init(&d->aux_lock, NULL);
	native = v->device_open(st->api, index, props, &d->info);
	if (native) {
		rc = gpu_fail(st, NULL, GPU_CALL_DEVICE_OPEN, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_ERROR, "%s device %d cannot be opened: %s", v->label, index,
			msg);
		pthread_mutex_destroy(&d->lost_lock);
		pthread_mutex_destroy(&d->aux_lock);
		free(d);
		return rc;
	}
	snprintf(d->name, sizeof(d->name), "%s", props->name);
	rc = make_current(d, msg, sizeof(msg));
	if (!rc && (native = v->stream_create(st->api, &d->aux_stream)) != 0)
		rc = gpu_fail(st, d, GPU_CALL_STREAM_CREATE, native, msg, sizeof(msg));
	if (!rc)
		rc = lane_init(d, &d->compute, "compute", false, msg, sizeof(msg));
	if (!rc)
		rc = lane_init(d, &d->h2d, "h2d", true, msg, sizeof(msg));
	if (!rc)
		rc = lane_init(d, &d->d2h, "d2h", true, msg, sizeof(msg));
	if (rc) {
		gpu_log(st, ODX_LOG_ERROR, "%s device %d (%s) cannot be set up: %s", v->label,
			index, d->name, msg);
		gpu_device_close(d);
		return rc;
	}
	/* Leave the driver some room (local memory, launch resources) below what is free now. */
	if (d->info.free_bytes && d->info.free_bytes < props->memory_bytes)
		props->memory_bytes = d->info.free_bytes;
	props->memory_bytes -= props->memory_bytes / 20;
	props->compute_lanes = 1;
	props->copy_lanes = 2;
	props->threads = 0;
	props->host_visible = false;
	/* One compute stream, its events waited for in order by one thread. */
	props->ordered_compute = true;
	/* What cuMemAlloc and hipMalloc guarantee, enough for any vector access of a kernel. */
	props->mem_align = 256;
	gpu_log(st, ODX_LOG_INFO,
		"%s device %d: %s, %.1f GiB usable, PCI %s, arch %d, staging %dx%u MiB per copy "
		"lane",
		v->label, index, d->name, (double)props->memory_bytes / (1u << 30),
		props->pci_bus_id[0] ? props->pci_bus_id : "?", d->info.arch, GPU_STAGE_BLOCKS,
		GPU_STAGE_BLOCK >> 20);
	*out = d;
	return 0;
}

void gpu_device_close(void *dev)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];

	make_current(d, msg, sizeof(msg));
	if (d->compute.dev)
		lane_fini(&d->compute);
	if (d->h2d.dev)
		lane_fini(&d->h2d);
	if (d->d2h.dev)
		lane_fini(&d->d2h);
	if (d->aux_stream)
		st->v->stream_destroy(st->api, d->aux_stream);
	st->v->device_close(st->api, d->index, d->info.ctx);
	pthread_mutex_destroy(&d->lost_lock);
	pthread_mutex_destroy(&d->aux_lock);
	free(d);
}

/* ---- memory ------------------------------------------------------------------------------------ */

int gpu_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	uint64_t p = 0;
	int rc, native;

	if ((rc = check_lost(d, msg, sizeof(msg))) != 0 || (rc = make_current(d, msg, sizeof(msg))))
		goto out_log;
	native = st->v->mem_alloc(st->api, &p, size);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MEM_ALLOC, native, msg, sizeof(msg));
		goto out_log;
	}
	if (zero) {
		/* On a stream of its own, waited for here: the memory is zero before any lane
		 * can use it. */
		pthread_mutex_lock(&d->aux_lock);
		native = st->v->memset_async(st->api, p, 0, size, d->aux_stream);
		if (native)
			rc = gpu_fail(st, d, GPU_CALL_MEMSET, native, msg, sizeof(msg));
		else if ((native = st->v->stream_sync(st->api, d->aux_stream)) != 0)
			rc = gpu_fail(st, d, GPU_CALL_STREAM_SYNC, native, msg, sizeof(msg));
		pthread_mutex_unlock(&d->aux_lock);
		if (rc) {
			st->v->mem_free(st->api, p);
			goto out_log;
		}
	}
	*handle = p;
	return 0;

out_log:
	gpu_log(st, rc == ODX_ENOMEM ? ODX_LOG_WARN : ODX_LOG_ERROR,
		"%s device %d (%s): allocation of %zu bytes failed: %s", st->v->label, d->index,
		d->name, size, msg);
	if (ODX_BACKEND_HAS_OP(st->env, odx_backend_host, error_detail))
		st->env->error_detail(st->env->core, msg);
	return rc;
}

void gpu_mem_free(void *dev, uint64_t handle, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	int native;

	if (make_current(d, msg, sizeof(msg)) != 0)
		return;
	native = st->v->mem_free(st->api, handle);
	if (native && atomic_load(&d->lost) == 0) {
		gpu_fail(st, d, GPU_CALL_MEM_FREE, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_WARN, "%s device %d: freeing %zu bytes: %s", st->v->label,
			d->index, size, msg);
	}
}

/* ---- page-locked host memory ------------------------------------------------------------------ */

/* The host_register entry for exactly this range (host_alloc entries are not counted). Called
 * with pinned_lock held. */
static gpu_pinned *pinned_find(const void *base, size_t size)
{
	gpu_pinned *e;

	for (e = pinned_ranges; e; e = e->next)
		if (e->base == base && e->size == size && e->kind != GPU_PINNED_ALLOC)
			return e;
	return NULL;
}

static void pinned_add(gpu_pinned *e)
{
	pthread_mutex_lock(&pinned_lock);
	e->next = pinned_ranges;
	pinned_ranges = e;
	pthread_mutex_unlock(&pinned_lock);
}

/* Called with pinned_lock held. */
static void pinned_unlink(gpu_pinned *e)
{
	gpu_pinned **pp;

	for (pp = &pinned_ranges; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			return;
		}
}

/* Do the `n` bytes at `p` lie in memory the driver keeps page-locked for our copies? The core
 * unregisters a range only once no copy of it is queued, so the answer holds until the copy's
 * done callback. */
static bool pinned_covers(const void *p, size_t n)
{
	const char *c = p;
	gpu_pinned *e;
	bool yes = false;

	pthread_mutex_lock(&pinned_lock);
	for (e = pinned_ranges; e && !yes; e = e->next)
		yes = e->kind != GPU_PINNED_FOREIGN && c >= e->base && n <= e->size &&
		      (size_t)(c - e->base) <= e->size - n;
	pthread_mutex_unlock(&pinned_lock);
	return yes;
}

/*
 * ABI 1.3: page-locks application memory (portable: for every context of the process), once per
 * range per process; the devices and contexts that register the same range again only count it.
 * Memory the driver finds locked already (the application's own registration or pinned
 * allocation, or a registered buffer sharing its pages) is accepted as it is, never unregistered
 * by us, and copied through the staging blocks. Any other failure costs only speed: the native
 * error is logged here, the core logs what it means.
 */
int gpu_host_register(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	int rc, native;

	if ((rc = check_lost(d, msg, sizeof(msg))) != 0)
		goto out_log;
	pthread_mutex_lock(&pinned_reg_lock);
	pthread_mutex_lock(&pinned_lock);
	e = pinned_find(ptr, size);
	if (e)
		e->refs++;
	pthread_mutex_unlock(&pinned_lock);
	if (e)
		goto out_unlock;
	e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(msg, sizeof(msg), "out of memory");
		rc = ODX_ENOMEM;
		goto out_unlock;
	}
	*e = (gpu_pinned){.base = ptr, .size = size, .refs = 1, .kind = GPU_PINNED_REGISTERED};
	if ((rc = make_current(d, msg, sizeof(msg))) != 0)
		goto out_free;
	native = st->v->host_register(st->api, ptr, size);
	if (native && native == st->v->already_registered) {
		gpu_fail(st, d, GPU_CALL_HOST_REGISTER, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_INFO,
			"%s device %d (%s): %zu bytes at %p are page-locked already (%s): left as "
			"they are, copies of them go through the staging blocks",
			st->v->label, d->index, d->name, size, ptr, msg);
		e->kind = GPU_PINNED_FOREIGN;
	} else if (native) {
		rc = gpu_fail(st, d, GPU_CALL_HOST_REGISTER, native, msg, sizeof(msg));
		goto out_free;
	}
	pinned_add(e);
	goto out_unlock;

out_free:
	free(e);
out_unlock:
	pthread_mutex_unlock(&pinned_reg_lock);
	if (!rc)
		return 0;
out_log:
	gpu_log(st, rc == ODX_ENOSYS ? ODX_LOG_INFO : ODX_LOG_WARN,
		"%s device %d (%s): page-locking %zu bytes at %p: %s", st->v->label, d->index,
		d->name, size, ptr, msg);
	return rc;
}

void gpu_host_unregister(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	bool last = false;
	int rc = 0, native;

	pthread_mutex_lock(&pinned_reg_lock);
	pthread_mutex_lock(&pinned_lock);
	e = pinned_find(ptr, size);
	if (e && --e->refs == 0) {
		pinned_unlink(e);
		last = true;
	}
	pthread_mutex_unlock(&pinned_lock);
	if (!e) {
		gpu_log(st, ODX_LOG_WARN, "%s device %d: %zu bytes at %p were never page-locked",
			st->v->label, d->index, size, ptr);
	} else if (last) {
		if (e->kind == GPU_PINNED_REGISTERED) {
			rc = make_current(d, msg, sizeof(msg));
			if (!rc && (native = st->v->host_unregister(st->api, ptr)) != 0)
				rc = gpu_fail(st, d, GPU_CALL_HOST_UNREGISTER, native, msg,
					      sizeof(msg));
			if (rc)
				gpu_log(st, ODX_LOG_WARN,
					"%s device %d (%s): unlocking %zu bytes at %p: %s",
					st->v->label, d->index, d->name, size, ptr, msg);
		}
		free(e);
	}
	pthread_mutex_unlock(&pinned_reg_lock);
}

/* Pinned host memory for the core's staging pool (ABI 1.2); copies from and to it need no
 * bounce. */
int gpu_host_alloc(void *dev, size_t size, void **ptr)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e;
	void *p = NULL;
	int rc, native;

	if ((rc = check_lost(d, msg, sizeof(msg))) != 0 || (rc = make_current(d, msg, sizeof(msg))))
		goto out_log;
	native = st->v->host_alloc(st->api, &p, size);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_HOST_ALLOC, native, msg, sizeof(msg));
		goto out_log;
	}
	/* Without its record the memory only loses the direct path. */
	e = calloc(1, sizeof(*e));
	if (e) {
		*e = (gpu_pinned){.base = p, .size = size, .refs = 1, .kind = GPU_PINNED_ALLOC};
		pinned_add(e);
	}
	*ptr = p;
	return 0;

out_log:
	gpu_log(st, ODX_LOG_WARN, "%s device %d (%s): %zu bytes of pinned host memory: %s",
		st->v->label, d->index, d->name, size, msg);
	if (ODX_BACKEND_HAS_OP(st->env, odx_backend_host, error_detail))
		st->env->error_detail(st->env->core, msg);
	return rc;
}

void gpu_host_free(void *dev, void *ptr, size_t size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX];
	gpu_pinned *e, **pp;
	int native;

	if (!ptr)
		return;
	pthread_mutex_lock(&pinned_lock);
	for (pp = &pinned_ranges; (e = *pp) != NULL; pp = &e->next)
		if (e->base == ptr && e->kind == GPU_PINNED_ALLOC) {
			*pp = e->next;
			free(e);
			break;
		}
	pthread_mutex_unlock(&pinned_lock);
	if (make_current(d, msg, sizeof(msg)) != 0)
		return;
	native = st->v->host_free(st->api, ptr);
	if (native && atomic_load(&d->lost) == 0) {
		gpu_fail(st, d, GPU_CALL_HOST_FREE, native, msg, sizeof(msg));
		gpu_log(st, ODX_LOG_WARN, "%s device %d: freeing %zu bytes of pinned memory: %s",
			st->v->label, d->index, size, msg);
	}
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
	if ((rc = check_lost(d, error, error_size)) != 0)
		return rc;
	if ((rc = make_current(d, msg, sizeof(msg))) != 0)
		goto out_msg;
	pthread_mutex_lock(&lane->sync_lock);
	if (n <= GPU_SYNC_PIECE || pinned_covers(host, n)) {
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

/* ---- modules and launches ---------------------------------------------------------------------- */

bool gpu_can_run(void *dev, const odx_kernel_variant *variant)
{
	gpu_dev *d = dev;

	return d->st->v->can_run(d->st->api, d, variant);
}

int gpu_module_load(void *dev, const odx_kernel_variant *variant, void **module, char *error,
		    size_t error_size)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	char msg[GPU_MSG_MAX], log[2048];
	gpu_module *m;
	int rc, native;

	if ((rc = check_lost(d, error, error_size)) != 0)
		return rc;
	if (!variant->entry || !variant->entry[0]) {
		snprintf(error, error_size, "the %s variant names no entry point", st->v->label);
		return ODX_EINVAL;
	}
	if ((rc = make_current(d, error, error_size)) != 0)
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		return ODX_ENOMEM;
	snprintf(m->entry, sizeof(m->entry), "%s", variant->entry);
	log[0] = '\0';
	native = st->v->module_load(st->api, d, variant, &m->mod, log, sizeof(log));
	if (native < 0) {
		/* Refused before the vendor's loader (a compiler's verdict): no native code. */
		snprintf(error, error_size, "%s; device arch %d", log, d->info.arch);
		free(m);
		return native;
	}
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MODULE_LOAD, native, msg, sizeof(msg));
		snprintf(error, error_size, "%s; %s; device arch %d", msg, log, d->info.arch);
		free(m);
		return rc;
	}
	native = st->v->module_function(st->api, m->mod, m->entry, &m->fn);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_MODULE_FUNCTION, native, msg, sizeof(msg));
		snprintf(error, error_size,
			 "%s(\"%s\"): %s (is the kernel declared extern \"C\" and __global__?)",
			 st->v->calls[GPU_CALL_MODULE_FUNCTION], m->entry, msg);
		st->v->module_unload(st->api, m->mod);
		free(m);
		return rc;
	}
	if (log[0])
		gpu_log(st, ODX_LOG_DEBUG, "%s device %d: loaded '%s': %s", st->v->label, d->index,
			m->entry, log);
	*module = m;
	return 0;
}

void gpu_module_unload(void *dev, void *module)
{
	gpu_dev *d = dev;
	gpu_module *m = module;
	char msg[GPU_MSG_MAX];

	if (make_current(d, msg, sizeof(msg)) == 0)
		d->st->v->module_unload(d->st->api, m->mod);
	free(m);
}

static size_t arg_bytes(odx_arg_kind k)
{
	return k == ODX_ARG_I32 || k == ODX_ARG_F32 ? 4 : 8;
}

static const char *arg_kind_name(odx_arg_kind k)
{
	switch (k) {
	case ODX_ARG_BUFFER:
		return "a buffer (device pointer)";
	case ODX_ARG_I32:
		return "an i32";
	case ODX_ARG_I64:
		return "an i64";
	case ODX_ARG_F32:
		return "an f32";
	default:
		return "an f64";
	}
}

/* Compares the task's arguments with the kernel's parameters, where the vendor can tell them
 * (cuFuncGetParamInfo, CUDA 12.4+): a mismatch would otherwise be a silent wrong result or a
 * fault. Once per module: every task of a kernel has the same signature. */
static int check_args(gpu_dev *d, gpu_module *m, const odx_backend_launch *l)
{
	const gpu_vendor *v = d->st->v;
	size_t size;
	int i, native;

	if (m->checked == 0 && v->param_size) {
		m->checked = 1;
		for (i = 0; i <= l->nargs && m->checked == 1; i++) {
			native = v->param_size(d->st->api, m->fn, i, &size);
			if (native == -1)
				break; /* the driver cannot tell */
			if (i == l->nargs) {
				if (native == 0)
					snprintf(m->check_msg, sizeof(m->check_msg),
						 "kernel '%s' takes more than the %d arguments the "
						 "task passes",
						 m->entry, l->nargs);
				m->checked = native == 0 ? -1 : 1;
			} else if (native != 0) {
				snprintf(m->check_msg, sizeof(m->check_msg),
					 "kernel '%s' takes %d parameters, the task passes %d",
					 m->entry, i, l->nargs);
				m->checked = -1;
			} else if (size != arg_bytes(l->args[i].kind)) {
				snprintf(m->check_msg, sizeof(m->check_msg),
					 "parameter %d of kernel '%s' is %zu bytes, the task passes "
					 "%s (%zu bytes)",
					 i, m->entry, size, arg_kind_name(l->args[i].kind),
					 arg_bytes(l->args[i].kind));
				m->checked = -1;
			}
		}
	}
	if (m->checked < 0) {
		snprintf(l->error, l->error_size, "%s", m->check_msg);
		return ODX_EINVAL;
	}
	return 0;
}

int gpu_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
{
	gpu_dev *d = dev;
	const gpu_state *st = d->st;
	gpu_module *m = l->module;
	union {
		uint64_t ptr;
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
	} vals[GPU_MAX_ARGS];
	void *params[GPU_MAX_ARGS + 1];
	char msg[GPU_MSG_MAX];
	gpu_pending *p;
	int i, rc, native;

	if ((rc = check_lost(d, l->error, l->error_size)) != 0) {
		l->native = atomic_load(&d->lost);
		return rc;
	}
	if (!m) {
		snprintf(l->error, l->error_size, "no module was loaded for this variant");
		return ODX_EINVAL;
	}
	if (l->nargs > GPU_MAX_ARGS) {
		snprintf(l->error, l->error_size, "%d arguments (at most %d)", l->nargs,
			 GPU_MAX_ARGS);
		return ODX_EINVAL;
	}
	if ((rc = check_args(d, m, l)) != 0)
		return rc;
	for (i = 0; i < l->nargs; i++) {
		const odx_backend_arg *a = &l->args[i];

		switch (a->kind) {
		case ODX_ARG_BUFFER:
			/* ABI 1.2: device pointers take arithmetic, so a suballocated argument is
			 * its chunk's pointer plus the offset. */
			vals[i].ptr = a->mem + a->v.offset;
			break;
		case ODX_ARG_I32:
			vals[i].i32 = a->v.i32;
			break;
		case ODX_ARG_I64:
			vals[i].i64 = a->v.i64;
			break;
		case ODX_ARG_F32:
			vals[i].f32 = a->v.f32;
			break;
		default:
			vals[i].f64 = a->v.f64;
			break;
		}
		params[i] = &vals[i];
	}
	params[l->nargs] = NULL;
	if ((rc = make_current(d, l->error, l->error_size)) != 0)
		return rc;
	if ((rc = pending_get(&d->compute, &p, l->error, l->error_size)) != 0)
		return rc;
	native = st->v->launch(st->api, m->fn, l->grid, l->block, d->compute.stream, params);
	if (native) {
		rc = gpu_fail(st, d, GPU_CALL_LAUNCH, native, msg, sizeof(msg));
		snprintf(l->error, l->error_size, "%s (kernel '%s', grid %ux%ux%u, block %ux%ux%u)",
			 msg, m->entry, l->grid[0], l->grid[1], l->grid[2], l->block[0],
			 l->block[1], l->block[2]);
	} else if ((native = st->v->event_record(st->api, p->event, d->compute.stream)) != 0) {
		rc = gpu_fail(st, d, GPU_CALL_EVENT_RECORD, native, l->error, l->error_size);
	}
	if (native) {
		l->native = native;
		pending_recycle(&d->compute, p);
		return rc;
	}
	p->armed = true;
	p->done = done;
	p->arg = arg;
	pending_push(&d->compute, p);
	return ODX_BACKEND_PENDING;
}
