/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_api.c - the calls of fabric.h made on callers' threads: queries, submissions (messages,
 * transfers, aborts), barriers and statistics. Separate: the only code that runs on callers'
 * threads; it hands work to the progress role through the submission lists under f->lock and
 * never touches libfabric objects.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- the API ------------------------------------------------------------------------------ */

int odx_fab_rank(const odx_fab *f)
{
	return f->rank;
}

int odx_fab_size(const odx_fab *f)
{
	return f->size;
}

const char *odx_fab_provider(const odx_fab *f)
{
	return f->provider;
}

uint64_t odx_fab_job_key(const odx_fab *f)
{
	return f->wu.job_key;
}

void odx_fab_set_pull_min(odx_fab *f, size_t bytes)
{
	atomic_store(&f->pull_min, bytes);
}

void odx_fab_set_handlers(odx_fab *f, odx_fab_msg_fn on_msg, odx_fab_peer_fn on_peer, void *user)
{
	pthread_mutex_lock(&f->lock);
	f->on_msg = on_msg;
	f->on_peer = on_peer;
	f->user = user;
	pthread_mutex_unlock(&f->lock);
}

size_t odx_fab_max_msg(const odx_fab *f)
{
	(void)f;
	return FAB_CTRL_PAYLOAD_MAX;
}

/* Checks shared by every submission; called with f->lock held. */
static int check_peer_locked(odx_fab *f, int peer)
{
	if (atomic_load(&f->closing))
		return ODX_ECLOSED;
	if (peer < 0 || peer >= f->size)
		return ODX_EINVAL;
	if (f->peers[peer].state == PEER_FAILED)
		return ODX_EPEER;
	return 0;
}

static void submit_op(odx_fab *f, struct fab_op *op)
{
	op->next = NULL;
	if (f->sub_o_tail)
		f->sub_o_tail->next = op;
	else
		f->sub_o_head = op;
	f->sub_o_tail = op;
	atomic_store(&f->has_subs, true);
}

/* With f->lock held: queues op for dst unless dst is failed or unknown (then frees it), releases
 * the lock and wakes the progress thread. */
int fab_submit_to_peer_unlock(odx_fab *f, int dst, struct fab_op *op)
{
	int ret = check_peer_locked(f, dst);

	if (!ret)
		submit_op(f, op);
	pthread_mutex_unlock(&f->lock);
	if (ret) {
		op_free(op);
		return ret;
	}
	wake(f);
	return 0;
}

int odx_fab_send_msg(odx_fab *f, int dst, uint32_t type, const void *payload, size_t len)
{
	if (!f || len > FAB_CTRL_PAYLOAD_MAX || (len && !payload))
		return ODX_EINVAL;
	struct fab_op *op = fab_ctrl_new(f, dst, FAB_MSG_USER, type, payload, len, NULL, 0);
	if (!op)
		return ODX_ENOMEM;
	pthread_mutex_lock(&f->lock);
	return fab_submit_to_peer_unlock(f, dst, op);
}

/* `sized`: a sized send (one message, or its SIZE ahead of its chunks: fab_xfer_start) or a
 * receive up to `len` bytes that learns the length from there (written to *len_out). */
static int submit_xfer(odx_fab *f, bool is_send, int peer, uint64_t key, void *buf, size_t len,
		       odx_fab_done_fn done, void *arg, bool sized, size_t *len_out)
{
	if (!f || (len && !buf) || key >> FAB_KEY_BITS || (sized && !is_send && !len_out))
		return ODX_EINVAL;
	if (len > f->prof.max_xfer && peer != f->rank)
		return ODX_ERANGE;
	struct fab_xfer *x = calloc(1, sizeof(*x));
	if (!x)
		return ODX_ENOMEM;
	x->is_send = is_send;
	x->peer = peer;
	x->key = key;
	x->buf = buf;
	x->len = len;
	x->done = done;
	x->arg = arg;
	x->sized = sized && is_send;
	x->upto = sized && !is_send;
	x->len_out = len_out;
	pthread_mutex_lock(&f->lock);
	int ret = check_peer_locked(f, peer);
	if (!ret) {
		/* anext links the submission list until the progress thread starts it */
		if (f->sub_x_tail)
			f->sub_x_tail->anext = x;
		else
			f->sub_x_head = x;
		f->sub_x_tail = x;
		atomic_store(&f->has_subs, true);
	}
	pthread_mutex_unlock(&f->lock);
	if (ret) {
		free(x);
		return ret;
	}
	wake(f);
	return 0;
}

