/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.c - placement of ready tasks and the device ready queues.
 *
 * Placement sits behind one interface (odx__sched_ops.place), so a Lua policy (core/policy/)
 * replaces the decision, not the mechanism. C decides what is feasible (the kernel has a
 * variant for the device, the user did not force another device); the policy decides what is best.
 */
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "policy.h"

/* ---- priority queue: higher priority first, then submission order ------------------------- */

static odx__level *level_for(odx__queue *q, int priority)
{
	int lo = 0, hi = q->nlevels;

	/* Levels are sorted by decreasing priority; find it or the place to insert it. */
	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (q->levels[mid].priority == priority)
			return &q->levels[mid];
		if (q->levels[mid].priority > priority)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (q->nlevels == q->caplevels) {
		int cap = q->caplevels ? 2 * q->caplevels : 4;
		odx__level *l = realloc(q->levels, (size_t)cap * sizeof(*l));

		if (!l)
			return NULL;
		q->levels = l;
		q->caplevels = cap;
	}
	memmove(&q->levels[lo + 1], &q->levels[lo], (size_t)(q->nlevels - lo) * sizeof(*q->levels));
	q->nlevels++;
	q->levels[lo] = (odx__level){.priority = priority};
	return &q->levels[lo];
}

static int queue_push(odx__queue *q, odx__task *t)
{
	odx__level *l = level_for(q, t->priority);

	if (!l)
		return ODX_ENOMEM;
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 64, i;
		odx__task **ring = malloc((size_t)cap * sizeof(*ring));

		if (!ring)
			return ODX_ENOMEM;
		for (i = 0; i < l->n; i++)
			ring[i] = l->ring[(l->head + i) % l->cap];
		free(l->ring);
		l->ring = ring;
		l->head = 0;
		l->cap = cap;
	}
	l->ring[(l->head + l->n) % l->cap] = t;
	l->n++;
	q->n++;
	return 0;
}

static odx__task *queue_peek(const odx__queue *q)
{
	int i;

	for (i = 0; i < q->nlevels; i++)
		if (q->levels[i].n > 0)
			return q->levels[i].ring[q->levels[i].head];
	return NULL;
}

int odx__queue_peek_n(const odx__queue *q, odx__task **out, int n)
{
	int i, j, k = 0;

	for (i = 0; i < q->nlevels && k < n; i++) {
		const odx__level *l = &q->levels[i];

		for (j = 0; j < l->n && k < n; j++)
			out[k++] = l->ring[(l->head + j) % l->cap];
	}
	return k;
}

/* Level i of q gave up one task: counts it, and drops the level once empty unless it is the only
 * one (keeps the common case warm). */
static void level_taken(odx__queue *q, int i)
{
	odx__level *l = &q->levels[i];

	l->n--;
	q->n--;
	if (l->n == 0 && q->nlevels > 1) {
		free(l->ring);
		memmove(l, l + 1, (size_t)(q->nlevels - i - 1) * sizeof(*l));
		q->nlevels--;
	}
}

static odx__task *queue_pop(odx__queue *q)
{
	int i;

	for (i = 0; i < q->nlevels; i++) {
		odx__level *l = &q->levels[i];
		odx__task *t;

		if (l->n == 0)
			continue;
		t = l->ring[l->head];
		l->head = (l->head + 1) % l->cap;
		level_taken(q, i);
		return t;
	}
	return NULL;
}

/* Takes t out of q wherever it waits (keeping the others' order); false if it is not there. The
 * j tasks ahead of it move one place back and the head advances: a thief takes from near the
 * head, so this costs O(j), not the length of a queue that may hold a million tasks. */
static bool queue_take(odx__queue *q, const odx__task *t)
{
	int i, j;

	for (i = 0; i < q->nlevels; i++) {
		odx__level *l = &q->levels[i];

		for (j = 0; j < l->n; j++) {
			if (l->ring[(l->head + j) % l->cap] != t)
				continue;
			for (; j > 0; j--)
				l->ring[(l->head + j) % l->cap] = l->ring[(l->head + j - 1) % l->cap];
			l->head = (l->head + 1) % l->cap;
			level_taken(q, i);
			return true;
		}
	}
	return false;
}

/* Moves t, if queued in q, to the level of its (raised) priority. Called with q's lock. */
static int queue_requeue(odx__queue *q, odx__task *t)
{
	return queue_take(q, t) ? queue_push(q, t) : 0;
}

