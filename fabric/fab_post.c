/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_post.c - posting and completions: the ready queue handed to the provider (with retries and
 * fault injection) and the rail completion queues read back. Separate: the only code that
 * posts to the rails' endpoints and reads their completion queues (the progress role's).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- posting and completions ------------------------------------------------------------- */

/* Posts a data chunk (a send, or a receive into its buffer and maybe the sink) on rl's
 * endpoint: the progress role for a rail, a lane's thread for its lane. */
ssize_t fab_post_data(odx_fab *f, struct fab_rail *rl, fi_addr_t addr, struct fab_op *op)
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

/* ---- Throttling ---------------------------------------------------------------------------
 * A provider has room for so many operations: shm in libfabric 1.17 takes rx_attr->size (1024)
 * posted receives per endpoint and refuses the next with -FI_ENOMEM, and a program with very many
 * small transfers in flight (a Cholesky of 12x12 tiles) posts more than that. Running out is
 * back-pressure, never a fault of the peer:
 * - each rail caps the data operations posted on its endpoint, receives and sends (reads count
 *   as sends) apart, from the provider's rx_attr->size and tx_attr->size less what the control
 *   messages take (fab_throttle_caps); an operation beyond its cap waits in the rail's throttle
 *   queue, in order, and is posted as soon as one of the posted completes;
 * - a post refused with -FI_ENOMEM (the cap above what the provider really holds) waits there
 *   too and lowers the cap to what is posted; a completion error FI_ENOMEM or FI_EAGAIN is retried
 *   after a short growing pause (50 us doubling to 12.8 ms); neither counts toward max_retries,
 *   which is for real faults;
 * - the bound: an operation the provider keeps refusing for longer than the peer timeout after
 *   its first refusal counts as failed from then on (max_retries, then the peer fails). A peer
 *   that stops taking anything fails by the peer timeout as before.
 * f->throttled counts every operation held back so (ODX_STATS "throttled"). */

#define FAB_THROTTLED 1

static void throttle_caps_env(unsigned *cap, const char *name)
{
	const char *env = getenv(name);
	unsigned long long v = env ? strtoull(env, NULL, 0) : 0;
	if (v > 0)
		*cap = v < UINT_MAX ? (unsigned)v : UINT_MAX;
}

void fab_throttle_caps(odx_fab *f, struct fab_rail *rl)
{
	size_t rx = rl->info->rx_attr ? rl->info->rx_attr->size : 0;
	size_t tx = rl->info->tx_attr ? rl->info->tx_attr->size : 0;
	/* the control receives are posted on the same endpoint; control sends are bounded by the
	 * peers' credits, of which one peer's worth is kept free */
	size_t rx_keep = f->prof.ctrl_rx, tx_keep = f->prof.credits;
	size_t pool = rx > 2 * rx_keep ? rx - rx_keep : rx / 2;
	/* shm (1.17) keeps the messages that come before their receive in the same entries as
	 * the posted receives: half for each. What comes unexpected is bounded by the data
	 * window each sender keeps per peer: their share of three quarters of that half (16 at
	 * least), the rest left for control messages that come before their receive is posted
	 * again */
	size_t rxc = !rx ? UINT_MAX : pool / 2 ? pool / 2 : 1;
	size_t txc = !tx ? UINT_MAX : tx > 2 * tx_keep ? tx - tx_keep : tx / 2 ? tx / 2 : 1;
	size_t peers = f->size > 1 ? (size_t)f->size - 1 : 1;
	size_t window = !rx ? 0 : pool * 3 / 8 / peers > 16 ? pool * 3 / 8 / peers : 16;
	rl->data_window = window < UINT_MAX ? (unsigned)window : UINT_MAX;
	rl->ack_every = window / 4 ? (unsigned)(window / 4) : 1;
	rl->thr_cap[0] = rxc < UINT_MAX ? (unsigned)rxc : UINT_MAX;
	rl->thr_cap[1] = txc < UINT_MAX ? (unsigned)txc : UINT_MAX;
	/* for tests and diagnostics: a lower cap makes the queues work at small counts */
	throttle_caps_env(&rl->thr_cap[0], "ODX_FAB_RX_CAP");
	throttle_caps_env(&rl->thr_cap[1], "ODX_FAB_TX_CAP");
	rl->thr_max[0] = rl->thr_cap[0];
	rl->thr_max[1] = rl->thr_cap[1];
}

/* The provider refused an operation of class c on rl for lack of room: the cap drops to what is
 * posted (1 at least) and grows back by one per completion (posted_remove). */
