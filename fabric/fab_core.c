/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_core.c - the transport: an RDM endpoint per rail (the network, and shm for ranks on this
 * host in auto mode), each with an AV table and a CQ, and one progress thread.
 *
 * Only the holder of the progress role touches the rails' libfabric objects (FI_THREAD_DOMAIN):
 * the progress thread, or a caller waiting in odx_fab_wait, which drives progress itself (as
 * MPI_Wait does) while the progress thread steps aside; plock serialises them. The shm rail's
 * copy lanes are endpoints of their own, each touched only by its thread, which receives the
 * chunks the role holder hands it and hands them back (see "copy lanes"). API calls hand
 * the role holder submissions through a locked list and an eventfd. Control messages are tagged sends with tag 0
 * into a pool of pre-posted buffers, bounded per peer by credits. A data transfer needs no
 * announcement: both sides cut it into chunks the same way and tag each with the key and the
 * chunk index, so the receiver posts every chunk straight into the destination at odx_fab_recv
 * time and the sender sends at odx_fab_send time (remote CQ data lets the receiver check each
 * chunk's job, key and length). Only the pull mode announces itself (RTS): the receiver then
 * drops its posted chunks and reads with fi_read from a region the sender registered read-only
 * for that one transfer and closes when the receiver's FIN comes back.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fab_internal.h"
#include "odx/odx.h"

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
 * only a backstop. It was FAB_LINGER_NS: a wake-up every 1 ms in each rank cost 7-11% of the raw
 * loop's bandwidth at 64 KiB-2 MiB on shm on this 2-core VM (every wake-up takes a core from a
 * copying rank; docs/performance.md, "Current figures"). */
#define FAB_PARK_NS 100000000ll

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
	struct fab_xfer *xfer;
	uint32_t chunk;
	uint16_t msg_type;
	bool exempt, raw, seq_set, posted;
	size_t len;
	unsigned char *buf;
	struct fid_mr *mr;
	void *desc;
	uint64_t tag, rma_addr, rma_key;
	uint64_t cq_data; /* raw OP_CTRL_TX with a data tag (the garbage hook) */
	int rail;	  /* OP_CTRL_RX: the endpoint it is posted on */
	bool detached;	  /* a data op its transfer gave up on: only released when it comes back */
	bool sink;	  /* OP_DATA_RX: a second iov into the sink takes bytes beyond the chunk */
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
	unsigned tx_inflight; /* data chunks posted to it (profile tx_limit) */
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
	bool rx_iov2; /* receives take two iovs (the last chunk's sink) */
	size_t chunk;  /* how transfers over this rail are cut (its provider's profile) */
	size_t lane_min; /* the smallest piece worth a copy lane (profile) */
	int av_lanes;	 /* lanes per peer its address vector has room for (open_endpoint) */
	struct fid_mr *sink_mr;
	void *sink_desc;
	int cq_fd;
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
	pthread_cond_t cond;  /* round_gen moved: a round did something, a barrier or a peer changed */
	/* The progress role: held for a round by the progress thread or by a caller in
	 * odx_fab_wait; it guards the libfabric objects and the "progress role only" state below.
	 * Never held across a blocking call. Order: plock, then lock. */
	pthread_mutex_t plock;
	atomic_int drivers;    /* callers in odx_fab_wait that drive progress: the thread parks */
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
	unsigned char last_ctrl[128]; /* for the replay test hook (under lock) */
	size_t last_ctrl_len;
	int last_ctrl_peer;
	atomic_uint garbage_calls;

	_Atomic uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv, bad_msgs, retries, eagain,
		transfers, lane_bytes;
};

/* Counters are written by the progress role only (plock): no locked read-modify-write. */
static void stat_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static void fab_log(const odx_fab *f, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "odx fabric [rank %d]: %s\n", f->rank, line);
}

