/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_lanes.c - copy lanes: more endpoints of the shm provider, each with a thread of its own,
 * that receive a large transfer's chunks in parallel. Separate: the code the lane threads run,
 * with its own lock and hand-off lists (the progress role's side is fab_poll_lanes and the
 * static inline lane_submit / lane_cancel in fab_state.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- copy lanes ---------------------------------------------------------------------------
 * On shm the receiver's progress does the copy (process_vm_readv with CMA), so one endpoint
 * moves a large transfer at the speed of one thread's copy loop. A lane is another endpoint of
 * the same provider with a thread of its own; the chunks of a transfer take turns over the
 * rail's endpoint and the receiver's lanes. Only receives go through a lane thread: the sender
 * sends every chunk from its rail endpoint to the receiver's lane (the sender's work is small;
 * a second polling thread on the sending side would only take a core from a copying one). The
 * lane thread alone touches its endpoint (FI_THREAD_DOMAIN holds per domain): it posts the
 * receives the progress role hands it, polls, and hands them back completed. */

/* Lane thread: `op` is done (c_* filled in); back to the progress role, which is woken if it
 * sleeps. */
static void lane_done(struct fab_lane *ln, struct fab_op *op)
{
	odx_fab *f = ln->f;
	pthread_mutex_lock(&ln->lock);
	op_append(&ln->out_head, &ln->out_tail, op);
	pthread_mutex_unlock(&ln->lock);
	atomic_store(&ln->has_out, true);
	wake(f);
}

static void lane_posted_remove(struct fab_lane *ln, struct fab_op *op)
{
	if (op->qprev)
		op->qprev->qnext = op->qnext;
	else
		ln->posted = op->qnext;
	if (op->qnext)
		op->qnext->qprev = op->qprev;
}

/* Lane thread: posts what is pending, in order, until the provider pushes back. Returns how many
 * left the pending list. */
static int lane_post(struct fab_lane *ln)
{
	int n = 0;
	while (ln->pending) {
		struct fab_op *op = ln->pending;
		if (atomic_load(&op->cancel)) {
			op->c_err = FI_ECANCELED;
		} else {
			ssize_t ret = fab_post_data(ln->f, &ln->rl, ln->addr[op->peer], op);
			/* the lane's endpoint is full (shm: -FI_ENOMEM past its rx_attr->size posted
			 * receives): the rest waits until some of those posted complete */
			if (ret == -FI_EAGAIN || ret == -FI_ENOMEM)
				break;
			op->c_err = ret ? (int)-ret : 0;
		}
		ln->pending = op->next;
		if (!ln->pending)
			ln->pending_tail = NULL;
		n++;
		if (op->c_err) {
			op->c_len = 0;
			lane_done(ln, op);
			continue;
		}
		op->qprev = NULL;
		op->qnext = ln->posted;
		if (ln->posted)
			ln->posted->qprev = op;
		ln->posted = op;
	}
	return n;
}

/* Lane thread: one poll of its CQ; returns the completions handed back. */
static int lane_poll(struct fab_lane *ln)
{
	struct fi_cq_tagged_entry e[16];
	ssize_t n = fi_cq_read(ln->rl.cq, e, 16);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			struct fab_op *op = e[i].op_context;
			lane_posted_remove(ln, op);
			op->c_err = 0;
			op->c_len = e[i].len;
			op->c_data = e[i].data;
			lane_done(ln, op);
		}
		return (int)n;
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_cq_readerr(ln->rl.cq, &ee, 0) > 0 && ee.op_context) {
			struct fab_op *op = ee.op_context;
			lane_posted_remove(ln, op);
			op->c_err = abs(ee.err) ? abs(ee.err) : FI_EIO;
			op->c_prov_errno = ee.prov_errno;
			op->c_len = ee.len;
			op->c_data = ee.data;
			lane_done(ln, op);
		}
		return 1;
	}
	return 0;
}

void *fab_lane_main(void *arg)
{
	struct fab_lane *ln = arg;
	int idle = 0, sleeps = 0;
	int64_t last = fab_now_ns();
	for (;;) {
		pthread_mutex_lock(&ln->lock);
		bool stop = ln->stop;
		if (ln->in_head) {
			if (ln->pending_tail)
				ln->pending_tail->next = ln->in_head;
			else
				ln->pending = ln->in_head;
			ln->pending_tail = ln->in_tail;
			ln->in_head = ln->in_tail = NULL;
		}
		pthread_mutex_unlock(&ln->lock);
		if (stop)
			break;
		if (atomic_exchange(&ln->cancels, 0) > 0) {
			for (struct fab_op *op = ln->posted; op; op = op->qnext)
				if (atomic_exchange(&op->cancel, false) && op->kind != OP_DATA_TX)
					fi_cancel(&ln->rl.ep->fid, op);
		}
		int work = lane_post(ln);
		work += lane_poll(ln);
		if (work) {
			idle = sleeps = 0;
			last = fab_now_ns();
			continue;
		}
		/* the same policy as the progress thread: spin briefly, yield while bytes move,
		 * then sleep with a growing timeout (a receive posted long before its data) */
		if (++idle < 16 && (ln->posted || ln->pending))
			continue;
		int64_t now = fab_now_ns();
		bool busy = ln->posted || ln->pending;
		if (now - last < (busy ? FAB_ACTIVE_POSTED_NS : FAB_ACTIVE_NS)) {
			/* and briefly after the last op: the next window's chunks come soon, and a
			 * condition-variable wake-up costs more than the copy of a small piece */
			sched_yield();
			continue;
		}
		int64_t ns = !busy ? 100000000ll : 50000ll << (sleeps < 4 ? sleeps : 4);
		sleeps++;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += ns;
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_mutex_lock(&ln->lock);
		ln->idle_wait = true;
		if (!ln->in_head && !ln->stop && !atomic_load(&ln->cancels))
			pthread_cond_timedwait(&ln->cond, &ln->lock, &ts);
		ln->idle_wait = false;
		pthread_mutex_unlock(&ln->lock);
	}
	return NULL;
}

