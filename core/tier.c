/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier.c - the memory-tier manager (DESIGN section 7): capacities, making room, the disk tier,
 * the background monitor and the no-progress watchdog.
 *
 * Every memory node has a capacity enforced by our own accounting (odx__memnode.used counts
 * allocated replicas). Staging (buffer.c) reserves a task's whole working set on its node under
 * the node's lock; when it does not fit, odx__tier_make_room picks victims among idle replicas
 * (no pins, no fetch in flight): copies that another valid copy backs are dropped at once, dirty
 * ones are written one tier down (device -> host RAM -> disk) and freed when that landed. The
 * order is: copies the program said it won't use, then clean before dirty, then least recently
 * staged, and a replica prefetched for a queued task only as a last resort. While room is being
 * made, the task waits on its device (worker.c) and is retried when odx__tier_changed says room
 * may have appeared; when nothing running or moving could ever free enough, the task fails with
 * an explanation instead of hanging.
 *
 * The monitor thread keeps headroom (start/stop watermarks, so the demand path rarely waits) and
 * is the watchdog: no task completed and no byte moved for tier.watchdog_ms while work is pending
 * prints a state dump.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "policy.h"
#include "mem/pool.h"
#include "mem/spill.h"

/* Where the pinned staging pool's memory came from. */
enum pinned_source {
	PINNED_NONE = 0,
	PINNED_BACKEND,  /* a device backend's host_alloc (page-locked by its driver) */
	PINNED_LOCKED,   /* aligned memory, pre-faulted and mlock'ed */
	PINNED_FAULTED,  /* aligned memory, pre-faulted; mlock refused (RLIMIT_MEMLOCK) */
};

struct odx__tier {
	odx__spill *spill;          /* the disk tier, NULL without one */
	uint64_t disk_capacity;
	pthread_t monitor;
	bool monitor_started;
	pthread_mutex_t lock;       /* the monitor's sleep */
	pthread_cond_t cond;
	bool stop;
	int watchdog_ms;
	uint64_t last_progress;     /* the watchdog's view */
	uint64_t last_change_ns;
	bool dumped;                /* one dump per stall */
	_Atomic int room_waiters;   /* caller threads waiting for room on node 0 */
	_Atomic bool kicked;        /* a node crossed its start watermark: the monitor runs now */
	odx__lane_trace *disk_trace;
	_Atomic bool fsize_warned;  /* the file-size limit stopped a spill: said once */
	/* counters */
	_Atomic uint64_t spills, spill_bytes, spill_errors;
	_Atomic uint64_t reloads, reload_bytes, reload_errors;
	_Atomic uint64_t disk_drops; /* spilled copies freed because the buffer changed or died */
	/* the pinned staging pool (tier.pinned.size) */
	odx__pinned *pinned;
	void *pinned_mem;
	size_t pinned_bytes;
	odx__device *pinned_dev;    /* whose host_alloc gave it (PINNED_BACKEND) */
	int pinned_source;          /* enum pinned_source */
	int pinned_errno;           /* why mlock failed */
	/* read-only zero pages, the source that zero-fills pooled device memory */
	void *zeros;
	size_t zeros_bytes;
};

static uint64_t percent(uint64_t cap, unsigned pct)
{
	return cap / 100 * pct + cap % 100 * pct / 100;
}

/* ---- device-memory pools ---------------------------------------------------------------------- */

static int chunk_alloc(void *user, size_t size, uint64_t *handle)
{
	odx__device *dev = user;

	return dev->ops->mem_alloc(dev->bdev, size, false, handle);
}

static void chunk_free(void *user, uint64_t handle, size_t size)
{
	odx__device *dev = user;

	dev->ops->mem_free(dev->bdev, handle, size);
}

/* The ABI version the device's backend declared: offsets (pooling) need 1.2. */
static uint32_t device_abi(const odx_context *ctx, const odx__device *dev)
{
	int b;

	for (b = 0; b < ctx->nbackends; b++) {
		const odx__backend_slot *slot = &ctx->backends[b];

		if (slot->available && slot->ops == dev->ops && slot->module.desc)
			return slot->module.desc->abi_version;
	}
	return 0;
}

/* One pool per device memory node whose backend takes offsets (ABI >= 1.2): chunks of
 * min(256 MiB, capacity / 4) (the pool rounds down to a power of two), so that a node holds at
 * least four of them and a mostly empty one can be trimmed, 8 MiB at most for host-visible
 * memory; offsets aligned to mem_align. */