int odx_fab_send_abort(odx_fab *f, int dst, uint64_t key, int status, const char *msg)
{
	if (!f || key >> FAB_KEY_BITS || status >= 0)
		return ODX_EINVAL;
	if (!msg)
		msg = "";
	size_t n = strlen(msg) < FAB_ABORT_TEXT_MAX ? strlen(msg) : FAB_ABORT_TEXT_MAX;
	struct fab_abort a = {.key = key, .status = status, .text_len = (uint32_t)n};
	pthread_mutex_lock(&f->lock);
	if (dst == f->rank) {
		/* a transfer to oneself is matched locally (self_match): not supported here */
		pthread_mutex_unlock(&f->lock);
		return ODX_EINVAL;
	}
	struct fab_op *op = fab_ctrl_new(f, dst, FAB_MSG_ABORT, 0, &a, sizeof(a), msg, n);
	if (!op) {
		pthread_mutex_unlock(&f->lock);
		return ODX_ENOMEM;
	}
	return fab_submit_to_peer_unlock(f, dst, op);
}

int odx_fab_send(odx_fab *f, int dst, uint64_t key, const void *src, size_t len,
		 odx_fab_done_fn done, void *arg)
{
	return submit_xfer(f, true, dst, key, (void *)src, len, done, arg, false, NULL);
}

int odx_fab_recv(odx_fab *f, int src, uint64_t key, void *dst, size_t len, odx_fab_done_fn done,
		 void *arg)
{
	return submit_xfer(f, false, src, key, dst, len, done, arg, false, NULL);
}

int odx_fab_send_sized(odx_fab *f, int dst, uint64_t key, const void *src, size_t len,
		       odx_fab_done_fn done, void *arg)
{
	return submit_xfer(f, true, dst, key, (void *)src, len, done, arg, true, NULL);
}

int odx_fab_recv_upto(odx_fab *f, int src, uint64_t key, void *dst, size_t cap, size_t *len_out,
		      odx_fab_done_fn done, void *arg)
{
	return submit_xfer(f, false, src, key, dst, cap, done, arg, true, len_out);
}

struct bar_wait {
	odx_fab *f;
	uint64_t epoch;
};

static bool barrier_done(void *arg)
{
	struct bar_wait *w = arg;
	pthread_mutex_lock(&w->f->lock);
	bool done = w->f->bar_released >= w->epoch || w->f->failed_peer >= 0;
	pthread_mutex_unlock(&w->f->lock);
	return done;
}

void odx_fab_kick(odx_fab *f)
{
	if (!f || atomic_load(&f->drivers) > 0)
		return;
	/* parked through a linger, or for FAB_PARK_NS while a caller drove (it may have left
	 * since): submissions alone do not wake it */
	atomic_store(&f->linger_until, 0);
	if (atomic_load(&f->parked) || atomic_load(&f->sleeping))
		wake_fd_signal(f);
}

void odx_fab_assist_kick(odx_fab *f)
{
	if (!f)
		return;
	/* the submitter starts it itself and the progress thread stays parked; a thread in a
	 * round (a callback's submission) takes it in its next one */
	if (!atomic_load(&f->assist) || fab_assist_round(f) < 0)
		odx_fab_kick(f);
}

int odx_fab_barrier(odx_fab *f, int timeout_ms)
{
	return odx_fab_barrier_status(f, timeout_ms, 0, NULL, NULL);
}