void odx__queue_free(odx__queue *q)
{
	int i;

	for (i = 0; i < q->nlevels; i++)
		free(q->levels[i].ring);
	free(q->levels);
	*q = (odx__queue){0};
}

/* ---- feasibility ---------------------------------------------------------------------------- */

bool odx__device_can_run(odx_context *ctx, const odx__device *d, const odx__task *t)
{
	(void)ctx;
	if (t->device_mask_only && t->device_mask_only - 1 != d->index)
		return false;
	/* Buffer reads, writes and releases run on any device's worker, lost or not: they only
	 * touch host memory (and a lost device's copies fail cleanly). */
	if (t->kind != ODX__TASK_KERNEL)
		return true;
	/* A lost device takes no new kernels; kernels forced there fail when they run. */
	if (atomic_load_explicit(&d->lost, memory_order_relaxed) && !t->device_mask_only)
		return false;
	return t->kernel->device_variant[d->index] >= 0;
}

/* Bytes of the task's inputs that device `d` would have to fetch first. */
static uint64_t missing_bytes(const odx__task *t, const odx__device *d)
{
	uint64_t bytes = 0;
	int i;

	for (i = 0; i < t->nargs; i++) {
		const odx_buffer *b = t->args[i].v.buffer;

		if (t->args[i].kind != ODX_ARG_BUFFER || !(t->args[i].access & ODX_R))
			continue;
		/* A relaxed read: a stale answer only makes the placement slightly worse. */
		if (atomic_load_explicit(&b->replicas[d->memnode].state, memory_order_relaxed) ==
		    ODX__INVALID && !b->zero)
			bytes += b->size;
	}
	return bytes;
}

/* ---- built-in policies ---------------------------------------------------------------------- */

/* Least loaded: the shortest queue, counting a device that must copy inputs first as one task
 * busier, so a chain of tasks over one buffer stays where its data is unless another device is
 * clearly idler. */
static int place_least_loaded(odx_context *ctx, odx__task *t)
{
	int best = -1, d;
	long best_cost = 0;

	for (d = 0; d < ctx->ndevices; d++) {
		const odx__device *dev = &ctx->devices[d];
		long cost;

		if (!odx__device_can_run(ctx, dev, t))
			continue;
		cost = 2L * atomic_load_explicit(&dev->load, memory_order_relaxed);
		if (missing_bytes(t, dev) > 0)
			cost += 2;
		/* on a tie, the worker whose completion made it ready keeps it: no hand-off */
		if (d == odx__worker_device)
			cost -= 1;
		if (best < 0 || cost < best_cost) {
			best = d;
			best_cost = cost;
		}
	}
	return best;
}

static int place_round_robin(odx_context *ctx, odx__task *t)
{
	unsigned start = atomic_fetch_add_explicit(&ctx->rr_next, 1, memory_order_relaxed);
	int i;

	for (i = 0; i < ctx->ndevices; i++) {
		int d = (int)((start + (unsigned)i) % (unsigned)ctx->ndevices);

		if (odx__device_can_run(ctx, &ctx->devices[d], t))
			return d;
	}
	return -1;
}

/* Eager: one shared queue, the first idle worker that can run a task takes it. A forced device
 * still goes to that device's own queue. */
static int place_eager(odx_context *ctx, odx__task *t)
{
	return t->device_mask_only ? t->device_mask_only - 1 : -1;
}

static const odx__sched_ops policies[] = {
	{.name = "least_loaded", .place = place_least_loaded},
	{.name = "eager", .shared_queue = true, .place = place_eager},
	{.name = "round_robin", .place = place_round_robin},
};

const odx__sched_ops *odx__sched_find(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (strcmp(policies[i].name, name) == 0)
			return &policies[i];
	return NULL;
}

/* ---- queues --------------------------------------------------------------------------------- */

/* Wakes dev's worker if it waits on its futex word (odx__device_sleep), or makes it not wait if
 * it is about to. With dev->lock held or not: without it the woken worker does not block on the
 * lock its waker still holds (a second futex call and context switch). */
