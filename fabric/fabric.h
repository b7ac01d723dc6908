/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fabric.h - ODX's transport between ranks (internal).
 *
 * No libfabric type appears here: the files in fabric/ are the only files that include rdma/fabric.h, so
 * another transport (UCX, a loopback mock) could sit behind the same interface.
 *
 * Model:
 *  - One odx_fab per process and job. odx_fab_open wires the ranks up (PMIx, the odx-run
 *    environment, or a single rank) and starts one progress thread. Every callback below runs on
 *    the thread that drives progress at that moment: the progress thread, a caller waiting in
 *    odx_fab_wait (which drives it itself meanwhile), or an assisting worker (odx_fab_assist_*,
 *    odx_fab_assist_kick). Callbacks never run concurrently with each
 *    other, and must not block (queue work elsewhere).
 *  - Control messages (odx_fab_send_msg) are small, copied, eager, bounded per peer by credits and
 *    delivered unordered.
 *  - Data transfers (odx_fab_send / odx_fab_recv) are matched by (source rank, key), keys below
 *    2^ODX_FAB_KEY_BITS. The receiver pre-posts; a send may come before or after its recv. Keys
 *    must be unique among the transfers in flight from one rank to another: two in flight with
 *    one key may mix their bytes. A key may be used again once both sides of its transfer are
 *    done.
 *  - Every call that returns 0 for an operation with a done callback calls it exactly once later
 *    (success, ODX_EPEER naming the rank, ODX_EINVAL for a length mismatch, ODX_ECANCELED at
 *    close, or for a receive the status and text its sender gave odx_fab_send_abort). A call
 *    that returns an error never calls done.
 *  - Thread-safety: every function may be called from any thread, except odx_fab_close, which must
 *    be the last call, and never from a callback.
 */
#ifndef ODX_FABRIC_H
#define ODX_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct odx_fab odx_fab;

/* Transfer keys are this many bits wide (they travel in the provider's 64-bit tag). */
#define ODX_FAB_KEY_BITS 55

typedef struct odx_fab_params {
	/* "auto" (NULL = auto), "tcp", "shm", "verbs", "cxi", "efa", "ue", or a raw libfabric
	 * provider string like "tcp;ofi_rxm". */
	const char *provider;
	/* NULL, or a network interface name ("eth0") or an IP address to pin the endpoint to. */
	const char *iface;
	/* A peer that does not answer this long is failed (0 = 10000). */
	int peer_timeout_ms;
	/* NULL, or a fault-injection spec, e.g. "delay_us=0-2000,reorder=0.2,eagain=0.3,cqerr=0.01,seed=7":
	 * comma-separated key=value items, delay_us=A or A-B (microseconds, B <= 10 s), reorder,
	 * eagain, cqerr, cqfail, enomem = a probability in [0, 1], seed = a decimal integer.
	 * cqerr: completion errors short of max_retries; cqfail: up to it (the peer fails);
	 * enomem: FI_ENOMEM completions (the provider out of resources: throttled, no retry). */
	const char *fault;
	/* Bounded retries of a failed transfer before the peer is declared failed (0 = 3). */
	int max_retries;
	/* Copy lanes on the shm endpoint (ranks on one host): endpoints with a copying thread
	 * each, over which a large transfer's chunks take turns (0 = the profile's 2; 1 = off). */
	int shm_lanes;
} odx_fab_params;

/*
 * Wire-up happens here: PMIx when the process was started by a PMIx launcher (mpirun,
 * srun --mpi=pmix), else ODX_RANK/ODX_SIZE/ODX_RENDEZVOUS/ODX_JOB_KEY from scripts/odx-run, else a
 * single rank (size 1, no endpoint traffic). Collective: every rank of the job must call it.
 * `p` may be NULL (all defaults). On failure *out is not touched and err (if not NULL) says why
 * (ODX_EINVAL for an unknown provider lists the available ones; ODX_ETIMEDOUT when the other
 * ranks did not show up; ODX_EPEER ...).
 */
int odx_fab_open(const odx_fab_params *p, odx_fab **out, char *err, size_t errlen);
/* A PMIx launcher's local rank and local size (the ranks on this host), before any odx_fab is
 * open: 0, or ODX_ENOENT when not started by PMIx or it does not say. */
