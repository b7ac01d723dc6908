/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - the device-memory pool (buffers carved from a few large driver allocations) and the
 * pinned staging pool (fixed-size host blocks for bounce copies).
 *
 * The pool hands out (handle, offset) pairs: `handle` is what the backend's mem_alloc returned
 * for a chunk (or for a dedicated allocation), `offset` a multiple of the pool's alignment inside
 * it. The core passes them to the backend as odx_backend_arg.mem / .v.offset (ABI 1.2) and as
 * the dst_off / src_off of copies. The pool never touches device memory itself.
 *
 * Algorithm (see pool.c for why): a binary buddy allocator per chunk, metadata in host memory.
 *
 * Threads: every function may be called from any thread; the pool has its own mutex. The chunk
 * ops are called with that mutex held from odx__pool_alloc (a new chunk, a dedicated allocation,
 * or empty chunks given back to make room) and without it from odx__pool_release (a dedicated
 * allocation), odx__pool_trim (unless it is out of memory for its list) and odx__pool_free_all;
 * they must not call back into the pool. Outstanding regions are never moved.
 */
#ifndef ODX_CORE_POOL_H
#define ODX_CORE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

typedef struct odx__pool odx__pool;

/* How the pool gets device memory: wraps the backend's mem_alloc / mem_free. */
typedef struct odx__pool_chunk_ops {
	/* 0 and *handle, or a negative ODX_E* code (ODX_ENOMEM, a backend error) passed on. */
	int (*alloc)(void *user, size_t size, uint64_t *handle);
	/* `size` is what alloc was asked for. */
	void (*free)(void *user, uint64_t handle, size_t size);
	void *user;
} odx__pool_chunk_ops;

/*
 * Creates a pool. `ops` is copied. chunk_size: the size of the large driver allocations (e.g.
 * 256 MiB, or capacity / 4 when that is smaller); it is rounded down to a power of two.
 * align: the device's mem_align (a power of two; 0 means 256); every offset is a multiple of it.
 * capacity: the tier's enforced capacity in bytes. Requests larger than chunk_size / 2 get a
 * dedicated allocation of their own (offset 0). Nothing is allocated until the first request.
 * Returns 0, ODX_EINVAL (bad arguments) or ODX_ENOMEM; *out is not touched on failure.
 */
int odx__pool_new(const odx__pool_chunk_ops *ops, size_t chunk_size, size_t align,
		  uint64_t capacity, odx__pool **out);

/* Returns every chunk and dedicated allocation to the driver (what is still handed out too) and
 * frees the pool. NULL is a no-op. */
void odx__pool_free_all(odx__pool *p);

/*
 * `size` bytes (> 0): sets *handle and *offset. Returns ODX_ENOSPC when the request would take
 * the pool past its capacity (accounting is by the rounded size, see odx__pool_stats.used),
 * ODX_ENOMEM or the backend's error when the driver refuses a new chunk or dedicated allocation
 * (nothing changed then), ODX_EINVAL for size 0. The outputs are not touched on failure.
 */
int odx__pool_alloc(odx__pool *p, size_t size, uint64_t *handle, uint64_t *offset);

/* Gives back what odx__pool_alloc returned, with the same `size`. A dedicated allocation goes
 * back to the driver at once; a chunk stays (see odx__pool_trim). Returns false, doing nothing,
 * when `handle` is not one of the pool's (memory the caller got from the driver directly). */
bool odx__pool_release(odx__pool *p, uint64_t handle, uint64_t offset, size_t size);

