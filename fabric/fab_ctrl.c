/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_ctrl.c - control messages and peers: building and admitting control messages (credits),
 * peer failure and the replay window, and what an incoming control message does (pull
 * announcements, aborts, FIN/NACK, barriers, goodbyes). Separate from fab_xfer.c: control
 * messages have their own flow control (credits) and trust checks (header, sequence window).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- control messages --------------------------------------------------------------------- */

struct fab_op *fab_ctrl_new(odx_fab *f, int dst, uint16_t type, uint32_t user_type, const void *a,
			    size_t alen, const void *b, size_t blen)
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
	op->exempt = type == FAB_MSG_HEARTBEAT || type == FAB_MSG_CREDIT || type == FAB_MSG_BYE ||
		     type == FAB_MSG_DATA_ACK;
	return op;
}

static void deliver_local(odx_fab *f, struct fab_op *op);

/* Admits a control message: credits first (exempt ones skip), then the ready queue. */
void fab_ctrl_enqueue(odx_fab *f, struct fab_op *op)
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

void fab_ctrl_send(odx_fab *f, int dst, uint16_t type, const void *body, size_t len)
{
	struct fab_op *op = fab_ctrl_new(f, dst, type, 0, body, len, NULL, 0);
	if (!op) {
		fab_log(f, "out of memory for a control message to rank %d", dst);
		return;
	}
	if (type == FAB_MSG_HEARTBEAT)
		f->peers[dst].hb_inflight = true;
	fab_ctrl_enqueue(f, op);
}

/* ---- peers -------------------------------------------------------------------------------- */

void fab_peer_fail(odx_fab *f, int rank, const char *why)
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
				fab_xfer_release(f, x);
			continue;
		}
		fab_xfer_fail_peer(f, x, msg);
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
		fab_recv_pull(f, x, r);
	else
		map_put(&f->unexpected, bucket((uint64_t)src, rts->key), r);
}

/* A SIZE: the length of a sized send. Its receive, posted and waiting for it, posts its chunks;
 * one not posted yet meets a record of it when it is. */
static void handle_size(odx_fab *f, int src, const struct fab_size *sz)
{
	if (sz->key >> FAB_KEY_BITS || sz->len > f->prof.max_xfer) {
		fab_bad(f, "malformed transfer length from rank %d (%llu bytes)", src,
			(unsigned long long)sz->len);
		return;
	}
	struct fab_xfer *x = map_take_match(&f->posted_recvs, src, sz->key);
	if (x) {
		/* posted receives stay in the map until they finish */
		map_put(&f->posted_recvs, bucket((uint64_t)src, sz->key), x);
		if (x->await_size)
			fab_recv_size_known(f, x, sz->len);
		/* else a plain receive: its chunks tell whether the lengths agree */
		return;
	}
	struct fab_xfer *r = calloc(1, sizeof(*r));
	if (!r) {
		fab_log(f, "out of memory for a transfer length from rank %d", src);
		return;
	}
	r->is_record = true;
	r->sized = true;
	r->peer = src;
	r->key = sz->key;
	r->len = sz->len;
	xfer_activate(f, r);
	map_put(&f->unexpected, bucket((uint64_t)src, sz->key), r);
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
		fab_xfer_finish(f, x, status, text);
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
void fab_bar_merge(struct bar_status *cur, int status, int rank, const char *text, size_t n)
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

void fab_handle_ctrl(odx_fab *f, int rail, const unsigned char *buf, size_t len, fi_addr_t from)
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
	if (h.type != FAB_MSG_HEARTBEAT && h.type != FAB_MSG_CREDIT && h.type != FAB_MSG_BYE &&
	    h.type != FAB_MSG_DATA_ACK) {
		p->to_return++;
		if (p->to_return >= f->prof.credits / 2 && !p->credit_pending) {
			p->credit_pending = true;
			fab_ctrl_send(f, src, FAB_MSG_CREDIT, NULL, 0);
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
			fab_xfer_finish(f, x, 0, NULL);
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
				fab_xfer_finish(f, x, status, msg);
			}
		}
		break;
	}
	case FAB_MSG_BARRIER_IN:
	case FAB_MSG_BARRIER_OUT: {
		struct fab_barrier_msg b;
		if (h.payload_len < sizeof(b) || (h.type == FAB_MSG_BARRIER_IN) != (f->rank == 0)) {
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
			fab_bar_merge(&f->bar_in[b.epoch & 1], b.status, b.rank, text, b.text_len);
		} else if (b.epoch > f->bar_released) {
			f->bar_released = b.epoch;
			f->bar_out.status = 0;
			fab_bar_merge(&f->bar_out, b.status, b.rank, text, b.text_len);
		}
		wake_blocked_locked(f);
		pthread_mutex_unlock(&f->lock);
		if (h.type == FAB_MSG_BARRIER_IN)
			fab_check_barrier(f);
		break;
	}
	case FAB_MSG_SIZE: {
		struct fab_size sz;
		if (h.payload_len != sizeof(sz)) {
			fab_bad(f, "bad transfer length message from rank %d", src);
			break;
		}
		memcpy(&sz, payload, sizeof(sz));
		handle_size(f, src, &sz);
		break;
	}
	case FAB_MSG_ABORT:
		if (h.payload_len < sizeof(struct fab_abort)) {
			fab_bad(f, "short transfer abort from rank %d", src);
			break;
		}
		handle_abort(f, src, payload, h.payload_len);
		break;
	case FAB_MSG_DATA_ACK: {
		struct fab_data_ack a;
		if (h.payload_len != sizeof(a)) {
			fab_bad(f, "bad data acknowledgement from rank %d", src);
			break;
		}
		memcpy(&a, payload, sizeof(a));
		fab_data_acked(f, src, a.total);
		break;
	}
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
void fab_check_barrier(odx_fab *f)
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
		struct fab_barrier_msg b = {.epoch = e,
					    .status = out.status,
					    .rank = out.rank,
					    .text_len = (uint32_t)n};
		for (int r = 1; r < f->size; r++) {
			struct fab_op *op = fab_ctrl_new(f, r, FAB_MSG_BARRIER_OUT, 0, &b,
							 sizeof(b), out.text, n);
			if (op)
				fab_ctrl_enqueue(f, op);
			else
				fab_log(f, "out of memory for a barrier release to rank %d", r);
		}
	}
}
