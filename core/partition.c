/* SPDX-License-Identifier: Apache-2.0 */
/*
 * partition.c - buffer partitions: splitting a buffer into parts without copying it (1D blocks,
 * 2D tiles of a matrix with a leading dimension), gathering them back, and destroying a parent
 * with its parts (docs/partitions.md).
 *
 * The switches are synchronous, like StarPU's starpu_data_partition: a partition waits for the
 * parent's users and leaves its latest bytes in its host copy, the only one it keeps; each part
 * is then a buffer whose home replica is an alias into that host copy (core.h,
 * odx__replica_is_alias), and whose other replicas are packed copies the memory wing moves with
 * strided copies (mem/copy.c). An unpartition waits for the parts' users and writes each part's
 * latest copy back into its alias. Above the memory wing, like buffer.c.
 *
 * On several ranks (docs/partitions.md, "Several ranks") a partition first brings every rank
 * the parent's latest bytes and an unpartition every rank each part's latest bytes (dist.c,
 * collective like odx_buffer_read); in between the parts are buffers of the replicated task
 * flow like any other, sent and received packed (dist.c, odx__dist_run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem/mem.h"

int odx__buffer_partitioned(const odx_buffer *buf, const char *fn)
{
	int n = atomic_load(&buf->nparts);

	if (n == 0)
		return 0;
	return odx__fail(buf->ctx, ODX_EBUSY,
			 "%s: buffer #%llu is partitioned into %d parts: call "
			 "odx_buffer_unpartition first",
			 fn, (unsigned long long)buf->id, n);
}

/* One part as the description makes it: where it starts in the parent and its runs there. */
typedef struct part_desc {
	size_t off;
	odx_shape shape;
} part_desc;

/* The parts of an ODX_PART_BLOCKS description: *n of them into d (NULL: count only). */
static int describe_blocks(odx_buffer *buf, const odx_partition *p, int nparts, part_desc *d,
			   int *n, const char *fn)
{
	odx_context *ctx = buf->ctx;
	size_t elem = p->elem_size ? p->elem_size : 1, off = 0, per, elems;
	int i;

	if (p->sizes) {
		/* Explicit sizes: nparts of them, in order, within the buffer. */
		for (i = 0; i < nparts; i++) {
			size_t sz = p->sizes[i];

			if (sz == 0 || sz % elem != 0 || sz > buf->size - off)
				return odx__fail(ctx, ODX_EINVAL,
						 "%s: block %d of %zu bytes %s (buffer #%llu: %zu "
						 "bytes, %zu before it, elem_size %zu)",
						 fn, i, sz,
						 sz == 0 ? "is empty"
						 : sz % elem ? "is not a whole number of elements"
							     : "runs past the end of the buffer",
						 (unsigned long long)buf->id, buf->size, off, elem);
			if (d)
				d[i] = (part_desc){off, {sz, 1, sz}};
			off += sz;
		}
		*n = nparts;
		return 0;
	}
	/* Equal parts: ceil(elements / nparts) elements each, the last one to the end. */
	elems = buf->size / elem;
	if (elems == 0 || nparts <= 0)
		return odx__fail(ctx, ODX_EINVAL,
				 "%s: buffer #%llu (%zu bytes) holds no whole element of %zu bytes",
				 fn, (unsigned long long)buf->id, buf->size, elem);
	per = (elems + (size_t)nparts - 1) / (size_t)nparts;
	*n = (int)((elems + per - 1) / per);
	for (i = 0; d && i < *n; i++) {
		size_t sz = i == *n - 1 ? buf->size - off : per * elem;

		d[i] = (part_desc){off, {sz, 1, sz}};
		off += sz;
	}
	return 0;
}