void odx__device_signal(odx__device *dev)
{
	atomic_fetch_add(&dev->wake_seq, 1);
	syscall(SYS_futex, &dev->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* By dev's worker, with dev->lock held: drops the lock and sleeps until a wake-up after it read
 * `seq` from wake_seq (at once if one came already), then takes the lock again. It may return
 * early (a signal): the caller looks for work and sleeps again. */
void odx__device_sleep(odx__device *dev, uint32_t seq)
{
	pthread_mutex_unlock(&dev->lock);
	syscall(SYS_futex, &dev->wake_seq, FUTEX_WAIT_PRIVATE, seq, NULL, NULL, 0);
	pthread_mutex_lock(&dev->lock);
}

/* Wakes dev's worker if it sleeps and no wake-up is on its way to it already; true if this
 * call sent one. A waker that finds it sleeping under its lock reaches it: the worker read
 * wake_seq before its last look for work, under the lock. The first such waker marks the
 * wake-up pending; every later one, until the worker wakes and clears the mark, returns at
 * once, without the lock: during a burst of pushes to a sleeping worker one futex call wakes
 * it, not a lock round trip and a signal per push. The skip is safe for work made visible
 * before the waker's sequentially consistent reads of `sleeping` and `wake_pending`: the
 * worker clears the mark (sequentially consistent) before it looks for work again. */
bool odx__device_wake(odx__device *dev)
{
	bool send;

	if (!atomic_load(&dev->sleeping) || atomic_load(&dev->wake_pending))
		return false;
	pthread_mutex_lock(&dev->lock);
	send = dev->sleeping && !atomic_load_explicit(&dev->wake_pending, memory_order_relaxed);
	if (send)
		atomic_store(&dev->wake_pending, true);
	pthread_mutex_unlock(&dev->lock);
	if (send)
		odx__device_signal(dev);
	return send;
}

/* `probe` is a copy of the fields odx__device_can_run reads, taken before the task was queued:
 * once it is in the shared queue another worker may run, complete and recycle it. */
static void wake_one_sleeper(odx_context *ctx, const odx__task *probe)
{
	int d;

	if (atomic_load(&ctx->nsleeping) == 0)
		return;
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];

		if (!odx__device_can_run(ctx, dev, probe) || !atomic_load(&dev->sleeping))
			continue;
		/* one already being woken takes it, or looks again before it sleeps */
		if (atomic_load(&dev->wake_pending) || odx__device_wake(dev))
			return;
	}
}

static void push_failed(odx__task *t)
{
	odx__task_complete(t, ODX_ENOMEM, "out of memory while queueing the task");
}

/* ---- the device inbox: pushes without the device's lock ------------------------------------ */

#define INBOX_MASK (ODX__INBOX_CAP - 1u)

/* Pushes ready task t (placed on dev, counted in dev->load) into dev's inbox ring; false when
 * it is full. The slot's turn is stored sequentially consistent, as is the worker's store to
 * `sleeping` before it looks at the inbox a last time: either it sees t, or the caller then sees
 * it asleep. A pusher reads only the tail and the slot it writes (whose line it writes anyway),
 * never the taker's head. */
static bool inbox_push(odx__device *dev, odx__task *t)
{
	unsigned pos = atomic_load_explicit(&dev->inbox_tail, memory_order_relaxed);
	odx__inbox_slot *s;

	for (;;) {
		s = &dev->inbox[pos & INBOX_MASK];
		/* acquire: the taker's read of the slot's previous task came before */
		int dif = (int)(atomic_load_explicit(&s->turn, memory_order_acquire) -
				(pos & ~INBOX_MASK));

		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&dev->inbox_tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (dif < 0) {
			return false; /* a lap behind: the ring is full */
		} else {
			pos = atomic_load_explicit(&dev->inbox_tail, memory_order_relaxed);
		}
	}
	atomic_store_explicit(&s->task, t, memory_order_relaxed);
	atomic_store(&s->turn, (pos & ~INBOX_MASK) + 1);
	return true;
}

/* The next task in dev's inbox, taken out of it, or NULL (empty, or its next position claimed
 * and not yet written: that pusher then wakes the worker if it sleeps). With dev->lock held, or
 * by dev's worker without it (take_unlocked): the compare-and-swap on the head decides between
 * them. */
