/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.h - internal types shared by the core's files.
 *
 * The data model (docs/architecture.md):
 *  - memory nodes: host RAM of each NUMA node (nodes 0 .. nhost-1), then one per device;
 *  - a buffer has one replica slot per memory node, each in an MSI state (invalid, shared = clean
 *    copy, modified = the only valid copy), plus an owner rank and a version counter that
 *    distributed execution (dist.c) uses to move data between ranks;
 *  - a task holds its arguments, the count of unfinished predecessors and the list of successors;
 *    an odx_event is a reference to a task.
 */
#ifndef ODX_CORE_CORE_H
#define ODX_CORE_CORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "odx/odx.h"

#define ODX__INLINE_ARGS 8
#define ODX__TAG_MAX 64
#define ODX__MSG_MAX 1024

typedef struct odx__task odx__task;
typedef struct odx__device odx__device;
typedef struct odx__trace odx__trace;
typedef struct odx__lane_trace odx__lane_trace;

/* ---- errors and log (error.c, log.c) ------------------------------------------------------ */

/* Records `code` and a formatted message as the context's last error; returns `code`. */
int odx__fail(odx_context *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void odx__log(odx_context *ctx, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool odx__log_enabled(const odx_context *ctx, odx_log_level level);

/* Argument validation at public entry points: the one macro that hides a return. */
#define ODX__CHECK_ARG(ctx, cond, name)                                                            \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return odx__fail((ctx), ODX_EINVAL, "%s: invalid argument '%s'", __func__, \
					 (name));                                                  \
	} while (0)

uint64_t odx__now_ns(void);
/* The detail a backend gave for the failure it is returning on this thread (odx_backend_host
 * error_detail), taken: empty afterwards. "" when it gave none. */
const char *odx__backend_detail_take(char *buf, size_t n);
void odx__backend_detail_set(const char *msg);
/* Records why odx_open failed on this thread ("" when it succeeded): odx_last_error(NULL). */
void odx__set_open_error(const char *msg);
long odx__inflight(odx_context *ctx);

/* ---- memory nodes, replicas, buffers (core/mem/, buffer.c) -------------------------------- */

enum odx__replica_state {
	ODX__INVALID = 0,
	ODX__SHARED = 1,   /* clean: equal to every other valid copy */
	ODX__MODIFIED = 2, /* dirty: the only valid copy */
};

typedef struct odx__fetch_waiter {
	struct odx__fetch_waiter *next;
	odx__task *task;
} odx__fetch_waiter;

/* Replica fields other than `state` are written under the buffer lock; `allocated` also only
 * under its memory node's lock, so a node's accounting can read it holding that lock alone. */
typedef struct odx__replica {
	_Atomic uint8_t state; /* enum odx__replica_state; written under the buffer lock */
	bool allocated;
	bool fetching;         /* a copy into this replica is in flight */
	bool evicting;         /* being written one tier down; freed after that if still idle */
	uint32_t pins;         /* running or staged tasks using it: never freed or moved then */
	uint32_t holds;        /* prefetched for queued tasks: evicted only as a last resort */
	uint64_t mem;          /* backend handle, or the host pointer for a host memory node */
	uint64_t off;          /* byte offset in mem (memory carved from a pool) */
	uint64_t last_use;     /* ctx->lru_clock when a task last staged it (eviction order) */
	odx__fetch_waiter *waiters;
} odx__replica;

/* A memory tier: host RAM of one NUMA node (nodes 0 .. ctx->nhost-1, host node m being
 * odx__topo's NUMA node m) or one device's memory (the nodes after). Its capacity is enforced by
 * ODX's own accounting, so out-of-core behaviour can be forced with small limits. */
typedef struct odx__memnode {
	odx_memnode_kind kind;
	odx__device *device;   /* NULL for host RAM */
	int near;              /* host RAM: its own index; a device: the host node nearest to it */
	uint64_t capacity;     /* enforced limit in bytes */
	_Atomic uint64_t used; /* bytes of allocated replicas */
	pthread_mutex_t lock;  /* allocation, reservation and eviction on this node (lock
				* order: mem/mem.h) */
	uint64_t evicting;     /* bytes being written down, free once that completes */
	uint64_t peak;         /* highest `used` seen */
	_Atomic uint64_t ws_max; /* largest working set admitted here (sizes the headroom) */
	struct odx__pool *pool; /* device memory suballocator (pooled nodes), else NULL */
	/* counters (ODX_STATS) */
	_Atomic uint64_t drops;      /* clean copies freed to make room */
	_Atomic uint64_t writebacks; /* dirty copies written one tier down to make room */
	_Atomic uint64_t evicted_bytes;
	_Atomic uint64_t noroom;     /* admissions that had to wait for room */
	_Atomic uint64_t alloc_skips; /* stagings that found every replica allocated (no pool) */
} odx__memnode;

struct odx_buffer {
	odx_context *ctx;
	uint64_t id;
	size_t size;
	int home_rank;          /* owner rank (distributed execution); 0 on one process */
	pthread_mutex_t lock;   /* replicas and dependency tracking */
	/* The host memory node (NUMA node) that holds its host copy: -1 until one is first needed,
	 * then fixed (odx__buffer_home), always before a host replica is allocated, so while unset
	 * none is, and odx__home() reads as node 0. Host devices sharing another NUMA node's memory
	 * (host.memnode=shared) may hold a second host replica there; dirty, it is written back
	 * home before it is freed (evict.c), and only the home one spills to disk. */
	_Atomic int home;
	/* dependency tracking, in submission order */
	_Atomic uint64_t version; /* bumped by every writer at submission (under submit_lock);
				   * read without it by prefetch requests */
	odx__task *last_writer; /* referenced */
	odx__task **readers;    /* referenced readers since last_writer */
	int nreaders, capreaders;
	bool zero;              /* never written: reads as zeros */
	bool registered;        /* replica 0 is user memory */
	bool wont_use;          /* odx_buffer_wont_use: evict its copies first ... */
	uint64_t wont_use_task; /* ... until a task created after the hint (id above this) uses it */
	/* odx_buffer_destroy was called (written under objects_lock). Every public entry refuses
	 * the handle from then on (odx__buffer_check); it stays set while the released struct
	 * waits in the context's quarantine, so a stale handle is refused, not followed. */
	_Atomic bool destroyed;
	_Atomic bool dead;      /* its destruction is ready to run: no task reads it any more,
				 * so its copies can be dropped, dirty or not */
	/* data version: bumped when a task's write lands; a copy taken for eviction or spilling
	 * while it changed is discarded, not published */
	uint64_t wversion;
	/* the disk tier's copy (mem/disk.c): its state, slot, and transfers using it */
	_Atomic uint8_t disk_state;  /* enum odx__replica_state */
	bool disk_busy;         /* a spill write is in flight */
	bool spill_failed;      /* the last spill of this version failed: don't retry it */
	uint32_t disk_readers;  /* reloads in flight */
	uint64_t disk_slot;
	_Atomic int transfers;  /* copies and spills of it in flight, callbacks included */
	/* distributed execution (dist.c): every rank tracks the same facts, in program order */
	/* ranks holding its latest version: every rank (0, a new or fully rewritten buffer), one
	 * (valid_one: its last writer), or a set (valid_set: ctx->size bits, allocated on first use) */
	uint8_t valid_kind;
	int valid_one;
	uint64_t *valid_set;
	uint32_t xfer_seq;      /* transfers of it so far: part of each transfer's key */
	void *user_ptr;
	/* odx_buffer_set_label: read without a lock by whoever names the buffer (traces); a new
	 * label links the old one, all freed with the buffer's memory, so a reader's is never freed
	 * under it */
	_Atomic(struct odx__label *) label;
	uint64_t host_registered; /* registered buffers: devices (bit d) that page-locked user_ptr */
	/* Partitions (partition.c, docs/partitions.md). A part's replica on its home host node
	 * (its parent's) is an alias into the parent's host replica: allocated from creation to
	 * release, never counted in the node's `used`, never freed, evicted or spilled on its own.
	 * Its other replicas are packed (size bytes) like any buffer's. */
	struct odx_buffer *part_of; /* a part: its parent (fixed), else NULL */
	size_t part_off;            /* a part: byte offset of its first byte in the parent */
	odx_shape part_shape;       /* a part: its runs inside the parent ({size, 1, size}: 1D) */
	size_t part_elem;           /* a part: bytes per element (ODX_LD) */
	/* A parent: its parts while partitioned (0 otherwise); written by the partitioning thread,
	 * read at every public entry that refuses a partitioned buffer */
	_Atomic int nparts;
	struct odx_buffer **parts;
	/* Partitions whose parts alias its host copy: counted from a partition's submission to the
	 * end of its unpartition (which may run later than the call, partition.c), so that copy is
	 * never evicted or spilled meanwhile (evict.c) */
	_Atomic int backing;
	/* Run-time lengths (length.c, docs/sizes.md). The valid bytes: [0, length), or with a
	 * layout (odx_buffer_set_parts) each part's [off, off + len). Set where a version is made
	 * (a writer's completion, a receive, a host write), under `lock`, before the version is
	 * published: whoever may copy that version afterwards reads them under `lock`. */
	size_t length;
	struct odx__layout *layout;  /* NULL: no parts */
	/* What the disk copy holds: disk_len packed bytes, from the segments disk_segs (NULL: one,
	 * [0, disk_len)); written with disk_state */
	size_t disk_len;
	struct odx__seg *disk_segs;
	int disk_nsegs;
	struct odx_buffer *prev, *next; /* ctx->buffers (live buffers); next: the quarantine */
	odx__replica replicas[]; /* one per memory node */
};