static void thr_refused(struct fab_rail *rl, int c)
{
	unsigned now = rl->thr_posted[c] ? rl->thr_posted[c] : 1;
	if (rl->thr_cap[c] > now)
		rl->thr_cap[c] = now;
}

/* The provider refused op for lack of resources: true once that has lasted longer than the peer
 * timeout since its first refusal (then it counts as a real failure). */
static bool throttle_expired(odx_fab *f, struct fab_op *op)
{
	int64_t now = fab_now_ns();
	if (!op->throttled_at) {
		op->throttled_at = now;
		return false;
	}
	return now - op->throttled_at > (int64_t)f->peer_timeout_ms * 1000000;
}

/* Appends op to its rail's throttle queue of class c (counted in f->throttled when `count`). */
static void thr_push(odx_fab *f, struct fab_rail *rl, int c, struct fab_op *op, bool count)
{
	op_append(&rl->thr_head[c], &rl->thr_tail[c], op);
	f->thr_waiting++;
	if (count)
		stat_add(&f->throttled, 1);
}

/* Puts op back at the head of its rail's throttle queue of class c: it goes first when there is
 * room again, so that a refusal does not reorder operations (a receive sent to the back of a long
 * queue while its message waits in the provider, and the receives posted meanwhile waiting for
 * messages the sender's data window holds back, would wait for each other). */
static void thr_push_head(odx_fab *f, struct fab_rail *rl, int c, struct fab_op *op)
{
	op->next = rl->thr_head[c];
	rl->thr_head[c] = op;
	if (!rl->thr_tail[c])
		rl->thr_tail[c] = op;
	f->thr_waiting++;
}

static int op_post(odx_fab *f, struct fab_op *op);
static void hold(odx_fab *f, struct fab_peer *p, struct fab_op *op);

/* Posts what waits in rl's throttle queue of class c while the cap has room (64 tries a round: a
 * refused head goes back to the head). */
static int post_throttled(odx_fab *f, struct fab_rail *rl, int c)
{
	int posted = 0;
	for (int tries = 0; rl->thr_head[c] && rl->thr_posted[c] < rl->thr_cap[c] && tries < 64;
	     tries++) {
		struct fab_op *op = rl->thr_head[c];
		rl->thr_head[c] = op->next;
		if (!rl->thr_head[c])
			rl->thr_tail[c] = NULL;
		op->next = NULL;
		f->thr_waiting--;
		int r = op_post(f, op);
		if (r == FAB_THROTTLED) {
			thr_push_head(f, rl, c, op); /* the order of the queue is kept */
			break;
		}
		if (r == -FI_EAGAIN) {
			stat_add(&f->eagain, 1);
			hold(f, &f->peers[op->peer], op);
			continue;
		}
		posted++;
	}
	return posted;
}

/* Returns 0 when the op left the queue (posted, dropped or failed), -FI_EAGAIN to keep it,
 * FAB_THROTTLED when it waits for room on its rail (the caller queues it there). */