static odx__task *inbox_take(odx__device *dev)
{
	unsigned pos = atomic_load_explicit(&dev->inbox_head, memory_order_relaxed);
	odx__inbox_slot *s;
	odx__task *t;

	for (;;) {
		s = &dev->inbox[pos & INBOX_MASK];
		/* sequentially consistent: after a store to `sleeping` (see inbox_push) */
		int dif = (int)(atomic_load(&s->turn) - ((pos & ~INBOX_MASK) + 1));

		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&dev->inbox_head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (dif < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&dev->inbox_head, memory_order_relaxed);
		}
	}
	t = atomic_load_explicit(&s->task, memory_order_relaxed);
	/* release: the next lap's pusher writes the slot after this read */
	atomic_store_explicit(&s->turn, (pos & ~INBOX_MASK) + ODX__INBOX_CAP, memory_order_release);
	atomic_fetch_add_explicit(&dev->inbox_tasks, 1, memory_order_relaxed);
	return t;
}

/* Is a task waiting in dev's ring (a hint: without a lock). */
bool odx__inbox_ring_pending(odx__device *dev)
{
	unsigned pos = atomic_load_explicit(&dev->inbox_head, memory_order_relaxed);

	return atomic_load_explicit(&dev->inbox[pos & INBOX_MASK].turn, memory_order_relaxed) ==
	       (pos & ~INBOX_MASK) + 1;
}

/* By dev's worker, without dev->lock: is nothing queued where it looks under the lock (it saw
 * all of it empty then, and nothing was queued there since)? */
bool odx__inbox_locked_empty(odx__device *dev)
{
	return dev->fast_ok &&
	       atomic_load_explicit(&dev->lq_adds, memory_order_acquire) == dev->lq_seen;
}

/* The worker of dev, without dev->lock: the next task from its inbox if nothing queued under
 * the lock comes before it (it saw ready, staged, held and memory-wait empty, with no submitter
 * launching here, and nothing was queued there since: lq_adds unchanged), else NULL: it then
 * looks under the lock. A task queued under the lock meanwhile is as if queued just after. */
odx__task *odx__inbox_take_unlocked(odx__device *dev)
{
	odx__task *t;

	if (!odx__inbox_locked_empty(dev))
		return NULL;
	t = inbox_take(dev);
	if (t) /* its worker's count alone: no locked instruction */
		atomic_store_explicit(&dev->unlocked_takes,
				      atomic_load_explicit(&dev->unlocked_takes,
							   memory_order_relaxed) + 1,
				      memory_order_relaxed);
	return t;
}

/* With dev->lock held, by dev's worker: records whether it may take from the inbox without the
 * lock next time (nothing queued where it looks under the lock). */
void odx__inbox_note_empty(odx__device *dev)
{
	dev->lq_seen = atomic_load_explicit(&dev->lq_adds, memory_order_relaxed);
	dev->fast_ok = dev->staged_n == 0 && dev->ready.n == 0 && !dev->held_head &&
		       !dev->memwait_head && !dev->inline_running && !dev->stop;
}

/* With dev->lock held: a task was queued where its worker looks under the lock. */
void odx__lq_added(odx__device *dev)
{
	atomic_fetch_add_explicit(&dev->lq_adds, 1, memory_order_release);
}

/* ---- the inbox's overflow: pushes while the ring is full (under dev->lock) -------------------- */

/* t after what the overflow holds; false: no memory for it. */
static bool over_push(odx__device *dev, odx__task *t)
{
	int n = atomic_load_explicit(&dev->over_n, memory_order_relaxed);

	if (n == dev->over_cap) {
		int cap = dev->over_cap ? 2 * dev->over_cap : 256, i;
		odx__task **ring = malloc((size_t)cap * sizeof(*ring));

		if (!ring)
			return false;
		for (i = 0; i < n; i++)
			ring[i] = dev->over[(dev->over_head + i) % dev->over_cap];
		free(dev->over);
		dev->over = ring;
		dev->over_head = 0;
		dev->over_cap = cap;
	}
	dev->over[(dev->over_head + n) % dev->over_cap] = t;
	atomic_store_explicit(&dev->over_n, n + 1, memory_order_release);
	return true;
}

static odx__task *over_pop(odx__device *dev)
{
	int n = atomic_load_explicit(&dev->over_n, memory_order_relaxed);
	odx__task *t;

	if (n == 0)
		return NULL;
	t = dev->over[dev->over_head];
	dev->over_head = (dev->over_head + 1) % dev->over_cap;
	/* release: a pusher that reads the overflow empty claims its ring position after the
	 * positions a refill claimed for what was in it (the tail's modification order) */
	atomic_store_explicit(&dev->over_n, n - 1, memory_order_release);
	return t;
}

