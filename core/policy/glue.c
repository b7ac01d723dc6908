/* SPDX-License-Identifier: Apache-2.0 */
/*
 * glue.c - the policy host inside a context: ready tasks wait on a pending list and whoever
 * takes the Lua state places them all in one `place` call (flat combining); the seams the tier
 * manager and the fabric call; the tick thread (on_tick, and the reload check of an idle
 * program); the completions fed back to the models.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "core.h"
#include "policy_internal.h"

#define DEFER_BATCH 32           /* pending tasks that make a placement batch in any case */
#define DEFER_MIN_LOAD 2         /* a device with fewer tasks than this wants new ones placed */

/* ---- context glue --------------------------------------------------------------------------- */

static void ctx_log(void *user, odx_log_level level, bool error, const char *msg)
{
	odx_context *ctx = user;

	if (error)
		odx__fail(ctx, ODX_ECONFIG, "%s", msg);
	if (level != ODX_LOG_DEBUG)
		odx__log(ctx, level, "%s", msg);
}

/*
 * The Lua state is used by one thread at a time, under h->lock. Placement is flat-combined: a
 * thread that pushes a ready task and finds the lock taken leaves its task to the holder, which
 * drains the pending list before it lets go (`placing` says the holder is such a drainer) and
 * re-checks after unlocking. A holder that is not draining (a hook call from the tier manager,
 * the fabric or the tick thread) does not re-check: a pusher that finds one waits for the lock
 * and drains itself.
 */
static _Thread_local odx__policy *held; /* the host whose lock this thread holds */

static void drain(odx_context *ctx, odx__policy *h);

static void place_pending(odx_context *ctx, odx__policy *h)
{
	while (atomic_load(&h->npending) > 0) {
		if (pthread_mutex_trylock(&h->lock) != 0) {
			if (atomic_load(&h->placing) || held == h)
				return; /* the drainer (or this thread, later) sees our task */
			pthread_mutex_lock(&h->lock);
		}
		held = h;
		atomic_store(&h->placing, true);
		drain(ctx, h);
		atomic_store(&h->placing, false);
		held = NULL;
		pthread_mutex_unlock(&h->lock);
	}
}

/* Takes the Lua state for a call of `hook`; NULL when there is no Lua policy, it lacks the hook
 * (checked without the lock: a reload in between only makes run_hook answer ODX_ENOSYS), or
 * this thread holds the state already (a seam called from inside the policy host). */
static odx__policy *hook_enter(odx_context *ctx, enum hook hook)
{
	odx__policy *h = ctx ? ctx->policy : NULL;

	if (!h || held == h || !(atomic_load(&h->hooks) & (1u << hook)))
		return NULL;
	pthread_mutex_lock(&h->lock);
	held = h;
	return h;
}

/* Never drains the pending list: pushers that found us holding the state waited and drained
 * themselves, and the caller may hold locks (a memory node's) that placing must not nest in. */
static void hook_leave(odx__policy *h)
{
	held = NULL;
	pthread_mutex_unlock(&h->lock);
}

static void refresh_queues(odx_context *ctx, odx__policy *h)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++) {
		h->qnow[d] = atomic_load_explicit(&ctx->devices[d].load, memory_order_relaxed);
		h->done[d] = atomic_load_explicit(&ctx->devices[d].tasks_run, memory_order_relaxed);
	}
}

/* Calls on_tick every policy.tick_ms, and checks for a changed policy file when no placement
 * does (an idle program still picks up an edit). */
static void *ticker(void *arg)
{
	odx_context *ctx = arg;
	odx__policy *h = ctx->policy;
	uint64_t next = odx__now_ns() + h->tick_ns;

	pthread_setname_np(pthread_self(), "odx-policy-tick");
	pthread_mutex_lock(&h->tick_lock);
	while (!h->tick_stop) {
		struct timespec ts;
		uint64_t now = odx__now_ns(), wait = next > now ? next - now : 0;

		if (wait > 0) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += (time_t)(wait / 1000000000u);
			ts.tv_nsec += (long)(wait % 1000000000u);
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&h->tick_cond, &h->tick_lock, &ts);
			continue;
		}
		next = now + h->tick_ns;
		pthread_mutex_unlock(&h->tick_lock);
		place_pending(ctx, h); /* deferred tasks wait at most one tick */
		/* on_tick, and the reload check an idle program needs, under the state's lock. */
		pthread_mutex_lock(&h->lock);
		held = h;
		odx__policy_check_reload(h, false);
		if (odx__policy_enabled(h) && h->cur->ref_hook[HOOK_ON_TICK] != LUA_NOREF) {
			refresh_queues(ctx, h);
			odx__policy_host_tick(h, h->qnow, h->done);
		}
		hook_leave(h);
		pthread_mutex_lock(&h->tick_lock);
	}
	pthread_mutex_unlock(&h->tick_lock);
	return NULL;
}

