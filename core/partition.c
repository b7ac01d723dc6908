/* SPDX-License-Identifier: Apache-2.0 */
/*
 * partition.c - buffer partitions: splitting a buffer into parts without copying it (1D blocks,
 * 2D tiles of a matrix with a leading dimension), gathering them back, and destroying a parent
 * with its parts (docs/partitions.md).
 *
 * The switches are tasks in the graph (ODX__TASK_PARTITION, ODX__TASK_UNPARTITION), like the
 * switch task of StarPU's starpu_data_partition_submit: the partition's staging brings the
 * parent's latest bytes into its host copy, the only one it keeps; each part is then a buffer
 * whose home replica is an alias into that host copy (core.h, odx__replica_is_alias), and whose
 * other replicas are packed copies the memory wing moves with strided copies (mem/copy.c). The
 * unpartition's staging writes every part's latest copy back into its alias at once, and its end
 * releases the parts. The asynchronous calls submit a switch and return; the synchronous ones
 * wait for the users (with their timeout), then for the switch. Above the memory wing, like
 * buffer.c.
 *
 * On several ranks (docs/partitions.md, "Several ranks") a partition first brings every rank
 * the parent's latest bytes and an unpartition every rank each part's latest bytes (dist.c,
 * collective like odx_buffer_read); in between the parts are buffers of the replicated task
 * flow like any other, sent and received packed (dist.c, odx__dist_run).
 */
#include <limits.h>
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

/* A part of `parent` as `d` describes it, at home on host node `home` (the parent's). Its home
 * replica, an alias into the parent's host copy, is made when the partition switch runs
 * (parts_alias): until then nothing touches it, since every user of the part is ordered after
 * the switch. */
static odx_buffer *part_new(odx_buffer *parent, int home, const part_desc *d, size_t elem)
{
	odx_buffer *b = odx__buffer_new(parent->ctx, d->shape.width * d->shape.count);

	if (!b)
		return NULL;
	b->part_of = parent;
	b->part_off = d->off;
	b->part_shape = d->shape;
	b->part_elem = elem;
	b->home_rank = parent->home_rank;
	atomic_store(&b->home, home);
	return b;
}

/* A part's struct goes (its users finished, its bytes are in the parent, or it was never used). */
static void part_kill(odx_buffer *b)
{
	odx_context *ctx = b->ctx;

	pthread_mutex_lock(&ctx->objects_lock);
	b->destroyed = true;
	pthread_mutex_unlock(&ctx->objects_lock);
	atomic_store(&b->dead, true);
	odx__buffer_release_memory(b);
}

/* ---- the switches: tasks in the graph (docs/partitions.md, "Coherence rules") --------------- */

/*
 * A partition switch over `parent` and its n parts, for odx__task_submit: ODX__TASK_PARTITION
 * reads and writes the parent and writes the parts, so it runs after the parent's users and
 * before the parts'; ODX__TASK_UNPARTITION writes the parent and reads and writes the parts, so
 * it runs after the parts' users and before the parent's next ones. Like StarPU's switch task of
 * starpu_data_partition_submit, but it moves bytes itself: staging brings what it reads to the
 * parent's host node (stage.c, stages_arg), all of it at once.
 */
static odx__task *switch_new(odx_buffer *parent, int kind, odx_buffer *const *parts, int n)
{
	odx_context *ctx = parent->ctx;
	odx__task *t = odx__task_new(ctx);
	bool part = kind == ODX__TASK_PARTITION;
	int i;

	if (!t)
		return NULL;
	if (n + 1 > ODX__INLINE_ARGS) {
		t->args = malloc((size_t)(n + 1) * sizeof(*t->args));
		if (!t->args) {
			t->args = t->inline_args;
			odx__task_put(t);
			return NULL;
		}
	}
	t->kind = (uint8_t)kind;
	t->nargs = n + 1;
	t->args[0] = ODX_BUF(parent, part ? ODX_RW : ODX_W);
	for (i = 0; i < n; i++)
		t->args[i + 1] = ODX_BUF(parts[i], part ? ODX_W : ODX_RW);
	/* Every user of the parts (or of the parent, after an unpartition) waits for it. */
	atomic_store_explicit(&t->priority, INT_MAX, memory_order_relaxed);
	snprintf(t->tag, sizeof(t->tag), "%s buffer #%llu, %d parts",
		 part ? "partition" : "unpartition", (unsigned long long)parent->id, n);
	return t;
}