/* A bad message: dropped, counted and logged, at most 10 lines a second. */
static void fab_bad(odx_fab *f, const char *fmt, ...)
{
	stat_add(&f->bad_msgs, 1);
	int64_t now = fab_now_ns();
	if (now - f->log_window > 1000000000ll) {
		if (f->log_suppressed)
			fab_log(f, "%u more bad messages dropped without a log line",
				f->log_suppressed);
		f->log_window = now;
		f->log_count = 0;
		f->log_suppressed = 0;
	}
	if (f->log_count++ >= 10) {
		f->log_suppressed++;
		return;
	}
	char line[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fab_log(f, "dropped a bad message: %s", line);
}

static void wake(odx_fab *f)
{
	if (atomic_load(&f->sleeping)) {
		uint64_t one = 1;
		ssize_t k = write(f->wake_fd, &one, sizeof(one));
		(void)k;
	}
}

/* With f->lock held: callers blocked in odx_fab_wait look at their condition again (a barrier
 * released, a peer failed), even when no round counted work. */
static void wake_blocked_locked(odx_fab *f)
{
	atomic_fetch_add(&f->round_gen, 1);
	pthread_cond_broadcast(&f->cond);
}

/* ---- maps: (peer, key) --------------------------------------------------------------------- */

static size_t bucket(uint64_t a, uint64_t b)
{
	return (size_t)(((a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full)) >> 40) %
	       FAB_MAP_BUCKETS;
}

static void map_put(struct fab_map *m, size_t h, struct fab_xfer *x)
{
	/* append: equal keys match first come, first served */
	struct fab_xfer **pp = &m->b[h];
	while (*pp)
		pp = &(*pp)->hnext;
	x->hnext = NULL;
	*pp = x;
	x->map = m;
}

static void map_remove(struct fab_xfer *x, size_t h)
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

static size_t xfer_bucket(const struct fab_xfer *x)
{
	return bucket((uint64_t)x->peer, x->key);
}

static struct fab_xfer *map_take_match(struct fab_map *m, int peer, uint64_t key)
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

/* ---- memory registration: the strictest path when the provider asks for it --------------- */

static struct fab_rail *peer_rail(odx_fab *f, int peer)
{
	return &f->rail[f->peers[peer].rail];
}

static int mr_register(odx_fab *f, struct fab_rail *rl, const void *buf, size_t len,
		       uint64_t access, struct fid_mr **mr)
{
	uint64_t key = rl->mr_prov_key ? 0 : f->next_mr_key++;
	int ret = fi_mr_reg(rl->domain, buf, len ? len : 1, access, 0, key, 0, mr, NULL);
	if (ret)
		return ret;
	if (rl->mr_endpoint) {
		ret = fi_mr_bind(*mr, &rl->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(*mr);
		if (ret) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
		}
	}
	return ret;
}

static void mr_close(struct fid_mr **mr)
{
	if (*mr) {
		fi_close(&(*mr)->fid);
		*mr = NULL;
	}
}

/* ---- ops and queues ----------------------------------------------------------------------- */

static struct fab_op *op_new(enum op_kind kind, int peer, size_t extra)
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

static void op_free(struct fab_op *op)
{
	mr_close(&op->mr);
	free(op);
}

static void push_ready(odx_fab *f, struct fab_op *op)
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
static void fault_delay(odx_fab *f, struct fab_op *op)
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

static void posted_add(odx_fab *f, struct fab_op *op)
{
	if (op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ) {
		f->data_posted++;
		f->last_data = f->now;
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

static void posted_remove(odx_fab *f, struct fab_op *op)
{
	if (!op->posted)
		return;
	if (op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ) {
		f->data_posted--;
		f->last_data = f->now;
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

/* ---- control messages --------------------------------------------------------------------- */

static struct fab_op *ctrl_new(odx_fab *f, int dst, uint16_t type, uint32_t user_type,
			       const void *a, size_t alen, const void *b, size_t blen)
{
	struct fab_op *op = op_new(OP_CTRL_TX, dst, sizeof(struct fab_hdr) + alen + blen);
	if (!op)
		return NULL;
	struct fab_hdr *h = (struct fab_hdr *)op->buf;
	h->magic = FAB_MAGIC;
	h->version = FAB_VERSION;
	h->type = type;
	h->job_key = f->wu.job_key;
	h->src = (uint32_t)f->rank;
	h->payload_len = (uint32_t)(alen + blen);
	h->user_type = user_type;
	if (alen)
		memcpy(op->buf + sizeof(*h), a, alen);
	if (blen)
		memcpy(op->buf + sizeof(*h) + alen, b, blen);
	op->len = sizeof(*h) + alen + blen;
	op->msg_type = type;
	op->exempt = type == FAB_MSG_HEARTBEAT || type == FAB_MSG_CREDIT || type == FAB_MSG_BYE;
	return op;
}

static void deliver_local(odx_fab *f, struct fab_op *op);

/* Admits a control message: credits first (exempt ones skip), then the ready queue. */
static void ctrl_enqueue(odx_fab *f, struct fab_op *op)
{
	struct fab_peer *p = &f->peers[op->peer];
	if (op->peer == f->rank) {
		deliver_local(f, op);
		return;
	}
	if (p->state == PEER_FAILED) {
		op_free(op);
		return;
	}
	fault_delay(f, op);
	if (!op->exempt && !op->raw) {
		if (p->credits == 0 || p->wait_head) {
			op->next = NULL;
			if (p->wait_tail)
				p->wait_tail->next = op;
			else
				p->wait_head = op;
			p->wait_tail = op;
			return;
		}
		p->credits--;
	}
	push_ready(f, op);
}

static void credits_release_waiters(odx_fab *f, struct fab_peer *p)
{
	while (p->wait_head && p->credits > 0) {
		struct fab_op *op = p->wait_head;
		p->wait_head = op->next;
		if (!p->wait_head)
			p->wait_tail = NULL;
		p->credits--;
		push_ready(f, op);
	}
}

static void ctrl_send(odx_fab *f, int dst, uint16_t type, const void *body, size_t len)
{
	struct fab_op *op = ctrl_new(f, dst, type, 0, body, len, NULL, 0);
	if (!op) {
		fab_log(f, "out of memory for a control message to rank %d", dst);
		return;
	}
	if (type == FAB_MSG_HEARTBEAT)
		f->peers[dst].hb_inflight = true;
	ctrl_enqueue(f, op);
}

/* ---- transfers ---------------------------------------------------------------------------- */

static void xfer_release(odx_fab *f, struct fab_xfer *x)
{
	if (x->aprev)
		x->aprev->anext = x->anext;
	else if (f->active == x)
		f->active = x->anext;
	if (x->anext)
		x->anext->aprev = x->aprev;
	mr_close(&x->mr);
	free(x->refused_msg);
	free(x);
}

static void xfer_activate(odx_fab *f, struct fab_xfer *x)
{
	x->aprev = NULL;
	x->anext = f->active;
	if (f->active)
		f->active->aprev = x;
	f->active = x;
}

static void lane_cancel(struct fab_lane *ln, struct fab_op *op);

/* Takes a data op out of its transfer's window: the transfer goes on (or ends) without it, and
 * the op is only released when the provider hands it back (or the queue drops it). */
static void op_detach(odx_fab *f, struct fab_xfer *x, struct fab_op *op)
{
	if (op->slot >= 0)
		x->ops[op->slot] = NULL;
	op->slot = -1;
	op->detached = true;
	x->inflight--;
	if (op->posted && op->kind != OP_DATA_TX) {
		struct fab_rail *rl = peer_rail(f, x->peer);
		if (op->lane)
			lane_cancel(rl->lanes[op->lane], op);
		else
			fi_cancel(&rl->ep->fid, op);
	}
}

/* Calls done once; frees the transfer when the provider holds none of its operations. */
static void xfer_finish(odx_fab *f, struct fab_xfer *x, int status, const char *msg)
{
	if (x->finished)
		return;
	x->finished = true;
	if (x->map)
		map_remove(x, xfer_bucket(x));
	if (status) {
		/* never leave a receive posted into memory the caller gets back; queued ops are
		 * dropped when their turn comes */
		for (int i = 0; i < FAB_WINDOW_MAX; i++)
			if (x->ops[i])
				op_detach(f, x, x->ops[i]);
	}
	if (x->is_send && x->mode == FAB_MODE_PULL)
		mr_close(&x->mr); /* the read-only window closes with the transfer */
	if (x->done && !x->is_record)
		x->done(x->arg, status, msg);
	if (x->ops_out == 0)
		xfer_release(f, x);
}

static void xfer_fail_peer(odx_fab *f, struct fab_xfer *x, const char *why)
{
	char msg[400];
	snprintf(msg, sizeof(msg), "%s of %zu bytes (key %#llx) %s rank %d failed: %s",
		 x->is_send ? "send" : "receive", x->len, (unsigned long long)x->key,
		 x->is_send ? "to" : "from", x->peer, why);
	xfer_finish(f, x, ODX_EPEER, msg);
}

/* Posts the next chunks of a transfer, up to the profile's window. */
static void xfer_feed(odx_fab *f, struct fab_xfer *x)
{
	unsigned window = f->prof.window < FAB_WINDOW_MAX ? f->prof.window : FAB_WINDOW_MAX;
	struct fab_peer *p = &f->peers[x->peer];
	while (!x->finished && x->inflight < window && x->next_chunk < x->nchunks) {
		if (x->is_send && f->prof.tx_limit && p->tx_inflight >= f->prof.tx_limit) {
			/* per-peer data credits: wait for a chunk to this peer to complete */
			if (!x->tx_queued) {
				x->tx_queued = true;
				x->tx_next = NULL;
				if (p->tx_wait_tail)
					p->tx_wait_tail->tx_next = x;
				else
					p->tx_wait_head = x;
				p->tx_wait_tail = x;
				x->ops_out++; /* the queue holds a reference */
			}
			return;
		}
		if (x->is_send)
			p->tx_inflight++;
		enum op_kind kind = x->is_send		       ? OP_DATA_TX
				    : x->mode == FAB_MODE_PULL ? OP_READ
							       : OP_DATA_RX;
		struct fab_op *op = op_new(kind, x->peer, 0);
		if (!op) {
			if (x->is_send)
				p->tx_inflight--;
			xfer_finish(f, x, ODX_ENOMEM, "out of memory for a transfer chunk");
			return;
		}
		size_t off = (size_t)x->next_chunk * x->chunk;
		op->xfer = x;
		op->chunk = x->next_chunk;
		op->buf = x->buf ? x->buf + off : NULL;
		op->len = x->len - off < x->chunk ? x->len - off : x->chunk;
		op->desc = x->desc;
		if (kind == OP_DATA_RX && op->chunk >= x->own_chunks) {
			/* a longer sender's chunk beyond this buffer: drained (only with a sink,
			 * see recv_mismatch_begin) */
			op->buf = f->sink;
			op->len = f->sink_len; /* a chunk of any size the sender may cut */
			op->desc = NULL;
		} else if (kind == OP_DATA_RX && f->sink && peer_rail(f, x->peer)->rx_iov2) {
			/* the last chunk: a longer sender's bytes spill into the sink instead of
			 * truncating (tcp;ofi_rxm drops the connection then); with copy lanes every
			 * chunk, since a sender of another length cuts other chunk sizes */
			op->sink = op->chunk == x->own_chunks - 1 || p->lanes > 1;
		}
		op->tag = fab_data_tag(x->key, x->next_chunk);
		/* the chunks take turns over the copy lanes (the same turn on both sides); chunk 0
		 * stays on the rail's endpoint, so a length disagreement still shows there */
		if (kind != OP_READ && p->lanes > 1)
			op->lane = (uint8_t)(op->chunk % (uint32_t)p->lanes);
		op->rma_addr = x->rma_addr + off;
		op->rma_key = x->rma_key;
		for (int i = 0; i < FAB_WINDOW_MAX; i++) {
			if (!x->ops[i]) {
				x->ops[i] = op;
				op->slot = i;
				break;
			}
		}
		if (kind == OP_DATA_TX)
			fault_delay(f, op);
		x->next_chunk++;
		x->inflight++;
		x->ops_out++;
		push_ready(f, op);
	}
}

static void send_nack(odx_fab *f, int peer, uint64_t key, size_t len, int status)
{
	struct fab_fin n = {.key = key, .len = len, .status = status};
	ctrl_send(f, peer, FAB_MSG_NACK, &n, sizeof(n));
}

/* A receive learned that the sender's length (or chunking) differs: it fails, the sender is told
 * (its send fails too unless it already completed). */
static void recv_mismatch(odx_fab *f, struct fab_xfer *x, const char *what)
{
	char msg[300];
	snprintf(msg, sizeof(msg),
		 "rank %d sends %s for key %#llx than the receive posted for it, which expects %zu "
		 "bytes",
		 x->peer, what, (unsigned long long)x->key, x->len);
	send_nack(f, x->peer, x->key, x->len, ODX_EINVAL);
	xfer_finish(f, x, ODX_EINVAL, msg);
}

/* Registers a transfer's own buffer where the provider asks for local registration. */
static int xfer_register(odx_fab *f, struct fab_xfer *x, uint64_t access)
{
	struct fab_rail *rl = peer_rail(f, x->peer);
	if (!rl->mr_local || !x->len || x->mr)
		return 0;
	int ret = mr_register(f, rl, x->buf, x->len, access, &x->mr);
	if (ret) {
		xfer_finish(f, x, fab_err(ret),
			    x->is_send ? "could not register the send buffer"
				       : "could not register the receive buffer");
		return ret;
	}
	x->desc = fi_mr_desc(x->mr);
	return 0;
}

/* Receive x meets the pull announcement r: drop the chunks it posted, read instead. */
static void recv_pull(odx_fab *f, struct fab_xfer *x, struct fab_xfer *r)
{
	size_t len = r->len;
	x->rma_addr = r->rma_addr;
	x->rma_key = r->rma_key;
	x->chunk = r->chunk;
	uint32_t nchunks = r->nchunks;
	xfer_release(f, r);
	if (len != x->len) {
		char what[64];
		snprintf(what, sizeof(what), "%zu bytes", len);
		recv_mismatch(f, x, what);
		return;
	}
	/* nothing is sent into these: the sender announced a pull */
	for (int i = 0; i < FAB_WINDOW_MAX; i++)
		if (x->ops[i])
			op_detach(f, x, x->ops[i]);
	x->mode = FAB_MODE_PULL;
	x->nchunks = nchunks;
	x->next_chunk = 0;
	x->completed = 0;
	if (xfer_register(f, x, FI_READ) == 0)
		xfer_feed(f, x);
}

/* A transfer to ourselves meets its other half: a copy. */
static void self_match(odx_fab *f, struct fab_xfer *rx, struct fab_xfer *tx)
{
	if (tx->len != rx->len) {
		char msg[300];
		snprintf(
			msg, sizeof(msg),
			"rank %d sends %zu bytes for key %#llx, the receive posted for it expects %zu",
			rx->peer, tx->len, (unsigned long long)rx->key, rx->len);
		xfer_finish(f, tx, ODX_EINVAL, msg);
		xfer_finish(f, rx, ODX_EINVAL, msg);
		return;
	}
	if (rx->len)
		memcpy(rx->buf, tx->buf, rx->len);
	stat_add(&f->bytes_recv, rx->len);
	xfer_finish(f, tx, 0, NULL);
	xfer_finish(f, rx, 0, NULL);
}

/* How transfers of `len` bytes with `peer` are cut: its rail's chunk, and with copy lanes one
 * piece per lane at least, each of lane_min bytes or more (page-aligned). Both sides compute it
 * from their length: a receive whose length differs from its send's learns so from chunk 0,
 * which both post on the rail's own endpoint. */
static size_t xfer_chunk(odx_fab *f, int peer, size_t len)
{
	struct fab_rail *rl = peer_rail(f, peer);
	size_t lanes = (size_t)f->peers[peer].lanes;
	if (lanes < 2 || !rl->lane_min || len / rl->lane_min < 2)
		return rl->chunk;
	size_t pieces = len / rl->lane_min < lanes ? len / rl->lane_min : lanes;
	size_t piece = ((len + pieces - 1) / pieces + 4095) & ~(size_t)4095;
	return piece < rl->chunk ? piece : rl->chunk;
}

static void xfer_start(odx_fab *f, struct fab_xfer *x)
{
	xfer_activate(f, x);
	stat_add(&f->transfers, 1);
	struct fab_peer *p = &f->peers[x->peer];
	if (p->state == PEER_FAILED || (p->state == PEER_GONE && p->gone_swept)) {
		xfer_fail_peer(f, x,
			       p->state == PEER_FAILED ? "it is marked failed" : "it has closed");
		return;
	}
	if (x->peer == f->rank) {
		struct fab_map *other = x->is_send ? &f->posted_recvs : &f->unexpected;
		struct fab_xfer *r = map_take_match(other, x->peer, x->key);
		if (r)
			self_match(f, x->is_send ? r : x, x->is_send ? x : r);
		else
			map_put(x->is_send ? &f->unexpected : &f->posted_recvs,
				bucket((uint64_t)x->peer, x->key), x);
		return;
	}
	x->mode = FAB_MODE_TAGGED;
	x->chunk = fab_chunk_size(x->len, xfer_chunk(f, x->peer, x->len));
	x->nchunks = fab_chunk_count(x->len, x->chunk);
	x->own_chunks = x->nchunks;
	x->check = fab_data_check(f->wu.job_key, x->key, x->len, x->chunk, x->nchunks);
	struct fab_rail *rl = peer_rail(f, x->peer);
	if (!x->is_send) {
		/* a pull announced before this receive: read at once */
		struct fab_xfer *r = map_take_match(&f->unexpected, x->peer, x->key);
		if (r && r->aborted) {
			/* the sender said it will never send: fail without posting anything */
			xfer_finish(f, x, r->refused, r->refused_msg);
			xfer_release(f, r);
			return;
		}
		map_put(&f->posted_recvs, bucket((uint64_t)x->peer, x->key), x);
		if (r) {
			recv_pull(f, x, r);
			return;
		}
		if (xfer_register(f, x, rl->has_rma ? FI_RECV | FI_READ : FI_RECV) == 0)
			xfer_feed(f, x);
		return;
	}
	map_put(&f->sends, bucket((uint64_t)x->peer, x->key), x);
	if (x->len >= atomic_load(&f->pull_min) && x->len && rl->has_rma && !rl->mr_raw &&
	    mr_register(f, rl, x->buf, x->len, FI_REMOTE_READ, &x->mr) == 0) {
		uint64_t key = fi_mr_key(x->mr);
		if (key == FI_KEY_NOTAVAIL) {
			mr_close(&x->mr);
		} else {
			struct fab_rts rts = {.key = x->key,
					      .len = x->len,
					      .mode = FAB_MODE_PULL,
					      .nchunks = x->nchunks,
					      .chunk = x->chunk,
					      .rma_addr = rl->mr_virt ? (uint64_t)(uintptr_t)x->buf
								      : 0,
					      .rma_key = key};
			struct fab_op *op =
				ctrl_new(f, x->peer, FAB_MSG_RTS, 0, &rts, sizeof(rts), NULL, 0);
			if (!op) {
				xfer_finish(f, x, ODX_ENOMEM,
					    "out of memory for a pull announcement");
				return;
			}
			x->mode = FAB_MODE_PULL;
			ctrl_enqueue(f, op); /* done when the receiver's FIN comes back */
			return;
		}
	}
	if (xfer_register(f, x, FI_SEND) == 0)
		xfer_feed(f, x);
}

/* ---- peers -------------------------------------------------------------------------------- */

static void peer_fail(odx_fab *f, int rank, const char *why)
{
	struct fab_peer *p = &f->peers[rank];
	if (p->state == PEER_FAILED)
		return;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", why);
	pthread_mutex_lock(&f->lock);
	p->state = PEER_FAILED;
	if (f->failed_peer < 0) {
		f->failed_peer = rank;
		snprintf(f->failed_why, sizeof(f->failed_why), "rank %d failed: %s", rank, msg);
	}
	odx_fab_peer_fn on_peer = f->on_peer;
	void *user = f->user;
	wake_blocked_locked(f);
	pthread_mutex_unlock(&f->lock);
	fab_log(f, "rank %d failed: %s", rank, msg);
	if (on_peer)
		on_peer(user, rank, msg);
	/* drop control messages still waiting for its credits */
	while (p->wait_head) {
		struct fab_op *op = p->wait_head;
		p->wait_head = op->next;
		op_free(op);
	}
	p->wait_tail = NULL;
	for (struct fab_xfer *x = f->active, *next; x; x = next) {
		next = x->anext;
		if (x->peer != rank || x->finished)
			continue;
		if (x->is_record) {
			if (x->map)
				map_remove(x, xfer_bucket(x));
			if (x->ops_out == 0)
				xfer_release(f, x);
			continue;
		}
		xfer_fail_peer(f, x, msg);
	}
}

/* Replay window: accepts each sequence number once, within a window behind the highest seen and
 * a bounded distance ahead (a peer's numbers grow by one per message). */
static bool window_accept(struct fab_peer *p, uint64_t seq)
{
	if (seq >= p->win_top + FAB_SEQ_AHEAD_MAX)
		return false;
	if (seq + FAB_REPLAY_WINDOW < p->win_top + 1 && p->win_top >= FAB_REPLAY_WINDOW)
		return false;
	while (p->win_top <= seq) {
		uint64_t s = p->win_top++;
		p->win[(s / 64) % (FAB_REPLAY_WINDOW / 64)] &= ~(1ull << (s % 64));
	}
	uint64_t *w = &p->win[(seq / 64) % (FAB_REPLAY_WINDOW / 64)];
	if (*w & (1ull << (seq % 64)))
		return false;
	*w |= 1ull << (seq % 64);
	return true;
}

/* ---- incoming control messages ----------------------------------------------------------- */

/* A pull announcement: the receive it names reads instead of waiting for chunks. */
static void handle_rts(odx_fab *f, int src, const struct fab_rts *rts, size_t payload)
{
	bool ok = payload == sizeof(*rts) && rts->mode == FAB_MODE_PULL && rts->len > 0 &&
		  rts->chunk > 0 && rts->nchunks <= FAB_MAX_CHUNKS &&
		  rts->nchunks == (rts->len + rts->chunk - 1) / rts->chunk &&
		  peer_rail(f, src)->has_rma;
	if (!ok) {
		fab_bad(f, "inconsistent transfer announcement from rank %d (mode %u, %llu bytes)",
			src, rts->mode, (unsigned long long)rts->len);
		return;
	}
	struct fab_xfer *r = calloc(1, sizeof(*r));
	if (!r) {
		fab_log(f, "out of memory for a transfer announcement from rank %d", src);
		return;
	}
	r->is_record = true;
	r->peer = src;
	r->key = rts->key;
	r->len = rts->len;
	r->mode = rts->mode;
	r->nchunks = rts->nchunks;
	r->chunk = rts->chunk;
	r->rma_addr = rts->rma_addr;
	r->rma_key = rts->rma_key;
	xfer_activate(f, r);
	struct fab_xfer *x = map_take_match(&f->posted_recvs, src, rts->key);
	if (x)
		recv_pull(f, x, r);
	else
		map_put(&f->unexpected, bucket((uint64_t)src, rts->key), r);
}

/* An ABORT: the send of that key will never come. Its receive fails now with the sender's status
 * and text (its posted chunks are cancelled, as for a failed peer); one not posted yet meets a
 * record of it when it is. */
static void handle_abort(odx_fab *f, int src, const unsigned char *payload, size_t len)
{
	struct fab_abort a;
	char text[FAB_ABORT_TEXT_MAX + 1];
	memcpy(&a, payload, sizeof(a));
	if (len != sizeof(a) + a.text_len || a.text_len > FAB_ABORT_TEXT_MAX ||
	    a.key >> FAB_KEY_BITS) {
		fab_bad(f, "malformed transfer abort from rank %d (%zu bytes)", src, len);
		return;
	}
	memcpy(text, payload + sizeof(a), a.text_len);
	text[a.text_len] = '\0';
	int status = a.status < 0 ? a.status : ODX_ECANCELED; /* never a success */
	struct fab_xfer *x = map_take_match(&f->posted_recvs, src, a.key);
	if (x) {
		xfer_finish(f, x, status, text);
		return;
	}
	struct fab_xfer *r = calloc(1, sizeof(*r));
	if (r)
		r->refused_msg = strdup(text);
	if (!r || !r->refused_msg) {
		free(r);
		fab_log(f, "out of memory for a transfer abort from rank %d", src);
		return;
	}
	r->is_record = true;
	r->aborted = true;
	r->refused = status;
	r->peer = src;
	r->key = a.key;
	xfer_activate(f, r);
	map_put(&f->unexpected, bucket((uint64_t)src, a.key), r);
}

/* Merges a status brought to a barrier into the worst so far: a failure over success, a cause
 * (anything but ODX_ECANCELED) over a consequence, then the lowest rank. With f->lock held. */
static void bar_merge(struct bar_status *cur, int status, int rank, const char *text, size_t n)
{
	bool worse;
	if (!status)
		worse = false;
	else if (!cur->status)
		worse = true;
	else if ((status == ODX_ECANCELED) != (cur->status == ODX_ECANCELED))
		worse = cur->status == ODX_ECANCELED;
	else
		worse = rank < cur->rank;
	if (!worse)
		return;
	cur->status = status;
	cur->rank = rank;
	if (n > FAB_BAR_TEXT_MAX)
		n = FAB_BAR_TEXT_MAX;
	memcpy(cur->text, text, n);
	cur->text[n] = '\0';
}

static void check_barrier(odx_fab *f);

static void handle_ctrl(odx_fab *f, int rail, const unsigned char *buf, size_t len, fi_addr_t from)
{
	struct fab_hdr h;
	if (len < sizeof(h)) {
		fab_bad(f, "truncated header (%zu bytes)", len);
		return;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != FAB_MAGIC) {
		fab_bad(f, "bad magic %#x", h.magic);
		return;
	}
	if (h.version != FAB_VERSION) {
		fab_bad(f, "protocol version %u, expected %u", h.version, FAB_VERSION);
		return;
	}
	if (h.job_key != f->wu.job_key) {
		fab_bad(f, "wrong job key (claims rank %u)", h.src);
		return;
	}
	if (h.src >= (uint32_t)f->size || h.src == (uint32_t)f->rank) {
		fab_bad(f, "sender rank %u out of range or ourselves", h.src);
		return;
	}
	if (f->rail[rail].has_source &&
	    (from != f->peers[h.src].addr || f->peers[h.src].rail != rail)) {
		fab_bad(f, "claims rank %u but %s (%#llx vs %#llx)", h.src,
			from == FI_ADDR_NOTAVAIL ? "its address is not in the address vector"
						 : "comes from another rank's address",
			(unsigned long long)from, (unsigned long long)f->peers[h.src].addr);
		return;
	}
	if ((size_t)h.payload_len != len - sizeof(h)) {
		fab_bad(f, "length field %u but %zu payload bytes arrived from rank %u",
			h.payload_len, len - sizeof(h), h.src);
		return;
	}
	if (h.type < FAB_MSG_USER || h.type >= FAB_MSG_TYPE_END) {
		fab_bad(f, "unknown message type %u from rank %u", h.type, h.src);
		return;
	}
	int src = (int)h.src;
	struct fab_peer *p = &f->peers[src];
	if (p->state == PEER_FAILED)
		return; /* a failed peer stays failed */
	if (!window_accept(p, h.seq)) {
		fab_bad(f, "replayed or out-of-window sequence %llu from rank %d",
			(unsigned long long)h.seq, src);
		return;
	}
	stat_add(&f->msgs_recv, 1);
	stat_add(&f->bytes_recv, len);
	p->last_heard = f->now;
	if (h.credits) {
		p->credits += h.credits;
		if (p->credits > f->prof.credits)
			p->credits = f->prof.credits; /* a confused peer cannot inflate them */
		credits_release_waiters(f, p);
	}
	if (h.type != FAB_MSG_HEARTBEAT && h.type != FAB_MSG_CREDIT && h.type != FAB_MSG_BYE) {
		p->to_return++;
		if (p->to_return >= f->prof.credits / 2 && !p->credit_pending) {
			p->credit_pending = true;
			ctrl_send(f, src, FAB_MSG_CREDIT, NULL, 0);
		}
	}
	const unsigned char *payload = buf + sizeof(h);
	switch (h.type) {
	case FAB_MSG_USER: {
		pthread_mutex_lock(&f->lock);
		odx_fab_msg_fn on_msg = f->on_msg;
		void *user = f->user;
		pthread_mutex_unlock(&f->lock);
		if (on_msg)
			on_msg(user, src, h.user_type, payload, h.payload_len);
		else
			fab_bad(f, "message type %u from rank %d arrived before a handler was set",
				h.user_type, src);
		break;
	}
	case FAB_MSG_RTS: {
		struct fab_rts rts;
		if (h.payload_len < sizeof(rts)) {
			fab_bad(f, "short transfer announcement from rank %d", src);
			break;
		}
		memcpy(&rts, payload, sizeof(rts));
		handle_rts(f, src, &rts, h.payload_len);
		break;
	}
	case FAB_MSG_FIN:
	case FAB_MSG_NACK: {
		struct fab_fin fin;
		if (h.payload_len != sizeof(fin)) {
			fab_bad(f, "bad FIN/NACK length from rank %d", src);
			break;
		}
		memcpy(&fin, payload, sizeof(fin));
		struct fab_xfer *x = map_take_match(&f->sends, src, fin.key);
		if (x && h.type == FAB_MSG_FIN && x->mode != FAB_MODE_PULL) {
			map_put(&f->sends, bucket((uint64_t)src, fin.key), x);
			x = NULL;
		}
		if (!x) {
			/* a NACK may refuse a send that already completed here */
			if (h.type == FAB_MSG_FIN)
				fab_bad(f, "FIN from rank %d for unknown pull transfer %#llx", src,
					(unsigned long long)fin.key);
			break;
		}
		if (h.type == FAB_MSG_FIN) {
			stat_add(&f->bytes_sent, x->len);
			xfer_finish(f, x, 0, NULL);
		} else {
			char msg[240];
			snprintf(msg, sizeof(msg),
				 "rank %d refused the %zu-byte send for key %#llx: its receive "
				 "expects %llu bytes (%s)",
				 src, x->len, (unsigned long long)x->key,
				 (unsigned long long)fin.len, odx_strerror(fin.status));
			int status = fin.status < 0 ? fin.status : ODX_EINVAL;
			if (x->mode == FAB_MODE_TAGGED && !x->finished &&
			    x->completed < x->nchunks) {
				/* The receiver drains every chunk this send cuts (it learned how many
				 * from chunk 0): the ones not posted yet (window, credits, EAGAIN) go
				 * out empty, else it would wait for them forever. The caller hears
				 * when the last one is out: until then the provider may still read
				 * its buffer. */
				x->hollow = true;
				x->refused = status;
				x->refused_msg = strdup(msg);
			} else {
				xfer_finish(f, x, status, msg);
			}
		}
		break;
	}
	case FAB_MSG_BARRIER_IN:
	case FAB_MSG_BARRIER_OUT: {
		struct fab_barrier_msg b;
		if (h.payload_len < sizeof(b) ||
		    (h.type == FAB_MSG_BARRIER_IN) != (f->rank == 0)) {
			fab_bad(f, "misdirected barrier message from rank %d", src);
			break;
		}
		memcpy(&b, payload, sizeof(b));
		if (b.text_len > FAB_BAR_TEXT_MAX || h.payload_len != sizeof(b) + b.text_len ||
		    b.status > 0 || b.rank < 0 || b.rank >= f->size ||
		    (h.type == FAB_MSG_BARRIER_IN && b.status && b.rank != src)) {
			fab_bad(f, "malformed barrier message from rank %d", src);
			break;
		}
		const char *text = (const char *)payload + sizeof(b);
		pthread_mutex_lock(&f->lock);
		if (h.type == FAB_MSG_BARRIER_IN) {
			f->bar_arrived[b.epoch & 1]++;
			bar_merge(&f->bar_in[b.epoch & 1], b.status, b.rank, text, b.text_len);
		} else if (b.epoch > f->bar_released) {
			f->bar_released = b.epoch;
			f->bar_out.status = 0;
			bar_merge(&f->bar_out, b.status, b.rank, text, b.text_len);
		}
		wake_blocked_locked(f);
		pthread_mutex_unlock(&f->lock);
		if (h.type == FAB_MSG_BARRIER_IN)
			check_barrier(f);
		break;
	}
	case FAB_MSG_ABORT:
		if (h.payload_len < sizeof(struct fab_abort)) {
			fab_bad(f, "short transfer abort from rank %d", src);
			break;
		}
		handle_abort(f, src, payload, h.payload_len);
		break;
	case FAB_MSG_BYE:
		pthread_mutex_lock(&f->lock); /* API threads read the state */
		p->state = PEER_GONE;
		p->gone_at = fab_now_ns();
		pthread_mutex_unlock(&f->lock);
		break;
	default: /* heartbeat, credit: the header did the work */
		break;
	}
}

/* Messages to ourselves skip the wire but keep the semantics (progress thread, copied). */
static void deliver_local(odx_fab *f, struct fab_op *op)
{
	const struct fab_hdr *h = (const struct fab_hdr *)op->buf;
	pthread_mutex_lock(&f->lock);
	odx_fab_msg_fn on_msg = f->on_msg;
	void *user = f->user;
	pthread_mutex_unlock(&f->lock);
	if (h->type == FAB_MSG_USER && on_msg)
		on_msg(user, f->rank, h->user_type, op->buf + sizeof(*h), h->payload_len);
	op_free(op);
}

/* Rank 0 releases a barrier epoch once every other rank arrived and it entered it itself. */
static void check_barrier(odx_fab *f)
{
	if (f->rank != 0)
		return;
	pthread_mutex_lock(&f->lock);
	uint64_t e = f->bar_epoch;
	bool release = e > f->bar_released && f->bar_arrived[e & 1] >= (unsigned)f->size - 1;
	struct bar_status out;
	if (release) {
		f->bar_arrived[e & 1] -= (unsigned)f->size - 1;
		f->bar_released = e;
		/* what every rank brought goes back to all of them */
		out = f->bar_in[e & 1];
		f->bar_out = out;
		f->bar_in[e & 1].status = 0;
		wake_blocked_locked(f);
	}
	pthread_mutex_unlock(&f->lock);
	if (release) {
		size_t n = out.status ? strlen(out.text) : 0;
		struct fab_barrier_msg b = {
			.epoch = e, .status = out.status, .rank = out.rank, .text_len = (uint32_t)n};
		for (int r = 1; r < f->size; r++) {
			struct fab_op *op =
				ctrl_new(f, r, FAB_MSG_BARRIER_OUT, 0, &b, sizeof(b), out.text, n);
			if (op)
				ctrl_enqueue(f, op);
			else
				fab_log(f, "out of memory for a barrier release to rank %d", r);
		}
	}
}

/* ---- posting and completions ------------------------------------------------------------- */

static void op_complete_error(odx_fab *f, struct fab_op *op, int fi_err, const char *detail);
static void tx_credit_return(odx_fab *f, int peer);

/* A data op leaves the provider (or the queues) without counting for its transfer. */
static void data_op_release(odx_fab *f, struct fab_op *op)
{
	struct fab_xfer *x = op->xfer;
	if (op->kind == OP_DATA_TX)
		tx_credit_return(f, op->peer);
	if (!op->detached) {
		if (op->slot >= 0)
			x->ops[op->slot] = NULL;
		x->inflight--;
	}
	x->ops_out--;
	op_free(op);
	if (x->finished && x->ops_out == 0)
		xfer_release(f, x);
}

/* Posts a data chunk (a send, or a receive into its buffer and maybe the sink) on rl's
 * endpoint: the progress role for a rail, a lane's thread for its lane. */
static ssize_t post_data(odx_fab *f, struct fab_rail *rl, fi_addr_t addr, struct fab_op *op)
{
	if (op->kind == OP_DATA_TX)
		return fi_tsenddata(rl->ep, op->buf, op->len, op->desc, op->xfer->check, addr,
				    op->tag, op);
	if (op->sink || op->buf == f->sink) {
		struct iovec iov[2] = {{op->buf, op->len}, {f->sink, f->sink_len}};
		void *desc[2] = {op->desc, rl->sink_desc};
		/* an empty chunk: the sink alone */
		size_t n = !op->sink ? 1 : op->len ? 2 : 1;
		if (op->sink && !op->len) {
			iov[0] = iov[1];
			desc[0] = desc[1];
		}
		if (op->buf == f->sink)
			desc[0] = rl->sink_desc;
		return fi_trecvv(rl->ep, iov, desc, n, addr, op->tag, 0, op);
	}
	return fi_trecv(rl->ep, op->buf, op->len, op->desc, addr, op->tag, 0, op);
}

static void lane_submit(struct fab_lane *ln, struct fab_op *op);

/* Returns 0 when the op left the queue (posted, dropped or failed), -FI_EAGAIN to keep it. */
static int op_post(odx_fab *f, struct fab_op *op)
{
	struct fab_peer *p = op->peer >= 0 ? &f->peers[op->peer] : NULL;
	bool data = op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ;
	if (data && (op->detached || op->xfer->finished || p->state == PEER_FAILED)) {
		data_op_release(f, op); /* its transfer is over: never post into returned memory */
		return 0;
	}
	if (p && p->state == PEER_FAILED && op->kind == OP_CTRL_TX) {
		op_free(op);
		return 0;
	}
	if (f->fault.on && op->kind != OP_CTRL_RX) {
		if (fab_chance(&f->fault.rng, f->fault.eagain))
			return -FI_EAGAIN;
		/* Injected completion errors stop one short of the retry bound: they exercise the
		 * retry path without failing a healthy peer; real provider errors still can. */
		if (op->injected < f->max_retries - 1 &&
		    fab_chance(&f->fault.rng, f->fault.cqerr)) {
			op->injected++;
			op_complete_error(f, op, FI_EIO, "injected completion error");
			return 0;
		}
	}
	if (op->kind == OP_DATA_TX && op->xfer->hollow)
		op->len = 0; /* refused: the receiver only counts it */
	if (op->kind == OP_CTRL_TX && !op->raw) {
		struct fab_hdr *h = (struct fab_hdr *)op->buf;
		if (!op->seq_set) {
			/* a retry resends the same sequence number: a duplicate is then dropped */
			h->seq = p->next_seq++;
			op->seq_set = true;
		}
		h->credits = p->to_return;
		p->to_return = 0;
		if (op->msg_type == FAB_MSG_CREDIT)
			p->credit_pending = false;
	}
	struct fab_rail *rl = op->kind == OP_CTRL_RX ? &f->rail[op->rail] : peer_rail(f, op->peer);
	if (rl->mr_local && !op->desc && !op->mr && op->len &&
	    (op->kind == OP_CTRL_TX || op->kind == OP_CTRL_RX)) {
		int r = mr_register(f, rl, op->buf, op->kind == OP_CTRL_RX ? FAB_CTRL_BUF : op->len,
				    op->kind == OP_CTRL_RX ? FI_RECV : FI_SEND, &op->mr);
		if (r)
			return r == -FI_EAGAIN
				       ? r
				       : (op_complete_error(f, op, -r, "registration failed"), 0);
		op->desc = fi_mr_desc(op->mr);
	}
	if (op->kind == OP_DATA_RX && rl->mr_local && !rl->sink_mr &&
	    (op->sink || op->buf == f->sink)) {
		int r = mr_register(f, rl, f->sink, f->sink_len, FI_RECV, &rl->sink_mr);
		if (r)
			return r == -FI_EAGAIN
				       ? r
				       : (op_complete_error(f, op, -r, "sink registration failed"),
					  0);
		rl->sink_desc = fi_mr_desc(rl->sink_mr);
	}
	if (op->lane && op->kind == OP_DATA_RX) {
		/* counted as posted from here: the lane hands it back when the provider does */
		lane_submit(rl->lanes[op->lane], op);
		posted_add(f, op);
		return 0;
	}
	ssize_t ret;
	/* a chunk for a copy lane goes from this endpoint to the peer's lane: only the receiver's
	 * lane threads work (the copy is the receiver's) */
	fi_addr_t addr = !p ? FI_ADDR_UNSPEC : op->lane ? p->lane_addr[op->lane] : p->addr;
	switch (op->kind) {
	case OP_CTRL_TX:
		ret = op->tag ? fi_tsenddata(rl->ep, op->buf, op->len, op->desc, op->cq_data, addr,
					     op->tag, op)
			      : fi_tsend(rl->ep, op->buf, op->len, op->desc, addr, FAB_TAG_CTRL,
					 op);
		break;
	case OP_CTRL_RX:
		ret = fi_trecv(rl->ep, op->buf, FAB_CTRL_BUF, op->desc, FI_ADDR_UNSPEC,
			       FAB_TAG_CTRL, 0, op);
		break;
	case OP_DATA_TX:
	case OP_DATA_RX:
		ret = post_data(f, rl, addr, op);
		break;
	case OP_READ:
		ret = fi_read(rl->ep, op->buf, op->len, op->desc, addr, op->rma_addr, op->rma_key,
			      op);
		break;
	default:
		ret = -FI_EINVAL;
	}
	if (ret == -FI_EAGAIN)
		return -FI_EAGAIN;
	if (ret) {
		op_complete_error(f, op, (int)-ret, "post failed");
		return 0;
	}
	posted_add(f, op);
	/* Only control messages count as "heard from us": data chunks and one-sided reads may take
	 * longer than the peer timeout on a slow link, or never reach the peer's layer at all. */
	if (p && op->kind == OP_CTRL_TX)
		p->last_sent = f->now;
	/* keep a copy of small messages for the replay test hook (cheap: headers and tiny bodies) */
	if (op->kind == OP_CTRL_TX && !op->raw && op->len <= 128) {
		pthread_mutex_lock(&f->lock);
		memcpy(f->last_ctrl, op->buf, op->len);
		f->last_ctrl_len = op->len;
		f->last_ctrl_peer = op->peer;
		pthread_mutex_unlock(&f->lock);
	}
	return 0;
}

static int post_ready(odx_fab *f)
{
	int posted = 0;
	int64_t now = f->delayed ? f->now : 0;
	for (struct fab_op **pp = &f->delayed; *pp;) {
		struct fab_op *op = *pp;
		if (op->not_before <= now) {
			*pp = op->next;
			op->not_before = 0;
			push_ready(f, op);
		} else {
			pp = &op->next;
		}
	}
	while (f->ready_head && posted < 64) {
		/* unlink first: op_post may free the op or queue it again (retry) */
		struct fab_op *op = f->ready_head;
		f->ready_head = op->next;
		if (!f->ready_head)
			f->ready_tail = NULL;
		op->next = NULL;
		if (op_post(f, op) == -FI_EAGAIN) {
			/* back at the head: the provider (or the fault layer) pushed back */
			op->next = f->ready_head;
			f->ready_head = op;
			if (!f->ready_tail)
				f->ready_tail = op;
			stat_add(&f->eagain, 1);
			break;
		}
		posted++;
	}
	return posted;
}

/* A data chunk to `peer` finished: let sends waiting for its data credits go on. */
static void tx_credit_return(odx_fab *f, int peer)
{
	struct fab_peer *p = &f->peers[peer];
	if (!f->prof.tx_limit)
		return;
	p->tx_inflight--;
	while (p->tx_wait_head && p->tx_inflight < f->prof.tx_limit) {
		struct fab_xfer *x = p->tx_wait_head;
		p->tx_wait_head = x->tx_next;
		if (!p->tx_wait_head)
			p->tx_wait_tail = NULL;
		x->tx_queued = false;
		x->ops_out--;
		if (x->finished) {
			if (x->ops_out == 0)
				xfer_release(f, x);
			continue;
		}
		xfer_feed(f, x);
	}
}

static void data_op_done(odx_fab *f, struct fab_op *op)
{
	struct fab_xfer *x = op->xfer;
	if (op->detached || x->finished) {
		data_op_release(f, op);
		return;
	}
	if (op->kind == OP_DATA_TX)
		tx_credit_return(f, op->peer);
	if (op->slot >= 0)
		x->ops[op->slot] = NULL;
	x->ops_out--;
	x->inflight--;
	if (op->kind == OP_DATA_TX) {
		stat_add(&f->bytes_sent, op->len);
	} else {
		stat_add(&f->bytes_recv, op->len);
		if (op->lane)
			stat_add(&f->lane_bytes, op->len);
		f->peers[x->peer].last_heard = f->now;
	}
	op_free(op);
	x->completed++;
	if (x->completed < x->nchunks) {
		xfer_feed(f, x);
		return;
	}
	if (x->is_send && x->mode == FAB_MODE_PULL)
		return; /* waits for the receiver's FIN */
	if (x->hollow) {
		xfer_finish(f, x, x->refused,
			    x->refused_msg ? x->refused_msg : "the receiver refused the send");
		return;
	}
	if (x->mode == FAB_MODE_PULL) {
		struct fab_fin fin = {.key = x->key, .len = x->len};
		ctrl_send(f, x->peer, FAB_MSG_FIN, &fin, sizeof(fin));
	}
	if (x->mismatch) {
		char msg[300];
		snprintf(msg, sizeof(msg),
			 "rank %d sends a different length for key %#llx (in %u chunk%s) than the "
			 "receive posted for it, which expects %zu bytes",
			 x->peer, (unsigned long long)x->key, x->nchunks,
			 x->nchunks == 1 ? "" : "s", x->len);
		xfer_finish(f, x, ODX_EINVAL, msg);
		return;
	}
	xfer_finish(f, x, 0, NULL);
}

/* The first chunk that says the sender's length differs: from now on the receive takes exactly
 * the sender's chunks (beyond its own buffer into the sink) and then fails. Draining them, rather
 * than cancelling, keeps the sender's chunks from waiting in the provider forever: shm completes
 * a rank's sends in order, so one never received would hold back all later ones. */
static void recv_mismatch_begin(odx_fab *f, struct fab_xfer *x, uint64_t data)
{
	uint32_t theirs = fab_check_chunks(data);
	if (!f->sink && theirs > x->own_chunks)
		theirs = x->own_chunks; /* nowhere to drain the rest: they stay in the provider */
	x->mismatch = true;
	send_nack(f, x->peer, x->key, x->len, ODX_EINVAL); /* the send fails early, if pending */
	for (int i = 0; i < FAB_WINDOW_MAX; i++)
		if (x->ops[i] && x->ops[i]->chunk >= theirs)
			op_detach(f, x, x->ops[i]); /* chunks the sender does not have */
	x->nchunks = theirs;
	if (x->next_chunk > theirs)
		x->next_chunk = theirs;
}

/* A chunk landed in a posted receive: the remote CQ data must name this job and key, else the
 * bytes are foreign (another job, a forged or stale message): dropped, counted, and the chunk's
 * receive posted again, so the real chunk still lands. A length disagreement starts the drain.
 * Returns true when the op was consumed here (posted again). */
static bool rx_checked(odx_fab *f, struct fab_op *op, size_t len, uint64_t data, bool truncated)
{
	struct fab_xfer *x = op->xfer;
	if (op->detached || x->finished)
		return false;
	if ((data ^ x->check) >> 32) {
		fab_bad(f,
			"a data message from rank %d for key %#llx chunk %u does not carry this "
			"job's check for it (another job, stale or forged); receive posted again",
			op->peer, (unsigned long long)x->key, op->chunk);
		push_ready(f, op);
		return true;
	}
	if (!x->mismatch && (truncated || (uint32_t)data != (uint32_t)x->check || len != op->len))
		recv_mismatch_begin(f, x, data);
	return false;
}

static void op_complete(odx_fab *f, int rail, struct fab_op *op, size_t len, uint64_t data,
			fi_addr_t from)
{
	posted_remove(f, op);
	switch (op->kind) {
	case OP_CTRL_RX:
		handle_ctrl(f, rail, op->buf, len, from);
		push_ready(f, op);
		break;
	case OP_CTRL_TX:
		stat_add(&f->msgs_sent, 1);
		stat_add(&f->bytes_sent, op->len);
		if (op->msg_type == FAB_MSG_HEARTBEAT)
			f->peers[op->peer].hb_inflight = false;
		op_free(op);
		break;
	case OP_DATA_RX:
		if (rx_checked(f, op, len, data, false))
			break;
		/* fall through */
	default:
		data_op_done(f, op);
	}
}

static void op_complete_error(odx_fab *f, struct fab_op *op, int fi_err, const char *detail)
{
	posted_remove(f, op);
	struct fab_xfer *x = op->xfer;
	if (x && (fi_err == FI_ECANCELED || op->detached || x->finished)) {
		data_op_release(f, op);
		return;
	}
	if (fi_err == FI_ECANCELED) {
		if (op->kind == OP_CTRL_RX && !atomic_load(&f->closing))
			push_ready(f, op);
		else
			op_free(op);
		return;
	}
	if (op->kind == OP_CTRL_RX) {
		/* e.g. FI_ETRUNC: something larger than any control message of ours */
		fab_bad(f, "control receive failed: %s (%s)", fi_strerror(fi_err), detail);
		push_ready(f, op);
		return;
	}
	stat_add(&f->retries, 1);
	if (++op->retries <= f->max_retries) {
		/* bounded retry with a short growing pause */
		op->not_before = fab_now_ns() + (int64_t)op->retries * 1000000;
		push_ready(f, op);
		return;
	}
	char why[256];
	snprintf(why, sizeof(why), "%s to it failed %d times, last: %s (%s)",
		 op->kind == OP_CTRL_TX ? "a control message" : "a data transfer", op->retries,
		 fi_strerror(fi_err), detail);
	int peer = op->peer;
	if (op->kind == OP_CTRL_TX && op->msg_type == FAB_MSG_HEARTBEAT)
		f->peers[peer].hb_inflight = false;
	op_complete_error(f, op, FI_ECANCELED, detail); /* frees it */
	peer_fail(f, peer, why);
}

/* A chunk receive got more bytes than its chunk and the sink hold: whose, and why. */
static void rx_truncated(odx_fab *f, struct fab_op *op, size_t len, uint64_t data)
{
	posted_remove(f, op);
	if (!rx_checked(f, op, len, data, true))
		data_op_done(f, op);
}

static int poll_rail(odx_fab *f, int rail)
{
	struct fab_rail *rl = &f->rail[rail];
	struct fi_cq_tagged_entry e[16];
	fi_addr_t from[16];
	ssize_t n = rl->has_source ? fi_cq_readfrom(rl->cq, e, 16, from)
				   : fi_cq_read(rl->cq, e, 16);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++)
			op_complete(f, rail, e[i].op_context, e[i].len, e[i].data,
				    rl->has_source ? from[i] : FI_ADDR_NOTAVAIL);
		return (int)n;
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_cq_readerr(rl->cq, &ee, 0) > 0 && ee.op_context) {
			struct fab_op *op = ee.op_context;
			if (op->kind == OP_DATA_RX && abs(ee.err) == FI_ETRUNC) {
				rx_truncated(f, op, ee.len, ee.data);
				return 1;
			}
			char detail[160];
			snprintf(detail, sizeof(detail), "provider %s: %s", rl->prov,
				 fi_cq_strerror(rl->cq, ee.prov_errno, ee.err_data, NULL, 0));
			op_complete_error(f, op, ee.err, detail);
		}
		return 1;
	}
	return 0;
}

/* ---- copy lanes ---------------------------------------------------------------------------
 * On shm the receiver's progress does the copy (process_vm_readv with CMA), so one endpoint
 * moves a large transfer at the speed of one thread's copy loop. A lane is another endpoint of
 * the same provider with a thread of its own; the chunks of a transfer take turns over the
 * rail's endpoint and the receiver's lanes. Only receives go through a lane thread: the sender
 * sends every chunk from its rail endpoint to the receiver's lane (the sender's work is small;
 * a second polling thread on the sending side would only take a core from a copying one). The
 * lane thread alone touches its endpoint (FI_THREAD_DOMAIN holds per domain): it posts the
 * receives the progress role hands it, polls, and hands them back completed. */

/* Appends op to the list head..tail (linked through op->next). */
static void op_append(struct fab_op **head, struct fab_op **tail, struct fab_op *op)
{
	op->next = NULL;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

/* Hands `op` to the lane thread (progress role). */
static void lane_submit(struct fab_lane *ln, struct fab_op *op)
{
	pthread_mutex_lock(&ln->lock);
	op_append(&ln->in_head, &ln->in_tail, op);
	if (ln->idle_wait)
		pthread_cond_signal(&ln->cond);
	pthread_mutex_unlock(&ln->lock);
}

/* Asks the lane thread to cancel `op`, handed to it and not yet back (progress role). The thread
 * only looks at ops it still holds, so the flag of one it already handed back is never read. */
static void lane_cancel(struct fab_lane *ln, struct fab_op *op)
{
	atomic_store(&op->cancel, true);
	atomic_fetch_add(&ln->cancels, 1);
	pthread_mutex_lock(&ln->lock);
	if (ln->idle_wait)
		pthread_cond_signal(&ln->cond);
	pthread_mutex_unlock(&ln->lock);
}

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
			ssize_t ret = post_data(ln->f, &ln->rl, ln->addr[op->peer], op);
			if (ret == -FI_EAGAIN)
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

static void *lane_main(void *arg)
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
static int poll_lanes(odx_fab *f, int rail)
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
				op_complete(f, rail, op, op->c_len, op->c_data, FI_ADDR_NOTAVAIL);
			} else if (op->kind == OP_DATA_RX && op->c_err == FI_ETRUNC) {
				rx_truncated(f, op, op->c_len, op->c_data);
			} else {
				char detail[160];
				snprintf(detail, sizeof(detail),
					 "provider %s, copy lane %d: %s (%d)", rl->prov, k,
					 fi_strerror(op->c_err), op->c_prov_errno);
				op_complete_error(f, op, op->c_err, detail);
			}
			op = next;
			n++;
		}
	}
	return n;
}