/* The ring was found empty by its worker: the overflow's oldest tasks move into it (up to half
 * of it), in order; pushes keep going to the overflow until it is empty. */
static void over_refill(odx__device *dev)
{
	int moved = 0;

	while (moved < ODX__INBOX_CAP / 2 &&
	       atomic_load_explicit(&dev->over_n, memory_order_relaxed) > 0 &&
	       inbox_push(dev, dev->over[dev->over_head])) {
		over_pop(dev);
		moved++;
	}
	if (moved)
		atomic_fetch_add_explicit(&dev->over_refills, 1, memory_order_relaxed);
}

/* Moves what was pushed to dev's inbox into its ready queue, in push order. With dev->lock held.
 * A task `ready` has no memory for waits in the held list, and so does every later one (order
 * kept): nothing fails for it. Returns the tasks moved. */
int odx__inbox_drain(odx__device *dev)
{
	odx__task *t;
	int n = 0;

	/* the ring first, then what overflowed it (pushed after) */
	while ((t = inbox_take(dev)) != NULL || (t = over_pop(dev)) != NULL) {
		n++;
		if (!dev->held_head && queue_push(&dev->ready, t) == 0)
			continue;
		t->pool_next = NULL;
		if (dev->held_tail)
			dev->held_tail->pool_next = t;
		else
			dev->held_head = t;
		dev->held_tail = t;
	}
	if (n) {
		atomic_fetch_add_explicit(&dev->inbox_drains, 1, memory_order_relaxed);
		odx__lq_added(dev);
	}
	return n;
}

bool odx__inbox_pending(odx__device *dev)
{
	return odx__inbox_ring_pending(dev) || dev->held_head ||
	       atomic_load_explicit(&dev->over_n, memory_order_relaxed) > 0;
}

void odx__sched_push(odx_context *ctx, odx__task *t)
{
	/* A Lua policy batches ready tasks (policy.c); it queues them through odx__sched_queue. */
	if (ctx->policy) {
		odx__policy_push(ctx, t);
		return;
	}
	odx__sched_queue(ctx, t, ctx->sched->place(ctx, t));
}

