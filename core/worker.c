/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c - one worker thread per device: it stages a task's inputs, runs it on the device's
 * compute lane, and completes it. With nothing to do it polls briefly, then sleeps on a futex
 * word (odx__device_sleep; never spins for long: these machines have two cores), and it does not
 * wait for copies: a task whose inputs are still in flight is parked and comes back through the
 * staged queue.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "policy.h"

static void finish_trace(odx__task *t, odx__device *dev, uint64_t t0)
{
	odx_context *ctx = t->ctx;
	uint64_t t1;

	if (!ctx->stats && !ctx->tracing)
		return;
	t1 = odx__now_ns();
	atomic_fetch_add_explicit(&dev->busy_ns, t1 - t0, memory_order_relaxed);
	if (ctx->tracing) {
		bool tagged = (t->kind == ODX__TASK_KERNEL || odx__task_is_switch(t)) && t->tag[0];
		const char *name = tagged ? t->tag : odx__task_kind_name(t, true);

		odx__trace_span(dev->compute_trace, name, "task", t0, t1, t->id);
	}
}

void odx__task_finish(odx__task *t, int status, const char *msg)
{
	odx_context *ctx = t->ctx;
	odx__device *dev = &ctx->devices[t->device];
	char why[ODX__MSG_MAX];

	/* The lengths it set, before its outputs' new version is published (length.c); a refused
	 * one fails it like a kernel that failed (its outputs are not valid). */
	if (status == 0 && t->kind == ODX__TASK_KERNEL &&
	    (t->nrules || t->nlenrecs || t->len_status) && odx__lengths_apply(t) != 0) {
		status = t->len_status;
		snprintf(why, sizeof(why), "task #%llu '%s' (kernel '%s') failed on device %d (%s): "
			 "%s", (unsigned long long)t->id, t->tag, t->kernel->name, dev->index,
			 dev->name, t->len_msg ? t->len_msg : "a length it set was refused");
		msg = why;
	}
	if (t->staged)
		odx__unstage(t, status);
	/* Unpinned first: an unpartition releases the parts it staged. */
	if (odx__task_is_switch(t))
		odx__partition_switch_end(t, &status);
	atomic_fetch_sub_explicit(&dev->load, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&dev->tasks_run, 1, memory_order_relaxed);
	if (ctx->policy)
		odx__policy_task_done(t, status);
	if (t->kind == ODX__TASK_DESTROY) {
		odx_buffer *b = t->args[0].v.buffer;

		/* The buffer's last writer is this task: its reference goes with the buffer. A
		 * partitioned parent's parts go first (they alias its memory). */
		if (atomic_load(&b->nparts) > 0)
			odx__partition_release_parts(b);
		odx__buffer_release_memory(b);
	}
	odx__task_complete(t, status, msg);
}

static bool device_runs(const odx__device *dev, const odx_kernel_variant *v)
{
	return ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, can_run)
		       ? dev->ops->can_run(dev->bdev, v)
		       : v->backend == dev->kind;
}

/* Prepares the kernel for this device once (compile, load a module), trying its variants for
 * this device in order: an image for the wrong architecture falls through to the next one (a
 * cubin, then PTX, say). Only this device's worker touches the kernel's per-device slots. */
static int load_module(odx__task *t, odx__device *dev, char *err, size_t errlen)
{
	odx_kernel *k = t->kernel;
	int d = dev->index, v, rc = 0;
	char why[ODX__MSG_MAX] = "";
	size_t used = 0;

	if (k->loaded_variant[d] >= 0)
		return 0;
	if (k->module_error[d]) {
		snprintf(err, errlen, "%s", k->module_error[d]);
		return ODX_EBACKEND;
	}
	if (!ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, module_load)) {
		k->loaded_variant[d] = k->device_variant[d];
		return 0;
	}
	for (v = k->device_variant[d]; v < k->nvariants; v++) {
		if (!device_runs(dev, &k->variants[v]))
			continue;
		err[0] = '\0';
		rc = dev->ops->module_load(dev->bdev, &k->variants[v], &k->device_module[d], err,
					   errlen);
		err[errlen - 1] = '\0'; /* a backend may fill it without a NUL */
		if (rc == 0) {
			k->loaded_variant[d] = v;
			return 0;
		}
		if (used < sizeof(why))
			used += (size_t)snprintf(why + used, sizeof(why) - used, "%svariant %d: %s",
						 used ? "; " : "", v,
						 err[0] ? err : odx_strerror(rc));
	}
	{
		char msg[ODX__MSG_MAX];

		snprintf(msg, sizeof(msg), "cannot load kernel '%s' on %s: %s", k->name,
			 dev->name, why);
		k->module_error[d] = strdup(msg);
		snprintf(err, errlen, "%s", msg);
	}
	return rc ? rc : ODX_EBACKEND;
}

