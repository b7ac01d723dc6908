/* SPDX-License-Identifier: Apache-2.0 */
/*
 * task.c - tasks, dependency inference, completion, failure propagation, events.
 *
 * Dependencies follow submission order per buffer, as in StarPU's implicit data dependencies:
 * a reader waits for the buffer's last writer (RAW); a writer waits for the last writer (WAW) and
 * for every reader since (WAR). Only RAW edges carry data, so only they propagate a failure: a
 * task whose input came from a failed task is canceled with that cause, and so on downstream.
 *
 * A task starts with pending = 1 (the submission itself); each edge adds one; completion of a
 * predecessor and the end of submission subtract one. Whoever brings it to zero makes it ready.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

#define POOL_SLAB 256
/* Tasks a worker frees before it hands them back to the pool at once (odx__task_put). */
#define RET_BATCH 32

/* ---- allocation: slabs kept until close, so events outliving nothing leak nothing ---------- */

/* A task's state before its submission, every field but the mutex (initialised for the slab's
 * lifetime), refs, id and the pool link (odx__task_new): written when it returns to the pool
 * (odx__task_put), by the thread that freed it, rather than by the next submitting thread,
 * which would have to fetch every line the worker last wrote. */
static void task_reset(odx__task *t)
{
	t->kind = ODX__TASK_KERNEL;
	t->kernel = NULL;
	t->nargs = 0;
	t->args = t->inline_args;
	t->grid[0] = t->grid[1] = t->grid[2] = 1;
	t->block[0] = t->block[1] = t->block[2] = 1;
	atomic_store_explicit(&t->priority, 0, memory_order_relaxed);
	t->device_mask_only = 0;
	t->tag[0] = '\0';
	atomic_init(&t->pending, 1);
	atomic_init(&t->done, false);
	t->succ = t->inline_succ;
	t->nsucc = 0;
	t->capsucc = (int)(sizeof(t->inline_succ) / sizeof(t->inline_succ[0]));
	atomic_init(&t->cancel, 0);
	atomic_init(&t->cancel_msg, NULL);
	t->status = 0;
	t->message = NULL;
	t->origin = NULL;
	t->device = -1;
	t->staged = false;
	t->chained = false;
	t->launched = false;
	atomic_init(&t->queued, false);
	atomic_init(&t->chain, ODX__CHAIN_FREE);
	t->no_effect = false;
	atomic_init(&t->fetches, 0);
	t->demand_counted = false;
	atomic_init(&t->fetch_error, 0);
	t->fetch_msg = NULL;
	atomic_init(&t->exec, ODX__EXEC_WAITING);
	t->host_ptr = NULL;
	t->host_off = t->host_len = 0;
	t->node = 0;
	t->t_start = 0;
	t->mem_next = NULL;
	t->hold_mask = 0;
	t->t_noroom = 0;
	t->peer = -1;
	t->xfer_key = 0;
	t->xfer_posted = false;
	t->after_dev = ODX__AFTER_UNSEEN;
	t->after_producer = NULL;
	atomic_init(&t->user_ref, false);
	atomic_init(&t->waited, false);
	t->has_event = false;
}

static int pool_grow(odx_context *ctx)
{
	odx__task *slab = calloc(POOL_SLAB, sizeof(*slab));
	int i;

	if (!slab)
		return ODX_ENOMEM;
	if (ctx->nslabs == ctx->capslabs) {
		int cap = ctx->capslabs ? 2 * ctx->capslabs : 16;
		void **s = realloc(ctx->slabs, (size_t)cap * sizeof(*s));

		if (!s) {
			free(slab);
			return ODX_ENOMEM;
		}
		ctx->slabs = s;
		ctx->capslabs = cap;
	}
	ctx->slabs[ctx->nslabs++] = slab;
	for (i = 0; i < POOL_SLAB; i++) {
		pthread_mutex_init(&slab[i].lock, NULL);
		slab[i].ctx = ctx;
		task_reset(&slab[i]);
		slab[i].pool_next = ctx->pool_free;
		ctx->pool_free = &slab[i];
	}
	return 0;
}

odx__task *odx__task_new(odx_context *ctx)
{
	odx__task *t;

	pthread_mutex_lock(&ctx->pool_lock);
	/* Take back every task finished since the last time, in one exchange. */
	if (!ctx->pool_free)
		ctx->pool_free = atomic_exchange(&ctx->pool_returned, NULL);
	if (!ctx->pool_free && pool_grow(ctx) != 0) {
		pthread_mutex_unlock(&ctx->pool_lock);
		return NULL;
	}
	t = ctx->pool_free;
	ctx->pool_free = t->pool_next;
	pthread_mutex_unlock(&ctx->pool_lock);

	/* Only what differs per task: the rest was reset when it came back (task_reset), by the
	 * thread that freed it, whose cache held its lines. The lines written here are the few a
	 * submission writes anyway. */
	atomic_init(&t->refs, 1);
	t->pool_next = NULL;
	t->id = atomic_fetch_add_explicit(&ctx->next_task_id, 1, memory_order_relaxed) + 1;
	/* the length and parts' transfer fields are zero already (odx__lengths_task_reset) */
	return t;
}