/* A layout of parts with run-time lengths (odx_buffer_set_parts): part i is [off[i], off[i] +
 * cap[i]) of its buffer, len[i] <= cap[i] valid bytes of it. One allocation; replaced whole
 * (the old one freed) only when no task uses the buffer. */
typedef struct odx__layout {
	int nparts;
	size_t *off, *cap, *len;
} odx__layout;

/* A run of valid bytes, at the same offset in every copy of a buffer. */
typedef struct odx__seg {
	size_t off, len;
} odx__seg;

/* The valid bytes of b as runs in offset order, adjacent ones merged (length.c; b's lock held
 * or no writer of it running): returns their number (0: nothing valid) and sets *segs to `inl`
 * when ninl are enough, else to an array the caller frees; *bytes to their sum. Negative:
 * ODX_ENOMEM. */
int odx__valid_segs(const odx_buffer *b, odx__seg *inl, int ninl, odx__seg **segs, size_t *bytes);
/* The buffer's length: the sum of its part lengths with a layout. */
size_t odx__buffer_length(const odx_buffer *b);
/* A host write of [off, off + len) landed (buffer.c): every part it touches is valid at least to
 * the end of what it wrote there. b's lock held. */
void odx__length_written(odx_buffer *b, size_t off, size_t len);
/* Waits until no task of this rank submitted so far uses b (fn names the caller in messages). */
int odx__buffer_wait_users(odx_buffer *b, const char *fn);
/* Frees a buffer's layout and disk segments (its release). */
void odx__length_release(odx_buffer *b);

typedef struct odx__label {
	struct odx__label *older;
	char text[];
} odx__label;
/* "'label'" when the buffer has one, else "buffer N": for traces and messages. */
void odx__buffer_name(const odx_buffer *buf, char *out, size_t n);

int odx__buffer_release_memory(odx_buffer *buf); /* frees replicas; the struct is quarantined */
/* A new, listed buffer of `size` bytes that reads as zeros (buffer.c). */
odx_buffer *odx__buffer_new(odx_context *ctx, size_t size);
/* Brings b's latest bytes into its host copy, which becomes its only valid copy, once every task
 * submitted before that uses b finished (up to timeout_ms; fn names the caller in messages). */
int odx__buffer_gather(odx_buffer *b, int timeout_ms, const char *fn);
/* Frees b's copies other than its host one, once no copy of it is in flight (after a gather). */
void odx__buffer_drop_copies(odx_buffer *b);

/* Is b's replica on memory node m an alias into its parent's host memory (a part's, at home)? */
static inline bool odx__replica_is_alias(const odx_buffer *b, int m)
{
	return b->part_of && m == atomic_load_explicit(&b->home, memory_order_relaxed);
}
/* The layout of b's bytes in its replica on node m: a part's runs inside its parent at home,
 * the same runs packed end to end elsewhere ({width, count, width}); a plain buffer's one run. */
static inline odx_shape odx__replica_shape(const odx_buffer *b, int m)
{
	if (!b->part_of)
		return (odx_shape){b->size, 1, b->size};
	if (odx__replica_is_alias(b, m))
		return b->part_shape;
	return (odx_shape){b->part_shape.width, b->part_shape.count, b->part_shape.width};
}
/* Does the shape leave gaps between runs (copies of it need a strided copy)? */
static inline bool odx__shape_strided(const odx_shape *s)
{
	return s->count > 1 && s->pitch != s->width;
}
/* Bytes from the first byte of a shape to the end of its last run. */
static inline size_t odx__shape_span(const odx_shape *s)
{
	return s->count ? s->pitch * (s->count - 1) + s->width : 0;
}
/* Does b's destruction write its latest bytes into user memory (registered, or a part of a
 * registered buffer)? Then the destroy task stages it like a read. */
static inline bool odx__buffer_keeps_bytes(const odx_buffer *b)
{
	return b->registered || (b->part_of && b->part_of->registered);
}
/* Public entries that refuse a partitioned parent: 0, or ODX_EBUSY with a message naming fn. */
int odx__buffer_partitioned(const odx_buffer *buf, const char *fn);
/* Destroys a partitioned parent with its parts (partition.c): one task ordered after every
 * user of the parts, which writes their latest bytes into registered memory first. */
int odx__partition_destroy(odx_buffer *buf);
/* Releases the parts of a partitioned parent whose destruction ran (worker.c). */
void odx__partition_release_parts(odx_buffer *buf);
/* The end of a partition switch, after its unstaging and before its completion (worker.c, or
 * task.c for one no worker ran): the parts' aliases made, or the parts gathered and released;
 * *status becomes the failure it ran despite, if any. */
void odx__partition_switch_end(odx__task *t, int *status);
/* Handle check at a public entry: 0 for a live buffer of any context, else ODX_EINVAL with a
 * message naming `fn` (a destroyed buffer: its struct stays mapped until close, docs/memory.md
 * "Handles"). NULL gives ODX_EINVAL with no message (no context to hold it). */