static int pools_open(odx_context *ctx, char *err, size_t errlen)
{
	static const odx__pool_chunk_ops ops = {.alloc = chunk_alloc, .free = chunk_free};
	size_t largest = 0;
	int m;

	for (m = 1; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		odx__device *dev = node->device;
		odx__pool_chunk_ops o = ops;
		size_t align, chunk;
		int rc;

		if (!dev || node->capacity == 0 || device_abi(ctx, dev) < ((ODX_BACKEND_ABI_MAJOR << 16) | 2u))
			continue;
		align = dev->props.mem_align ? dev->props.mem_align : 256;
		chunk = node->capacity / 4 < ((uint64_t)256 << 20) ? (size_t)(node->capacity / 4)
								     : (size_t)256 << 20;
		/* Host-visible "device" memory is malloc'd host memory (the host backend): the C
		 * library already carves it, and a large chunk would only keep pages resident. */
		if (dev->props.host_visible && chunk > ((size_t)8 << 20))
			chunk = (size_t)8 << 20;
		if (chunk < align)
			chunk = align;
		o.user = dev;
		rc = odx__pool_new(&o, chunk, align, node->capacity, &node->pool);
		if (rc) {
			snprintf(err, errlen,
				 "cannot create the device-memory pool of device %d (%s): %s (mem_align "
				 "%zu)",
				 dev->index, dev->name, odx_strerror(rc), align);
			return rc;
		}
		if (node->capacity > largest)
			largest = (size_t)node->capacity;
	}
	if (largest == 0)
		return 0;
	/* Never written, so every page is the kernel's shared zero page: no memory is used. */
	ctx->tier->zeros_bytes = largest;
	ctx->tier->zeros = mmap(NULL, largest, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				-1, 0);
	if (ctx->tier->zeros == MAP_FAILED) {
		ctx->tier->zeros = NULL;
		snprintf(err, errlen, "cannot map %zu bytes of zero pages for the device-memory pools",
			 largest);
		return ODX_ENOMEM;
	}
	return 0;
}

/* Idempotent: every pool's chunks go back to their device (tier close, before device_close). */
static void pools_close(odx_context *ctx)
{
	int m;

	for (m = 1; m < ctx->nmemnodes; m++) {
		odx__pool_free_all(ctx->memnodes[m].pool);
		ctx->memnodes[m].pool = NULL;
	}
	if (ctx->tier->zeros)
		munmap(ctx->tier->zeros, ctx->tier->zeros_bytes);
	ctx->tier->zeros = NULL;
}

const void *odx__tier_zeros(odx_context *ctx, size_t n)
{
	return ctx->tier && n <= ctx->tier->zeros_bytes ? ctx->tier->zeros : NULL;
}

/* ---- the pinned staging pool ---------------------------------------------------------------- */

/* Can a copy need a host bounce buffer? Reloads from the disk tier to a device do, and copies
 * between devices of different backends, or of one without copy_d2d. */
static bool bounce_possible(const odx_context *ctx)
{
	int d;

	if (ctx->tier->disk_capacity > 0)
		return true;
	for (d = 0; d < ctx->ndevices; d++) {
		const odx__device *dev = &ctx->devices[d];

		if (ctx->ndevices > 1 && (dev->ops != ctx->devices[0].ops ||
					  !ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, copy_d2d)))
			return true;
	}
	return false;
}

/* tier.pinned.size bytes as tier.pinned.block blocks: from the first device whose backend offers
 * host_alloc (page-locked memory its copies are fastest from), else page-aligned memory touched
 * page by page (so no copy pays the page faults) and mlock'ed where the limit allows. Only
 * contexts that can need a bounce buffer pay for it. */
static void pinned_open(odx_context *ctx)
{
	odx__tier *tier = ctx->tier;
	size_t size = (size_t)odx__config_size(ctx->config, "tier.pinned.size", 0);
	size_t block = (size_t)odx__config_size(ctx->config, "tier.pinned.block", 0);
	size_t page = (size_t)sysconf(_SC_PAGESIZE), nblocks;
	int d;

	if (size == 0 || block == 0 || !bounce_possible(ctx))
		return;
	if (block > size)
		block = size;
	block = (block + page - 1) / page * page;
	nblocks = size / block;
	if (nblocks == 0)
		nblocks = 1;
	size = nblocks * block;
	for (d = 0; d < ctx->ndevices && !tier->pinned_mem; d++) {
		odx__device *dev = &ctx->devices[d];

		if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, host_alloc) &&
		    ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, host_free) &&
		    dev->ops->host_alloc(dev->bdev, size, &tier->pinned_mem) == 0) {
			tier->pinned_dev = dev;
			tier->pinned_source = PINNED_BACKEND;
		}
	}
	if (!tier->pinned_mem) {
		char *p = aligned_alloc(page, size);

		if (!p)
			return;
		for (size_t off = 0; off < size; off += page)
			p[off] = 0;
		tier->pinned_mem = p;
		tier->pinned_source = mlock(p, size) == 0 ? PINNED_LOCKED : PINNED_FAULTED;
		tier->pinned_errno = tier->pinned_source == PINNED_FAULTED ? errno : 0;
	}
	tier->pinned_bytes = size;
	if (odx__pinned_new(tier->pinned_mem, block, nblocks, &tier->pinned) != 0)
		tier->pinned = NULL; /* bounces fall back to malloc; the memory is freed at close */
}

