/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_progress.c - the progress role: the rounds (submissions, posting, completions, timers), the
 * idle policy (spin, yield, block, park), the progress thread, and a caller that drives progress
 * itself in odx_fab_wait. Separate because it is the only place that decides when the role is
 * taken and given back; what a round does lives in fab_post.c, fab_xfer.c and fab_ctrl.c.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_eq.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- timers: heartbeats, peer timeouts, departed peers ---------------------------------- */

static void run_timers(odx_fab *f)
{
	int64_t now = f->now;
	if (now < f->next_timer)
		return;
	int64_t timeout = (int64_t)f->peer_timeout_ms * 1000000;
	int64_t hb = timeout / 4;
	f->next_timer = now + (hb / 4 < 5000000 ? hb / 4 : 5000000);
	for (int r = 0; r < f->size; r++) {
		struct fab_peer *p = &f->peers[r];
		if (r == f->rank || p->state == PEER_FAILED)
			continue;
		if (p->state == PEER_GONE) {
			/* a rank that said goodbye: what is still pending with it can never finish */
			if (!p->gone_swept && now - p->gone_at > timeout) {
				p->gone_swept = true;
				for (struct fab_xfer *x = f->active, *next; x; x = next) {
					next = x->anext;
					if (x->peer == r && !x->finished && !x->is_record)
						fab_xfer_fail_peer(
							f, x,
							"it closed its endpoint with this transfer pending");
				}
			}
			continue;
		}
		if (now - p->last_heard > timeout) {
			char why[200];
			snprintf(
				why, sizeof(why),
				"no message for %lld ms (fabric.peer_timeout_ms = %d: on a machine "
				"with many more ranks than cores, raise it)",
				(long long)((now - p->last_heard) / 1000000), f->peer_timeout_ms);
			fab_peer_fail(f, r, why);
			continue;
		}
		/* data received and not acknowledged for a timer period: a sender whose data
		 * window is larger than ours waits for it (fab_data_ack_send) */
		fab_data_ack_send(f, r, true);
		if (now - p->last_sent > hb && !p->hb_inflight)
			fab_ctrl_send(f, r, FAB_MSG_HEARTBEAT, NULL, 0);
	}
}

/* ---- the progress thread ------------------------------------------------------------------ */

/* Every rail's completion queue, and what its copy lanes handed back. */
static int poll_cq(odx_fab *f)
{
	int n = 0;
	for (int r = 0; r < f->nrails; r++) {
		n += fab_poll_rail(f, r);
		if (f->rail[r].nlanes > 1)
			n += fab_poll_lanes(f, r);
	}
	return n;
}

/* Empties the wake eventfd after it woke a block or a park. */
static void wake_fd_drain(const odx_fab *f)
{
	uint64_t v;
	ssize_t k = read(f->wake_fd, &v, sizeof(v));
	(void)k;
}

static int take_submissions(odx_fab *f)
{
	if (!atomic_load(&f->has_subs))
		return 0;
	pthread_mutex_lock(&f->lock);
	atomic_store(&f->has_subs, false);
	struct fab_xfer *xs = f->sub_x_head;
	struct fab_op *os = f->sub_o_head;
	f->sub_x_head = f->sub_x_tail = NULL;
	f->sub_o_head = f->sub_o_tail = NULL;
	pthread_mutex_unlock(&f->lock);
	int n = 0;
	while (os) {
		struct fab_op *next = os->next;
		fab_ctrl_enqueue(f, os);
		os = next;
		n++;
	}
	while (xs) {
		struct fab_xfer *next = xs->anext;
		fab_xfer_start(f, xs);
		xs = next;
		n++;
	}
	return n;
}

static bool has_submissions(odx_fab *f)
{
	return atomic_load(&f->has_subs);
}

/* What an idle round does next: spin again, yield the core, or block. */
enum fab_idle {
	IDLE_SPIN,
	IDLE_YIELD,
	IDLE_BLOCK
};

/* Idle rounds between two yields of this thread: 1 while yields let other threads run (the cores
 * are shared), doubling up to FAB_YIELD_STRIDE_MAX while they come straight back. A yield is a
 * system call that delays the next poll: yielding every idle round costs bandwidth where both
 * sides copy (shm without CMA), and yielding rarely costs the other ranks on shared cores. A
 * yield that took more than twice the fastest one this thread saw ran someone else. */
#define FAB_YIELD_STRIDE_MAX 16
static _Thread_local int yield_stride = 1;
static _Thread_local int64_t yield_fastest = INT64_MAX;