int odx__buffer_check(const odx_buffer *buf, const char *fn);
/* Released buffer structs kept before reuse, per context (FIFO): a stale handle is refused
 * for at least this many later buffer releases, and never reaches unmapped memory before close. */
#define ODX__BUF_QUARANTINE 4096
void odx__buffers_release_all(odx_context *ctx);
/* odx_buffer_destroy for every buffer the user did not destroy (close). */
void odx__buffers_destroy_all(odx_context *ctx);

/* ---- kernels (kernel.c) ------------------------------------------------------------------- */

struct odx_kernel {
	odx_context *ctx;
	char *name;
	odx_param *params;
	int nparams;
	int nbuffers;
	odx_kernel_variant *variants;
	int nvariants;
	/* per device: index of the variant it runs, or -1 */
	int *device_variant;
	/* per device: what module_load made of that variant; touched only by the device's
	 * worker (loaded on first launch there) and by close */
	void **device_module;
	char **module_error;        /* per device: why module_load failed (not retried) */
	int *loaded_variant;        /* per device: the variant loaded there, -1 before */
	_Atomic bool user_destroyed; /* odx_kernel_destroy was called: freed at close, since tasks
				 * still queued may use it (no per-task reference counting on the
				 * submission path); odx_submit refuses it from then on */
	bool builtin;           /* odx_kernel_builtin: its ids are 32-bit ints in every dialect */
	struct odx_kernel *prev, *next; /* ctx->kernels */
};

void odx__kernels_free_all(odx_context *ctx);

/* ---- tasks (task.c) ----------------------------------------------------------------------- */

enum odx__task_kind {
	ODX__TASK_KERNEL = 0,
	ODX__TASK_READ,    /* copy out of a replica (t->node) into a user pointer */
	ODX__TASK_WRITE,   /* copy from a user pointer into a replica (t->node) */
	ODX__TASK_DESTROY, /* release a buffer after its last user */
	ODX__TASK_SEND,    /* send the host replica to rank `peer` (distributed execution) */
	ODX__TASK_RECV,    /* receive the buffer from rank `peer` into the host replica */
	/* Partition switches (partition.c): bookkeeping tasks in the graph, run by a worker. A
	 * partition reads and writes its parent (args[0]) and writes every part (the rest): it
	 * brings the parent's latest bytes into its host copy and makes the parts' aliases there.
	 * An unpartition writes the parent and reads and writes every part: it gathers each part
	 * into its alias and releases the parts. Both run even when an input failed (their
	 * bookkeeping must happen), and then complete with that failure. */
	ODX__TASK_PARTITION,
	ODX__TASK_UNPARTITION,
	ODX__TASK_SHUFFLE, /* this rank's side of an odx_shuffle (shuffle.c) */
	ODX__TASK_KIND_COUNT,
};
/* What a task is, in messages and traces: its kernel's name for a kernel task ("task" with
 * kernel_too false), else the kind ("buffer read", "send to a rank", ...). One table (task.c). */
const char *odx__task_kind_name(const odx__task *t, bool kernel_too);

/* Execution state, for the user-side timeout race of reads and writes. */
enum odx__chain_state {
	ODX__CHAIN_FREE = 0,
	ODX__CHAIN_CLAIMED = 1,
	ODX__CHAIN_NO = 2,
	ODX__CHAIN_BEHIND = 3, /* a read or write copied behind its unfinished predecessors, on
				* the device lane they were launched on (buffer.c): the caller
				* owns it; odx__task_ready only tells it they finished */
};

enum odx__exec_state {
	ODX__EXEC_WAITING = 0,
	ODX__EXEC_ABANDONED,
	ODX__EXEC_READY,   /* its predecessors finished: the calling thread runs it */
};

typedef struct odx__succ {
	odx__task *task;
	bool data; /* read-after-write: a failure here cancels the successor */
} odx__succ;

struct odx__task {
	/* What every task's life writes comes first (odx__task_new resets it, submission, the
	 * worker and completion update it), packed into few cache lines: a task goes from the
	 * submitting thread to a worker and back into the pool, and each line it spans crosses
	 * between their cores each time. The argument array, the tag, the lock and the successor
	 * array (written only as far as used), then the state of rarer kinds, follow. */
	_Atomic int refs;
	_Atomic int pending;        /* unfinished predecessors + 1 while submitting */
	odx_context *ctx;
	odx__task *pool_next;       /* free list link */
	uint64_t id;
	odx_kernel *kernel;         /* NULL for internal kinds; kernels live until close */
	odx_arg *args;              /* inline_args or heap */
	int nargs;
	uint8_t kind;               /* enum odx__task_kind */
	_Atomic bool done;
	bool staged;                /* its buffers were staged on its device */
	bool chained;               /* launched behind an unfinished predecessor (ordered lane) */
	bool launched;              /* its kernel was handed to the backend (a partition switch:
				     * its bookkeeping ran, partition.c) */
	_Atomic bool queued;        /* ... and the backend took it (launch returned pending): a
				     * copy queued after it on its device's lane runs after it */
	bool no_effect;             /* an abandoned read or write: completes without touching data */
	bool demand_counted;        /* counted in its device's demand_fetches until they land */
	/* Events (odx_submit with an event): the user holds a reference until odx_event_release.
	 * Such a task, once freed, waits in the context's event quarantine before reuse, so a
	 * released event is refused (user_ref false) rather than aliasing a new task at once. */
	_Atomic bool user_ref;
	_Atomic bool waited;        /* a thread waits for its completion (odx__task_wait) */
	bool has_event;
	/* Something set its run-time length fields (below: rules, set_length records, a refusal):
	 * only then, or for a task that is not a kernel (the transfer fields), does its return to
	 * the pool clear them (odx__task_put). Cleared there. */
	bool lengths_used;

	_Atomic int priority;       /* atomic: a transfer's is raised while workers may read it */
	int device_mask_only;       /* 0 any, d+1 forced to device d (odx_task_opts) */
	int device;                 /* placed device, -1 until placed */
	_Atomic int chain;          /* 0, then CHAIN_CLAIMED by a chaining worker or CHAIN_NO
				     * by odx__task_ready: whoever is first owns the launch */
	_Atomic int cancel;         /* nonzero: a data predecessor failed; the task will not run */
	int status;                 /* final status once done */
	_Atomic int fetches;        /* outstanding fetches before it can run */
	_Atomic int fetch_error;    /* a fetch for it failed */
	_Atomic int exec;           /* enum odx__exec_state (reads, writes) */
	int nstaged;                /* arguments 0..nstaged-1 are pinned */
	odx__succ *succ;
	int nsucc, capsucc;
	uint32_t grid[3], block[3];

	_Atomic(char *) cancel_msg; /* why, published before `cancel` is set */
	char *message;              /* heap, failure text */
	/* heap or NULL: the first failure it was canceled because of ("task #5 'x' (kernel 'k')
	 * on rank 0 failed: ..."), carried down a chain of canceled tasks and across ranks; NULL
	 * for a task that failed itself (its own message is the cause). Written before the
	 * pending count that lets it complete drops, read once it is done. */
	char *origin;
	char *fetch_msg;            /* why, written by whoever set fetch_error */
	uint64_t t_start;           /* when its kernel was launched (stats, trace, models) */
	odx__task *mem_next;        /* its device's queue of tasks waiting for room (worker.c) */
	uint64_t hold_mask;         /* arguments whose replicas it holds as prefetched (bit i) */
	uint64_t t_noroom;          /* when it first found no room on its device (stall time) */

