/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk.c - a buffer's copy on the disk tier: spilling its only host copy, reloading it, freeing
 * its slot.
 *
 * The buffer side of the disk tier (the I/O engine is spill.c). It sits below the copy engine,
 * which reads a disk copy as one of its sources (odx__tier_reload); a finished spill reports up
 * through the completion door.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "mem.h"
#include "spill.h"

bool odx__tier_has_disk(const odx_context *ctx)
{
	return ctx->tier && ctx->tier->spill;
}

uint64_t odx__tier_disk_capacity(const odx_context *ctx)
{
	return odx__tier_has_disk(ctx) ? ctx->tier->disk_capacity : 0;
}

/* ---- the disk tier --------------------------------------------------------------------------- */

typedef struct spill_job {
	odx_buffer *b;
	uint64_t wversion, slot, t0;
	/* What it writes (docs/sizes.md): `len` bytes, the buffer's valid runs packed in `pack`
	 * (NULL: [0, len) straight from the host copy); the runs become the disk copy's */
	size_t len;
	void *pack;
	odx__seg *segs;
	int nsegs;
} spill_job;

static void spill_done(void *arg, int status, const char *msg)
{
	spill_job *job = arg;
	odx_buffer *b = job->b;
	odx_context *ctx = b->ctx;
	odx__tier *tier = ctx->tier;
	int home = odx__home(b);
	odx__memnode *host = &ctx->memnodes[home];
	odx__replica *r = &b->replicas[home];
	bool freed = false;

	pthread_mutex_lock(&host->lock);
	pthread_mutex_lock(&b->lock);
	b->disk_busy = false;
	r->pins--;
	r->evicting = false;
	host->evicting -= b->size;
	if (status == 0 && job->wversion == b->wversion) {
		atomic_store(&b->disk_state, ODX__SHARED);
		/* Two valid copies now: the host one is no longer the only one. */
		if (atomic_load(&r->state) == ODX__MODIFIED)
			odx__replica_set_state(b, home, ODX__SHARED);
		b->disk_slot = job->slot;
		b->disk_len = job->len;
		free(b->disk_segs);
		b->disk_segs = job->segs;
		b->disk_nsegs = job->nsegs;
		job->segs = NULL;
		atomic_fetch_add(&tier->spills, 1);
		atomic_fetch_add(&tier->spill_bytes, job->len);
		if (r->pins == 0 && r->holds == 0 && r->allocated) {
			odx__replica_free(ctx, b, home);
			freed = true;
			atomic_fetch_add(&host->writebacks, 1);
			atomic_fetch_add(&host->evicted_bytes, b->size);
		}
	} else {
		if (status == 0) {
			/* A write landed meanwhile: the spilled bytes are old. */
			odx__spill_free(tier->spill, job->slot);
			atomic_fetch_add(&tier->disk_drops, 1);
		} else {
			/* Nothing is lost: the host copy stays where it was. Not retried for this
			 * version of the data, so a failing disk cannot cause a spill storm. */
			b->spill_failed = true;
			atomic_fetch_add(&tier->spill_errors, 1);
			odx__log(ctx, ODX_LOG_ERROR,
				 "spilling buffer %llu (%zu bytes) to the disk tier failed: %s; "
				 "it stays in host RAM",
				 (unsigned long long)b->id, b->size, msg ? msg : odx_strerror(status));
		}
	}
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&host->lock);
	if (ctx->tracing && tier->disk_trace)
		odx__trace_span_buf(tier->disk_trace, status ? "spill (failed)" : "spill", "spill",
				    job->t0, odx__now_ns(), 0, b, job->len);
	free(job->pack);
	free(job->segs);
	free(job);
	/* Up through the door: the watchdog's progress, and room on the host node. */
	odx__mem_done(ctx, &(odx__mem_event){.kind = ODX__MEM_SPILL,
					     .buf = b,
					     .status = status,
					     .changed = {home},
					     .nchanged = 1});
	(void)freed;
	odx__transfer_end(b); /* the last access to b and ctx */
}