static void idle_yield(void)
{
	int64_t t0 = fab_now_ns();
	sched_yield();
	int64_t took = fab_now_ns() - t0;
	if (took < yield_fastest)
		yield_fastest = took;
	if (took > 2 * yield_fastest)
		yield_stride = 1;
	else if (yield_stride < FAB_YIELD_STRIDE_MAX)
		yield_stride *= 2;
}

/* With plock held. Spin briefly (latency), then yield (other ranks share the cores; see
 * idle_yield for how often); block only when no data is in motion (see FAB_ACTIVE_NS). The same
 * policy for the progress thread and for a caller driving progress in odx_fab_wait. */
static enum fab_idle idle_kind(odx_fab *f, int rounds)
{
	enum fab_idle yield = rounds % yield_stride ? IDLE_SPIN : IDLE_YIELD;
	if (rounds < f->spin)
		return rounds > 16 ? yield : IDLE_SPIN;
	int64_t now = f->now;
	/* a worker sleeps waiting for transfers (assisted progress): their data may come any time */
	if (now < atomic_load_explicit(&f->assist_waiting_until, memory_order_relaxed))
		return yield;
	if (now - f->last_data < FAB_ACTIVE_NS ||
	    (f->data_posted && now - f->last_data < FAB_ACTIVE_POSTED_NS))
		return yield;
	return IDLE_BLOCK;
}

/* With plock held: operations of ours are queued or posted (receives included; the standing
 * control receives not), or a caller is blocked in odx_fab_wait (it waits for a message). */
static bool in_motion(odx_fab *f)
{
	return f->busy_posted || f->ready_head || f->held_peers || f->thr_waiting || f->delayed ||
	       has_submissions(f) || atomic_load(&f->blocked) > 0;
}

/* How the progress thread blocks: decided with plock held (fi_trywait touches the CQ), done
 * without it. */
struct fab_block {
	int64_t wait_ns;
	int cq_fd; /* -1: the wake eventfd and a timeout only */
	bool posted; /* a data op of ours was posted (counted in sleeps_posted) */
};

static bool block_plan(odx_fab *f, int rounds, struct fab_block *b)
{
	int64_t now = fab_now_ns();
	b->wait_ns = 10000000; /* heartbeats and timeouts are checked at least this often */
	for (struct fab_op *op = f->delayed; op; op = op->next)
		if (op->not_before - now < b->wait_ns)
			b->wait_ns = op->not_before - now > 0 ? op->not_before - now : 0;
	b->cq_fd = f->nrails == 1 ? f->rail[0].cq_fd : -1;
	b->posted = f->data_posted > 0;
	if (b->cq_fd < 0 && f->nrails) {
		/* 50 us doubling to 0.8 ms while operations of ours are posted; with none, to the
		 * timer period: an idle runtime wakes ~100 times a second, not ~1000 (on a small
		 * host every wake-up preempts someone's busy thread) */
		int cap = in_motion(f) ? 4 : 8;
		int64_t backoff = 50000ll << (rounds - f->spin < cap ? rounds - f->spin : cap);
		if (backoff < b->wait_ns)
			b->wait_ns = backoff;
	}
	if (b->cq_fd >= 0) {
		struct fid *fids[1] = {&f->rail[0].cq->fid};
		if (fi_trywait(f->rail[0].fabric, fids, 1) != FI_SUCCESS)
			return false; /* completions are waiting: poll again */
	}
	return true;
}

/* Blocks on the wake eventfd (and the CQ's fd) for at most wait_ns; no lock held. */
static void block_wait(odx_fab *f, const struct fab_block *b)
{
	atomic_store(&f->sleeping, true);
	/* after `sleeping` is set, a submission or a leaving caller writes the eventfd; a caller
	 * that arrived drives (the loop then parks) */
	if (has_submissions(f) || atomic_load(&f->closing) || atomic_load(&f->drivers) > 0 ||
	    lanes_have_out(f)) {
		atomic_store(&f->sleeping, false);
		return;
	}
	struct pollfd pfd[2] = {{.fd = f->wake_fd, .events = POLLIN},
				{.fd = b->cq_fd, .events = POLLIN}};
	struct timespec ts = {b->wait_ns / 1000000000, b->wait_ns % 1000000000};
	int64_t t0 = fab_now_ns();
	ppoll(pfd, b->cq_fd >= 0 ? 2 : 1, &ts, NULL);
	atomic_store(&f->sleeping, false);
	/* not stat_add: no plock here (a caller may drive meanwhile) */
	atomic_fetch_add_explicit(&f->sleeps, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->sleep_ns, (uint64_t)(fab_now_ns() - t0),
				  memory_order_relaxed);
	if (b->posted)
		atomic_fetch_add_explicit(&f->sleeps_posted, 1, memory_order_relaxed);
	if (pfd[0].revents & POLLIN)
		wake_fd_drain(f);
}

