/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_garbage.c - forged control messages for the fabric tests (fab_garbage.h). It builds the
 * bytes from the wire format (fab_internal.h) and queues them as raw operations, which the
 * progress role posts as they are: no sequence number, no credits.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "fab_garbage.h"
#include "fab_state.h"
#include "odx/odx.h"

int fab_garbage_send(odx_fab *f, int dst, fab_garbage kind, uint64_t seed)
{
	/* lengths of forged chunks step through short, equal and overlong between calls */
	static atomic_uint data_calls;

	if (!f || dst < 0 || dst >= f->size || dst == f->rank || kind >= FAB_GARBAGE_COUNT ||
	    (kind == FAB_GARBAGE_DATA && seed >> FAB_KEY_BITS))
		return ODX_EINVAL;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)kind;
	struct fab_op *op = op_new(OP_CTRL_TX, dst, FAB_CTRL_BUF);
	if (!op)
		return ODX_ENOMEM;
	op->raw = true;
	op->exempt = true;
	/* A heartbeat far ahead of the receiver's window unless the kind changes it. */
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
	case FAB_GARBAGE_RANDOM:
		len = 1 + fab_rand(&rng) % (FAB_CTRL_BUF - 1);
		for (size_t i = 0; i < len; i++)
			op->buf[i] = (unsigned char)fab_rand(&rng);
		break;
	case FAB_GARBAGE_TRUNCATED:
		len = 1 + fab_rand(&rng) % (sizeof(h) - 1);
		break;
	case FAB_GARBAGE_MAGIC:
		h.magic = (uint32_t)fab_rand(&rng) | 1u;
		if (h.magic == FAB_MAGIC)
			h.magic ^= 2;
		break;
	case FAB_GARBAGE_VERSION:
		h.version = FAB_VERSION + 1 + (uint16_t)(fab_rand(&rng) % 100);
		break;
	case FAB_GARBAGE_JOB_KEY:
		h.job_key = ~f->wu.job_key;
		break;
	case FAB_GARBAGE_LENGTH:
		h.payload_len = 0x7fffffffu;
		len = sizeof(h) + 16;
		break;
	case FAB_GARBAGE_SENDER:
		h.src = (uint32_t)dst;
		break;
	case FAB_GARBAGE_TYPE:
		h.type = FAB_MSG_TYPE_END + (uint16_t)(fab_rand(&rng) % 100);
		break;
	case FAB_GARBAGE_DATA:
		op->tag = fab_data_tag(seed, 0);
		op->cq_data = fab_rand(&rng);
		len = 1 + (size_t)atomic_fetch_add(&data_calls, 1) * 1999 % 6000;
		for (size_t i = 0; i < len; i++)
			op->buf[i] = (unsigned char)fab_rand(&rng);
		break;
	case FAB_GARBAGE_REPLAY:
	default:
		/* Sequence 0 is the first this rank sent dst (the barrier before any garbage saw
		 * to that): every check passes but the replay window's. */
		h.seq = 0;
		break;
	}
	if (kind != FAB_GARBAGE_RANDOM && kind != FAB_GARBAGE_DATA)
		memcpy(op->buf, &h, len < sizeof(h) ? len : sizeof(h));
	op->len = len;
	pthread_mutex_lock(&f->lock);
	return fab_submit_to_peer_unlock(f, dst, op);
}