void odx__sched_queue(odx_context *ctx, odx__task *t, int d)
{
	odx__device *dev;
	int rc;

	if (d < 0 && !ctx->use_shared) {
		/* Every device that could run it is lost: fail it rather than queue it forever. */
		char msg[ODX__MSG_MAX];

		snprintf(msg, sizeof(msg), "task #%llu '%s': no device left that can run it (lost)",
			 (unsigned long long)t->id, t->tag);
		odx__task_complete(t, ODX_EDEVLOST, msg);
		return;
	}
	if (d < 0 || d >= ctx->ndevices) {
		odx__task probe;

		probe.kind = t->kind;
		probe.kernel = t->kernel;
		probe.device_mask_only = t->device_mask_only;
		pthread_mutex_lock(&ctx->shared_lock);
		rc = queue_push(&ctx->shared, t);
		if (rc == 0)
			atomic_fetch_add(&ctx->shared_count, 1);
		pthread_mutex_unlock(&ctx->shared_lock);
		if (rc)
			push_failed(t);
		else
			wake_one_sleeper(ctx, &probe);
		return;
	}
	dev = &ctx->devices[d];
	t->device = d;
	/* Placed on the device whose worker's completion made it ready (this thread), with nothing
	 * else queued or running there: the worker runs it next, directly, as soon as the task it
	 * is finishing returns. No lock, no queue, no wake-up: the cost of an edge between two
	 * small tasks on one worker. One at a time; more successors go through the queue. (A
	 * task queued meanwhile by another thread waits that one task, as behind any other.) */
	if (odx__worker_self == dev && !dev->direct && t->kind == ODX__TASK_KERNEL &&
	    atomic_load_explicit(&dev->load, memory_order_relaxed) == 0) {
		atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
		dev->direct = t;
		return;
	}
	/* Its device's worker sleeps with nothing queued: the thread submitting it launches it
	 * itself, sparing a wake-up of the worker (microseconds, on the path of every dependent
	 * chain of small tasks). Only from odx_submit's own thread (never from a completion
	 * callback), only for backends whose launch queues work and returns (not host devices,
	 * whose kernels would then run on the application's thread), and not under a Lua policy
	 * (it queues tasks holding its own lock, which staging's evict hook takes). */
	if (odx__submitting && !ctx->policy && t->kind == ODX__TASK_KERNEL &&
	    dev->kind != ODX_BACKEND_HOST && atomic_load(&dev->sleeping)) {
		pthread_mutex_lock(&dev->lock);
		odx__inbox_drain(dev);
		if (dev->sleeping && !dev->inline_running && !dev->stop && dev->ready.n == 0 &&
		    !dev->held_head && dev->staged_n == 0 && !dev->memwait_head) {
			dev->inline_running = true;
			odx__lq_added(dev);
			atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
			pthread_mutex_unlock(&dev->lock);
			odx__run_inline(dev, t);
			return;
		}
		pthread_mutex_unlock(&dev->lock);
	}
	/* A task of another priority than 0 goes to its level under the lock: the inbox is only
	 * ever behind the queue's priority-0 tasks (odx__sched_next). */
	if (atomic_load_explicit(&t->priority, memory_order_relaxed) != 0) {
		pthread_mutex_lock(&dev->lock);
		odx__inbox_drain(dev);
		rc = queue_push(&dev->ready, t);
		bool busy = false;
		if (rc == 0) {
			odx__lq_added(dev);
			atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
			if (dev->sleeping)
				odx__device_signal(dev);
			else
				busy = !dev->polling;
		}
		pthread_mutex_unlock(&dev->lock);
		if (rc)
			push_failed(t);
		else if (busy && ctx->steal && odx__worker_device != d &&
			 atomic_load(&ctx->nsleeping) > 0)
			odx__sched_wake_thief(ctx, dev);
		return;
	}
	/* Counted before it is seen: a polling worker watches the load. */
	atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
	/* While tasks wait in the overflow, behind them: a thread's tasks keep their order. */
	if (atomic_load_explicit(&dev->over_n, memory_order_acquire) > 0 || !inbox_push(dev, t)) {
		/* The ring is full (the worker is far behind): into the overflow under the lock,
		 * after what the ring holds; the worker moves it into the ring once that empties.
		 * Not counted in lq_adds: it comes after the ring, which the worker empties first. */
		pthread_mutex_lock(&dev->lock);
		if ((atomic_load_explicit(&dev->over_n, memory_order_relaxed) > 0 ||
		     !inbox_push(dev, t)) &&
		    !over_push(dev, t)) {
			/* no memory for it: everything into `ready` (or held), then it, in order */
			odx__inbox_drain(dev);
			if (dev->held_head || queue_push(&dev->ready, t) != 0) {
				t->pool_next = NULL;
				if (dev->held_tail)
					dev->held_tail->pool_next = t;
				else
					dev->held_head = t;
				dev->held_tail = t;
			}
			odx__lq_added(dev);
		}
		pthread_mutex_unlock(&dev->lock);
	}
	bool busy = false;
	if (atomic_load(&dev->sleeping)) {
		/* t is in the inbox (a sequentially consistent store) before this looks: either
		 * the worker wakes for it, or one woken already finds it (odx__device_wake) */
		if (odx__device_wake(dev))
			atomic_fetch_add_explicit(&dev->push_wakes, 1, memory_order_relaxed);
	} else {
		busy = !atomic_load_explicit(&dev->polling, memory_order_relaxed);
	}
	/* Not for dev's own worker: it takes the task as soon as its current one ends; nor for
	 * one that is polling for work: it takes it now (a thief woken for it would find it gone,
	 * a futex wake-up and a lock round trip for nothing). */
	if (busy && ctx->steal && odx__worker_device != d && atomic_load(&ctx->nsleeping) > 0)
		odx__sched_wake_thief(ctx, dev);
}

/* ---- work stealing between devices that share a memory --------------------------------------- */

/* Devices whose queues `dev` may take from: others on its memory node (CPU devices sharing a
 * NUMA node's memory), where a task runs with no copy whichever of them takes it. */
static bool steal_peer(const odx_context *ctx, const odx__device *dev, const odx__device *v)
{
	return v != dev && v->memnode == dev->memnode && ctx->steal &&
	       !atomic_load_explicit(&v->lost, memory_order_relaxed);
}

/* `any`: is there a peer at all; else: may a peer have a task to take (a load of 2: one task
 * running there and one waiting behind it). */
