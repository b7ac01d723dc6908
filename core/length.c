/* SPDX-License-Identifier: Apache-2.0 */
/*
 * length.c - run-time lengths (docs/sizes.md): a buffer's valid bytes within its capacity, or
 * its parts' valid prefixes (odx_buffer_set_parts, partition.c), as tasks set them.
 *
 * A length is part of a buffer's version, like its bytes: it changes only where a version is
 * made (a kernel that writes the buffer completes, a receive from another rank lands, a host
 * write lands), under the buffer's lock and before the new version is published (odx__unstage),
 * so every later task, copy, spill and transfer of that version sees it, and a copy of an older
 * version is discarded as stale by the version check it already had. Nothing in the replicated
 * task flow depends on a length: which tasks exist and where they run is decided from program
 * order alone, on every rank alike; only the blocking queries here read one back.
 *
 * How a task sets lengths: a host variant calls odx_host_launch.set_length (recorded on the task
 * here through odx_backend_launch.set_length, applied at completion); any variant may come with
 * length rules (odx_length_rule), whose counts are read from the task's own output after it
 * succeeded: in host memory directly, in device memory through mem_map or a small copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ---- the valid bytes of a buffer ----------------------------------------------------------- */

size_t odx__buffer_length(const odx_buffer *b)
{
	size_t n = 0;

	if (!b->layout)
		return b->length;
	for (int i = 0; i < b->layout->nparts; i++)
		n += b->layout->len[i];
	return n;
}

int odx__valid_segs(const odx_buffer *b, odx__seg *inl, int ninl, odx__seg **segs, size_t *bytes)
{
	const odx__layout *lay = b->layout;
	odx__seg *s = inl;
	int n = 0, i;

	*bytes = 0;
	*segs = inl;
	if (!lay) {
		if (b->length == 0)
			return 0;
		inl[0] = (odx__seg){0, b->length};
		*bytes = b->length;
		return 1;
	}
	if (lay->nparts > ninl) {
		s = malloc((size_t)lay->nparts * sizeof(*s));
		if (!s)
			return ODX_ENOMEM;
	}
	for (i = 0; i < lay->nparts; i++) {
		if (lay->len[i] == 0)
			continue;
		*bytes += lay->len[i];
		/* A full part followed by the next one: one run. */
		if (n > 0 && s[n - 1].off + s[n - 1].len == lay->off[i])
			s[n - 1].len += lay->len[i];
		else
			s[n++] = (odx__seg){lay->off[i], lay->len[i]};
	}
	*segs = s;
	return n;
}

void odx__length_written(odx_buffer *b, size_t off, size_t len)
{
	odx__layout *lay = b->layout;
	size_t end = off + len;

	if (!lay) {
		if (end > b->length)
			b->length = end;
		return;
	}
	for (int i = 0; i < lay->nparts; i++) {
		size_t p0 = lay->off[i], p1 = p0 + lay->cap[i];

		if (off < p1 && end > p0) {
			size_t reach = (end < p1 ? end : p1) - p0;

			if (reach > lay->len[i])
				lay->len[i] = reach;
		}
	}
}

void odx__length_release(odx_buffer *b)
{
	free(b->layout);
	b->layout = NULL;
	free(b->disk_segs);
	b->disk_segs = NULL;
	b->disk_nsegs = 0;
}

/* ---- waiting ---------------------------------------------------------------------------------- */

/* The tasks of this rank submitted so far that use b (its last writer and the readers after it),
 * referenced; *n of them, NULL when there are none or no memory. */
static odx__task **users(odx_buffer *b, int *n, bool writer_only)
{
	odx_context *ctx = b->ctx;
	odx__task **ts;
	int i, k = 0;

	pthread_mutex_lock(&ctx->submit_lock); /* guards last_writer and readers (task.c) */
	ts = malloc((size_t)(b->nreaders + 1) * sizeof(*ts));
	if (ts) {
		if (b->last_writer)
			ts[k++] = b->last_writer;
		for (i = 0; !writer_only && i < b->nreaders; i++)
			ts[k++] = b->readers[i];
		for (i = 0; i < k; i++)
			atomic_fetch_add(&ts[i]->refs, 1);
	}
	pthread_mutex_unlock(&ctx->submit_lock);
	*n = ts ? k : -1;
	return ts;
}