	/* Reads and writes: could the copy be queued behind the unfinished predecessors seen at
	 * submission (odx__task_submit)? AFTER_UNSEEN none yet, AFTER_NO no, else the one device
	 * they were all launched on; after_producer (a reference) the one among them whose
	 * output a read copies. */
	int after_dev;
	int node;                   /* reads / writes: the memory node copied from or to */
	odx__task *after_producer;
	void *host_ptr;             /* reads / writes: user memory */
	size_t host_off, host_len;
	int peer;                   /* sends and receives: the other rank */
	bool xfer_posted;           /* sends: handed to the fabric (else a failure sends an abort) */
	uint64_t xfer_key;          /* sends and receives: the transfer's key on the fabric */

	char tag[ODX__TAG_MAX];
	odx_arg inline_args[ODX__INLINE_ARGS];
	pthread_mutex_t lock;       /* succ list and done */
	odx__succ inline_succ[4];

	/* not reset per task: set where used */
	void *xfer_stage;           /* sends and receives of a strided part: its packed bytes */
	struct odx__shuffle *shuffle; /* a shuffle's state (shuffle.c), freed with the task */
	odx__task *policy_next;     /* the Lua policy host's pending list (policy.c) */

	/* Rare, not reset at odx__task_get: zero in a new slab, and put back to zero by
	 * odx__lengths_task_reset when a task that used them returns to the pool (lengths_used;
	 * odx__task_put).
	 * Run-time lengths (length.c). Kernels: the length rules of its submission (heap), the
	 * lengths its host variant set (odx_host_launch.set_length: heap, under `lock`, in call
	 * order), the first refused request (len_status, len_msg), the counts its rules read
	 * (len_counts, heap) and the device reads of them in flight. */
	odx_length_rule *rules;
	int nrules;
	struct odx__lenrec *lenrecs;
	int nlenrecs, caplenrecs;
	int len_status;
	char *len_msg;
	uint32_t *len_counts;
	_Atomic int len_reads;
	_Atomic int len_read_status;
	/* Sends and receives: its parts' transfers in flight (one without parts), the first
	 * failure among them, the bytes moved and, for a receive, the lengths that came. */
	int xfer_nparts;           /* the buffer's parts when it was submitted (0: none) */
	_Atomic int xfer_left;
	_Atomic int xfer_status;
	char *xfer_msg;
	size_t xfer_bytes;
	size_t xfer_len;           /* a receive without parts: what came */
	size_t *xfer_lens;         /* with parts: per part (heap) */
};

/* One odx_host_launch.set_length call: argument `arg`, part (or ODX_WHOLE_BUFFER), bytes. */
typedef struct odx__lenrec {
	int arg, part;
	size_t bytes;
} odx__lenrec;

/* Length rules and ODX_LEN at submission (length.c): 0, or ODX_EINVAL with the reason. */
int odx__lengths_check(odx_context *ctx, const odx_kernel *k, const odx_arg *args, int nargs,
		       const odx_task_opts *opts);
/* The counts t's length rules read, once its kernel succeeded on `dev` (length.c): 0 when they
 * are in t->len_counts (or t has none), 1 when device reads were queued (their completion
 * finishes t), negative when they could not be read (t->len_msg says why). */
int odx__lengths_fetch(odx__task *t, odx__device *dev);
/* Applies what t set (rules, host set_length) to its buffers, before their new version is
 * published: 0, or the failure (ODX_EKERNEL) with its message in t->len_msg. */
int odx__lengths_apply(odx__task *t);
/* odx_backend_launch.set_length: records a host variant's request for task `ctx` (a task). */
void odx__lengths_set(void *task, int arg, int part, size_t bytes);
/* May t (running a host variant, or with rules) change lengths its successors read at launch? */
bool odx__task_sets_lengths(const odx__task *t, const odx__device *dev);
/* Frees a task's length state (task reuse). */
void odx__lengths_task_reset(odx__task *t);

/* Freed tasks that carried an event, kept before reuse (FIFO, per context). */
#define ODX__EVENT_QUARANTINE 4096
/* Handle check at a public entry taking an event: 0, or ODX_EINVAL with a message. */
int odx__event_check(const odx_event *ev, const char *fn);

enum { ODX__AFTER_UNSEEN = -2, ODX__AFTER_NO = -1 };

odx__task *odx__task_new(odx_context *ctx);
void odx__task_put(odx__task *t);
/* Hands the tasks dev's worker freed back to the pool (from dev's worker thread). */
void odx__task_return_flush(odx__device *dev);
/* Infers dependencies of a filled task, then makes it ready if nothing is pending. */
enum odx__admit {
	ODX__ADMIT_WAIT = 0,     /* block while sched.max_inflight tasks are unfinished */
	ODX__ADMIT_NONBLOCK = 1, /* return ODX_EAGAIN then */
	ODX__ADMIT_FORCE = 2,    /* never wait (buffer destruction must not block) */
};
int odx__task_submit(odx_context *ctx, odx__task *t, int admit);
void odx__task_complete(odx__task *t, int status, const char *msg);
void odx__task_ready(odx__task *t);
int odx__task_wait(odx__task *t, int timeout_ms);
/* Waits (up to timeout_ms, -1 forever) until cond(arg) holds, woken by odx__wake_waiters. */
int odx__wait_until(odx_context *ctx, bool (*cond)(void *), void *arg, int timeout_ms);
/* The same, for an application thread in an API call that waits (never from a callback, a
 * worker or with a core lock held): it first drives the completions of a busy device whose
 * backend offers `progress` (ABI 1.4), so the driver wakes this thread directly. */
int odx__wait_app(odx_context *ctx, bool (*cond)(void *), void *arg, int timeout_ms);
void odx__wake_waiters(odx_context *ctx);
/* Reads and writes from the API run on the calling thread, not on a worker. */
static inline bool odx__task_caller_runs(const odx__task *t)
{
	return t->kind == ODX__TASK_READ || t->kind == ODX__TASK_WRITE;
}
static inline bool odx__task_is_switch(const odx__task *t)
{
	return t->kind == ODX__TASK_PARTITION || t->kind == ODX__TASK_UNPARTITION;
}
/* buffer access of argument i: mode used for dependencies, and whether staging fetches it */
odx_access odx__task_dep_access(const odx__task *t, int i);
bool odx__task_stage_reads(const odx__task *t, int i);

/* ---- devices, scheduling, workers (sched.c, worker.c) -------------------------------------- */

/* Ready tasks by priority: one FIFO ring per distinct priority, levels sorted from the highest.
 * Programs use few distinct priorities, so push and pop are O(1) in practice, with no pointer
 * chasing through a heap of every queued task. */
typedef struct odx__level {
	int priority;
	odx__task **ring;
	int head, n, cap;
} odx__level;

typedef struct odx__queue {
	odx__level *levels;
	int nlevels, caplevels;
	int n; /* tasks in all levels */
} odx__queue;

/* Slots of a device's inbox ring (a power of two). */
#define ODX__INBOX_CAP 256

/* One slot of a device inbox: `turn` is the lap base of the position it serves (position &
 * ~(CAP - 1)): equal, it is free for that position; plus one, it holds that position's task;
 * plus CAP, it was taken and serves the next lap. Zeroed memory is a valid empty ring. */