static bool lanes_have_out(odx_fab *f)
{
	for (int r = 0; r < f->nrails; r++)
		for (int k = 1; k < f->rail[r].nlanes; k++)
			if (atomic_load(&f->rail[r].lanes[k]->has_out))
				return true;
	return false;
}

static int poll_cq(odx_fab *f)
{
	int n = 0;
	for (int r = 0; r < f->nrails; r++) {
		n += poll_rail(f, r);
		if (f->rail[r].nlanes > 1)
			n += poll_lanes(f, r);
	}
	return n;
}

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
						xfer_fail_peer(
							f, x,
							"it closed its endpoint with this transfer pending");
				}
			}
			continue;
		}
		if (now - p->last_heard > timeout) {
			char why[200];
			snprintf(why, sizeof(why),
				 "no message for %lld ms (fabric.peer_timeout_ms = %d: on a machine "
				 "with many more ranks than cores, raise it)",
				 (long long)((now - p->last_heard) / 1000000), f->peer_timeout_ms);
			peer_fail(f, r, why);
			continue;
		}
		if (now - p->last_sent > hb && !p->hb_inflight)
			ctrl_send(f, r, FAB_MSG_HEARTBEAT, NULL, 0);
	}
}

/* ---- the progress thread ------------------------------------------------------------------ */

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
		ctrl_enqueue(f, os);
		os = next;
		n++;
	}
	while (xs) {
		struct fab_xfer *next = xs->anext;
		xfer_start(f, xs);
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
 * system call (1.3 us on this VM) that delays the next poll: yielding every idle round cost 5-10%
 * of the raw loop's bandwidth at 64-128 KiB on shm without CMA (both sides copy), and yielding
 * every 16th round cost 3-8% more test time with 4 ranks on 2 cores. A yield that took
 * more than twice the fastest one this thread saw ran someone else (here: 1-2 us alone, 3-10 us
 * with 3-4 spinning threads on 2 cores). */
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
	if (now - f->last_data < FAB_ACTIVE_NS ||
	    (f->data_posted && now - f->last_data < FAB_ACTIVE_POSTED_NS))
		return yield;
	return IDLE_BLOCK;
}

