/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subbuf.c - device memory handles and the regions of them that launches and copies use.
 *
 * ABI 1.2 lets the core name (handle, offset): it carves many buffers out of one large
 * allocation. OpenCL 1.2 has no pointer arithmetic on kernel arguments, so a region is a
 * sub-buffer (clCreateSubBuffer) whose origin is a multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN.
 * Copies go through sub-buffers too, unless they cover the whole allocation: OpenCL leaves
 * concurrent use of a buffer and of its sub-buffers undefined, while disjoint sub-buffers are
 * fine, and the copy queue and the compute queue do run concurrently.
 *
 * Creating a sub-buffer for every launch would cost a driver call each time, so each device
 * caches them in a direct-mapped table keyed by (allocation, origin, size). A slot taken by
 * another region evicts its sub-buffer; the caller releases what was evicted only after it has
 * queued its command, so that a sub-buffer already set as an argument of that same command
 * stays alive until the driver holds its own reference. Freeing an allocation drops its entries.
 */
#include <stdio.h>
#include <stdlib.h>

#include "clb.h"

/* Slots of a device's sub-buffer table (a power of two). */
#define CLB_SUB_SLOTS 4096

static size_t clb_sub_slot(const clb_buf *b, size_t origin, size_t size)
{
	uint64_t h = (uint64_t)(uintptr_t)b * 0x9e3779b97f4a7c15ull;

	h ^= (uint64_t)origin * 0xc2b2ae3d27d4eb4full;
	h ^= (uint64_t)size * 0x165667b19e3779f9ull;
	h ^= h >> 29;
	return (size_t)(h & (CLB_SUB_SLOTS - 1));
}

int clb_region(clb_dev *d, clb_buf *b, size_t off, size_t n, clb_region_out *out, char *msg,
	       size_t msg_size)
{
	const clb_api *cl = &d->st->api;
	cl_buffer_region region;
	clb_sub *slot;
	cl_mem sub;
	cl_int err;

	out->evicted = NULL;
	if (off > b->size || n > b->size - off) {
		snprintf(msg, msg_size, "%zu bytes at offset %zu of a %zu-byte allocation", n, off,
			 b->size);
		return ODX_ERANGE;
	}
	/* The whole allocation, or nothing moved: the buffer itself. */
	if ((off == 0 && n == b->size) || n == 0) {
		out->mem = b->mem;
		out->off = off;
		return 0;
	}
	region.origin = off & ~(d->mem_align - 1);
	region.size = off + n - region.origin;
	out->off = off - region.origin;

	pthread_mutex_lock(&d->sub_lock);
	if (!d->subs) {
		d->subs = calloc(CLB_SUB_SLOTS, sizeof(*d->subs));
		if (!d->subs) {
			pthread_mutex_unlock(&d->sub_lock);
			snprintf(msg, msg_size, "out of memory");
			return ODX_ENOMEM;
		}
	}
	slot = &d->subs[clb_sub_slot(b, region.origin, region.size)];
	if (slot->parent == b && slot->origin == region.origin && slot->size == region.size) {
		out->mem = slot->mem;
		pthread_mutex_unlock(&d->sub_lock);
		return 0;
	}
	sub = cl->clCreateSubBuffer(b->mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
	if (err != CL_SUCCESS) {
		pthread_mutex_unlock(&d->sub_lock);
		return clb_check(err, "clCreateSubBuffer", d, region.size, msg, msg_size);
	}
	if (slot->parent) {
		out->evicted = slot->mem;
		slot->parent->nsubs--;
	}
	*slot = (clb_sub){.parent = b, .origin = region.origin, .size = region.size, .mem = sub};
	b->nsubs++;
	out->mem = sub;
	pthread_mutex_unlock(&d->sub_lock);
	return 0;
}

void clb_region_done(clb_dev *d, clb_region_out *r)
{
	if (r->evicted)
		d->st->api.clReleaseMemObject(r->evicted);
	r->evicted = NULL;
}

void clb_region_forget(clb_dev *d, clb_buf *b)
{
	size_t i;

	pthread_mutex_lock(&d->sub_lock);
	for (i = 0; b->nsubs > 0 && i < CLB_SUB_SLOTS; i++) {
		if (d->subs[i].parent != b)
			continue;
		/* The driver keeps a sub-buffer alive while queued commands still use it. */
		d->st->api.clReleaseMemObject(d->subs[i].mem);
		d->subs[i] = (clb_sub){0};
		b->nsubs--;
	}
	pthread_mutex_unlock(&d->sub_lock);
}

void clb_region_fini(clb_dev *d)
{
	size_t i;

	for (i = 0; d->subs && i < CLB_SUB_SLOTS; i++)
		if (d->subs[i].parent)
			d->st->api.clReleaseMemObject(d->subs[i].mem);
	free(d->subs);
	d->subs = NULL;
}