bool odx__sched_stealable(odx_context *ctx, const odx__device *dev, bool any)
{
	int d;

	if (!ctx->steal)
		return false;
	for (d = 0; d < ctx->ndevices; d++)
		if (steal_peer(ctx, dev, &ctx->devices[d]) &&
		    (any || atomic_load_explicit(&ctx->devices[d].load, memory_order_relaxed) >= 2))
			return true;
	return false;
}

/* How far down a victim's queue a thief looks past tasks forced onto the victim. */
#define STEAL_LOOK 8

/* The most urgent ready task of a busy device sharing dev's memory that dev can run, or NULL.
 * Called with dev->lock held, which it drops while it looks at the others (no thread ever holds
 * two device locks: two thieves never wait on each other) and takes again before it returns: the
 * caller looks at dev's own queues again then. Staged and chained tasks stay where their inputs
 * were prepared. A wake-up meanwhile bumps dev->wake_seq: the worker does not then sleep. */
odx__task *odx__sched_steal(odx_context *ctx, odx__device *dev)
{
	odx__task *t = NULL;
	int i;

	pthread_mutex_unlock(&dev->lock);
	for (i = 1; i < ctx->ndevices && !t; i++) {
		odx__device *v = &ctx->devices[(dev->index + i) % ctx->ndevices];

		if (!steal_peer(ctx, dev, v) ||
		    atomic_load_explicit(&v->load, memory_order_relaxed) < 2)
			continue;
		pthread_mutex_lock(&v->lock);
		/* the victim's worker runs its own next task (an idle one, sleeping or polling,
		 * takes the head itself); take the most urgent of those waiting behind it that dev
		 * may run (not one forced there) */
		int first = v->sleeping || v->polling ? 1 : 0;

		/* Its worker busy and only its inbox holding tasks: the inbox's head, taken as its
		 * worker would take it (no drain into the queue, which would send the worker to its
		 * lock for every task after). One it may not run goes first in line in the queue,
		 * where the look below passes it (held, if the queue has no memory for it). */
		if (!first && v->ready.n == 0 && !v->held_head) {
			odx__task *h = inbox_take(v);

			if (h && !h->device_mask_only && odx__device_can_run(ctx, dev, h)) {
				t = h;
			} else if (h) {
				if (queue_push(&v->ready, h) != 0) {
					h->pool_next = NULL;
					v->held_head = v->held_tail = h;
				}
				odx__lq_added(v);
			}
		}
		if (!t)
			odx__inbox_drain(v);
		if (!t && v->ready.n > first) {
			odx__task *head[STEAL_LOOK];
			int k, n = odx__queue_peek_n(&v->ready, head, STEAL_LOOK);

			for (k = first; k < n && !t; k++)
				if (!head[k]->device_mask_only && odx__device_can_run(ctx, dev, head[k]))
					t = head[k];
			if (t)
				queue_take(&v->ready, t);
		}
		if (t) {
			atomic_fetch_sub_explicit(&v->load, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&dev->stolen, 1, memory_order_relaxed);
			t->device = dev->index;
		}
		pthread_mutex_unlock(&v->lock);
	}
	pthread_mutex_lock(&dev->lock);
	return t;
}

/* Tasks wait on busy `dev` (queued there by another thread than its worker, or left behind the
 * one its worker just took): a sleeping worker that shares its memory may take them (steal) rather
 * than let them wait for dev's current task. */
void odx__sched_wake_thief(odx_context *ctx, odx__device *dev)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *v = &ctx->devices[d];

		/* one that does not sleep now would not be woken (no lock taken to see it) */
		if (!steal_peer(ctx, dev, v) || !atomic_load(&v->sleeping))
			continue;
		/* one woken already (for its own work or as a thief) looks at its peers before it
		 * sleeps again: no second wake-up */
		if (atomic_load(&v->wake_pending))
			return;
		if (odx__device_wake(v)) {
			atomic_fetch_add_explicit(&ctx->thief_wakes, 1, memory_order_relaxed);
			return;
		}
	}
}

/* Takes the next task for `dev`: staged tasks first (their inputs are there), then its own ready
 * queue, then the shared eager queue. Called with dev->lock held. */
