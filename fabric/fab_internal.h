/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_internal.h - what the files of fabric/ share: the wire format, the wire-up, the provider
 * profiles, fault injection and small helpers. The state of an open fabric, which only the
 * transport's files share, is in fab_state.h. Only the .c files of fabric/ include this (it
 * pulls in libfabric).
 */
#ifndef ODX_FAB_INTERNAL_H
#define ODX_FAB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>

#include "fabric.h"

/* ---- Wire format ---------------------------------------------------------------------------
 * Every control message starts with fab_hdr. Hosts are assumed to share endianness (checked by
 * the magic: a byte-swapped peer fails the magic test and is dropped). */
#define FAB_MAGIC 0x4f445846u /* "ODXF" */
/* 3: barriers carry a status, ABORT; 4: SIZE; 5: one-message sized sends; 6: DATA_ACK */
#define FAB_VERSION 6

enum fab_msg_type {
	FAB_MSG_USER = 1,    /* odx_fab_send_msg payload */
	FAB_MSG_RTS,	     /* a pull announcement (fab_rts body) */
	FAB_MSG_FIN,	     /* receiver finished an fi_read pull: sender may close its region */
	FAB_MSG_NACK,	     /* receiver refused a transfer (length mismatch) */
	FAB_MSG_HEARTBEAT,   /* liveness when idle (credit-exempt) */
	FAB_MSG_CREDIT,	     /* returns credits only (credit-exempt) */
	FAB_MSG_BARRIER_IN,  /* rank -> 0: arrived at barrier epoch */
	FAB_MSG_BARRIER_OUT, /* 0 -> rank: barrier epoch released */
	FAB_MSG_BYE,	     /* the sender is closing (credit-exempt) */
	FAB_MSG_ABORT,	     /* a send that will never come: its receive fails (fab_abort) */
	FAB_MSG_SIZE,	     /* the length of a sized send of several chunks (fab_size) */
	FAB_MSG_DATA_ACK, /* data messages received from the peer so far (fab_data_ack; exempt) */
	FAB_MSG_TYPE_END
};

struct fab_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t job_key;
	uint32_t src;	      /* sending rank, checked against the address the provider reports */
	uint32_t payload_len; /* bytes after the header, must equal what arrived */
	uint64_t seq;	      /* per sender->receiver sequence number, for the replay window */
	uint32_t user_type;   /* FAB_MSG_USER: the caller's type */
	uint32_t credits;     /* control-message credits returned to the receiver of this message */
};

enum fab_xfer_mode {
	FAB_MODE_TAGGED = 2, /* chunks as tagged messages into receives posted at odx_fab_recv */
	FAB_MODE_PULL	     /* the receiver reads the sender's read-only region (fi_read) */
};

/* A pull announcement: the only transfer mode that needs one. */
struct fab_rts {
	uint64_t key;
	uint64_t len;
	uint32_t mode;
	uint32_t nchunks;
	uint64_t chunk;
	uint64_t rma_addr; /* address (or offset) and key of the read-only region */
	uint64_t rma_key;
};

/* SIZE: the length of a sized send of several chunks, ahead of them (its receive posts them once
 * it knows). A sized send of one chunk has none: it travels alone, on its own tag. */
struct fab_size {
	uint64_t key;
	uint64_t len;
};

/* DATA_ACK: how many data messages (chunks) the sender of the ack has received from the rank it
 * goes to, in all: that rank keeps at most a window of them unacknowledged (fab_xfer.c). */
struct fab_data_ack {
	uint64_t total;
};

/* FIN (pull done) and NACK (refused: status, and the length the receive expects). */
struct fab_fin {
	uint64_t key;
	uint64_t len;
	int32_t status;
	uint32_t pad;
};

/* Barrier arrival (rank -> 0: the status this rank brings) and release (0 -> rank: the worst
 * status brought, by which rank); text_len bytes of text follow (no NUL). */
struct fab_barrier_msg {
	uint64_t epoch;
	int32_t status;
	int32_t rank;
	uint32_t text_len;
	uint32_t pad;
};
#define FAB_BAR_TEXT_MAX 1024

/* ABORT: the send of `key` will never come (what it would have sent failed): the matching
 * receive fails with `status` and the text_len bytes of text that follow (no NUL). */
struct fab_abort {
	uint64_t key;
	int32_t status;
	uint32_t text_len;
};
#define FAB_ABORT_TEXT_MAX 2048

