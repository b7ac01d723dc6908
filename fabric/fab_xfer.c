/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_xfer.c - data transfers: starting a send or receive, cutting it into chunks and feeding
 * them to the ready queue, finishing it, and what a completed chunk does to its transfer.
 * Separate: one transfer's state machine, whichever endpoint or lane carries its chunks.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- transfers ---------------------------------------------------------------------------- */

void fab_xfer_release(odx_fab *f, struct fab_xfer *x)
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
void fab_xfer_finish(odx_fab *f, struct fab_xfer *x, int status, const char *msg)
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
	if (x->upto && x->len_out)
		*x->len_out = status ? 0 : x->len;
	if (x->done && !x->is_record)
		x->done(x->arg, status, msg);
	if (x->ops_out == 0)
		fab_xfer_release(f, x);
}

void fab_xfer_fail_peer(odx_fab *f, struct fab_xfer *x, const char *why)
{
	char msg[400];
	snprintf(msg, sizeof(msg), "%s of %zu bytes (key %#llx) %s rank %d failed: %s",
		 x->is_send ? "send" : "receive", x->len, (unsigned long long)x->key,
		 x->is_send ? "to" : "from", x->peer, why);
	fab_xfer_finish(f, x, ODX_EPEER, msg);
}

/* Room for one more data message to peer p: the profile's chunks in flight (tx_limit), and the
 * data window (messages it has not acknowledged yet, see fab_data_ack_send). */
static bool tx_room(odx_fab *f, struct fab_peer *p)
{
	unsigned window = f->rail[p->rail].data_window;
	uint64_t unacked =
		p->data_sent - (p->data_acked < p->data_sent ? p->data_acked : p->data_sent);
	return (!f->prof.tx_limit || p->tx_inflight < f->prof.tx_limit) &&
	       (!window || unacked < window);
}