/* With plock held: operations of ours are queued or posted (receives included; the standing
 * control receives not), or a caller is blocked in odx_fab_wait (it waits for a message). */
static bool in_motion(odx_fab *f)
{
	return f->busy_posted || f->ready_head || f->delayed || has_submissions(f) ||
	       atomic_load(&f->blocked) > 0;
}

/* How the progress thread blocks: decided with plock held (fi_trywait touches the CQ), done
 * without it. */
struct fab_block {
	int64_t wait_ns;
	int cq_fd; /* -1: the wake eventfd and a timeout only */
};

static bool block_plan(odx_fab *f, int rounds, struct fab_block *b)
{
	int64_t now = fab_now_ns();
	b->wait_ns = 10000000; /* heartbeats and timeouts are checked at least this often */
	for (struct fab_op *op = f->delayed; op; op = op->next)
		if (op->not_before - now < b->wait_ns)
			b->wait_ns = op->not_before - now > 0 ? op->not_before - now : 0;
	b->cq_fd = f->nrails == 1 ? f->rail[0].cq_fd : -1;
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
	ppoll(pfd, b->cq_fd >= 0 ? 2 : 1, &ts, NULL);
	atomic_store(&f->sleeping, false);
	if (pfd[0].revents & POLLIN) {
		uint64_t v;
		ssize_t k = read(f->wake_fd, &v, sizeof(v));
		(void)k;
	}
}

