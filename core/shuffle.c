/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shuffle.c - odx_shuffle: every rank's part d goes to rank d, as one task of the graph on every
 * rank (docs/distributed.md, "Shuffle").
 *
 * The submission is bookkeeping every rank does alike (dist.c: src[s]'s latest version goes to
 * rank s, dst[d] and counts[d] live on rank d afterwards, two transfer keys). On rank r the task
 * reads src[r] and writes dst[r] and counts[r], so the dependency rules order it after src[r]'s
 * writer and dst[r]'s previous users. When it runs it only posts, and the fabric's callbacks do
 * the rest; nothing waits:
 *
 *  - sizes: 8 bytes from every rank to every other (the length of the part it sends there), under
 *    the first key. Each rank posts the receives of the sizes sent to it and sends its own.
 *  - parts: rank s sends part d to rank d once d's size came (then rank d runs its side and will
 *    post a receive for it; a rank whose side never ran aborts the size instead, and gets
 *    nothing), under the second key, and only parts with bytes: an empty part costs its size
 *    message. Rank d places the parts in source order: the receive for source s is posted into
 *    dst[d] at its final offset as soon as the sizes of sources 0..s are known, so no byte is
 *    copied twice. The own part is a memcpy (on the worker when it is large).
 *  - failure: a source whose side failed before it ran aborts its sizes (odx__shuffle_abandon);
 *    a dst too small for what comes fails with ODX_ENOSPC naming the bytes. Either way the
 *    receiver still takes every part that is sent to it, into nothing (a receive of 0 bytes: the
 *    fabric drains a longer sender's chunks and fails both), so no sender waits forever, and the
 *    task completes, failed, once everything it posted came back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "fabric.h"

/* The own part is copied on the fabric's callback thread up to this size; above it the copy is
 * queued to the task's worker (a long memcpy there would hold back every transfer). */
#define SELF_COPY_INLINE (256u << 10)

enum {
	ROW_WAIT = 0,
	ROW_OK,
	ROW_FAILED
};

/* One fabric operation of a shuffle; its slot says which (kind * size + peer). */
enum {
	OP_SIZE_RECV = 0,
	OP_SIZE_SEND,
	OP_PART_SEND,
	OP_PART_RECV,
	OP_KINDS
};

struct shuffle_op {
	struct odx__shuffle *sh;
	int peer;
	uint8_t kind;
	bool drain;  /* a receive of 0 bytes that takes a part no longer wanted */
	uint64_t t0; /* when it was posted (stats, trace) */
	size_t len;
};

struct odx__shuffle {
	odx__task *t;
	int size, rank;
	uint64_t key_size, key_part;
	odx_buffer *src, *dst, *counts;
	size_t *part_off; /* src[rank]'s parts: offsets, from the layout at submission */
	pthread_mutex_t lock;
	bool started;
	int pending;	   /* operations out, plus one while something is being set up */
	uint64_t *out_len; /* this rank's part lengths: out_len[d] goes to rank d */
	uint64_t *in_len;  /* what each source sends here (in_len[rank]: the own part) */
	uint8_t *row;	   /* per source: its size came (ROW_OK), failed, or is awaited */
	int next;	   /* the next source to place */
	uint64_t off;	   /* bytes placed before it */
	bool broken;	   /* a source failed or dst overflowed: later parts are drained */
	bool overflow;
	char *srcp, *dstp;
	uint64_t *countsp;
	int status; /* the first failure of an operation (sizes, parts) */
	char msg[ODX__MSG_MAX];
	char *origin; /* a source's abort: the first failure behind it */
	int origin_rank;
	char drain; /* where drains point (they hold 0 bytes) */
	bool self_queued;
	struct shuffle_op *ops; /* OP_KINDS * size */
};

/* ---- lengths of buffers and parts --------------------------------------------------------
 * Every use of the buffers' length bookkeeping (length.c, docs/sizes.md) is in these four
 * functions. */

/* Parts of b's layout (odx_buffer_set_parts), 0 for none: a fact of program order. */
static int layout_parts(const odx_buffer *b)
{
	return b->layout ? b->layout->nparts : 0;
}

/* Offset of part i in b (with a layout). */
static size_t layout_off(const odx_buffer *b, int i)
{
	return b->layout->off[i];
}

/* The length its last writer left to part i of b (a buffer without parts: part 0 is b). Lengths
 * are written under b's lock where a version is made (length.c). */
static size_t part_length(odx_buffer *b, int i)
{
	size_t n;

	pthread_mutex_lock(&b->lock);
	n = b->layout ? b->layout->len[i] : b->length;
	pthread_mutex_unlock(&b->lock);
	return n;
}

/* Sets the length of b (no layout) before the version its task made is published. */
static void set_length(odx_buffer *b, size_t len)
{
	pthread_mutex_lock(&b->lock);
	b->length = len;
	pthread_mutex_unlock(&b->lock);
}

/* ---- running -------------------------------------------------------------------------------- */

void odx__shuffle_free(struct odx__shuffle *sh)
{
	if (!sh)
		return;
	pthread_mutex_destroy(&sh->lock);
	free(sh->part_off);
	free(sh->out_len);
	free(sh->in_len);
	free(sh->row);
	free(sh->ops);
	free(sh->origin);
	free(sh);
}

static void *replica_bytes(odx_buffer *b, int m)
{
	odx__replica *r = &b->replicas[m];

	return (char *)(uintptr_t)r->mem + r->off;
}

/* Records the first failure of an operation (lock held). */
static void op_failed(struct odx__shuffle *sh, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void op_failed(struct odx__shuffle *sh, int status, const char *fmt, ...)
{
	va_list ap;

	if (sh->status)
		return;
	sh->status = status;
	va_start(ap, fmt);
	vsnprintf(sh->msg, sizeof(sh->msg), fmt, ap);
	va_end(ap);
}

static void trace_part(struct shuffle_op *op, int status, uint64_t now)
{
	struct odx__shuffle *sh = op->sh;
	odx_context *ctx = sh->t->ctx;
	bool send = op->kind == OP_PART_SEND;
	char from[ODX_LABEL_MAX + 16], into[ODX_LABEL_MAX + 16], name[2 * ODX_LABEL_MAX + 96];
	double size = (double)op->len;
	const char *unit = "B";

	if (!ctx->tracing)
		return;
	if (size >= 1 << 20)
		size /= 1 << 20, unit = "MiB";
	else if (size >= 1 << 10)
		size /= 1 << 10, unit = "KiB";
	odx__buffer_name(sh->src, from, sizeof(from));
	odx__buffer_name(sh->dst, into, sizeof(into));
	/* the lane is the peer's (a copy of the own part: this rank's receive lane) */
	if (send)
		snprintf(name, sizeof(name), "shuffle part %d of %s, %.*f %s%s", op->peer, from,
			 *unit == 'B' ? 0 : 1, size, unit, status ? " (failed)" : "");
	else
		snprintf(name, sizeof(name), "shuffle part %d into %s, %.*f %s%s", sh->rank, into,
			 *unit == 'B' ? 0 : 1, size, unit, status ? " (failed)" : "");
	odx__trace_span_sized(odx__trace_peer_lane(ctx, op->peer, send), name,
			      send ? "shuffle send" : "shuffle receive", op->t0, now, sh->t->id,
			      op->len, (send ? sh->src : sh->dst)->id);
}

static void finish(struct odx__shuffle *sh);
static void op_done(void *arg, int status, const char *msg);

/* Posts an operation (lock held); false when the fabric refused it (then it failed). */
static bool post(struct odx__shuffle *sh, int kind, int peer, void *buf, size_t len, bool drain)
{
	odx_context *ctx = sh->t->ctx;
	struct shuffle_op *op = &sh->ops[kind * sh->size + peer];
	bool send = kind == OP_SIZE_SEND || kind == OP_PART_SEND;
	uint64_t key = kind == OP_SIZE_RECV || kind == OP_SIZE_SEND ? sh->key_size : sh->key_part;
	int rc;

	*op = (struct shuffle_op){.sh = sh,
				  .peer = peer,
				  .kind = (uint8_t)kind,
				  .drain = drain,
				  .len = len};
	if (!drain && (kind == OP_PART_SEND || kind == OP_PART_RECV) &&
	    (ctx->tracing || ctx->peers)) {
		op->t0 = odx__now_ns();
		odx__dist_peer_begin(ctx, peer, op->t0);
	}
	sh->pending++;
	rc = send ? odx_fab_send(ctx->fab, peer, key, buf, len, op_done, op)
		  : odx_fab_recv(ctx->fab, peer, key, buf, len, op_done, op);
	if (!rc)
		return true;
	sh->pending--;
	if (op->t0)
		odx__dist_peer_end(ctx, peer, send, rc, len, op->t0, odx__now_ns());
	op_failed(sh, rc, "the fabric refused the %s %s rank %d: %s",
		  kind == OP_SIZE_RECV || kind == OP_SIZE_SEND ? "size message" : "part",
		  send ? "to" : "from", peer, odx_strerror(rc));
	/* Its receiver posted a receive for it (a part larger than the provider takes, say): it
	 * gets the failure instead. (A refused size: the peer failed or the fabric is closing,
	 * and its receives fail by themselves.) */
	if (kind == OP_PART_SEND && odx_fab_send_abort(ctx->fab, peer, key, rc, sh->msg))
		odx__log(ctx, ODX_LOG_WARN,
			 "rank %d could not tell rank %d that its shuffle part "
			 "will not come (its shuffle fails when this rank is found failed)",
			 sh->rank, peer);
	return false;
}

/* Places the parts whose offsets are known, in source order (lock held; `worker`: on the task's
 * worker, where the own part is copied whatever its size). */
static void place(struct odx__shuffle *sh, bool worker)
{
	odx_context *ctx = sh->t->ctx;
	size_t cap = sh->dst->size;

	while (sh->next < sh->size && !sh->self_queued) {
		int s = sh->next;
		uint64_t len;

		/* in_len[s] is the fabric's until its receive completed */
		if (sh->row[s] == ROW_WAIT)
			return;
		len = sh->in_len[s];
		if (sh->row[s] == ROW_FAILED) {
			sh->broken = true; /* the offsets after it are unknown */
			sh->next++;
			continue;
		}
		if (!sh->broken && len > cap - sh->off)
			sh->broken = sh->overflow = true;
		if (sh->broken) {
			if (s != sh->rank && len)
				post(sh, OP_PART_RECV, s, &sh->drain, 0, true);
			sh->next++;
			continue;
		}
		if (sh->countsp)
			sh->countsp[s] = len;
		if (s == sh->rank) {
			if (len > SELF_COPY_INLINE && !worker) {
				/* the worker copies it and calls place again */
				sh->self_queued = true;
				sh->pending++;
				odx__device_push_staged(&ctx->devices[sh->t->device], sh->t);
				return;
			}
			uint64_t t0 = ctx->tracing ? odx__now_ns() : 0;

			memcpy(sh->dstp + sh->off, sh->srcp + sh->part_off[s], len);
			atomic_fetch_add(&ctx->shuffle_copied, len);
			if (t0) {
				struct shuffle_op self = {.sh = sh,
							  .peer = sh->rank,
							  .kind = OP_PART_RECV,
							  .t0 = t0,
							  .len = len};

				trace_part(&self, 0, odx__now_ns());
			}
		} else if (len) {
			post(sh, OP_PART_RECV, s, sh->dstp + sh->off, len, false);
		}
		sh->off += len;
		sh->next++;
	}
}

/* One operation fewer (lock held); true when that was the last. */
static bool drop(struct odx__shuffle *sh)
{
	return --sh->pending == 0;
}

static void op_done(void *arg, int status, const char *msg)
{
	struct shuffle_op *op = arg;
	struct odx__shuffle *sh = op->sh;
	odx_context *ctx = sh->t->ctx;
	int p = op->peer, kind = op->kind;
	bool last;

	if (op->t0) {
		uint64_t now = odx__now_ns();

		odx__dist_peer_end(ctx, p, op->kind == OP_PART_SEND, status, op->len, op->t0, now);
		trace_part(op, status, now);
	}
	if (!status && !op->drain && op->kind == OP_PART_SEND) {
		atomic_fetch_add(&ctx->shuffle_sent, op->len);
		atomic_fetch_add(&ctx->sent_bytes, op->len);
		atomic_fetch_add(&ctx->xfers, 1);
	} else if (!status && !op->drain && op->kind == OP_PART_RECV) {
		atomic_fetch_add(&ctx->shuffle_recvd, op->len);
		atomic_fetch_add(&ctx->recv_bytes, op->len);
		atomic_fetch_add(&ctx->xfers, 1);
	}
	pthread_mutex_lock(&sh->lock);
	switch (op->kind) {
	case OP_SIZE_RECV:
		if (status == 0) {
			sh->row[p] = ROW_OK;
			/* its side runs, and will take what this rank sends it */
			if (sh->out_len[p])
				post(sh, OP_PART_SEND, p, sh->srcp + sh->part_off[p],
				     sh->out_len[p], false);
		} else {
			sh->row[p] = ROW_FAILED;
			if (status == ODX_ECANCELED && msg && msg[0] && !sh->origin) {
				/* rank p's side failed before it ran: msg is the first failure */
				sh->origin = strdup(msg);
				sh->origin_rank = p;
			}
			op_failed(sh, status, "the size of rank %d's part: %s", p,
				  msg ? msg : odx_strerror(status));
		}
		place(sh, false);
		break;
	case OP_PART_SEND:
		/* ODX_EINVAL: the receiver drained it (its dst overflowed, or a source of its
		 * failed); that rank reports it */
		if (status && status != ODX_EINVAL)
			op_failed(sh, status, "sending part %d to rank %d: %s", p, p,
				  msg ? msg : odx_strerror(status));
		break;
	case OP_PART_RECV:
		if (status && !op->drain)
			op_failed(sh, status, "receiving part %d from rank %d: %s", sh->rank, p,
				  msg ? msg : odx_strerror(status));
		break;
	default: /* OP_SIZE_SEND */
		if (status)
			op_failed(sh, status, "sending the size of part %d to rank %d: %s", p, p,
				  msg ? msg : odx_strerror(status));
		break;
	}
	last = drop(sh);
	pthread_mutex_unlock(&sh->lock);
	/* What a size let this rank post starts now, even when a caller driving progress (a
	 * collective, a barrier) ran this callback and leaves the progress thread parked. */
	if (kind == OP_SIZE_RECV) /* op and sh may be gone: another callback was the last */
		odx_fab_kick(ctx->fab);
	if (last)
		finish(sh);
}

/* Everything posted came back: the task's outcome. */
static void finish(struct odx__shuffle *sh)
{
	odx__task *t = sh->t;
	odx_context *ctx = t->ctx;
	char who[ODX_LABEL_MAX + 16], msg[ODX__MSG_MAX];
	uint64_t need = 0;
	int s, status = 0;

	for (s = 0; s < sh->size; s++)
		if (sh->row[s] == ROW_OK)
			need += sh->in_len[s];
	odx__buffer_name(sh->dst, who, sizeof(who));
	if (sh->origin) {
		/* its readers are canceled naming the first failure, as for a receive */
		t->origin = strdup(sh->origin);
		status = ODX_ECANCELED;
		snprintf(
			msg, sizeof(msg),
			"odx_shuffle canceled: rank %d has no parts to send, an earlier failure: %s",
			sh->origin_rank, sh->origin);
	} else if (sh->overflow) {
		status = ODX_ENOSPC;
		snprintf(msg, sizeof(msg),
			 "odx_shuffle: dst[%d] (%s) on rank %d holds %zu bytes, but its parts "
			 "from the %d ranks take %llu bytes",
			 sh->rank, who, sh->rank, sh->dst->size, sh->size,
			 (unsigned long long)need);
	} else if (sh->status) {
		status = sh->status;
		snprintf(msg, sizeof(msg), "odx_shuffle into %s on rank %d: %s", who, sh->rank,
			 sh->msg);
	}
	if (!status) {
		set_length(sh->dst, sh->off);
		if (sh->counts)
			set_length(sh->counts, (size_t)sh->size * sizeof(uint64_t));
	}
	atomic_fetch_add(&ctx->shuffles, 1);
	odx__task_finish(t, status, status ? msg : NULL);
}

void odx__shuffle_run(odx__task *t)
{
	struct odx__shuffle *sh = t->shuffle;
	odx_context *ctx = t->ctx;
	int m = odx__task_memnode(t), p;
	bool last;

	pthread_mutex_lock(&sh->lock);
	if (sh->started) {
		/* queued again: the own part's copy (place stopped there) */
		sh->self_queued = false;
		place(sh, true);
		last = drop(sh);
		pthread_mutex_unlock(&sh->lock);
		odx_fab_kick(ctx->fab);
		if (last)
			finish(sh);
		return;
	}
	sh->started = true;
	sh->pending = 1;
	/* Staged on m like a send's and a receive's host copy: src's latest bytes are there. */
	sh->srcp = replica_bytes(sh->src, m);
	sh->dstp = replica_bytes(sh->dst, m);
	sh->countsp = sh->counts ? replica_bytes(sh->counts, m) : NULL;
	for (p = 0; p < sh->size; p++)
		sh->out_len[p] = part_length(sh->src, p);
	sh->in_len[sh->rank] = sh->out_len[sh->rank];
	sh->row[sh->rank] = ROW_OK;
	for (p = 0; p < sh->size; p++) {
		if (p == sh->rank)
			continue;
		if (!post(sh, OP_SIZE_RECV, p, &sh->in_len[p], sizeof(uint64_t), false))
			sh->row[p] = ROW_FAILED;
	}
	for (p = 0; p < sh->size; p++)
		if (p != sh->rank)
			post(sh, OP_SIZE_SEND, p, &sh->out_len[p], sizeof(uint64_t), false);
	place(sh, true);
	last = drop(sh);
	pthread_mutex_unlock(&sh->lock);
	if (ctx->fab)
		odx_fab_kick(ctx->fab); /* nobody waits on the fabric for these */
	if (last)
		finish(sh);
}

/* What an abandoned side still has to take: the sizes the other ranks send it. Freed when the
 * last receive came back (they may outlive the task). */
struct abandoned {
	pthread_mutex_t lock;
	int pending;
	uint64_t sizes[];
};

static void abandoned_done(void *arg, int status, const char *msg)
{
	struct abandoned *a = *(struct abandoned **)arg;
	bool last;

	(void)status;
	(void)msg;
	pthread_mutex_lock(&a->lock);
	last = --a->pending == 0;
	pthread_mutex_unlock(&a->lock);
	if (last) {
		pthread_mutex_destroy(&a->lock);
		free(a);
	}
}

void odx__shuffle_abandon(odx__task *t, const char *origin)
{
	struct odx__shuffle *sh = t->shuffle;
	odx_context *ctx = t->ctx;
	struct abandoned *a;
	int p, rc;

	if (!sh || sh->started || !ctx->fab)
		return;
	/* The sizes' receives land in a[p] and their callbacks get &self[p]: one allocation. */
	a = malloc(sizeof(*a) + (size_t)sh->size * (sizeof(uint64_t) + sizeof(void *)));
	if (a) {
		pthread_mutex_init(&a->lock, NULL);
		a->pending = 1;
	}
	for (p = 0; p < sh->size; p++) {
		if (p == sh->rank)
			continue;
		/* Its abort replaces the size: rank p sends nothing here and fails naming origin. */
		rc = odx_fab_send_abort(ctx->fab, p, sh->key_size, ODX_ECANCELED, origin);
		if (rc)
			odx__log(ctx, ODX_LOG_WARN,
				 "rank %d could not tell rank %d that its shuffle parts will not "
				 "come: %s (its shuffle fails when this rank is found failed)",
				 ctx->rank, p, odx_strerror(rc));
		if (!a)
			continue;
		struct abandoned **self = (struct abandoned **)(a->sizes + sh->size) + p;

		*self = a;
		pthread_mutex_lock(&a->lock);
		a->pending++;
		pthread_mutex_unlock(&a->lock);
		if (odx_fab_recv(ctx->fab, p, sh->key_size, &a->sizes[p], sizeof(uint64_t),
				 abandoned_done, self)) {
			pthread_mutex_lock(&a->lock);
			a->pending--;
			pthread_mutex_unlock(&a->lock);
		}
	}
	if (a) {
		struct abandoned *self = a;

		abandoned_done(&self, 0, NULL); /* the setup's count */
	}
	odx_fab_kick(ctx->fab);
}

/* ---- the call ------------------------------------------------------------------------------ */

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;

	return x < y ? -1 : x > y;
}

static int check_buffer(odx_context *ctx, odx_buffer *b, const char *what, int i)
{
	int rc;

	if (!b)
		return odx__fail(ctx, ODX_EINVAL, "odx_shuffle: %s[%d] is NULL", what, i);
	rc = odx__buffer_check(b, "odx_shuffle");
	if (rc)
		return rc;
	if (b->ctx != ctx)
		return odx__fail(ctx, ODX_EINVAL, "odx_shuffle: %s[%d] belongs to another context",
				 what, i);
	rc = odx__buffer_partitioned(b, "odx_shuffle");
	if (rc)
		return rc;
	if (b->part_of && odx__shape_strided(&b->part_shape))
		return odx__fail(ctx, ODX_EINVAL,
				 "odx_shuffle: %s[%d] is a 2D tile of a partition: the shuffle "
				 "takes whole buffers and 1D parts",
				 what, i);
	if (strcmp(what, "src") && layout_parts(b))
		return odx__fail(
			ctx, ODX_EINVAL,
			"odx_shuffle: %s[%d] has parts (odx_buffer_set_parts): the shuffle "
			"writes it packed, with one length",
			what, i);
	return 0;
}

/* Every rank makes the same checks on the same facts, so all refuse or none does. */
static int check_args(odx_context *ctx, odx_buffer *const *src, odx_buffer *const *dst,
		      odx_buffer *const *counts)
{
	int n = ctx->size, i, rc, nparts;
	size_t nb = (size_t)n * (counts ? 2 : 1);
	odx_buffer **all;

	ODX__CHECK_ARG(ctx, src, "src");
	ODX__CHECK_ARG(ctx, dst, "dst");
	for (i = 0; i < n; i++) {
		if ((rc = check_buffer(ctx, src[i], "src", i)) ||
		    (rc = check_buffer(ctx, dst[i], "dst", i)) ||
		    (counts && (rc = check_buffer(ctx, counts[i], "counts", i))))
			return rc;
		nparts = layout_parts(src[i]);
		if (nparts != n && !(n == 1 && nparts == 0))
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_shuffle: src[%d] has %d parts (odx_buffer_set_parts); "
				"a shuffle of %d ranks needs %d",
				i, nparts, n, n);
		if (counts && counts[i]->size < (size_t)n * sizeof(uint64_t))
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_shuffle: counts[%d] holds %zu bytes; %d ranks need %zu", i,
				counts[i]->size, n, (size_t)n * sizeof(uint64_t));
		if (src[i] == dst[i] || (counts && (counts[i] == src[i] || counts[i] == dst[i])))
			return odx__fail(
				ctx, ODX_EINVAL,
				"odx_shuffle: src[%d], dst[%d] and counts[%d] must be three "
				"buffers",
				i, i, i);
	}
	/* Each dst and counts buffer is written by one rank: no buffer twice among them. */
	all = malloc(nb * sizeof(*all));
	if (!all)
		return odx__fail(ctx, ODX_ENOMEM, "odx_shuffle: out of memory");
	memcpy(all, dst, (size_t)n * sizeof(*all));
	if (counts)
		memcpy(all + n, counts, (size_t)n * sizeof(*all));
	qsort(all, nb, sizeof(*all), cmp_ptr);
	for (i = 1; i < (int)nb && all[i] != all[i - 1]; i++)
		;
	free(all);
	if (i < (int)nb)
		return odx__fail(
			ctx, ODX_EINVAL,
			"odx_shuffle: a buffer appears twice among dst and counts (each is "
			"written on its own rank)");
	return 0;
}