static void pinned_close(odx_context *ctx)
{
	odx__tier *tier = ctx->tier;

	odx__pinned_free(tier->pinned);
	tier->pinned = NULL;
	if (!tier->pinned_mem)
		return;
	if (tier->pinned_source == PINNED_BACKEND) {
		tier->pinned_dev->ops->host_free(tier->pinned_dev->bdev, tier->pinned_mem,
						 tier->pinned_bytes);
	} else {
		if (tier->pinned_source == PINNED_LOCKED)
			munlock(tier->pinned_mem, tier->pinned_bytes);
		free(tier->pinned_mem);
	}
	tier->pinned_mem = NULL;
}

odx__pinned *odx__tier_pinned(odx_context *ctx)
{
	return ctx->tier ? ctx->tier->pinned : NULL;
}

/* ---- opening and closing --------------------------------------------------------------------- */

static void *monitor_main(void *arg);

int odx__tier_open(odx_context *ctx, char *err, size_t errlen)
{
	odx__tier *tier = calloc(1, sizeof(*tier));
	uint64_t limit;
	const char *disk_path;
	int m;

	if (!tier)
		return ODX_ENOMEM;
	ctx->tier = tier;
	pthread_mutex_init(&tier->lock, NULL);
	pthread_cond_init(&tier->cond, NULL);
	ctx->prefetch = odx__config_bool(ctx->config, "tier.prefetch");
	ctx->direct_access = odx__config_bool(ctx->config, "tier.direct_access");
	ctx->monitor_start = (unsigned)odx__config_int(ctx->config, "tier.monitor.start");
	ctx->monitor_stop = (unsigned)odx__config_int(ctx->config, "tier.monitor.stop");
	if (ctx->monitor_stop > ctx->monitor_start) {
		snprintf(err, errlen,
			 "tier.monitor.stop (%u%%) must not be above tier.monitor.start (%u%%)",
			 ctx->monitor_stop, ctx->monitor_start);
		return ODX_ECONFIG;
	}
	tier->watchdog_ms = (int)odx__config_int(ctx->config, "tier.watchdog_ms");

	/* Capacities: the limits apply to each node, never above what the node has. */
	for (m = 0; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		uint64_t have = node->capacity;

		pthread_mutex_init(&node->lock, NULL);
		limit = odx__config_size(ctx->config,
					 node->device ? "tier.device.limit" : "tier.host.limit", have);
		if (limit > 0 && (limit < have || have == 0))
			node->capacity = limit;
	}

	/* The disk tier, when it has a capacity. */
	tier->disk_capacity = odx__config_size(ctx->config, "tier.disk.limit", 0);
	disk_path = odx__config_str(ctx->config, "tier.disk.path");
	if (tier->disk_capacity > 0) {
		odx__spill_params p;
		const char *direct = odx__config_str(ctx->config, "tier.disk.direct");
		const char *engine = odx__config_str(ctx->config, "tier.disk.engine");
		const char *fault = odx__config_str(ctx->config, "tier.disk.fault");
		char why[512];
		int rc;

		odx__spill_params_init(&p);
		p.path = disk_path[0] ? disk_path : NULL;
		p.capacity = tier->disk_capacity;
		p.direct = strcmp(direct, "on") == 0 ? 1 : strcmp(direct, "off") == 0 ? 0 : -1;
		p.engine = strcmp(engine, "io_uring") == 0 ? 1 : strcmp(engine, "pread") == 0 ? 0 : -1;
		p.fault = fault[0] ? fault : NULL;
		rc = odx__spill_open(&p, &tier->spill, why, sizeof(why));
		if (rc) {
			snprintf(err, errlen, "the disk tier (tier.disk.path = '%s') cannot open: %s",
				 disk_path, why);
			return rc;
		}
		tier->disk_trace = odx__lane_trace_new(ctx, "disk tier", 0, 2 * ctx->ndevices + 1);
		{
			odx__spill_stats st;
			uint64_t fsize = odx__fsize_limit();

			odx__spill_get_stats(tier->spill, &st);
			if (st.stale_removed)
				odx__log(ctx, ODX_LOG_INFO,
					 "disk tier: removed %u spill directories of dead processes "
					 "under %s",
					 st.stale_removed, disk_path[0] ? disk_path : "the default path");
			if (fsize < tier->disk_capacity)
				odx__log(ctx, ODX_LOG_WARN,
					 "disk tier: the file-size limit (ulimit -f) of %llu bytes is "
					 "below tier.disk.limit (%llu bytes): the spill file stops there "
					 "and the disk tier counts as full beyond it",
					 (unsigned long long)fsize,
					 (unsigned long long)tier->disk_capacity);
		}
	}
	m = pools_open(ctx, err, errlen);
	if (m)
		return m;
	pinned_open(ctx);
	tier->last_change_ns = odx__now_ns();
	if (pthread_create(&tier->monitor, NULL, monitor_main, ctx) != 0) {
		snprintf(err, errlen, "cannot start the memory-tier monitor thread");
		return ODX_ENOMEM;
	}
	tier->monitor_started = true;
	return 0;
}