static bool user_work_pending(odx_fab *f)
{
	if (f->ready_head || f->delayed || has_submissions(f))
		return true;
	for (struct fab_xfer *x = f->active; x; x = x->anext)
		if (!x->finished && !x->is_record)
			return true;
	for (int r = 0; r < f->size; r++)
		if (f->peers[r].wait_head)
			return true;
	return false;
}

/* The thread that runs rounds (the progress thread, or a caller in odx_fab_wait): a callback
 * that calls odx_fab_wait would wait for itself. */
static _Thread_local const odx_fab *fab_driving;

/* One round at time `now`; with plock held. */
static int progress_once(odx_fab *f, int64_t now)
{
	const odx_fab *outer = fab_driving;
	fab_driving = f;
	f->now = now;
	int work = take_submissions(f);
	/* new operations go out before the poll: on tcp a poll is a system call or more, and a
	 * send posted a poll later cost 4-6 us of ping-pong latency */
	if (work)
		work += post_ready(f);
	work += poll_cq(f);
	work += post_ready(f);
	if (f->nrails)
		run_timers(f);
	if (atomic_exchange(&f->bar_check, false))
		check_barrier(f);
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

/* A caller drives progress in odx_fab_wait, or left it lately with nothing in motion: the
 * progress thread steps aside (no polling on the cores the ranks share). Only a caller that
 * leaves with work left in motion wakes it (parked, not `sleeping`: submissions do not). */
static bool park(odx_fab *f)
{
	int64_t until = atomic_load(&f->linger_until), now = fab_now_ns();
	bool driven = atomic_load(&f->drivers) > 0;
	if (!driven && now >= until)
		return false;
	int64_t ns = driven ? FAB_PARK_NS : until - now;
	atomic_store(&f->parked, true);
	if (atomic_load(&f->drivers) > 0 || atomic_load(&f->linger_until) > now) {
		struct pollfd pfd = {.fd = f->wake_fd, .events = POLLIN};
		struct timespec ts = {ns / 1000000000, ns % 1000000000};
		ppoll(&pfd, 1, &ts, NULL);
		if (pfd.revents & POLLIN) {
			uint64_t v;
			ssize_t k = read(f->wake_fd, &v, sizeof(v));
			(void)k;
		}
	}
	atomic_store(&f->parked, false);
	return true;
}

static void *progress_main(void *arg)
{
	odx_fab *f = arg;
	int rounds = 0;
	while (!atomic_load(&f->closing)) {
		if (park(f)) {
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
				ctrl_send(f, r, FAB_MSG_BYE, NULL, 0);
		int64_t bye = fab_now_ns() + 500000000ll;
		while ((f->ready_head || f->delayed || f->posted) && fab_now_ns() < bye) {
			bool only_rx = true;
			for (struct fab_op *op = f->posted; op && only_rx; op = op->lnext)
				only_rx = op->kind == OP_CTRL_RX;
			if (only_rx && !f->ready_head && !f->delayed)
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
			xfer_finish(f, x, ODX_ECANCELED, "canceled: the fabric is closing");
	}
	pthread_mutex_unlock(&f->plock);
	return NULL;
}

/* ---- open / close ----------------------------------------------------------------------- */

/* Opens rl's endpoint. Its address vector gets room for `lanes` addresses per rank (each peer's
 * copy lanes), or for one if the provider refuses that many (shm in libfabric 1.17 takes at most
 * 256 addresses): rl->av_lanes says which. */
static int open_endpoint(odx_fab *f, struct fab_rail *rl, bool source_broken, const char *name,
			 int lanes, char *err, size_t errlen)
{
	struct fi_info *info = rl->info;
	char shm_name[FAB_NAME_MAX];
	if (!name && !strcmp(rl->prov, "shm")) {
		/* The provider's own name would be pid-based: see fab_shm.c */
		fab_shm_name(shm_name, sizeof(shm_name));
		name = shm_name;
	}
	int ret = fi_fabric(info->fabric_attr, &rl->fabric, NULL);
	const char *step = "fi_fabric";
	if (!ret) {
		step = "fi_domain";
		ret = fi_domain(rl->fabric, info, &rl->domain, NULL);
	}
	if (!ret) {
		step = "fi_av_open";
		struct fi_av_attr av_attr = {.type = FI_AV_TABLE,
					     .count = (size_t)f->size * (size_t)lanes};
		rl->av_lanes = lanes;
		ret = fi_av_open(rl->domain, &av_attr, &rl->av, NULL);
		if (ret && lanes > 1) {
			av_attr.count = (size_t)f->size;
			rl->av_lanes = 1;
			ret = fi_av_open(rl->domain, &av_attr, &rl->av, NULL);
		}
	}
	if (!ret) {
		step = "fi_cq_open";
		/* Idle waiting: polling with a growing sleep (50 us .. 0.8 ms) by default, because the
		 * shm provider's wait fd is not signalled by data arriving (manual progress) and a
		 * blocked thread then sleeps its whole timeout; ODX_FAB_WAIT=fd blocks on the CQ's
		 * fd instead where the provider signals it (tcp; one endpoint only). */
		struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED,
					     .size = 4096,
					     .wait_obj = FI_WAIT_NONE};
		const char *w = getenv("ODX_FAB_WAIT");
		if (w && !strcmp(w, "fd"))
			cq_attr.wait_obj = FI_WAIT_FD;
		ret = fi_cq_open(rl->domain, &cq_attr, &rl->cq, NULL);
		if (ret && cq_attr.wait_obj != FI_WAIT_NONE) {
			/* no wait fd from this provider: poll with a growing sleep instead */
			cq_attr.wait_obj = FI_WAIT_NONE;
			ret = fi_cq_open(rl->domain, &cq_attr, &rl->cq, NULL);
		} else if (!ret && cq_attr.wait_obj == FI_WAIT_FD) {
			if (fi_control(&rl->cq->fid, FI_GETWAIT, &rl->cq_fd))
				rl->cq_fd = -1;
		}
	}
	if (!ret) {
		step = "fi_endpoint";
		ret = fi_endpoint(rl->domain, info, &rl->ep, NULL);
	}
	if (!ret) {
		step = "fi_ep_bind";
		ret = fi_ep_bind(rl->ep, &rl->av->fid, 0);
		if (!ret)
			ret = fi_ep_bind(rl->ep, &rl->cq->fid, FI_TRANSMIT | FI_RECV);
	}
	if (!ret && name) {
		step = "fi_setname";
		ret = fi_setname(&rl->ep->fid, (void *)name, strlen(name) + 1);
	}
	if (!ret) {
		step = "fi_enable";
		ret = fi_enable(rl->ep);
	}
	if (ret) {
		/* shm keeps each endpoint's queues in a /dev/shm segment named after it */
		bool shm = name && !strcmp(rl->prov, "shm");
		snprintf(err, errlen, "%s on provider %s failed: %s (%d)%s%s%s", step, rl->prov,
			 fi_strerror(-ret), ret, shm ? " (segment /dev/shm/" : "",
			 shm ? name : "",
			 shm ? (ret == -FI_EBUSY ? ": held by a live process)"
				: ret == -FI_ENOSPC || ret == -FI_ENOMEM ? ": is /dev/shm full?)" : ")")
			     : "");
		return fab_err(ret) == ODX_EIO ? ODX_EUNAVAIL : fab_err(ret);
	}
	uint64_t mr = info->domain_attr->mr_mode;
	rl->mr_local = mr & FI_MR_LOCAL;
	rl->mr_endpoint = mr & FI_MR_ENDPOINT;
	rl->mr_virt = mr & FI_MR_VIRT_ADDR;
	rl->mr_prov_key = mr & FI_MR_PROV_KEY;
	rl->mr_raw = mr & FI_MR_RAW;
	rl->has_rma = (info->caps & FI_RMA) != 0;
	rl->has_source = (info->caps & FI_SOURCE) != 0 && !source_broken;
	rl->rx_iov2 = info->rx_attr->iov_limit >= 2;
	return 0;
}

static void close_rail(struct fab_rail *rl)
{
	mr_close(&rl->sink_mr);
	if (rl->ep)
		fi_close(&rl->ep->fid);
	rl->ep = NULL;
	if (rl->av)
		fi_close(&rl->av->fid);
	if (rl->cq)
		fi_close(&rl->cq->fid);
	if (rl->domain)
		fi_close(&rl->domain->fid);
	if (rl->fabric)
		fi_close(&rl->fabric->fid);
	if (rl->info)
		fi_freeinfo(rl->info);
	memset(rl, 0, sizeof(*rl));
	rl->cq_fd = -1;
}

/* Opens want - 1 copy lanes beside rail rl (fewer if the provider refuses more). A lane endpoint
 * is named after the rail's ("<name>_l<k>"), which needs string addresses; lanes also need no
 * local registration (the progress role registers buffers in the rail's domain only). */
static void open_lanes(odx_fab *f, struct fab_rail *rl, int want)
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
		    open_endpoint(f, &ln->rl, false, name, 1, err, sizeof(err)) != 0) {
			close_rail(&ln->rl);
			free(ln->addr);
			free(ln);
			return;
		}
		ln->f = f;
		pthread_mutex_init(&ln->lock, NULL);
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&ln->cond, &ca);
		pthread_condattr_destroy(&ca);
		rl->lanes[k] = ln;
		rl->nlanes = k + 1;
	}
}