int odx__policy_evict(odx_context *ctx, int memnode, uint64_t need, const odx__evict_cand *c,
		      int n, int *order)
{
	odx__policy *h = hook_enter(ctx, HOOK_EVICT);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	rc = odx__policy_host_evict(h, memnode, need, c, n, order);
	hook_leave(h);
	return rc;
}

int odx__policy_prefetch(odx_context *ctx, const odx__prefetch_task *w, int n, int *order)
{
	odx__policy *h = hook_enter(ctx, HOOK_PREFETCH);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	refresh_queues(ctx, h);
	rc = odx__policy_host_prefetch(h, w, n, order);
	hook_leave(h);
	return rc;
}

int odx__policy_place_rank(odx_context *ctx, const odx__rank_task *b, int n, int nranks,
			   int *out_rank)
{
	odx__policy *h = hook_enter(ctx, HOOK_PLACE_RANK);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	rc = odx__policy_host_place_rank(h, b, n, nranks, out_rank);
	hook_leave(h);
	return rc;
}

void odx__policy_set_bandwidth(odx_context *ctx, int src_node, int dst_node, double bytes_per_s)
{
	if (ctx && ctx->policy)
		odx__policy_host_set_bandwidth(ctx->policy, src_node, dst_node, bytes_per_s);
}

int odx__policy_ctx_open(odx_context *ctx, char *err, size_t errlen)
{
	const char *spec = odx__config_str(ctx->config, "policy");
	odx__policy_device *devs;
	odx__policy_params p;
	odx__policy *h = NULL;
	char why[ODX__MSG_MAX] = "";
	int *nodes, d, rc;

	if (odx__sched_find(spec))
		return 0;
	devs = calloc((size_t)ctx->ndevices + 1, sizeof(*devs));
	nodes = calloc((size_t)ctx->ndevices + 1, sizeof(*nodes));
	if (!devs || !nodes) {
		free(devs);
		free(nodes);
		return ODX_ENOMEM;
	}
	for (d = 0; d < ctx->ndevices; d++)
		nodes[d] = ctx->devices[d].memnode;
	for (d = 0; d < ctx->ndevices; d++)
		devs[d] = (odx__policy_device){
			.kind = ctx->devices[d].kind_name,
			.name = ctx->devices[d].name,
			.memory = odx__device_memory(ctx, d),
		};
	p = (odx__policy_params){
		.spec = spec,
		.ndevices = ctx->ndevices,
		.devices = devs,
		.nnodes = ctx->nmemnodes,
		.device_node = nodes,
		.memory_limit = odx__config_size(ctx->config, "policy.memory_limit",
						 odx__topo_memory(ctx->topo)),
		.budget_ns = 1000u * (uint64_t)odx__config_int(ctx->config, "policy.budget"),
		.load_timeout_ns = 1000000u *
				   (uint64_t)odx__config_int(ctx->config, "policy.load_timeout_ms"),
		.model_dir = odx__config_str(ctx->config, "policy.model_dir"),
		.log = ctx_log,
		.log_user = ctx,
	};
	rc = odx__policy_open(&h, &p, why, sizeof(why));
	free(devs);
	free(nodes);
	if (rc) {
		snprintf(err, errlen, "%s", why[0] ? why : odx_strerror(rc));
		return rc;
	}
	h->ctx = ctx;
	h->feasible = calloc((size_t)POL_BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->feasible));
	h->resident = calloc((size_t)POL_BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->resident));
	h->missing = calloc((size_t)POL_BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->missing));
	h->transfer = calloc((size_t)POL_BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->transfer));
	h->queue = calloc((size_t)ctx->ndevices, sizeof(*h->queue));
	h->valid = calloc((size_t)ctx->nmemnodes + 1, sizeof(*h->valid));
	h->done = calloc((size_t)ctx->ndevices, sizeof(*h->done));
	if (!h->feasible || !h->resident || !h->missing || !h->transfer || !h->queue || !h->valid ||
	    !h->done) {
		odx__policy_close(h);
		return ODX_ENOMEM;
	}
	ctx->policy = h;
	h->tick_ns = 1000000u * (uint64_t)odx__config_int(ctx->config, "policy.tick_ms");
	if (h->tick_ns) {
		pthread_mutex_init(&h->tick_lock, NULL);
		pthread_cond_init(&h->tick_cond, NULL);
		h->tick_started = pthread_create(&h->tick, NULL, ticker, ctx) == 0;
		if (!h->tick_started) {
			pthread_mutex_destroy(&h->tick_lock);
			pthread_cond_destroy(&h->tick_cond);
			odx__log(ctx, ODX_LOG_WARN, "policy %s: no tick thread, on_tick is not called",
				 h->display);
		}
	}
	return 0;
}