static bool user_work_pending(odx_fab *f)
{
	if (f->ready_head || f->held_peers || f->thr_waiting || f->delayed || has_submissions(f))
		return true;
	for (struct fab_xfer *x = f->active; x; x = x->anext)
		if (!x->finished && !x->is_record)
			return true;
	for (int r = 0; r < f->size; r++)
		if (f->peers[r].wait_head)
			return true;
	return false;
}

/* See fab_state.h. */
_Thread_local const odx_fab *fab_driving;

/* One round at time `now`; with plock held. */
static int progress_once(odx_fab *f, int64_t now)
{
	const odx_fab *outer = fab_driving;
	fab_driving = f;
	f->now = now;
	int work = take_submissions(f);
	/* new operations go out before the poll: on tcp a poll is a system call or more, and a
	 * send posted a poll later adds that much to a ping-pong's latency */
	if (work)
		work += fab_post_ready(f);
	work += poll_cq(f);
	work += fab_post_ready(f);
	if (f->nrails)
		run_timers(f);
	if (atomic_exchange(&f->bar_check, false))
		fab_check_barrier(f);
	fab_driving = outer;
	return work;
}

/* After a round that did something: callers blocked in odx_fab_wait look at their condition
 * again. */
static void notify_blocked(odx_fab *f)
{
	if (!atomic_load(&f->blocked))
		return;
	pthread_mutex_lock(&f->lock);
	wake_blocked_locked(f);
	pthread_mutex_unlock(&f->lock);
}

/* A round as the progress thread; then, if idle, yields or blocks (without the lock). `rounds`
 * counts the idle rounds before it; returns the count after it. */
static int progress_step(odx_fab *f, int rounds)
{
	struct fab_block b;
	pthread_mutex_lock(&f->plock);
	int work = progress_once(f, fab_now_ns());
	/* Nothing of ours in motion (after a park, a wake-up or a control message): no spinning,
	 * straight to the activity check; the thread polls only while transfers go on. */
	if (!work && rounds + 1 < f->spin && !in_motion(f))
		rounds = f->spin - 1;
	enum fab_idle how = work ? IDLE_SPIN : idle_kind(f, rounds + 1);
	bool block = how == IDLE_BLOCK && block_plan(f, rounds + 1, &b);
	pthread_mutex_unlock(&f->plock);
	if (work)
		notify_blocked(f);
	else if (block)
		block_wait(f, &b);
	else if (how == IDLE_YIELD)
		idle_yield();
	return work ? 0 : rounds + 1;
}

/* What the progress thread last saw of the assisting workers (park's take-over). */
struct park_watch {
	uint64_t polls;
	bool took_over;
};

/* A caller drives progress in odx_fab_wait (or a worker assists), or left it lately with nothing
 * in motion: the progress thread steps aside (no polling on the cores the ranks share). Only a
 * caller that leaves with work left in motion wakes it (parked, not `sleeping`: submissions do
 * not). */
static bool park(odx_fab *f, struct park_watch *w)
{
	int64_t until = atomic_load(&f->linger_until), now = fab_now_ns();
	bool driven = atomic_load(&f->drivers) > 0;
	if (!driven && now >= until)
		return false;
	bool assist = atomic_load(&f->assist);
	if (driven && assist && f->assist_watch) {
		/* Assisting workers that tried no round through a whole park were taken off their
		 * cores (other programs on a loaded host): the thread polls as usual until one
		 * tries again, then parks. */
		uint64_t n = atomic_load_explicit(&f->assist_polls, memory_order_relaxed);
		if (n == w->polls) {
			if (!w->took_over)
				atomic_fetch_add_explicit(&f->assist_takeovers, 1,
							  memory_order_relaxed);
			w->took_over = true;
			return false;
		}
		w->polls = n;
		w->took_over = false;
	}
	/* assisted: a submission made from a callback while the linger began is started now */
	if (!driven && assist && has_submissions(f))
		return false;
	/* assisted, a worker that leaves for a task does not wake the thread: it looks again after
	 * a linger's length, and lingers from there if the worker came back */
	int64_t ns = driven ? (assist ? FAB_ASSIST_LINGER_NS : FAB_PARK_NS) : until - now;
	atomic_fetch_add_explicit(&f->parks, 1, memory_order_relaxed);
	atomic_store(&f->parked, true);
	if (atomic_load(&f->drivers) > 0 || atomic_load(&f->linger_until) > now) {
		struct pollfd pfd = {.fd = f->wake_fd, .events = POLLIN};
		struct timespec ts = {ns / 1000000000, ns % 1000000000};
		ppoll(&pfd, 1, &ts, NULL);
		if (pfd.revents & POLLIN)
			wake_fd_drain(f);
	}
	atomic_store(&f->parked, false);
	return true;
}