/* Submits a switch; never blocks (admission forced: the partition's state already changed).
 * `event`: the user's reference (odx_submit's rule); `keep`: one for the caller to wait with. */
static void switch_submit(odx__task *t, odx_event **event, odx__task **keep)
{
	if (event) {
		atomic_fetch_add(&t->refs, 1);
		t->has_event = true;
		atomic_store_explicit(&t->user_ref, true, memory_order_relaxed);
		*event = (odx_event *)t;
	}
	if (keep) {
		atomic_fetch_add(&t->refs, 1);
		*keep = t;
	}
	odx__task_submit(t->ctx, t, ODX__ADMIT_FORCE);
}

/* The parent's host copy holds its latest bytes from now on (the parts write it in place), all
 * of them valid: the only valid copy, a new version, no disk copy. */
static void parent_host_only(odx_buffer *b)
{
	int home = odx__home(b);

	pthread_mutex_lock(&b->lock);
	/* Every byte is valid: parts have no run-time length (docs/sizes.md), and after a gather
	 * the parent is whole again. */
	b->length = b->size;
	/* Without one (a switch whose staging failed) no copy is valid: it failed, and its
	 * readers are canceled. */
	if (b->replicas[home].allocated) {
		odx__replica_written(b, home);
	} else {
		b->zero = false;
		b->wversion++;
	}
	pthread_mutex_unlock(&b->lock);
}

/* The parts' home replicas: aliases into the parent's host copy, which staging just filled
 * with its latest bytes (and which `backing` keeps in place until the unpartition ends). */
static void parts_alias(odx_buffer *parent, const odx__task *t)
{
	odx_context *ctx = parent->ctx;
	int home = odx__home(parent), i;
	odx__memnode *node = &ctx->memnodes[home];
	const odx__replica *pr = &parent->replicas[home];

	for (i = 1; i < t->nargs; i++) {
		odx_buffer *b = t->args[i].v.buffer;
		odx__replica *r = &b->replicas[home];

		pthread_mutex_lock(&node->lock);
		pthread_mutex_lock(&b->lock);
		/* Without a host copy (its staging failed) the parts get no alias: every use of
		 * one fails (odx__replica_alloc_as refuses to make it), and the switch failed. */
		if (pr->allocated) {
			r->allocated = true;
			r->mem = pr->mem + pr->off + b->part_off;
			r->off = 0;
			odx__replica_set_state(b, home, ODX__MODIFIED);
		}
		b->zero = false;
		pthread_mutex_unlock(&b->lock);
		pthread_mutex_unlock(&node->lock);
	}
}

void odx__partition_switch_end(odx__task *t, int *status)
{
	odx_buffer *parent = t->args[0].v.buffer;
	int n = t->nargs - 1, i;

	t->launched = true; /* once (odx__task_complete calls it for a switch no worker ran) */
	/* It ran although an input failed (odx__task_ready): it completes with that failure, and
	 * its successors that read what it wrote are canceled with it. */
	if (*status == 0)
		*status = atomic_load(&t->cancel);
	if (t->kind == ODX__TASK_PARTITION) {
		parts_alias(parent, t);
		parent_host_only(parent);
		odx__buffer_drop_copies(parent);
		return;
	}
	/* Each part's latest bytes are in its alias (staging fetched them all); the parts go, and
	 * the parent's host copy is whole. */
	for (i = 0; i < n; i++) {
		odx_buffer *b = t->args[i + 1].v.buffer;

		atomic_store(&b->dead, true);
		odx__buffer_release_memory(b);
	}
	parent_host_only(parent);
	atomic_fetch_sub(&parent->backing, 1);
}

