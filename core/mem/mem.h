/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.h - the memory wing's internal header: its floors, its lock order, and what each floor
 * offers the floors above it. Only the files of core/mem/ and buffer.c (the public buffer API,
 * which sits above the wing) include it; the rest of the core sees the wing through core.h.
 *
 * Floors, lowest first. A floor calls only its own floor and the floors below it:
 *
 *   0  pool.c, spill.c  the device-memory and pinned pools, the disk tier's I/O engine (each
 *                       with its contract header; they know nothing of buffers)
 *   1  replica.c        replica alloc/free/state, the buffer's host node, transfer counting:
 *                       the only code that changes a node's accounting
 *   2  disk.c           a buffer's copy on the disk tier: spill, reload, free
 *   3  copy.c           copy jobs: sources (replica, disk, zero pages, bounce through host)
 *   4  evict.c          making room: victims, write-backs, spills; watermarks; the monitor kick
 *   5  stage.c          admission, staging, unstaging, prefetch of queued tasks
 *   6  prefetch.c       prefetch requests from the user (odx_buffer_prefetch)
 *   7  monitor.c        the monitor thread: headroom, the watchdog
 *   8  tier.c           open/close, counters, waking what waits for room
 *
 * The exception is the completion door, odx__mem_done (tier.c): a finished copy or spill, or
 * room that appeared, reports there, and it fans out to the floors above and the rest of the
 * core. tests/unit/check_floors.sh checks the rule (the `floors` test of the unit suite): it
 * reads the table above, and greps each floor's files for the functions the higher floors
 * define.
 *
 * The disk floor sits under the copy engine because a copy reads a disk copy as one of its
 * sources (odx__tier_reload). Callbacks handed down with a request (copy_done to a backend or to
 * odx__tier_reload) are the requester's own continuation, not calls up.
 *
 * Lock order, outermost first: ctx->pf_lock; a memory node's lock (device nodes before host
 * nodes; a second host node only by trylock, in eviction's write-back of a host copy to its home
 * node); ctx->objects_lock; a buffer's lock; the pool's and the
 * spill engine's own mutexes. ctx->submit_lock and a device's lock are never held with any of
 * these; the monitor's tier->lock only around its sleep.
 */
#ifndef ODX_CORE_MEM_MEM_H
#define ODX_CORE_MEM_MEM_H

#include "core.h"
#include "pool.h"
#include "spill.h"

typedef struct odx__copy_job odx__copy_job;

/* ---- the completion door (tier.c) ----------------------------------------------------------- */

/* What comes back up: a copy between tiers finished (copy.c), a spill to the disk tier finished
 * (disk.c), or room may have appeared on some nodes (stage.c unpinned replicas; the monitor's
 * safety net for lost wake-ups). */
enum odx__mem_event_kind { ODX__MEM_COPY = 0, ODX__MEM_SPILL, ODX__MEM_ROOM };
typedef struct odx__mem_event {
	int kind;                   /* enum odx__mem_event_kind */
	odx_buffer *buf;            /* copy, spill: the buffer (its transfer still counted) */
	int status;                 /* copy, spill: 0 or the failure */
	int src, dst;               /* copy: its memory nodes */
	double bandwidth;           /* copy: bytes/s measured for the policy's model; 0: none */
	odx__fetch_waiter *waiters; /* copy: the tasks that waited for it (taken: freed here) */
	const char *why;            /* copy: what the waiters are told when it failed */
	odx__copy_job *refetch;     /* copy: a new copy for the waiters (the data changed) */
	int changed[2];             /* memory nodes where room may have appeared */
	int nchanged;
} odx__mem_event;
/* The one call from a floor to a floor above it: fans the event out to the policy's bandwidth
 * model, the watchdog's progress, the waiting tasks (odx__stage_fetched), the tasks and threads
 * waiting for room (odx__tier_changed), the refetch and the prefetch requests. No core lock held;
 * the event's buffer stays alive until the caller ends its transfer, after this returns. */
void odx__mem_done(odx_context *ctx, const odx__mem_event *ev);

/* The wing's per-context state beside the memory nodes: the disk tier, the monitor, the pinned
 * staging pool and the zero pages (opened and closed by tier.c). */