typedef struct odx__pool_stats {
	uint64_t capacity;    /* as given */
	uint64_t used;	      /* rounded bytes handed out (chunks and dedicated): what counts */
	uint64_t requested;   /* bytes asked for by what is handed out; used - requested is
				 * internal fragmentation */
	uint64_t chunks;      /* chunks held from the driver */
	uint64_t chunk_bytes; /* their bytes */
	uint64_t dedicated;   /* dedicated allocations held */
	uint64_t dedicated_bytes;
	uint64_t largest_free; /* the largest block a chunk could hand out now */
	uint64_t allocs;       /* handed out now (chunks and dedicated) */
	/* External fragmentation of the chunks' free space: the share of it outside the largest
	 * free block of its chunk (0 when each chunk's free space is one block, or there is none;
	 * near 1 when it is all in pieces). */
	double fragmentation;
} odx__pool_stats;

void odx__pool_get_stats(const odx__pool *p, odx__pool_stats *s);

/* Returns chunks with nothing allocated in them to the driver (under memory pressure, at idle).
 * odx__pool_stats.chunk_bytes tells what is still held. */
void odx__pool_trim(odx__pool *p);

/* What a request of `size` bytes counts against the capacity (and takes): a power-of-two
 * multiple of the smallest block, or for a dedicated allocation `size` rounded up to the
 * alignment. Reservations made with this size agree with odx__pool_alloc's ODX_ENOSPC. */
uint64_t odx__pool_rounded_size(const odx__pool *p, size_t size);

/* What `size` bytes count on a memory node whose pool is p: the rounded size, or `size` itself
 * without a pool (NULL). */
static inline uint64_t odx__pool_charge(const odx__pool *p, size_t size)
{
	return p ? odx__pool_rounded_size(p, size) : size;
}

/* The pool's effective parameters: chunk size (a power of two), the smallest block (every
 * request is rounded up to a power-of-two multiple of it) and the alignment of offsets. */
size_t odx__pool_chunk_size(const odx__pool *p);
size_t odx__pool_min_block(const odx__pool *p);
size_t odx__pool_align(const odx__pool *p);

/* ---- the pinned staging pool ---------------------------------------------------------------- */

/*
 * Fixed-size blocks over one host region the caller allocated (page-locked by a backend's
 * host_alloc, or pre-faulted and mlock'ed), handed out as runs of consecutive blocks for the
 * host bounce buffers of copies (disk tier to device, device to device of another backend).
 * The region is never freed or moved by the pool. Every function may be called from any thread.
 */
typedef struct odx__pinned odx__pinned;

/* Blocks of `block` bytes over base[0 .. block * nblocks). 0, ODX_EINVAL or ODX_ENOMEM; *out is
 * not touched on failure. */
int odx__pinned_new(void *base, size_t block, size_t nblocks, odx__pinned **out);
void odx__pinned_free(odx__pinned *p); /* the pool, not the region; NULL is a no-op */

/* `n` bytes (> 0) as the first run of free consecutive blocks that holds them, or NULL when none
 * is free (counted as a fallback: the caller mallocs). */
void *odx__pinned_get(odx__pinned *p, size_t n);
/* Gives back what odx__pinned_get returned (same `n`); false, doing nothing, if `ptr` is not in
 * the pool's region. */
bool odx__pinned_put(odx__pinned *p, void *ptr, size_t n);

typedef struct odx__pinned_stats {
	uint64_t block;     /* bytes per block */
	uint64_t blocks;    /* in the pool */
	uint64_t in_use;    /* blocks handed out now */
	uint64_t peak;      /* the most ever handed out at once */
	uint64_t gets;      /* bounce buffers served from the pool */
	uint64_t fallbacks; /* requests it could not serve (larger than its free runs) */
} odx__pinned_stats;

void odx__pinned_get_stats(const odx__pinned *p, odx__pinned_stats *s);

/* tier.c owns both for a context: its pinned staging pool (NULL without one), and a read-only,
 * zero-filled host region at least as large as every pooled memory node (NULL when no node is
 * pooled), the source that zero-fills pooled device memory. */
odx__pinned *odx__tier_pinned(odx_context *ctx);
const void *odx__tier_zeros(odx_context *ctx, size_t n);

#endif /* ODX_CORE_POOL_H */