void odx__task_put(odx__task *t)
{
	odx_context *ctx;

	if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
		return;
	ctx = t->ctx;
	free(t->message);
	t->message = NULL;
	free(t->origin);
	t->origin = NULL;
	free(atomic_exchange(&t->cancel_msg, NULL));
	free(t->fetch_msg);
	t->fetch_msg = NULL;
	if (t->args != t->inline_args)
		free(t->args);
	if (t->succ != t->inline_succ)
		free(t->succ);
	if (t->after_producer)
		odx__task_put(t->after_producer);
	if (t->shuffle) {
		odx__shuffle_free(t->shuffle);
		t->shuffle = NULL;
	}
	odx__lengths_task_reset(t);
	bool event = t->has_event;

	task_reset(t);
	if (event) {
		/* Its event may still be in the user's hands, released: keep the task out of
		 * reuse for a while, so that handle is refused instead of naming a new task. */
		pthread_mutex_lock(&ctx->pool_lock);
		t->pool_next = NULL;
		if (ctx->evq_tail)
			ctx->evq_tail->pool_next = t;
		else
			ctx->evq_head = t;
		ctx->evq_tail = t;
		if (++ctx->evq_n <= ODX__EVENT_QUARANTINE) {
			pthread_mutex_unlock(&ctx->pool_lock);
			return;
		}
		t = ctx->evq_head;
		ctx->evq_head = t->pool_next;
		ctx->evq_n--;
		t->pool_next = ctx->pool_free;
		ctx->pool_free = t;
		pthread_mutex_unlock(&ctx->pool_lock);
		return;
	}
	/* On a worker of this context: onto its device's list, handed back a batch at a time. */
	odx__device *self = odx__worker_self;

	if (self && (uintptr_t)self >= (uintptr_t)ctx->devices &&
	    (uintptr_t)self < (uintptr_t)(ctx->devices + ctx->ndevices)) {
		t->pool_next = self->ret_head;
		if (!self->ret_head)
			self->ret_tail = t;
		self->ret_head = t;
		if (++self->ret_n >= RET_BATCH)
			odx__task_return_flush(self);
		return;
	}
	/* Lock-free push: finishing threads never wait for a submitting one. */
	t->pool_next = atomic_load_explicit(&ctx->pool_returned, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&ctx->pool_returned, &t->pool_next, t,
						      memory_order_release, memory_order_relaxed))
		;
}

void odx__task_return_flush(odx__device *dev)
{
	odx__task *head = dev->ret_head, *old;
	odx_context *ctx;

	if (!head)
		return;
	ctx = head->ctx;
	old = atomic_load_explicit(&ctx->pool_returned, memory_order_relaxed);
	do
		dev->ret_tail->pool_next = old;
	while (!atomic_compare_exchange_weak_explicit(&ctx->pool_returned, &old, head,
						      memory_order_release, memory_order_relaxed));
	dev->ret_head = dev->ret_tail = NULL;
	dev->ret_n = 0;
	atomic_fetch_add_explicit(&dev->ret_flushes, 1, memory_order_relaxed);
}

/* ---- access modes --------------------------------------------------------------------------- */

odx_access odx__task_dep_access(const odx__task *t, int i)
{
	odx_buffer *b = t->args[i].v.buffer;
	odx_access mode = 0;
	int j;

	/* A switch names each buffer once (partition.c), and may name thousands: no search. */
	if (odx__task_is_switch(t))
		return t->args[i].access;
	/* A buffer passed twice is one access with the union of both modes, counted at its first
	 * position; later positions return 0 so callers skip them. */
	for (j = 0; j < i; j++)
		if (t->args[j].kind == ODX_ARG_BUFFER && t->args[j].v.buffer == b)
			return 0;
	for (j = i; j < t->nargs; j++)
		if (t->args[j].kind == ODX_ARG_BUFFER && t->args[j].v.buffer == b)
			mode |= t->args[j].access;
	return mode;
}

bool odx__task_stage_reads(const odx__task *t, int i)
{
	odx_access mode = odx__task_dep_access(t, i);

	if (t->kind == ODX__TASK_DESTROY)
		return odx__buffer_keeps_bytes(t->args[i].v.buffer); /* into user memory */
	return (mode & ODX_R) != 0;
}

/* ---- failure -------------------------------------------------------------------------------- */

const char *odx__task_kind_name(const odx__task *t, bool kernel_too)
{
	static const char *const kinds[ODX__TASK_KIND_COUNT] = {
		[ODX__TASK_KERNEL] = "task",		[ODX__TASK_READ] = "buffer read",
		[ODX__TASK_WRITE] = "buffer write",	[ODX__TASK_DESTROY] = "buffer destroy",
		[ODX__TASK_SEND] = "send to a rank", [ODX__TASK_RECV] = "receive from a rank",
		[ODX__TASK_PARTITION] = "partition",	[ODX__TASK_UNPARTITION] = "unpartition",
		[ODX__TASK_SHUFFLE] = "shuffle",
	};

	if (t->kind == ODX__TASK_KERNEL && kernel_too)
		return t->kernel->name;
	return t->kind < ODX__TASK_KIND_COUNT ? kinds[t->kind] : "task of an unknown kind";
}

static char *describe(const odx__task *t, char *out, size_t n)
{
	int len;

	if (t->kind == ODX__TASK_KERNEL)
		len = snprintf(out, n, "task #%llu '%s' (kernel '%s')", (unsigned long long)t->id,
			       t->tag, t->kernel->name);
	else if (t->kind == ODX__TASK_SEND || t->kind == ODX__TASK_RECV)
		len = snprintf(out, n, "transfer #%llu (%s)", (unsigned long long)t->id, t->tag);
	else if (t->kind == ODX__TASK_SHUFFLE)
		len = snprintf(out, n, "shuffle #%llu '%s'", (unsigned long long)t->id, t->tag);
	else
		len = snprintf(out, n, "%s #%llu", odx__task_kind_name(t, false),
			       (unsigned long long)t->id);
	/* With several ranks task numbers are per rank: say whose. */
	if (t->ctx->fab && len >= 0 && (size_t)len < n)
		snprintf(out + len, n - (size_t)len, " on rank %d", t->ctx->rank);
	return out;
}

const char *odx__task_origin(const odx__task *t, char *buf, size_t n)
{
	char who[200];

	if (t->origin)
		return t->origin;
	snprintf(buf, n, "%s failed: %s", describe(t, who, sizeof(who)),
		 t->message ? t->message : odx_strerror(t->status));
	return buf;
}