void odx__tier_stop(odx_context *ctx)
{
	odx__tier *tier = ctx->tier;

	if (!tier || !tier->monitor_started)
		return;
	pthread_mutex_lock(&tier->lock);
	tier->stop = true;
	pthread_cond_signal(&tier->cond);
	pthread_mutex_unlock(&tier->lock);
	pthread_join(tier->monitor, NULL);
	tier->monitor_started = false;
}

void odx__tier_close(odx_context *ctx)
{
	odx__tier *tier = ctx->tier;
	int m;

	if (!tier)
		return;
	odx__tier_stop(ctx);
	odx__spill_close(tier->spill); /* removes the spill file and the private directory */
	/* context_free calls this before device_close: the chunks and the pinned blocks go back
	 * to devices that are still open. */
	pools_close(ctx);
	pinned_close(ctx);
	for (m = 0; m < ctx->nmemnodes; m++)
		pthread_mutex_destroy(&ctx->memnodes[m].lock);
	pthread_mutex_destroy(&tier->lock);
	pthread_cond_destroy(&tier->cond);
	free(tier);
	ctx->tier = NULL;
}

bool odx__tier_has_disk(const odx_context *ctx)
{
	return ctx->tier && ctx->tier->spill;
}

uint64_t odx__tier_disk_capacity(const odx_context *ctx)
{
	return odx__tier_has_disk(ctx) ? ctx->tier->disk_capacity : 0;
}

/* ---- waking what waits for room ------------------------------------------------------------- */

void odx__tier_progress(odx_context *ctx)
{
	atomic_fetch_add_explicit(&ctx->progress, 1, memory_order_relaxed);
	if (ctx->tier && atomic_load(&ctx->tier->room_waiters) > 0)
		odx__wake_waiters(ctx);
}

void odx__tier_changed(odx_context *ctx, int m)
{
	int d;

	atomic_fetch_add(&ctx->progress, 1); /* seq_cst: pairs with wait_for_room (worker.c) */
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];

		/* Room in host RAM also unblocks write-backs from every device. */
		if ((!odx__is_host_node(ctx, m) && dev->memnode != m) ||
		    atomic_load(&dev->memwait_n) == 0)
			continue;
		pthread_mutex_lock(&dev->lock);
		dev->mem_changed = true;
		pthread_cond_signal(&dev->cond);
		pthread_mutex_unlock(&dev->lock);
	}
	if (odx__is_host_node(ctx, m) && ctx->tier && atomic_load(&ctx->tier->room_waiters) > 0)
		odx__wake_waiters(ctx);
	odx__prefetch_pump(ctx);
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

		if (!r->allocated || (odx__is_host_node(ctx, m) && b->registered))
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
static int make_room_below(odx_context *ctx, int m, uint64_t need, uint64_t limit,
			   const odx__task *t, odx__copy_job **jobs, char *why, size_t whylen)
{
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t freeing = node->evicting, busy, used = atomic_load(&node->used);
	uint64_t lower_need = 0;
	bool lower_full = false, lower_busy = false, disk_failed = false;
	victim *v;
	int n, i, rc;

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
		 * when the buffer has none yet and that one has room). */
		if (node->device) {
			odx__copy_job *job;
			int home = odx__buffer_home(ctx, b, m);

			pthread_mutex_unlock(&b->lock);
			pthread_mutex_lock(&ctx->memnodes[home].lock);
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
					if (more) /* host eviction never makes copies; defensive */
						odx__copy_start_all(ctx, more);
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
	return make_room_below(ctx, m, need, ctx->memnodes[m].capacity, t, jobs, why, whylen);
}

