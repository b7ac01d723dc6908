/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_state.h - the state of an open fabric, which the transport's files share: the structs, the
 * small helpers that hot paths call from several files (static inline, so that the split into
 * files costs no call), and the functions one file calls in another. fab_internal.h holds what
 * the rest of fabric/ shares too (wire format, provider profiles, wire-up, fault injection).
 *
 * The transport: an RDM endpoint per rail (the network, and shm for ranks on this host in auto
 * mode), each with an AV table and a CQ, and one progress thread. Where each part lives:
 *   fab_open.c      open and close: endpoints, the name exchange, threads
 *   fab_api.c       the other calls of fabric.h: submissions, aborts, barriers, statistics
 *   fab_progress.c  the progress role: rounds, timers, the idle policy, odx_fab_wait
 *   fab_post.c      posting operations to the provider and reading completions
 *   fab_xfer.c      data transfers: chunking, matching, finishing
 *   fab_ctrl.c      control messages, credits, peers, and what an incoming message does
 *   fab_lanes.c     the shm rail's copy lanes
 *   fab_state.c     logging and memory registration
 *
 * Only the holder of the progress role touches the rails' libfabric objects (FI_THREAD_DOMAIN):
 * the progress thread, or a caller waiting in odx_fab_wait, which drives progress itself (as
 * MPI_Wait does) while the progress thread steps aside; plock serialises them. The shm rail's
 * copy lanes are endpoints of their own, each touched only by its thread, which receives the
 * chunks the role holder hands it and hands them back (fab_lanes.c). API calls hand the role
 * holder submissions through a locked list and an eventfd. Control messages are tagged sends
 * with tag 0 into a pool of pre-posted buffers, bounded per peer by credits. A data transfer
 * needs no announcement: both sides cut it into chunks the same way and tag each with the key
 * and the chunk index, so the receiver posts every chunk straight into the destination at
 * odx_fab_recv time and the sender sends at odx_fab_send time (remote CQ data lets the receiver
 * check each chunk's job, key and length). Only the pull mode announces itself (RTS): the
 * receiver then drops its posted chunks and reads with fi_read from a region the sender
 * registered read-only for that one transfer and closes when the receiver's FIN comes back.
 * A sized send (odx_fab_send_sized), whose receiver knows only a capacity, announces its length
 * (SIZE) when it is several chunks; one of a single chunk is one message on a tag of its own
 * (fab_eager_tag), which odx_fab_recv_upto posts a receive for at once: its length is the
 * message's, as a plain transfer of the same bytes. One that comes before its receive waits in
 * the provider as an unexpected message, as any early chunk does (no record of ours).
 */
#ifndef ODX_FAB_STATE_H
#define ODX_FAB_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_domain.h>

#include "fab_internal.h"

/* ---- limits and timing ----------------------------------------------------------------------- */

#define FAB_NAME_MAX 256
#define FAB_WINDOW_MAX 16
#define FAB_REPLAY_WINDOW 1024
#define FAB_SEQ_AHEAD_MAX 65536
#define FAB_MAP_BUCKETS 1024
#define FAB_WIREUP_TIMEOUT_MS 60000
#define FAB_RAILS_MAX 2
/* Data in motion keeps the progress thread polling (yielding, never sleeping): a data completion
 * this recent, or data ops posted and one posted or completed this recent. Manual-progress
 * providers move bytes only while polled, on both sides (tcp sockets, shm's two-copy protocol),
 * and a receiver asleep in the middle of a 16 MiB chunk stalls it. A receive posted long before
 * its data comes stops counting after FAB_ACTIVE_POSTED_NS. */
#define FAB_ACTIVE_NS 1000000ll
#define FAB_ACTIVE_POSTED_NS 20000000ll
/* After a caller leaves odx_fab_wait with nothing left in motion, the progress thread stays parked
 * this long and submissions do not wake it: a caller that waits again soon (the usual loop: post,
 * wait, post, wait) drives its own operations, and waking the progress thread for each would put
 * a context switch on one of the cores the ranks share. Operations submitted meanwhile and never
 * waited for start at most this late. */
#define FAB_LINGER_NS 1000000ll
/* While a caller drives, the parked progress thread has nothing to do: the caller runs the rounds
 * (timers included), and it wakes the thread through the eventfd when it leaves. The timeout is
 * only a backstop, and a long one: every wake-up takes a core from a copying rank (a 1 ms
 * timeout cost measurable bandwidth on shm; docs/performance-log.md). */
#define FAB_PARK_NS 100000000ll
/* After an assisting worker leaves to run tasks (odx_fab_assist_end with more work), the progress
 * thread stays parked this long: a worker running tasks shorter than this drives all progress
 * between them, and the progress thread takes no core from it. A longer task has the thread poll
 * again (heartbeats, a peer's rendezvous) after this much. */
#define FAB_ASSIST_LINGER_NS 1000000ll

/* ---- operations, transfers, peers, rails ----------------------------------------------------- */

enum op_kind {
	OP_CTRL_TX,
	OP_CTRL_RX,
	OP_DATA_TX,
	OP_DATA_RX,
	OP_READ
};

struct fab_xfer;

struct fab_op {
	struct fi_context2 fictx; /* first: the provider hands it back in completions */
	enum op_kind kind;
	struct fab_op *next;	      /* ready / delayed / waiting queue */
	struct fab_op *lprev, *lnext; /* posted to the provider */
	int peer;
	int retries, injected;
	int slot; /* index in xfer->ops */
	int64_t not_before;
	/* when the provider first pushed it back for lack of resources (a post's or a
	 * completion's FI_ENOMEM / FI_EAGAIN, see fab_post.c "Throttling"); 0: never, or since */
	int64_t throttled_at;
	unsigned throttles; /* back-pressure completion errors in a row (their backoff grows) */
	struct fab_xfer *xfer;
	uint32_t chunk;
	uint16_t msg_type;
	bool exempt, raw, seq_set, posted;
	size_t len;
	unsigned char *buf;
	struct fid_mr *mr;
	void *desc;
	uint64_t tag, rma_addr, rma_key;
	uint64_t cq_data; /* raw OP_CTRL_TX with a data tag (the tests' forged chunks) */
	int rail;	  /* OP_CTRL_RX: the endpoint it is posted on */
	bool detached;	  /* a data op its transfer gave up on: only released when it comes back */
	bool went;	  /* OP_DATA_TX: posted once (counted in its peer's data window) */
	bool sink;	  /* OP_DATA_RX: a second iov into the sink takes bytes beyond the chunk */
	bool eager;	  /* on fab_eager_tag: a one-chunk sized send, or the receive an
			   * odx_fab_recv_upto posts for one before it knows the length */
	/* Copy lanes (data chunks only): 0 is the rail's own endpoint; k > 0 hands the op to lane
	 * k's thread, which posts it, polls for it and hands it back with c_* filled in. */
	uint8_t lane;
	atomic_bool cancel;	      /* the progress role wants it cancelled (lane ops) */
	struct fab_op *qprev, *qnext; /* the lane thread's list of what it posted */
	size_t c_len;
	uint64_t c_data;
	int c_err, c_prov_errno;
	_Alignas(8) unsigned char data[]; /* control buffers: headers are read in place */
};

struct fab_xfer {
	struct fab_xfer *hnext;		/* map chain */
	struct fab_map *map;		/* which map holds it */
	struct fab_xfer *aprev, *anext; /* active list */
	struct fab_xfer *tx_next;	/* peer's list of sends waiting for data credits */
	bool tx_queued;
	bool is_send, is_record, finished;
	int peer;
	uint64_t key;
	uint64_t check;	     /* fab_data_check of this transfer (tagged mode) */
	uint32_t own_chunks; /* a receive's chunks into its buffer; beyond them, into the sink */
	bool mismatch;	     /* the sender's length differs: drain its chunks, then fail */
	bool hollow;	     /* a send the receiver refused: chunks not yet posted go out empty */
	bool aborted;	     /* a record of an ABORT that came before its receive */
	bool sized;	     /* a send: announced with SIZE (never pulled); a record: a SIZE that
			      * came before its receive (len) */
	bool upto;	     /* odx_fab_recv_upto: len is the capacity until the SIZE comes */
	bool await_size;     /* ... and it has not come yet: only the receive of a one-message
			      * send is posted (eager) */
	bool eager;	     /* a sized send of one chunk: one message on fab_eager_tag, no SIZE */
	size_t *len_out;     /* odx_fab_recv_upto: the length received, set before done */
	size_t announced;    /* ... and the length its sender's SIZE gave, beyond its capacity */
	int refused;	     /* ... and fails with this once its last chunk is out (an ABORT
			      * record: the status its receive fails with, refused_msg why) */
	char *refused_msg;
	unsigned char *buf;
	size_t len;
	odx_fab_done_fn done;
	void *arg;
	uint32_t mode, nchunks, next_chunk, completed;
	size_t chunk;
	unsigned inflight, ops_out;
	struct fab_op *ops[FAB_WINDOW_MAX];
	struct fid_mr *mr;
	void *desc;
	uint64_t rma_addr, rma_key;
};

struct fab_map {
	struct fab_xfer *b[FAB_MAP_BUCKETS];
};

enum peer_state {
	PEER_ALIVE,
	PEER_GONE,
	PEER_FAILED
};

struct fab_peer {
	fi_addr_t addr; /* in its rail's AV */
	int rail;	/* 0: the network endpoint, 1: shm for ranks on this host (auto mode) */
	int lanes; /* copy lanes used with it: the fewer of its rail's and the peer's (1: none) */
	fi_addr_t lane_addr[FAB_LANES_MAX]; /* its lanes in its rail's AV (sends go there) */
	enum peer_state state;
	unsigned credits, to_return;
	bool credit_pending, hb_inflight, gone_swept;
	uint64_t next_seq, win_top;
	uint64_t win[FAB_REPLAY_WINDOW / 64];
	int64_t last_heard, last_sent, gone_at;
	struct fab_op *wait_head, *wait_tail;
	/* Operations to it that the provider pushed back (-FI_EAGAIN), in order, and every later
	 * ready operation to it behind them: retried first in each posting pass. Per peer, so a
	 * peer that never takes anything (dead, unreachable) holds back only its own operations,
	 * not the heartbeats and messages to the others (progress role). */
	struct fab_op *held_head, *held_tail;
	unsigned tx_inflight; /* data chunks posted to it (profile tx_limit) */
	/* The data window (fab_xfer.c): data messages sent to it in all and how many of them it
	 * acknowledged (DATA_ACK); data messages received from it in all and how many of those
	 * this rank acknowledged. */
	uint64_t data_sent, data_acked, data_rcvd, data_rcvd_acked;
	struct fab_xfer *tx_wait_head, *tx_wait_tail;
};

struct fab_lane;

/* One endpoint with its own fabric, domain, AV and CQ. */
struct fab_rail {
	struct fi_info *info;
	char prov[64];
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	bool mr_local, mr_endpoint, mr_virt, mr_prov_key, mr_raw, has_rma, has_source;
	bool rx_iov2;	 /* receives take two iovs (the last chunk's sink) */
	size_t chunk;	 /* how transfers over this rail are cut (its provider's profile) */
	size_t lane_min; /* the smallest piece worth a copy lane (profile) */
	int av_lanes;	 /* lanes per peer its address vector has room for (fab_open_endpoint) */
	struct fid_mr *sink_mr;
	void *sink_desc;
	int cq_fd;
	/* Throttling (progress role; fab_post.c): data operations posted on this endpoint, receives
	 * (rx) and sends and reads (tx), against caps derived from the provider's rx_attr->size and
	 * tx_attr->size; those beyond a cap wait here in order until some of the posted complete.
	 * Receives handed to copy lanes are the lanes' own (their endpoints' queues). */
	unsigned thr_posted[2], thr_cap[2], thr_max[2];
	/* data messages sent to one peer and not yet acknowledged by it (its DATA_ACK), at most:
	 * a receiver keeps what comes before its receive as an unexpected message, and shm takes
	 * those from the same rx_attr->size entries as the posted receives; a receiver
	 * acknowledges every ack_every of them (0 window: no limit) */
	unsigned data_window, ack_every;
	struct fab_op *thr_head[2], *thr_tail[2];
	/* copy lanes: more endpoints of this provider, each driven by a thread of its own, so
	 * that the chunks of one transfer are copied in parallel (lane 0 is this endpoint) */
	int nlanes;
	struct fab_lane *lanes[FAB_LANES_MAX];
};

/* A copy lane: an endpoint (in its own fabric and domain) that only its thread touches. The
 * progress role hands it data ops through `in` and takes them back, completed, from `out`. */
struct fab_lane {
	struct fab_rail rl;
	odx_fab *f;
	fi_addr_t *addr; /* each rank's address in this lane's AV */
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* `in` got an op, or stop */
	struct fab_op *in_head, *in_tail, *out_head, *out_tail;
	bool stop, idle_wait;
	atomic_bool has_out;
	atomic_uint cancels;
	/* lane thread only */
	struct fab_op *pending, *pending_tail; /* taken from `in`, not yet accepted (EAGAIN) */
	struct fab_op *posted;
};

#define FAB_HOST_KEY 64

struct odx_fab {
	struct fab_wireup wu;
	struct fab_profile prof;
	struct fab_fault fault;
	int rank, size, peer_timeout_ms, max_retries;
	char provider[64];
	struct fab_rail rail[FAB_RAILS_MAX];
	int nrails;
	/* Where bytes a receive has no room for go (never read): a sender longer than the receive,
	 * or a forged message. Address space only: pages appear when something is written. */
	unsigned char *sink;
	size_t sink_len;
	uint64_t next_mr_key;
	struct fab_peer *peers;
	char (*peer_str)[96]; /* fi_av_straddr of each rank, made before the progress thread starts */
	int wake_fd, spin;
	/* the clock at the start of the current round (progress role): one clock read per round
	 * serves the timers, the idle policy and the activity stamps */
	int64_t now;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t lock; /* submissions, handlers, barrier, peer states */
	pthread_cond_t cond; /* round_gen moved: a round did something, a barrier or a peer changed */
	/* The progress role: held for a round by the progress thread or by a caller in
	 * odx_fab_wait; it guards the libfabric objects and the "progress role only" state below.
	 * Never held across a blocking call. Order: plock, then lock. */
	pthread_mutex_t plock;
	atomic_int drivers;    /* callers in odx_fab_wait that drive progress: the thread parks */
	/* odx_fab_set_assist: the runtime's idle workers drive progress (odx_fab_assist_*), the
	 * progress thread parks meanwhile, and odx_fab_kick runs a round on the caller */
	atomic_bool assist;
	/* the parked thread takes over from workers that tried no round for a park's length
	 * (ODX_FAB_ASSIST_WATCH=0: never; tests that count which thread ran the callbacks) */
	bool assist_watch;
	_Atomic uint64_t assist_polls; /* odx_fab_assist_poll calls, for that take-over */
	int64_t assist_linger_ns;      /* FAB_ASSIST_LINGER_NS, or ODX_FAB_ASSIST_LINGER_US */
	/* a worker went to sleep waiting for transfers: the thread polls, never blocks, until */
	_Atomic int64_t assist_waiting_until;
	atomic_int blocked;    /* callers in odx_fab_wait blocked on cond until a round works */
	atomic_uint round_gen; /* bumped under lock after a round that worked, if any blocked */
	_Atomic int64_t linger_until; /* the progress thread parks until then (FAB_LINGER_NS) */
	struct fab_xfer *sub_x_head, *sub_x_tail;
	struct fab_op *sub_o_head, *sub_o_tail;
	atomic_bool sleeping, parked;
	/* set with the lock held when a submission is queued, so an idle round of the progress
	 * thread costs no lock; bar_check: rank 0 entered a barrier epoch */
	atomic_bool has_subs, bar_check;

	/* progress role only (plock) */
	struct fab_op *ready_head, *ready_tail, *delayed, *posted;
	unsigned held_peers;  /* peers with operations held (fab_peer.held_head) */
	unsigned thr_waiting; /* operations waiting in the rails' throttle queues (thr_head) */
	unsigned data_posted; /* data ops (sends, receives, reads) posted to the provider */
	unsigned busy_posted; /* ops posted to the provider other than control receives */
	int64_t last_data;    /* when a data op was last posted or completed */
	struct fab_xfer *active;
	/* (peer, key): receives a pull announcement may still switch, announcements that came
	 * before their receive (and self-sends before their self-receive), sends a FIN or NACK may
	 * name */
	struct fab_map posted_recvs, unexpected, sends;
	int64_t log_window;
	unsigned log_count, log_suppressed;
	int64_t next_timer;

	_Atomic size_t pull_min;
	odx_fab_msg_fn on_msg;
	odx_fab_peer_fn on_peer;
	void *user;
	uint64_t bar_epoch, bar_released;
	unsigned bar_arrived[2];
	/* the worst status brought to a barrier epoch (rank 0: per epoch parity, merged as ranks
	 * arrive), and what the last release carried (every rank) */
	struct bar_status {
		int status, rank;
		char text[FAB_BAR_TEXT_MAX + 1];
	} bar_in[2], bar_out;
	int failed_peer;
	char failed_why[256];
	atomic_bool closing;

	_Atomic uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv, bad_msgs, retries, eagain,
		transfers, lane_bytes;
	/* operations held back for lack of provider resources: a cap reached, or a post or a
	 * completion that reported FI_ENOMEM / FI_EAGAIN as a completion error (fab_post.c) */
	_Atomic uint64_t throttled;
	/* the progress thread's blocks (block_wait), those with a data op posted, their time */
	_Atomic uint64_t sleeps, sleeps_posted, sleep_ns;
	/* rounds run by assisting threads (odx_fab_assist_poll, odx_fab_kick in assist mode), those
	 * that did something, and the progress thread's parks */
	_Atomic uint64_t assist_rounds, assist_work, parks, assist_takeovers;
};

/* Counters are written by the progress role only (plock): no locked read-modify-write. */
static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* The eventfd the progress thread blocks or parks on: one write wakes it (a full counter needs
 * no second write, so the result is not checked). */
static inline void wake_fd_signal(const odx_fab *f)
{
	uint64_t one = 1;
	ssize_t k = write(f->wake_fd, &one, sizeof(one));
	(void)k;
}

/* A submission for the progress thread: wakes it only if it blocks (a parked one stays). */
static inline void wake(odx_fab *f)
{
	if (atomic_load(&f->sleeping))
		wake_fd_signal(f);
}

/* With f->lock held: callers blocked in odx_fab_wait look at their condition again (a barrier
 * released, a peer failed), even when no round counted work. */
static inline void wake_blocked_locked(odx_fab *f)
{
	atomic_fetch_add(&f->round_gen, 1);
	pthread_cond_broadcast(&f->cond);
}

/* ---- maps: (peer, key) ----------------------------------------------------------------------- */

static inline size_t bucket(uint64_t a, uint64_t b)
{
	return (size_t)(((a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full)) >> 40) %
	       FAB_MAP_BUCKETS;
}

static inline void map_put(struct fab_map *m, size_t h, struct fab_xfer *x)
{
	/* append: equal keys match first come, first served */
	struct fab_xfer **pp = &m->b[h];
	while (*pp)
		pp = &(*pp)->hnext;
	x->hnext = NULL;
	*pp = x;
	x->map = m;
}

static inline void map_remove(struct fab_xfer *x, size_t h)
{
	if (!x->map)
		return;
	for (struct fab_xfer **pp = &x->map->b[h]; *pp; pp = &(*pp)->hnext) {
		if (*pp == x) {
			*pp = x->hnext;
			break;
		}
	}
	x->map = NULL;
}

static inline size_t xfer_bucket(const struct fab_xfer *x)
{
	return bucket((uint64_t)x->peer, x->key);
}

static inline struct fab_xfer *map_take_match(struct fab_map *m, int peer, uint64_t key)
{
	size_t h = bucket((uint64_t)peer, key);
	for (struct fab_xfer **pp = &m->b[h]; *pp; pp = &(*pp)->hnext) {
		struct fab_xfer *x = *pp;
		if (x->peer == peer && x->key == key) {
			*pp = x->hnext;
			x->map = NULL;
			return x;
		}
	}
	return NULL;
}

static inline struct fab_rail *peer_rail(odx_fab *f, int peer)
{
	return &f->rail[f->peers[peer].rail];
}

static inline void mr_close(struct fid_mr **mr)
{
	if (*mr) {
		fi_close(&(*mr)->fid);
		*mr = NULL;
	}
}

/* ---- ops and queues -------------------------------------------------------------------------- */

static inline struct fab_op *op_new(enum op_kind kind, int peer, size_t extra)
{
	struct fab_op *op = calloc(1, sizeof(*op) + extra);
	if (!op)
		return NULL;
	op->kind = kind;
	op->peer = peer;
	op->slot = -1;
	if (extra)
		op->buf = op->data;
	return op;
}

static inline void op_free(struct fab_op *op)
{
	mr_close(&op->mr);
	free(op);
}

static inline void push_ready(odx_fab *f, struct fab_op *op)
{
	op->next = NULL;
	if (op->not_before && op->not_before > f->now) {
		op->next = f->delayed;
		f->delayed = op;
		return;
	}
	if (f->ready_tail)
		f->ready_tail->next = op;
	else
		f->ready_head = op;
	f->ready_tail = op;
}

/* Fault injection: a delay, and for a share of operations a longer one that lets later
 * operations overtake (reordering). */
static inline void fault_delay(odx_fab *f, struct fab_op *op)
{
	if (!f->fault.on)
		return;
	int64_t us = f->fault.delay_min_us;
	if (f->fault.delay_max_us > f->fault.delay_min_us)
		us += (int64_t)(fab_rand(&f->fault.rng) %
				(f->fault.delay_max_us - f->fault.delay_min_us + 1));
	if (fab_chance(&f->fault.rng, f->fault.reorder))
		us += 200 +
		      (int64_t)(fab_rand(&f->fault.rng) % (2 * (f->fault.delay_max_us + 1000)));
	if (us)
		op->not_before = fab_now_ns() + us * 1000;
}

/* The throttle class of a data op posted on its rail's endpoint: 0 receives, 1 sends and reads;
 * -1 for control operations and for receives handed to a copy lane (its own endpoint). */
static inline int thr_class(const struct fab_op *op)
{
	if (op->kind == OP_DATA_RX)
		return op->lane ? -1 : 0;
	return op->kind == OP_DATA_TX || op->kind == OP_READ ? 1 : -1;
}

static inline void posted_add(odx_fab *f, struct fab_op *op)
{
	if (op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ) {
		f->data_posted++;
		f->last_data = f->now;
		int c = thr_class(op);
		if (c >= 0)
			f->rail[f->peers[op->peer].rail].thr_posted[c]++;
	}
	if (op->kind != OP_CTRL_RX)
		f->busy_posted++;
	op->posted = true;
	op->lprev = NULL;
	op->lnext = f->posted;
	if (f->posted)
		f->posted->lprev = op;
	f->posted = op;
}

static inline void posted_remove(odx_fab *f, struct fab_op *op)
{
	if (!op->posted)
		return;
	if (op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ) {
		f->data_posted--;
		f->last_data = f->now;
		int c = thr_class(op);
		if (c >= 0) {
			struct fab_rail *rl = &f->rail[f->peers[op->peer].rail];
			rl->thr_posted[c]--;
			/* a cap lowered by a refusal grows back by one per completion */
			if (rl->thr_cap[c] < rl->thr_max[c])
				rl->thr_cap[c]++;
		}
	}
	if (op->kind != OP_CTRL_RX)
		f->busy_posted--;
	if (op->lprev)
		op->lprev->lnext = op->lnext;
	else
		f->posted = op->lnext;
	if (op->lnext)
		op->lnext->lprev = op->lprev;
	op->posted = false;
}

static inline void xfer_activate(odx_fab *f, struct fab_xfer *x)
{
	x->aprev = NULL;
	x->anext = f->active;
	if (f->active)
		f->active->aprev = x;
	f->active = x;
}

/* Appends op to the list head..tail (linked through op->next). */
static inline void op_append(struct fab_op **head, struct fab_op **tail, struct fab_op *op)
{
	op->next = NULL;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

/* Hands `op` to the lane thread (progress role). */
static inline void lane_submit(struct fab_lane *ln, struct fab_op *op)
{
	pthread_mutex_lock(&ln->lock);
	op_append(&ln->in_head, &ln->in_tail, op);
	if (ln->idle_wait)
		pthread_cond_signal(&ln->cond);
	pthread_mutex_unlock(&ln->lock);
}

/* Asks the lane thread to cancel `op`, handed to it and not yet back (progress role). The thread
 * only looks at ops it still holds, so the flag of one it already handed back is never read. */
static inline void lane_cancel(struct fab_lane *ln, struct fab_op *op)
{
	atomic_store(&op->cancel, true);
	atomic_fetch_add(&ln->cancels, 1);
	pthread_mutex_lock(&ln->lock);
	if (ln->idle_wait)
		pthread_cond_signal(&ln->cond);
	pthread_mutex_unlock(&ln->lock);
}

static inline bool lanes_have_out(odx_fab *f)
{
	for (int r = 0; r < f->nrails; r++)
		for (int k = 1; k < f->rail[r].nlanes; k++)
			if (atomic_load(&f->rail[r].lanes[k]->has_out))
				return true;
	return false;
}

/* ---- fab_state.c: logging, registration ------------------------------------------------------ */

__attribute__((format(printf, 2, 3))) void fab_log(const odx_fab *f, const char *fmt, ...);
__attribute__((format(printf, 2, 3))) void fab_bad(odx_fab *f, const char *fmt, ...);
void fab_cond_init_monotonic(pthread_cond_t *cond);
int fab_mr_register(odx_fab *f, struct fab_rail *rl, const void *buf, size_t len, uint64_t access,
		    struct fid_mr **mr);

/* ---- fab_api.c: submissions ----------------------------------------------------------------- */

/* With f->lock held: queues op for dst unless dst is failed or unknown (then frees it and returns
 * the peer's error), releases the lock and wakes the progress thread. */
int fab_submit_to_peer_unlock(odx_fab *f, int dst, struct fab_op *op);

/* ---- fab_ctrl.c: control messages and peers -------------------------------------------------- */

struct fab_op *fab_ctrl_new(odx_fab *f, int dst, uint16_t type, uint32_t user_type, const void *a,
			    size_t alen, const void *b, size_t blen);
void fab_ctrl_enqueue(odx_fab *f, struct fab_op *op);
void fab_ctrl_send(odx_fab *f, int dst, uint16_t type, const void *body, size_t len);
void fab_peer_fail(odx_fab *f, int rank, const char *why);
void fab_bar_merge(struct bar_status *cur, int status, int rank, const char *text, size_t n);
void fab_handle_ctrl(odx_fab *f, int rail, const unsigned char *buf, size_t len, fi_addr_t from);
void fab_check_barrier(odx_fab *f);

/* ---- fab_xfer.c: transfers ------------------------------------------------------------------- */

void fab_xfer_release(odx_fab *f, struct fab_xfer *x);
void fab_xfer_finish(odx_fab *f, struct fab_xfer *x, int status, const char *msg);
void fab_xfer_fail_peer(odx_fab *f, struct fab_xfer *x, const char *why);
void fab_recv_pull(odx_fab *f, struct fab_xfer *x, struct fab_xfer *r);
/* A receive posted with odx_fab_recv_upto learns its sender's length (SIZE): posts its chunks. */
void fab_recv_size_known(odx_fab *f, struct fab_xfer *x, size_t len);
/* The one message of a one-chunk sized send landed in the receive posted for it (len: the
 * sender's length; truncated: it did not fit, even with the sink). */
void fab_rx_eager(odx_fab *f, struct fab_op *op, size_t len, uint64_t data, bool truncated);
void fab_xfer_start(odx_fab *f, struct fab_xfer *x);
void fab_data_op_release(odx_fab *f, struct fab_op *op);
void fab_data_op_done(odx_fab *f, struct fab_op *op);
/* A data message from `peer` came out of the provider (into a receive or the sink): counted, and
 * acknowledged every ack_every (fab_xfer.c). */
void fab_data_arrived(odx_fab *f, int peer);
/* With `force`, acknowledges what came from `peer` and is not yet (the timer's fallback). */
void fab_data_ack_send(odx_fab *f, int peer, bool force);
/* A DATA_ACK from `peer`: sends waiting for its window go on. */
void fab_data_acked(odx_fab *f, int peer, uint64_t total);
bool fab_rx_checked(odx_fab *f, struct fab_op *op, size_t len, uint64_t data, bool truncated);

/* ---- fab_post.c: posting and completions ----------------------------------------------------- */

ssize_t fab_post_data(odx_fab *f, struct fab_rail *rl, fi_addr_t addr, struct fab_op *op);
/* Sets rl's throttle caps from its provider's queue sizes (or ODX_FAB_RX_CAP / ODX_FAB_TX_CAP). */
void fab_throttle_caps(odx_fab *f, struct fab_rail *rl);
int fab_post_ready(odx_fab *f);
void fab_op_complete(odx_fab *f, int rail, struct fab_op *op, size_t len, uint64_t data,
		     fi_addr_t from);
void fab_op_complete_error(odx_fab *f, struct fab_op *op, int fi_err, const char *detail);
void fab_rx_truncated(odx_fab *f, struct fab_op *op, size_t len, uint64_t data);
int fab_poll_rail(odx_fab *f, int rail);

/* ---- fab_lanes.c: copy lanes ----------------------------------------------------------------- */

void *fab_lane_main(void *arg);
int fab_poll_lanes(odx_fab *f, int rail);
void fab_open_lanes(odx_fab *f, struct fab_rail *rl, int want);
void fab_stop_lanes(struct fab_rail *rl);
void fab_free_lanes(struct fab_rail *rl);

/* ---- fab_open.c: endpoints ------------------------------------------------------------------- */

int fab_open_endpoint(odx_fab *f, struct fab_rail *rl, bool source_broken, const char *name,
		      int lanes, char *err, size_t errlen);
void fab_close_rail(struct fab_rail *rl);

/* ---- fab_progress.c: the progress role ------------------------------------------------------- */

/* The progress thread: its loop, and the drain at close. */
void *fab_progress_main(void *arg);
/* The thread that runs rounds (the progress thread, or a caller in odx_fab_wait): a callback
 * that calls odx_fab_wait or a barrier would wait for itself. */
extern _Thread_local const odx_fab *fab_driving;
/* One round on the calling thread if no other holds the role (-1 then; 0 from a callback), for
 * assisted progress (odx_fab_assist_poll, odx_fab_kick). */
int fab_assist_round(odx_fab *f);

#endif /* ODX_FAB_STATE_H */