/* Control buffers: header + payload. */
#define FAB_CTRL_BUF 8192
#define FAB_CTRL_PAYLOAD_MAX (FAB_CTRL_BUF - sizeof(struct fab_hdr))
_Static_assert(sizeof(struct fab_hdr) == 40 && sizeof(struct fab_rts) == 48 &&
		       sizeof(struct fab_fin) == 24 && sizeof(struct fab_barrier_msg) == 24 &&
		       sizeof(struct fab_abort) == 16,
	       "wire structs changed: bump FAB_VERSION");

/* Tags: control messages use tag 0. A data chunk sets the top bit, then carries the transfer key
 * (FAB_KEY_BITS) and the chunk index, so the receiver can post every chunk at odx_fab_recv time,
 * before anything arrives from the sender, and the provider's rendezvous lands the bytes in the
 * destination. Receives are directed at one source address: keys need only be unique per pair
 * of ranks and direction. */
#define FAB_TAG_CTRL 0ull
#define FAB_TAG_DATA (1ull << 63)
#define FAB_TAG_CHUNK_BITS 8
#define FAB_KEY_BITS (63 - FAB_TAG_CHUNK_BITS)
_Static_assert(FAB_KEY_BITS == ODX_FAB_KEY_BITS, "fabric.h promises 55-bit keys");
#define FAB_MAX_CHUNKS (1u << FAB_TAG_CHUNK_BITS)

static inline uint64_t fab_data_tag(uint64_t key, uint32_t chunk)
{
	return FAB_TAG_DATA | key << FAB_TAG_CHUNK_BITS | chunk;
}

/* A sized send that is one chunk (odx_fab_send_sized) is one message, with no SIZE ahead of it:
 * its length is the message's. It travels on a tag of its own, top bit clear and never 0 (the
 * control tag), so that an odx_fab_recv_upto can post a receive for it before it knows whether
 * the sender cut one chunk or announces several; the sender's length decides, which the receiver
 * does not know. */
static inline uint64_t fab_eager_tag(uint64_t key)
{
	return key << FAB_TAG_CHUNK_BITS | 1;
}

static inline uint64_t fab_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The remote CQ data every chunk carries: the high half a digest of (job key, transfer key); the
 * low half the sender's chunk count minus one (8 bits) and a digest of (length, chunk size) (24
 * bits). The receiver checks it before it counts a chunk: the high half tells foreign bytes
 * (another job, a forged or stale message) from a length or chunking disagreement, and the count
 * tells it how many of the sender's chunks to drain before it fails the receive. */
static inline uint64_t fab_data_check(uint64_t job_key, uint64_t key, uint64_t len, uint64_t chunk,
				      uint32_t nchunks)
{
	uint64_t who = fab_mix64(job_key ^ fab_mix64(key + 0x9e3779b97f4a7c15ull));
	uint64_t what = fab_mix64(len ^ fab_mix64(chunk));
	return (who & 0xffffffff00000000ull) | (uint64_t)((nchunks - 1) & 0xff) << 24 |
	       (what >> 40);
}

static inline uint32_t fab_check_chunks(uint64_t check)
{
	return (uint32_t)((check >> 24) & 0xff) + 1;
}

/* Deterministic chunking: both sides cut a transfer of `len` bytes the same way from the
 * profile's chunk size (growing it past FAB_MAX_CHUNKS pieces); a 0-byte transfer is one empty
 * message. */
static inline size_t fab_chunk_size(size_t len, size_t chunk)
{
	return len / chunk >= FAB_MAX_CHUNKS ? (len + FAB_MAX_CHUNKS - 1) / FAB_MAX_CHUNKS : chunk;
}

static inline uint32_t fab_chunk_count(size_t len, size_t chunk)
{
	return len ? (uint32_t)((len + chunk - 1) / chunk) : 1;
}

/* ---- Provider profiles (fab_provider.c) ---------------------------------------------------- */