/* ---- the disk tier ------------------------------------------------------------------------- */

typedef struct spill_job {
	odx_buffer *b;
	uint64_t wversion, slot, t0;
} spill_job;

static void spill_done(void *arg, int status, const char *msg)
{
	spill_job *job = arg;
	odx_buffer *b = job->b;
	odx_context *ctx = b->ctx;
	odx__tier *tier = ctx->tier;
	int home = odx__home(b);
	odx__memnode *host = &ctx->memnodes[home];
	odx__replica *r = &b->replicas[home];
	bool freed = false;

	pthread_mutex_lock(&host->lock);
	pthread_mutex_lock(&b->lock);
	b->disk_busy = false;
	r->pins--;
	r->evicting = false;
	host->evicting -= b->size;
	if (status == 0 && job->wversion == b->wversion) {
		atomic_store(&b->disk_state, ODX__SHARED);
		/* Two valid copies now: the host one is no longer the only one. */
		if (atomic_load(&r->state) == ODX__MODIFIED)
			odx__replica_set_state(b, home, ODX__SHARED);
		b->disk_slot = job->slot;
		atomic_fetch_add(&tier->spills, 1);
		atomic_fetch_add(&tier->spill_bytes, b->size);
		if (r->pins == 0 && r->holds == 0 && r->allocated) {
			odx__replica_free(ctx, b, home);
			freed = true;
			atomic_fetch_add(&host->writebacks, 1);
			atomic_fetch_add(&host->evicted_bytes, b->size);
		}
	} else {
		if (status == 0) {
			/* A write landed meanwhile: the spilled bytes are old. */
			odx__spill_free(tier->spill, job->slot);
			atomic_fetch_add(&tier->disk_drops, 1);
		} else {
			/* Nothing is lost: the host copy stays where it was. Not retried for this
			 * version of the data, so a failing disk cannot cause a spill storm. */
			b->spill_failed = true;
			atomic_fetch_add(&tier->spill_errors, 1);
			odx__log(ctx, ODX_LOG_ERROR,
				 "spilling buffer %llu (%zu bytes) to the disk tier failed: %s; "
				 "it stays in host RAM",
				 (unsigned long long)b->id, b->size, msg ? msg : odx_strerror(status));
		}
	}
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&host->lock);
	if (ctx->tracing && tier->disk_trace)
		odx__trace_span(tier->disk_trace, status ? "spill (failed)" : "spill", "spill",
				job->t0, odx__now_ns(), b->id);
	free(job);
	odx__tier_progress(ctx);
	odx__tier_changed(ctx, home);
	(void)freed;
	odx__transfer_end(b); /* the last access to b and ctx */
}

int odx__tier_spill(odx_context *ctx, odx_buffer *b)
{
	odx__tier *tier = ctx->tier;
	int home = odx__home(b);
	odx__replica *r = &b->replicas[home];
	spill_job *job;
	int rc;

	if (atomic_load(&b->disk_state) != ODX__INVALID) {
		/* Already on disk and unchanged since: the host copy is clean. */
		odx__replica_free(ctx, b, home);
		return 0;
	}
	job = malloc(sizeof(*job));
	if (!job)
		return ODX_ENOMEM;
	*job = (spill_job){.b = b, .wversion = b->wversion, .t0 = odx__now_ns()};
	odx__transfer_begin(b);
	/* Pinned while the I/O thread reads it: never freed or moved meanwhile. */
	r->pins++;
	r->evicting = true;
	b->disk_busy = true;
	ctx->memnodes[home].evicting += b->size;
	rc = odx__spill_write(tier->spill, (const void *)(uintptr_t)(r->mem + r->off), b->size,
			      &job->slot, spill_done, job);
	if (rc) {
		r->pins--;
		r->evicting = false;
		b->disk_busy = false;
		ctx->memnodes[home].evicting -= b->size;
		if (rc != ODX_ENOSPC) {
			b->spill_failed = true;
			odx__log(ctx, ODX_LOG_ERROR, "cannot spill buffer %llu: %s",
				 (unsigned long long)b->id, odx__spill_last_error());
		} else if (!atomic_load(&tier->fsize_warned)) {
			odx__spill_stats st;

			/* The file-size limit is a full disk tier (the copy stays in RAM); the
			 * limit is named once, as the user can lift it. */
			odx__spill_get_stats(tier->spill, &st);
			if (st.fsize_refusals && !atomic_exchange(&tier->fsize_warned, true))
				odx__log(ctx, ODX_LOG_WARN,
					 "disk tier full at the file-size limit: %s; buffer %llu "
					 "and later ones stay in host RAM",
					 odx__spill_last_error(), (unsigned long long)b->id);
		}
		free(job);
		odx__transfer_end(b);
	}
	return rc;
}