static int op_post(odx_fab *f, struct fab_op *op)
{
	struct fab_peer *p = op->peer >= 0 ? &f->peers[op->peer] : NULL;
	bool data = op->kind == OP_DATA_TX || op->kind == OP_DATA_RX || op->kind == OP_READ;
	if (data && (op->detached || op->xfer->finished || p->state == PEER_FAILED)) {
		fab_data_op_release(f,
				    op); /* its transfer is over: never post into returned memory */
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
			fab_op_complete_error(f, op, FI_EIO, "injected completion error");
			return 0;
		}
		if (fab_chance(&f->fault.rng, f->fault.cqfail)) {
			fab_op_complete_error(f, op, FI_EIO, "injected hard completion error");
			return 0;
		}
		if (fab_chance(&f->fault.rng, f->fault.enomem)) {
			fab_op_complete_error(f, op, FI_ENOMEM,
					      "injected out-of-resources completion");
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
		int r = fab_mr_register(f, rl, op->buf,
					op->kind == OP_CTRL_RX ? FAB_CTRL_BUF : op->len,
					op->kind == OP_CTRL_RX ? FI_RECV : FI_SEND, &op->mr);
		if (r)
			return r == -FI_EAGAIN
				       ? r
				       : (fab_op_complete_error(f, op, -r, "registration failed"),
					  0);
		op->desc = fi_mr_desc(op->mr);
	}
	if (op->kind == OP_DATA_RX && rl->mr_local && !rl->sink_mr &&
	    (op->sink || op->buf == f->sink)) {
		int r = fab_mr_register(f, rl, f->sink, f->sink_len, FI_RECV, &rl->sink_mr);
		if (r)
			return r == -FI_EAGAIN ? r
					       : (fab_op_complete_error(f, op, -r,
									"sink registration failed"),
						  0);
		rl->sink_desc = fi_mr_desc(rl->sink_mr);
	}
	if (op->lane && op->kind == OP_DATA_RX) {
		/* counted as posted from here: the lane hands it back when the provider does */
		lane_submit(rl->lanes[op->lane], op);
		posted_add(f, op);
		return 0;
	}
	int cls = thr_class(op);
	if (cls >= 0 && rl->thr_posted[cls] >= rl->thr_cap[cls])
		return FAB_THROTTLED;
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
		ret = fab_post_data(f, rl, addr, op);
		break;
	case OP_READ:
		ret = fi_read(rl->ep, op->buf, op->len, op->desc, addr, op->rma_addr, op->rma_key,
			      op);
		break;
	default:
		ret = -FI_EINVAL;
	}
	if (ret == -FI_ENOMEM && cls >= 0 && !throttle_expired(f, op)) {
		thr_refused(rl, cls); /* the provider holds fewer than the cap */
		return FAB_THROTTLED;
	}
	if (ret == -FI_EAGAIN || (ret == -FI_ENOMEM && !throttle_expired(f, op)))
		return -FI_EAGAIN;
	if (ret) {
		fab_op_complete_error(f, op, (int)-ret, "post failed");
		return 0;
	}
	posted_add(f, op);
	if (op->kind == OP_DATA_TX)
		op->went = true;
	/* Only control messages count as "heard from us": data chunks and one-sided reads may take
	 * longer than the peer timeout on a slow link, or never reach the peer's layer at all. */
	if (p && op->kind == OP_CTRL_TX)
		p->last_sent = f->now;
	return 0;
}

/* Appends op to the operations held for its peer p (see fab_peer.held_head). */
static void hold(odx_fab *f, struct fab_peer *p, struct fab_op *op)
{
	op->next = NULL;
	if (p->held_tail) {
		p->held_tail->next = op;
	} else {
		p->held_head = op;
		f->held_peers++;
	}
	p->held_tail = op;
}

/* Posts p's held operations in order until the provider pushes one back again. */
static int post_held(odx_fab *f, struct fab_peer *p)
{
	int posted = 0;
	while (p->held_head) {
		struct fab_op *op = p->held_head;
		p->held_head = op->next;
		if (!p->held_head)
			p->held_tail = NULL;
		op->next = NULL;
		int r = op_post(f, op);
		if (r == FAB_THROTTLED) {
			int c = thr_class(op);
			thr_push(f, peer_rail(f, op->peer), c, op, true);
			continue;
		}
		if (r == -FI_EAGAIN) {
			op->next = p->held_head;
			p->held_head = op;
			if (!p->held_tail)
				p->held_tail = op;
			stat_add(&f->eagain, 1);
			return posted;
		}
		posted++;
	}
	f->held_peers--;
	return posted;
}

int fab_post_ready(odx_fab *f)
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
	/* A peer's operations the provider pushed back go first, in order. A peer that takes
	 * nothing returns -FI_EAGAIN forever: a rank that died before this rank's first message to
	 * it (shm waits for the peer to answer its name, rxm for a connection), until the peer
	 * timeout fails it. Waiting at the head of the one ready queue for it held every other
	 * peer's messages back too, heartbeats included, and the survivors of a rank killed
	 * mid-shuffle then timed each other out. */
	for (int r = 0; f->held_peers && r < f->size && posted < 64; r++)
		if (f->peers[r].held_head)
			posted += post_held(f, &f->peers[r]);
	/* then what waits for room on a rail, before anything newer */
	for (int r = 0; f->thr_waiting && r < f->nrails; r++)
		for (int c = 0; c < 2; c++)
			posted += post_throttled(f, &f->rail[r], c);
	while (f->ready_head && posted < 64) {
		/* unlink first: op_post may free the op or queue it again (retry) */
		struct fab_op *op = f->ready_head;
		f->ready_head = op->next;
		if (!f->ready_head)
			f->ready_tail = NULL;
		op->next = NULL;
		struct fab_peer *p = op->peer >= 0 ? &f->peers[op->peer] : NULL;
		if (p && p->held_head) {
			hold(f, p, op); /* behind its peer's held ones: one peer's order is kept */
			continue;
		}
		int c = thr_class(op);
		if (c >= 0 && peer_rail(f, op->peer)->thr_head[c]) {
			/* behind those already waiting for room on its rail */
			thr_push(f, peer_rail(f, op->peer), c, op, true);
			continue;
		}
		int r = op_post(f, op);
		if (r == FAB_THROTTLED) {
			thr_push(f, peer_rail(f, op->peer), c, op, true);
			continue;
		}
		if (r == -FI_EAGAIN) {
			stat_add(&f->eagain, 1);
			if (p) {
				/* the provider (or the fault layer) pushed back for this peer: the
				 * other peers' operations go on */
				hold(f, p, op);
				continue;
			}
			/* a control receive (no peer): back at the head, the endpoint pushed back */
			op->next = f->ready_head;
			f->ready_head = op;
			if (!f->ready_tail)
				f->ready_tail = op;
			break;
		}
		posted++;
	}
	return posted;
}

