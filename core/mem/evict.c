/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c - making room on a memory node: choosing idle replicas to drop or write one tier down,
 * the watermarks that bound the background eviction and the prefetch window, and the kick that
 * wakes the background eviction early.
 *
 * Order of victims: copies the program said it won't use, then clean before dirty, then least
 * recently staged, and a replica prefetched for a queued task only as a last resort; a Lua policy
 * with an `evict` hook may reorder the dirty ones. Dirty copies go device -> host RAM (a write-back
 * copy job) -> disk (a spill), freed when that landed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem.h"
#include "policy.h"
#include "pool.h"

static uint64_t percent(uint64_t cap, unsigned pct)
{
	return cap / 100 * pct + cap % 100 * pct / 100;
}

/* ---- choosing victims ------------------------------------------------------------------------ */

typedef struct victim {
	odx_buffer *b;
	uint64_t last_use;
	int rank; /* -1 dead, 0 won't use, 1 clean, 2 dirty, 3 held for a queued task */
} victim;

static int victim_cmp(const void *pa, const void *pb)
{
	const victim *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	if (a->last_use != b->last_use)
		return a->last_use < b->last_use ? -1 : 1;
	return a->b->id < b->b->id ? -1 : a->b->id > b->b->id;
}

static bool task_uses(const odx__task *t, const odx_buffer *b)
{
	int i;

	for (i = 0; t && i < t->nargs; i++)
		if (t->args[i].kind == ODX_ARG_BUFFER && t->args[i].v.buffer == b)
			return true;
	return false;
}

/* Node m's lock held: idle replicas on m, ordered for eviction; *busy gets the bytes that are
 * pinned, in flight or being evicted (what will become free without our help). */