typedef struct reload_job {
	odx_buffer *b;
	void (*done)(void *arg, int status, const char *msg);
	void *arg;
	uint64_t t0;
} reload_job;

static void reload_done(void *arg, int status, const char *msg)
{
	reload_job *job = arg;
	odx_context *ctx = job->b->ctx;
	odx__tier *tier = ctx->tier;

	if (status == 0) {
		atomic_fetch_add(&tier->reloads, 1);
		atomic_fetch_add(&tier->reload_bytes, job->b->size);
	} else {
		atomic_fetch_add(&tier->reload_errors, 1);
	}
	if (ctx->tracing && tier->disk_trace)
		odx__trace_span(tier->disk_trace, status ? "reload (failed)" : "reload", "spill",
				job->t0, odx__now_ns(), job->b->id);
	/* A corrupted block is reported (ODX_ECORRUPT) and never published as data: the copy
	 * fails, and so do the tasks waiting for it. */
	job->done(job->arg, status, msg);
	free(job);
}

int odx__tier_reload(odx_context *ctx, odx_buffer *b, void *dst,
		     void (*done)(void *arg, int status, const char *msg), void *arg)
{
	reload_job *job = malloc(sizeof(*job));
	int rc;

	if (!job)
		return ODX_ENOMEM;
	*job = (reload_job){.b = b, .done = done, .arg = arg, .t0 = odx__now_ns()};
	rc = odx__spill_read(ctx->tier->spill, b->disk_slot, dst, b->size, reload_done, job);
	if (rc)
		free(job);
	return rc;
}

void odx__tier_disk_free(odx_context *ctx, odx_buffer *b)
{
	if (atomic_load(&b->disk_state) == ODX__INVALID || !odx__tier_has_disk(ctx))
		return;
	/* odx__spill_free defers the release past reads still in flight. */
	odx__spill_free(ctx->tier->spill, b->disk_slot);
	atomic_store(&b->disk_state, ODX__INVALID);
}

/* ---- the monitor: headroom and the watchdog ------------------------------------------------ */

/* "(host RAM)", "(host RAM, NUMA node 1)" or the device's name. */
static const char *node_label(const odx_context *ctx, int m, char *buf, size_t len)
{
	const odx__memnode *node = &ctx->memnodes[m];

	if (node->device)
		snprintf(buf, len, "%s", node->device->name);
	else if (ctx->nhost == 1)
		snprintf(buf, len, "(host RAM)");
	else
		snprintf(buf, len, "(host RAM, NUMA node %d)",
			 odx__topo_numa_os_index(ctx->topo, m));
	return buf;
}

static uint64_t progress_now(odx_context *ctx)
{
	uint64_t p = atomic_load(&ctx->progress) + atomic_load(&ctx->copies) +
		     atomic_load(&ctx->completed_other);
	int d;

	for (d = 0; d < ctx->ndevices; d++)
		p += atomic_load(&ctx->devices[d].completed);
	return p;
}

