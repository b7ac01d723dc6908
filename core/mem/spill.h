/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spill.h - the disk tier's I/O engine: one spill space (a private directory holding one spill
 * file) with its own capacity, its own I/O thread and a checksum per stored block.
 *
 * The tier manager (buffer.c) decides what to spill; this file only stores and loads bytes:
 *  - odx__spill_write reserves capacity synchronously and returns a slot handle; the bytes are
 *    written later on the spill space's I/O thread, which then calls `done`.
 *  - odx__spill_read loads a slot back and verifies every block's crc32 before reporting success.
 *  - odx__spill_free gives the capacity back.
 *
 * Ownership and threading:
 *  - odx__spill_open allocates the spill space, creates the directory and the file, and starts the
 *    I/O thread; odx__spill_close undoes all of it. *out is not touched on failure.
 *  - write/read/free/get_stats may be called from any thread, also from a done callback. close
 *    must not be called from a done callback (it waits for the thread that runs it).
 *  - Memory passed to write (src) and read (dst) belongs to the caller but must stay valid and
 *    untouched until `done` was called for that request.
 *  - A request that returns an error synchronously never calls `done`; one that returns 0 always
 *    calls `done` exactly once, on the I/O thread, also when close cancels it (ODX_ECANCELED).
 *  - The message of a synchronous failure is available on the failing thread through
 *    odx__spill_last_error until the next spill call on that thread.
 */
#ifndef ODX_CORE_SPILL_H
#define ODX_CORE_SPILL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct odx__spill odx__spill;

typedef struct odx__spill_params {
	/* tier.disk.path: the private directory is created under it (NULL or "": $TMPDIR, else
	 * /var/tmp). Borrowed for the duration of odx__spill_open only. */
	const char *path;
	/* Bytes this spill space may hold, enforced by its own accounting of the lengths written
	 * (the file itself may be up to 4 KiB per slot larger because of alignment). 0 = refuse
	 * every write of one byte or more. */
	uint64_t capacity;
	/* Checksum granularity: one crc32 per block_size bytes of a slot (the last block of a slot
	 * may be shorter). 0 = 1 MiB; otherwise a multiple of 4096. */
	size_t block_size;
	/* -1: O_DIRECT where the filesystem takes it (probed with a real write and read), else
	 * buffered; 0: buffered; 1: O_DIRECT or odx__spill_open fails (ODX_EUNAVAIL). */
	int direct;
	/* -1: io_uring when built with liburing and io_uring_queue_init works at run time (it is
	 * often refused in containers), else pread/pwrite; 0: pread/pwrite; 1: io_uring or
	 * odx__spill_open fails (ODX_EUNAVAIL). */
	int engine;
	/* NULL, or injected failures for tests: a comma-separated list of kind=N, each meaning
	 * "the Nth operation of that kind (counted from 1, in submission order) fails that way":
	 *   write_eio=N     the Nth write fails with EIO (its last chunk, so part of it was written)
	 *   write_enospc=N  the Nth write fails with ENOSPC (likewise)
	 *   read_eio=N      the Nth read fails with EIO
	 *   corrupt=N       the Nth write succeeds but one byte of it is flipped on disk afterwards,
	 *                   so reading that slot reports ODX_ECORRUPT
	 *   uring_init=1    io_uring_queue_init fails with EPERM (as in a locked-down container)
	 *   direct_probe=1  the O_DIRECT probe fails with EINVAL (as on tmpfs)
	 * Anything else makes odx__spill_open fail with ODX_EINVAL; odx__spill_fault_check
	 * applies the same parser without opening anything. */
	const char *fault;
	/* How long odx__spill_close waits for I/O already issued (0 = 10000 ms). */
	int close_timeout_ms;
	/* Chunks (1 MiB each) the I/O thread keeps in flight with io_uring (0 = 16; at most 256;
	 * pread/pwrite runs one at a time). */
	unsigned queue_depth;
} odx__spill_params;

/* Fills p with the defaults: path NULL, capacity 0, block_size 0, direct -1, engine -1, no
 * faults, close_timeout_ms 0, queue_depth 0. Set at least capacity afterwards. */
void odx__spill_params_init(odx__spill_params *p);

/* 0 if spec (NULL or "" included) is a valid `fault` value, else ODX_EINVAL with a message
 * quoting the spec and naming the item that is wrong. */
int odx__spill_fault_check(const char *spec, char *err, size_t errlen);

/*
 * Removes first the spill directories under p->path that dead processes left behind (see
 * stale_removed), then creates the private directory odx-spill-PID-XXXXXX (mkdtemp, mode 0700)
 * under p->path, flock'ed while this process lives, holding the spill file (mode 0600), probes
 * O_DIRECT and io_uring as p asks, and starts the I/O thread. Returns 0 and *out, or a negative
 * ODX_E* code with a message naming the path and the cause in err (when err is not NULL);
 * nothing is left on disk then.
 *
 * The file-size limit (RLIMIT_FSIZE, `ulimit -f`) never kills the process through the spill
 * space: a write that would take the file past it is refused with ODX_ENOSPC like a full tier
 * (counted in fsize_refusals), and the I/O thread blocks SIGXFSZ, so a limit lowered while a
 * write is in flight fails that write with ODX_ENOSPC (EFBIG).
 */
int odx__spill_open(const odx__spill_params *p, odx__spill **out, char *err, size_t errlen);