void odx__policy_ctx_close(odx_context *ctx)
{
	odx__policy *h = ctx->policy;

	if (!h)
		return;
	if (h->place_calls)
		odx__log(ctx, ODX_LOG_INFO,
			 "policy %s: %llu place calls for %llu tasks (%.1f a call), %llu failed calls",
			 h->display, (unsigned long long)h->place_calls,
			 (unsigned long long)h->placed, (double)h->placed / (double)h->place_calls,
			 (unsigned long long)atomic_load(&h->failures));
	if (h->tick_started) {
		pthread_mutex_lock(&h->tick_lock);
		h->tick_stop = true;
		pthread_cond_signal(&h->tick_cond);
		pthread_mutex_unlock(&h->tick_lock);
		pthread_join(h->tick, NULL);
		pthread_mutex_destroy(&h->tick_lock);
		pthread_cond_destroy(&h->tick_cond);
		h->tick_started = false;
	}
	pol_process_events(ctx->policy); /* last completions into the models */
	odx__policy_close(ctx->policy);
	ctx->policy = NULL;
}

static void describe_task(odx_context *ctx, odx__policy *h, int i, odx__task *t)
{
	odx__policy_task *pt = &h->tasks[i];
	int nd = ctx->ndevices, d, a;

	*pt = (odx__policy_task){
		.kernel = t->kernel->name,
		.priority = t->priority,
		.tag = t->tag,
		.feasible = &h->feasible[i * nd],
		.resident = &h->resident[i * nd],
		.missing = &h->missing[i * nd],
		.transfer_us = &h->transfer[i * nd],
	};
	for (d = 0; d < nd; d++) {
		h->feasible[i * nd + d] = odx__device_can_run(ctx, &ctx->devices[d], t);
		h->resident[i * nd + d] = 0;
		h->missing[i * nd + d] = 0;
		h->transfer[i * nd + d] = 0;
	}
	for (a = 0; a < t->nargs; a++) {
		const odx_buffer *b = t->args[a].v.buffer;
		int m;

		if (t->args[a].kind != ODX_ARG_BUFFER)
			continue;
		pt->bytes += b->size;
		if (!(t->args[a].access & ODX_R))
			continue;
		/* Relaxed, as in sched.c: a stale answer only makes placement worse. */
		for (m = 0; m < ctx->nmemnodes; m++)
			h->valid[m] = atomic_load_explicit(&b->replicas[m].state,
							   memory_order_relaxed) != ODX__INVALID;
		for (d = 0; d < nd; d++) {
			int dst = ctx->devices[d].memnode;
			double best = 0;

			if (h->valid[dst]) {
				h->resident[i * nd + d] += b->size;
				continue;
			}
			if (b->zero)
				continue;
			h->missing[i * nd + d] += b->size;
			/* From the fastest link among the nodes holding a valid copy. */
			for (m = 0; m < ctx->nmemnodes; m++)
				if (h->valid[m] && atomic_load_explicit(&h->bw[m * h->nnodes + dst],
									memory_order_relaxed) > best)
					best = atomic_load_explicit(&h->bw[m * h->nnodes + dst],
								    memory_order_relaxed);
			h->transfer[i * nd + d] += (double)b->size * 1e6 /
						   (best > 0 ? best : pol_best_in(h, dst));
		}
	}
}