int odx_fab_local_ranks(int *local_rank, int *local_size);
/* 0 if spec (NULL or "" included) is a valid `fault` value, else ODX_EINVAL with a message in
 * err: the parser odx_fab_open uses, for the configuration check at odx_open. */
int odx_fab_fault_check(const char *spec, char *err, size_t errlen);
/* Drains pending operations with a deadline, tells the peers goodbye, stops the progress thread,
 * fails what is left with ODX_ECANCELED and frees everything (shm segments included). NULL is
 * allowed. Call odx_fab_barrier first for a clean job end. */
void odx_fab_close(odx_fab *f);
int odx_fab_rank(const odx_fab *f);
int odx_fab_size(const odx_fab *f);
/* What was picked, e.g. "tcp;ofi_rxm" ("self" for a single rank with no endpoint). */
const char *odx_fab_provider(const odx_fab *f);

/* status 0 or ODX_E*; msg is NULL on success, else a sentence naming the peer and the cause
 * (valid during the call). Called on the progress thread. */
typedef void (*odx_fab_done_fn)(void *arg, int status, const char *msg);
/* A control message from rank `src`; payload valid during the call. Progress thread. */
typedef void (*odx_fab_msg_fn)(void *user, int src, uint32_t type, const void *payload, size_t len);
/* A peer failed: called once per peer, before its pending operations fail. Progress thread. */
typedef void (*odx_fab_peer_fn)(void *user, int rank, const char *why);

/* Set before traffic is expected; messages that arrive with no handler are dropped (counted). */
void odx_fab_set_handlers(odx_fab *f, odx_fab_msg_fn on_msg, odx_fab_peer_fn on_peer, void *user);
/* The largest control-message payload odx_fab_send_msg accepts. */
size_t odx_fab_max_msg(const odx_fab *f);

/* Control messages: small, eager, per-peer credits; payload copied; delivered unordered. Returns
 * ODX_EINVAL (bad rank, too long), ODX_EPEER (peer failed), ODX_ECLOSED (closing). May be sent to
 * oneself (delivered on the progress thread). */
int odx_fab_send_msg(odx_fab *f, int dst, uint32_t type, const void *payload, size_t len);

/*
 * Data: the receiver knows in advance and pre-posts; matched by (src rank, key < 2^55; a larger
 * key is ODX_EINVAL). Any size (0 .. many GiB, unaligned). src/dst memory stays untouched by the
 * caller until done. The receive is posted into dst at once (the provider's rendezvous then
 * lands the bytes there), or, when the sender chose the pull, read with fi_read from a region the
 * SENDER registered read-only for that transfer (closed afterwards); nothing is ever registered
 * for remote write. A send may be issued before or after the matching recv is posted. Lengths
 * must match: a mismatch fails the receive with ODX_EINVAL and the send too (ODX_EINVAL naming
 * both sizes) unless it already completed.
 */
int odx_fab_send(odx_fab *f, int dst, uint64_t key, const void *src, size_t len,
		 odx_fab_done_fn done, void *arg);
int odx_fab_recv(odx_fab *f, int src, uint64_t key, void *dst, size_t len, odx_fab_done_fn done,
		 void *arg);
/* Transfers whose receiver does not know the length: odx_fab_recv_upto posts a receive of at
 * most `cap` bytes that learns the length from its odx_fab_send_sized, writes it into *len_out,
 * then calls done. A sized send of at most odx_fab_sized_one_max bytes is one message, which
 * carries its length (what a plain transfer of those bytes costs); a longer one announces its
 * length ahead of its bytes (one control message), and its receive posts its chunks once that
 * came. A sender longer than `cap` fails the receive with ODX_EINVAL, its message giving both
 * lengths, and the send too unless it already completed. A sized send must meet a receive posted
 * with odx_fab_recv_upto (and a plain send a plain receive; a plain receive never sees a
 * one-message sized send): the pairs are the caller's protocol, as keys are. Sized sends are
 * never pulled (the receiver's chunks wait for the length anyway). */
int odx_fab_send_sized(odx_fab *f, int dst, uint64_t key, const void *src, size_t len,
		       odx_fab_done_fn done, void *arg);