typedef struct odx__inbox_slot {
	_Atomic unsigned turn;
	_Atomic(odx__task *) task;
} odx__inbox_slot;

struct odx__device {
	int index;
	int memnode;
	const odx_backend_ops *ops;
	odx_backend_kind kind;      /* ODX_BACKEND_OTHER for a kind without a constant */
	const char *kind_name;      /* its kind by name: static, or the descriptor's name */
	void *bdev;                 /* backend device state */
	odx_backend_device_props props;
	char name[160];

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;       /* queues and sleeping */
	odx__queue ready;           /* placed tasks, by priority */
	odx__task **staged;         /* tasks whose inputs arrived: FIFO ring */
	int staged_head, staged_n, staged_cap;
	/* Ready tasks of priority 0 pushed without the lock (sched.c, inbox_push): a ring of
	 * ODX__INBOX_CAP slots, each a task pointer and its turn (which lap of the ring may write
	 * or read it next). A pusher claims a position with a compare-and-swap on inbox_tail (a
	 * line the worker never writes), stores the task and then the slot's turn; a taker claims
	 * the position at inbox_head with a compare-and-swap once its turn says it is written,
	 * reads the task and hands the slot to the next lap. The worker takes from it without its
	 * lock while nothing is queued under the lock (worker.c, take_unlocked); whoever holds
	 * the lock may take too (a thief's drain): the head's compare-and-swap decides. A full
	 * ring: the pusher takes the lock (odx__sched_queue). */
	_Alignas(64) _Atomic unsigned inbox_tail;
	_Atomic int over_n;         /* tasks in the overflow (below): read by every push */
	/* Written under lock when the worker runs out of work (not per task); read without it by
	 * every push: a line of their own. */
	_Alignas(64) _Atomic bool sleeping;
	/* A wake-up was sent to it while it sleeps (set under lock by the waker, cleared by the
	 * worker when it wakes, before it looks for work): later pushes and thief wake-ups skip
	 * the lock and the futex call (odx__device_wake). */
	_Atomic bool wake_pending;
	/* What its sleeping worker waits on (a futex word): bumped by every wake-up
	 * (odx__device_signal). The worker reads it after its store to `sleeping` and before its
	 * last look for work, and sleeps only while it is unchanged: a wake-up sent at any point
	 * after that read is not lost, also one sent while a steal had dropped the lock. */
	_Atomic uint32_t wake_seq;
	_Atomic bool polling;       /* its worker found nothing and looks again before it sleeps
				     * (poll_for_work): it takes what is queued here at once, so
				     * neither a wake-up nor a thief is needed for it */
	_Alignas(64) _Atomic unsigned inbox_head;
	/* Bumped (under lock) whenever a task is queued where the worker looks under its lock
	 * (ready, staged, held, memory-wait) or a submitter launches here: the worker takes from
	 * the inbox without the lock only while it is the count it saw with all of those empty
	 * (lq_seen, fast_ok: its own thread's). */
	_Atomic unsigned lq_adds;
	unsigned lq_seen;
	bool fast_ok;
	_Atomic uint64_t unlocked_takes; /* tasks the worker took from the inbox without its lock */
	_Alignas(64) odx__inbox_slot inbox[ODX__INBOX_CAP];
	/* Drained tasks that `ready` had no memory for: taken before it, in order (under lock). */
	odx__task *held_head, *held_tail;
	/* Tasks of priority 0 pushed while the ring was full, after it in order (FIFO, under
	 * lock): while any wait here, pushes come here too (over_n, read without the lock); the
	 * worker refills the emptied ring from it, many at a time, and takes them from there
	 * without its lock. A drain moves them into `ready` after the ring's. */
	odx__task **over;
	int over_head, over_cap;
	_Atomic uint64_t over_refills; /* refills of the ring from the overflow */
	_Atomic uint64_t inbox_drains; /* looks at the inbox that found tasks */
	_Atomic uint64_t inbox_tasks;  /* tasks taken from it */
	_Atomic uint64_t push_wakes;   /* wake-ups sent by an inbox push to a sleeping worker */
	_Atomic uint64_t sleeps;       /* times its worker announced sleep (set `sleeping`): each
				      * is sent at most one wake-up by pushes and thieves */
	/* Tasks its worker freed, handed back to the context's pool RET_BATCH at a time (one
	 * compare-and-swap on the pool's shared line per batch) and whenever it runs out of work
	 * (odx__task_return_flush). Its worker's thread only. */
	odx__task *ret_head, *ret_tail;
	int ret_n;
	_Atomic uint64_t ret_flushes;  /* batches handed back */
	bool inline_running;        /* a submitting thread stages and launches a task here: the
				     * worker takes nothing meanwhile (under lock) */
	bool stop;
	_Atomic bool lost;          /* the backend reported ODX_EDEVLOST: place nothing more here */
	/* Tasks placed here that could not be admitted for lack of room, in order (under lock).
	 * While any waits, the worker takes no new ready task: the head gets the next room. */
	odx__task *memwait_head, *memwait_tail;
	_Atomic int memwait_n;
	bool mem_changed;           /* room may have appeared: retry the head (under lock) */
	_Atomic uint64_t stall_ns;  /* time tasks waited for room (compute lane stalled) */
	_Atomic int demand_fetches; /* fetches in flight for tasks being staged here */
	_Atomic bool launch_blocks; /* its launches run to completion on the launching thread (a
				     * host device): learned from its launches */
	_Atomic uint64_t prefetches, prefetch_hits, prefetch_waste;
	_Atomic int load;           /* queued + staging + running tasks */
	/* of `load`, transfer tasks posted to the fabric (dist.c): nothing for the worker to run
	 * until they complete; an assisting worker polls the fabric for them (fabric.progress) */
	_Atomic int xfers_out;
	_Atomic uint64_t completed; /* tasks placed here that completed */

	/* stats */
	_Atomic uint64_t tasks_run;
	_Atomic uint64_t chained;   /* tasks launched behind an unfinished predecessor */
	_Atomic uint64_t stolen;    /* ready tasks taken from devices sharing its memory */
	/* A successor its worker's own completion made ready and placed here while nothing else
	 * was queued: the worker runs it next, with no queue and no lock (odx__sched_queue). Read
	 * and written by the worker's thread only. */
	odx__task *direct;
	_Atomic uint64_t direct_runs; /* tasks run so */
	bool steal_peers;           /* sched.steal and another device shares its memory */
	_Atomic uint64_t copied_behind; /* reads and writes copied behind their predecessors */
	_Atomic uint64_t busy_ns;
	odx__lane_trace *compute_trace;
	odx__lane_trace *copy_trace;
	uint64_t copy_lane_free_ns;  /* end of the last traced copy (copy completions are serial) */
	_Atomic uint64_t compute_free_ns; /* end of the last asynchronous launch seen completing */
};

/* The first PU slot of a device's threads (odx__topo_bind_self): its worker binds there with
 * host.bind, and a host device's nearest NUMA node is that slot's. */
static inline unsigned odx__device_bind_slot(const odx__device *dev)
{
	return (unsigned)dev->index * (unsigned)(dev->props.threads > 0 ? dev->props.threads : 1);
}

typedef struct odx__sched_ops {
	const char *name;
	bool shared_queue; /* place() may return -1 */
	/* Picks a device for a ready task among those that can run it, or -1 to let any worker
	 * take it (eager). */
	int (*place)(odx_context *ctx, odx__task *t);
} odx__sched_ops;