static victim *collect(odx_context *ctx, int m, const odx__task *t, int *n, uint64_t *busy)
{
	victim *v = NULL;
	int cap = 0;
	odx_buffer *b;

	*n = 0;
	*busy = 0;
	pthread_mutex_lock(&ctx->objects_lock);
	for (b = ctx->buffers; b; b = b->next) {
		odx__replica *r = &b->replicas[m];
		int rank;

		/* User memory, a partitioned parent's host copy (it backs the parts, from the
		 * partition's submission to its unpartition's end) and a part's alias into it stay
		 * where they are. */
		if (!r->allocated || odx__replica_is_alias(b, m) ||
		    (odx__is_host_node(ctx, m) && (b->registered || atomic_load(&b->backing) > 0)))
			continue;
		pthread_mutex_lock(&b->lock);
		if (r->pins || r->fetching || r->evicting || b->disk_busy) {
			*busy += odx__pool_charge(ctx->memnodes[m].pool, b->size);
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		if (task_uses(t, b)) {
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		if (atomic_load(&b->dead))
			rank = -1;
		else if (r->holds)
			rank = 3;
		else if (b->wont_use)
			rank = 0;
		else if (atomic_load(&r->state) == ODX__INVALID || odx__valid_copies(b) > 1)
			rank = 1;
		else
			rank = 2;
		if (*n == cap) {
			victim *nv = realloc(v, (size_t)(cap ? 2 * cap : 64) * sizeof(*v));

			if (!nv) {
				pthread_mutex_unlock(&b->lock);
				break;
			}
			v = nv;
			cap = cap ? 2 * cap : 64;
		}
		v[(*n)++] = (victim){.b = b, .last_use = r->last_use, .rank = rank};
		pthread_mutex_unlock(&b->lock);
	}
	pthread_mutex_unlock(&ctx->objects_lock);
	if (*n > 1)
		qsort(v, (size_t)*n, sizeof(*v), victim_cmp);
	return v;
}

/* Lets a Lua policy with an `evict` hook reorder the dirty victims (the clean ones cost
 * nothing to drop and go first anyway). */
static void policy_order(odx_context *ctx, int m, uint64_t need, victim *v, int n)
{
	odx__evict_cand *c;
	int *order, i, k, first = 0;
	victim *tmp;

	if (!ctx->policy)
		return;
	while (first < n && v[first].rank < 2)
		first++;
	if (n - first < 2)
		return;
	c = calloc((size_t)(n - first), sizeof(*c));
	order = calloc((size_t)(n - first), sizeof(*order));
	tmp = calloc((size_t)(n - first), sizeof(*tmp));
	if (c && order && tmp) {
		for (i = first; i < n; i++)
			c[i - first] = (odx__evict_cand){.buffer_id = v[i].b->id,
							 .bytes = v[i].b->size,
							 .last_use_ns = v[i].last_use,
							 .priority = 0,
							 .dirty = v[i].rank == 2};
		k = odx__policy_evict(ctx, m, need, c, n - first, order);
		if (k > 0) {
			bool *taken = calloc((size_t)(n - first), sizeof(*taken));
			int j = 0;

			if (taken) {
				for (i = 0; i < k; i++)
					if (order[i] >= 0 && order[i] < n - first && !taken[order[i]]) {
						taken[order[i]] = true;
						tmp[j++] = v[first + order[i]];
					}
				/* what the policy left out keeps the default order, after */
				for (i = 0; i < n - first; i++)
					if (!taken[i])
						tmp[j++] = v[first + i];
				memcpy(v + first, tmp, (size_t)(n - first) * sizeof(*v));
				free(taken);
			}
		}
	}
	free(c);
	free(order);
	free(tmp);
}

/* The lock of b's host node and b's lock held: can host RAM take b's dirty device copy now?
 * Allocates the host replica if so. */
static int host_take(odx_context *ctx, odx_buffer *b)
{
	int home = odx__home(b);
	odx__memnode *host = &ctx->memnodes[home];
	odx__replica *r = &b->replicas[home];

	/* A host copy in use (a buffer write in progress pins it) or already being filled cannot
	 * take a write-back now: its bytes would race with the user's. */
	if (r->allocated)
		return r->fetching || r->pins ? ODX_EBUSY : 0;
	if (atomic_load(&host->used) + b->size > host->capacity)
		return ODX_ENOSPC;
	return odx__replica_alloc(ctx, b, home, false);
}

/* Makes room for `need` more bytes below `limit` (the capacity, or a watermark). */
int odx__evict_below(odx_context *ctx, int m, uint64_t need, uint64_t limit, const odx__task *t,
		     odx__copy_job **jobs, char *why, size_t whylen)
{
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t freeing = node->evicting, busy, used = atomic_load(&node->used);
	uint64_t lower_need = 0;
	bool lower_full = false, lower_busy = false, disk_failed = false;
	victim *v;
	int n, i, rc, home;

	if (used + need <= limit)
		return ODX__ROOM;
	v = collect(ctx, m, t, &n, &busy);
	policy_order(ctx, m, need, v, n);
	for (i = 0; i < n && atomic_load(&node->used) - freeing + need > limit; i++) {
		odx_buffer *b = v[i].b;
		odx__replica *r = &b->replicas[m];

		pthread_mutex_lock(&b->lock);
		if (!r->allocated || r->pins || r->fetching || r->evicting || b->disk_busy) {
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		if (atomic_load(&r->state) == ODX__INVALID || odx__valid_copies(b) > 1 ||
		    atomic_load(&b->dead)) {
			/* Clean: another valid copy backs it (or nothing will read it again). */
			if (r->holds) {
				odx__device *dev = node->device;

				if (dev)
					atomic_fetch_add(&dev->prefetch_waste, 1);
			}
			odx__replica_free(ctx, b, m);
			atomic_fetch_add(&node->drops, 1);
			atomic_fetch_add(&node->evicted_bytes, b->size);
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		/* Dirty: written one tier down first, to its host node (the one nearest this device
		 * when the buffer has none yet and that one has room); a host node's copy of a
		 * buffer homed on another one (a host device sharing this node wrote it) goes
		 * home the same way, since only the home copy spills. */
		home = odx__buffer_home(ctx, b, m);
		if (node->device || home != m) {
			odx__copy_job *job;

			pthread_mutex_unlock(&b->lock);
			/* Two host nodes are never locked one inside the other (mem.h): a home
			 * that is busy now is tried on the next round. */
			if (node->device) {
				pthread_mutex_lock(&ctx->memnodes[home].lock);
			} else if (pthread_mutex_trylock(&ctx->memnodes[home].lock) != 0) {
				lower_busy = true;
				continue;
			}
			pthread_mutex_lock(&b->lock);
			/* The buffer lock was let go: everything may have changed, its state too (a
			 * writer elsewhere makes this copy INVALID, and writing that back would
			 * publish old bytes as the latest). Only a copy still the only valid one
			 * is written back; otherwise, next round. */
			if (!r->allocated || r->pins || r->fetching || r->evicting ||
			    atomic_load(&r->state) == ODX__INVALID || odx__valid_copies(b) != 1) {
				rc = ODX_EBUSY;
			} else {
				rc = host_take(ctx, b);
				if (rc == ODX_ENOSPC) {
					/* Host RAM makes room (spills) for it; retried later. */
					char sub[256];
					odx__copy_job *more = NULL;
					int r0;

					pthread_mutex_unlock(&b->lock);
					r0 = odx__tier_make_room(ctx, home, b->size, NULL, &more,
								 sub, sizeof(sub));
					pthread_mutex_lock(&b->lock);
					/* Host eviction's write-backs between host nodes (copy.c
					 * runs them at once): started by our caller, no lock held. */
					while (more) {
						odx__copy_job *next = more->next;

						more->next = *jobs;
						*jobs = more;
						more = next;
					}
					lower_need += b->size;
					if (r0 == ODX__ROOM && r->allocated && !r->pins &&
					    !r->fetching && !r->evicting &&
					    atomic_load(&r->state) != ODX__INVALID &&
					    odx__valid_copies(b) == 1)
						rc = host_take(ctx, b);
					if (rc == ODX_ENOSPC) {
						if (r0 == ODX__ROOM_NEVER)
							lower_full = true;
						else
							lower_busy = true;
					}
				}
			}
			if (rc == 0 && (job = odx__copy_writeback(b, m)) != NULL) {
				job->next = *jobs;
				*jobs = job;
				freeing += odx__pool_charge(node->pool, b->size);
			} else if (rc == ODX_EBUSY) {
				lower_busy = true;
			}
			pthread_mutex_unlock(&b->lock);
			pthread_mutex_unlock(&ctx->memnodes[home].lock);
			continue;
		}
		/* Host RAM: to the disk tier. */
		if (!odx__tier_has_disk(ctx) || b->spill_failed) {
			disk_failed |= b->spill_failed;
			lower_full = true;
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		rc = odx__tier_spill(ctx, b);
		if (rc == 0)
			freeing += b->size;
		else if (rc == ODX_EBUSY)
			lower_busy = true;
		else
			lower_full = true;
		pthread_mutex_unlock(&b->lock);
	}
	free(v);
	used = atomic_load(&node->used);
	if (used + need <= limit)
		return ODX__ROOM;
	if (used - (freeing < used ? freeing : used) + need <= limit || busy > 0 ||
	    node->evicting > 0 || lower_busy)
		return ODX__ROOM_WAIT;
	snprintf(why, whylen,
		 "%llu of %llu bytes are in use there by copies that cannot move: %s%s",
		 (unsigned long long)used, (unsigned long long)limit,
		 node->device ? (lower_full ? "host RAM (tier.host.limit) cannot take their only copy"
					    : "every copy there is needed by the task itself")
		 : !odx__tier_has_disk(ctx) ? "they are the only copies and there is no disk tier "
					      "(tier.disk.limit = 0)"
		 : disk_failed		    ? "spilling them to the disk tier failed"
					    : "the disk tier (tier.disk.limit) is full",
		 lower_need && node->device ? " and host RAM has no room to take them" : "");
	return ODX__ROOM_NEVER;
}

int odx__tier_make_room(odx_context *ctx, int m, uint64_t need, const odx__task *t,
			odx__copy_job **jobs, char *why, size_t whylen)
{
	return odx__evict_below(ctx, m, need, ctx->memnodes[m].capacity, t, jobs, why, whylen);
}

void odx__tier_watermarks(const odx_context *ctx, int m, uint64_t *start, uint64_t *stop)
{
	const odx__memnode *node = &ctx->memnodes[m];
	uint64_t cap = node->capacity, ws = atomic_load(&node->ws_max);
	uint64_t s = percent(cap, ctx->monitor_start), p = percent(cap, ctx->monitor_stop);

	/* tier.monitor.start = 100 turns the monitor off: nothing to lower. */
	if (ctx->monitor_start >= 100) {
		*start = cap;
		*stop = p;
		return;
	}
	/* A task wider than a quarter of the tier gets no more headroom than a quarter: the
	 * monitor would otherwise empty the tier for it. */
	if (ws > cap / 4)
		ws = cap / 4;
	if (s > cap - ws)
		s = cap - ws;
	if (p > cap - 3 * ws)
		p = cap - 3 * ws;
	if (p > s)
		p = s;
	*start = s;
	*stop = p;
}

/* Staging took room on node m: if that crossed its start watermark, the monitor makes headroom
 * now rather than at its next tick (50 ms is many tasks: a streaming workload whose working set
 * outgrows the tier would otherwise find the tier full at every admission and wait for each
 * write-back). One wake-up until the monitor ran. */
void odx__tier_kick(odx_context *ctx, int m)
{
	odx__tier *tier = ctx->tier;
	uint64_t start, stop;

	if (!tier)
		return;
	odx__tier_watermarks(ctx, m, &start, &stop);
	/* (Signalling a monitor that is not there, stopped or never started, does nothing.) */
	if (atomic_load(&ctx->memnodes[m].used) <= start || atomic_exchange(&tier->kicked, true))
		return;
	pthread_mutex_lock(&tier->lock);
	pthread_cond_signal(&tier->cond);
	pthread_mutex_unlock(&tier->lock);
}