static struct odx__shuffle *shuffle_new(odx_context *ctx, odx_buffer *const *src,
					odx_buffer *const *dst, odx_buffer *const *counts)
{
	struct odx__shuffle *sh = calloc(1, sizeof(*sh));
	int n = ctx->size, r = ctx->rank, i;

	if (!sh)
		return NULL;
	pthread_mutex_init(&sh->lock, NULL);
	sh->size = n;
	sh->rank = r;
	sh->src = src[r];
	sh->dst = dst[r];
	sh->counts = counts ? counts[r] : NULL;
	sh->part_off = calloc((size_t)n, sizeof(*sh->part_off));
	sh->out_len = calloc((size_t)n, sizeof(*sh->out_len));
	sh->in_len = calloc((size_t)n, sizeof(*sh->in_len));
	sh->row = calloc((size_t)n, 1);
	sh->ops = calloc((size_t)n * OP_KINDS, sizeof(*sh->ops));
	if (!sh->part_off || !sh->out_len || !sh->in_len || !sh->row || !sh->ops) {
		odx__shuffle_free(sh);
		return NULL;
	}
	/* The layout as the program order has it here (a later odx_buffer_set_parts must not
	 * move the parts under this shuffle). */
	for (i = 0; i < n && layout_parts(sh->src); i++)
		sh->part_off[i] = layout_off(sh->src, i);
	return sh;
}