void *fab_progress_main(void *arg)
{
	odx_fab *f = arg;
	int rounds = 0;
	struct park_watch watch = {UINT64_MAX, false};
	while (!atomic_load(&f->closing)) {
		if (park(f, &watch)) {
			rounds = 0;
			continue;
		}
		rounds = progress_step(f, rounds);
	}
	/* Closing (no caller may wait any more): drain what the caller started (bounded), say
	 * goodbye, then cancel the rest. */
	int64_t drain = fab_now_ns() +
			(int64_t)(f->peer_timeout_ms < 5000 ? f->peer_timeout_ms : 5000) * 1000000;
	pthread_mutex_lock(&f->plock);
	/* a single rank has nobody to wait for: what is pending can never finish */
	while (f->size > 1 && user_work_pending(f) && fab_now_ns() < drain) {
		pthread_mutex_unlock(&f->plock);
		progress_step(f, f->spin);
		pthread_mutex_lock(&f->plock);
	}
	if (f->nrails) {
		for (int r = 0; r < f->size; r++)
			if (r != f->rank && f->peers[r].state == PEER_ALIVE)
				fab_ctrl_send(f, r, FAB_MSG_BYE, NULL, 0);
		int64_t bye = fab_now_ns() + 500000000ll;
		while ((f->ready_head || f->held_peers || f->thr_waiting || f->delayed ||
			f->posted) &&
		       fab_now_ns() < bye) {
			bool only_rx = true;
			for (struct fab_op *op = f->posted; op && only_rx; op = op->lnext)
				only_rx = op->kind == OP_CTRL_RX;
			if (only_rx && !f->ready_head && !f->held_peers && !f->thr_waiting &&
			    !f->delayed)
				break;
			pthread_mutex_unlock(&f->plock);
			progress_step(f, f->spin);
			pthread_mutex_lock(&f->plock);
		}
	}
	take_submissions(f);
	for (struct fab_xfer *x = f->active, *next; x; x = next) {
		next = x->anext;
		if (!x->finished && !x->is_record)
			fab_xfer_finish(f, x, ODX_ECANCELED, "canceled: the fabric is closing");
	}
	pthread_mutex_unlock(&f->plock);
	return NULL;
}

/* ---- assisted progress: idle workers drive (fabric.h) ---------------------------------------- */

void odx_fab_set_assist(odx_fab *f, bool on)
{
	if (f)
		atomic_store(&f->assist, on);
}

bool odx_fab_get_assist(const odx_fab *f)
{
	return f && atomic_load(&((odx_fab *)f)->assist);
}

int fab_assist_round(odx_fab *f)
{
	if (fab_driving == f)
		return 0; /* from a callback: the thread in the round goes on with it */
	if (pthread_mutex_trylock(&f->plock))
		return -1;
	int work = progress_once(f, fab_now_ns());
	stat_add(&f->assist_rounds, 1);
	if (work)
		stat_add(&f->assist_work, 1);
	pthread_mutex_unlock(&f->plock);
	if (work)
		notify_blocked(f);
	return work;
}

void odx_fab_assist_begin(odx_fab *f)
{
	if (f)
		atomic_fetch_add(&f->drivers, 1);
}

int odx_fab_assist_poll(odx_fab *f)
{
	if (!f)
		return 0;
	/* alive: a parked progress thread does not take over (park) */
	atomic_fetch_add_explicit(&f->assist_polls, 1, memory_order_relaxed);
	int work = fab_assist_round(f);
	return work > 0 ? work : 0;
}

void odx_fab_assist_end(odx_fab *f, bool more_work)
{
	if (!f)
		return;
	/* stored before `drivers` drops: a thread about to park sees one or the other */
	atomic_store(&f->linger_until,
		     more_work && f->assist_linger_ns > 0 ? fab_now_ns() + f->assist_linger_ns : 0);
	if (atomic_fetch_sub(&f->drivers, 1) != 1 || more_work)
		return;
	/* the worker goes to sleep: the progress thread polls from now on */
	if (atomic_load(&f->parked) || atomic_load(&f->sleeping))
		wake_fd_signal(f);
}