int odx__tier_spill(odx_context *ctx, odx_buffer *b)
{
	odx__tier *tier = ctx->tier;
	int home = odx__home(b);
	odx__replica *r = &b->replicas[home];
	spill_job *job;
	int rc;

	if (atomic_load(&b->disk_state) != ODX__INVALID) {
		/* Already on disk and unchanged since: the host copy is clean. */
		odx__replica_free(ctx, b, home);
		return 0;
	}
	job = malloc(sizeof(*job));
	if (!job)
		return ODX_ENOMEM;
	*job = (spill_job){.b = b, .wversion = b->wversion, .t0 = odx__now_ns(), .len = b->size};
	/* Only the valid bytes go to disk (b's lock is held: its lengths hold still). One run from
	 * byte 0 is written in place; several are packed, and their places kept for the reload. */
	if (!b->part_of) {
		odx__seg one, *segs;
		int n = odx__valid_segs(b, &one, 1, &segs, &job->len);

		if (n < 0) {
			free(job);
			return ODX_ENOMEM;
		}
		if (n > 1 || (n == 1 && segs[0].off != 0)) {
			size_t at = 0;

			job->segs = segs == &one ? malloc(sizeof(one)) : segs;
			job->pack = malloc(job->len ? job->len : 1);
			if (!job->segs || !job->pack) {
				if (segs != &one)
					free(segs);
				else
					free(job->segs);
				free(job->pack);
				free(job);
				return ODX_ENOMEM;
			}
			if (segs == &one)
				job->segs[0] = one;
			job->nsegs = n;
			for (int i = 0; i < n; i++) {
				memcpy((char *)job->pack + at,
				       (const char *)(uintptr_t)(r->mem + r->off) + job->segs[i].off,
				       job->segs[i].len);
				at += job->segs[i].len;
			}
		}
	}
	odx__transfer_begin(b);
	/* Pinned while the I/O thread reads it: never freed or moved meanwhile. */
	r->pins++;
	r->evicting = true;
	b->disk_busy = true;
	ctx->memnodes[home].evicting += b->size;
	rc = odx__spill_write(tier->spill,
			      job->pack ? job->pack : (const void *)(uintptr_t)(r->mem + r->off),
			      job->len, &job->slot, spill_done, job);
	if (rc) {
		r->pins--;
		r->evicting = false;
		b->disk_busy = false;
		ctx->memnodes[home].evicting -= b->size;
		if (rc != ODX_ENOSPC) {
			b->spill_failed = true;
			odx__log(ctx, ODX_LOG_ERROR, "cannot spill buffer %llu: %s",
				 (unsigned long long)b->id, odx__spill_last_error());
		} else if (!atomic_load(&tier->fsize_warned)) {
			odx__spill_stats st;

			/* The file-size limit is a full disk tier (the copy stays in RAM); the
			 * limit is named once, as the user can lift it. */
			odx__spill_get_stats(tier->spill, &st);
			if (st.fsize_refusals && !atomic_exchange(&tier->fsize_warned, true))
				odx__log(ctx, ODX_LOG_WARN,
					 "disk tier full at the file-size limit: %s; buffer %llu "
					 "and later ones stay in host RAM",
					 odx__spill_last_error(), (unsigned long long)b->id);
		}
		free(job->pack);
		free(job->segs);
		free(job);
		odx__transfer_end(b);
	}
	return rc;
}

typedef struct reload_job {
	odx_buffer *b;
	void (*done)(void *arg, int status, const char *msg);
	void *arg;
	uint64_t t0;
	size_t len;      /* bytes read back */
	void *pack;      /* packed runs read here, then put in their places in dst */
	char *dst;
	odx__seg *segs;  /* the disk copy's runs (a copy: the buffer's may be replaced) */
	int nsegs;
} reload_job;

static void reload_done(void *arg, int status, const char *msg)
{
	reload_job *job = arg;
	odx_context *ctx = job->b->ctx;
	odx__tier *tier = ctx->tier;

	if (status == 0 && job->pack) {
		size_t at = 0;

		for (int i = 0; i < job->nsegs; i++) {
			memcpy(job->dst + job->segs[i].off, (char *)job->pack + at, job->segs[i].len);
			at += job->segs[i].len;
		}
	}
	free(job->pack);
	free(job->segs);
	if (status == 0) {
		atomic_fetch_add(&tier->reloads, 1);
		atomic_fetch_add(&tier->reload_bytes, job->len);
	} else {
		atomic_fetch_add(&tier->reload_errors, 1);
	}
	if (ctx->tracing && tier->disk_trace)
		odx__trace_span_buf(tier->disk_trace, status ? "reload (failed)" : "reload", "spill",
				    job->t0, odx__now_ns(), 0, job->b, job->len);
	/* A corrupted block is reported (ODX_ECORRUPT) and never published as data: the copy
	 * fails, and so do the tasks waiting for it. */
	job->done(job->arg, status, msg);
	free(job);
}

int odx__tier_reload(odx_context *ctx, odx_buffer *b, void *dst,
		     void (*done)(void *arg, int status, const char *msg), void *arg)
{
	reload_job *job = malloc(sizeof(*job));
	int rc;

	if (!job)
		return ODX_ENOMEM;
	/* The disk copy's facts, under b's lock (its reader count keeps the slot). */
	pthread_mutex_lock(&b->lock);
	*job = (reload_job){.b = b, .done = done, .arg = arg, .t0 = odx__now_ns(),
			    .len = b->disk_len, .dst = dst};
	if (b->disk_segs) {
		job->nsegs = b->disk_nsegs;
		job->segs = malloc((size_t)b->disk_nsegs * sizeof(*job->segs));
		job->pack = malloc(b->disk_len ? b->disk_len : 1);
		if (!job->segs || !job->pack) {
			pthread_mutex_unlock(&b->lock);
			free(job->segs);
			free(job->pack);
			free(job);
			return ODX_ENOMEM;
		}
		memcpy(job->segs, b->disk_segs, (size_t)b->disk_nsegs * sizeof(*job->segs));
	}
	pthread_mutex_unlock(&b->lock);
	rc = odx__spill_read(ctx->tier->spill, b->disk_slot, job->pack ? job->pack : dst, job->len,
			     reload_done, job);
	if (rc) {
		free(job->segs);
		free(job->pack);
		free(job);
	}
	return rc;
}

void odx__tier_disk_free(odx_context *ctx, odx_buffer *b)
{
	if (atomic_load(&b->disk_state) == ODX__INVALID || !odx__tier_has_disk(ctx))
		return;
	/* odx__spill_free defers the release past reads still in flight. */
	odx__spill_free(ctx->tier->spill, b->disk_slot);
	atomic_store(&b->disk_state, ODX__INVALID);
	free(b->disk_segs);
	b->disk_segs = NULL;
	b->disk_nsegs = 0;
}