struct odx__tier {
	odx__spill *spill;          /* the disk tier, NULL without one */
	uint64_t disk_capacity;
	pthread_t monitor;
	bool monitor_started;
	pthread_mutex_t lock;       /* the monitor's sleep */
	pthread_cond_t cond;
	bool stop;
	int watchdog_ms;
	uint64_t last_progress;     /* the watchdog's view */
	uint64_t last_change_ns;
	bool dumped;                /* one dump per stall */
	_Atomic int room_waiters;   /* caller threads waiting for room on a host node */
	_Atomic bool kicked;        /* a node crossed its start watermark: the monitor runs now */
	odx__lane_trace *disk_trace;
	_Atomic bool fsize_warned;  /* the file-size limit stopped a spill: said once */
	/* counters */
	_Atomic uint64_t spills, spill_bytes, spill_errors;
	_Atomic uint64_t reloads, reload_bytes, reload_errors;
	_Atomic uint64_t disk_drops; /* spilled copies freed because the buffer changed or died */
	/* the pinned staging pool (tier.pinned.size) */
	odx__pinned *pinned;
	void *pinned_mem;
	size_t pinned_bytes;
	odx__device *pinned_dev;    /* whose host_alloc gave it (PINNED_BACKEND) */
	int pinned_source;          /* enum pinned_source */
	int pinned_errno;           /* why mlock failed */
	/* read-only zero pages, the source that zero-fills pooled device memory */
	void *zeros;
	size_t zeros_bytes;
};

/* ---- floor 1: replicas (replica.c) ---------------------------------------------------------- */

/* The buffer's host node, chosen now if it has none: the host node nearest memory node `near`
 * (a device's, or a host node) when it has room for the buffer, else the host node with the most
 * room. `near` -1: the calling thread's node. Takes no lock. */
int odx__buffer_home(odx_context *ctx, odx_buffer *b, int near);
/* A replica's memory: allocate/free with the node's accounting; the caller holds the node's lock
 * and the buffer's lock. `direct`: a dedicated allocation of the exact size, not from the pool. */
int odx__replica_alloc(odx_context *ctx, odx_buffer *b, int m, bool zero);
int odx__replica_alloc_as(odx_context *ctx, odx_buffer *b, int m, bool zero, bool direct);
void odx__replica_free(odx_context *ctx, odx_buffer *b, int m);
void odx__replica_set_state(odx_buffer *buf, int memnode, int state);
/* How many valid copies the buffer has (memory nodes and disk); buffer lock held. */
int odx__valid_copies(const odx_buffer *b);
/* A transfer of b starts / ends: ends is the callback's last access to b and ctx. */
void odx__transfer_begin(odx_buffer *b);
void odx__transfer_end(odx_buffer *b);

/* Host memory copies of partition shapes: `rows` runs of `width` bytes, each side's pitch apart;
 * and the packed bytes [off, off + len) of a buffer laid out as `s` at `base`, to or from
 * `packed` (docs/partitions.md). */
void odx__strided_copy(char *dst, size_t dpitch, const char *src, size_t spitch, size_t width,
		       size_t rows);
void odx__shape_copy(const odx_shape *s, char *base, size_t off, char *packed, size_t len,
		     bool to_packed);

/* ---- floor 2: the disk tier's buffer side (disk.c) ------------------------------------------ */

/* The buffer's only host copy goes to disk (its host node's lock and buffer lock held); 0 when
 * the write was queued. */
int odx__tier_spill(odx_context *ctx, odx_buffer *b);
/* Reads the buffer's disk copy into dst (host memory), then calls done. */
int odx__tier_reload(odx_context *ctx, odx_buffer *b, void *dst,
		     void (*done)(void *arg, int status, const char *msg), void *arg);
void odx__tier_disk_free(odx_context *ctx, odx_buffer *b); /* buffer lock held */
bool odx__tier_has_disk(const odx_context *ctx);
uint64_t odx__tier_disk_capacity(const odx_context *ctx);

/* ---- floor 3: copies between tiers (copy.c) ------------------------------------------------- */

#define ODX__SRC_DISK (-2) /* a copy's source is the buffer's disk-tier copy */
#define ODX__SRC_ZERO (-3) /* zero-fills pooled device memory for a buffer never written */

enum odx__copy_kind {
	ODX__COPY_FETCH = 0,     /* for tasks waiting on the destination replica */
	ODX__COPY_WRITEBACK = 1, /* eviction: a dirty device copy to host RAM, then free the source */
};