static void launch_done(void *arg, int status, const char *msg);

static int run_kernel(odx__task *t, odx__device *dev, char *err, size_t errlen, int *native)
{
	odx_backend_arg largs[64];
	odx_shape shapes[64];
	size_t lengths[64];
	odx_backend_launch l;
	int i, rc, m = dev->memnode;

	rc = load_module(t, dev, err, errlen);
	if (rc)
		return rc;
	for (i = 0; i < t->nargs; i++) {
		const odx_arg *a = &t->args[i];

		largs[i].kind = a->kind;
		shapes[i] = (odx_shape){0, 0, 0};
		lengths[i] = 0;
		if (a->kind == ODX_ARG_BUFFER) {
			const odx__replica *r = &a->v.buffer->replicas[m];

			/* Set by the writers it waited for; no writer of it runs now. */
			lengths[i] = odx__buffer_length(a->v.buffer);
			/* A part used in place, inside its parent, spans more than its size. */
			shapes[i] = odx__replica_shape(a->v.buffer, m);
			largs[i].mem = r->mem;
			largs[i].size = odx__shape_span(&shapes[i]);
			/* Nonzero only on pooled nodes, whose backends speak ABI 1.2. */
			largs[i].v.offset = r->off;
		} else if (a->kind == ODX_ARG_LD) {
			/* The leading dimension of the buffer argument it names, as laid out here. */
			const odx_buffer *b = t->args[a->v.i32].v.buffer;
			odx_shape s = odx__replica_shape(b, m);
			size_t elem = b->part_of && b->part_elem ? b->part_elem : 1;

			largs[i].kind = t->kernel->params[i].kind;
			largs[i].mem = 0;
			largs[i].size = 0;
			if (largs[i].kind == ODX_ARG_I32)
				largs[i].v.i32 = (int32_t)(s.pitch / elem);
			else
				largs[i].v.i64 = (int64_t)(s.pitch / elem);
		} else if (a->kind == ODX_ARG_LEN) {
			/* The length of the buffer argument it names, in elements (docs/sizes.md). */
			size_t n = odx__buffer_length(t->args[a->v.len.arg].v.buffer) /
				   (size_t)a->v.len.elem_size;

			largs[i].kind = t->kernel->params[i].kind;
			largs[i].mem = 0;
			largs[i].size = 0;
			if (largs[i].kind == ODX_ARG_I32)
				largs[i].v.i32 = (int32_t)n;
			else
				largs[i].v.i64 = (int64_t)n;
		} else {
			largs[i].mem = 0;
			largs[i].size = 0;
			memcpy(&largs[i].v, &a->v, sizeof(largs[i].v));
		}
	}
	l = (odx_backend_launch){
		.variant = &t->kernel->variants[t->kernel->loaded_variant[dev->index]],
		.module = t->kernel->device_module[dev->index],
		.args = largs,
		.nargs = t->nargs,
		.grid = {t->grid[0], t->grid[1], t->grid[2]},
		.block = {t->block[0], t->block[1], t->block[2]},
		.device = dev->index,
		.tag = t->tag,
		.error = err,
		.error_size = errlen,
		.native = 0,
		.shapes = shapes,
		.lengths = lengths,
		.set_length = odx__lengths_set,
		.set_length_ctx = t,
	};
	err[0] = '\0';
	rc = dev->ops->launch(dev->bdev, &l, launch_done, t);
	/* The backend, or the kernel behind it, may fill the text to the brim with no NUL: take
	 * at most errlen - 1 bytes of it. */
	err[errlen - 1] = '\0';
	*native = l.native;
	return rc;
}

static void kernel_failed(odx__task *t, odx__device *dev, int rc, const char *err, int native)
{
	char msg[ODX__MSG_MAX];

	if (rc == ODX_EDEVLOST && !atomic_exchange(&dev->lost, true))
		odx__log(t->ctx, ODX_LOG_ERROR,
			 "device %d (%s) is lost: %.*s; new tasks go to the other devices",
			 dev->index, dev->name, ODX__MSG_MAX - 1, err ? err : "");
	snprintf(msg, sizeof(msg),
		 "task #%llu '%s' (kernel '%s') failed on device %d (%s): %s%s%.*s (native code %d)",
		 (unsigned long long)t->id, t->tag, t->kernel->name, dev->index, dev->name,
		 odx_err_name(rc), err && err[0] ? ": " : "", ODX__MSG_MAX - 1, err ? err : "",
		 native);
	odx__task_finish(t, rc, msg);
}