static void stop_lanes(struct fab_rail *rl)
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

/* After stop_lanes and after the ops they held are freed. */
static void free_lanes(struct fab_rail *rl)
{
	for (int k = 1; k < rl->nlanes; k++) {
		struct fab_lane *ln = rl->lanes[k];
		close_rail(&ln->rl);
		pthread_cond_destroy(&ln->cond);
		pthread_mutex_destroy(&ln->lock);
		free(ln->addr);
		free(ln);
		rl->lanes[k] = NULL;
	}
	rl->nlanes = 1;
}

/* Ranks on the same host share a kernel boot and a network namespace: the shm endpoint can reach
 * them. Different namespaces count as different hosts (odx-run --netns tests the network). */
static void host_key(char *key, size_t n)
{
	char boot[64] = "", ns[64] = "";
	FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (fp) {
		if (!fgets(boot, sizeof(boot), fp))
			boot[0] = '\0';
		fclose(fp);
	}
	boot[strcspn(boot, "\n")] = '\0';
	ssize_t k = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
	ns[k > 0 ? k : 0] = '\0';
	memset(key, 0, n);
	snprintf(key, n, "%.36s/%.24s", boot, ns);
}

/* Name slot per rank: host key, then each rail's endpoint name, then the copy lanes' names of
 * the rail that has them (zeros where a rank has none). */