/* Marks `t` canceled with `code`, explained by `msg` (taken; may be NULL). The message is
 * published before the flag, so a thread that sees the flag (a worker about to launch a task
 * queued behind its predecessor) sees the message. The first cause wins. */
static void cancel_with(odx__task *t, int code, char *msg)
{
	char *none = NULL;
	int zero = 0;

	if (msg && !atomic_compare_exchange_strong(&t->cancel_msg, &none, msg))
		free(msg);
	atomic_compare_exchange_strong(&t->cancel, &zero, code);
}

/* Cancels `t` because its input came from `cause`, which failed. The first failure behind it
 * (cause's origin, or cause itself) goes with it, so a long chain (across ranks too: dist.c
 * sends it with the abort of a transfer) still names the task, kernel, rank and message that
 * started it instead of nesting the messages until they are cut off. */
static void cancel_from(odx__task *t, const odx__task *cause)
{
	char who[200], whom[200], first[ODX__MSG_MAX];
	char *msg, *origin, *none = NULL;
	int zero = 0;

	if (atomic_load(&t->cancel))
		return;
	msg = malloc(ODX__MSG_MAX);
	origin = strdup(odx__task_origin(cause, first, sizeof(first)));
	if (msg && cause->origin)
		snprintf(msg, ODX__MSG_MAX,
			 "%s canceled: its input comes from %s, canceled by an earlier failure: %s",
			 describe(t, who, sizeof(who)), describe(cause, whom, sizeof(whom)),
			 cause->origin);
	else if (msg)
		snprintf(msg, ODX__MSG_MAX,
			 "%s canceled: its input comes from %s, which failed: %s",
			 describe(t, who, sizeof(who)), describe(cause, whom, sizeof(whom)),
			 cause->message ? cause->message : odx_strerror(cause->status));
	/* The first cause wins; its origin is written by the winner only, before the pending
	 * count this thread drops next (the completing thread reads it after). */
	if (msg && atomic_compare_exchange_strong(&t->cancel_msg, &none, msg)) {
		t->origin = origin;
	} else {
		free(msg);
		free(origin);
	}
	atomic_compare_exchange_strong(&t->cancel, &zero, ODX_ECANCELED);
}

static void record_failure(odx_context *ctx, const odx__task *t)
{
	int expected = 0;

	odx__fail(ctx, t->status, "%s", t->message ? t->message : odx_strerror(t->status));
	/* Reads, writes and releases report to their caller; odx_wait_all reports tasks (kernels
	 * and shuffles: the program submitted them), and the partition switches, which may have
	 * no caller waiting (the asynchronous calls). */
	if ((t->kind == ODX__TASK_KERNEL || t->kind == ODX__TASK_SHUFFLE ||
	     odx__task_is_switch(t)) &&
	    atomic_compare_exchange_strong(&ctx->first_error, &expected, t->status)) {
		pthread_mutex_lock(&ctx->error_lock);
		snprintf(ctx->first_error_msg, sizeof(ctx->first_error_msg), "%s",
			 t->message ? t->message : "");
		pthread_mutex_unlock(&ctx->error_lock);
	}
	odx__log(ctx, ODX_LOG_WARN, "%s", t->message ? t->message : odx_strerror(t->status));
}

/* ---- completion ----------------------------------------------------------------------------- */

void odx__wake_waiters(odx_context *ctx)
{
	if (atomic_load(&ctx->waiters) > 0) {
		pthread_mutex_lock(&ctx->wait_lock);
		pthread_cond_broadcast(&ctx->wait_cond);
		pthread_mutex_unlock(&ctx->wait_lock);
	}
}

static bool has_room(odx_context *ctx);

/* After t completed (done set, counted): wakes the waiters whose condition may now hold, not
 * every waiter per completion (a thread in odx_wait_all woken a thousand times for a thousand
 * tasks takes a core from the workers). The waiter raises its counters before it checks its
 * condition, and t's completion was published before they are read here: one of the two sees
 * the other (sequentially consistent atomics on both sides). */
static void wake_for_completion(odx_context *ctx, odx__task *t)
{
	int w = atomic_load(&ctx->waiters);

	if (w == 0)
		return;
	if (atomic_load(&t->waited) || w > atomic_load(&ctx->waiters_targeted) ||
	    (atomic_load(&ctx->waiters_room) > 0 && has_room(ctx)) ||
	    (atomic_load(&ctx->waiters_all) > 0 && odx__inflight(ctx) == 0))
		odx__wake_waiters(ctx);
}

void odx__task_ready(odx__task *t)
{
	int expected = ODX__CHAIN_FREE;

	if (!atomic_compare_exchange_strong(&t->chain, &expected, ODX__CHAIN_NO)) {
		/* A read or write copied behind its predecessors: its thread waits for them to
		 * finish before it completes (and owns t from the store on). Otherwise: launched
		 * behind its last predecessor, and its own completion finishes it. */
		if (expected == ODX__CHAIN_BEHIND) {
			odx_context *ctx = t->ctx;

			atomic_store(&t->exec, ODX__EXEC_READY);
			odx__wake_waiters(ctx);
		}
		return;
	}
	/* A switch runs anyway: the parts must be made or released (odx__partition_switch_end
	 * completes it with the failure). */
	if (atomic_load(&t->cancel) && !odx__task_is_switch(t)) {
		odx__task_complete(t, atomic_load(&t->cancel), NULL);
		return;
	}
	/* Every user of the buffer finished: the memory tiers may drop its copies at once, even
	 * before this task gets its turn on a device. */
	if (t->kind == ODX__TASK_DESTROY && !t->args[0].v.buffer->registered) {
		int i;

		/* A partitioned parent's destruction carries its parts (partition.c). */
		for (i = 0; i < t->nargs; i++)
			atomic_store(&t->args[i].v.buffer->dead, true);
	}
	if (odx__task_caller_runs(t)) {
		/* Hand it to the thread waiting in odx_buffer_read/write, unless it gave up. From
		 * the exchange on, that thread owns t: read nothing of it afterwards. */
		odx_context *ctx = t->ctx;
		int waiting = ODX__EXEC_WAITING;

		if (atomic_compare_exchange_strong(&t->exec, &waiting, ODX__EXEC_READY)) {
			odx__wake_waiters(ctx);
		} else {
			t->no_effect = true;
			odx__task_complete(t, 0, NULL);
		}
		return;
	}
	odx__sched_push(t->ctx, t);
}