/* A copy between tiers, queued under locks and started once they are released. */
struct odx__copy_job {
	struct odx__copy_job *next;
	odx_buffer *buf;
	int src, dst;        /* memory nodes; src ODX__SRC_DISK or ODX__SRC_ZERO */
	int kind;            /* enum odx__copy_kind */
	uint64_t wversion;   /* the buffer's data version when it was issued */
	void *bounce;        /* host staging between devices of different backends, or disk */
	odx__device *lane;   /* whose copy lane runs it, for the trace */
	uint64_t t_issue;
	/* Run-time lengths (docs/sizes.md): the valid runs it moves, taken when it starts (a
	 * length changes only with a new version, which makes the copy stale anyway); nsegs -1:
	 * the whole buffer in one piece (segs unused) */
	int nsegs;
	odx__seg *segs;      /* &seg1, or heap */
	odx__seg seg1;
	size_t moved;        /* bytes it moves (the copy counters) */
};

/* A new job (counted as a transfer of b); NULL when out of memory. */
odx__copy_job *odx__copy_job_new(odx_buffer *b, int src, int dst, int kind);
/* The memory node to copy from: host RAM first (every lane can reach it), then any device, then
 * the disk tier (ODX__SRC_DISK); -1 if no valid copy exists. Buffer lock held. */
int odx__copy_pick_source(const odx_context *ctx, const odx_buffer *b, int dst);
/* A write-back job copies node `src` to the buffer's host node for eviction and frees the source
 * afterwards if it is still idle. */
odx__copy_job *odx__copy_writeback(odx_buffer *b, int src);
void odx__copy_start_all(odx_context *ctx, odx__copy_job *jobs);

/* ---- floor 4: making room (evict.c) --------------------------------------------------------- */

enum odx__room {
	ODX__ROOM = 0,       /* `need` bytes are free now */
	ODX__ROOM_WAIT = 1,  /* evictions or running tasks will free them: retry later */
	ODX__ROOM_NEVER = 2, /* nothing running or moving can free them: explained in `why` */
};
/* With node m's lock held: frees room for `need` more bytes on m, for task t (NULL: the
 * background monitor), dropping clean idle copies and writing dirty ones one tier down. Copies
 * to start once the caller has unlocked are pushed on *jobs. */
int odx__tier_make_room(odx_context *ctx, int m, uint64_t need, const odx__task *t,
			odx__copy_job **jobs, char *why, size_t whylen);
/* The same below `limit` (a watermark) instead of the capacity. */
int odx__evict_below(odx_context *ctx, int m, uint64_t need, uint64_t limit, const odx__task *t,
		     odx__copy_job **jobs, char *why, size_t whylen);
/* Node m's watermarks in bytes (tier.monitor.start/stop, lowered so that the largest working set
 * admitted there fits above start, and three of them above stop: the next admission finds room
 * and the prefetch window has some). The monitor evicts from start down to stop; prefetch stays
 * below start. */
void odx__tier_watermarks(const odx_context *ctx, int m, uint64_t *start, uint64_t *stop);
/* Wakes the monitor when node m is above its start watermark (after staging took room). */
void odx__tier_kick(odx_context *ctx, int m);

/* ---- floor 5: staging (stage.c) ------------------------------------------------------------- */

/* Node m's lock held: queues a copy bringing b to m if it is not there and fits below `limit`.
 * 1: queued on *jobs; 0: nothing to do; ODX_ENOSPC: no room below limit; else an error. */
int odx__prefetch_copy(odx_context *ctx, odx_buffer *b, int m, uint64_t limit,
		       odx__copy_job **jobs);
/* The fetches the tasks in list w waited for ended (status; `why` when it failed): each counts
 * one fewer, and one with none left is queued as staged or its caller woken. Frees the list. */
void odx__stage_fetched(odx_context *ctx, odx__fetch_waiter *w, int status, const char *why);

/* ---- floor 6: prefetch requests (prefetch.c); odx__prefetch_* in core.h ------------------- */

/* ---- floor 7: the monitor (monitor.c) ------------------------------------------------------- */

/* The monitor thread's body (started by odx__tier_open). */
void *odx__monitor_main(void *arg);
/* "(host RAM)", "(host RAM, NUMA node 1)" or the device's name. */
const char *odx__monitor_node_label(const odx_context *ctx, int m, char *buf, size_t len);

/* ---- floor 8: the wing's entry points (tier.c); odx__tier_open/close in core.h ------------ */

/* Room may have appeared on node m: retry the tasks that wait for it. */
void odx__tier_changed(odx_context *ctx, int m);
/* A task completed or bytes moved (the watchdog's notion of progress). */
void odx__tier_progress(odx_context *ctx);

#endif /* ODX_CORE_MEM_MEM_H */