#define FAB_LANE_NAMES (FAB_HOST_KEY + FAB_RAILS_MAX * FAB_NAME_MAX)
#define FAB_SLOT (FAB_LANE_NAMES + (FAB_LANES_MAX - 1) * FAB_NAME_MAX)

static int exchange_names(odx_fab *f, char *err, size_t errlen)
{
	unsigned char mine[FAB_SLOT];
	memset(mine, 0, sizeof(mine));
	host_key((char *)mine, FAB_HOST_KEY);
	for (int i = 0; i < f->nrails; i++) {
		size_t len = FAB_NAME_MAX;
		int ret = fi_getname(&f->rail[i].ep->fid,
				     mine + FAB_HOST_KEY + (size_t)i * FAB_NAME_MAX, &len);
		if (ret) {
			snprintf(err, errlen, "fi_getname on %s failed: %s", f->rail[i].prov,
				 fi_strerror(-ret));
			return fab_err(ret);
		}
		for (int k = 1; k < f->rail[i].nlanes; k++) {
			len = FAB_NAME_MAX;
			struct fab_lane *ln = f->rail[i].lanes[k];
			ret = fi_getname(&ln->rl.ep->fid,
					 mine + FAB_LANE_NAMES + (size_t)(k - 1) * FAB_NAME_MAX,
					 &len);
			if (ret) {
				snprintf(err, errlen, "fi_getname on a %s copy lane failed: %s",
					 f->rail[i].prov, fi_strerror(-ret));
				return fab_err(ret);
			}
		}
	}
	unsigned char *all = calloc((size_t)f->size, FAB_SLOT);
	f->peer_str = calloc((size_t)f->size, sizeof(*f->peer_str));
	if (!all || !f->peer_str) {
		free(all);
		return ODX_ENOMEM;
	}
	int ret = fab_wireup_exchange(&f->wu, mine, FAB_SLOT, all, FAB_WIREUP_TIMEOUT_MS, err,
				      errlen);
	static const unsigned char zeros[FAB_NAME_MAX];
	for (int r = 0; !ret && r < f->size; r++) {
		unsigned char *slot = all + (size_t)r * FAB_SLOT;
		/* shm for a rank on this host that opened one too; the network otherwise */
		int rail = 0;
		if (f->nrails > 1 && !memcmp(slot, mine, FAB_HOST_KEY) &&
		    memcmp(slot + FAB_HOST_KEY + FAB_NAME_MAX, zeros, FAB_NAME_MAX) != 0)
			rail = 1;
		struct fab_rail *rl = &f->rail[rail];
		unsigned char *name = slot + FAB_HOST_KEY + (size_t)rail * FAB_NAME_MAX;
		f->peers[r].rail = rail;
		int n = fi_av_insert(rl->av, name, 1, &f->peers[r].addr, 0, NULL);
		if (n != 1) {
			snprintf(err, errlen, "fi_av_insert of rank %d's %s address failed (%d)", r,
				 rl->prov, n);
			ret = ODX_EPEER;
		}
		size_t slen = sizeof(f->peer_str[r]);
		fi_av_straddr(rl->av, name, f->peer_str[r], &slen);
		/* copy lanes: as many as both have (both sides count the same) */
		int lanes = 1;
		while (lanes < rl->nlanes &&
		       memcmp(slot + FAB_LANE_NAMES + (size_t)(lanes - 1) * FAB_NAME_MAX, zeros,
			      FAB_NAME_MAX) != 0)
			lanes++;
		for (int k = 1; !ret && k < lanes; k++) {
			/* its lane in the rail's AV (our sends), its rail endpoint in our lane's AV
			 * (the source of what our lane receives) */
			struct fab_lane *ln = rl->lanes[k];
			if (fi_av_insert(rl->av,
					 slot + FAB_LANE_NAMES + (size_t)(k - 1) * FAB_NAME_MAX, 1,
					 &f->peers[r].lane_addr[k], 0, NULL) != 1 ||
			    fi_av_insert(ln->rl.av, name, 1, &ln->addr[r], 0, NULL) != 1) {
				snprintf(err, errlen,
					 "fi_av_insert of rank %d's copy lane %d address failed", r,
					 k);
				ret = ODX_EPEER;
			}
		}
		f->peers[r].lanes = lanes;
	}
	free(all);
	return ret;
}