odx__task *odx__sched_next(odx_context *ctx, odx__device *dev)
{
	odx__task *t = NULL;

	if (dev->staged_n > 0) {
		t = dev->staged[dev->staged_head];
		dev->staged_head = (dev->staged_head + 1) % dev->staged_cap;
		dev->staged_n--;
		return t;
	}
	/* The inbox holds tasks of priority 0 pushed after everything in `ready`: they come next
	 * once nothing at priority 0 or above is left there, straight from the ring (no queue). */
	if (dev->ready.n > 0 && dev->ready.levels[0].priority >= 0)
		return queue_pop(&dev->ready);
	/* held (out of memory when drained) before the ring: pushed earlier */
	if (dev->held_head) {
		t = dev->held_head;
		dev->held_head = t->pool_next;
		if (!dev->held_head)
			dev->held_tail = NULL;
		t->pool_next = NULL;
		return t;
	}
	if ((t = inbox_take(dev)) != NULL)
		return t;
	/* the ring is empty: the overflow's oldest move into it (the worker takes the rest of
	 * them without its lock) */
	if (atomic_load_explicit(&dev->over_n, memory_order_relaxed) > 0) {
		over_refill(dev);
		if ((t = inbox_take(dev)) != NULL)
			return t;
	}
	if (dev->ready.n > 0)
		return queue_pop(&dev->ready);
	if (ctx->use_shared) {
		pthread_mutex_lock(&ctx->shared_lock);
		if (ctx->shared.n > 0 && odx__device_can_run(ctx, dev, queue_peek(&ctx->shared))) {
			t = queue_pop(&ctx->shared);
			atomic_fetch_sub(&ctx->shared_count, 1);
			t->device = dev->index;
			atomic_fetch_add_explicit(&dev->load, 1, memory_order_relaxed);
		}
		pthread_mutex_unlock(&ctx->shared_lock);
	}
	return t;
}

/* Queues a task whose inputs have arrived (called from copy-completion threads). */
void odx__device_push_staged(odx__device *dev, odx__task *t)
{
	pthread_mutex_lock(&dev->lock);
	if (dev->staged_n == dev->staged_cap) {
		int cap = dev->staged_cap ? 2 * dev->staged_cap : 64, i;
		odx__task **ring = malloc((size_t)cap * sizeof(*ring));

		if (!ring) {
			/* Cannot queue it: finish it as failed rather than lose it. */
			pthread_mutex_unlock(&dev->lock);
			odx__task_finish(t, ODX_ENOMEM, "out of memory while queueing the task");
			return;
		}
		for (i = 0; i < dev->staged_n; i++)
			ring[i] = dev->staged[(dev->staged_head + i) % dev->staged_cap];
		free(dev->staged);
		dev->staged = ring;
		dev->staged_head = 0;
		dev->staged_cap = cap;
	}
	dev->staged[(dev->staged_head + dev->staged_n) % dev->staged_cap] = t;
	dev->staged_n++;
	odx__lq_added(dev);
	if (dev->sleeping)
		odx__device_signal(dev);
	pthread_mutex_unlock(&dev->lock);
}

/*
 * A task's priority raised after submission (a transfer a later, more urgent consumer waits for,
 * dist.c). Not yet ready: it is queued with the new one when it becomes ready. In a ready queue
 * (its device's, or the shared one): it moves to its new level, behind the tasks already there.
 * Already taken by a worker, or under a Lua policy's own batching: nothing more to do.
 */
void odx__sched_raise(odx_context *ctx, odx__task *t, int priority)
{
	bool found = false;
	int d, rc = 0;

	if (atomic_load(&t->done) || t->priority >= priority)
		return;
	/* Written before the queues are searched under their locks: a push that comes after the
	 * search reads the new priority, one before it is found and moved. Every device's queue is
	 * searched (t->device is written by the pushing thread without a lock this thread holds;
	 * a raise is rare, devices few). */
	atomic_store(&t->priority, priority);
	for (d = 0; d < ctx->ndevices && !found; d++) {
		odx__device *dev = &ctx->devices[d];

		pthread_mutex_lock(&dev->lock);
		odx__inbox_drain(dev);
		found = queue_take(&dev->ready, t);
		if (found)
			rc = queue_push(&dev->ready, t);
		pthread_mutex_unlock(&dev->lock);
	}
	if (!found && ctx->use_shared) {
		pthread_mutex_lock(&ctx->shared_lock);
		rc = queue_requeue(&ctx->shared, t);
		if (rc)
			atomic_fetch_sub(&ctx->shared_count, 1);
		pthread_mutex_unlock(&ctx->shared_lock);
	}
	if (rc)
		push_failed(t); /* taken out, not put back (no memory): it must still complete */
}
