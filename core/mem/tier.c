/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier.c - the memory wing's entry points: opening (capacities, device-memory pools, the
 * pinned staging pool, the disk tier, the monitor thread) and closing, the counters, and waking
 * what waits for room.
 *
 * Every memory node has a capacity enforced by our own accounting (odx__memnode.used counts
 * allocated replicas), so out-of-core behaviour can be forced with small limits. The top of the
 * wing: it may call every floor (mem.h), and no floor calls it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"
#include "mem.h"
#include "policy.h"
#include "pool.h"
#include "spill.h"

/* Where the pinned staging pool's memory came from. */
enum pinned_source {
	PINNED_NONE = 0,
	PINNED_BACKEND,  /* a device backend's host_alloc (page-locked by its driver) */
	PINNED_LOCKED,   /* aligned memory, pre-faulted and mlock'ed */
	PINNED_FAULTED,  /* aligned memory, pre-faulted; mlock refused (RLIMIT_MEMLOCK) */
};

/* ---- device-memory pools --------------------------------------------------------------------- */

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

/* ---- the pinned staging pool ----------------------------------------------------------------- */

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

/* ---- opening and closing --------------------------------------------------------------------- */

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
	if (pthread_create(&tier->monitor, NULL, odx__monitor_main, ctx) != 0) {
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

/* ---- waking what waits for room -------------------------------------------------------------- */

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
		odx__device_signal(dev);
		pthread_mutex_unlock(&dev->lock);
	}
	if (odx__is_host_node(ctx, m) && ctx->tier && atomic_load(&ctx->tier->room_waiters) > 0)
		odx__wake_waiters(ctx);
	odx__prefetch_pump(ctx);
}

/* The completion door: the one way back up from the floors below (mem.h). It fans a finished
 * copy or spill, or room that appeared, out to whoever waits for it, in this order. */
void odx__mem_done(odx_context *ctx, const odx__mem_event *ev)
{
	int i;

	if (ev->bandwidth > 0)
		odx__policy_set_bandwidth(ctx, ev->src, ev->dst, ev->bandwidth);
	if (ev->kind != ODX__MEM_ROOM)
		odx__tier_progress(ctx);
	if (ev->waiters)
		odx__stage_fetched(ctx, ev->waiters, ev->status, ev->why);
	for (i = 0; i < ev->nchanged; i++)
		odx__tier_changed(ctx, ev->changed[i]);
	if (ev->refetch)
		odx__copy_start_all(ctx, ev->refetch);
	/* A copy lane has one fewer demand copy, or room appeared: prefetch requests may start. */
	if (ev->kind == ODX__MEM_COPY)
		odx__prefetch_pump(ctx);
}

/* ---- counters -------------------------------------------------------------------------------- */

void odx__tier_stats_print(odx_context *ctx, void (*emit)(odx_context *, const char *))
{
	odx__tier *tier = ctx->tier;
	char line[768];
	int m, d;

	if (!tier)
		return;
	for (m = 0; m < ctx->nmemnodes; m++) {
		odx__memnode *node = &ctx->memnodes[m];
		char label[96];

		snprintf(line, sizeof(line),
			 "  tier node %d %s: capacity %.1f MiB, peak %.1f MiB; evicted %llu clean "
			 "and %llu dirty copies (%.1f MiB); %llu admissions waited for room",
			 m, odx__monitor_node_label(ctx, m, label, sizeof(label)),
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
			 "%.1f MiB; %llu bytes spilled, %llu bytes reloaded",
			 st.dir, st.direct ? "direct I/O" : "buffered I/O",
			 st.uring ? "io_uring" : "pread/pwrite",
			 (unsigned long long)atomic_load(&tier->spills),
			 (double)atomic_load(&tier->spill_bytes) / (1 << 20),
			 (unsigned long long)atomic_load(&tier->reloads),
			 (double)atomic_load(&tier->reload_bytes) / (1 << 20),
			 (unsigned long long)atomic_load(&tier->spill_errors),
			 (unsigned long long)atomic_load(&tier->reload_errors),
			 (unsigned long long)st.corrupt, (double)st.used / (1 << 20),
			 (double)st.capacity / (1 << 20),
			 (unsigned long long)atomic_load(&tier->spill_bytes),
			 (unsigned long long)atomic_load(&tier->reload_bytes));
		emit(ctx, line);
	}
}