ODX_API int odx_shuffle(odx_context *ctx, odx_buffer *const *src, odx_buffer *const *dst,
			odx_buffer *const *counts, const odx_task_opts *opts, odx_event **event)
{
	static const odx_task_opts no_opts;
	struct odx__shuffle *sh;
	uint64_t keys[2];
	odx__task *t;
	int rc;

	if (!ctx)
		return ODX_EINVAL;
	if (!opts)
		opts = &no_opts;
	rc = check_args(ctx, src, dst, counts);
	if (rc)
		return rc;
	if (ctx->closing)
		return odx__fail(ctx, ODX_ECLOSED, "odx_shuffle: the context is closing");
	sh = shuffle_new(ctx, src, dst, counts);
	t = sh ? odx__task_new(ctx) : NULL;
	if (!t) {
		odx__shuffle_free(sh);
		return odx__fail(ctx, ODX_ENOMEM, "odx_shuffle: out of memory");
	}
	rc = odx__dist_shuffle(ctx, src, dst, opts->priority, opts->tag ? opts->tag : "", keys);
	if (rc) {
		odx__shuffle_free(sh);
		odx__task_put(t);
		return rc;
	}
	sh->t = t;
	sh->key_size = keys[0];
	sh->key_part = keys[1];
	t->kind = ODX__TASK_SHUFFLE;
	t->shuffle = sh;
	t->nargs = counts ? 3 : 2;
	t->args[0] = ODX_BUF(sh->src, ODX_R);
	t->args[1] = ODX_BUF(sh->dst, ODX_W);
	if (counts)
		t->args[2] = ODX_BUF(sh->counts, ODX_W);
	atomic_store_explicit(&t->priority, opts->priority, memory_order_relaxed);
	snprintf(t->tag, sizeof(t->tag), "%s", opts->tag ? opts->tag : "shuffle");
	if (event) {
		atomic_fetch_add(&t->refs, 1);
		t->has_event = true;
		atomic_store_explicit(&t->user_ref, true, memory_order_relaxed);
	}
	/* It waits for room (ODX_SUBMIT_NONBLOCK is not honoured): the other ranks count on it. */
	rc = odx__task_submit(ctx, t, ODX__ADMIT_WAIT);
	odx__dist_shuffled(ctx, dst, counts);
	if (rc) {
		if (event)
			odx__task_put(t);
		return rc;
	}
	if (event)
		*event = (odx_event *)t;
	return 0;
}