/* Waits for them (up to timeout_ms in all: -1 forever); 0, ODX_ETIMEDOUT, or the status of the
 * first one that failed when `failed` is not NULL (it then names the task). */
static int wait_tasks(odx__task **ts, int n, int timeout_ms, const char *fn, bool report)
{
	odx_context *ctx = n > 0 ? ts[0]->ctx : NULL;
	uint64_t deadline = timeout_ms >= 0 ? odx__now_ns() + (uint64_t)timeout_ms * 1000000 : 0;
	int i, rc = 0;

	for (i = 0; i < n; i++) {
		int left = -1;

		if (timeout_ms >= 0) {
			uint64_t now = odx__now_ns();

			left = now >= deadline ? 0 : (int)((deadline - now) / 1000000);
		}
		if (!rc) {
			int st = odx__task_wait(ts[i], left);

			if (st == ODX_ETIMEDOUT && !atomic_load(&ts[i]->done))
				rc = odx__fail(
					ctx, ODX_ETIMEDOUT,
					"%s: the tasks before it did not finish within %d ms", fn,
					timeout_ms);
			else if (st && report) {
				char first[ODX__MSG_MAX];

				rc = odx__fail(ctx, ODX_ECANCELED,
					       "%s: the buffer's writer failed: %s", fn,
					       odx__task_origin(ts[i], first, sizeof(first)));
			}
		}
		odx__task_put(ts[i]);
	}
	free(ts);
	return rc;
}

int odx__buffer_wait_users(odx_buffer *b, const char *fn)
{
	int n;
	odx__task **ts = users(b, &n, false);

	if (n < 0)
		return odx__fail(b->ctx, ODX_ENOMEM, "%s: out of memory", fn);
	return wait_tasks(ts, n, -1, fn, false);
}

/* ---- submission ------------------------------------------------------------------------------- */

/* The access the task declares to its argument i (its kernel's when 0). */
static odx_access arg_access(const odx_kernel *k, const odx_arg *args, int i)
{
	return args[i].access ? args[i].access : k->params[i].access;
}

static int check_rule(odx_context *ctx, const odx_kernel *k, const odx_arg *args, int nargs,
		      const odx_length_rule *r, int n)
{
	const odx_buffer *b, *from;
	uint32_t count = 1;

	if (r->arg < 0 || r->arg >= nargs || args[r->arg].kind != ODX_ARG_BUFFER ||
	    !(arg_access(k, args, r->arg) & ODX_W))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s': length rule %d: arg %d is not a buffer "
				 "argument the task writes",
				 k->name, n, r->arg);
	if (r->from_arg < 0 || r->from_arg >= nargs || args[r->from_arg].kind != ODX_ARG_BUFFER ||
	    !(arg_access(k, args, r->from_arg) & ODX_W))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s': length rule %d: from_arg %d is not a "
				 "buffer argument the task writes (the counts must be its output)",
				 k->name, n, r->from_arg);
	b = args[r->arg].v.buffer;
	from = args[r->from_arg].v.buffer;
	if (b->part_of)
		return odx__fail(
			ctx, ODX_ENOSYS,
			"odx_submit: kernel '%s': length rule %d: buffer #%llu is a part of a "
			"partition: parts of a partition have no run-time length in this "
			"version (docs/sizes.md, Limits)",
			k->name, n, (unsigned long long)b->id);
	if (r->part == ODX_ALL_PARTS || r->part >= 0) {
		if (!b->layout)
			return odx__fail(ctx, ODX_EINVAL,
					 "odx_submit: kernel '%s': length rule %d sets part %d of "
					 "buffer #%llu, which has no parts (odx_buffer_set_parts)",
					 k->name, n, r->part, (unsigned long long)b->id);
		if (r->part >= b->layout->nparts)
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_submit: kernel '%s': length rule %d: part %d of buffer "
				"#%llu, which has %d parts",
				k->name, n, r->part, (unsigned long long)b->id, b->layout->nparts);
		if (r->part == ODX_ALL_PARTS)
			count = (uint32_t)b->layout->nparts;
	} else if (r->part != ODX_WHOLE_BUFFER) {
		return odx__fail(
			ctx, ODX_EINVAL,
			"odx_submit: kernel '%s': length rule %d: part %d is not a part index, "
			"ODX_WHOLE_BUFFER or ODX_ALL_PARTS",
			k->name, n, r->part);
	} else if (b->layout) {
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: kernel '%s': length rule %d sets the whole length of "
				 "buffer #%llu, which has parts: set its parts' lengths",
				 k->name, n, (unsigned long long)b->id);
	}
	if (((uint64_t)r->index + count) * 4 > from->size || from->part_of)
		return odx__fail(
			ctx, ODX_EINVAL,
			"odx_submit: kernel '%s': length rule %d reads u32 elements [%u, %llu) "
			"of buffer #%llu (%zu bytes%s)",
			k->name, n, r->index, (unsigned long long)r->index + count,
			(unsigned long long)from->id, from->size,
			from->part_of ? ", a part of a partition: not in this version" : "");
	return 0;
}

