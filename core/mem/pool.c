/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c - the device-memory pool: a binary buddy allocator per chunk.
 *
 * Why buddy rather than size classes:
 *  - Device memory cannot hold the allocator's own headers (it is not host-addressable), so
 *    metadata lives in host memory. A buddy chunk needs one byte per node of a complete binary
 *    tree over its smallest blocks and no record per allocation: release() gets the size back
 *    from the caller, which gives the block's order, and the offset gives its node. Size classes
 *    with coalescing (TLSF and the like) need a descriptor per block and a map from offset to
 *    descriptor.
 *  - Every operation is O(log n) in the blocks of a chunk (at most POOL_MAX_ORDER levels): alloc
 *    walks down the tree, release walks up it.
 *  - Coalescing is immediate and complete: a freed block merges with its free buddy at every
 *    level, so a chunk whose allocations are all released is one free block again and trim can
 *    give it back. External fragmentation inside a chunk stays low because the descent prefers
 *    the child whose largest free block fits most tightly, keeping big blocks whole.
 *  - The cost is internal fragmentation: a request is rounded up to a power-of-two multiple of
 *    the smallest block, so it takes less than twice its size (on average about 1.33x for
 *    sizes spread evenly), and capacity is accounted by that rounded size. Requests larger than
 *    half a chunk, where rounding would cost most, get a dedicated driver allocation rounded
 *    only to the alignment. stats.used - stats.requested shows what rounding costs.
 *
 * Each chunk is `chunk_size` = min_block << max_order bytes. Tree node 1 is the whole chunk; node
 * i has children 2i and 2i + 1; a node at depth d holds blocks of order max_order - d (min_block
 * << order bytes). tree[i] is 1 + the order of the largest free block in i's subtree, 0 if none.
 * Driver allocations (chunks and dedicated ones) sit in an array sorted by handle, so release
 * finds its chunk by binary search.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* At most 2^16 smallest blocks per chunk: 128 KiB of tree. */
#define POOL_MAX_ORDER 16
#define POOL_MIN_BLOCK 256

/* One driver allocation: a chunk (tree != NULL) or a dedicated allocation. */
typedef struct pool_alloc {
	uint64_t handle;
	size_t size;
	uint8_t *tree;
	uint64_t used; /* rounded bytes handed out of it */
	uint64_t nallocs;
} pool_alloc;

struct odx__pool {
	pthread_mutex_t lock;
	odx__pool_chunk_ops ops;
	size_t chunk_size, min_block, align;
	unsigned max_order;
	uint64_t capacity;
	uint64_t used, requested, allocs;
	uint64_t nchunks, chunk_bytes, ndedicated, dedicated_bytes;
	pool_alloc *drv; /* sorted by handle */
	size_t ndrv, drv_cap;
};

static unsigned log2_floor(size_t x)
{
	unsigned r = 0;

	while (x >>= 1)
		r++;
	return r;
}

static bool is_pow2(size_t x)
{
	return x && (x & (x - 1)) == 0;
}

/* ---- one chunk's buddy tree ---------------------------------------------------------------- */

static uint8_t *tree_new(unsigned max_order)
{
	size_t nodes = (size_t)2 << max_order;
	uint8_t *t = malloc(nodes);

	if (!t)
		return NULL;
	t[0] = 0; /* unused */
	/* Depth d holds 2^d nodes of order max_order - d, each wholly free. */
	for (unsigned d = 0; d <= max_order; d++)
		memset(t + ((size_t)1 << d), (int)(max_order - d + 1), (size_t)1 << d);
	return t;
}

/* Recomputes the ancestors of node i (of order `order`) after it changed. */
static void tree_update(uint8_t *t, size_t i, unsigned order)
{
	while (i > 1) {
		uint8_t l, r;

		i >>= 1;
		order++;
		l = t[2 * i];
		r = t[2 * i + 1];
		/* Both halves wholly free (a child of order o-1 is wholly free at value o): merge. */
		t[i] = l == order && r == order ? (uint8_t)(order + 1) : (l > r ? l : r);
	}
}

/* A free block of order k (the tree's root must have room); returns its index in blocks of
 * that order. */
static size_t tree_alloc(uint8_t *t, unsigned max_order, unsigned k)
{
	size_t i = 1;
	unsigned o = max_order;

	while (o > k) {
		uint8_t l = t[2 * i], r = t[2 * i + 1];

		/* Best fit: of two children that fit, the one with the smaller largest block. */
		i = l > k && (r <= k || l <= r) ? 2 * i : 2 * i + 1;
		o--;
	}
	t[i] = 0;
	tree_update(t, i, k);
	return i - ((size_t)1 << (max_order - k));
}