/* The parts of an ODX_PART_TILES description, column of tiles after column of tiles. */
static int describe_tiles(odx_buffer *buf, const odx_partition *p, part_desc *d, int *n,
			  const char *fn)
{
	odx_context *ctx = buf->ctx;
	size_t elem = p->elem_size, mt, nt, i, j, end, lines, line_len, pitch;

	if (!elem || !p->rows || !p->cols || !p->tile_rows || !p->tile_cols)
		return odx__fail(ctx, ODX_EINVAL,
				 "%s: tiles need elem_size, rows, cols, tile_rows and tile_cols > 0",
				 fn);
	/* Column-major: cols lines of rows elements; row-major: rows lines of cols. */
	lines = p->row_major ? p->rows : p->cols;
	line_len = p->row_major ? p->cols : p->rows;
	if (p->ld < line_len)
		return odx__fail(ctx, ODX_EINVAL,
				 "%s: ld %zu is smaller than the %s (%zu elements)", fn, p->ld,
				 p->row_major ? "row length (cols)" : "column height (rows)", line_len);
	/* The last element is at (lines - 1) * ld + line_len - 1: inside the buffer? */
	if (__builtin_mul_overflow(lines - 1, p->ld, &end) ||
	    __builtin_add_overflow(end, line_len, &end) ||
	    __builtin_mul_overflow(end, elem, &end) || end > buf->size)
		return odx__fail(ctx, ODX_EINVAL,
				 "%s: a %zu x %zu matrix with ld %zu of %zu-byte elements does not "
				 "fit in buffer #%llu (%zu bytes)",
				 fn, p->rows, p->cols, p->ld, elem, (unsigned long long)buf->id,
				 buf->size);
	mt = (p->rows + p->tile_rows - 1) / p->tile_rows;
	nt = (p->cols + p->tile_cols - 1) / p->tile_cols;
	if (mt * nt > (size_t)INT32_MAX)
		return odx__fail(ctx, ODX_EINVAL, "%s: %zu x %zu tiles is too many", fn, mt, nt);
	*n = (int)(mt * nt);
	pitch = p->ld * elem;
	for (j = 0; d && j < nt; j++)
		for (i = 0; i < mt; i++) {
			size_t r0 = i * p->tile_rows, c0 = j * p->tile_cols;
			size_t h = p->rows - r0 < p->tile_rows ? p->rows - r0 : p->tile_rows;
			size_t w = p->cols - c0 < p->tile_cols ? p->cols - c0 : p->tile_cols;
			part_desc *t = &d[i + j * mt];

			/* A run is a column of the tile (column-major) or a row (row-major). */
			if (p->row_major)
				*t = (part_desc){(r0 * p->ld + c0) * elem, {w * elem, h, pitch}};
			else
				*t = (part_desc){(c0 * p->ld + r0) * elem, {h * elem, w, pitch}};
		}
	return 0;
}

static int describe(odx_buffer *buf, const odx_partition *p, int nparts, part_desc *d, int *n,
		    const char *fn)
{
	if (p->kind == ODX_PART_BLOCKS)
		return describe_blocks(buf, p, nparts, d, n, fn);
	if (p->kind == ODX_PART_TILES)
		return describe_tiles(buf, p, d, n, fn);
	return odx__fail(buf->ctx, ODX_EINVAL, "%s: partition kind %d is not one of "
			 "ODX_PART_BLOCKS, ODX_PART_TILES", fn, (int)p->kind);
}

/* A part of `parent` as `d` describes it, its home replica an alias into the parent's host copy
 * (which holds the parent's only valid bytes: it was gathered). */
static odx_buffer *part_new(odx_buffer *parent, const part_desc *d, size_t elem)
{
	odx_context *ctx = parent->ctx;
	int home = odx__home(parent);
	const odx__replica *pr = &parent->replicas[home];
	odx_buffer *b = odx__buffer_new(ctx, d->shape.width * d->shape.count);
	odx__replica *r;

	if (!b)
		return NULL;
	b->part_of = parent;
	b->part_off = d->off;
	b->part_shape = d->shape;
	b->part_elem = elem;
	b->home_rank = parent->home_rank;
	atomic_store(&b->home, home);
	pthread_mutex_lock(&b->lock);
	b->zero = false;
	r = &b->replicas[home];
	r->allocated = true;
	r->mem = pr->mem + pr->off + d->off;
	r->off = 0;
	odx__replica_set_state(b, home, ODX__MODIFIED);
	pthread_mutex_unlock(&b->lock);
	return b;
}