int odx_fab_recv_upto(odx_fab *f, int src, uint64_t key, void *dst, size_t cap, size_t *len_out,
		      odx_fab_done_fn done, void *arg);
/* The longest sized send to `peer` that travels as one message: the chunk of the rail that
 * reaches it, less where copy lanes split transfers (below twice their smallest piece);
 * SIZE_MAX for oneself (a copy), 0 for a bad rank. For tests and benchmarks. */
size_t odx_fab_sized_one_max(const odx_fab *f, int peer);
/* The send of `key` to `dst` will never be made (the data it would carry failed): the matching
 * receive on dst, posted or not yet, completes with `status` (an ODX_E* code, < 0) and `msg`
 * (at most 2048 bytes travel) instead of waiting. One control message, no data; the key is then
 * used up as if the transfer had happened. ODX_EINVAL for dst == this rank. */
int odx_fab_send_abort(odx_fab *f, int dst, uint64_t key, int status, const char *msg);
/* The caller will not wait in odx_fab_wait for what it just submitted (a runtime posting transfers
 * for its tasks): the progress thread starts it now. A thread that a caller's odx_fab_wait left
 * parked (FAB_LINGER_NS, or FAB_PARK_NS when it parked while the caller drove) is not woken by
 * submissions, which suits a caller that posts and waits in a loop, and stalls one that never
 * waits (up to 100 ms after a barrier, before this call existed). */
void odx_fab_kick(odx_fab *f);
/*
 * Assisted progress, for ranks whose threads share their cores with the progress thread (ranks
 * co-located on a host, one core per worker): the runtime's workers drive progress themselves
 * while they have nothing to run, and the progress thread parks meanwhile instead of polling on
 * the core a worker needs.
 *  - odx_fab_set_assist(f, true) turns the mode on (before transfers start; off by default).
 *  - odx_fab_assist_kick is odx_fab_kick for a worker that just submitted: in this mode it runs
 *    one round on the calling thread (done callbacks may run in it: no lock a callback takes
 *    may be held) instead of waking the progress thread, which it wakes only if another thread
 *    holds the progress role. Outside the mode it is odx_fab_kick.
 *  - A worker with nothing to run calls odx_fab_assist_begin, then odx_fab_assist_poll as often
 *    as it likes (one non-blocking round; done callbacks run on it, under the usual rules: no
 *    lock a callback takes may be held), then odx_fab_assist_end: `more_work` true when it
 *    leaves to run tasks (the progress thread stays parked FAB_ASSIST_LINGER_NS more), false
 *    when it goes to sleep (the progress thread takes over at once).
 * odx_fab_assist_poll returns the work the round did (0 when another thread held the role or
 * nothing happened); it must not be called from a callback (returns 0).
 */
void odx_fab_set_assist(odx_fab *f, bool on);
bool odx_fab_get_assist(const odx_fab *f);
void odx_fab_assist_kick(odx_fab *f);
void odx_fab_assist_begin(odx_fab *f);
int odx_fab_assist_poll(odx_fab *f);
void odx_fab_assist_end(odx_fab *f, bool more_work);
/* A worker found nothing to run and sleeps: the progress thread, parked through a linger, polls
 * again now (unless another worker still drives); `waiting` (the worker waits for transfers)
 * keeps it polling, not blocking, for FAB_ACTIVE_POSTED_NS. */
void odx_fab_assist_sleep(odx_fab *f, bool waiting);
/* Every rank; returns 0, ODX_ETIMEDOUT, ODX_EPEER (a peer failed), ODX_ECLOSED or ODX_EBUSY (from
 * a callback). timeout_ms 0 waits up to peer_timeout_ms, a negative one until every rank arrived
 * or one failed (heartbeats tell a rank that computes elsewhere from a dead one). The caller
 * drives progress meanwhile, as in odx_fab_wait. */
int odx_fab_barrier(odx_fab *f, int timeout_ms);

/* What a barrier brought back: the worst status the ranks brought (0 if none failed) and the
 * rank and text that came with it; when the barrier itself fails with ODX_EPEER, that status,
 * the failed rank and why ("rank 2 failed: ..."). */