/* Places everything pending, one `place` call per batch. Called with h->lock held. */
static void drain(odx_context *ctx, odx__policy *h)
{
	for (;;) {
		odx__task *t;
		int n = 0, i, d;

		/* What was pushed since, oldest first, behind what is left of the last take. */
		if (atomic_load_explicit(&h->pend_stack, memory_order_relaxed)) {
			odx__task *fifo = NULL, *next;

			for (t = atomic_exchange(&h->pend_stack, NULL); t; t = next) {
				next = t->policy_next;
				t->policy_next = fifo;
				fifo = t;
			}
			if (h->pend_tail)
				h->pend_tail->policy_next = fifo;
			else
				h->pend_head = fifo;
			for (t = fifo; t && t->policy_next; t = t->policy_next)
				;
			if (t)
				h->pend_tail = t;
		}
		while (n < POL_BATCH_MAX && (t = h->pend_head) != NULL) {
			h->pend_head = t->policy_next;
			h->batch[n++] = t;
		}
		if (!h->pend_head)
			h->pend_tail = NULL;
		atomic_fetch_sub(&h->npending, n);
		if (n == 0)
			return;
		if (odx__policy_enabled(h)) {
			for (i = 0; i < n; i++)
				describe_task(ctx, h, i, h->batch[i]);
			for (d = 0; d < ctx->ndevices; d++)
				h->queue[d] = atomic_load_explicit(&ctx->devices[d].load,
								   memory_order_relaxed);
			odx__policy_place(h, h->tasks, n, h->queue, h->out);
		} else {
			odx__policy_place(h, h->tasks, 0, h->queue, h->out); /* reload check */
			for (i = 0; i < n; i++)
				h->out[i] = -1;
		}
		for (i = 0; i < n; i++) {
			t = h->batch[i];
			d = h->out[i] >= 0 ? h->out[i] : ctx->sched->place(ctx, t);
			odx__sched_queue(ctx, t, d);
		}
	}
}

static bool all_busy(odx_context *ctx)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++)
		if (atomic_load_explicit(&ctx->devices[d].load, memory_order_relaxed) <
		    DEFER_MIN_LOAD)
			return false;
	return true;
}

void odx__policy_push(odx_context *ctx, odx__task *t)
{
	odx__policy *h = ctx->policy;

	/* Buffer reads, writes, releases and forced tasks have nothing to decide. */
	if (t->kind != ODX__TASK_KERNEL || t->device_mask_only) {
		odx__sched_queue(ctx, t, ctx->sched->place(ctx, t));
		return;
	}
	/* Lock-free: a drainer may take t before the count below rises (npending then dips to
	 * -1 for a moment: nobody waits on it, every reader only asks "more than so many?"). */
	t->policy_next = atomic_load_explicit(&h->pend_stack, memory_order_relaxed);
	while (!atomic_compare_exchange_weak(&h->pend_stack, &t->policy_next, t))
		;
	atomic_fetch_add(&h->npending, 1);
	/* While every device has work, placing later costs nothing and makes bigger batches (one
	 * Lua call for many tasks): the task waits until a device runs low (odx__policy_task_done),
	 * the batch is full, or the next tick (no deferring without a tick thread as a backstop,
	 * policy.tick_ms = 0). The fence pairs with the one in task_done: either
	 * we see a device run low, or its worker sees our task. */
	atomic_thread_fence(memory_order_seq_cst);
	if (h->tick_started && atomic_load(&h->npending) < DEFER_BATCH && all_busy(ctx))
		return;
	/* Flat combining: whoever holds the lock places everything pending, ours included; a
	 * task appended while the holder was finishing is seen by the re-check after unlock. */
	place_pending(ctx, h);
}

void odx__policy_task_done(odx__task *t, int status)
{
	odx_context *ctx = t->ctx;
	odx__policy *h = ctx->policy;
	uint64_t bytes = 0;
	int a;

	/* The device runs low (its load was decremented before this call): place what waits. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&h->npending) > 0 &&
	    atomic_load_explicit(&ctx->devices[t->device].load, memory_order_relaxed) <
		    DEFER_MIN_LOAD)
		place_pending(ctx, h);

	if (status || !t->launched || !t->t_start || t->kind != ODX__TASK_KERNEL)
		return;
	for (a = 0; a < t->nargs; a++)
		if (t->args[a].kind == ODX_ARG_BUFFER)
			bytes += t->args[a].v.buffer->size;
	odx__policy_feedback(t->ctx->policy, t->kernel->name, t->device, bytes,
			     odx__now_ns() - t->t_start);
}