int odx__lengths_check(odx_context *ctx, const odx_kernel *k, const odx_arg *args, int nargs,
		       const odx_task_opts *opts)
{
	int i, rc;

	for (i = 0; i < nargs; i++) {
		const odx_arg *a = &args[i];

		if (a->kind != ODX_ARG_LEN)
			continue;
		if (k->params[i].kind != ODX_ARG_I32 && k->params[i].kind != ODX_ARG_I64)
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_submit: kernel '%s' argument %d (%s): ODX_LEN stands for "
				"an I32 or I64 parameter, kind %d declared",
				k->name, i, k->params[i].name ? k->params[i].name : "?",
				(int)k->params[i].kind);
		if (a->v.len.arg < 0 || a->v.len.arg >= nargs ||
		    args[a->v.len.arg].kind != ODX_ARG_BUFFER || a->v.len.elem_size <= 0)
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_submit: kernel '%s' argument %d (%s): ODX_LEN(%d, %d) must "
				"name a buffer argument of the same task and an element size "
				"above 0",
				k->name, i, k->params[i].name ? k->params[i].name : "?",
				(int)a->v.len.arg, (int)a->v.len.elem_size);
	}
	if (!(opts->flags & ODX_SUBMIT_LENGTHS))
		return 0;
	if (opts->nlengths < 0 || (opts->nlengths > 0 && !opts->lengths))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_submit: ODX_SUBMIT_LENGTHS with nlengths %d and lengths %p",
				 opts->nlengths, (const void *)opts->lengths);
	for (i = 0; i < opts->nlengths; i++) {
		rc = check_rule(ctx, k, args, nargs, &opts->lengths[i], i);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- what a running task sets ------------------------------------------------------------------ */

/* The first refusal wins: it is what the task's failure says. Under t->lock. */
static void refuse(odx__task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(odx__task *t, const char *fmt, ...)
{
	va_list ap;
	char *msg;

	if (t->len_status)
		return;
	msg = malloc(ODX__MSG_MAX);
	if (msg) {
		va_start(ap, fmt);
		vsnprintf(msg, ODX__MSG_MAX, fmt, ap);
		va_end(ap);
	}
	t->lengths_used = true;
	t->len_status = ODX_EKERNEL;
	t->len_msg = msg;
}

/* The capacity a length of (b, part) must stay within, or refuses (t->lock held). */
static bool length_target(odx__task *t, int arg, int part, size_t bytes, const char *who)
{
	odx_buffer *b = t->args[arg].v.buffer;
	const odx__layout *lay = b->layout;
	char name[ODX_LABEL_MAX + 24];
	size_t cap;

	odx__buffer_name(b, name, sizeof(name));
	if (b->part_of) {
		refuse(t,
		       "%s: argument %d (%s) is a part of a partition: parts of a partition have "
		       "no run-time length in this version",
		       who, arg, name);
		return false;
	}
	if (part == ODX_WHOLE_BUFFER && lay) {
		refuse(t,
		       "%s: argument %d (%s) has %d parts: set their lengths, not the whole "
		       "buffer's",
		       who, arg, name, lay->nparts);
		return false;
	}
	if (part != ODX_WHOLE_BUFFER && (!lay || part < 0 || part >= lay->nparts)) {
		refuse(t, "%s: argument %d (%s) has no part %d (%d parts)", who, arg, name, part,
		       lay ? lay->nparts : 0);
		return false;
	}
	cap = part == ODX_WHOLE_BUFFER ? b->size : lay->cap[part];
	if (bytes > cap) {
		if (part == ODX_WHOLE_BUFFER)
			refuse(t,
			       "%s: length %zu bytes of argument %d (%s) is above its capacity "
			       "of %zu bytes",
			       who, bytes, arg, name, cap);
		else
			refuse(t,
			       "%s: length %zu bytes of part %d of argument %d (%s) is above "
			       "the part's capacity of %zu bytes",
			       who, bytes, part, arg, name, cap);
		return false;
	}
	return true;
}

void odx__lengths_set(void *task, int arg, int part, size_t bytes)
{
	odx__task *t = task;

	pthread_mutex_lock(&t->lock);
	t->lengths_used = true;
	if (arg < 0 || arg >= t->nargs || t->args[arg].kind != ODX_ARG_BUFFER ||
	    !(t->args[arg].access & ODX_W)) {
		refuse(t, "set_length: argument %d is not a buffer the task writes", arg);
		goto out;
	}
	if (!length_target(t, arg, part, bytes, "set_length"))
		goto out;
	if (t->nlenrecs == t->caplenrecs) {
		int cap = t->caplenrecs ? 2 * t->caplenrecs : 8;
		odx__lenrec *r = realloc(t->lenrecs, (size_t)cap * sizeof(*r));

		if (!r) {
			refuse(t, "set_length: out of memory");
			goto out;
		}
		t->lenrecs = r;
		t->caplenrecs = cap;
	}
	t->lenrecs[t->nlenrecs++] = (odx__lenrec){arg, part, bytes};
out:
	pthread_mutex_unlock(&t->lock);
}

bool odx__task_sets_lengths(const odx__task *t, const odx__device *dev)
{
	const odx_kernel_variant *v;
	int lv;

	if (t->kind != ODX__TASK_KERNEL)
		return false;
	if (t->nrules > 0)
		return true;
	lv = t->kernel->loaded_variant[dev->index];
	v = &t->kernel->variants[lv >= 0 ? lv : t->kernel->device_variant[dev->index]];
	return v->format == ODX_FORMAT_HOST_FN || v->format == ODX_FORMAT_HOST_CALL;
}

/* ---- length rules: reading the counts ---------------------------------------------------------- */

static uint32_t rule_count(const odx__task *t, const odx_length_rule *r)
{
	const odx_buffer *b = t->args[r->arg].v.buffer;

	return r->part == ODX_ALL_PARTS && b->layout ? (uint32_t)b->layout->nparts : 1;
}

static void counts_read(void *arg, int status, const char *msg)
{
	odx__task *t = arg;
	int zero = 0;

	if (status && atomic_compare_exchange_strong(&t->len_read_status, &zero, status)) {
		pthread_mutex_lock(&t->lock);
		refuse(t, "reading the counts of its length rules from device memory failed: %s",
		       msg ? msg : odx_strerror(status));
		pthread_mutex_unlock(&t->lock);
	}
	if (atomic_fetch_sub(&t->len_reads, 1) != 1)
		return;
	/* The last read: the task completes, its lengths applied (odx__task_finish). */
	odx__task_finish(t, 0, NULL);
}

int odx__lengths_fetch(odx__task *t, odx__device *dev)
{
	odx_context *ctx = t->ctx;
	int m = dev->memnode, i;
	size_t total = 0, at = 0;

	if (t->nrules == 0)
		return 0;
	for (i = 0; i < t->nrules; i++)
		total += rule_count(t, &t->rules[i]);
	t->len_counts = malloc(total * sizeof(uint32_t));
	if (!t->len_counts) {
		pthread_mutex_lock(&t->lock);
		refuse(t, "out of memory for the counts of its length rules");
		pthread_mutex_unlock(&t->lock);
		return ODX_ENOMEM;
	}
	/* Queued reads count one more until all are queued, so none finishes the task early. */
	atomic_store(&t->len_reads, 1);
	atomic_store(&t->len_read_status, 0);
	for (i = 0; i < t->nrules; i++) {
		const odx_length_rule *r = &t->rules[i];
		const odx__replica *rep = &t->args[r->from_arg].v.buffer->replicas[m];
		size_t n = rule_count(t, r) * sizeof(uint32_t), off = (size_t)r->index * 4;
		void *host = NULL;

		/* The counts sit in the task's own output, still pinned on its memory node. */
		if (odx__is_host_node(ctx, m))
			host = (char *)(uintptr_t)rep->mem + rep->off;
		else if (ODX_BACKEND_HAS_OP(dev->ops, odx_backend_ops, mem_map) &&
			 dev->ops->mem_map(dev->bdev, rep->mem, &host) == 0)
			host = (char *)host + rep->off;
		if (host) {
			memcpy((char *)t->len_counts + at, (char *)host + off, n);
		} else {
			int rc;

			atomic_fetch_add(&t->len_reads, 1);
			rc = dev->ops->copy_d2h(dev->bdev, (char *)t->len_counts + at, rep->mem,
						rep->off + off, n, counts_read, t);
			if (rc) {
				atomic_fetch_sub(&t->len_reads, 1);
				pthread_mutex_lock(&t->lock);
				refuse(t,
				       "could not queue the read of its length rules' counts: %s",
				       odx_strerror(rc));
				pthread_mutex_unlock(&t->lock);
				break;
			}
		}
		at += n;
	}
	if (atomic_fetch_sub(&t->len_reads, 1) == 1)
		return 0; /* nothing queued, or all of it landed already: the caller finishes */
	return 1;
}

/* ---- applying them ------------------------------------------------------------------------------ */

/* Sets one length of argument arg's buffer (its lock held). */
static void set_one(odx_buffer *b, int part, size_t bytes)
{
	if (part == ODX_WHOLE_BUFFER)
		b->length = bytes;
	else
		b->layout->len[part] = bytes;
}

int odx__lengths_apply(odx__task *t)
{
	size_t at = 0;
	int i, j;

	if (t->len_status)
		return t->len_status;
	/* Rules first, then the host variant's calls: what it set by hand is the later word. */
	for (i = 0; i < t->nrules && t->len_counts; i++) {
		const odx_length_rule *r = &t->rules[i];
		uint32_t n = rule_count(t, r), unit = r->unit ? r->unit : 1;

		for (j = 0; j < (int)n; j++) {
			int part = r->part == ODX_ALL_PARTS ? j : r->part;
			size_t bytes = (size_t)t->len_counts[at + (size_t)j] * unit;
			char who[48];

			snprintf(who, sizeof(who), "length rule %d", i);
			if (!length_target(t, r->arg, part, bytes, who))
				return t->len_status;
		}
		at += n;
	}
	/* All checked: now they change, each under its buffer's lock. */
	at = 0;
	for (i = 0; i < t->nrules && t->len_counts; i++) {
		const odx_length_rule *r = &t->rules[i];
		odx_buffer *b = t->args[r->arg].v.buffer;
		uint32_t n = rule_count(t, r), unit = r->unit ? r->unit : 1;

		pthread_mutex_lock(&b->lock);
		for (j = 0; j < (int)n; j++)
			set_one(b, r->part == ODX_ALL_PARTS ? j : r->part,
				(size_t)t->len_counts[at + (size_t)j] * unit);
		pthread_mutex_unlock(&b->lock);
		at += n;
	}
	for (i = 0; i < t->nlenrecs; i++) {
		odx_buffer *b = t->args[t->lenrecs[i].arg].v.buffer;

		pthread_mutex_lock(&b->lock);
		set_one(b, t->lenrecs[i].part, t->lenrecs[i].bytes);
		pthread_mutex_unlock(&b->lock);
	}
	return 0;
}

/* A task's length and transfer fields back to zero as it returns to the pool; nothing to do for
 * a kernel task that set none (most tasks: the check keeps them off the per-task path). */
void odx__lengths_task_reset(odx__task *t)
{
	if (!t->lengths_used && t->kind == ODX__TASK_KERNEL)
		return;
	atomic_fetch_add_explicit(&t->ctx->length_resets, 1, memory_order_relaxed);
	t->lengths_used = false;
	free(t->rules);
	t->rules = NULL;
	t->nrules = 0;
	free(t->lenrecs);
	t->lenrecs = NULL;
	t->nlenrecs = t->caplenrecs = 0;
	t->len_status = 0;
	free(t->len_msg);
	t->len_msg = NULL;
	free(t->len_counts);
	t->len_counts = NULL;
	atomic_store(&t->len_reads, 0);
	atomic_store(&t->len_read_status, 0);
	t->xfer_nparts = 0;
	atomic_store(&t->xfer_left, 0);
	atomic_store(&t->xfer_status, 0);
	free(t->xfer_msg);
	t->xfer_msg = NULL;
	t->xfer_bytes = 0;
	t->xfer_len = 0;
	free(t->xfer_lens);
	t->xfer_lens = NULL;
}

/* ---- public API ------------------------------------------------------------------------------- */

/* Waits for b's last writer here, then, on several ranks, takes what the rank holding the latest
 * version says (every rank gets the same answer: status and lengths travel together). `lens`
 * receives nparts part lengths, or the length when nparts is 0. */
static int query(odx_buffer *b, size_t *lens, int nparts, int timeout_ms, const char *fn)
{
	odx_context *ctx = b->ctx;
	int n, rc, i, src;
	odx__task **ts;
	uint64_t *mine, *all = NULL;
	size_t words = 1 + (size_t)(nparts > 0 ? nparts : 1);

	ts = users(b, &n, true);
	if (n < 0)
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory", fn);
	rc = wait_tasks(ts, n, timeout_ms, fn, true);
	mine = calloc(words, sizeof(*mine));
	if (ctx->fab)
		all = calloc(words * (size_t)ctx->size, sizeof(*all));
	if (!mine || (ctx->fab && !all)) {
		free(mine);
		free(all);
		return odx__fail(ctx, ODX_ENOMEM, "%s: out of memory", fn);
	}
	pthread_mutex_lock(&b->lock);
	mine[0] = (uint64_t)(int64_t)rc;
	if (nparts == 0)
		mine[1] = odx__buffer_length(b);
	for (i = 0; i < nparts; i++)
		mine[1 + i] = b->layout ? b->layout->len[i] : 0;
	pthread_mutex_unlock(&b->lock);
	if (ctx->fab) {
		/* Collective: the owner of the latest version answers for everyone. */
		src = odx__dist_source(b);
		rc = odx_allgather(ctx, mine, words * sizeof(*mine), all, timeout_ms);
		if (rc) {
			free(mine);
			free(all);
			return rc;
		}
		memcpy(mine, all + (size_t)src * words, words * sizeof(*mine));
		rc = (int)(int64_t)mine[0];
		if (rc && src != ctx->rank)
			rc = odx__fail(ctx, rc,
				       "%s: on rank %d, which holds the buffer's latest "
				       "version: %s",
				       fn, src, odx_strerror(rc));
	}
	if (!rc)
		for (i = 0; i < (nparts > 0 ? nparts : 1); i++)
			lens[i] = (size_t)mine[1 + i];
	free(mine);
	free(all);
	return rc;
}

ODX_API int odx_buffer_length(odx_buffer *buf, size_t *len, int timeout_ms)
{
	static const char fn[] = "odx_buffer_length";
	int rc = odx__buffer_check(buf, fn);

	if (rc || (rc = odx__buffer_partitioned(buf, fn)) != 0)
		return rc;
	ODX__CHECK_ARG(buf->ctx, len, "len");
	return query(buf, len, 0, timeout_ms, fn);
}

ODX_API int odx_buffer_part_lengths(odx_buffer *buf, size_t *lens, int nparts, int timeout_ms)
{
	static const char fn[] = "odx_buffer_part_lengths";
	int rc = odx__buffer_check(buf, fn);

	if (rc || (rc = odx__buffer_partitioned(buf, fn)) != 0)
		return rc;
	ODX__CHECK_ARG(buf->ctx, lens, "lens");
	/* The layout is a program-order fact: set on this thread's side of the flow. */
	if (!buf->layout || buf->layout->nparts != nparts)
		return odx__fail(
			buf->ctx, ODX_EINVAL,
			"%s: buffer #%llu has %d parts (odx_buffer_set_parts), nparts is %d", fn,
			(unsigned long long)buf->id, buf->layout ? buf->layout->nparts : 0, nparts);
	return query(buf, lens, nparts, timeout_ms, fn);
}
