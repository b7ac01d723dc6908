/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_internal.h - what the files of fabric/ share: the wire format, the wire-up, the provider
 * profiles and fault injection. Only the .c files of fabric/ include this (it pulls in libfabric).
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
#define FAB_VERSION 1

enum fab_msg_type {
	FAB_MSG_USER = 1,    /* odx_fab_send_msg payload */
	FAB_MSG_RTS,	     /* a data transfer announcement (fab_rts body, maybe inline data) */
	FAB_MSG_FIN,	     /* receiver finished an fi_read pull: sender may close its region */
	FAB_MSG_NACK,	     /* receiver refused a transfer (length mismatch) */
	FAB_MSG_HEARTBEAT,   /* liveness when idle (credit-exempt) */
	FAB_MSG_CREDIT,	     /* returns credits only (credit-exempt) */
	FAB_MSG_BARRIER_IN,  /* rank -> 0: arrived at barrier epoch */
	FAB_MSG_BARRIER_OUT, /* 0 -> rank: barrier epoch released */
	FAB_MSG_BYE,	     /* the sender is closing (credit-exempt) */
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
	FAB_MODE_INLINE = 1,
	FAB_MODE_TAGGED,
	FAB_MODE_PULL
};

struct fab_rts {
	uint64_t key;
	uint64_t len;
	uint64_t xfer_id;
	uint32_t mode;
	uint32_t nchunks;
	uint64_t chunk;
	uint64_t rma_addr; /* FAB_MODE_PULL: address (or offset) and key of the read-only region */
	uint64_t rma_key;
};

struct fab_fin {
	uint64_t xfer_id;
	int32_t status;
	uint32_t pad;
};

struct fab_barrier_msg {
	uint64_t epoch;
};

/* Control buffers: header + payload. */
#define FAB_CTRL_BUF 8192
#define FAB_CTRL_PAYLOAD_MAX (FAB_CTRL_BUF - sizeof(struct fab_hdr))
#define FAB_INLINE_MAX (FAB_CTRL_PAYLOAD_MAX - sizeof(struct fab_rts))
_Static_assert(sizeof(struct fab_hdr) == 40 && sizeof(struct fab_rts) == 56,
	       "wire structs changed: tests/fabric/fab_test.c straddles the 8096-byte inline limit");

/* Tags: control messages use tag 0; data chunks set the top bit, then 39 bits of the sender's
 * transfer id and 24 bits of chunk index. Data receives are directed at one source address, so
 * ids only need to be unique per sender. */
#define FAB_TAG_CTRL 0ull
#define FAB_TAG_DATA (1ull << 63)
#define FAB_TAG_ID_BITS 39
#define FAB_TAG_CHUNK_BITS 24
#define FAB_MAX_CHUNKS (1u << FAB_TAG_CHUNK_BITS)

static inline uint64_t fab_data_tag(uint64_t xfer_id, uint32_t chunk)
{
	return FAB_TAG_DATA | ((xfer_id & ((1ull << FAB_TAG_ID_BITS) - 1)) << FAB_TAG_CHUNK_BITS) |
	       chunk;
}

/* ---- Provider profiles (fab_provider.c) ---------------------------------------------------- */

struct fab_profile {
	char prov[64];	   /* the libfabric provider string asked for, e.g. "tcp;ofi_rxm" */
	size_t chunk;	   /* largest single tagged message or read */
	unsigned window;   /* chunks in flight per transfer */
	unsigned credits;  /* control messages in flight per peer */
	unsigned tx_limit; /* data chunks in flight per peer, all transfers together (0: no limit) */
	size_t max_xfer;   /* the largest transfer allowed (SIZE_MAX: none) */
	size_t pull_min;   /* transfers this large use fi_read when possible (SIZE_MAX: never) */
	bool source_broken; /* the provider's FI_SOURCE addresses cannot be trusted (quirk) */
};

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
	double reorder, eagain, cqerr;
	uint64_t rng;
};

/* Parses "delay_us=A-B,reorder=P,eagain=P,cqerr=P,seed=S"; NULL or "" = off. */
int fab_fault_parse(struct fab_fault *ft, const char *spec, char *err, size_t errlen);
uint64_t fab_rand(uint64_t *state);
/* true with probability p */
bool fab_chance(uint64_t *state, double p);

/* 64-bit FNV-1a, used for job keys derived from strings. */
uint64_t fab_hash64(const void *data, size_t len);
/* Monotonic clock in nanoseconds. */
int64_t fab_now_ns(void);

#endif /* ODX_FAB_INTERNAL_H */