void odx__task_complete(odx__task *t, int status, const char *msg)
{
	odx_context *ctx = t->ctx;
	odx__succ *succ;
	int i, nsucc;

	/* A switch failed before a worker ran it (no device left, no memory to queue it): its
	 * bookkeeping still happens, or the parts would stay half made (partition.c). */
	if (odx__task_is_switch(t) && !t->launched)
		odx__partition_switch_end(t, &status);
	t->status = status;
	if (status != 0) {
		/* A canceled task's own explanation first, else the caller's. */
		if (!t->message)
			t->message = atomic_exchange(&t->cancel_msg, NULL);
		if (!t->message && msg)
			t->message = strdup(msg);
		record_failure(ctx, t);
		/* A send that never reached the fabric: its receiver would wait forever. It gets
		 * the first failure instead, as its data would have come. */
		if (t->kind == ODX__TASK_SEND && !t->xfer_posted) {
			char first[ODX__MSG_MAX];

			odx__dist_send_failed(t, odx__task_origin(t, first, sizeof(first)));
		}
		/* Likewise a shuffle that never ran: every other rank waits for its sizes. */
		if (t->kind == ODX__TASK_SHUFFLE) {
			char first[ODX__MSG_MAX];

			odx__shuffle_abandon(t, odx__task_origin(t, first, sizeof(first)));
		}
	}
	/* After `done` is set no new edge is added, so the successor list is final. A task with
	 * no buffer argument was never a buffer's writer or reader, the only way a task becomes
	 * a predecessor (add_edge): it has no successor, and its lock (a line the other worker
	 * may hold, from the task's last life) is not needed. */
	for (i = 0; i < t->nargs && t->args[i].kind != ODX_ARG_BUFFER; i++)
		;
	if (i == t->nargs && t->nsucc == 0) {
		atomic_store(&t->done, true);
		succ = t->inline_succ;
		nsucc = 0;
	} else {
		pthread_mutex_lock(&t->lock);
		atomic_store(&t->done, true);
		succ = t->succ;
		nsucc = t->nsucc;
		t->succ = t->inline_succ;
		t->nsucc = 0;
		pthread_mutex_unlock(&t->lock);
	}

	for (i = 0; i < nsucc; i++) {
		odx__task *s = succ[i].task;

		if (status != 0 && succ[i].data)
			cancel_from(s, t);
		if (atomic_fetch_sub_explicit(&s->pending, 1, memory_order_acq_rel) == 1)
			odx__task_ready(s);
	}
	if (succ != t->inline_succ)
		free(succ);
	/* A prefetch request may have waited for this writer, or for its device to go idle.
	 * Before the count below: once every task is counted, ctx may be closing. */
	odx__prefetch_pump(ctx);
	atomic_fetch_add(t->device >= 0 ? &ctx->devices[t->device].completed
					: &ctx->completed_other,
			 1);
	wake_for_completion(ctx, t);
	odx__task_put(t);
}

/* ---- dependency inference ------------------------------------------------------------------- */

/* 1 if t now waits for pred, 0 if pred had finished, or ODX_ENOMEM. */
static int add_edge(odx__task *pred, odx__task *t, bool data)
{
	pthread_mutex_lock(&pred->lock);
	if (atomic_load(&pred->done)) {
		pthread_mutex_unlock(&pred->lock);
		if (data && pred->status != 0)
			cancel_from(t, pred);
		return 0;
	}
	if (pred->nsucc == pred->capsucc) {
		int cap = 2 * pred->capsucc;
		odx__succ *s = pred->succ == pred->inline_succ ? NULL : pred->succ;

		s = realloc(s, (size_t)cap * sizeof(*s));
		if (!s) {
			pthread_mutex_unlock(&pred->lock);
			return ODX_ENOMEM;
		}
		if (pred->succ == pred->inline_succ)
			memcpy(s, pred->inline_succ, sizeof(pred->inline_succ));
		pred->succ = s;
		pred->capsucc = cap;
	}
	pred->succ[pred->nsucc++] = (odx__succ){.task = t, .data = data};
	atomic_fetch_add_explicit(&t->pending, 1, memory_order_relaxed);
	pthread_mutex_unlock(&pred->lock);
	return 1;
}

/*
 * A read or write t now waits for `pred`: can its copy still be queued behind it? Only if every
 * such predecessor is a kernel the backend already took, all on one device (whose lane then
 * orders them before the copy), and none is one a write consumes (a write canceled by a failed
 * input must write nothing, and a copy handed to the device cannot be withdrawn). A read's one
 * predecessor is the last writer of its buffer: the producer.
 */
static void note_after(odx__task *t, odx__task *pred, bool data)
{
	if (!odx__task_caller_runs(t) || t->after_dev == ODX__AFTER_NO)
		return;
	if (pred->kind != ODX__TASK_KERNEL || !atomic_load(&pred->queued) ||
	    (t->after_dev >= 0 && t->after_dev != pred->device) ||
	    (data && t->kind != ODX__TASK_READ)) {
		t->after_dev = ODX__AFTER_NO;
		return;
	}
	t->after_dev = pred->device;
	if (data && !t->after_producer) {
		atomic_fetch_add(&pred->refs, 1);
		t->after_producer = pred;
	}
}

static void drop_ref(odx__task **slot)
{
	if (*slot) {
		odx__task_put(*slot);
		*slot = NULL;
	}
}