/* ---- the calls ------------------------------------------------------------------------------- */

/* Checks a partition request: 0 and the description (*dp, n parts, to free), or the error. */
static int partition_check(odx_buffer *buf, const odx_partition *p, int nparts, part_desc **dp,
			   const char *fn)
{
	odx_context *ctx;
	part_desc *d;
	int rc, n = 0;

	rc = odx__buffer_check(buf, fn);
	if (rc)
		return rc;
	ctx = buf->ctx;
	ODX__CHECK_ARG(ctx, p, "p");
	ODX__CHECK_ARG(ctx, nparts > 0, "nparts");
	if (buf->part_of)
		return odx__fail(ctx, ODX_ENOSYS,
				 "%s: buffer #%llu is a part of buffer #%llu: parts cannot be "
				 "partitioned again in this version (docs/partitions.md, Limits)",
				 fn, (unsigned long long)buf->id, (unsigned long long)buf->part_of->id);
	rc = odx__buffer_partitioned(buf, fn);
	if (rc)
		return rc;
	if (ctx->closing)
		return odx__fail(ctx, ODX_ECLOSED, "%s: the context is closing", fn);
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
	if (!d)
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
	describe(buf, p, nparts, d, &n, fn);
	*dp = d;
	return 0;
}

/*
 * The partition after its checks: the parent's latest bytes to every rank (collective), the parts
 * and the switch submitted. From here on the parent refuses its users and its host copy stays
 * in place (`backing`). *keep (may be NULL): a reference to the switch.
 */
static int partition_submit(odx_buffer *buf, const odx_partition *p, const part_desc *d, int n,
			    odx_buffer **parts, odx_event **event, odx__task **keep,
			    const char *fn)
{
	odx_context *ctx = buf->ctx;
	odx_buffer **own;
	odx__task *t;
	size_t elem = p->elem_size ? p->elem_size : 1;
	int rc, home, i;

	/* Its host copy backs the parts: a parent larger than host memory cannot be partitioned
	 * (registered memory is the user's, counted but never refused). */
	home = odx__buffer_home(ctx, buf, -1);
	if (!buf->registered && buf->size > ctx->memnodes[home].capacity)
		return odx__fail(ctx, ODX_ENOSPC,
				 "%s: buffer #%llu (%zu bytes) is larger than host memory node %d "
				 "(%llu bytes, tier.host.limit), where a partitioned buffer stays",
				 fn, (unsigned long long)buf->id, buf->size, home,
				 (unsigned long long)ctx->memnodes[home].capacity);
	/* Several ranks: every rank gets the parent's latest bytes (nothing moves when each one
	 * has them already, as for registered or written memory), so every part starts valid on
	 * every rank, where tasks on it may run. */
	rc = odx__dist_read(buf);
	if (rc)
		return rc;
	own = calloc((size_t)n, sizeof(*own));
	t = own ? switch_new(buf, ODX__TASK_PARTITION, own, n) : NULL;
	for (i = 0; t && i < n; i++) {
		own[i] = part_new(buf, home, &d[i], elem);
		if (!own[i])
			break;
		t->args[i + 1].v.buffer = own[i];
	}
	if (!t || i < n) {
		while (i-- > 0)
			part_kill(own[i]);
		if (t)
			odx__task_put(t);
		free(own);
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
	}
	buf->parts = own;
	atomic_fetch_add(&buf->backing, 1);
	atomic_store(&buf->nparts, n); /* the parent refuses its users from here on */
	switch_submit(t, event, keep);
	memcpy(parts, own, (size_t)n * sizeof(*parts));
	return 0;
}

/* The unpartition: every part's latest bytes to every rank (collective), the switch submitted;
 * the part handles die now, their structs when the switch ran. */
