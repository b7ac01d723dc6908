/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replica.c - a buffer's replicas on the memory nodes: allocation and freeing with the node's
 * accounting, MSI states, the buffer's host node, and the count of transfers keeping a buffer
 * alive.
 *
 * The lowest floor of the memory wing above the pool and the disk engine: the only code that
 * changes a node's `used` count, so every floor above keeps its accounting right by going
 * through odx__replica_alloc/free. It calls nothing above it (mem.h).
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem.h"
#include "pool.h"

/* The host node with the most room left. */
static int roomiest_host(odx_context *ctx)
{
	uint64_t best_room = 0;
	int m, best = 0;

	for (m = 0; m < ctx->nhost; m++) {
		const odx__memnode *node = &ctx->memnodes[m];
		uint64_t used = atomic_load(&node->used);
		uint64_t room = used < node->capacity ? node->capacity - used : 0;

		if (room > best_room) {
			best_room = room;
			best = m;
		}
	}
	return best;
}

int odx__buffer_home(odx_context *ctx, odx_buffer *b, int near)
{
	int h = atomic_load_explicit(&b->home, memory_order_acquire), want, unset = -1;
	const odx__memnode *node;

	if (h >= 0)
		return h;
	if (near < 0) {
		near = odx__topo_numa_of_self(ctx->topo);
		if (near < 0 || near >= ctx->nhost)
			near = roomiest_host(ctx);
	}
	want = ctx->memnodes[near].near;
	node = &ctx->memnodes[want];
	if (atomic_load(&node->used) + b->size > node->capacity)
		want = roomiest_host(ctx);
	/* Set once: whoever comes first decides, everyone uses that. */
	if (atomic_compare_exchange_strong(&b->home, &unset, want))
		return want;
	return unset;
}

/* ---- replica memory -------------------------------------------------------------------------- */

/*
 * A device node with a pool (core/pool.c, backends of ABI 1.2) carves replicas out of a few large
 * chunks: r->mem is the chunk's handle, r->off the replica's offset in it, and the node's `used`
 * counts the pool's rounded size, so that reservations agree with what the pool will take.
 * Three cases bypass the pool with a dedicated mem_alloc of the exact size (offset 0, counted at
 * b->size, as without a pool): zero-filled memory asked through odx__replica_alloc (staging
 * zero-fills pooled memory with a copy instead, see zero_fill), a task whose working set fits
 * the tier only unrounded (stage_direct), and a pool the driver refused a chunk to even after
 * it gave back its empty ones. Freeing tells them apart by asking the pool whether the handle is
 * one of its own.
 */
int odx__replica_alloc_as(odx_context *ctx, odx_buffer *b, int m, bool zero, bool direct)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t used, bytes = b->size;
	int rc;

	/* A part's home copy is its parent's memory, made by the partition switch only; a part
	 * whose switch could not make it (its parent got no host copy) has none to allocate. */
	if (odx__replica_is_alias(b, m))
		return ODX_EIO;
	if (!node->device) {
		/* Host memory node m is NUMA node m. */
		bool zeroed;
		void *p = odx__topo_alloc_on(ctx->topo, m, b->size, &zeroed);

		if (!p)
			return ODX_ENOMEM;
		/* Fresh pages from the kernel are zeros already: writing them again cost the first
		 * group-by at 4 x 16M rows half its CPU. */
		if (zero && !zeroed)
			memset(p, 0, b->size);
		r->mem = (uint64_t)(uintptr_t)p;
		r->off = 0;
	} else {
		rc = ODX_ENOSYS;
		if (node->pool && !zero && !direct) {
			rc = odx__pool_alloc(node->pool, b->size, &r->mem, &r->off);
			if (rc) {
				/* Empty chunks may be what stands in the way of a new one. */
				odx__pool_trim(node->pool);
				rc = odx__pool_alloc(node->pool, b->size, &r->mem, &r->off);
			}
			if (rc == 0)
				bytes = odx__pool_rounded_size(node->pool, b->size);
		}
		if (rc) {
			/* What the node does without a pool. */
			rc = node->device->ops->mem_alloc(node->device->bdev, b->size, zero, &r->mem);
			if (rc)
				return rc;
			r->off = 0;
		}
	}
	r->allocated = true;
	used = atomic_fetch_add(&node->used, bytes) + bytes;
	if (used > node->peak)
		node->peak = used;
	return 0;
}