static void dump_state(odx_context *ctx, uint64_t stalled_ms)
{
	char line[512];
	int d, m;

	snprintf(line, sizeof(line),
		 "odx watchdog: no task completed and no byte moved for %llu ms while %ld tasks "
		 "are pending (tier.watchdog_ms); state:",
		 (unsigned long long)stalled_ms, odx__inflight(ctx));
	odx__log(ctx, ODX_LOG_ERROR, "%s", line);
	if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
		fprintf(stderr, "%s\n", line);
	/* Which policy decides, and what it is doing (a hung policy call shows here). */
	memcpy(line, "  ", 2);
	odx__policy_describe(ctx, line + 2, sizeof(line) - 2);
	odx__log(ctx, ODX_LOG_ERROR, "%s", line);
	if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
		fprintf(stderr, "%s\n", line);
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];

		pthread_mutex_lock(&dev->lock);
		snprintf(line, sizeof(line),
			 "  device %d (%s): %d ready, %d staged, %d waiting for room (head: task "
			 "#%llu), %d fetches in flight, load %d",
			 d, dev->name, dev->ready.n, dev->staged_n, atomic_load(&dev->memwait_n),
			 dev->memwait_head ? (unsigned long long)dev->memwait_head->id : 0ull,
			 atomic_load(&dev->demand_fetches), atomic_load(&dev->load));
		pthread_mutex_unlock(&dev->lock);
		odx__log(ctx, ODX_LOG_ERROR, "%s", line);
		if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
			fprintf(stderr, "%s\n", line);
	}
	for (m = 0; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];

		char label[96];

		snprintf(line, sizeof(line),
			 "  memory node %d %s: %llu of %llu bytes used, %llu being evicted", m,
			 node_label(ctx, m, label, sizeof(label)),
			 (unsigned long long)atomic_load(&node->used),
			 (unsigned long long)node->capacity, (unsigned long long)node->evicting);
		odx__log(ctx, ODX_LOG_ERROR, "%s", line);
		if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
			fprintf(stderr, "%s\n", line);
	}
	if (odx__tier_has_disk(ctx)) {
		odx__spill_stats st;

		odx__spill_get_stats(ctx->tier->spill, &st);
		snprintf(line, sizeof(line), "  disk tier %s: %llu of %llu bytes used", st.dir,
			 (unsigned long long)st.used, (unsigned long long)st.capacity);
		odx__log(ctx, ODX_LOG_ERROR, "%s", line);
		if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
			fprintf(stderr, "%s\n", line);
	}
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

/* Keeps each node below its start watermark, evicting down to the stop watermark. */
static void keep_headroom(odx_context *ctx)
{
	int m;

	for (m = 0; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		uint64_t start, stop;
		odx__copy_job *jobs = NULL;
		char why[256];

		odx__tier_watermarks(ctx, m, &start, &stop);
		if (atomic_load(&node->used) <= start || (!node->device && !odx__tier_has_disk(ctx)))
			continue;
		pthread_mutex_lock(&node->lock);
		make_room_below(ctx, m, 0, stop, NULL, &jobs, why, sizeof(why));
		pthread_mutex_unlock(&node->lock);
		odx__copy_start_all(ctx, jobs);
	}
}

static void *monitor_main(void *arg)
{
	odx_context *ctx = arg;
	odx__tier *tier = ctx->tier;
	struct timespec ts;
	int d;

	pthread_setname_np(pthread_self(), "odx-tiers");
	pthread_mutex_lock(&tier->lock);
	while (!tier->stop) {
		uint64_t now, p;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!atomic_load(&tier->kicked))
			pthread_cond_timedwait(&tier->cond, &tier->lock, &ts);
		if (tier->stop)
			break;
		pthread_mutex_unlock(&tier->lock);
		atomic_store(&tier->kicked, false);

		keep_headroom(ctx);
		odx__prefetch_pump(ctx);
		/* A safety net for lost wake-ups: tasks waiting for room are retried. */
		for (d = 0; d < ctx->ndevices; d++)
			if (atomic_load(&ctx->devices[d].memwait_n) > 0)
				odx__tier_changed(ctx, ctx->devices[d].memnode);

		now = odx__now_ns();
		p = progress_now(ctx);
		if (p != tier->last_progress || odx__inflight(ctx) == 0) {
			tier->last_progress = p;
			tier->last_change_ns = now;
			tier->dumped = false;
		} else if (tier->watchdog_ms > 0 && !tier->dumped &&
			   now - tier->last_change_ns >= (uint64_t)tier->watchdog_ms * 1000000u) {
			tier->dumped = true;
			dump_state(ctx, (now - tier->last_change_ns) / 1000000u);
		}
		pthread_mutex_lock(&tier->lock);
	}
	pthread_mutex_unlock(&tier->lock);
	return NULL;
}

/* ---- counters ----------------------------------------------------------------------------- */