static int unpartition_submit(odx_buffer *buf, odx_event **event, odx__task **keep,
			      const char *fn)
{
	odx_context *ctx = buf->ctx;
	int n = atomic_load(&buf->nparts), i, rc;
	odx__task *t;

	/* Several ranks: each part's latest version goes to every rank that lacks it (from the
	 * rank that wrote it last), received straight into its runs in the parent's host copy,
	 * so that every rank's parent ends whole. All of them are posted before the switch,
	 * which waits for them together. */
	for (i = 0; i < n; i++) {
		rc = odx__dist_read(buf->parts[i]);
		if (rc)
			return rc;
	}
	t = switch_new(buf, ODX__TASK_UNPARTITION, buf->parts, n);
	if (!t)
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, n);
	pthread_mutex_lock(&ctx->objects_lock);
	for (i = 0; i < n; i++)
		buf->parts[i]->destroyed = true;
	pthread_mutex_unlock(&ctx->objects_lock);
	free(buf->parts);
	buf->parts = NULL;
	switch_submit(t, event, keep);
	odx__dist_write(buf, true); /* whole on every rank, as a full write leaves a buffer */
	atomic_store(&buf->nparts, 0);
	return 0;
}

/* Milliseconds left before `deadline_ns` (0 at least), or -1 for no deadline. */
static int remaining_ms(uint64_t deadline_ns)
{
	uint64_t now = odx__now_ns();

	if (deadline_ns == 0)
		return -1;
	return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

/*
 * The synchronous calls' wait, with nothing submitted: every task submitted so far that uses b
 * finished (ODX_ETIMEDOUT past the deadline), and its last writer succeeded (ODX_ECANCELED with
 * that failure otherwise: b has no defined bytes to partition or gather).
 */
static int users_wait(odx_buffer *b, uint64_t deadline, const char *what, const char *fn)
{
	odx_context *ctx = b->ctx;
	odx__task **users, *lw = NULL;
	char first[ODX__MSG_MAX];
	int n = 0, i, rc = 0;

	pthread_mutex_lock(&ctx->submit_lock); /* guards last_writer and readers (task.c) */
	users = malloc((size_t)(b->nreaders + 1) * sizeof(*users));
	if (users) {
		for (i = 0; i < b->nreaders; i++)
			users[n++] = b->readers[i];
		if (b->last_writer)
			users[n++] = lw = b->last_writer;
		for (i = 0; i < n; i++)
			atomic_fetch_add(&users[i]->refs, 1);
	}
	pthread_mutex_unlock(&ctx->submit_lock);
	if (!users)
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory", fn);
	for (i = 0; i < n && rc == 0; i++) {
		odx__task_wait(users[i], remaining_ms(deadline));
		if (!atomic_load(&users[i]->done))
			rc = odx__fail(ctx, ODX_ETIMEDOUT,
				       "%s: %s #%llu: earlier tasks did not finish within the "
				       "timeout; nothing changed",
				       fn, what, (unsigned long long)b->id);
	}
	if (rc == 0 && lw && lw->status != 0)
		rc = odx__fail(ctx, ODX_ECANCELED, "%s: %s #%llu has no defined bytes: %s", fn,
			       what, (unsigned long long)b->id,
			       odx__task_origin(lw, first, sizeof(first)));
	for (i = 0; i < n; i++)
		odx__task_put(users[i]);
	free(users);
	return rc;
}

/* Waits for a switch the calling thread submitted; its status. */
static int switch_wait(odx__task *t, const char *fn)
{
	int rc = odx__task_wait(t, -1);

	if (rc)
		odx__fail(t->ctx, rc, "%s: %s", fn, t->message ? t->message : odx_strerror(rc));
	odx__task_put(t);
	return rc;
}

ODX_API int odx_buffer_partition(odx_buffer *buf, const odx_partition *p, int nparts,
				 odx_buffer **parts, int timeout_ms)
{
	static const char fn[] = "odx_buffer_partition";
	uint64_t deadline = timeout_ms < 0 ? 0 : odx__now_ns() + (uint64_t)timeout_ms * 1000000u;
	part_desc *d = NULL;
	odx_buffer **out = NULL; /* the handles, given to the caller only on success */
	odx__task *t = NULL, *u = NULL;
	int rc;

	rc = partition_check(buf, p, nparts, &d, fn);
	if (rc)
		return rc;
	if (!parts) {
		rc = odx__fail(buf->ctx, ODX_EINVAL, "%s: invalid argument 'parts'", fn);
		goto out_free;
	}
	out = calloc((size_t)nparts, sizeof(*out));
	if (!out) {
		rc = odx__fail(buf->ctx, ODX_ENOMEM, "%s: out of memory (%d parts)", fn, nparts);
		goto out_free;
	}
	/* Several ranks: the parent's latest bytes to every rank first (collective); the wait
	 * below covers their transfers. */
	rc = odx__dist_read(buf);
	if (rc)
		goto out_free;
	/* The parent's users first, with the timeout: nothing changes when it expires. Then the
	 * switch, which only moves bytes that are ready: waited for in full. */
	rc = users_wait(buf, deadline, "buffer", fn);
	if (rc)
		goto out_free;
	rc = partition_submit(buf, p, d, nparts, out, NULL, &t, fn);
	if (rc)
		goto out_free;
	rc = switch_wait(t, fn);
	if (rc) {
		/* Its bytes could not be brought home (a device lost, no memory): undone, and
		 * the parent carries the failure to its next readers. */
		if (unpartition_submit(buf, NULL, &u, fn) == 0) {
			odx__task_wait(u, -1);
			odx__task_put(u);
		}
		goto out_free;
	}
	memcpy(parts, out, (size_t)nparts * sizeof(*parts));
out_free:
	free(out);
	free(d);
	return rc;
}

ODX_API int odx_buffer_partition_async(odx_buffer *buf, const odx_partition *p, int nparts,
				       odx_buffer **parts, odx_event **event)
{
	static const char fn[] = "odx_buffer_partition_async";
	part_desc *d = NULL;
	int rc;

	rc = partition_check(buf, p, nparts, &d, fn);
	if (rc)
		return rc;
	if (!parts) {
		free(d);
		return odx__fail(buf->ctx, ODX_EINVAL, "%s: invalid argument 'parts'", fn);
	}
	rc = partition_submit(buf, p, d, nparts, parts, event, NULL, fn);
	free(d);
	return rc;
}

static int unpartition_check(odx_buffer *buf, const char *fn)
{
	int rc = odx__buffer_check(buf, fn);

	if (rc)
		return rc;
	if (atomic_load(&buf->nparts) == 0)
		return odx__fail(buf->ctx, ODX_EINVAL, "%s: buffer #%llu is not partitioned", fn,
				 (unsigned long long)buf->id);
	return 0;
}

ODX_API int odx_buffer_unpartition(odx_buffer *buf, int timeout_ms)
{
	static const char fn[] = "odx_buffer_unpartition";
	uint64_t deadline = timeout_ms < 0 ? 0 : odx__now_ns() + (uint64_t)timeout_ms * 1000000u;
	odx__task *t = NULL;
	int rc, n, i;

	rc = unpartition_check(buf, fn);
	if (rc)
		return rc;
	n = atomic_load(&buf->nparts);
	/* Several ranks: every part's latest bytes to every rank, all posted at once (transfers
	 * already made count on a second call). */
	for (i = 0; i < n; i++) {
		rc = odx__dist_read(buf->parts[i]);
		if (rc)
			return rc;
	}
	/* The parts' users (the transfers included), with the timeout: the partition stays as it
	 * is when it expires, or when a part has no defined bytes. */
	for (i = 0; i < n; i++) {
		rc = users_wait(buf->parts[i], deadline, "part", fn);
		if (rc)
			return rc;
	}
	/* The gather: every part's write-back at once (the switch's staging), waited for. */
	rc = unpartition_submit(buf, NULL, &t, fn);
	if (rc)
		return rc;
	return switch_wait(t, fn);
}

ODX_API int odx_buffer_unpartition_async(odx_buffer *buf, odx_event **event)
{
	static const char fn[] = "odx_buffer_unpartition_async";
	int rc = unpartition_check(buf, fn);

	if (rc)
		return rc;
	return unpartition_submit(buf, event, NULL, fn);
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