struct fab_profile {
	char prov[64];	   /* the libfabric provider string asked for, e.g. "tcp;ofi_rxm" */
	size_t chunk;	   /* largest single tagged message or read */
	unsigned window;   /* chunks in flight per transfer */
	unsigned credits;  /* control messages in flight per peer */
	unsigned ctrl_rx;  /* control receives posted per endpoint */
	unsigned tx_limit; /* data chunks in flight per peer, all transfers together (0: no limit) */
	size_t max_xfer;   /* the largest transfer allowed (SIZE_MAX: none) */
	size_t pull_min;   /* transfers this large use fi_read when possible (SIZE_MAX: never) */
	bool source_broken; /* the provider's FI_SOURCE addresses cannot be trusted (quirk) */
	unsigned lanes;	    /* copy lanes (endpoints with a thread each) for ranks it reaches */
	size_t lane_min;    /* a transfer splits over the lanes in pieces at least this large */
};

/* Copy lanes (endpoints with a copying thread each) a rail of profile prof opens: the profile's
 * count (shm: 2), or p->shm_lanes where the profile uses lanes at all. */
#define FAB_LANES_MAX 4
static inline int fab_lane_count(const struct fab_profile *prof, const odx_fab_params *p)
{
	if (prof->lanes > 1 && p && p->shm_lanes > 0)
		return p->shm_lanes < FAB_LANES_MAX ? p->shm_lanes : FAB_LANES_MAX;
	return (int)prof->lanes;
}

/* Resolves p->provider to a profile and an fi_info (the first usable one; freed by the caller
 * with fi_freeinfo). Returns 0 or ODX_E* with err filled (an unknown provider lists the present
 * ones). */
int fab_resolve(const odx_fab_params *p, struct fab_profile *prof, struct fi_info **out, char *err,
		size_t errlen);
/* Comma-separated list of RDM providers present. */
void fab_list_providers(char *buf, size_t n);
/* Translates a negative libfabric code to ODX_E*. */
int fab_err(int fi_ret);

/* ---- Wire-up (fab_wireup.c) ---------------------------------------------------------------- */

enum fab_launcher {
	FAB_LAUNCH_SINGLE,
	FAB_LAUNCH_ENV,
	FAB_LAUNCH_PMIX
};

struct fab_wireup {
	enum fab_launcher launcher;
	int rank, size;
	uint64_t job_key;
	char rendezvous[256]; /* ODX_RENDEZVOUS */
	char nspace[256];     /* PMIx namespace */
};

/* Finds out how this process was started and its rank, size and job key. */
int fab_wireup_detect(struct fab_wireup *w, char *err, size_t errlen);
/* Exchanges every rank's endpoint name (`len` bytes each, same on every rank): `all` receives
 * size * len bytes, rank r's at r * len. Times out after timeout_ms. */
int fab_wireup_exchange(struct fab_wireup *w, const void *name, size_t len, void *all,
			int timeout_ms, char *err, size_t errlen);
void fab_wireup_finish(struct fab_wireup *w);

/* ---- Fault injection (fab_fault.c) --------------------------------------------------------- */

struct fab_fault {
	bool on;
	unsigned delay_min_us, delay_max_us;
	/* cqerr: completion errors that stop one short of the retry bound; cqfail: ones that do not
	 * (a peer fails after max_retries); enomem: FI_ENOMEM completions, the provider out of
	 * resources for a while (back-pressure: retried without counting, fab_post.c) */
	double reorder, eagain, cqerr, cqfail, enomem;
	uint64_t rng;
};

/* Parses "delay_us=A-B,reorder=P,eagain=P,cqerr=P,cqfail=P,enomem=P,seed=S"; NULL or "" = off. */
int fab_fault_parse(struct fab_fault *ft, const char *spec, char *err, size_t errlen);
uint64_t fab_rand(uint64_t *state);
/* true with probability p */
bool fab_chance(uint64_t *state, double p);

/* 64-bit FNV-1a, used for job keys derived from strings. */
uint64_t fab_hash64(const void *data, size_t len);
/* Monotonic clock in nanoseconds. */
int64_t fab_now_ns(void);
/* Appends printf-style text at buf + *used (n bytes in all, always NUL-terminated) and advances
 * *used; false, with *used = n, once the text no longer fits. */
bool fab_appendf(char *buf, size_t n, size_t *used, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- shm endpoint names (fab_shm.c) ------------------------------------------------------- */
/* A name for a new shm endpoint that no other process, live or dead, can hold: the pid, the
 * process's start time and a per-process sequence number. */
void fab_shm_name(char *buf, size_t n);
/* Removes the /dev/shm segments of ODX processes that are gone; returns how many. */
int fab_shm_sweep(void);

#endif /* ODX_FAB_INTERNAL_H */