static bool tree_release(uint8_t *t, unsigned max_order, unsigned k, size_t index)
{
	size_t i = ((size_t)1 << (max_order - k)) + index;

	if (t[i] != 0)
		return false; /* not handed out: a bad release */
	t[i] = (uint8_t)(k + 1);
	tree_update(t, i, k);
	return true;
}

/* ---- driver allocations ------------------------------------------------------------------- */

/* Index of `handle` in p->drv, or where it would go (*found false). */
static size_t drv_find(const odx__pool *p, uint64_t handle, bool *found)
{
	size_t lo = 0, hi = p->ndrv;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->drv[mid].handle < handle)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < p->ndrv && p->drv[lo].handle == handle;
	return lo;
}

static int drv_insert(odx__pool *p, const pool_alloc *a)
{
	bool found;
	size_t at;

	if (p->ndrv == p->drv_cap) {
		size_t cap = p->drv_cap ? p->drv_cap * 2 : 16;
		pool_alloc *n = realloc(p->drv, cap * sizeof(*n));

		if (!n)
			return ODX_ENOMEM;
		p->drv = n;
		p->drv_cap = cap;
	}
	at = drv_find(p, a->handle, &found);
	if (found)
		return ODX_EINVAL; /* the driver handed out a handle twice */
	memmove(p->drv + at + 1, p->drv + at, (p->ndrv - at) * sizeof(*p->drv));
	p->drv[at] = *a;
	p->ndrv++;
	return 0;
}

static void drv_remove(odx__pool *p, size_t at)
{
	pool_alloc *a = &p->drv[at];

	if (a->tree) {
		p->nchunks--;
		p->chunk_bytes -= a->size;
		free(a->tree);
	} else {
		p->ndedicated--;
		p->dedicated_bytes -= a->size;
	}
	memmove(p->drv + at, p->drv + at + 1, (p->ndrv - at - 1) * sizeof(*p->drv));
	p->ndrv--;
}

/* Lock held. Gives empty chunks back; the frees are done after the lock is dropped when the
 * caller passes a list (`out`, room for ndrv entries), else here. Returns how many went. */
static size_t drop_empty_chunks(odx__pool *p, pool_alloc *out)
{
	size_t i = 0, n = 0;

	while (i < p->ndrv) {
		pool_alloc a = p->drv[i];

		if (!a.tree || a.nallocs != 0) {
			i++;
			continue;
		}
		a.tree = NULL; /* freed by drv_remove */
		drv_remove(p, i);
		if (out)
			out[n] = a;
		else
			p->ops.free(p->ops.user, a.handle, a.size);
		n++;
	}
	return n;
}

/* Lock held. Before taking `bytes` more from the driver: if that would hold more than the
 * capacity, give back the empty chunks first. */
static void make_room(odx__pool *p, uint64_t bytes)
{
	if (p->chunk_bytes + p->dedicated_bytes + bytes > p->capacity)
		drop_empty_chunks(p, NULL);
}

/* ---- the interface --------------------------------------------------------------------------- */