void odx__tier_stats_print(odx_context *ctx, void (*emit)(odx_context *, const char *))
{
	odx__tier *tier = ctx->tier;
	char line[512];
	int m, d;

	if (!tier)
		return;
	for (m = 0; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		char label[96];

		snprintf(line, sizeof(line),
			 "  tier node %d %s: capacity %.1f MiB, peak %.1f MiB; evicted %llu clean "
			 "and %llu dirty copies (%.1f MiB); %llu admissions waited for room",
			 m, node_label(ctx, m, label, sizeof(label)),
			 (double)node->capacity / (1 << 20), (double)node->peak / (1 << 20),
			 (unsigned long long)atomic_load(&node->drops),
			 (unsigned long long)atomic_load(&node->writebacks),
			 (double)atomic_load(&node->evicted_bytes) / (1 << 20),
			 (unsigned long long)atomic_load(&node->noroom));
		emit(ctx, line);
	}
	for (m = ctx->nhost; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		odx__pool_stats ps;

		if (!node->pool)
			continue;
		odx__pool_get_stats(node->pool, &ps);
		snprintf(line, sizeof(line),
			 "  device memory pool, node %d: %llu chunks of %.1f MiB and %llu dedicated "
			 "allocations (%.1f MiB) held from the driver; %.1f MiB handed out for %.1f MiB "
			 "asked; largest free block %.1f MiB, fragmentation %.2f",
			 m, (unsigned long long)ps.chunks,
			 (double)odx__pool_chunk_size(node->pool) / (1 << 20),
			 (unsigned long long)ps.dedicated, (double)ps.dedicated_bytes / (1 << 20),
			 (double)ps.used / (1 << 20), (double)ps.requested / (1 << 20),
			 (double)ps.largest_free / (1 << 20), ps.fragmentation);
		emit(ctx, line);
	}
	if (tier->pinned) {
		static const char *const source[] = {"", "page-locked by the backend's host_alloc",
						     "pre-faulted and mlock'ed",
						     "pre-faulted, not locked"};
		odx__pinned_stats st;

		odx__pinned_get_stats(tier->pinned, &st);
		snprintf(line, sizeof(line),
			 "  pinned staging pool: %llu blocks of %llu KiB, %s%s%s%s; %llu bounce "
			 "copies from it, peak %llu blocks in use, %llu now; %llu fell back to malloc",
			 (unsigned long long)st.blocks, (unsigned long long)st.block >> 10,
			 source[tier->pinned_source],
			 tier->pinned_source == PINNED_FAULTED ? " (mlock: " : "",
			 tier->pinned_source == PINNED_FAULTED ? strerror(tier->pinned_errno) : "",
			 tier->pinned_source == PINNED_FAULTED ? ")" : "",
			 (unsigned long long)st.gets, (unsigned long long)st.peak,
			 (unsigned long long)st.in_use, (unsigned long long)st.fallbacks);
		emit(ctx, line);
	}
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];

		snprintf(line, sizeof(line),
			 "  device %d: compute lane stalled %.3f s waiting for room; prefetched %llu "
			 "copies: %llu used by their task, %llu evicted before use",
			 d, (double)atomic_load(&dev->stall_ns) / 1e9,
			 (unsigned long long)atomic_load(&dev->prefetches),
			 (unsigned long long)atomic_load(&dev->prefetch_hits),
			 (unsigned long long)atomic_load(&dev->prefetch_waste));
		emit(ctx, line);
	}
	if (atomic_load(&ctx->pf_requests) > 0) {
		snprintf(line, sizeof(line),
			 "  prefetch requests (odx_buffer_prefetch): %llu made, %llu started a copy, "
			 "%llu cancelled (plan changed)",
			 (unsigned long long)atomic_load(&ctx->pf_requests),
			 (unsigned long long)atomic_load(&ctx->pf_started),
			 (unsigned long long)atomic_load(&ctx->pf_cancelled));
		emit(ctx, line);
	}
	if (odx__tier_has_disk(ctx)) {
		odx__spill_stats st;

		odx__spill_get_stats(tier->spill, &st);
		snprintf(line, sizeof(line),
			 "  disk tier %s (%s, %s): %llu spills (%.1f MiB), %llu reloads (%.1f MiB), "
			 "%llu spill errors, %llu reload errors (%llu corrupt), peak use %.1f of "
			 "%.1f MiB",
			 st.dir, st.direct ? "direct I/O" : "buffered I/O",
			 st.uring ? "io_uring" : "pread/pwrite",
			 (unsigned long long)atomic_load(&tier->spills),
			 (double)atomic_load(&tier->spill_bytes) / (1 << 20),
			 (unsigned long long)atomic_load(&tier->reloads),
			 (double)atomic_load(&tier->reload_bytes) / (1 << 20),
			 (unsigned long long)atomic_load(&tier->spill_errors),
			 (unsigned long long)atomic_load(&tier->reload_errors),
			 (unsigned long long)st.corrupt, (double)st.used / (1 << 20),
			 (double)st.capacity / (1 << 20));
		emit(ctx, line);
	}
}