/* Keeps the readers list short: readers that already finished need no edge. */
static int readers_make_room(odx_buffer *b)
{
	int i, n = 0;

	for (i = 0; i < b->nreaders; i++) {
		if (atomic_load(&b->readers[i]->done))
			odx__task_put(b->readers[i]);
		else
			b->readers[n++] = b->readers[i];
	}
	b->nreaders = n;
	if (n < b->capreaders)
		return 0;
	{
		int cap = b->capreaders ? 2 * b->capreaders : 8;
		odx__task **r = realloc(b->readers, (size_t)cap * sizeof(*r));

		if (!r)
			return ODX_ENOMEM;
		b->readers = r;
		b->capreaders = cap;
	}
	return 0;
}

/* The last predecessor a submission linked to: a task whose buffers share one last writer (a
 * chain over several buffers) needs one edge to it, not one per buffer. */
typedef struct edge_memo {
	odx__task *pred;
	bool data;
} edge_memo;

static int track_access(odx__task *t, odx_buffer *b, odx_access mode, edge_memo *memo)
{
	/* Destruction orders after every user but consumes no data: never canceled. */
	bool data = t->kind != ODX__TASK_DESTROY && (mode & ODX_R);
	int rc = 0, i;

	if (b->last_writer && !(b->last_writer == memo->pred && (memo->data || !data))) {
		rc = add_edge(b->last_writer, t, data);
		if (rc == 1)
			note_after(t, b->last_writer, data);
		memo->pred = b->last_writer;
		memo->data = data;
	}
	if (rc < 0)
		return rc;
	rc = 0;
	if (mode & ODX_W) {
		for (i = 0; i < b->nreaders && rc >= 0; i++)
			if ((rc = add_edge(b->readers[i], t, false)) == 1)
				note_after(t, b->readers[i], false);
		rc = rc < 0 ? rc : 0;
		for (i = 0; i < b->nreaders; i++)
			odx__task_put(b->readers[i]);
		b->nreaders = 0;
		drop_ref(&b->last_writer);
		atomic_fetch_add(&t->refs, 1);
		b->last_writer = t;
		atomic_fetch_add_explicit(&b->version, 1, memory_order_relaxed);
		return rc;
	}
	if (b->nreaders == b->capreaders && (rc = readers_make_room(b)) != 0)
		return rc;
	atomic_fetch_add(&t->refs, 1);
	b->readers[b->nreaders++] = t;
	return 0;
}

long odx__inflight(odx_context *ctx)
{
	uint64_t done = atomic_load(&ctx->completed_other);
	int d;

	for (d = 0; d < ctx->ndevices; d++)
		done += atomic_load(&ctx->devices[d].completed);
	/* Read completions first: the difference can only be too large, never negative. */
	return (long)(atomic_load(&ctx->submitted) - done);
}

static bool has_room(odx_context *ctx)
{
	uint64_t seen = __atomic_load_n(&ctx->completed_seen, __ATOMIC_RELAXED);
	uint64_t submitted = atomic_load_explicit(&ctx->submitted, memory_order_relaxed);

	/* The cheap estimate first: it only ever undercounts completions. */
	if ((long)(submitted - seen) < ctx->max_inflight)
		return true;
	seen = submitted - (uint64_t)odx__inflight(ctx);
	__atomic_store_n(&ctx->completed_seen, seen, __ATOMIC_RELAXED);
	return (long)(submitted - seen) < ctx->max_inflight;
}

/* Waits for room under the in-flight bound: back-pressure on submission. */
static int admit(odx_context *ctx, int mode)
{
	if (mode == ODX__ADMIT_FORCE || has_room(ctx))
		goto out_admit;
	if (mode == ODX__ADMIT_NONBLOCK)
		return odx__fail(ctx, ODX_EAGAIN,
				 "odx_submit: %ld tasks in flight (sched.max_inflight)",
				 ctx->max_inflight);
	atomic_fetch_add(&ctx->waiters_targeted, 1);
	atomic_fetch_add(&ctx->waiters_room, 1);
	atomic_fetch_add(&ctx->waiters, 1);
	pthread_mutex_lock(&ctx->wait_lock);
	while (!has_room(ctx)) {
		pthread_cond_wait(&ctx->wait_cond, &ctx->wait_lock);
		atomic_fetch_add_explicit(&ctx->wakeups, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&ctx->wait_lock);
	atomic_fetch_sub(&ctx->waiters, 1);
	atomic_fetch_sub(&ctx->waiters_room, 1);
	atomic_fetch_sub(&ctx->waiters_targeted, 1);
out_admit:
	atomic_fetch_add(&ctx->submitted, 1);
	return 0;
}

int odx__task_submit(odx_context *ctx, odx__task *t, int admit_mode)
{
	edge_memo memo = {0};
	int i, rc = 0;

	rc = admit(ctx, admit_mode);
	if (rc) {
		odx__task_put(t);
		return rc;
	}
	for (i = 0; i < t->nargs && t->args[i].kind != ODX_ARG_BUFFER; i++)
		;
	/* A task with no buffer has no dependency to infer: no lock round trip for it. */
	if (i < t->nargs) {
		pthread_mutex_lock(&ctx->submit_lock);
		for (; i < t->nargs && rc == 0; i++) {
			odx_access mode;

			if (t->args[i].kind != ODX_ARG_BUFFER)
				continue;
			mode = odx__task_dep_access(t, i);
			if (mode)
				rc = track_access(t, t->args[i].v.buffer, mode, &memo);
		}
		pthread_mutex_unlock(&ctx->submit_lock);
	}
	if (rc) {
		/* Out of memory while linking: the task is in the graph already, so it must still
		 * complete; it fails instead of running. */
		cancel_with(t, rc, strdup("out of memory while inferring dependencies"));
	}
	if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
		odx__task_ready(t);
	return 0;
}

/* ---- waiting -------------------------------------------------------------------------------- */

static void deadline_after(struct timespec *ts, int timeout_ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Waits until `cond(arg)` holds; 0 or ODX_ETIMEDOUT. */
int odx__wait_until(odx_context *ctx, bool (*cond)(void *), void *arg, int timeout_ms)
{
	struct timespec deadline;
	int rc = 0;

	if (cond(arg))
		return 0;
	if (timeout_ms == 0)
		return ODX_ETIMEDOUT;
	if (timeout_ms > 0)
		deadline_after(&deadline, timeout_ms);
	atomic_fetch_add(&ctx->waiters, 1);
	pthread_mutex_lock(&ctx->wait_lock);
	while (!cond(arg)) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&ctx->wait_cond, &ctx->wait_lock);
		} else if (pthread_cond_timedwait(&ctx->wait_cond, &ctx->wait_lock, &deadline) ==
			   ETIMEDOUT) {
			if (!cond(arg))
				rc = ODX_ETIMEDOUT;
			break;
		}
		atomic_fetch_add_explicit(&ctx->wakeups, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&ctx->wait_lock);
	atomic_fetch_sub(&ctx->waiters, 1);
	return rc;
}