const odx__sched_ops *odx__sched_find(const char *name);
void odx__sched_push(odx_context *ctx, odx__task *t);
/* Queues a ready task on device d, or on the shared queue when d < 0 and the policy uses one
 * (else it fails as unplaceable): the mechanism behind every placement decision. */
void odx__sched_queue(odx_context *ctx, odx__task *t, int d);
/* Raises a submitted task's priority, moving it within its ready queue if it waits there. */
void odx__sched_raise(odx_context *ctx, odx__task *t, int priority);
bool odx__device_can_run(odx_context *ctx, const odx__device *d, const odx__task *t);
int odx__workers_start(odx_context *ctx);
void odx__workers_stop(odx_context *ctx);
void odx__queue_free(odx__queue *q);
/* The first n tasks of a queue in pop order, left in it (the queue's lock held). */
int odx__queue_peek_n(const odx__queue *q, odx__task **out, int n);
/* Queues a task whose inputs arrived on its device (from copy-completion threads). */
void odx__device_push_staged(odx__device *d, odx__task *t);
/* The device inbox (sched.c): moves the tasks pushed without d->lock into its ready queue
 * (d->lock held; returns how many); odx__inbox_pending: are any pushed or held (d->lock held,
 * or a hint without it). */
int odx__inbox_drain(odx__device *d);
bool odx__inbox_pending(odx__device *d);
bool odx__inbox_ring_pending(odx__device *d);
/* The worker's take from its inbox without d->lock (NULL: look under the lock), the note it
 * makes under the lock of whether it may, and the mark of a task queued under the lock. */
odx__task *odx__inbox_take_unlocked(odx__device *d);
bool odx__inbox_locked_empty(odx__device *d);
void odx__inbox_note_empty(odx__device *d);
void odx__lq_added(odx__device *d);
/* Next task for a device's worker; called with d->lock held. */
odx__task *odx__sched_next(odx_context *ctx, odx__device *d);
/* Work stealing (sched.steal): a ready task queued behind a busy device that shares d's memory,
 * taken for d (NULL if none); with d->lock held. odx__sched_stealable: whether d has such peers
 * (`any`), or whether one may have a task to take; without locks. */
odx__task *odx__sched_steal(odx_context *ctx, odx__device *d);
bool odx__sched_stealable(odx_context *ctx, const odx__device *d, bool any);
void odx__sched_wake_thief(odx_context *ctx, odx__device *d);
bool odx__device_wake(odx__device *dev);
void odx__device_signal(odx__device *dev);
void odx__device_sleep(odx__device *dev, uint32_t seq);
/* Ends a placed task: updates and unpins its replicas, accounts, completes it (worker.c). */
void odx__task_finish(odx__task *t, int status, const char *msg);
/* Set while this thread is inside odx_submit: a task that becomes ready there may be launched
 * by this thread itself when its device is idle (sched.c, odx__run_inline). */
extern _Thread_local bool odx__submitting;
/* The device whose worker this thread is, -1 on other threads: placement prefers it on a tie,
 * so a worker runs the successor its own completion made ready, with no hand-off. */
extern _Thread_local int odx__worker_device;
/* The same as a pointer (a worker belongs to one context; odx__worker_device's index could name
 * a device of another context whose task this thread made ready, from a nested submission). */
extern _Thread_local odx__device *odx__worker_self;
/* Stages and launches t on dev from the submitting thread; dev->inline_running was set (and
 * dev->load counted) under dev->lock by the caller. */
void odx__run_inline(odx__device *dev, odx__task *t);

/* Staging (mem/stage.c): reserves the task's whole working set on the memory node it runs against
 * (evicting idle copies if needed), makes its inputs valid there and pins them. READY: it can
 * run now; FETCHING: the last fetch queues it as staged; NOROOM: nothing was reserved or pinned,
 * room is being made: retry when odx__tier_changed says so. A task that can never fit fails
 * through fetch_error (READY then, so it is finished with that message). */
enum odx__stage_result { ODX__STAGE_FETCHING = 0, ODX__STAGE_READY = 1, ODX__STAGE_NOROOM = 2 };
int odx__stage(odx__task *t, const odx__task *producer);
/* Prefetch: fetches the inputs of queued task t to its device's node when there is room below
 * the monitor's start watermark, holding them (not evicted before t runs but as a last resort).
 * Returns the number of fetches started. */
int odx__prefetch(odx__task *t);
/* Could t be staged on memory node m right behind `producer` on an in-order lane, with no
 * fetch: is every input either written by the producer or already valid there? */
bool odx__can_stage_behind(const odx__task *t, const odx__task *producer, int m);
/* After the task ran (status 0) or failed: replica states, unpinning. */
void odx__unstage(odx__task *t, int status);
int odx__task_memnode(const odx__task *t);

/* ---- backends registered in a context (context.c) ----------------------------------------- */

typedef struct odx__backend_slot {
	char *name;
	odx__backend_module module;     /* where it came from */
	const odx_backend_ops *ops;     /* NULL: not found */
	void *state;
	bool available;
	int ndevices;
	char reason[256];
} odx__backend_slot;

/* ---- trace and stats (trace.c) ------------------------------------------------------------ */

odx__lane_trace *odx__lane_trace_new(odx_context *ctx, const char *name, int pid, int tid);
void odx__trace_span(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0,
		     uint64_t t1, uint64_t task_id);
/* The same with the bytes it moved and the buffer (its id; both written to the span's args when
 * nonzero). */
void odx__trace_span_sized(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0,
			   uint64_t t1, uint64_t task_id, uint64_t bytes, uint64_t buf);
/* The lane of transfers with rank `peer`, one per direction, made on first use; NULL when not
 * tracing. Any thread. */
/* A span that moved `bytes` of buffer b: named "what 'label'" (or "what buffer N"), with the bytes
 * (its valid ones: docs/sizes.md) and its id in the args. */
void odx__trace_span_buf(odx__lane_trace *lt, const char *what, const char *cat, uint64_t t0,
			 uint64_t t1, uint64_t task_id, const odx_buffer *b, uint64_t bytes);
odx__lane_trace *odx__trace_peer_lane(odx_context *ctx, int peer, bool send);
int odx__trace_write(odx_context *ctx, const char *path);
void odx__trace_free(odx_context *ctx);
void odx__stats_print(odx_context *ctx);

/* ---- the memory wing (core/mem/: its internals are in mem/mem.h) -------------------------- */

typedef struct odx__tier odx__tier;

/* Prefetch requests (core/mem/prefetch.c). Levels are odx_prefetch_level. */
#define ODX__PREFETCH_LEVELS 4
typedef struct odx__prefetch_req odx__prefetch_req;
/* Starts what pending requests can start, drops what the plan no longer wants. Call with no core
 * lock held; cheap when nothing is pending. */
void odx__prefetch_pump(odx_context *ctx);
/* Drops b's pending requests (its release). */
void odx__prefetch_cancel(odx_buffer *b);
/* Frees what is left at close. */
void odx__prefetch_close(odx_context *ctx);
/* Capacities from tier.* (after the devices opened), the disk tier, the monitor thread. */
int odx__tier_open(odx_context *ctx, char *err, size_t errlen);
void odx__tier_stop(odx_context *ctx);  /* stops the monitor (before the workers stop) */
void odx__tier_close(odx_context *ctx); /* after every buffer was released */
void odx__tier_stats_print(odx_context *ctx, void (*emit)(odx_context *, const char *));
/* Waits until no copy or spill is in flight (close). */
void odx__transfers_drain(odx_context *ctx);