/* Progress role: takes back what the lanes of rail `rail` completed. */
int fab_poll_lanes(odx_fab *f, int rail)
{
	struct fab_rail *rl = &f->rail[rail];
	int n = 0;
	for (int k = 1; k < rl->nlanes; k++) {
		struct fab_lane *ln = rl->lanes[k];
		if (!atomic_load(&ln->has_out))
			continue;
		pthread_mutex_lock(&ln->lock);
		atomic_store(&ln->has_out, false);
		struct fab_op *op = ln->out_head;
		ln->out_head = ln->out_tail = NULL;
		pthread_mutex_unlock(&ln->lock);
		while (op) {
			struct fab_op *next = op->next;
			op->next = NULL;
			if (!op->c_err) {
				fab_op_complete(f, rail, op, op->c_len, op->c_data,
						FI_ADDR_NOTAVAIL);
			} else if (op->kind == OP_DATA_RX && op->c_err == FI_ETRUNC) {
				fab_rx_truncated(f, op, op->c_len, op->c_data);
			} else {
				char detail[160];
				snprintf(detail, sizeof(detail),
					 "provider %s, copy lane %d: %s (%d)", rl->prov, k,
					 fi_strerror(op->c_err), op->c_prov_errno);
				fab_op_complete_error(f, op, op->c_err, detail);
			}
			op = next;
			n++;
		}
	}
	return n;
}

/* Opens want - 1 copy lanes beside rail rl (fewer if the provider refuses more). A lane endpoint
 * is named after the rail's ("<name>_l<k>"), which needs string addresses; lanes also need no
 * local registration (the progress role registers buffers in the rail's domain only). */
void fab_open_lanes(odx_fab *f, struct fab_rail *rl, int want)
{
	char base[FAB_NAME_MAX];
	size_t blen = sizeof(base) - 1;
	rl->nlanes = 1;
	if (want > rl->av_lanes)
		want = rl->av_lanes; /* the rail's AV holds the peers' lane addresses */
	if (want < 2 || rl->mr_local || rl->info->addr_format != FI_ADDR_STR ||
	    fi_getname(&rl->ep->fid, base, &blen) != 0)
		return;
	base[blen < sizeof(base) ? blen : sizeof(base) - 1] = '\0';
	for (int k = 1; k < want && k < FAB_LANES_MAX; k++) {
		struct fab_lane *ln = calloc(1, sizeof(*ln));
		char name[FAB_NAME_MAX], err[256];
		if (!ln)
			return;
		ln->addr = calloc((size_t)f->size, sizeof(*ln->addr));
		ln->rl.info = fi_dupinfo(rl->info);
		ln->rl.cq_fd = -1;
		snprintf(ln->rl.prov, sizeof(ln->rl.prov), "%s", rl->prov);
		snprintf(name, sizeof(name), "%.*s_l%d", (int)sizeof(name) - 8, base, k);
		if (!ln->addr || !ln->rl.info ||
		    fab_open_endpoint(f, &ln->rl, false, name, 1, err, sizeof(err)) != 0) {
			fab_close_rail(&ln->rl);
			free(ln->addr);
			free(ln);
			return;
		}
		ln->f = f;
		pthread_mutex_init(&ln->lock, NULL);
		fab_cond_init_monotonic(&ln->cond);
		rl->lanes[k] = ln;
		rl->nlanes = k + 1;
	}
}

void fab_stop_lanes(struct fab_rail *rl)
{
	for (int k = 1; k < rl->nlanes; k++) {
		struct fab_lane *ln = rl->lanes[k];
		if (!ln->started)
			continue;
		pthread_mutex_lock(&ln->lock);
		ln->stop = true;
		pthread_cond_signal(&ln->cond);
		pthread_mutex_unlock(&ln->lock);
		pthread_join(ln->thread, NULL);
		ln->started = false;
	}
}

/* After fab_stop_lanes and after the ops they held are freed. */
void fab_free_lanes(struct fab_rail *rl)
{
	for (int k = 1; k < rl->nlanes; k++) {
		struct fab_lane *ln = rl->lanes[k];
		fab_close_rail(&ln->rl);
		pthread_cond_destroy(&ln->cond);
		pthread_mutex_destroy(&ln->lock);
		free(ln->addr);
		free(ln);
		rl->lanes[k] = NULL;
	}
	rl->nlanes = 1;
}