/* One wait in the driver: long enough for a small kernel or copy, short enough that a thread
 * waiting for something else (another device's work) loses little before it sleeps instead. */
#define PROGRESS_SLICE_NS 1000000ull

int odx__wait_app(odx_context *ctx, bool (*cond)(void *), void *arg, int timeout_ms)
{
	uint64_t end = timeout_ms > 0 ? odx__now_ns() + (uint64_t)timeout_ms * 1000000u : 0;

	while (ctx->drivable && !cond(arg) && timeout_ms != 0) {
		int d, r = 0;

		if (end && odx__now_ns() >= end)
			break;
		/* The first device with something in flight (progress returns 0 at once when it
		 * has nothing): the wait is most likely for that work. */
		for (d = 0; d < ctx->ndevices && r == 0; d++) {
			odx__device *dev = &ctx->devices[d];

			if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, progress))
				r = dev->ops->progress(dev->bdev, PROGRESS_SLICE_NS);
		}
		/* Nothing completed within a slice, or nothing in flight: a long wait, or one for
		 * something else; the backends' threads report it. */
		if (r <= 0)
			break;
	}
	if (end) {
		uint64_t now = odx__now_ns();

		timeout_ms = now >= end ? 0 : (int)((end - now + 999999u) / 1000000u);
	}
	return odx__wait_until(ctx, cond, arg, timeout_ms);
}

static bool task_done(void *arg)
{
	return atomic_load(&((odx__task *)arg)->done);
}

static bool all_done(void *arg)
{
	return odx__inflight(arg) == 0;
}

/* odx__wait_app for a condition that only completions change, counted as a targeted waiter
 * (wake_for_completion); `kind` (may be NULL) the counter of its condition. */
static int wait_targeted(odx_context *ctx, bool (*cond)(void *), void *arg, int timeout_ms,
			 _Atomic int *kind)
{
	int rc;

	/* raised before odx__wait_until raises `waiters`: a completion in between sees at worst
	 * more targeted waiters than waiters, and then checks the conditions */
	atomic_fetch_add(&ctx->waiters_targeted, 1);
	if (kind)
		atomic_fetch_add(kind, 1);
	rc = odx__wait_app(ctx, cond, arg, timeout_ms);
	if (kind)
		atomic_fetch_sub(kind, 1);
	atomic_fetch_sub(&ctx->waiters_targeted, 1);
	return rc;
}

int odx__task_wait(odx__task *t, int timeout_ms)
{
	int rc;

	atomic_store(&t->waited, true);
	rc = wait_targeted(t->ctx, task_done, t, timeout_ms, NULL);
	return rc ? rc : t->status;
}

/* ---- public API ----------------------------------------------------------------------------- */

static int check_args(odx_context *ctx, const odx_kernel *k, const odx_arg *args, int nargs)
{
	int i;

	if (nargs != k->nparams)
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s' takes %d arguments, %d given", k->name,
				 k->nparams, nargs);
	if (nargs > 0 && !args)
		return odx__fail(ctx, ODX_EINVAL, "odx_submit: invalid argument 'args' (NULL)");
	for (i = 0; i < nargs; i++) {
		const odx_param *p = &k->params[i];
		const odx_arg *a = &args[i];
		int rc;

		if (a->kind == ODX_ARG_LD) {
			/* Resolved at launch into the integer it stands for (worker.c). */
			if (p->kind != ODX_ARG_I32 && p->kind != ODX_ARG_I64)
				return odx__fail(ctx, ODX_EINVAL,
						 "odx_submit: kernel '%s' argument %d (%s): ODX_LD "
						 "stands for an I32 or I64 parameter, kind %d declared",
						 k->name, i, p->name ? p->name : "?", (int)p->kind);
			if (a->v.i32 < 0 || a->v.i32 >= nargs ||
			    args[a->v.i32].kind != ODX_ARG_BUFFER)
				return odx__fail(ctx, ODX_EINVAL,
						 "odx_submit: kernel '%s' argument %d (%s): ODX_LD(%d) "
						 "must name a buffer argument of the same task",
						 k->name, i, p->name ? p->name : "?", (int)a->v.i32);
			continue;
		}
		if (a->kind == ODX_ARG_LEN)
			continue; /* odx__lengths_check */
		if (a->kind != p->kind)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: kernel '%s' argument %d (%s): kind %d given, "
					 "%d declared",
					 k->name, i, p->name ? p->name : "?", (int)a->kind,
					 (int)p->kind);
		if (a->kind != ODX_ARG_BUFFER)
			continue;
		if (!a->v.buffer || a->v.buffer->ctx != ctx)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: kernel '%s' argument %d (%s): invalid buffer%s",
					 k->name, i, p->name ? p->name : "?",
					 a->v.buffer ? " (it belongs to another context)" : "");
		/* A destroyed buffer's struct is quarantined, not freed: reading the flag is
		 * safe, and following the handle further would not be. */
		if (atomic_load_explicit(&a->v.buffer->destroyed, memory_order_acquire))
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: kernel '%s' argument %d (%s): buffer %llu was "
					 "destroyed: its handle must not be used again",
					 k->name, i, p->name ? p->name : "?",
					 (unsigned long long)a->v.buffer->id);
		rc = odx__buffer_partitioned(a->v.buffer, "odx_submit");
		if (rc)
			return rc;
		if (a->access != 0 && ((a->access & ~ODX_RW) || (a->access & p->access) !=
									p->access))
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: kernel '%s' argument %d (%s): access %d does "
					 "not include the declared access %d",
					 k->name, i, p->name ? p->name : "?", (int)a->access,
					 (int)p->access);
	}
	return 0;
}