/* ---- distributed execution (dist.c) ------------------------------------------------------ */

/* Joins the job when launched as one of several ranks (odx-run, mpirun, srun). */
/* Ranks sharing this host take disjoint slices of its cores (odx__topo_share); before the
 * backends open, which size their threads from it. */
void odx__dist_share_host(odx_context *ctx);
int odx__dist_open(odx_context *ctx, char *err, size_t errlen);
void odx__dist_close(odx_context *ctx);
/* Assisted progress (fabric.progress): a worker with nothing to run drives the fabric while it
 * polls for work: begin (false: not in this mode, nothing else to call), poll as it spins, end
 * (`more_work` when it leaves to run tasks, false when it goes to sleep). */
bool odx__dist_assist_begin(odx_context *ctx);
void odx__dist_assist_poll(odx_context *ctx);
void odx__dist_assist_end(odx_context *ctx, bool more_work);
/* The worker found nothing to run after all and sleeps: the progress thread polls again now,
 * without blocking for a while if the worker waits for transfers (`waiting`). */
void odx__dist_assist_sleep(odx_context *ctx, bool waiting);
/* Before a kernel task is submitted: which rank runs it, and the transfers its inputs need
 * (submitted here as send/receive tasks on the ranks concerned). Returns the rank, or < 0. */
int odx__dist_kernel(odx_context *ctx, const odx_arg *args, int nargs, const odx_kernel *k,
		     const odx_task_opts *opts);
/* After it was submitted (or skipped on this rank): the buffers it writes live on `rank`. */
void odx__dist_written(odx_context *ctx, const odx_arg *args, int nargs, int rank);
/* Before a read of the whole job (every rank reads): the latest version to every rank. A
 * partial write needs it too; a full write makes every rank valid. */
int odx__dist_read(odx_buffer *b);
void odx__dist_write(odx_buffer *b, bool full);
/* Runs a send or receive task on a worker (worker.c): 0 when done is to be called. */
int odx__dist_run(odx__task *t);
/* A send task ends failed (canceled, or refused before the fabric took it): tells its receiver,
 * whose receive then fails with `origin` (the first failure) instead of waiting (task.c). */
void odx__dist_send_failed(odx__task *t, const char *origin);
/* The first failure behind a failed task: its origin, else "<task> failed: <message>" in buf. */
const char *odx__task_origin(const odx__task *t, char *buf, size_t n);
void odx__dist_stats_print(odx_context *ctx, void (*emit)(odx_context *, const char *));
/* The rank whose copy of b is the latest one (every rank computes the same), for a collective
 * query of its length; this rank on one process. */
int odx__dist_source(odx_buffer *b);
/* A transfer with `peer` began at t0 / ended at `now` (status 0: its bytes moved): the per-peer
 * statistics (ODX_STATS), for transfers that are not send or receive tasks (shuffle.c). */
void odx__dist_peer_begin(odx_context *ctx, int peer, uint64_t t0);
void odx__dist_peer_end(odx_context *ctx, int peer, bool send, int status, size_t bytes,
			uint64_t t0, uint64_t now);
/* odx_shuffle's replicated bookkeeping, before its task is submitted: brings every src[s]'s
 * latest version to rank s (send and receive tasks on the ranks concerned) and gives the
 * shuffle its two transfer keys (the sizes', the parts'; the same on every rank). After it:
 * odx__dist_shuffled records that dst[d] and counts[d] (counts may be NULL) live on rank d. */
int odx__dist_shuffle(odx_context *ctx, odx_buffer *const *src, odx_buffer *const *dst,
		      int priority, const char *tag, uint64_t keys[2]);
void odx__dist_shuffled(odx_context *ctx, odx_buffer *const *dst, odx_buffer *const *counts);

/* ---- shuffle (shuffle.c) ------------------------------------------------------------------ */

/* Runs this rank's side of a shuffle on a worker (worker.c); it finishes the task itself,
 * later, from the fabric's callbacks (or at once on one rank). Called again for a queued copy
 * of the own part (the task is queued as staged once more). */
void odx__shuffle_run(odx__task *t);
/* The task failed before it ran (its input failed, or staging did): tells every other rank
 * that no part will come from here and takes what they send, so none of them waits (task.c). */
void odx__shuffle_abandon(odx__task *t, const char *origin);
void odx__shuffle_free(struct odx__shuffle *sh);

/* ---- topology (topo.c) -------------------------------------------------------------------- */

typedef struct odx__topo odx__topo;
int odx__topo_open(odx__topo **out);
void odx__topo_close(odx__topo *t);
unsigned odx__topo_pus(const odx__topo *t);
uint64_t odx__topo_memory(const odx__topo *t);
int odx__topo_bind_self(odx__topo *t, unsigned slot);
/* This process's share of the host's PUs when local_size ranks run on it (odx__topo_share): 0
 * narrowed to slice local_rank (pus, bind_self and numa_of_pu_slot then count within it), or
 * unchanged: 0 for one rank, LAUNCHER_BOUND when the process mask is narrower than the machine's
 * and split_narrowed is false, TOO_FEW_PUS when ranks outnumber the PUs (threads then share). */
enum { ODX__TOPO_LAUNCHER_BOUND = 1, ODX__TOPO_TOO_FEW_PUS = 2 };
int odx__topo_share(odx__topo *t, int local_rank, int local_size, bool split_narrowed);
/* The PUs this process uses, as a list ("0-3,8"). */
int odx__topo_cpuset_str(const odx__topo *t, char *buf, size_t n);
/* NUMA nodes (hwloc's, with memory): at least one, in logical order. A machine hwloc sees as
 * one node, or that it cannot read, gives one node holding all of the memory. */
int odx__topo_numa_count(const odx__topo *t);
uint64_t odx__topo_numa_memory(const odx__topo *t, int i);
int odx__topo_numa_os_index(const odx__topo *t, int i);
/* Which node is local to...: -1 where it cannot be told (no PCI id, a synthetic topology). */
int odx__topo_numa_of_pu_slot(const odx__topo *t, unsigned slot); /* odx__topo_bind_self's */
int odx__topo_numa_of_pci(odx__topo *t, const char *busid);        /* "0000:65:00.0" */
int odx__topo_numa_of_self(odx__topo *t);                          /* the calling thread */
int odx__topo_numa_of_area(odx__topo *t, const void *p, size_t len);
/* Host memory on NUMA node `numa` (bound there when the machine has several and the block is
 * large); freed with odx__topo_free and the same size. *zeroed: the block is known to read as
 * zeros (fresh pages from the kernel), so a caller that needs zeros need not write them. */
void *odx__topo_alloc_on(odx__topo *t, int numa, size_t size, bool *zeroed);
void odx__topo_free(odx__topo *t, void *p, size_t size);

/* ---- the context (context.c) -------------------------------------------------------------- */

/* Device d's memory in bytes as users and policies see it: its own memory node's, or, for a host
 * device that shares its NUMA node's host memory node, that node's capacity. */
uint64_t odx__device_memory(const odx_context *ctx, int d);