/* A part's struct goes (its users finished, its bytes are in the parent). */
static void part_kill(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	pthread_mutex_lock(&ctx->objects_lock);
	b->destroyed = true;
	pthread_mutex_unlock(&ctx->objects_lock);
	atomic_store(&b->dead, true);
	odx__buffer_release_memory(b);
}

ODX_API int odx_buffer_partition(odx_buffer *buf, const odx_partition *p, int nparts,
				 odx_buffer **parts, int timeout_ms)
{
	static const char fn[] = "odx_buffer_partition";
	odx_context *ctx;
	part_desc *d = NULL;
	odx_buffer **own = NULL;
	int rc, n = 0, i;
	size_t elem;

	rc = odx__buffer_check(buf, fn);
	if (rc)
		return rc;
	ctx = buf->ctx;
	ODX__CHECK_ARG(ctx, p, "p");
	ODX__CHECK_ARG(ctx, parts, "parts");
	ODX__CHECK_ARG(ctx, nparts > 0, "nparts");
	if (buf->part_of)
		return odx__fail(ctx, ODX_ENOSYS,
				 "%s: buffer #%llu is a part of buffer #%llu: parts cannot be "
				 "partitioned again in this version (docs/partitions.md, Limits)",
				 fn, (unsigned long long)buf->id, (unsigned long long)buf->part_of->id);
	rc = odx__buffer_partitioned(buf, fn);
	if (rc)
		return rc;
	if (buf->layout)
		return odx__fail(ctx, ODX_EBUSY,
				 "%s: buffer #%llu has parts with lengths (odx_buffer_set_parts): "
				 "remove them first (odx_buffer_set_parts(buf, NULL, 0))",
				 fn, (unsigned long long)buf->id);
	rc = describe(buf, p, nparts, NULL, &n, fn);
	if (rc)
		return rc;
	if (n != nparts)
		return odx__fail(ctx, ODX_EINVAL,
				 "%s: the description makes %d parts of buffer #%llu, nparts is %d", fn,
				 n, (unsigned long long)buf->id, nparts);
	d = calloc((size_t)n, sizeof(*d));
	own = calloc((size_t)n, sizeof(*own));
	if (!d || !own) {
		rc = odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
		goto out_free;
	}
	describe(buf, p, nparts, d, &n, fn);
	/* Several ranks: every rank gets the parent's latest bytes (nothing moves when each one
	 * has them already, as for registered or written memory), so every part starts valid on
	 * every rank, where tasks on it may run. */
	rc = odx__dist_read(buf);
	if (rc)
		goto out_free;
	/* The latest bytes into the host copy, every other copy gone: the parts alias it. */
	rc = odx__buffer_gather(buf, timeout_ms, fn);
	if (rc)
		goto out_free;
	atomic_store(&buf->nparts, n); /* the parent refuses its users from here on */
	odx__buffer_drop_copies(buf);
	elem = p->elem_size ? p->elem_size : 1;
	for (i = 0; i < n; i++) {
		own[i] = part_new(buf, &d[i], elem);
		if (!own[i]) {
			while (i-- > 0)
				part_kill(own[i]);
			atomic_store(&buf->nparts, 0);
			rc = odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
			goto out_free;
		}
	}
	buf->parts = own;
	own = NULL;
	memcpy(parts, buf->parts, (size_t)n * sizeof(*parts));
out_free:
	free(own);
	free(d);
	return rc;
}