/* A kernel succeeded: the counts of its length rules are read (from device memory: the read's
 * completion finishes it), then it finishes. */
static void kernel_succeeded(odx__task *t, odx__device *dev)
{
	if (t->nrules && odx__lengths_fetch(t, dev) > 0)
		return;
	odx__task_finish(t, 0, NULL);
}

/* Completion of an asynchronous launch, from a backend thread. */
static void launch_done(void *arg, int status, const char *msg)
{
	odx__task *t = arg;
	odx__device *dev = &t->ctx->devices[t->device];
	uint64_t start = t->t_start;

	/* Launches queue on the lane: this one ran from the later of its launch and the end of
	 * the one before it, not from its launch (busy time and trace spans stay honest). */
	if (t->ctx->stats || t->ctx->tracing) {
		uint64_t prev = atomic_exchange(&dev->compute_free_ns, odx__now_ns());

		if (prev > start)
			start = prev;
	}
	finish_trace(t, dev, start);
	/* Launched behind a predecessor that then failed: it ran on bad inputs. */
	if (t->chained && atomic_load(&t->cancel)) {
		odx__task_finish(t, atomic_load(&t->cancel), NULL);
		return;
	}
	if (status == 0)
		kernel_succeeded(t, dev);
	else
		kernel_failed(t, dev, status, msg, 0);
}

/* Tasks that found no room on the device wait, in order, at the head of its memory-wait queue;
 * `seen` is ctx->progress read before they were staged: if room appeared since, retry at once. */
static void wait_for_room(odx__device *dev, odx__task **ts, int n, uint64_t seen)
{
	odx_context *ctx = ts[0]->ctx;
	uint64_t now = odx__now_ns();
	int i;

	pthread_mutex_lock(&dev->lock);
	for (i = n - 1; i >= 0; i--) {
		odx__task *t = ts[i];

		if (!t->t_noroom)
			t->t_noroom = now;
		t->mem_next = dev->memwait_head;
		dev->memwait_head = t;
		if (!dev->memwait_tail)
			dev->memwait_tail = t;
	}
	atomic_fetch_add(&dev->memwait_n, n);
	odx__lq_added(dev);
	if (atomic_load(&ctx->progress) != seen)
		dev->mem_changed = true;
	pthread_mutex_unlock(&dev->lock);
}

/* With dev->lock held: takes the head of the memory-wait queue if room may have appeared for it
 * (`need_change`: only then) and it may be staged now; NULL otherwise. */
static odx__task *memwait_pop(odx__device *dev, bool need_change)
{
	odx__task *t = dev->memwait_head;

	/* A chained task is staged again only after its producer completed (chain_successors). */
	if (!t || (need_change && !dev->mem_changed) ||
	    (t->chained && atomic_load(&t->pending) > 0))
		return NULL;
	dev->mem_changed = false;
	dev->memwait_head = t->mem_next;
	if (!dev->memwait_head)
		dev->memwait_tail = NULL;
	t->mem_next = NULL;
	atomic_fetch_sub(&dev->memwait_n, 1);
	return t;
}

/*
 * Before a launch that holds the worker until the kernel finished (a host device), tasks waiting
 * for room get their turn: their evictions and fetches then run on the copy lane beside the
 * kernel instead of after it (a streaming working set larger than the tier otherwise alternates
 * kernel and copies). Up to STAGE_AHEAD tasks fetching at once; the first try only when room
 * may have appeared, as next_task does.
 */
#define STAGE_AHEAD 2

static void stage_ahead(odx_context *ctx, odx__device *dev)
{
	bool first = true;

	while (atomic_load(&dev->memwait_n) > 0 &&
	       atomic_load(&dev->demand_fetches) < STAGE_AHEAD) {
		uint64_t seen = atomic_load(&ctx->progress);
		odx__task *t;
		int st;

		pthread_mutex_lock(&dev->lock);
		t = memwait_pop(dev, first);
		pthread_mutex_unlock(&dev->lock);
		if (!t)
			return;
		first = false;
		st = odx__stage(t, NULL);
		if (st == ODX__STAGE_NOROOM) {
			wait_for_room(dev, &t, 1, seen);
			return;
		}
		if (t->t_noroom) {
			atomic_fetch_add(&dev->stall_ns, odx__now_ns() - t->t_noroom);
			t->t_noroom = 0;
		}
		/* Ready: the worker launches it after the one it holds. Fetching: the last fetch
		 * queues it. */
		if (st == ODX__STAGE_READY)
			odx__device_push_staged(dev, t);
	}
}