/*
 * Refuses a grid and block that no backend can launch: counts (groups, work-items per group,
 * work-items in all) that overflow 64 bits, and, for built-in kernels, a dimension of more than
 * 2^31 - 1 work-items, which their 32-bit ids cannot number in any dialect. 0 means 1.
 */
static int check_launch(odx_context *ctx, const odx_kernel *k, const odx_task_opts *opts)
{
	uint64_t g[3], b[3], groups, per_group, items;
	int d;

	for (d = 0; d < 3; d++) {
		g[d] = opts->grid[d] ? opts->grid[d] : 1;
		b[d] = opts->block[d] ? opts->block[d] : 1;
	}
	if (__builtin_mul_overflow(g[0] * g[1], g[2], &groups) ||
	    __builtin_mul_overflow(b[0] * b[1], b[2], &per_group) ||
	    __builtin_mul_overflow(groups, per_group, &items))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s': grid %llu x %llu x %llu of blocks %llu x "
				 "%llu x %llu: the number of work-items overflows 64 bits",
				 k->name, (unsigned long long)g[0], (unsigned long long)g[1],
				 (unsigned long long)g[2], (unsigned long long)b[0],
				 (unsigned long long)b[1], (unsigned long long)b[2]);
	for (d = 0; k->builtin && d < 3; d++)
		if (g[d] * b[d] > INT32_MAX)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: built-in kernel '%s': dimension %d has %llu x "
					 "%llu work-items, more than its 32-bit ids can number "
					 "(2^31 - 1; docs/kernels.md)",
					 k->name, d, (unsigned long long)g[d],
					 (unsigned long long)b[d]);
	return 0;
}

static bool feasible_somewhere(odx_context *ctx, const odx_kernel *k, int forced)
{
	int d;

	if (forced > 0)
		return k->device_variant[forced - 1] >= 0;
	for (d = 0; d < ctx->ndevices; d++)
		if (k->device_variant[d] >= 0)
			return true;
	return false;
}

/* Where opts pin the task, as odx__task.device_mask_only holds it (0 any, d+1 device d: zero
 * stays "any" in a zeroed task): from on_device under ODX_SUBMIT_ON_DEVICE, else from the legacy
 * d+1 field. Setting both is refused, so a half-migrated caller cannot pin two ways. */
static int forced_device(odx_context *ctx, const odx_task_opts *opts, int *forced)
{
	if (!(opts->flags & ODX_SUBMIT_ON_DEVICE)) {
		if (opts->device < 0 || opts->device > ctx->ndevices)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: invalid argument 'opts->device' (%d): the "
					 "context has %d devices (legacy field: 0 for any, d+1 for "
					 "device d; prefer ODX_SUBMIT_ON_DEVICE and on_device)",
					 opts->device, ctx->ndevices);
		*forced = opts->device;
		return 0;
	}
	if (opts->device != 0)
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: opts->device (%d, legacy) and ODX_SUBMIT_ON_DEVICE are "
				 "both set: use on_device alone",
				 opts->device);
	if (opts->on_device != ODX_DEVICE_ANY &&
	    (opts->on_device < 0 || opts->on_device >= ctx->ndevices))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: invalid argument 'opts->on_device' (%d): the context "
				 "has %d devices (0 .. %d, or ODX_DEVICE_ANY)",
				 opts->on_device, ctx->ndevices, ctx->ndevices - 1);
	*forced = opts->on_device + 1;
	return 0;
}