/* Milliseconds left before `deadline_ns` (0 at least), or -1 for no deadline. */
static int remaining_ms(uint64_t deadline_ns)
{
	uint64_t now = odx__now_ns();

	if (deadline_ns == 0)
		return -1;
	return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

ODX_API int odx_buffer_unpartition(odx_buffer *buf, int timeout_ms)
{
	static const char fn[] = "odx_buffer_unpartition";
	uint64_t deadline = timeout_ms < 0 ? 0 : odx__now_ns() + (uint64_t)timeout_ms * 1000000u;
	int rc, n, i, home;

	rc = odx__buffer_check(buf, fn);
	if (rc)
		return rc;
	n = atomic_load(&buf->nparts);
	if (n == 0)
		return odx__fail(buf->ctx, ODX_EINVAL, "%s: buffer #%llu is not partitioned", fn,
				 (unsigned long long)buf->id);
	/* Several ranks: each part's latest version goes to every rank that lacks it (from the
	 * rank that wrote it last), received straight into its runs in the parent's host copy,
	 * so that every rank's parent ends whole. Transfers already made count on a second call. */
	for (i = 0; i < n; i++) {
		rc = odx__dist_read(buf->parts[i]);
		if (rc)
			return rc;
	}
	/* Each part's latest bytes into its alias, in the parent's memory; a timeout leaves the
	 * partition as it is (gathered parts stay valid parts). */
	for (i = 0; i < n; i++) {
		rc = odx__buffer_gather(buf->parts[i], remaining_ms(deadline), fn);
		if (rc)
			return rc;
	}
	for (i = 0; i < n; i++) {
		odx__buffer_drop_copies(buf->parts[i]);
		part_kill(buf->parts[i]);
	}
	free(buf->parts);
	buf->parts = NULL;
	/* The parent's host copy holds what the parts wrote: the only valid copy, a new version. */
	home = odx__home(buf);
	pthread_mutex_lock(&buf->lock);
	odx__replica_set_state(buf, home, ODX__MODIFIED);
	buf->zero = false;
	buf->wversion++;
	buf->length = buf->size; /* every part's bytes are valid (parts have no run-time length) */
	pthread_mutex_unlock(&buf->lock);
	odx__dist_write(buf, true); /* whole on every rank, as a full write leaves a buffer */
	atomic_store(&buf->nparts, 0);
	return 0;
}

int odx__partition_destroy(odx_buffer *buf)
{
	odx_context *ctx = buf->ctx;
	int n = atomic_load(&buf->nparts), i;
	odx__task *t;

	/* The part handles die with the parent's handle. */
	pthread_mutex_lock(&ctx->objects_lock);
	for (i = 0; i < n; i++)
		buf->parts[i]->destroyed = true;
	pthread_mutex_unlock(&ctx->objects_lock);
	/* One destruction for them all, ordered after every user of the parent and the parts;
	 * staging brings registered memory each part's latest bytes (odx__buffer_keeps_bytes),
	 * and worker.c releases the parts, then the parent. */
	t = odx__task_new(ctx);
	if (t && n + 1 > ODX__INLINE_ARGS) {
		t->args = malloc((size_t)(n + 1) * sizeof(*t->args));
		if (!t->args) {
			t->args = t->inline_args;
			odx__task_put(t);
			t = NULL;
		}
	}
	if (!t) {
		/* Cannot defer: wait for the users, gather by hand, then free here. */
		odx_wait_all(ctx, -1);
		if (buf->registered)
			for (i = 0; i < n; i++)
				odx__buffer_gather(buf->parts[i], -1, "odx_buffer_destroy");
		odx__partition_release_parts(buf);
		return odx__buffer_release_memory(buf);
	}
	t->kind = ODX__TASK_DESTROY;
	t->nargs = n + 1;
	t->args[0] = ODX_BUF(buf, ODX_RW);
	for (i = 0; i < n; i++)
		t->args[i + 1] = ODX_BUF(buf->parts[i], ODX_RW);
	/* Never blocks, not even on the in-flight bound: admission is forced. */
	return odx__task_submit(ctx, t, ODX__ADMIT_FORCE);
}

void odx__partition_release_parts(odx_buffer *buf)
{
	int n = atomic_load(&buf->nparts), i;

	for (i = 0; i < n; i++) {
		odx_buffer *b = buf->parts[i];

		atomic_store(&b->dead, true);
		odx__buffer_release_memory(b);
	}
	free(buf->parts);
	buf->parts = NULL;
	atomic_store(&buf->nparts, 0);
}

/* ---- parts with run-time lengths (docs/sizes.md) ----------------------------------------- */

/*
 * The same ODX_PART_BLOCKS description as a partition, but the buffer stays one: only its valid
 * bytes get a layout (core.h, odx__layout). The layout is a fact of the replicated flow, like an
 * owner: every rank sets it at the same point of its program. It is swapped once no task of this
 * rank uses the buffer, so a task, a copy or a transfer never sees it change under it (a
 * transfer's part count is fixed at its submission, the same on both ranks).
 */
ODX_API int odx_buffer_set_parts(odx_buffer *buf, const odx_partition *p, int nparts)
{
	static const char fn[] = "odx_buffer_set_parts";
	odx_context *ctx;
	odx__layout *lay = NULL, *old;
	part_desc *d = NULL;
	int rc, n = 0, i;

	rc = odx__buffer_check(buf, fn);
	if (rc)
		return rc;
	ctx = buf->ctx;
	if (buf->part_of)
		return odx__fail(ctx, ODX_ENOSYS,
				 "%s: buffer #%llu is a part of buffer #%llu: parts of a partition "
				 "take no layout in this version (docs/sizes.md, Limits)",
				 fn, (unsigned long long)buf->id, (unsigned long long)buf->part_of->id);
	rc = odx__buffer_partitioned(buf, fn);
	if (rc)
		return rc;
	if (nparts == 0 && !p) {
		lay = NULL; /* no layout: the length is the capacity again */
	} else {
		ODX__CHECK_ARG(ctx, p, "p");
		ODX__CHECK_ARG(ctx, nparts > 0, "nparts");
		if (p->kind != ODX_PART_BLOCKS)
			return odx__fail(ctx, ODX_EINVAL,
					 "%s: parts with lengths are ODX_PART_BLOCKS (kind %d given)",
					 fn, (int)p->kind);
		rc = describe_blocks(buf, p, nparts, NULL, &n, fn);
		if (rc)
			return rc;
		if (n != nparts)
			return odx__fail(ctx, ODX_EINVAL,
					 "%s: the description makes %d parts of buffer #%llu, nparts "
					 "is %d",
					 fn, n, (unsigned long long)buf->id, nparts);
		d = calloc((size_t)n, sizeof(*d));
		lay = malloc(sizeof(*lay) + 3 * (size_t)n * sizeof(size_t));
		if (!d || !lay) {
			free(d);
			free(lay);
			return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
		}
		describe_blocks(buf, p, nparts, d, &n, fn);
		lay->nparts = n;
		lay->off = (size_t *)(lay + 1);
		lay->cap = lay->off + n;
		lay->len = lay->cap + n;
		for (i = 0; i < n; i++) {
			lay->off[i] = d[i].off;
			lay->cap[i] = lay->len[i] = d[i].shape.width;
		}
		free(d);
	}
	/* In program order: after this rank's tasks submitted so far that use the buffer. */
	rc = odx__buffer_wait_users(buf, fn);
	if (rc) {
		free(lay);
		return rc;
	}
	pthread_mutex_lock(&buf->lock);
	old = buf->layout;
	buf->layout = lay;
	buf->length = lay ? 0 : buf->size;
	for (i = 0; lay && i < lay->nparts; i++)
		buf->length += lay->len[i];
	pthread_mutex_unlock(&buf->lock);
	free(old);
	return 0;
}