/* With dev->lock held: the next task for the worker. Tasks whose inputs arrived come first; then,
 * while tasks wait for room, only the head of that queue and only when room may have appeared
 * (no new task is taken meanwhile: the head gets the next room). */
/* `steal`: with nothing of its own, it may take a task queued behind a busy device that shares
 * its memory (never while filling a batch: a worker with work does not take others'). */
static odx__task *next_task(odx_context *ctx, odx__device *dev, bool steal)
{
	odx__task *t;

	/* A successor its own completion made ready, left for it outside the queue (sched.c). */
	if (dev->direct) {
		t = dev->direct;
		dev->direct = NULL;
		atomic_fetch_add_explicit(&dev->direct_runs, 1, memory_order_relaxed);
		return t;
	}
	/* A submitting thread is launching here: one launcher per device at a time. */
	if (dev->inline_running)
		return NULL;
	if (dev->memwait_head && dev->staged_n == 0)
		return memwait_pop(dev, true);
	t = odx__sched_next(ctx, dev);
	if (!t && steal && dev->steal_peers && !dev->stop) {
		t = odx__sched_steal(ctx, dev);
		/* its lock was dropped: what was queued here meanwhile */
		if (!t && !dev->inline_running)
			t = odx__sched_next(ctx, dev);
	}
	return t;
}

/* Prefetch: while data is moving for this device, the inputs of the next tasks queued here
 * start moving too, if the device's tier has room below its start watermark. */
#define PREFETCH_WINDOW 4

/* A Lua policy with a prefetch hook orders the window (the default is queue order). */
static void policy_prefetch_order(odx_context *ctx, odx__device *dev, odx__task **w, int n)
{
	odx__prefetch_task pt[PREFETCH_WINDOW * 4];
	uint64_t ids[PREFETCH_WINDOW * 4][8], missing[PREFETCH_WINDOW * 4][8];
	odx__task *sorted[PREFETCH_WINDOW * 4];
	int order[PREFETCH_WINDOW * 4], i, j, k, m = dev->memnode;
	bool taken[PREFETCH_WINDOW * 4] = {false};

	for (i = 0; i < n; i++) {
		int nb = 0;

		for (j = 0; j < w[i]->nargs && nb < 8; j++) {
			odx_buffer *b = w[i]->args[j].v.buffer;

			if (w[i]->args[j].kind != ODX_ARG_BUFFER)
				continue;
			ids[i][nb] = b->id;
			/* a racy read is fine: this is a hint for the policy */
			missing[i][nb++] = atomic_load_explicit(&b->replicas[m].state,
								 memory_order_relaxed) == ODX__INVALID
						   ? b->size
						   : 0;
		}
		pt[i] = (odx__prefetch_task){.task_id = w[i]->id,
					     .device = dev->index,
					     .priority = w[i]->priority,
					     .nbufs = nb,
					     .buffer_ids = ids[i],
					     .missing_bytes = missing[i]};
	}
	k = odx__policy_prefetch(ctx, pt, n, order);
	if (k <= 0)
		return;
	for (i = j = 0; i < k; i++)
		if (order[i] >= 0 && order[i] < n && !taken[order[i]]) {
			taken[order[i]] = true;
			sorted[j++] = w[order[i]];
		}
	for (i = 0; i < n; i++) /* what the policy left out keeps its place, after */
		if (!taken[i])
			sorted[j++] = w[i];
	memcpy(w, sorted, (size_t)n * sizeof(*w));
}

static void prefetch_queued(odx_context *ctx, odx__device *dev)
{
	/* a wider window when a policy chooses among it */
	odx__task *w[PREFETCH_WINDOW * 4];
	int n, i, want = ctx->policy ? PREFETCH_WINDOW * 4 : PREFETCH_WINDOW;

	pthread_mutex_lock(&dev->lock);
	if (!dev->memwait_head)
		odx__inbox_drain(dev);
	n = dev->memwait_head ? 0 : odx__queue_peek_n(&dev->ready, w, want);
	for (i = 0; i < n; i++)
		atomic_fetch_add(&w[i]->refs, 1);
	pthread_mutex_unlock(&dev->lock);
	if (ctx->policy && n > 1)
		policy_prefetch_order(ctx, dev, w, n);
	for (i = 0; i < n; i++) {
		if (w[i]->kind == ODX__TASK_KERNEL && !w[i]->staged && w[i]->device == dev->index)
			odx__prefetch(w[i]);
		odx__task_put(w[i]);
	}
}

