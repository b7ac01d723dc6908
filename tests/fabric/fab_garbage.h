/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_garbage.h - the fabric tests' malformed-message sender: forged control messages sent to a
 * peer through the real endpoint, so that the receiver's header checks run on bytes that reached
 * ODX's layer. Test code only: it is built into fab_test, which links the fabric objects and
 * reaches their internal state, never into libodx.
 */
#ifndef ODX_TESTS_FAB_GARBAGE_H
#define ODX_TESTS_FAB_GARBAGE_H

#include <stdint.h>

#include "fabric.h"

typedef enum fab_garbage {
	FAB_GARBAGE_RANDOM,    /* random bytes, random length */
	FAB_GARBAGE_TRUNCATED, /* fewer bytes than a header */
	FAB_GARBAGE_MAGIC,     /* wrong magic */
	FAB_GARBAGE_VERSION,   /* unknown protocol version */
	FAB_GARBAGE_JOB_KEY,   /* another job's key */
	FAB_GARBAGE_LENGTH,    /* payload length larger than the bytes sent */
	FAB_GARBAGE_SENDER,    /* claims to come from another rank */
	FAB_GARBAGE_REPLAY,    /* a valid header with a sequence number already used */
	FAB_GARBAGE_TYPE,      /* valid header, unknown internal type */
	FAB_GARBAGE_DATA,      /* a data chunk for key `seed` (chunk 0) with random bytes, a
				  random length and no valid check */
	FAB_GARBAGE_COUNT
} fab_garbage;

/* Sends one malformed message of `kind` from this rank to `dst` (not itself); `seed` varies the
 * bytes (FAB_GARBAGE_DATA: the transfer key, below 2^FAB_KEY_BITS). 0 once queued, or
 * ODX_EINVAL, ODX_ENOMEM, or the peer's error when dst failed. */
int fab_garbage_send(odx_fab *f, int dst, fab_garbage kind, uint64_t seed);

#endif /* ODX_TESTS_FAB_GARBAGE_H */