typedef struct odx_fab_bar_result {
	int status, rank;
	char msg[1024];
} odx_fab_bar_result;
/* odx_fab_barrier where each rank brings a status (0 or ODX_E*) and a text (at most 1024 bytes
 * travel); `res` (may be NULL) receives on every rank the worst status brought: a failure over
 * success, any failure over ODX_ECANCELED (a consequence), then the lowest rank. */
int odx_fab_barrier_status(odx_fab *f, int timeout_ms, int status, const char *msg,
			   odx_fab_bar_result *res);

/*
 * Waits until done(arg) returns true, driving progress on the calling thread meanwhile (as
 * MPI_Wait does): it polls the completion queues and runs the done callbacks itself, so a
 * completion reaches the caller without a thread hand-off, while the progress thread steps aside.
 * When nothing is in motion for a while (no data posted or completed lately), it gives progress
 * back to the progress thread and blocks until a round of it completes something. done() is
 * called often, on this thread, without any fabric lock: it should be a cheap check of state the
 * callbacks set (atomics, or a lock of the caller's that no callback holds while it calls into
 * the fabric). Callbacks of any transfer may run inside this call: the caller must not hold a
 * lock that a callback takes.
 * Returns 0 (done), ODX_ETIMEDOUT (timeout_ms passed; timeout_ms <= 0 waits up to
 * peer_timeout_ms), ODX_ECLOSED (closing), ODX_EBUSY (called from a callback of this f: that
 * thread already drives progress) or ODX_EINVAL. Transfers that fail still call their done
 * callbacks with an error: done() should count them as finished.
 */
int odx_fab_wait(odx_fab *f, bool (*done)(void *arg), void *arg, int timeout_ms);

/* Counters for ODX_STATS: messages/bytes sent/received, dropped bad messages, retries, EAGAINs. */
typedef struct odx_fab_stats {
	uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv, bad_msgs, retries, eagain, transfers;
	uint64_t lane_bytes; /* of bytes_recv, those received through copy lanes */
	/* Operations held back because the provider had no room for them: a rail's cap on posted
	 * data operations reached (derived from the provider's tx/rx queue sizes), or the provider
	 * refusing one with FI_ENOMEM / FI_EAGAIN. Back-pressure, never counted as retries. */
	uint64_t throttled;
	/* The progress thread's sleeps when idle (not its parks), those taken while a data
	 * operation of ours (a send, a receive) was posted, and their summed length in ns. */
	uint64_t sleeps, sleeps_posted, sleep_ns;
	/* Assisted progress: rounds run by workers (and kicks), those that did something, and the
	 * progress thread's parks (while a caller or a worker drove, or lingering after one). */
	uint64_t assist_rounds, assist_work, parks;
	/* times the parked progress thread took over from assisting workers that tried no round
	 * for a park's length (taken off their cores), polling until one tried again */
	uint64_t assist_takeovers;
} odx_fab_stats;
void odx_fab_get_stats(const odx_fab *f, odx_fab_stats *s);

/* For `odx info`: providers present and which `auto` (or p) would pick; writes lines into buf.
 * Returns 0 or an ODX_E* code (buf still holds what could be said). */
int odx_fab_describe(const odx_fab_params *p, char *buf, size_t n);

/* ---- Tuning and diagnostics ------------------------------------------------------------------ */

/* Transfers of at least `bytes` use the fi_read pull when the provider allows it; SIZE_MAX turns
 * the pull off. The default comes from the measured quirk table or ODX_FAB_PULL_MIN. Collective in
 * effect: only the sender's setting matters for a transfer. */
void odx_fab_set_pull_min(odx_fab *f, size_t bytes);
/* The job key this process runs under (64-bit digest of ODX_JOB_KEY or of the PMIx namespace). */
uint64_t odx_fab_job_key(const odx_fab *f);
/* The provider's address of rank `rank` as text (fi_av_straddr), e.g. "fi_sockaddr_in://127.0.0.1:4242";
 * 0 or ODX_EINVAL / ODX_ENOENT. For tests (a raw TCP client) and diagnostics. */
int odx_fab_peer_addr(const odx_fab *f, int rank, char *buf, size_t n);

#endif /* ODX_FABRIC_H */