struct odx_context {
	odx__config *config;
	odx_log_level log_level;
	odx_log_fn log_fn;
	void *log_user;
	odx__topo *topo;
	bool bind;

	odx_backend_host benv;
	odx__backend_slot *backends;
	int nbackends;
	odx__device *devices;
	int ndevices;
	odx__memnode *memnodes;
	int nmemnodes;
	int nhost;                     /* host memory nodes (NUMA nodes): memnodes 0 .. nhost-1 */
	bool drivable;                 /* a device offers `progress` and sched.caller_progress */
	const odx__sched_ops *sched;   /* the C policy; the fallback of a Lua one */
	struct odx__policy *policy;    /* the Lua policy host, NULL with a C policy (policy.c) */
	_Atomic unsigned rr_next;

	/* eager queue shared by every worker */
	bool use_shared;              /* the policy may leave tasks unplaced */
	pthread_mutex_t shared_lock;
	odx__queue shared;

	/* task pool: slabs freed at close, free list reused in between. What a submission writes
	 * (the pool's lock and free list, the task ids, the submission count) shares one cache
	 * line that no worker writes per task: each worker's write to a line the submitting thread
	 * then writes makes it wait for the line to come back (on 2 cores, up to a tenth of an
	 * empty task's cost). The context is allocated aligned (context.c). */
	_Alignas(64) pthread_mutex_t pool_lock;
	odx__task *pool_free;         /* under pool_lock */
	_Atomic uint64_t next_task_id;
	_Atomic uint64_t submitted;   /* in flight = submitted - completed (below) */
	/* written by every finishing worker: a line of its own */
	_Alignas(64) _Atomic(odx__task *) pool_returned; /* lock-free stack of finished tasks */
	void **slabs;
	int nslabs, capslabs;
	/* tasks that carried an event, freed and waiting before reuse (under pool_lock) */
	odx__task *evq_head, *evq_tail;
	int evq_n;

	/* in-flight accounting and waiting: read by every completion (the waiter counts), written
	 * rarely; its own lines */
	_Alignas(64) pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond;
	/* In flight = submitted - completed. Completions are counted per device so workers do not
	 * fight over one cache line; submission checks the sum only when its estimate is full. */
	_Atomic uint64_t completed_other; /* tasks completed before placement (canceled) */
	uint64_t completed_seen;          /* a lower bound of completions, read by submitters */
	long max_inflight;
	uint64_t idle_spin_ns;        /* polling before a worker sleeps */
	bool idle_yield;              /* a polling worker yields its core now and then: its workers
				       * and one submitting thread outnumber the CPUs it may run on
				       * (odx__workers_start) */
	_Atomic int shared_count;     /* tasks in the shared queue, for polling without its lock */
	_Atomic int waiters;          /* threads in odx_event_wait / odx_wait_all / back-pressure */
	/* Among them, those a task's completion wakes only when their condition holds: a thread
	 * waiting for one task (its `waited` flag), for nothing in flight (waiters_all), for room
	 * under max_inflight (waiters_room). A completion wakes everyone only while some other
	 * waiter is in (reads, writes: their conditions are not the completion's business). */
	_Atomic int waiters_targeted, waiters_all, waiters_room;
	_Atomic uint64_t wakeups;     /* waits woken (a thread back from its condition variable) */
	_Atomic int first_error;      /* first failure since the last odx_wait_all */
	char first_error_msg[ODX__MSG_MAX];

	/* dependency analysis runs one submission at a time: a total program order */
	pthread_mutex_t submit_lock;

	/* live buffers and kernels, released at close */
	pthread_mutex_t objects_lock;
	odx_buffer *buffers;
	odx_kernel *kernels;
	_Atomic int nsleeping;        /* workers asleep, for the eager queue's wake-up */
	_Atomic uint64_t thief_wakes; /* sleeping workers woken to take tasks queued on a busy
				       * peer (odx__sched_wake_thief; tests count them) */
	_Atomic uint64_t length_resets; /* tasks whose length fields were cleared on their return
					 * to the pool (lengths_used; tests count them) */
	_Atomic uint64_t coll_seq;    /* collectives so far (odx_allgather): their transfer key */
	bool steal;                   /* sched.steal: idle workers take from devices sharing memory */
	_Atomic uint64_t next_buffer_id;
	/* buffer structs (buffer.c, under objects_lock): slabs kept until close, carved in order,
	 * and a FIFO quarantine of released ones, reused once it holds ODX__BUF_QUARANTINE */
	void **buf_slabs;
	int nbuf_slabs, capbuf_slabs;
	char *buf_carve;              /* the next unused struct of the newest slab */
	int buf_carve_left;
	odx_buffer *bufq_head, *bufq_tail;
	int bufq_n;

	/* last error */
	pthread_mutex_t error_lock;
	char last_error[ODX__MSG_MAX];

	/* observability */
	bool stats;
	bool tracing;
	char *trace_path;
	odx__trace *trace;
	_Atomic uint64_t *bytes_copied; /* nmemnodes x nmemnodes, [src][dst] */
	_Atomic uint64_t copies;
	uint64_t t_open;
	bool closing;

	/* the memory wing (core/mem/) */
	odx__tier *tier;
	_Atomic uint64_t lru_clock;   /* ticks once per staged task: the replicas' LRU order */
	_Atomic uint64_t progress;    /* tasks completed + transfers finished (watchdog) */
	_Atomic int transfers;        /* copies and spills in flight, until their callback's
				       * last access: close waits for none */
	bool prefetch;                /* tier.prefetch */
	/* prefetch requests (mem/prefetch.c): one list per level, in arrival order */
	pthread_mutex_t pf_lock;
	struct odx__prefetch_req *pf_head[4];
	_Atomic int pf_pending;
	_Atomic bool pf_again;
	_Atomic uint64_t pf_requests, pf_started, pf_cancelled;
	bool direct_access;           /* tier.direct_access */

	/* distributed execution (dist.c) */
	struct odx_fab *fab;          /* NULL on a single rank */
	/* fabric.progress: idle workers drive the fabric (odx__dist_assist_*); turned off before
	 * the fabric closes, once `fab_assisting` (workers inside begin .. end) is 0 */
	_Atomic bool fab_assist;
	_Atomic int fab_assisting;
	uint64_t assist_spin_ns;      /* fabric.assist_spin_us */
	int local_size;               /* ranks on this host (odx__dist_share_host), 1 if unknown */
	unsigned share_pus;           /* more ranks here than PUs: this rank's share (1), else 0 */
	int rank, size;
	_Atomic uint64_t sent_bytes, recv_bytes, xfers;
	struct odx__peer_stats *peers; /* ODX_STATS: per rank, under peers_lock; NULL without */
	/* odx_shuffle (ODX_STATS): shuffles run here, the bytes of parts sent to and received
	 * from other ranks, and of the own part copied locally */
	_Atomic uint64_t shuffles, shuffle_sent, shuffle_recvd, shuffle_copied;
	pthread_mutex_t peers_lock;
	unsigned monitor_start, monitor_stop; /* watermarks, percent */
};

static inline bool odx__is_host_node(const odx_context *ctx, int m)
{
	return m >= 0 && m < ctx->nhost;
}
static inline int odx__home(const odx_buffer *b)
{
	int h = atomic_load_explicit(&b->home, memory_order_acquire);

	return h < 0 ? 0 : h;
}

#endif /* ODX_CORE_CORE_H */