ODX_API int odx_submit(odx_context *ctx, odx_kernel *kernel, const odx_arg *args, int nargs,
		       const odx_task_opts *opts, odx_event **event)
{
	static const odx_task_opts no_opts;
	odx__task *t;
	int i, rc, forced = 0;

	if (!ctx)
		return ODX_EINVAL;
	ODX__CHECK_ARG(ctx, kernel && kernel->ctx == ctx, "kernel");
	if (atomic_load_explicit(&kernel->user_destroyed, memory_order_relaxed))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s' was destroyed: its handle must not be used "
				 "again",
				 kernel->name);
	if (!opts)
		opts = &no_opts;
	rc = check_args(ctx, kernel, args, nargs);
	if (rc)
		return rc;
	rc = check_launch(ctx, kernel, opts);
	if (rc)
		return rc;
	rc = odx__lengths_check(ctx, kernel, args, nargs, opts);
	if (rc)
		return rc;
	rc = forced_device(ctx, opts, &forced);
	if (rc)
		return rc;
	if (!feasible_somewhere(ctx, kernel, forced)) {
		if (forced > 0)
			return odx__fail(ctx, ODX_ENOVARIANT,
					 "odx_submit: kernel '%s' has no variant for device %d (%s)",
					 kernel->name, forced - 1, ctx->devices[forced - 1].name);
		return odx__fail(ctx, ODX_ENOVARIANT,
				 "odx_submit: kernel '%s' has no variant for any of the %d open "
				 "devices",
				 kernel->name, ctx->ndevices);
	}
	if (ctx->closing)
		return odx__fail(ctx, ODX_ECLOSED, "odx_submit: the context is closing");
	if (ctx->fab) {
		/* Several ranks: every rank takes the same decision; this one may only send,
		 * receive, or note which buffers the task writes. */
		odx_arg resolved[64];
		int r;

		if (nargs > 64)
			return odx__fail(ctx, ODX_EINVAL, "odx_submit: %d arguments (at most 64 with "
					 "several ranks)", nargs);
		for (i = 0; i < nargs; i++) {
			resolved[i] = args[i];
			if (args[i].kind == ODX_ARG_BUFFER && args[i].access == 0)
				resolved[i].access = kernel->params[i].access;
		}
		r = odx__dist_kernel(ctx, resolved, nargs, kernel, opts);
		if (r < 0)
			return r;
		odx__dist_written(ctx, resolved, nargs, r);
		if (r != ctx->rank) {
			if (event)
				*event = NULL;
			return 0;
		}
	}

	t = odx__task_new(ctx);
	if (!t)
		return odx__fail(ctx, ODX_ENOMEM, "odx_submit: out of memory");
	if (nargs > ODX__INLINE_ARGS) {
		t->args = malloc((size_t)nargs * sizeof(*t->args));
		if (!t->args) {
			t->args = t->inline_args;
			odx__task_put(t);
			return odx__fail(ctx, ODX_ENOMEM, "odx_submit: out of memory");
		}
	}
	if (nargs > 0)
		memcpy(t->args, args, (size_t)nargs * sizeof(*args));
	for (i = 0; i < nargs; i++)
		if (t->args[i].kind == ODX_ARG_BUFFER && t->args[i].access == 0)
			t->args[i].access = kernel->params[i].access;
	t->nargs = nargs;
	t->kernel = kernel;
	atomic_store_explicit(&t->priority, opts->priority, memory_order_relaxed);
	t->device_mask_only = forced;
	for (i = 0; i < 3; i++) {
		t->grid[i] = opts->grid[i] ? opts->grid[i] : 1;
		t->block[i] = opts->block[i] ? opts->block[i] : 1;
	}
	if (opts->tag)
		snprintf(t->tag, sizeof(t->tag), "%s", opts->tag);
	if ((opts->flags & ODX_SUBMIT_LENGTHS) && opts->nlengths > 0) {
		t->lengths_used = true;
		t->rules = malloc((size_t)opts->nlengths * sizeof(*t->rules));
		if (!t->rules) {
			odx__task_put(t);
			return odx__fail(ctx, ODX_ENOMEM, "odx_submit: out of memory");
		}
		memcpy(t->rules, opts->lengths, (size_t)opts->nlengths * sizeof(*t->rules));
		t->nrules = opts->nlengths;
	}
	if (event) {
		atomic_fetch_add(&t->refs, 1);
		t->has_event = true;
		atomic_store_explicit(&t->user_ref, true, memory_order_relaxed);
	}
	odx__submitting = true;
	rc = odx__task_submit(ctx, t,
			      (opts->flags & ODX_SUBMIT_NONBLOCK) ? ODX__ADMIT_NONBLOCK
								  : ODX__ADMIT_WAIT);
	odx__submitting = false;
	if (rc) {
		if (event)
			odx__task_put(t);
		return rc;
	}
	if (event)
		*event = (odx_event *)t;
	return 0;
}

/* An event's task is quarantined after its release (ODX__EVENT_QUARANTINE), never freed before
 * close: reading the flag of a released one is safe. */
int odx__event_check(const odx_event *ev, const char *fn)
{
	const odx__task *t = (const odx__task *)ev;

	if (!t)
		return ODX_EINVAL;
	if (!atomic_load_explicit(&t->user_ref, memory_order_acquire))
		return odx__fail(t->ctx, ODX_EINVAL,
				 "%s: the event was released (odx_event_release): its handle must not "
				 "be used again",
				 fn);
	return 0;
}

ODX_API int odx_event_query(odx_event *ev)
{
	odx__task *t = (odx__task *)ev;
	int rc = odx__event_check(ev, "odx_event_query");

	if (rc)
		return rc;
	return atomic_load(&t->done) ? t->status : ODX_EAGAIN;
}

ODX_API int odx_event_wait(odx_event *ev, int timeout_ms)
{
	int rc = odx__event_check(ev, "odx_event_wait");

	if (rc)
		return rc;
	return odx__task_wait((odx__task *)ev, timeout_ms);
}

ODX_API const char *odx_event_message(odx_event *ev)
{
	odx__task *t = (odx__task *)ev;

	if (odx__event_check(ev, "odx_event_message") || !atomic_load(&t->done) || !t->message)
		return "";
	return t->message;
}

ODX_API void odx_event_release(odx_event *ev)
{
	odx__task *t = (odx__task *)ev;

	if (!t)
		return;
	/* The user's one reference: a second release is refused, not a second drop. */
	if (!atomic_exchange(&t->user_ref, false)) {
		odx__fail(t->ctx, ODX_EINVAL,
			  "odx_event_release: the event was already released");
		return;
	}
	odx__task_put(t);
}

ODX_API int odx_wait_all(odx_context *ctx, int timeout_ms)
{
	int rc;

	if (!ctx)
		return ODX_EINVAL;
	rc = wait_targeted(ctx, all_done, ctx, timeout_ms, &ctx->waiters_all);
	if (rc)
		return odx__fail(ctx, rc, "odx_wait_all: %ld tasks still unfinished after %d ms",
				 odx__inflight(ctx), timeout_ms);
	rc = atomic_exchange(&ctx->first_error, 0);
	if (rc) {
		pthread_mutex_lock(&ctx->error_lock);
		snprintf(ctx->last_error, sizeof(ctx->last_error), "%s: %s", odx_err_name(rc),
			 ctx->first_error_msg);
		pthread_mutex_unlock(&ctx->error_lock);
	}
	return rc;
}
