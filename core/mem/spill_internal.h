/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spill_internal.h - one spill space's private state, shared by spill.c (fault injection, the
 * extent allocator, slots, open and close, the calls of spill.h) and spill_engine.c (the I/O
 * engines and the I/O thread). Private to those two files: the rest of ODX sees only spill.h.
 */
#ifndef ODX_CORE_MEM_SPILL_INTERNAL_H
#define ODX_CORE_MEM_SPILL_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#ifdef ODX_HAVE_LIBURING
#include <liburing.h>
#endif

#include "odx/odx.h"
#include "spill.h"


#define ALIGN 4096u
#define DEFAULT_BLOCK (1u << 20)
#define URING_CHUNK (1u << 20) /* many in flight: small enough to overlap checksums with I/O */
#define SYNC_CHUNK (4u << 20)  /* one at a time: large, as one device request at queue depth 1 */
#define WINDOW 64u	       /* chunks of one request in flight at most (a bitmask) */
#define CRC_STEP (256u << 10)  /* checksum work between two looks at the ring */
#define MSG_MAX 512
#define MAX_FAULTS 16

enum fault_kind {
	F_WRITE_EIO,
	F_WRITE_ENOSPC,
	F_READ_EIO,
	F_CORRUPT,
	F_URING_INIT,
	F_DIRECT_PROBE
};
struct fault {
	enum fault_kind kind;
	uint64_t nth;
};

struct extent {
	uint64_t off, len;
};

enum slot_state {
	SLOT_UNUSED,
	SLOT_WRITING,
	SLOT_STORED,
	SLOT_RELEASING
};

struct slot {
	uint64_t off;	/* in the file */
	uint64_t alloc; /* extent length: len rounded up to ALIGN */
	size_t len;
	uint32_t *crc;	   /* one per block; immutable once stored */
	uint32_t gen;	   /* part of the handle, bumped on free so stale handles miss */
	uint8_t state;	   /* enum slot_state */
	bool free_pending; /* freed while requests were in flight: release after the last */
	unsigned busy;	   /* requests in flight on this slot */
	uint32_t next_unused;
};

enum req_kind {
	REQ_WRITE,
	REQ_READ
};

struct req {
	struct req *next;
	enum req_kind kind;
	uint32_t index; /* slot index; the slot array may move, so never a pointer */
	uint64_t handle;
	uint8_t *user;
	size_t len;
	uint64_t off, alloc;
	uint32_t *crc;
	odx__spill_done_fn done;
	void *arg;
	int fault_errno; /* injected: the last chunk fails with it */
	bool fault_corrupt;
	bool reserved; /* a write's blocks were fallocated */
	/* progress, I/O thread only */
	size_t issued;	 /* bytes covered by issued chunks */
	size_t prefix;	 /* bytes covered by contiguously completed chunks */
	uint64_t window; /* bit k: chunk prefix/chunk + k completed */
	unsigned inflight;
	size_t crc_pos;	  /* write: checksummed up to; read: verified up to */
	uint32_t crc_run; /* crc32 of the block at crc_pos so far */
	int status;
	char msg[MSG_MAX];
};

struct chunk {
	struct req *r;
	size_t pos, len; /* user bytes [pos, pos + len) of the request */
	size_t io_len;	 /* bytes on disk: len, or len rounded up to ALIGN when bounced */
	size_t done;	 /* bytes transferred so far (short transfers are reissued) */
	uint8_t *buf;	 /* user memory or bounce */
	uint8_t *bounce; /* allocated on first need, kept until close */
	struct chunk *next_free;
};

struct odx__spill {
	char dir[256];
	char file[280];
	int fd;
	int dirfd; /* the directory, flock'ed while this process lives (see remove_stale) */
	bool direct, uring;
	size_t block, chunk;
	unsigned depth;
	int close_timeout_ms;
	struct fault faults[MAX_FAULTS];
	unsigned nfaults;
#ifdef ODX_HAVE_LIBURING
	struct io_uring ring;
#endif
	atomic_bool punch; /* the filesystem takes FALLOC_FL_PUNCH_HOLE (any thread may find out) */
	bool falloc;	   /* it takes fallocate (I/O thread only) */

	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;   /* requests queued or closing */
	pthread_cond_t exited; /* the I/O thread left its loop (CLOCK_MONOTONIC) */

	/* under lock */
	struct req *queue_head, *queue_tail;
	bool closing, thread_done, orphaned;
	uint64_t capacity, used;
	uint64_t nwrites_submitted, nreads_submitted;
	odx__spill_stats stats; /* fsize_limit, fsize_refusals, stale_removed included */
	struct slot *slots;
	uint32_t nslots, slots_cap, unused_head; /* unused_head: UINT32_MAX when empty */
	struct extent *ext;
	size_t next, ext_cap;
	uint64_t file_end;

	/* I/O thread only */
	struct chunk *chunks;
	struct chunk *free_chunks;
	struct req *active_head, *active_tail;
	unsigned kernel_inflight, to_submit;
};

static inline int odx_code(int e)
{
	switch (e) {
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return ODX_ENOSPC;
	case ENOMEM:
		return ODX_ENOMEM;
	case EACCES:
		return ODX_EACCES;
	case EPERM:
		return ODX_EPERM;
	case ENOENT:
		return ODX_ENOENT;
	case EINVAL:
		return ODX_EINVAL;
	default:
		return ODX_EIO;
	}
}

static inline size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* ---- spill.c -------------------------------------------------------------------------------- */

/* Returns a slot's extent to the allocator, hole-punched. Called with the lock held, returns with
 * it held; drops it around the punch. */
void odx__spill_slot_release(odx__spill *s, uint32_t index);
/* Frees a space whose close timed out, from its I/O thread once that thread is done. */
void odx__spill_destroy_orphan(odx__spill *s);
/* Flips one byte on disk (fault injection "corrupt" and the test hook). */
void odx__spill_flip_byte(odx__spill *s, uint64_t pos, char *err, size_t errlen, int *code);

/* ---- spill_engine.c ------------------------------------------------------------------------- */

/* Sets up the ring: 0, or a negative errno (-ENOSYS when built without liburing). */
int odx__spill_uring_setup(odx__spill *s);
void odx__spill_uring_teardown(odx__spill *s);
/* The I/O thread of one space (pthread_create's start routine; arg is the odx__spill). */
void *odx__spill_io_thread(void *arg);

#endif /* ODX_CORE_MEM_SPILL_INTERNAL_H */