/*
 * Cancels requests not yet started (their done gets ODX_ECANCELED), waits up to
 * close_timeout_ms for the ones in flight, removes the spill file and the directory, and frees
 * the spill space. If I/O is still in flight at the deadline (a hung device), the files are
 * removed anyway, a line goes to stderr, and the I/O thread frees the spill space when its I/O
 * finally returns. NULL is a no-op.
 */
void odx__spill_close(odx__spill *s);

/* Completion of a write or a read: status 0 or a negative ODX_E* code; msg NULL on success, else
 * a message naming the file, the offset and the errno text (valid during the call only). Runs on
 * the I/O thread. */
typedef void (*odx__spill_done_fn)(void *arg, int status, const char *msg);

/*
 * Reserves len bytes of capacity now, returns the slot in *slot, then writes src on the I/O
 * thread with a crc32 per block. Synchronous errors (done is not called, *slot untouched):
 * ODX_ENOSPC when len does not fit (the message names both sizes, what is in use and the
 * capacity), ODX_EINVAL, ODX_ENOMEM, ODX_ECLOSED while closing. On a failed write the slot is
 * released (its handle becomes invalid) and done gets the error; nothing else changes.
 * len 0 is allowed: it takes no space, and done is still called (on the I/O thread), so zero-sized
 * buffers need no special case in the tier manager.
 */
int odx__spill_write(odx__spill *s, const void *src, size_t len, uint64_t *slot,
		     odx__spill_done_fn done, void *arg);

/*
 * Reads a slot back into dst (len must be the slot's length), verifying every block's checksum:
 * a mismatch is ODX_ECORRUPT naming the slot, the block and its offsets; dst then holds
 * unspecified bytes that the caller must not use as data. Several reads of one slot may be in
 * flight. Synchronous errors: ODX_ENOENT for an unknown or freed slot, ODX_EBUSY while its write
 * is still in flight, ODX_EINVAL for a length that is not the slot's, ODX_ECLOSED.
 */
int odx__spill_read(odx__spill *s, uint64_t slot, void *dst, size_t len, odx__spill_done_fn done,
		    void *arg);

/*
 * Releases the slot's capacity (and its disk blocks, by punching a hole where the filesystem
 * can). Safe after a completed write; when called while a write or reads of the slot are still in
 * flight, the release happens after the last of them completes (the handle is invalid at once).
 * Unknown handles are ignored.
 */
void odx__spill_free(odx__spill *s, uint64_t slot);

typedef struct odx__spill_stats {
	uint64_t capacity;	/* bytes this space may hold */
	uint64_t used;		/* bytes reserved by live slots and writes in flight */
	uint64_t bytes_written; /* by completed, successful writes */
	uint64_t bytes_read;	/* by completed, verified reads */
	uint64_t writes, reads; /* completed successful requests */
	uint64_t errors;  /* requests that completed with an error (I/O error or corruption) */
	uint64_t corrupt; /* reads that failed their checksum */
	uint64_t fsize_refusals; /* writes refused (ODX_ENOSPC) by the file-size limit */
	uint64_t fsize_limit;	 /* RLIMIT_FSIZE at the last such refusal (0: none yet) */
	unsigned stale_removed;	 /* directories of dead processes removed by odx__spill_open */
	bool direct;	  /* O_DIRECT is in use */
	bool uring;	  /* io_uring is in use (false after a fallback to pread/pwrite) */
	char dir[256];	  /* the private directory */
} odx__spill_stats;

void odx__spill_get_stats(odx__spill *s, odx__spill_stats *st);

/* The message of the last synchronous failure of a spill call on this thread ("" if none). */
const char *odx__spill_last_error(void);

/* The spill file's path (for tests and benchmarks: fdatasync, stat). Valid until close. */
const char *odx__spill_file_path(const odx__spill *s);

#ifdef ODX_SPILL_TEST_HOOKS
/* Test hook, compiled only into tests/spill's own copy of spill.c (never into libodx): flips the
 * byte at `offset` within a stored slot on disk (the slot must be idle), so the corruption path
 * can be tested. ODX_ENOENT, ODX_ERANGE, or ODX_EIO with a message. */
int odx__spill_corrupt_for_test(odx__spill *s, uint64_t slot, size_t offset);
#endif

/*
 * The file-size limit, for every place ODX extends a file. SIGXFSZ, which a write past
 * RLIMIT_FSIZE sends to the writing thread, kills the process by default; blocked, the write
 * fails with EFBIG instead.
 *  - odx__fsize_guard_begin/end bracket file writes made on an application thread: SIGXFSZ is
 *    blocked in between, and end discards what those writes raised (sigtimedwait) before
 *    unblocking it. If the thread had SIGXFSZ blocked already, both leave everything as it was.
 *    Threads created in between inherit the blocked signal, which is how ODX's own threads
 *    (created inside odx_open) get it.
 *  - odx__fsize_block_thread blocks it for good on the calling thread (ODX's own threads).
 *  - odx__fsize_limit is RLIMIT_FSIZE's soft limit in bytes, UINT64_MAX when unlimited.
 */
typedef struct odx__fsize_guard {
	sigset_t old;
	bool was_blocked;
} odx__fsize_guard;

void odx__fsize_guard_begin(odx__fsize_guard *g);
void odx__fsize_guard_end(odx__fsize_guard *g);
void odx__fsize_block_thread(void);
uint64_t odx__fsize_limit(void);

#endif /* ODX_CORE_SPILL_H */