int odx_fab_open(const odx_fab_params *p, odx_fab **out, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out) {
		snprintf(err, errlen, "odx_fab_open: out is NULL");
		return ODX_EINVAL;
	}
	odx_fab *f = calloc(1, sizeof(*f));
	if (!f)
		return ODX_ENOMEM;
	for (int i = 0; i < FAB_RAILS_MAX; i++)
		f->rail[i].cq_fd = -1;
	f->wake_fd = -1;
	f->failed_peer = -1;
	f->peer_timeout_ms = p && p->peer_timeout_ms > 0 ? p->peer_timeout_ms : 10000;
	f->max_retries = p && p->max_retries > 0 ? p->max_retries : 3;
	const char *spin = getenv("ODX_FAB_SPIN");
	f->spin = spin ? atoi(spin) : 200;
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->plock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cond, &ca);
	pthread_condattr_destroy(&ca);
	struct fi_info *shm_info = NULL;
	int ret = fab_fault_parse(&f->fault, p ? p->fault : NULL, err, errlen);
	if (ret)
		goto out_free;
	/* resolve the provider even for one rank: a wrong name is an error everywhere */
	ret = fab_resolve(p, &f->prof, &f->rail[0].info, err, errlen);
	if (ret)
		goto out_free;
	snprintf(f->rail[0].prov, sizeof(f->rail[0].prov), "%s", f->prof.prov);
	atomic_store(&f->pull_min, f->prof.pull_min);
	f->rail[0].chunk = f->prof.chunk;
	f->rail[0].lane_min = f->prof.lane_min;
	ret = fab_wireup_detect(&f->wu, err, errlen);
	if (ret)
		goto out_free;
	f->rank = f->wu.rank;
	f->size = f->wu.size;
	f->peers = calloc((size_t)f->size, sizeof(*f->peers));
	f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!f->peers || f->wake_fd < 0) {
		ret = ODX_ENOMEM;
		goto out_wireup;
	}
	int64_t now = fab_now_ns();
	for (int r = 0; r < f->size; r++) {
		f->peers[r].credits = f->prof.credits;
		f->peers[r].last_heard = now;
		f->peers[r].last_sent = now;
	}
	if (f->size == 1) {
		snprintf(f->provider, sizeof(f->provider), "self");
	} else {
		fab_shm_sweep(); /* segments that killed ODX ranks left behind (fab_shm.c) */
		f->nrails = 1;
		int lanes = fab_lane_count(&f->prof, p);
		ret = open_endpoint(f, &f->rail[0], f->prof.source_broken, NULL, lanes, err,
				    errlen);
		if (ret)
			goto out_close;
		/* auto mode: a second, shm endpoint for the ranks on this host (ODX_FAB_SHM=0: off) */
		const char *want = p && p->provider && *p->provider ? p->provider : "auto";
		const char *shm_env = getenv("ODX_FAB_SHM");
		if (!strcmp(want, "auto") && strcmp(f->prof.prov, "shm") != 0 &&
		    !(shm_env && !strcmp(shm_env, "0"))) {
			odx_fab_params sp = {.provider = "shm"};
			struct fab_profile shm_prof;
			char shm_err[256];
			if (fab_resolve(&sp, &shm_prof, &shm_info, shm_err, sizeof(shm_err)) == 0) {
				struct fab_rail *rl = &f->rail[1];
				rl->info = shm_info;
				shm_info = NULL;
				snprintf(rl->prov, sizeof(rl->prov), "shm");
				rl->chunk = shm_prof.chunk;
				rl->lane_min = shm_prof.lane_min;
				int shm_lanes = fab_lane_count(&shm_prof, p);
				if (open_endpoint(f, rl, false, NULL, shm_lanes, shm_err,
						  sizeof(shm_err)) == 0) {
					f->nrails = 2;
					open_lanes(f, rl, shm_lanes);
				} else {
					close_rail(rl); /* the network endpoint serves every rank */
				}
			}
		}
		open_lanes(f, &f->rail[0], lanes);
		snprintf(f->provider, sizeof(f->provider), "%s%s", f->prof.prov,
			 f->nrails > 1 ? "+shm" : "");
		/* room for one chunk of any rail */
		f->sink_len = f->rail[0].chunk;
		if (f->nrails > 1 && f->rail[1].chunk > f->sink_len)
			f->sink_len = f->rail[1].chunk;
		f->sink = mmap(NULL, f->sink_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (f->sink == MAP_FAILED)
			f->sink = NULL; /* then a longer sender truncates (the provider's error) */
		ret = exchange_names(f, err, errlen);
		if (ret)
			goto out_close;
		for (int rail = 0; rail < f->nrails; rail++) {
			for (int k = 1; k < f->rail[rail].nlanes; k++) {
				struct fab_lane *ln = f->rail[rail].lanes[k];
				if (pthread_create(&ln->thread, NULL, lane_main, ln)) {
					snprintf(err, errlen,
						 "could not start a fabric copy lane thread");
					ret = ODX_ENOMEM;
					goto out_close;
				}
				ln->started = true;
			}
		}
		for (int rail = 0; rail < f->nrails; rail++) {
			for (unsigned i = 0; i < f->prof.ctrl_rx; i++) {
				/* owned by the queues (and the provider) from here on */
				struct fab_op *rx = op_new(OP_CTRL_RX, -1, FAB_CTRL_BUF);
				if (!rx) {
					ret = ODX_ENOMEM;
					goto out_close;
				}
				rx->rail = rail;
				push_ready(f, rx);
			}
		}
		now = fab_now_ns();
		for (int r = 0; r < f->size; r++)
			f->peers[r].last_heard = now;
	}
	if (pthread_create(&f->thread, NULL, progress_main, f)) {
		snprintf(err, errlen, "could not start the fabric progress thread");
		ret = ODX_ENOMEM;
		goto out_close;
	}
	f->thread_started = true;
	*out = f;
	return 0;
out_close:
	odx_fab_close(f);
	return ret;
out_wireup:
	fab_wireup_finish(&f->wu);
out_free:
	close_rail(&f->rail[0]);
	if (f->sink)
		munmap(f->sink, f->sink_len);
	free(f->peers);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	free(f);
	return ret;
}

static void free_op_list(struct fab_op *op)
{
	while (op) {
		struct fab_op *next = op->next;
		op_free(op);
		op = next;
	}
}

void odx_fab_close(odx_fab *f)
{
	if (!f)
		return;
	atomic_store(&f->closing, true);
	if (f->thread_started) {
		uint64_t one = 1;
		ssize_t k = write(f->wake_fd, &one, sizeof(one));
		(void)k;
		pthread_join(f->thread, NULL);
	}
	/* Closing the endpoints first means the provider holds none of our buffers afterwards (the
	 * lanes' threads stop first: they touch their endpoints; the ops they held are on
	 * f->posted). */
	for (int i = 0; i < FAB_RAILS_MAX; i++) {
		stop_lanes(&f->rail[i]);
		for (int k = 1; k < f->rail[i].nlanes; k++) {
			struct fab_rail *lrl = &f->rail[i].lanes[k]->rl;
			if (lrl->ep)
				fi_close(&lrl->ep->fid);
			lrl->ep = NULL;
		}
		if (f->rail[i].ep)
			fi_close(&f->rail[i].ep->fid);
		f->rail[i].ep = NULL;
	}
	while (f->posted) {
		struct fab_op *op = f->posted;
		posted_remove(f, op);
		op_free(op);
	}
	free_op_list(f->ready_head);
	free_op_list(f->delayed);
	for (int r = 0; f->peers && r < f->size; r++)
		free_op_list(f->peers[r].wait_head);
	pthread_mutex_lock(&f->lock);
	for (struct fab_op *op = f->sub_o_head; op;) {
		struct fab_op *next = op->next;
		op_free(op);
		op = next;
	}
	pthread_mutex_unlock(&f->lock);
	while (f->active) {
		struct fab_xfer *x = f->active;
		f->active = x->anext;
		mr_close(&x->mr);
		free(x->refused_msg);
		free(x);
	}
	for (int i = 0; i < FAB_RAILS_MAX; i++) {
		free_lanes(&f->rail[i]);
		close_rail(&f->rail[i]);
	}
	fab_wireup_finish(&f->wu);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->plock);
	if (f->sink)
		munmap(f->sink, f->sink_len);
	free(f->peer_str);
	free(f->peers);
	free(f);
}

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
static int submit_to_peer_unlock(odx_fab *f, int dst, struct fab_op *op)
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
	struct fab_op *op = ctrl_new(f, dst, FAB_MSG_USER, type, payload, len, NULL, 0);
	if (!op)
		return ODX_ENOMEM;
	pthread_mutex_lock(&f->lock);
	return submit_to_peer_unlock(f, dst, op);
}

static int submit_xfer(odx_fab *f, bool is_send, int peer, uint64_t key, void *buf, size_t len,
		       odx_fab_done_fn done, void *arg)
{
	if (!f || (len && !buf) || key >> FAB_KEY_BITS)
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
	struct fab_op *op = ctrl_new(f, dst, FAB_MSG_ABORT, 0, &a, sizeof(a), msg, n);
	if (!op) {
		pthread_mutex_unlock(&f->lock);
		return ODX_ENOMEM;
	}
	return submit_to_peer_unlock(f, dst, op);
}

int odx_fab_send(odx_fab *f, int dst, uint64_t key, const void *src, size_t len,
		 odx_fab_done_fn done, void *arg)
{
	return submit_xfer(f, true, dst, key, (void *)src, len, done, arg);
}

int odx_fab_recv(odx_fab *f, int src, uint64_t key, void *dst, size_t len, odx_fab_done_fn done,
		 void *arg)
{
	return submit_xfer(f, false, src, key, dst, len, done, arg);
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
		struct fab_barrier_msg b = {
			.epoch = epoch, .status = status, .rank = f->rank, .text_len = (uint32_t)n};
		struct fab_op *op =
			ctrl_new(f, 0, FAB_MSG_BARRIER_IN, 0, &b, sizeof(b), msg, n);
		if (!op) {
			pthread_mutex_unlock(&f->lock);
			return ODX_ENOMEM;
		}
		submit_op(f, op);
	} else {
		bar_merge(&f->bar_in[epoch & 1], status, 0, msg, n);
	}
	pthread_mutex_unlock(&f->lock);
	/* The caller drives the rounds itself (odx_fab_wait): no hand-off to the progress thread,
	 * which would otherwise go on polling for a while after the release, on cores the ranks'
	 * next work needs. */
	struct bar_wait w = {f, epoch};
	int ret = odx_fab_wait(f, barrier_done, &w, timeout_ms);
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
	if (atomic_load(&f->parked) || atomic_load(&f->sleeping)) {
		uint64_t one = 1;
		ssize_t k = write(f->wake_fd, &one, sizeof(one));
		(void)k;
	}
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
	s->transfers = atomic_load(&m->transfers);
	s->lane_bytes = atomic_load(&m->lane_bytes);
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

int odx__fab_send_garbage(odx_fab *f, int dst, odx_fab_garbage kind, uint64_t seed)
{
	if (!f || dst < 0 || dst >= f->size || dst == f->rank || kind >= ODX_FAB_GARBAGE_COUNT ||
	    (kind == ODX_FAB_GARBAGE_DATA && seed >> FAB_KEY_BITS))
		return ODX_EINVAL;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)kind;
	struct fab_op *op = op_new(OP_CTRL_TX, dst, FAB_CTRL_BUF);
	if (!op)
		return ODX_ENOMEM;
	op->raw = true;
	op->exempt = true;
	struct fab_hdr h = {FAB_MAGIC,
			    FAB_VERSION,
			    FAB_MSG_HEARTBEAT,
			    f->wu.job_key,
			    (uint32_t)f->rank,
			    0,
			    UINT64_MAX / 2 + (fab_rand(&rng) >> 8),
			    0,
			    0};
	size_t len = sizeof(h);
	switch (kind) {
	case ODX_FAB_GARBAGE_RANDOM:
		len = 1 + fab_rand(&rng) % (FAB_CTRL_BUF - 1);
		for (size_t i = 0; i < len; i++)
			op->buf[i] = (unsigned char)fab_rand(&rng);
		break;
	case ODX_FAB_GARBAGE_TRUNCATED:
		len = 1 + fab_rand(&rng) % (sizeof(h) - 1);
		break;
	case ODX_FAB_GARBAGE_MAGIC:
		h.magic = (uint32_t)fab_rand(&rng) | 1u;
		if (h.magic == FAB_MAGIC)
			h.magic ^= 2;
		break;
	case ODX_FAB_GARBAGE_VERSION:
		h.version = FAB_VERSION + 1 + (uint16_t)(fab_rand(&rng) % 100);
		break;
	case ODX_FAB_GARBAGE_JOB_KEY:
		h.job_key = ~f->wu.job_key;
		break;
	case ODX_FAB_GARBAGE_LENGTH:
		h.payload_len = 0x7fffffffu;
		len = sizeof(h) + 16;
		break;
	case ODX_FAB_GARBAGE_SENDER:
		h.src = (uint32_t)dst;
		break;
	case ODX_FAB_GARBAGE_TYPE:
		h.type = FAB_MSG_TYPE_END + (uint16_t)(fab_rand(&rng) % 100);
		break;
	case ODX_FAB_GARBAGE_DATA:
		op->tag = fab_data_tag(seed, 0);
		op->cq_data = fab_rand(&rng);
		/* lengths step through short, equal and overlong between calls with one key */
		len = 1 + (size_t)atomic_fetch_add(&f->garbage_calls, 1) * 1999 % 6000;
		for (size_t i = 0; i < len; i++)
			op->buf[i] = (unsigned char)fab_rand(&rng);
		break;
	case ODX_FAB_GARBAGE_REPLAY:
	default:
		break;
	}
	if (kind != ODX_FAB_GARBAGE_RANDOM && kind != ODX_FAB_GARBAGE_DATA)
		memcpy(op->buf, &h, len < sizeof(h) ? len : sizeof(h));
	pthread_mutex_lock(&f->lock);
	if (kind == ODX_FAB_GARBAGE_REPLAY && f->last_ctrl_len && f->last_ctrl_peer == dst) {
		memcpy(op->buf, f->last_ctrl, f->last_ctrl_len);
		len = f->last_ctrl_len;
	}
	op->len = len;
	return submit_to_peer_unlock(f, dst, op);
}