int odx_fab_barrier_status(odx_fab *f, int timeout_ms, int status, const char *msg,
			   odx_fab_bar_result *res)
{
	if (res) {
		res->status = 0;
		res->rank = -1;
		res->msg[0] = '\0';
	}
	if (!f || status > 0)
		return ODX_EINVAL;
	if (fab_driving == f)
		return ODX_EBUSY; /* from a callback: checked before the epoch moves */
	if (!msg || !status)
		msg = "";
	size_t n = strlen(msg) < FAB_BAR_TEXT_MAX ? strlen(msg) : FAB_BAR_TEXT_MAX;
	if (f->size == 1) {
		if (res && status) {
			res->status = status;
			res->rank = f->rank;
			snprintf(res->msg, sizeof(res->msg), "%.*s", (int)n, msg);
		}
		return 0;
	}
	/* forever: until every rank arrives or one fails (peers' liveness is the heartbeats' job) */
	bool forever = timeout_ms < 0;
	if (timeout_ms <= 0)
		timeout_ms = f->peer_timeout_ms;
	pthread_mutex_lock(&f->lock);
	if (atomic_load(&f->closing)) {
		pthread_mutex_unlock(&f->lock);
		return ODX_ECLOSED;
	}
	uint64_t epoch = ++f->bar_epoch;
	atomic_store(&f->bar_check, true);
	if (f->rank != 0) {
		struct fab_barrier_msg b = {.epoch = epoch,
					    .status = status,
					    .rank = f->rank,
					    .text_len = (uint32_t)n};
		struct fab_op *op =
			fab_ctrl_new(f, 0, FAB_MSG_BARRIER_IN, 0, &b, sizeof(b), msg, n);
		if (!op) {
			pthread_mutex_unlock(&f->lock);
			return ODX_ENOMEM;
		}
		submit_op(f, op);
	} else {
		fab_bar_merge(&f->bar_in[epoch & 1], status, 0, msg, n);
	}
	pthread_mutex_unlock(&f->lock);
	/* The caller drives the rounds itself (odx_fab_wait): no hand-off to the progress thread,
	 * which would otherwise go on polling for a while after the release, on cores the ranks'
	 * next work needs. */
	struct bar_wait w = {f, epoch};
	int ret;
	do
		ret = odx_fab_wait(f, barrier_done, &w, timeout_ms);
	while (forever && ret == ODX_ETIMEDOUT);
	pthread_mutex_lock(&f->lock);
	bool released = f->bar_released >= epoch;
	bool failed = f->failed_peer >= 0;
	if (res && released && f->bar_out.status) {
		res->status = f->bar_out.status;
		res->rank = f->bar_out.rank;
		snprintf(res->msg, sizeof(res->msg), "%s", f->bar_out.text);
	} else if (res && !released && failed) {
		/* the failure names the rank that failed */
		res->status = ODX_EPEER;
		res->rank = f->failed_peer;
		snprintf(res->msg, sizeof(res->msg), "%s", f->failed_why);
	}
	pthread_mutex_unlock(&f->lock);
	return released ? 0 : failed ? ODX_EPEER : ret;
}

void odx_fab_get_stats(const odx_fab *f, odx_fab_stats *s)
{
	odx_fab *m = (odx_fab *)f;
	s->msgs_sent = atomic_load(&m->msgs_sent);
	s->msgs_recv = atomic_load(&m->msgs_recv);
	s->bytes_sent = atomic_load(&m->bytes_sent);
	s->bytes_recv = atomic_load(&m->bytes_recv);
	s->bad_msgs = atomic_load(&m->bad_msgs);
	s->retries = atomic_load(&m->retries);
	s->eagain = atomic_load(&m->eagain);
	s->throttled = atomic_load(&m->throttled);
	s->transfers = atomic_load(&m->transfers);
	s->lane_bytes = atomic_load(&m->lane_bytes);
	s->sleeps = atomic_load(&m->sleeps);
	s->sleeps_posted = atomic_load(&m->sleeps_posted);
	s->sleep_ns = atomic_load(&m->sleep_ns);
	s->assist_rounds = atomic_load(&m->assist_rounds);
	s->assist_work = atomic_load(&m->assist_work);
	s->parks = atomic_load(&m->parks);
	s->assist_takeovers = atomic_load(&m->assist_takeovers);
}

int odx_fab_peer_addr(const odx_fab *f, int rank, char *buf, size_t n)
{
	if (!f || rank < 0 || rank >= f->size || !buf || !n)
		return ODX_EINVAL;
	if (!f->peer_str || !f->peer_str[rank][0])
		return ODX_ENOENT;
	snprintf(buf, n, "%s", f->peer_str[rank]);
	return 0;
}