/* Posts the next chunks of a transfer, up to the profile's window. */
static void xfer_feed(odx_fab *f, struct fab_xfer *x)
{
	unsigned window = f->prof.window < FAB_WINDOW_MAX ? f->prof.window : FAB_WINDOW_MAX;
	struct fab_peer *p = &f->peers[x->peer];
	while (!x->finished && x->inflight < window && x->next_chunk < x->nchunks) {
		if (x->is_send && !tx_room(f, p)) {
			/* per-peer data credits: wait for a chunk to this peer to complete, or for
			 * the peer to acknowledge some (the data window); counted as throttled */
			stat_add(&f->throttled, 1);
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
		if (x->is_send) {
			p->tx_inflight++;
			p->data_sent++;
		}
		enum op_kind kind = x->is_send		       ? OP_DATA_TX
				    : x->mode == FAB_MODE_PULL ? OP_READ
							       : OP_DATA_RX;
		struct fab_op *op = op_new(kind, x->peer, 0);
		if (!op) {
			if (x->is_send) {
				p->tx_inflight--;
				p->data_sent--;
			}
			fab_xfer_finish(f, x, ODX_ENOMEM, "out of memory for a transfer chunk");
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
		if (x->eager && kind != OP_READ) {
			/* a one-chunk sized send, or the receive of one: on its own tag, and a
			 * sender longer than the receive spills into the sink (its length is
			 * the message's, known only when it lands) */
			op->tag = fab_eager_tag(x->key);
			op->eager = true;
			if (kind == OP_DATA_RX && f->sink && peer_rail(f, x->peer)->rx_iov2)
				op->sink = true;
		}
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
	fab_ctrl_send(f, peer, FAB_MSG_NACK, &n, sizeof(n));
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
	fab_xfer_finish(f, x, ODX_EINVAL, msg);
}

/* Registers a transfer's own buffer where the provider asks for local registration. */
static int xfer_register(odx_fab *f, struct fab_xfer *x, uint64_t access)
{
	struct fab_rail *rl = peer_rail(f, x->peer);
	if (!rl->mr_local || !x->len || x->mr)
		return 0;
	int ret = fab_mr_register(f, rl, x->buf, x->len, access, &x->mr);
	if (ret) {
		fab_xfer_finish(f, x, fab_err(ret),
				x->is_send ? "could not register the send buffer"
					   : "could not register the receive buffer");
		return ret;
	}
	x->desc = fi_mr_desc(x->mr);
	return 0;
}

/* Receive x meets the pull announcement r: drop the chunks it posted, read instead. */
void fab_recv_pull(odx_fab *f, struct fab_xfer *x, struct fab_xfer *r)
{
	size_t len = r->len;
	x->rma_addr = r->rma_addr;
	x->rma_key = r->rma_key;
	x->chunk = r->chunk;
	uint32_t nchunks = r->nchunks;
	fab_xfer_release(f, r);
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
	x->eager = false;
	x->nchunks = nchunks;
	x->next_chunk = 0;
	x->completed = 0;
	if (xfer_register(f, x, FI_READ) == 0)
		xfer_feed(f, x);
}

/* A transfer to ourselves meets its other half: a copy. */
static void self_match(odx_fab *f, struct fab_xfer *rx, struct fab_xfer *tx)
{
	if (rx->upto && tx->len <= rx->len)
		rx->len = tx->len;
	if (tx->len != rx->len) {
		char msg[300];
		snprintf(
			msg, sizeof(msg),
			"rank %d sends %zu bytes for key %#llx, the receive posted for it expects %zu",
			rx->peer, tx->len, (unsigned long long)rx->key, rx->len);
		fab_xfer_finish(f, tx, ODX_EINVAL, msg);
		fab_xfer_finish(f, rx, ODX_EINVAL, msg);
		return;
	}
	if (rx->len)
		memcpy(rx->buf, tx->buf, rx->len);
	stat_add(&f->bytes_recv, rx->len);
	fab_xfer_finish(f, tx, 0, NULL);
	fab_xfer_finish(f, rx, 0, NULL);
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

/* How a tagged transfer of x->len bytes is cut, and the check its chunks carry. */
static void xfer_plan(odx_fab *f, struct fab_xfer *x)
{
	x->mode = FAB_MODE_TAGGED;
	x->chunk = fab_chunk_size(x->len, xfer_chunk(f, x->peer, x->len));
	x->nchunks = fab_chunk_count(x->len, x->chunk);
	x->own_chunks = x->nchunks;
	x->check = fab_data_check(f->wu.job_key, x->key, x->len, x->chunk, x->nchunks);
}

void fab_recv_size_known(odx_fab *f, struct fab_xfer *x, size_t len)
{
	struct fab_rail *rl = peer_rail(f, x->peer);

	x->await_size = false;
	if (x->eager) {
		/* A sender of several chunks: nothing comes on the one-message tag, so its
		 * receive goes (cancelled) and the chunks are posted from the first. */
		for (int i = 0; i < FAB_WINDOW_MAX; i++)
			if (x->ops[i])
				op_detach(f, x, x->ops[i]);
		x->eager = false;
		x->next_chunk = 0;
		x->completed = 0;
	}
	/* Longer than its buffer: posted for its capacity, the chunks disagree, and the receive
	 * drains the sender's chunks and fails both (recv_mismatch_begin), as any mismatch. */
	if (len <= x->len)
		x->len = len;
	else
		x->announced = len; /* for the message */
	xfer_plan(f, x);
	if (xfer_register(f, x, rl->has_rma ? FI_RECV | FI_READ : FI_RECV) == 0)
		xfer_feed(f, x);
}

void fab_xfer_start(odx_fab *f, struct fab_xfer *x)
{
	xfer_activate(f, x);
	stat_add(&f->transfers, 1);
	struct fab_peer *p = &f->peers[x->peer];
	if (p->state == PEER_FAILED || (p->state == PEER_GONE && p->gone_swept)) {
		fab_xfer_fail_peer(
			f, x, p->state == PEER_FAILED ? "it is marked failed" : "it has closed");
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
	xfer_plan(f, x);
	struct fab_rail *rl = peer_rail(f, x->peer);
	if (!x->is_send) {
		/* a pull announced before this receive: read at once */
		struct fab_xfer *r = map_take_match(&f->unexpected, x->peer, x->key);
		if (r && r->aborted) {
			/* the sender said it will never send: fail without posting anything */
			fab_xfer_finish(f, x, r->refused, r->refused_msg);
			fab_xfer_release(f, r);
			return;
		}
		map_put(&f->posted_recvs, bucket((uint64_t)x->peer, x->key), x);
		if (x->upto && (!r || !r->sized)) {
			if (r) {
				/* a plain send met a receive posted for a sized one */
				char msg[200];
				snprintf(msg, sizeof(msg),
					 "rank %d sends key %#llx as a plain transfer (%zu bytes), but "
					 "it was received with odx_fab_recv_upto",
					 x->peer, (unsigned long long)x->key, r->len);
				fab_xfer_release(f, r);
				send_nack(f, x->peer, x->key, x->len, ODX_EINVAL);
				fab_xfer_finish(f, x, ODX_EINVAL, msg);
				return;
			}
			/* A sender of one chunk sends one message, with no SIZE: its receive is
			 * posted now, into as much of the buffer as such a message can fill (not
			 * the chunk a receive of the capacity would cut: over copy lanes that is
			 * smaller), the sink behind it. A sender of several chunks announces
			 * them, and handle_size swaps that receive for the chunks'. */
			size_t one = odx_fab_sized_one_max(f, x->peer);
			x->await_size = true;
			x->eager = true;
			x->nchunks = 1;
			x->chunk = x->len < one ? x->len : one;
			if (xfer_register(f, x, rl->has_rma ? FI_RECV | FI_READ : FI_RECV) == 0)
				xfer_feed(f, x);
			return;
		}
		if (r && r->sized) {
			size_t n = r->len;
			fab_xfer_release(f, r);
			if (x->upto)
				fab_recv_size_known(f, x, n);
			/* else a sized send met a plain receive: the chunks tell whether the
			 * lengths agree */
			else if (xfer_register(f, x, rl->has_rma ? FI_RECV | FI_READ : FI_RECV) == 0)
				xfer_feed(f, x);
			return;
		}
		if (r) {
			fab_recv_pull(f, x, r);
			return;
		}
		if (xfer_register(f, x, rl->has_rma ? FI_RECV | FI_READ : FI_RECV) == 0)
			xfer_feed(f, x);
		return;
	}
	map_put(&f->sends, bucket((uint64_t)x->peer, x->key), x);
	if (x->sized && x->nchunks == 1 && x->len <= odx_fab_sized_one_max(f, x->peer)) {
		/* one chunk (xfer_plan cut it so): one message, whose length is its own, and no
		 * SIZE, as a plain transfer costs */
		x->eager = true;
	} else if (x->sized) {
		/* the receive posts its chunks once it knows how many: the length goes first */
		struct fab_size sz = {.key = x->key, .len = x->len};
		struct fab_op *op =
			fab_ctrl_new(f, x->peer, FAB_MSG_SIZE, 0, &sz, sizeof(sz), NULL, 0);
		if (!op) {
			fab_xfer_finish(f, x, ODX_ENOMEM, "out of memory for a transfer length");
			return;
		}
		fab_ctrl_enqueue(f, op);
	}
	if (!x->sized && x->len >= atomic_load(&f->pull_min) && x->len && rl->has_rma && !rl->mr_raw &&
	    fab_mr_register(f, rl, x->buf, x->len, FI_REMOTE_READ, &x->mr) == 0) {
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
			struct fab_op *op = fab_ctrl_new(f, x->peer, FAB_MSG_RTS, 0, &rts,
							 sizeof(rts), NULL, 0);
			if (!op) {
				fab_xfer_finish(f, x, ODX_ENOMEM,
						"out of memory for a pull announcement");
				return;
			}
			x->mode = FAB_MODE_PULL;
			fab_ctrl_enqueue(f, op); /* done when the receiver's FIN comes back */
			return;
		}
	}
	if (xfer_register(f, x, FI_SEND) == 0)
		xfer_feed(f, x);
}

static void tx_credit_return(odx_fab *f, int peer);

/* A data op leaves the provider (or the queues) without counting for its transfer. */
void fab_data_op_release(odx_fab *f, struct fab_op *op)
{
	struct fab_xfer *x = op->xfer;
	if (op->kind == OP_DATA_TX && !op->went)
		f->peers[op->peer].data_sent--; /* never sent: the window does not wait for it */
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
		fab_xfer_release(f, x);
}

/* Sends to `peer` waiting for room (tx_room) go on while there is. */
static void tx_wake(odx_fab *f, int peer)
{
	struct fab_peer *p = &f->peers[peer];
	while (p->tx_wait_head && tx_room(f, p)) {
		struct fab_xfer *x = p->tx_wait_head;
		p->tx_wait_head = x->tx_next;
		if (!p->tx_wait_head)
			p->tx_wait_tail = NULL;
		x->tx_queued = false;
		x->ops_out--;
		if (x->finished) {
			if (x->ops_out == 0)
				fab_xfer_release(f, x);
			continue;
		}
		xfer_feed(f, x);
	}
}

/* A data chunk to `peer` finished: let sends waiting for its data credits go on. */
static void tx_credit_return(odx_fab *f, int peer)
{
	struct fab_peer *p = &f->peers[peer];
	p->tx_inflight--;
	if (f->prof.tx_limit)
		tx_wake(f, peer);
}

void fab_data_ack_send(odx_fab *f, int peer, bool force)
{
	struct fab_peer *p = &f->peers[peer];
	uint64_t n = p->data_rcvd - p->data_rcvd_acked;
	if (!n || (!force && n < f->rail[p->rail].ack_every) || p->state != PEER_ALIVE)
		return;
	struct fab_data_ack a = {.total = p->data_rcvd};
	p->data_rcvd_acked = p->data_rcvd;
	fab_ctrl_send(f, peer, FAB_MSG_DATA_ACK, &a, sizeof(a));
}

void fab_data_arrived(odx_fab *f, int peer)
{
	f->peers[peer].data_rcvd++;
	fab_data_ack_send(f, peer, false);
}

void fab_data_acked(odx_fab *f, int peer, uint64_t total)
{
	struct fab_peer *p = &f->peers[peer];
	if (total <= p->data_acked)
		return; /* an old one (acks may overtake each other) */
	p->data_acked = total;
	tx_wake(f, peer);
}

void fab_data_op_done(odx_fab *f, struct fab_op *op)
{
	struct fab_xfer *x = op->xfer;
	if (op->detached || x->finished) {
		fab_data_op_release(f, op);
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
		fab_xfer_finish(f, x, x->refused,
				x->refused_msg ? x->refused_msg : "the receiver refused the send");
		return;
	}
	if (x->mode == FAB_MODE_PULL) {
		struct fab_fin fin = {.key = x->key, .len = x->len};
		fab_ctrl_send(f, x->peer, FAB_MSG_FIN, &fin, sizeof(fin));
	}
	if (x->mismatch) {
		char msg[300];
		if (x->announced)
			snprintf(
				msg, sizeof(msg),
				"rank %d sends %zu bytes for key %#llx, more than the %zu bytes the "
				"receive posted for it (odx_fab_recv_upto) has room for",
				x->peer, x->announced, (unsigned long long)x->key, x->len);
		else
			snprintf(msg, sizeof(msg),
				 "rank %d sends a different length for key %#llx (in %u chunk%s) "
				 "than the receive posted for it, which expects %zu bytes",
				 x->peer, (unsigned long long)x->key, x->nchunks,
				 x->nchunks == 1 ? "" : "s", x->len);
		fab_xfer_finish(f, x, ODX_EINVAL, msg);
		return;
	}
	fab_xfer_finish(f, x, 0, NULL);
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
bool fab_rx_checked(odx_fab *f, struct fab_op *op, size_t len, uint64_t data, bool truncated)
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

/* The one message of a one-chunk sized send (fab_eager_tag) landed in the receive an
 * odx_fab_recv_upto posted for it, whose x->len is still its capacity: the message's length is
 * the sender's (with the sink behind the buffer, a longer one lands whole). Its check must name
 * this job and key, and that length, else it is foreign (dropped, counted, posted again, as in
 * fab_rx_checked). Longer than the capacity: both sides fail, the receive's message giving both
 * lengths. */
void fab_rx_eager(odx_fab *f, struct fab_op *op, size_t len, uint64_t data, bool truncated)
{
	struct fab_xfer *x = op->xfer;
	if (op->detached || x->finished) {
		fab_data_op_release(f, op);
		return;
	}
	size_t chunk = fab_chunk_size(len, xfer_chunk(f, x->peer, len));
	uint64_t want = fab_data_check(f->wu.job_key, x->key, len, chunk, 1);
	if ((data ^ x->check) >> 32 || (!truncated && data != want)) {
		fab_bad(f,
			"a one-message transfer from rank %d for key %#llx (%zu bytes) does not carry "
			"this job's check for it (another job, stale or forged); receive posted again",
			op->peer, (unsigned long long)x->key, len);
		push_ready(f, op);
		return;
	}
	if (truncated || len > x->len) {
		char msg[300];
		snprintf(
			msg, sizeof(msg),
			"rank %d sends %zu bytes for key %#llx, more than the %zu bytes the receive "
			"posted for it (odx_fab_recv_upto) has room for",
			x->peer, len, (unsigned long long)x->key, x->len);
		send_nack(f, x->peer, x->key, x->len, ODX_EINVAL);
		fab_xfer_finish(f, x, ODX_EINVAL, msg); /* takes op out of the window */
		fab_data_op_release(f, op);
		return;
	}
	x->len = len;
	x->await_size = false;
	op->len = len;
	fab_data_op_done(f, op); /* its only chunk: done */
}

/* What a sender sends as one message, and what the receive posted for one takes into its
 * buffer: up to the rail's chunk, and below two lane_min pieces where copy lanes split transfers
 * (xfer_chunk keeps the rail's chunk below that). Up to it, xfer_plan cuts one chunk. */
size_t odx_fab_sized_one_max(const odx_fab *f, int peer)
{
	if (!f || peer < 0 || peer >= f->size)
		return 0;
	if (peer == f->rank)
		return SIZE_MAX; /* a copy */
	const struct fab_rail *rl = &f->rail[f->peers[peer].rail];
	size_t max = rl->chunk;
	if (f->peers[peer].lanes > 1 && rl->lane_min && rl->lane_min <= max / 2)
		max = 2 * rl->lane_min - 1;
	return max;
}