int odx__pool_new(const odx__pool_chunk_ops *ops, size_t chunk_size, size_t align,
		  uint64_t capacity, odx__pool **out)
{
	odx__pool *p;

	if (!ops || !ops->alloc || !ops->free || !out)
		return ODX_EINVAL;
	if (align == 0)
		align = 256;
	if (!is_pow2(align) || chunk_size < align)
		return ODX_EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ODX_ENOMEM;
	p->ops = *ops;
	p->align = align;
	p->chunk_size = (size_t)1 << log2_floor(chunk_size);
	/* The smallest block: the alignment, 256 bytes, or what keeps the tree at most
	 * POOL_MAX_ORDER levels deep, whichever is largest (and never above the chunk). */
	p->min_block = align > POOL_MIN_BLOCK ? align : POOL_MIN_BLOCK;
	if (p->min_block < p->chunk_size >> POOL_MAX_ORDER)
		p->min_block = p->chunk_size >> POOL_MAX_ORDER;
	if (p->min_block > p->chunk_size)
		p->min_block = p->chunk_size;
	p->max_order = log2_floor(p->chunk_size / p->min_block);
	p->capacity = capacity;
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

void odx__pool_free_all(odx__pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->ndrv; i++) {
		p->ops.free(p->ops.user, p->drv[i].handle, p->drv[i].size);
		free(p->drv[i].tree);
	}
	free(p->drv);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Lock held. A dedicated allocation of `rounded` bytes for a request of `size`. */
static int alloc_dedicated(odx__pool *p, size_t size, size_t rounded, uint64_t *handle)
{
	pool_alloc a = {.size = rounded, .used = rounded, .nallocs = 1};
	int rc;

	make_room(p, rounded);
	rc = p->ops.alloc(p->ops.user, rounded, &a.handle);
	if (rc)
		return rc < 0 ? rc : ODX_EBACKEND;
	rc = drv_insert(p, &a);
	if (rc) {
		p->ops.free(p->ops.user, a.handle, rounded);
		return rc;
	}
	p->ndedicated++;
	p->dedicated_bytes += rounded;
	p->used += rounded;
	p->requested += size;
	p->allocs++;
	*handle = a.handle;
	return 0;
}

/* Lock held. A chunk with a free block of order k: the fullest that has one (so that the
 * emptier ones may drain and be trimmed), or a new one. */
static int chunk_for(odx__pool *p, unsigned k, pool_alloc **out)
{
	pool_alloc a = {.size = p->chunk_size}, *best = NULL;
	bool found;
	int rc;

	for (size_t i = 0; i < p->ndrv; i++) {
		pool_alloc *c = &p->drv[i];

		if (c->tree && c->tree[1] > k && (!best || c->used > best->used))
			best = c;
	}
	if (best) {
		*out = best;
		return 0;
	}
	make_room(p, p->chunk_size);
	a.tree = tree_new(p->max_order);
	if (!a.tree)
		return ODX_ENOMEM;
	rc = p->ops.alloc(p->ops.user, p->chunk_size, &a.handle);
	if (rc) {
		free(a.tree);
		return rc < 0 ? rc : ODX_EBACKEND;
	}
	rc = drv_insert(p, &a);
	if (rc) {
		p->ops.free(p->ops.user, a.handle, p->chunk_size);
		free(a.tree);
		return rc;
	}
	p->nchunks++;
	p->chunk_bytes += p->chunk_size;
	*out = &p->drv[drv_find(p, a.handle, &found)];
	return 0;
}

int odx__pool_alloc(odx__pool *p, size_t size, uint64_t *handle, uint64_t *offset)
{
	pool_alloc *c;
	unsigned k = 0;
	size_t rounded;
	int rc;

	if (!p || size == 0 || !handle || !offset)
		return ODX_EINVAL;
	pthread_mutex_lock(&p->lock);
	if (size > p->chunk_size / 2) {
		rounded = (size + p->align - 1) & ~(p->align - 1);
		if (rounded < size || p->used + rounded > p->capacity) {
			rc = ODX_ENOSPC;
		} else {
			rc = alloc_dedicated(p, size, rounded, handle);
			if (rc == 0)
				*offset = 0;
		}
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	while ((p->min_block << k) < size)
		k++;
	rounded = p->min_block << k;
	if (p->used + rounded > p->capacity) {
		pthread_mutex_unlock(&p->lock);
		return ODX_ENOSPC;
	}
	rc = chunk_for(p, k, &c);
	if (rc == 0) {
		*offset = (uint64_t)tree_alloc(c->tree, p->max_order, k) * rounded;
		*handle = c->handle;
		c->used += rounded;
		c->nallocs++;
		p->used += rounded;
		p->requested += size;
		p->allocs++;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

bool odx__pool_release(odx__pool *p, uint64_t handle, uint64_t offset, size_t size)
{
	pool_alloc *c, gone = {0};
	unsigned k = 0;
	bool found;
	size_t at;

	if (!p || size == 0)
		return false;
	pthread_mutex_lock(&p->lock);
	at = drv_find(p, handle, &found);
	if (!found)
		goto out_unlock; /* not ours: nothing to do (and nothing safe to do) */
	c = &p->drv[at];
	if (!c->tree) {
		/* Dedicated: back to the driver, outside the lock (a free may wait for the
		 * device). */
		p->used -= c->size;
		p->requested -= size;
		p->allocs--;
		gone = *c;
		drv_remove(p, at);
		pthread_mutex_unlock(&p->lock);
		p->ops.free(p->ops.user, gone.handle, gone.size);
		return true;
	}
	while ((p->min_block << k) < size)
		k++;
	if (offset % ((uint64_t)p->min_block << k) == 0 && offset < c->size &&
	    tree_release(c->tree, p->max_order, k,
			 (size_t)(offset / ((uint64_t)p->min_block << k)))) {
		c->used -= (uint64_t)p->min_block << k;
		c->nallocs--;
		p->used -= (uint64_t)p->min_block << k;
		p->requested -= size;
		p->allocs--;
	}

out_unlock:
	pthread_mutex_unlock(&p->lock);
	return found;
}

void odx__pool_get_stats(const odx__pool *p, odx__pool_stats *s)
{
	pthread_mutex_t *lock = (pthread_mutex_t *)&p->lock;
	uint64_t free_bytes = 0, largest = 0, whole = 0;

	pthread_mutex_lock(lock);
	for (size_t i = 0; i < p->ndrv; i++) {
		const pool_alloc *c = &p->drv[i];
		uint64_t big;

		if (!c->tree)
			continue;
		free_bytes += c->size - c->used;
		big = c->tree[1] ? (uint64_t)p->min_block << (c->tree[1] - 1) : 0;
		whole += big;
		if (big > largest)
			largest = big;
	}
	*s = (odx__pool_stats){
		.capacity = p->capacity,
		.used = p->used,
		.requested = p->requested,
		.chunks = p->nchunks,
		.chunk_bytes = p->chunk_bytes,
		.dedicated = p->ndedicated,
		.dedicated_bytes = p->dedicated_bytes,
		.largest_free = largest,
		.allocs = p->allocs,
		.fragmentation = free_bytes ? 1.0 - (double)whole / (double)free_bytes : 0.0,
	};
	pthread_mutex_unlock(lock);
}

void odx__pool_trim(odx__pool *p)
{
	pool_alloc *gone;
	size_t n;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	/* The driver frees happen after the lock is dropped when there is room to list them. */
	gone = p->ndrv ? malloc(p->ndrv * sizeof(*gone)) : NULL;
	n = drop_empty_chunks(p, gone);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; gone && i < n; i++)
		p->ops.free(p->ops.user, gone[i].handle, gone[i].size);
	free(gone);
}

uint64_t odx__pool_rounded_size(const odx__pool *p, size_t size)
{
	uint64_t r = p->min_block;

	if (size > p->chunk_size / 2)
		return ((uint64_t)size + p->align - 1) & ~((uint64_t)p->align - 1);
	while (r < size)
		r <<= 1;
	return r;
}

size_t odx__pool_chunk_size(const odx__pool *p)
{
	return p->chunk_size;
}

size_t odx__pool_min_block(const odx__pool *p)
{
	return p->min_block;
}

size_t odx__pool_align(const odx__pool *p)
{
	return p->align;
}

/* ---- the pinned staging pool ---------------------------------------------------------------- */

struct odx__pinned {
	pthread_mutex_t lock;
	char *base;
	size_t block, nblocks;
	uint8_t *taken; /* per block: 1 while handed out */
	uint64_t in_use, peak, gets, fallbacks;
};

int odx__pinned_new(void *base, size_t block, size_t nblocks, odx__pinned **out)
{
	odx__pinned *p;

	if (!base || block == 0 || nblocks == 0 || !out)
		return ODX_EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ODX_ENOMEM;
	p->taken = calloc(nblocks, 1);
	if (!p->taken) {
		free(p);
		return ODX_ENOMEM;
	}
	p->base = base;
	p->block = block;
	p->nblocks = nblocks;
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

void odx__pinned_free(odx__pinned *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p->taken);
	free(p);
}

void *odx__pinned_get(odx__pinned *p, size_t n)
{
	size_t want, run = 0, i;
	void *got = NULL;

	if (!p || n == 0)
		return NULL;
	want = n / p->block + (n % p->block != 0);
	pthread_mutex_lock(&p->lock);
	/* First fit: the pool holds few blocks (tens), so a scan is cheaper than any index. */
	for (i = 0; want <= p->nblocks && i < p->nblocks; i++) {
		run = p->taken[i] ? 0 : run + 1;
		if (run == want) {
			size_t first = i + 1 - want;

			memset(p->taken + first, 1, want);
			p->in_use += want;
			if (p->in_use > p->peak)
				p->peak = p->in_use;
			p->gets++;
			got = p->base + first * p->block;
			break;
		}
	}
	if (!got)
		p->fallbacks++;
	pthread_mutex_unlock(&p->lock);
	return got;
}

bool odx__pinned_put(odx__pinned *p, void *ptr, size_t n)
{
	size_t first, count;
	char *c = ptr;

	if (!p || !c || c < p->base || c >= p->base + p->block * p->nblocks)
		return false;
	first = (size_t)(c - p->base) / p->block;
	count = n / p->block + (n % p->block != 0);
	pthread_mutex_lock(&p->lock);
	memset(p->taken + first, 0, count);
	p->in_use -= count;
	pthread_mutex_unlock(&p->lock);
	return true;
}

void odx__pinned_get_stats(const odx__pinned *p, odx__pinned_stats *s)
{
	pthread_mutex_t *lock = (pthread_mutex_t *)&p->lock;

	pthread_mutex_lock(lock);
	*s = (odx__pinned_stats){.block = p->block,
				 .blocks = p->nblocks,
				 .in_use = p->in_use,
				 .peak = p->peak,
				 .gets = p->gets,
				 .fallbacks = p->fallbacks};
	pthread_mutex_unlock(lock);
}