void fab_op_complete(odx_fab *f, int rail, struct fab_op *op, size_t len, uint64_t data,
		     fi_addr_t from)
{
	posted_remove(f, op);
	switch (op->kind) {
	case OP_CTRL_RX:
		fab_handle_ctrl(f, rail, op->buf, len, from);
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
		fab_data_arrived(f, op->peer);
		if (op->eager) {
			fab_rx_eager(f, op, len, data, false);
			break;
		}
		if (fab_rx_checked(f, op, len, data, false))
			break;
		/* fall through */
	default:
		fab_data_op_done(f, op);
	}
}

void fab_op_complete_error(odx_fab *f, struct fab_op *op, int fi_err, const char *detail)
{
	posted_remove(f, op);
	struct fab_xfer *x = op->xfer;
	if (x && (fi_err == FI_ECANCELED || op->detached || x->finished)) {
		fab_data_op_release(f, op);
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
	if ((fi_err == FI_ENOMEM || fi_err == FI_EAGAIN) && !throttle_expired(f, op)) {
		/* the provider ran out of something for a while: back-pressure, not a fault */
		stat_add(&f->throttled, 1);
		int c = thr_class(op);
		if (c >= 0) {
			/* a data op waits for room on its rail, first in line */
			struct fab_rail *rl = peer_rail(f, op->peer);
			thr_refused(rl, c);
			thr_push_head(f, rl, c, op);
			return;
		}
		int k = op->throttles < 8 ? (int)op->throttles : 8;
		op->throttles++;
		op->not_before = fab_now_ns() + (50000ll << k);
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
	fab_op_complete_error(f, op, FI_ECANCELED, detail); /* frees it */
	fab_peer_fail(f, peer, why);
}

/* A chunk receive got more bytes than its chunk and the sink hold: whose, and why. */
void fab_rx_truncated(odx_fab *f, struct fab_op *op, size_t len, uint64_t data)
{
	posted_remove(f, op);
	fab_data_arrived(f, op->peer);
	if (!fab_rx_checked(f, op, len, data, true))
		fab_data_op_done(f, op);
}

int fab_poll_rail(odx_fab *f, int rail)
{
	struct fab_rail *rl = &f->rail[rail];
	struct fi_cq_tagged_entry e[16];
	fi_addr_t from[16];
	ssize_t n = rl->has_source ? fi_cq_readfrom(rl->cq, e, 16, from)
				   : fi_cq_read(rl->cq, e, 16);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++)
			fab_op_complete(f, rail, e[i].op_context, e[i].len, e[i].data,
					rl->has_source ? from[i] : FI_ADDR_NOTAVAIL);
		return (int)n;
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_cq_readerr(rl->cq, &ee, 0) > 0 && ee.op_context) {
			struct fab_op *op = ee.op_context;
			if (op->kind == OP_DATA_RX && abs(ee.err) == FI_ETRUNC && op->eager) {
				/* a one-message sized send longer than the receive and the sink */
				posted_remove(f, op);
				fab_data_arrived(f, op->peer);
				fab_rx_eager(f, op, ee.len + ee.olen, ee.data, true);
				return 1;
			}
			if (op->kind == OP_DATA_RX && abs(ee.err) == FI_ETRUNC) {
				fab_rx_truncated(f, op, ee.len, ee.data);
				return 1;
			}
			char detail[160];
			snprintf(detail, sizeof(detail), "provider %s: %s", rl->prov,
				 fi_cq_strerror(rl->cq, ee.prov_errno, ee.err_data, NULL, 0));
			fab_op_complete_error(f, op, ee.err, detail);
		}
		return 1;
	}
	return 0;
}