void odx_fab_assist_sleep(odx_fab *f, bool waiting)
{
	if (!f)
		return;
	if (waiting)
		atomic_store(&f->assist_waiting_until, fab_now_ns() + FAB_ACTIVE_POSTED_NS);
	if (atomic_load(&f->linger_until) == 0 && !waiting)
		return;
	atomic_store(&f->linger_until, 0);
	if (atomic_load(&f->drivers) == 0 && (atomic_load(&f->parked) || atomic_load(&f->sleeping)))
		wake_fd_signal(f);
}

/* The caller gives the progress role back. The progress thread, parked meanwhile, is woken when
 * something is left to move (manual-progress providers move bytes only while polled) or when the
 * caller goes on waiting blocked (`waiting`: a message it waits for must not sit unpolled through
 * a linger); otherwise a submission wakes it, or its park times out. */
static void driver_leave(odx_fab *f, bool waiting)
{
	bool idle = false;
	if (!waiting && pthread_mutex_trylock(&f->plock) == 0) {
		idle = !in_motion(f);
		pthread_mutex_unlock(&f->plock);
	}
	atomic_store(&f->linger_until, idle ? fab_now_ns() + FAB_LINGER_NS : 0);
	if (atomic_fetch_sub(&f->drivers, 1) != 1 || idle)
		return;
	/* after `drivers` dropped: a parking thread sees it, or is parked and sees the write */
	if (atomic_load(&f->parked) || atomic_load(&f->sleeping))
		wake_fd_signal(f);
}

/* Passive waiting, once driving found nothing in motion: blocked on cond until a round of the
 * progress thread does something (round_gen moves), for at most 10 ms and never past the
 * deadline. Returns true when a round did something or done() holds. */
static bool wait_round(odx_fab *f, bool (*done)(void *), void *arg, int64_t deadline)
{
	/* the caller raised `blocked` before it left the progress role */
	unsigned gen = atomic_load(&f->round_gen);
	/* checked after `blocked` was raised: a round that ended before this is seen by done() */
	bool moved = done(arg);
	if (!moved) {
		int64_t until = fab_now_ns() + 10000000;
		if (until > deadline)
			until = deadline;
		struct timespec ts = {until / 1000000000, until % 1000000000};
		pthread_mutex_lock(&f->lock);
		while (atomic_load(&f->round_gen) == gen && !atomic_load(&f->closing))
			if (pthread_cond_timedwait(&f->cond, &f->lock, &ts) == ETIMEDOUT)
				break;
		moved = atomic_load(&f->round_gen) != gen;
		pthread_mutex_unlock(&f->lock);
	}
	return moved;
}

int odx_fab_wait(odx_fab *f, bool (*done)(void *arg), void *arg, int timeout_ms)
{
	if (!f || !done)
		return ODX_EINVAL;
	if (fab_driving == f)
		return ODX_EBUSY; /* from a callback: it would wait for its own round */
	if (timeout_ms <= 0)
		timeout_ms = f->peer_timeout_ms;
	int64_t deadline = fab_now_ns() + (int64_t)timeout_ms * 1000000;
	int ret = 0, rounds = 0;
	bool driving = true;
	atomic_fetch_add(&f->drivers, 1);
	for (;;) {
		if (done(arg))
			break;
		if (atomic_load(&f->closing)) {
			ret = ODX_ECLOSED;
			break;
		}
		int64_t now = fab_now_ns();
		if (now >= deadline) {
			ret = ODX_ETIMEDOUT;
			break;
		}
		if (!driving) {
			if (wait_round(f, done, arg, deadline)) {
				atomic_fetch_add(&f->drivers, 1);
				atomic_fetch_sub(&f->blocked, 1);
				driving = true;
				rounds = 0;
			}
			continue;
		}
		/* alive, for a parked thread that watches assisting workers (park) */
		if (atomic_load_explicit(&f->assist, memory_order_relaxed))
			atomic_fetch_add_explicit(&f->assist_polls, 1, memory_order_relaxed);
		if (pthread_mutex_trylock(&f->plock)) {
			/* the progress thread is in a round (it parks after it), or another caller
			 * drives */
			sched_yield();
			continue;
		}
		int work = progress_once(f, now);
		enum fab_idle how = work ? IDLE_SPIN : idle_kind(f, ++rounds);
		pthread_mutex_unlock(&f->plock);
		if (work) {
			rounds = 0;
			notify_blocked(f);
		} else if (how == IDLE_YIELD) {
			idle_yield();
		} else if (how == IDLE_BLOCK) {
			/* nothing in motion: the progress thread takes over (at once, polling while
			 * anyone is blocked) until a round works */
			atomic_fetch_add(&f->blocked, 1);
			driver_leave(f, true);
			driving = false;
		}
	}
	if (driving)
		driver_leave(f, false);
	else
		atomic_fetch_sub(&f->blocked, 1);
	return ret;
}