#define CHAIN_MAX 8

/*
 * On a device whose compute lane runs launches in order (and reports them in order), a
 * successor whose only unfinished predecessor is `p`, just launched there, can be launched right
 * behind it: the lane orders them, and the round trip through p's completion disappears. It is
 * queued as staged, so the worker launches it next; odx__task_ready then leaves it alone.
 */
static void chain_successors(odx__task *p, odx__device *dev)
{
	odx__task *cand[CHAIN_MAX];
	int n = 0, i, j;

	pthread_mutex_lock(&p->lock);
	for (i = 0; !atomic_load(&p->done) && i < p->nsucc && n < CHAIN_MAX; i++) {
		odx__task *s = p->succ[i].task;
		int edges = 0;

		for (j = 0; j < p->nsucc; j++)
			edges += p->succ[j].task == s;
		/* Every pending count left is an edge from p, and it may run here. */
		/* Not behind one that may change lengths s reads at its launch (ODX_LEN,
		 * buffer_lengths): they are set when p completes, after s was launched. */
		if (s->kind != ODX__TASK_KERNEL || atomic_load(&s->pending) != edges ||
		    odx__task_sets_lengths(p, dev) ||
		    atomic_load(&s->chain) != ODX__CHAIN_FREE || atomic_load(&s->cancel) ||
		    (s->device_mask_only && s->device_mask_only != dev->index + 1) ||
		    s->kernel->device_variant[dev->index] < 0)
			continue;
		for (j = 0; j < n && cand[j] != s; j++)
			;
		if (j < n)
			continue;
		atomic_fetch_add(&s->refs, 1); /* p may complete, and s with it, once we unlock */
		cand[n++] = s;
	}
	pthread_mutex_unlock(&p->lock);

	for (i = 0; i < n; i++) {
		odx__task *s = cand[i];
		int expected = ODX__CHAIN_FREE;

		/* Not while tasks wait for room here: they come first, and a chained task that
		 * found none could only be staged again once its producer completed. */
		if (atomic_load(&dev->memwait_n) == 0 && odx__can_stage_behind(s, p, dev->memnode) &&
		    atomic_compare_exchange_strong(&s->chain, &expected, ODX__CHAIN_CLAIMED)) {
			int st;

			s->chained = true;
			s->device = dev->index;
			atomic_fetch_add_explicit(&dev->chained, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
			st = odx__stage(s, p);
			if (st == ODX__STAGE_READY)
				odx__device_push_staged(dev, s);
			else if (st == ODX__STAGE_NOROOM)
				wait_for_room(dev, &s, 1, 0);
		}
		odx__task_put(s);
	}
}

static void run(odx__task *t, odx__device *dev)
{
	odx_context *ctx = t->ctx;
	char err[ODX__MSG_MAX], msg[ODX__MSG_MAX];
	/* Timed for the trace, the statistics and a Lua policy's performance models (only once
	 * something reads them: lua:eager never does, and its tasks read no clock). */
	uint64_t t0 = (ctx->stats || ctx->tracing ||
		       (ctx->policy && odx__policy_wants_times(ctx->policy)))
			      ? odx__now_ns()
			      : 0;
	int rc = atomic_load(&t->fetch_error), native = 0;

	if (rc) {
		snprintf(msg, sizeof(msg), "task #%llu '%s': its inputs could not be staged on %s: %s",
			 (unsigned long long)t->id, t->tag, dev->name,
			 t->fetch_msg ? t->fetch_msg : odx_strerror(rc));
		odx__task_finish(t, rc, msg);
		return;
	}
	switch (t->kind) {
	case ODX__TASK_KERNEL:
		/* Queued behind a predecessor that failed meanwhile: no point launching it. */
		if (t->chained && atomic_load(&t->cancel)) {
			odx__task_finish(t, atomic_load(&t->cancel), NULL);
			return;
		}
		t->launched = true;
		t->t_start = t0; /* start time, for an asynchronous completion's trace */
		atomic_fetch_add(&t->refs, 1); /* it may complete before we look at it again */
		rc = run_kernel(t, dev, err, sizeof(err), &native);
		atomic_store_explicit(&dev->launch_blocks, rc != ODX_BACKEND_PENDING,
				      memory_order_relaxed);
		if (rc == ODX_BACKEND_PENDING) {
			/* launch_done finishes it; meanwhile launch what can follow it here. */
			atomic_store(&t->queued, true);
			if (dev->props.ordered_compute)
				chain_successors(t, dev);
			odx__task_put(t);
			return;
		}
		odx__task_put(t);
		break;
	case ODX__TASK_SEND:
	case ODX__TASK_RECV:
		/* Between ranks: the fabric calls back when the bytes moved (dist.c). */
		rc = odx__dist_run(t);
		if (rc == 0)
			return;
		snprintf(err, sizeof(err), "the fabric refused the transfer: %s",
			 odx_strerror(rc));
		snprintf(msg, sizeof(msg), "task #%llu '%s': %s", (unsigned long long)t->id,
			 t->tag, err);
		odx__task_finish(t, rc, msg);
		return;
	case ODX__TASK_SHUFFLE:
		/* Finishes itself once its parts moved (shuffle.c). */
		odx__shuffle_run(t);
		return;
	default:
		/* Buffer destruction and partition switches: what they needed was done by staging
		 * (the switches' bookkeeping follows in odx__task_finish); reads and writes never
		 * come here (the calling thread runs them). */
		break;
	}
	finish_trace(t, dev, t0);
	if (rc == 0) {
		if (t->kind == ODX__TASK_KERNEL)
			kernel_succeeded(t, dev);
		else
			odx__task_finish(t, 0, NULL);
		return;
	}
	kernel_failed(t, dev, rc, err, native);
}

_Thread_local bool odx__submitting;
_Thread_local int odx__worker_device = -1;
_Thread_local odx__device *odx__worker_self;

void odx__run_inline(odx__device *dev, odx__task *t)
{
	odx_context *ctx = t->ctx;
	uint64_t seen = atomic_load(&ctx->progress);
	int st;

	/* What completes on this thread (and makes successors ready) goes through the queues. */
	odx__submitting = false;
	st = odx__stage(t, NULL);
	if (st == ODX__STAGE_READY)
		run(t, dev);
	else if (st == ODX__STAGE_NOROOM)
		wait_for_room(dev, &t, 1, seen);
	/* ODX__STAGE_FETCHING: the last fetch's completion queues it as staged for the worker. */
	pthread_mutex_lock(&dev->lock);
	dev->inline_running = false;
	if (dev->sleeping && (dev->ready.n > 0 || odx__inbox_pending(dev) || dev->staged_n > 0 ||
			      dev->memwait_head))
		odx__device_signal(dev);
	pthread_mutex_unlock(&dev->lock);
	odx__submitting = true;
}

typedef struct worker_arg {
	odx_context *ctx;
	odx__device *dev;
} worker_arg;

/* Polls briefly for new work before sleeping: a wake-up through the kernel costs microseconds,
 * more than a small task. Bounded by sched.idle_spin_us, so an idle runtime still sleeps. Where
 * the workers and a submitter outnumber the cores, it yields its core every 64 rounds (a few
 * microseconds) to any thread waiting for it. */
static bool poll_for_work(odx_context *ctx, odx__device *dev)
{
	uint64_t deadline, t0;
	unsigned i = 0;

	if (ctx->idle_spin_ns == 0)
		return false;
	t0 = odx__now_ns();
	deadline = t0 + ctx->idle_spin_ns;
	/* fabric.progress = workers: this thread drives the fabric meanwhile (dist.c), longer
	 * while its transfers are out (fabric.assist_spin_us) */
	bool assist = odx__dist_assist_begin(ctx);
	uint64_t xfer_deadline = t0 + ctx->assist_spin_ns;
	for (;;) {
		/* assisted, transfers in flight are not work to run (xfers_out read first: it
		 * drops before load) */
		int out = assist ? atomic_load(&dev->xfers_out) : 0;

		if (atomic_load_explicit(&dev->load, memory_order_relaxed) > out ||
		    (ctx->use_shared && atomic_load_explicit(&ctx->shared_count, memory_order_relaxed) > 0)) {
			if (assist)
				odx__dist_assist_end(ctx, true);
			return true;
		}
		if (assist && (i & 3) == 0)
			odx__dist_assist_poll(ctx);
		/* the peers' load counters only now and then: the submitting thread writes them at
		 * every push, and a poller reading them each round slows it (cache line traffic) */
		if ((++i & 63) == 0) {
			if (dev->steal_peers && odx__sched_stealable(ctx, dev, false)) {
				if (assist)
					odx__dist_assist_end(ctx, true);
				return true;
			}
			uint64_t now = odx__now_ns();

			/* More threads of ours than cores: the submitter may be waiting for this
			 * core, and gets it now rather than when the poll ends (while it waits no
			 * work comes, and the workers go to sleep only to be woken again: a futex
			 * call and two context switches each). With no one else runnable here it
			 * returns at once. Not with a core to spare: there it would only hand the
			 * core to other programs' threads on a loaded machine. */
			if (ctx->idle_yield)
				sched_yield();
			if (now > deadline && (out == 0 || now > xfer_deadline)) {
				if (assist)
					odx__dist_assist_end(ctx, false);
				return false;
			}
		}
		__builtin_ia32_pause();
	}
}

#define WORKER_BATCH 16

/* The worker took a task from its inbox without its lock: tasks left behind it there may go to
 * an idle peer sharing its memory (as when it takes one under the lock). */
static void took_unlocked(odx_context *ctx, odx__device *dev)
{
	if (dev->steal_peers && odx__inbox_ring_pending(dev) && atomic_load(&ctx->nsleeping) > 0)
		odx__sched_wake_thief(ctx, dev);
}

static void *worker_loop(void *p)
{
	worker_arg wa = *(worker_arg *)p;
	odx_context *ctx = wa.ctx;
	odx__device *dev = wa.dev;
	odx__task *t, *batch[WORKER_BATCH];
	int i, nbatch;
	bool fetching, polled = false;
	char name[16];

	free(p);
	odx__worker_device = dev->index;
	odx__worker_self = dev;
	snprintf(name, sizeof(name), "odx-dev%d", dev->index);
	pthread_setname_np(pthread_self(), name);
	if (ctx->bind)
		odx__topo_bind_self(ctx->topo, odx__device_bind_slot(dev));
	pthread_mutex_lock(&dev->lock);
	for (;;) {
		t = next_task(ctx, dev, true);
		/* out of work: what it freed goes back to the pool for the submitters */
		if (!t)
			odx__task_return_flush(dev);
		if (!t && !polled && !dev->stop && !dev->memwait_head) {
			dev->polling = true;
			odx__inbox_note_empty(dev);
			pthread_mutex_unlock(&dev->lock);
			poll_for_work(ctx, dev);
			/* what the poll saw arrive in its inbox: taken without the lock */
			if ((batch[0] = odx__inbox_take_unlocked(dev)) != NULL) {
				dev->polling = false;
				nbatch = 1;
				took_unlocked(ctx, dev);
				goto run_batch;
			}
			pthread_mutex_lock(&dev->lock);
			dev->polling = false;
			t = next_task(ctx, dev, true);
		}
		polled = false;
		if (!t) {
			if (dev->stop)
				break;
			dev->sleeping = true;
			atomic_store_explicit(&dev->sleeps,
					      atomic_load_explicit(&dev->sleeps, memory_order_relaxed) + 1,
					      memory_order_relaxed);
			atomic_fetch_add(&ctx->nsleeping, 1);
			/* a wake-up from here on (also while a steal drops the lock) is not lost */
			uint32_t seq = atomic_load(&dev->wake_seq);
			/* fabric.progress: the progress thread polls now */
			odx__dist_assist_sleep(ctx, atomic_load(&dev->xfers_out) > 0);
			/* Re-check the shared queue after announcing sleep (see wake_one_sleeper). */
			t = next_task(ctx, dev, true);
			if (!t && !dev->stop)
				odx__device_sleep(dev, seq);
			atomic_fetch_sub(&ctx->nsleeping, 1);
			dev->sleeping = false;
			/* sequentially consistent, before it looks for work again: a waker that saw
			 * the mark set skipped its wake-up for work it had made visible already */
			atomic_store(&dev->wake_pending, false);
			if (!t)
				continue;
		}
		/* Take a few at once: one lock round trip for several small tasks. The shared eager
		 * queue gives one at a time so idle workers share it, and so does a device whose
		 * queue other workers may take from (a batch would hold its tasks out of their reach
		 * behind a long one). */
		batch[0] = t;
		nbatch = 1;
		while (!ctx->use_shared && !dev->steal_peers && nbatch < WORKER_BATCH &&
		       (t = next_task(ctx, dev, false)) != NULL)
			batch[nbatch++] = t;
		bool behind = dev->steal_peers && (dev->ready.n > 0 || odx__inbox_pending(dev));
		odx__inbox_note_empty(dev);
		pthread_mutex_unlock(&dev->lock);
		/* tasks wait behind the one it took: an idle peer sharing its memory may take them */
		if (behind && atomic_load(&ctx->nsleeping) > 0)
			odx__sched_wake_thief(ctx, dev);
run_batch:
		fetching = false;
		for (i = 0; i < nbatch; i++) {
			odx__task *bt = batch[i];
			uint64_t seen = atomic_load(&ctx->progress);
			int st = bt->staged ? ODX__STAGE_READY : odx__stage(bt, NULL);

			if (st == ODX__STAGE_NOROOM) {
				wait_for_room(dev, batch + i, nbatch - i, seen);
				break;
			}
			if (bt->t_noroom) {
				atomic_fetch_add(&dev->stall_ns, odx__now_ns() - bt->t_noroom);
				bt->t_noroom = 0;
			}
			if (st == ODX__STAGE_READY) {
				if (atomic_load_explicit(&dev->launch_blocks,
							 memory_order_relaxed) &&
				    atomic_load(&dev->memwait_n) > 0)
					stage_ahead(ctx, dev);
				run(bt, dev);
			} else {
				fetching = true;
			}
		}
		if (fetching && ctx->prefetch)
			prefetch_queued(ctx, dev);
		/* the successor the last completion left here: next, without the queue's lock */
		if (dev->direct) {
			batch[0] = dev->direct;
			dev->direct = NULL;
			atomic_fetch_add_explicit(&dev->direct_runs, 1, memory_order_relaxed);
			nbatch = 1;
			goto run_batch;
		}
		/* nothing queued under the lock since it last looked: the next task from its inbox,
		 * without the lock (a thief draining it under the lock is decided by the head's
		 * compare-and-swap) */
		if ((batch[0] = odx__inbox_take_unlocked(dev)) != NULL) {
			nbatch = 1;
			took_unlocked(ctx, dev);
			goto run_batch;
		}
		/* Nothing queued here at all, nor at a peer it could take from: it polls for work
		 * before taking its lock (which it would only drop again to poll). */
		if (ctx->idle_spin_ns && !ctx->use_shared && odx__inbox_locked_empty(dev) &&
		    atomic_load_explicit(&dev->over_n, memory_order_relaxed) == 0 &&
		    !(dev->steal_peers && odx__sched_stealable(ctx, dev, false))) {
			odx__task_return_flush(dev);
			dev->polling = true;
			poll_for_work(ctx, dev);
			if ((batch[0] = odx__inbox_take_unlocked(dev)) != NULL) {
				dev->polling = false;
				nbatch = 1;
				took_unlocked(ctx, dev);
				goto run_batch;
			}
			/* under the lock: one look, then sleep (it polled already) */
			polled = true;
			pthread_mutex_lock(&dev->lock);
			dev->polling = false;
			continue;
		}
		pthread_mutex_lock(&dev->lock);
	}
	pthread_mutex_unlock(&dev->lock);
	odx__task_return_flush(dev);
	return NULL;
}

int odx__workers_start(odx_context *ctx)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++)
		ctx->devices[d].steal_peers = odx__sched_stealable(ctx, &ctx->devices[d], true);
	/* one worker per device and the application's submitting thread, against the CPUs this
	 * process may run on */
	cpu_set_t cpus;
	int ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
	ctx->idle_yield = ncpus > 0 && ctx->ndevices + 1 > ncpus;
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];
		worker_arg *wa = malloc(sizeof(*wa));

		if (!wa)
			return ODX_ENOMEM;
		*wa = (worker_arg){.ctx = ctx, .dev = dev};
		if (pthread_create(&dev->thread, NULL, worker_loop, wa) != 0) {
			free(wa);
			return odx__fail(ctx, ODX_ENOMEM, "cannot start the worker of device %d", d);
		}
		dev->thread_started = true;
	}
	return 0;
}

void odx__workers_stop(odx_context *ctx)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];

		if (!dev->thread_started)
			continue;
		pthread_mutex_lock(&dev->lock);
		dev->stop = true;
		odx__device_signal(dev);
		pthread_mutex_unlock(&dev->lock);
		pthread_join(dev->thread, NULL);
		dev->thread_started = false;
	}
}