int odx__replica_alloc(odx_context *ctx, odx_buffer *b, int m, bool zero)
{
	return odx__replica_alloc_as(ctx, b, m, zero, false);
}

void odx__replica_free(odx_context *ctx, odx_buffer *b, int m)
{
	odx__replica *r = &b->replicas[m];
	odx__memnode *node = &ctx->memnodes[m];
	uint64_t bytes = b->size;

	if (!r->allocated)
		return;
	/* A part's alias is its parent's memory: nothing to free, nothing was counted. */
	if (odx__replica_is_alias(b, m)) {
		r->allocated = false;
		r->holds = 0;
		atomic_store(&r->state, ODX__INVALID);
		return;
	}
	if (!node->device) {
		if (!b->registered)
			odx__topo_free(ctx->topo, (void *)(uintptr_t)r->mem, b->size);
	} else if (node->pool && odx__pool_release(node->pool, r->mem, r->off, b->size)) {
		bytes = odx__pool_rounded_size(node->pool, b->size);
	} else {
		node->device->ops->mem_free(node->device->bdev, r->mem, b->size);
	}
	r->allocated = false;
	r->holds = 0;
	atomic_store(&r->state, ODX__INVALID);
	atomic_fetch_sub(&node->used, bytes);
}

void odx__replica_set_state(odx_buffer *b, int m, int state)
{
	atomic_store_explicit(&b->replicas[m].state, (uint8_t)state, memory_order_relaxed);
}

int odx__valid_copies(const odx_buffer *b)
{
	int m, n = atomic_load(&b->disk_state) != ODX__INVALID;

	for (m = 0; m < b->ctx->nmemnodes; m++)
		n += atomic_load(&b->replicas[m].state) != ODX__INVALID;
	return n;
}

void odx__transfer_begin(odx_buffer *b)
{
	atomic_fetch_add(&b->transfers, 1);
	atomic_fetch_add(&b->ctx->transfers, 1);
}

void odx__transfer_end(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	/* b may be released once its count is zero, ctx closed once its count is: touch neither
	 * after its own decrement. */
	atomic_fetch_sub(&b->transfers, 1);
	odx__wake_waiters(ctx);
	atomic_fetch_sub(&ctx->transfers, 1);
}

static bool no_transfers(void *arg)
{
	return atomic_load(&((odx_context *)arg)->transfers) == 0;
}

void odx__transfers_drain(odx_context *ctx)
{
	while (!no_transfers(ctx))
		odx__wait_until(ctx, no_transfers, ctx, 10);
}

/* ---- strided host copies (partitions) -------------------------------------------------------- */

void odx__strided_copy(char *dst, size_t dpitch, const char *src, size_t spitch, size_t width,
		       size_t rows)
{
	size_t r;

	if (dpitch == width && spitch == width) {
		memcpy(dst, src, width * rows);
		return;
	}
	for (r = 0; r < rows; r++)
		memcpy(dst + r * dpitch, src + r * spitch, width);
}

void odx__shape_copy(const odx_shape *s, char *base, size_t off, char *packed, size_t len,
		     bool to_packed)
{
	/* Packed byte k is byte k % width of run k / width. */
	while (len > 0) {
		size_t run = off / s->width, in = off % s->width;
		size_t n = s->width - in < len ? s->width - in : len;
		char *p = base + run * s->pitch + in;

		if (to_packed)
			memcpy(packed, p, n);
		else
			memcpy(p, packed, n);
		packed += n;
		off += n;
		len -= n;
	}
}
