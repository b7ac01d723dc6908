/* SPDX-License-Identifier: Apache-2.0 */
/*
 * monitor.c - the memory-tier monitor thread: it keeps headroom on every node (evicting from
 * the start watermark down to the stop watermark, so the demand path rarely waits), pumps prefetch
 * requests, retries tasks waiting for room (a safety net for lost wake-ups), and is the watchdog:
 * no task completed and no byte moved for tier.watchdog_ms while work is pending prints a state
 * dump.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "mem.h"
#include "policy.h"
#include "spill.h"


/* "(host RAM)", "(host RAM, NUMA node 1)" or the device's name. */
const char *odx__monitor_node_label(const odx_context *ctx, int m, char *buf, size_t len)
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
			 odx__monitor_node_label(ctx, m, label, sizeof(label)),
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
		odx__evict_below(ctx, m, 0, stop, NULL, &jobs, why, sizeof(why));
		pthread_mutex_unlock(&node->lock);
		odx__copy_start_all(ctx, jobs);
	}
}

void *odx__monitor_main(void *arg)
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
				odx__mem_done(ctx, &(odx__mem_event){
							   .kind = ODX__MEM_ROOM,
							   .changed = {ctx->devices[d].memnode},
							   .nchanged = 1});

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
