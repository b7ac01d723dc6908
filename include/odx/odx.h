/* SPDX-License-Identifier: Apache-2.0 */
/*
 * odx.h - the public API of ODX (Open Distributed eXecution).
 *
 * This is the only header an application needs. Link with `pkg-config --cflags --libs odx`.
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *
 *  - Errors: functions return int, 0 on success or a negative ODX_E* code on failure. No function
 *    both returns an error and aborts. odx_strerror() and odx_err_name() describe a code;
 *    odx_last_error() gives the detailed message of the last failure on a context (which argument,
 *    which task, which file and line, which native code).
 *  - Out parameters are written only on success ("out is not touched on failure").
 *  - Ownership: every object made by odx_*_create/odx_open has exactly one matching
 *    destroy/release/close. Strings passed in are copied; strings handed out stay owned by ODX and
 *    live as long as the object they came from, unless stated otherwise.
 *  - Thread-safety: every function taking an odx_context may be called from any thread at the same
 *    time, except odx_close(), which must be the last call on that context. Program order (which
 *    decides task dependencies) is the order in which submissions reach the context; submissions
 *    from two threads at once are ordered as the runtime receives them.
 *  - No hidden globals: two contexts in one process are fully independent.
 *  - Stale handles: a buffer after odx_buffer_destroy, a kernel after odx_kernel_destroy and an
 *    event after odx_event_release are refused by every function that takes them (ODX_EINVAL,
 *    odx_last_error() says which handle), never followed into freed memory, for as long as the
 *    context is open. Their memory is kept until odx_close: kernels whole; buffers and events
 *    in a per-context quarantine of 4096 before reuse, so the refusal is certain until 4096 more
 *    buffers (events) of that context were released after it; later the handle may name a new
 *    live object of the same context. After odx_close no handle of it may be used at all.
 *    A buffer of another open context is refused by odx_submit (ODX_EINVAL).
 */
#ifndef ODX_ODX_H
#define ODX_ODX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ODX_BUILDING_LIBRARY) && defined(__GNUC__)
#define ODX_API __attribute__((visibility("default")))
#else
#define ODX_API
#endif

#define ODX_VERSION_MAJOR 0
#define ODX_VERSION_MINOR 1
#define ODX_VERSION_PATCH 0
/** The version as one number, major * 10000 + minor * 100 + patch (0.1.0 is 100), for checks at
 * compile time: `#if ODX_VERSION_NUMBER >= 200`. */
#define ODX_VERSION_NUMBER (ODX_VERSION_MAJOR * 10000 + ODX_VERSION_MINOR * 100 + ODX_VERSION_PATCH)

/** The library's version as "major.minor.patch" (static storage). */
ODX_API const char *odx_version(void);
/** The library's version as ODX_VERSION_NUMBER gives it: a program compares it with the
 * ODX_VERSION_NUMBER it was compiled with to find, at run time, an older library than its
 * headers. */
ODX_API unsigned odx_version_number(void);

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/*
 * One table, libuv style: the first block mirrors negated POSIX errno values (Linux numbering,
 * fixed here so they do not depend on the platform's <errno.h>), the second is ODX's own range.
 * XX(name, value, message).
 */
#define ODX_ERRNO_MAP(XX)                                                                          \
	XX(EPERM, -1, "operation not permitted")                                                   \
	XX(ENOENT, -2, "no such file, object or key")                                              \
	XX(EIO, -5, "input/output error")                                                          \
	XX(EAGAIN, -11, "resource temporarily unavailable (try again)")                            \
	XX(ENOMEM, -12, "out of memory")                                                           \
	XX(EACCES, -13, "permission denied")                                                       \
	XX(EBUSY, -16, "resource busy")                                                            \
	XX(EEXIST, -17, "already exists")                                                          \
	XX(ENODEV, -19, "no such device")                                                          \
	XX(ENOSPC, -28, "no space left in a memory tier or on disk")                               \
	XX(EINVAL, -22, "invalid argument")                                                        \
	XX(ERANGE, -34, "out of range")                                                            \
	XX(ENOSYS, -38, "operation not implemented")                                               \
	XX(ETIMEDOUT, -110, "timed out")                                                           \
	XX(ECANCELED, -125, "canceled")                                                            \
	XX(ECONFIG, -4001, "invalid configuration")                                                \
	XX(ENOVARIANT, -4002, "kernel has no variant for any open device")                         \
	XX(EKERNEL, -4003, "kernel reported failure")                                              \
	XX(EBACKEND, -4004, "backend or driver error")                                             \
	XX(EUNAVAIL, -4005, "backend unavailable")                                                 \
	XX(ECLOSED, -4006, "context is closing")                                                   \
	XX(EDEVLOST, -4007, "device lost")                                                         \
	XX(EPEER, -4008, "peer rank failed or unreachable")                                        \
	XX(ECORRUPT, -4009, "data failed its integrity check")

typedef enum odx_errno {
#define ODX__ERR_ENUM(name, value, msg) ODX_##name = (value),
	ODX_ERRNO_MAP(ODX__ERR_ENUM)
#undef ODX__ERR_ENUM
} odx_errno;

/** A short message for an error code ("invalid argument"); static storage, never NULL. */
ODX_API const char *odx_strerror(int err);
/** The code's name ("ODX_EINVAL"); static storage, never NULL ("ODX_E?" for unknown codes). */
ODX_API const char *odx_err_name(int err);

/* ------------------------------------------------------------------------------------------ */
/* Configuration and context                                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct odx_config odx_config;
typedef struct odx_context odx_context;

/** Log levels, most severe first. */
typedef enum odx_log_level {
	ODX_LOG_NONE = 0,
	ODX_LOG_ERROR = 1,
	ODX_LOG_WARN = 2,
	ODX_LOG_INFO = 3,
	ODX_LOG_DEBUG = 4,
} odx_log_level;

/**
 * A log sink. Called from any ODX thread, possibly concurrently; must not call back into ODX.
 * `msg` has no trailing newline and is valid only during the call.
 */
typedef void (*odx_log_fn)(void *user, odx_log_level level, const char *msg);

/**
 * Programmatic configuration: a set of overrides applied on top of the environment (ODX_*),
 * the config file and the built-in defaults (precedence: API > environment > file > defaults).
 * Keys are spelt as in the file: global keys bare ("backends", "trace"), section keys with their
 * section ("host.devices", "sched.max_inflight"). `odx info --config` lists them all.
 */
ODX_API int odx_config_create(odx_config **out);
/** Frees `cfg`; NULL is allowed. A context opened from it keeps its own copy. */
ODX_API void odx_config_destroy(odx_config *cfg);
/**
 * Sets `key` to `value` (both copied). Unknown keys and values that do not parse are refused here
 * with ODX_ECONFIG; odx_config_error() then says why.
 */
ODX_API int odx_config_set(odx_config *cfg, const char *key, const char *value);
/** Uses `path` as the config file instead of $ODX_CONFIG or ./odx.conf (copied). */
ODX_API int odx_config_set_file(odx_config *cfg, const char *path);
/** Sends the context's log to `fn` instead of stderr; the level still comes from `log`. */
ODX_API int odx_config_set_log(odx_config *cfg, odx_log_fn fn, void *user);
/** The message of the last refused odx_config_set* call on `cfg` ("" if none). Owned by cfg. */
ODX_API const char *odx_config_error(const odx_config *cfg);

/**
 * Opens a context: reads the configuration, opens the backends and their devices, starts one
 * worker per device. `cfg` may be NULL (environment, file and defaults only) and may be destroyed
 * right after this call. On failure *out is not touched; the reason is available from
 * odx_last_error(NULL) on the same thread (and from odx_config_error(cfg) if `cfg` is not NULL),
 * and it is also logged at the error level.
 */
ODX_API int odx_open(odx_context **out, const odx_config *cfg);

/**
 * Closes a context: destroys the buffers still alive (registered memory receives its buffer's
 * latest contents), waits for every submitted task, runs deferred buffer destructions, writes the
 * trace and the stats summary if asked for, stops the workers and frees everything. Handles
 * obtained from the context (buffers, kernels, events) must not be used afterwards, except that
 * events still held by the caller must not be released after close either: close frees them.
 * Returns the first error met while draining (e.g. a trace file that could not be written); the
 * context is freed in every case. NULL is allowed and returns 0.
 */
ODX_API int odx_close(odx_context *ctx);

/**
 * The detailed message of the last error on `ctx` (what, where, native code), or "" if none.
 * The pointer refers to a per-thread copy, valid until the next odx_last_error call on this thread.
 * With `ctx` NULL: why this thread's last odx_open failed ("" if it succeeded), valid until the
 * next odx_open on this thread.
 */
ODX_API const char *odx_last_error(odx_context *ctx);

/** Visits every configuration key's effective value and where it came from. */
typedef void (*odx_config_visit_fn)(void *user, const char *key, const char *value,
				    const char *origin, const char *help);
ODX_API int odx_config_describe(odx_context *ctx, odx_config_visit_fn fn, void *user);

/* ------------------------------------------------------------------------------------------ */
/* Backends, devices and memory nodes                                                          */
/* ------------------------------------------------------------------------------------------ */

/**
 * Backend kinds are names: "host", "cuda", "hip", "vulkan", "opencl", or the name of any other
 * backend (a module's own name, lower-case letters, digits, `_` and `-`). A kernel variant names
 * the kind that runs it (odx_kernel_variant.backend_name) and a device says which kind drives it
 * (odx_device_info.kind_name), so a new vendor's backend needs no change to this header.
 *
 * This enum is the legacy spelling of the five kinds ODX ships with, kept so that code written
 * against it compiles and behaves as before (docs/api.md, "Migration"). ODX_BACKEND_OTHER stands
 * for a kind it has no constant for; the name fields say which.
 */
typedef enum odx_backend_kind {
	ODX_BACKEND_OTHER = -1,
	ODX_BACKEND_HOST = 0,
	ODX_BACKEND_CUDA = 1,
	ODX_BACKEND_HIP = 2,
	ODX_BACKEND_VULKAN = 3,
	ODX_BACKEND_OPENCL = 4,
	ODX_BACKEND_KIND_COUNT
} odx_backend_kind;

/** "host", "cuda", ... (static storage), or "?" for ODX_BACKEND_OTHER and unknown values. */
ODX_API const char *odx_backend_kind_name(odx_backend_kind kind);

typedef struct odx_backend_info {
	const char *name;      /* "host", "vulkan", ... */
	int available;         /* 1: opened and its devices are in use; 0: not */
	const char *reason;    /* why not available ("" when available) */
	int device_count;      /* devices this backend contributed to the context */
	const char *origin;    /* "built in", the module's path, or "" if not found */
	const char *description; /* one line from the backend ("" if not found) */
} odx_backend_info;

/** Number of backends the context knows (built in or found), available or not. */
ODX_API int odx_backend_count(odx_context *ctx);
/** Describes backend `index` (0 <= index < odx_backend_count). Strings live as long as ctx. */
ODX_API int odx_backend_get_info(odx_context *ctx, int index, odx_backend_info *out);

typedef struct odx_device_info {
	int index;               /* 0 .. odx_device_count()-1 */
	odx_backend_kind kind;   /* legacy: which backend kind drives it (ODX_BACKEND_OTHER for
				  * a kind without a constant); kind_name says it for every kind */
	const char *name;        /* e.g. "host device 1 (2 threads)"; lives as long as ctx */
	uint64_t memory_bytes;   /* capacity of its memory node */
	int memnode;             /* index of its memory node (see odx_memnode_get_info) */
	int compute_lanes;       /* compute lanes (queues); tasks run one lane at a time each */
	int copy_lanes;          /* copy lanes */
	int threads;             /* host threads serving the compute lane (host backend), else 0 */
	const char *kind_name;   /* the backend kind driving it, by name ("host", "vulkan", ...):
				  * the variants with this backend_name run on it; lives as long
				  * as ctx */
} odx_device_info;

ODX_API int odx_device_count(odx_context *ctx);
ODX_API int odx_device_get_info(odx_context *ctx, int device, odx_device_info *out);

typedef enum odx_memnode_kind {
	ODX_MEMNODE_HOST = 0,   /* pageable host RAM: the buffers' host copies */
	ODX_MEMNODE_DEVICE = 1, /* a device's own memory */
} odx_memnode_kind;

typedef struct odx_memnode_info {
	int index;
	odx_memnode_kind kind;
	int device;               /* owning device, or -1 for host memory */
	uint64_t capacity_bytes;
	uint64_t used_bytes;      /* bytes of replicas currently allocated there */
} odx_memnode_info;

/**
 * Host RAM comes first, one memory node per NUMA node (hwloc's, with memory): nodes 0 .. H-1,
 * H = 1 on a machine with one NUMA node. Device memory nodes follow. A buffer's host copy lives
 * on one of the host nodes, chosen when it is first needed (docs/memory.md).
 */
ODX_API int odx_memnode_count(odx_context *ctx);
ODX_API int odx_memnode_get_info(odx_context *ctx, int memnode, odx_memnode_info *out);
/** The host memory node nearest to `memnode`: itself for host RAM; for a device's memory, the
 * NUMA node of its PCI slot (host devices: of the cores they run on; 0 where unknown). The host
 * copies of buffers evicted from that device go there when it has room. Negative on error. */
ODX_API int odx_memnode_near(odx_context *ctx, int memnode);
/** The operating system's NUMA node number of odx_memnode_near(memnode). Negative on error. */
ODX_API int odx_memnode_numa(odx_context *ctx, int memnode);

/* ------------------------------------------------------------------------------------------ */
/* Buffers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * A logical array of bytes. ODX owns where its copies (replicas) live; users reach the bytes only
 * through odx_buffer_read/odx_buffer_write or tasks. A new buffer reads as zeros.
 */
typedef struct odx_buffer odx_buffer;

/** Creates a runtime-owned buffer of `size` bytes (size > 0). `flags` must be 0. */
ODX_API int odx_buffer_create(odx_context *ctx, size_t size, unsigned flags, odx_buffer **out);

/**
 * Wraps user memory `ptr[0..size)` as a buffer: it becomes the buffer's host replica and holds its
 * current contents. Until the buffer is destroyed and that destruction has run (after
 * odx_buffer_destroy, when odx_wait_all returns or odx_close returns), the memory belongs to ODX:
 * the caller must not read or write it directly. When the destruction runs, the buffer's latest
 * contents are written back into `ptr`. `flags` must be 0.
 */
ODX_API int odx_buffer_register(odx_context *ctx, void *ptr, size_t size, unsigned flags,
				odx_buffer **out);

/**
 * Copies `len` bytes from `src` into the buffer at `offset`, in program order: waits (up to
 * `timeout_ms`, -1 = forever) for every earlier task that reads or writes the buffer, then
 * writes. Tasks submitted afterwards see the new bytes. A range outside the buffer is refused
 * (ODX_ERANGE) without writing anything. The bytes go into the buffer's host copy, or straight
 * into a device's copy when the buffer has one there (or, written whole for the first time, on a
 * context with one device: docs/memory.md, tier.direct_access); `src` is not used after return.
 * With timeout_ms = -1, a write that waits only for kernels already queued on one device may be
 * queued behind them there, so the caller sleeps once (docs/memory.md, "Queued behind kernels").
 */
ODX_API int odx_buffer_write(odx_buffer *buf, size_t offset, const void *src, size_t len,
			     int timeout_ms);

/**
 * Copies `len` bytes at `offset` into `dst`, in program order: waits (up to `timeout_ms`) for the
 * last earlier task that writes the buffer, and copies from the buffer's host copy if it is
 * valid, else straight from a device's valid copy (or brings one to host memory first when only
 * the disk tier holds it). If that writer failed or was canceled, returns ODX_ECANCELED with the
 * cause in odx_last_error() and `dst` is not touched. With timeout_ms = -1, a read of up to
 * 256 KiB whose writer is a kernel already queued on a device may be queued behind it there.
 */
ODX_API int odx_buffer_read(odx_buffer *buf, size_t offset, void *dst, size_t len, int timeout_ms);

/** The buffer's size in bytes (0 for NULL): its capacity, fixed at creation, the same on every
 * rank. How many of those bytes are valid is its length (odx_buffer_length). */
ODX_API size_t odx_buffer_size(const odx_buffer *buf);

/*
 * Capacity and length (docs/sizes.md). Every buffer has a length: how many of its bytes, from
 * byte 0, are valid (<= its capacity, odx_buffer_size). A new buffer's length is its capacity, so
 * a program that never sets lengths sees no change. A task sets the length of a buffer it writes
 * (odx_host_launch.set_length in a host variant, or a length rule, odx_length_rule, on any
 * backend); later tasks see it (odx_host_launch.buffer_lengths, ODX_LEN) and only the valid bytes
 * move between memory nodes, to and from disk and between ranks, where the length travels with
 * the bytes. A length stays until set again (a writer that sets none leaves it). odx_buffer_write
 * makes what it wrote valid: the length (with parts: of every part it touches) reaches at least
 * the end of the written range. Bytes past a length are not kept (copies do not move them): what
 * they hold is unspecified until written. Lengths are data, not control: nothing in the
 * replicated task flow depends on them except the blocking queries below.
 */

/**
 * Waits (up to `timeout_ms`, -1 forever) for the tasks submitted so far that write `buf`, then
 * writes its length in bytes to *len: for a buffer with parts (odx_buffer_set_parts), the sum of
 * its part lengths. On several ranks it is collective, like odx_buffer_read: every rank calls it
 * in the same place of its program and gets the same value. ODX_ECANCELED when that writer failed
 * (the cause in odx_last_error), ODX_ETIMEDOUT, ODX_EINVAL (stale handle, NULL len), ODX_EBUSY
 * (partitioned with odx_buffer_partition). *len is untouched on failure.
 */
ODX_API int odx_buffer_length(odx_buffer *buf, size_t *len, int timeout_ms);

/* ------------------------------------------------------------------------------------------ */

/** How soon a prefetched copy is wanted (odx_buffer_prefetch). */
typedef enum odx_prefetch_level {
	ODX_PREFETCH_NOW = 0,  /* needed now: starts at once, evicting idle copies if it must */
	ODX_PREFETCH_NEXT = 1, /* for the next task: starts when the tier has room below its
				* start watermark, never evicts */
	ODX_PREFETCH_SOON = 2, /* as NEXT, and only while no task on the device waits for data */
	ODX_PREFETCH_IDLE = 3, /* as SOON, and only when no task is queued or running there */
} odx_prefetch_level;

/**
 * Hint: bring a copy of `buf` to `device`'s memory before the tasks that will need it there.
 * The copy holds the contents as of this call: if a task that writes `buf` was submitted and has
 * not finished, the copy starts after it. The request waits for its level's condition (see
 * odx_prefetch_level); a copy that arrives is the most recently used one there. Cancelled with
 * nothing moved if, before its copy starts, `buf` is written by a later task or call, the writer
 * it waits for fails, `buf` is destroyed, or the device is lost. Returns at once: 0, or
 * ODX_EINVAL (no such device or level), ODX_ECLOSED, ODX_ENOMEM. ODX_STATS counts requests,
 * started copies and cancellations.
 */
ODX_API int odx_buffer_prefetch(odx_buffer *buf, int device, odx_prefetch_level level);

/** Longest label kept by odx_buffer_set_label (bytes; longer ones are cut). */
#define ODX_LABEL_MAX 47

/**
 * Names the buffer in traces (ODX_TRACE: copies, write-backs, spills, reloads, sends and receives
 * show "'label'" instead of "buffer N", with the bytes they moved: its valid ones, docs/sizes.md)
 * and in the messages that name it. The text is copied (up to ODX_LABEL_MAX bytes); it may be
 * changed at any time. ODX_EINVAL for a NULL label or a stale handle.
 */
ODX_API int odx_buffer_set_label(odx_buffer *buf, const char *label);

/**
 * Hint: the program will not use `buf` again soon. Its copies become the first candidates when a
 * memory tier needs room (clean ones are dropped, dirty ones written one tier down), until a task
 * submitted after this call uses it (the tasks already submitted are the uses it is finishing).
 * Nothing is lost and nothing moves at the call itself. Returns 0 or ODX_EINVAL.
 */
ODX_API int odx_buffer_wont_use(odx_buffer *buf);

/**
 * Destroys the buffer handle now; the memory is released once every task submitted before this
 * call that uses the buffer has finished. Never blocks. The handle must not be used afterwards:
 * from this call on, every function given it (a second destroy included) returns ODX_EINVAL,
 * odx_buffer_size returns 0 (see "Stale handles" at the top).
 */
ODX_API int odx_buffer_destroy(odx_buffer *buf);

/* ------------------------------------------------------------------------------------------ */
/* Partitions                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** How odx_buffer_partition cuts a buffer (odx_partition.kind). */
typedef enum odx_partition_kind {
	ODX_PART_BLOCKS = 1, /* contiguous 1D ranges, in order */
	ODX_PART_TILES = 2,  /* 2D tiles of a matrix with a leading dimension */
} odx_partition_kind;

/**
 * The description of a partition (docs/partitions.md). Zero-initialise, then fill what the kind
 * uses.
 */
typedef struct odx_partition {
	odx_partition_kind kind;
	/* Bytes per element: tiles count rows, columns and ld in elements of this size; blocks
	 * (sizes NULL) cut on multiples of it (0 is read as 1). */
	size_t elem_size;
	/* ODX_PART_BLOCKS: nparts ranges in order. sizes NULL splits the buffer into nparts
	 * parts of ceil(elements / nparts) elements (the last one shorter, none empty); else part
	 * i is sizes[i] bytes (each > 0, their sum <= the buffer's size). Read during the call. */
	const size_t *sizes;
	/* ODX_PART_TILES: a rows x cols matrix starting at byte 0, column-major with leading
	 * dimension ld elements (ld >= rows), or row-major (ld >= cols), cut into tiles of
	 * tile_rows x tile_cols (the last row and column of tiles smaller). Part (i, j), tile row
	 * i and tile column j, is parts[i + j * mt], mt = ceil(rows / tile_rows); nparts must be
	 * mt * nt. A tile of a column-major matrix is tile_cols runs (columns) of tile_rows
	 * elements, ld elements apart; of a row-major one, tile_rows runs of tile_cols. */
	size_t rows, cols, ld, tile_rows, tile_cols;
	bool row_major;
} odx_partition;

/**
 * Splits `buf` into `nparts` sub-buffers without copying its bytes (docs/partitions.md). Waits up
 * to `timeout_ms` (-1 forever) for every task submitted so far that uses `buf`, brings its latest
 * contents into its host memory (the user's memory for a registered buffer) and frees its other
 * copies. While partitioned, that host memory backs the parts and is never evicted or spilled,
 * and `buf` itself refuses tasks, reads, writes, prefetches, odx_buffer_set_owner and a second
 * partition (ODX_EBUSY). Each part is a buffer of its packed size (a tile's rows x columns x
 * elem_size bytes), with its own dependencies and copies; kernels get a tile's layout through
 * odx_host_launch.buffer_shapes and ODX_LD. `parts` receives nparts handles, which die at
 * odx_buffer_unpartition (or with `buf`); odx_buffer_destroy refuses them. On several ranks the
 * call is collective, like every call of the replicated task flow: every rank first gets `buf`'s
 * latest bytes, and each part starts with the parent's owner. Returns 0, ODX_EINVAL
 * (a description that does not fit the buffer, or a part count other than what it makes: the
 * message says which), ODX_EBUSY (already partitioned), ODX_ENOSYS (`buf` is itself a part),
 * ODX_ETIMEDOUT (nothing changed) or ODX_ENOMEM. `parts` is untouched on failure.
 */
ODX_API int odx_buffer_partition(odx_buffer *buf, const odx_partition *p, int nparts,
				 odx_buffer **parts, int timeout_ms);

/**
 * Gathers a partition: waits up to `timeout_ms` for every task using a part, writes every part
 * whose latest copy is elsewhere (a device) back into `buf`'s host memory, and ends the partition:
 * `buf` holds every part's latest contents and is usable again; the part handles are dead
 * (refused like destroyed buffers). On several ranks every rank receives each part's latest
 * bytes (collective, like odx_buffer_read). ODX_ETIMEDOUT leaves the partition in place (some
 * parts may have been written back; call again). ODX_EINVAL when `buf` is not partitioned.
 */
ODX_API int odx_buffer_unpartition(odx_buffer *buf, int timeout_ms);

/** odx_length_rule.part and odx_host_launch.set_length: the whole buffer's length. */
#define ODX_WHOLE_BUFFER (-1)
/** odx_length_rule.part: every part i of the buffer, from element index + i. */
#define ODX_ALL_PARTS (-2)

/**
 * Gives `buf` a layout of `nparts` parts with run-time lengths (docs/sizes.md): `p` is an
 * ODX_PART_BLOCKS description, as for odx_buffer_partition (equal blocks of elem_size multiples,
 * or explicit `sizes`), and part i occupies [off_i, off_i + cap_i) of buf. Unlike
 * odx_buffer_partition, buf stays one buffer (one unit of dependencies, used by tasks whole);
 * each part only has a length <= cap_i, initially cap_i, which a task writing buf sets
 * (odx_host_launch.set_length with a part index, or a length rule with `part`). The buffer's
 * length is then the sum of its part lengths, and copies, spills and transfers move each part's
 * valid prefix only. Called in program order on every rank (it is part of the replicated flow);
 * it waits for this rank's tasks submitted so far that use buf (returning at once when none does),
 * so no task, copy or transfer sees the layout change under it. Calling it again replaces the
 * layout (every part's length back to its capacity); nparts = 0 with p NULL removes it (the
 * length becomes the capacity). Returns 0, ODX_EINVAL (a description that does not fit, or a part
 * count other than what it makes: the message says which), ODX_EBUSY (buf is partitioned with
 * odx_buffer_partition), ODX_ENOSYS (buf is itself a part of a partition) or ODX_ENOMEM.
 */
ODX_API int odx_buffer_set_parts(odx_buffer *buf, const odx_partition *p, int nparts);

/**
 * Like odx_buffer_length for each of the `nparts` parts of a buffer with parts: lens[i] receives
 * part i's length in bytes. nparts must be the layout's part count (ODX_EINVAL otherwise, or for
 * a buffer without parts). Collective on several ranks; lens untouched on failure.
 */
ODX_API int odx_buffer_part_lengths(odx_buffer *buf, size_t *lens, int nparts, int timeout_ms);

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Access modes of a task to a buffer. Dependencies follow from them (RAW, WAR, WAW). */
typedef enum odx_access {
	ODX_R = 1,
	ODX_W = 2,
	ODX_RW = 3,
} odx_access;

typedef enum odx_arg_kind {
	ODX_ARG_BUFFER = 1,
	ODX_ARG_I32 = 2,
	ODX_ARG_I64 = 3,
	ODX_ARG_F32 = 4,
	ODX_ARG_F64 = 5,
	/* A task argument only (ODX_LD), never a kernel parameter: the leading dimension of a
	 * tile, resolved into the I32 or I64 parameter it stands for before launch. */
	ODX_ARG_LD = 6,
	/* A task argument only (ODX_LEN), never a kernel parameter: a buffer argument's length
	 * in elements, resolved into the I32 or I64 parameter it stands for at launch. */
	ODX_ARG_LEN = 7,
} odx_arg_kind;

/** One parameter of a kernel's declared signature. */
typedef struct odx_param {
	odx_arg_kind kind;
	odx_access access; /* buffers only: what the kernel does with it; 0 for scalars */
	const char *name;  /* for messages; may be NULL */
} odx_param;

/**
 * The layout of a buffer's bytes as a kernel sees them: `count` runs of `width` bytes, the starts
 * of two consecutive runs `pitch` bytes apart (pitch >= width). A plain buffer is one run
 * ({size, 1, size}); a 2D tile of a column-major matrix is one run per column, its pitch the
 * parent's leading dimension in bytes where the tile stays inside its parent, or `width` where it
 * is packed (docs/partitions.md).
 */
typedef struct odx_shape {
	size_t width;
	size_t count;
	size_t pitch;
} odx_shape;

typedef struct odx_host_launch odx_host_launch;

/**
 * One index of a fork-join run (odx_host_launch.run): `i` in [0, n), `thread` the device thread
 * running it (0 .. threads-1, for per-thread scratch). Returns 0, or nonzero to fail the run.
 */
typedef int (*odx_host_task_fn)(void *arg, uint64_t i, int thread);

/** Where a host variant runs: the work-groups [group_first, group_first + group_count). */
struct odx_host_launch {
	void *const *buffers;        /* one pointer per buffer parameter, in signature order */
	const size_t *buffer_sizes;  /* their sizes in bytes */
	const odx_arg_kind *kinds;   /* per parameter, in signature order */
	const void *const *scalars;  /* per parameter: a pointer to the scalar value, NULL for buffers */
	int nparams;
	uint32_t grid[3];            /* number of work-groups in each dimension */
	uint32_t block[3];           /* work-items per group in each dimension */
	uint64_t group_first;        /* linear group index range this call covers */
	uint64_t group_count;
	int device;                  /* ODX device index */
	int thread;                  /* 0 .. threads-1 within the device */
	const char *tag;             /* the task's tag or "" */
	char *error;                 /* the kernel may write a failure message here ... */
	size_t error_size;           /* ... of at most this many bytes; the last byte is read
				      * as a NUL whatever the kernel wrote there */

	/* Added with backend ABI 1.6, set for every host variant; what a one-call variant
	 * (ODX_FORMAT_HOST_CALL) uses to spread its work over the device. */
	int threads;                 /* the device's compute threads (host.threads), >= 1 */
	/* Fork-join: runs fn(arg, i, thread) once for every i in [0, n) on up to `threads` of the
	 * device's own threads (the caller is one of them) and returns when all are done: 0, or
	 * the first nonzero value fn returned (indices not yet started are then skipped). Called
	 * from a work-group variant, or from inside fn, it runs the indices in order on the
	 * calling thread (the device's threads are busy). Call it as l->run(l, n, fn, arg). */
	int (*run)(const odx_host_launch *l, uint64_t n, odx_host_task_fn fn, void *arg);
	void *run_state;             /* the backend's, for run; do not touch */

	/* Added with backend ABI 1.7: per buffer parameter, the layout of its bytes (odx_shape).
	 * A tile of a partitioned matrix on a CPU device is reached in place, inside its parent:
	 * buffers[i] is its first byte, buffer_sizes[i] its span (pitch * (count - 1) + width). */
	const odx_shape *buffer_shapes;

	/* Added with backend ABI 1.8 (docs/sizes.md), set for every host variant. Per buffer
	 * parameter (indexed like buffers), its length in bytes when the task starts (<= its
	 * size; for a buffer with parts, the sum of the part lengths). */
	const size_t *buffer_lengths;
	/* Sets the length of buffer parameter `param` (indexed like buffers; one the task writes,
	 * W or RW) to `bytes` once the task succeeds: part = ODX_WHOLE_BUFFER (-1) for the whole
	 * buffer, else part `part` of a buffer with parts (odx_buffer_set_parts). Callable from
	 * any thread of the task, any number of times: the last call per (param, part) wins.
	 * A length above the capacity (of the buffer or part), a read-only parameter, a part
	 * that does not exist, a whole length for a buffer with parts or a part of a partition
	 * fails the task (ODX_EKERNEL with a message that says which).
	 * Call it as l->set_length(l, param, part, bytes). */
	void (*set_length)(const odx_host_launch *l, int param, int part, size_t bytes);
	void *length_state;          /* the backend's, for set_length; do not touch */
};

/**
 * A host (C) variant. ODX_FORMAT_HOST_FN: called once per chunk of work-groups, possibly from
 * several threads of the device at once with disjoint ranges. ODX_FORMAT_HOST_CALL: called once
 * per task, on one thread, with the whole grid (group_first 0, group_count all groups) and the
 * device's threads free for it (l->threads, l->run). Returns 0, or a nonzero value to fail the
 * task (ODX_EKERNEL is reported, with the returned value as native code and the message written
 * to l->error).
 */
typedef int (*odx_host_fn)(const odx_host_launch *l);

/** The format of a kernel variant's code. */
typedef enum odx_variant_format {
	ODX_FORMAT_HOST_FN = 1, /* `host_fn` is set */
	ODX_FORMAT_SPIRV = 2,   /* `code` is a SPIR-V module, `entry` its entry point */
	ODX_FORMAT_OPENCL_C = 3,
	ODX_FORMAT_PTX = 4,
	ODX_FORMAT_CUBIN = 5,
	ODX_FORMAT_HIP_CO = 6,
	/* `code` is CUDA C++ source (need not end in a NUL), `entry` an extern "C" __global__
	 * function in it; compiled by the CUDA backend through NVRTC for each device's
	 * architecture, when libnvrtc can be opened (else the variant is skipped). */
	ODX_FORMAT_CUDA_C = 7,
	/* A one-call host variant: `host_fn` is set and runs once per task, with the device's
	 * threads at its disposal (a threaded BLAS call, or its own split through l->run) instead
	 * of once per chunk of work-groups. Backend kind "host" only. The grid and block of
	 * the task reach it unchanged ({1}, {1} is usual). docs/kernels.md, "One-call kernels". */
	ODX_FORMAT_HOST_CALL = 8,
} odx_variant_format;

typedef struct odx_kernel_variant {
	odx_backend_kind backend; /* legacy: the kind that runs it, when backend_name is NULL */
	odx_variant_format format;
	odx_host_fn host_fn;   /* ODX_FORMAT_HOST_FN and ODX_FORMAT_HOST_CALL */
	const void *code;      /* other formats: the image or source (copied at registration) */
	size_t code_size;
	const char *entry;     /* entry point name (copied) */
	/* The backend kind that runs it, by name ("host", "cuda", "mine": see odx_backend_kind;
	 * copied). When not NULL it is what counts and `backend` is ignored (leave it 0); a kind no
	 * open backend has matches no device, as a variant for an absent GPU does. Backends see
	 * the registered copy with both fields set consistently (`backend` ODX_BACKEND_OTHER for a
	 * kind without a constant). */
	const char *backend_name;
} odx_kernel_variant;

typedef struct odx_kernel odx_kernel;

/**
 * Registers a kernel `name` with its signature and variants (all copied). A kernel whose variants
 * match no open device is accepted (another configuration may run it); submitting it fails with
 * ODX_ENOVARIANT. Kernels live until odx_kernel_destroy or odx_close.
 */
ODX_API int odx_kernel_create(odx_context *ctx, const char *name, const odx_param *params,
			      int nparams, const odx_kernel_variant *variants, int nvariants,
			      odx_kernel **out);
/** Destroys a kernel; tasks already submitted with it still run. Afterwards odx_submit and
 * odx_kernel_destroy refuse it (ODX_EINVAL). Its memory is freed at odx_close. */
ODX_API int odx_kernel_destroy(odx_kernel *kernel);

/* ------------------------------------------------------------------------------------------ */
/* Tasks and events                                                                            */
/* ------------------------------------------------------------------------------------------ */

/** One argument of a task, matching the kernel's signature position by position. */
typedef struct odx_arg {
	odx_arg_kind kind;
	/* Buffers: 0 means "as declared"; otherwise it must include the declared mode (a task may
	 * declare more than the kernel does, e.g. RW for a W kernel, never less). */
	odx_access access;
	union {
		odx_buffer *buffer;
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
		struct {
			int32_t arg;       /* ODX_LEN: the buffer argument's index ... */
			int32_t elem_size; /* ... and the element size its length is counted in */
		} len;
	} v;
} odx_arg;

#define ODX_BUF(b, mode) ((odx_arg){.kind = ODX_ARG_BUFFER, .access = (mode), .v.buffer = (b)})
#define ODX_I32(x) ((odx_arg){.kind = ODX_ARG_I32, .v.i32 = (x)})
#define ODX_I64(x) ((odx_arg){.kind = ODX_ARG_I64, .v.i64 = (x)})
#define ODX_F32(x) ((odx_arg){.kind = ODX_ARG_F32, .v.f32 = (x)})
#define ODX_F64(x) ((odx_arg){.kind = ODX_ARG_F64, .v.f64 = (x)})
/* The leading dimension, in elements, of the buffer passed as argument `arg` (an index) of the
 * same task, where the task runs: its parent's ld for a 2D tile used in place in host memory, the
 * tile's own run length where it is packed (device memory); a 1D block or plain buffer's size in
 * elements (a block: its partition's elem_size, else bytes). Matches an I32 or I64 parameter;
 * docs/partitions.md. */
#define ODX_LD(arg) ((odx_arg){.kind = ODX_ARG_LD, .v.i32 = (arg)})
/* The length of the buffer passed as argument `arg` (an index) of the same task, in elements of
 * `elem_size` bytes (rounded down), as the task sees it when it starts: what the tasks before it
 * set (docs/sizes.md). Matches an I32 or I64 parameter, so a kernel with an `n` parameter
 * processes exactly the valid elements. */
#define ODX_LEN(arg, elem_size) ODX__LEN((arg), (elem_size))
#define ODX__LEN(a_, e_)                                                                           \
	((odx_arg){.kind = ODX_ARG_LEN, .v.len = {.arg = (int32_t)(a_), .elem_size = (int32_t)(e_)}})

/** odx_task_opts.flags */
enum {
	/* Return ODX_EAGAIN instead of blocking when the context's in-flight bound is reached. */
	ODX_SUBMIT_NONBLOCK = 1u << 0,
	/* odx_task_opts.on_device says where the task runs (without it: any device). */
	ODX_SUBMIT_ON_DEVICE = 1u << 1,
	/* odx_task_opts.lengths / nlengths are set: length rules applied when the task succeeds. */
	ODX_SUBMIT_LENGTHS = 1u << 2,
};

/**
 * A length rule (docs/sizes.md): how a task on any backend (a GPU kernel cannot call the host)
 * sets a length. After the task succeeds, and before any later task or transfer sees the buffer,
 * the length of buffer argument `arg` (its part `part`; ODX_WHOLE_BUFFER for the whole buffer;
 * ODX_ALL_PARTS for every part i, from element index + i) becomes element `index` of the u32
 * array in buffer argument `from_arg` (which the same task writes, W or RW) times `unit` bytes
 * (0 is read as 1). `arg` must be written by the task too (it may be from_arg itself). Rules that
 * cannot apply are refused at submission (ODX_EINVAL). A length above the capacity (of the buffer
 * or the part) fails the task with ODX_EKERNEL and a message naming the rule, the argument, the
 * part and both numbers. Rules apply before the host variant's set_length calls.
 */
typedef struct odx_length_rule {
	int arg;        /* the buffer argument whose length is set */
	int from_arg;   /* the u32 buffer argument holding the count */
	uint32_t index; /* element of from_arg holding it (part p of ODX_ALL_PARTS: index + p) */
	uint32_t unit;  /* bytes per counted element */
	int part;       /* a part index, ODX_WHOLE_BUFFER or ODX_ALL_PARTS */
} odx_length_rule;

/** odx_task_opts.on_device: the task may run on any device. */
#define ODX_DEVICE_ANY (-1)

/**
 * Options of one submission. Zero-initialise (`odx_task_opts o = {0}`); every zero field means
 * "default", so a zeroed struct runs the task on any device.
 *
 * To run a task on device d (a plain index, 0 .. odx_device_count()-1), set both
 * `.flags = ODX_SUBMIT_ON_DEVICE` and `.on_device = d`: the flag is what makes the index count, so
 * that a zero-initialised struct never pins a task to device 0. `.on_device = ODX_DEVICE_ANY` with
 * the flag means any device too. The older `device` field (0 any, d+1 device d) still works for
 * this release and is then removed (docs/api.md, "Migration"); setting both is refused.
 */
typedef struct odx_task_opts {
	int priority;       /* higher runs first among ready tasks of one device; default 0 */
	int device;         /* legacy, removed after this release: 0 any; d+1 only on device d.
			     * Use flags ODX_SUBMIT_ON_DEVICE and on_device instead. */
	const char *tag;    /* shown in traces and error messages (copied, 63 chars kept) */
	/* Refused (ODX_EINVAL) at submission: a grid whose group count, block whose work-item
	 * count, or launch whose total work-items overflow 64 bits; for built-in kernels, more
	 * than 2^31 - 1 work-items in one dimension (docs/kernels.md). */
	uint32_t grid[3];   /* work-groups per dimension; 0 is read as 1 */
	uint32_t block[3];  /* work-items per group per dimension; 0 is read as 1 */
	unsigned flags;     /* ODX_SUBMIT_* */
	/* Read only with ODX_SUBMIT_ON_DEVICE in flags: the device the task must run on (it must
	 * be able to run the kernel), or ODX_DEVICE_ANY. Added at the end: a program built against
	 * an older odx.h never sets the flag, so the library never reads past its struct. */
	int on_device;
	/* Read only with ODX_SUBMIT_LENGTHS in flags (same reason as on_device): `nlengths` length
	 * rules, applied in order when the task succeeds (copied at submission). */
	const odx_length_rule *lengths;
	int nlengths;
} odx_task_opts;

/** Completion of one task (or of an internal operation). Reference counted. */
typedef struct odx_event odx_event;

/**
 * Submits a task: `kernel` over `args` (nargs must equal the kernel's parameter count).
 * Dependencies on earlier submissions are inferred from the buffers' access modes. Never waits for
 * execution; it waits only when the context already holds `sched.max_inflight` unfinished tasks
 * (back-pressure), or returns ODX_EAGAIN then if opts->flags has ODX_SUBMIT_NONBLOCK.
 * `opts` may be NULL. If `event` is not NULL, *event receives a new reference the caller must
 * release with odx_event_release. A task whose kernel has no variant for any device it may run
 * on is refused with ODX_ENOVARIANT; nothing is submitted then.
 */
ODX_API int odx_submit(odx_context *ctx, odx_kernel *kernel, const odx_arg *args, int nargs,
		       const odx_task_opts *opts, odx_event **event);

/**
 * State of an event: 0 when it completed successfully, ODX_EAGAIN while pending, or the task's
 * error (ODX_EKERNEL, ODX_ECANCELED, ...) when it failed.
 */
ODX_API int odx_event_query(odx_event *ev);
/**
 * Waits up to `timeout_ms` (-1 = forever, 0 = poll) for completion. Returns what
 * odx_event_query would then, except ODX_ETIMEDOUT instead of ODX_EAGAIN.
 */
ODX_API int odx_event_wait(odx_event *ev, int timeout_ms);
/** The failure message of a failed event ("" otherwise). Valid until the event is released or
 * its context closed, whichever comes first. */
ODX_API const char *odx_event_message(odx_event *ev);
/** Drops the caller's reference. NULL is allowed. Afterwards odx_event_query/wait return
 * ODX_EINVAL, odx_event_message "", and a second release is refused (recorded in
 * odx_last_error, nothing dropped). */
ODX_API void odx_event_release(odx_event *ev);
/**
 * Waits up to `timeout_ms` (-1 = forever) until every task submitted so far has finished and
 * deferred buffer destructions have run. Returns 0, ODX_ETIMEDOUT, or the error of the first task
 * that failed since the previous odx_wait_all (the others still ran or were canceled).
 */
ODX_API int odx_wait_all(odx_context *ctx, int timeout_ms);

/* ------------------------------------------------------------------------------------------ */
/* The standard kernel set                                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * Registers built-in kernel `name` ("odx.axpy_f32"; the "odx." may be left out) on `ctx` with its
 * signature and every variant this build of ODX carries: host C always, OpenCL C source, SPIR-V
 * (when glslc was found at build time), CUDA fatbin and PTX (nvcc), HIP code objects (clang with
 * an amdgcn target). docs/kernels.md documents each kernel's parameters and the grid and block it
 * expects. The kernel is owned like one from odx_kernel_create (odx_kernel_destroy or
 * odx_close); each call registers a new one. Unknown names return ODX_ENOENT; *out is not
 * touched on failure.
 */
ODX_API int odx_kernel_builtin(odx_context *ctx, const char *name, odx_kernel **out);

/**
 * The names of the built-in kernels: sets *names (if not NULL) to a NULL-terminated array in
 * static storage and returns how many there are.
 */
ODX_API int odx_kernel_builtin_list(const char *const **names);

/* ------------------------------------------------------------------------------------------ */
/* Distributed execution (docs/distributed.md)                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * One program, many ranks: launched by scripts/odx-run, mpirun or srun, every rank opens a context
 * and submits the same tasks, creates the same buffers and makes the same reads and writes, in the
 * same order. Each task runs on one rank (the owner of the first buffer it writes, by default);
 * ODX moves the bytes between ranks. Reads are collective: every rank gets the data.
 */

/** This process's rank in the job (0 when not launched as several ranks). */
ODX_API int odx_rank(odx_context *ctx);
/** How many ranks the job has (1 when not launched as several ranks). */
ODX_API int odx_size(odx_context *ctx);
/**
 * Sets the rank that owns `buf`: tasks writing it run there. Call it on every rank, before the
 * buffer's first use; the default owner is rank 0. ODX_EINVAL for a rank outside [0, size).
 */
ODX_API int odx_buffer_set_owner(odx_buffer *buf, int rank);
ODX_API int odx_buffer_owner(const odx_buffer *buf);

/** Owner of item `index` of `count` in contiguous blocks over `nranks` ranks. */
static inline int odx_owner_block(long index, long count, int nranks)
{
	return count > 0 && nranks > 0 ? (int)(index * nranks / count) : 0;
}

/** Owner of item `index` dealt round-robin over `nranks` ranks. */
static inline int odx_owner_cyclic(long index, int nranks)
{
	return nranks > 0 ? (int)(index % nranks) : 0;
}

/**
 * Small collectives, for values a program needs on every rank (counts, sizes, timings). Every rank
 * calls them, in the same order relative to its other collectives; one thread at a time per
 * context. odx_allgather: rank r's `len` bytes at `mine` land at all + r * len on every rank
 * (`mine` may already be that slot); `all` holds size * len bytes. `timeout_ms` -1 waits forever
 * (a dead or silent rank ends it with ODX_EPEER). One context: a copy. Meant for kilobytes, not
 * data: every rank sends its bytes to every other.
 */
ODX_API int odx_allgather(odx_context *ctx, const void *mine, size_t len, void *all,
			  int timeout_ms);

/** Reductions of odx_allreduce. */
typedef enum odx_reduce_op {
	ODX_REDUCE_SUM = 1,
	ODX_REDUCE_MIN = 2,
	ODX_REDUCE_MAX = 3,
} odx_reduce_op;

/**
 * `n` values of `kind` (ODX_ARG_I64 or ODX_ARG_F64) at `inout`, reduced element by element over
 * the ranks with `op`, in rank order on every rank: every rank gets the same bits, floating point
 * sums included (i64 sums wrap). Collective, like odx_allgather.
 */
ODX_API int odx_allreduce(odx_context *ctx, odx_arg_kind kind, odx_reduce_op op, void *inout,
			  int n, int timeout_ms);

/**
 * All-to-all of parts whose sizes are known only at run time, as a task of the graph
 * (docs/distributed.md, "Shuffle"). With n = odx_size(ctx), src, dst and counts (counts may be
 * NULL) are arrays of n buffers; src[s] has n parts (odx_buffer_set_parts; on one rank a buffer
 * without parts is one part) whose lengths its writer set. Afterwards dst[d] holds part d of
 * src[0], then part d of src[1], ..., packed in source-rank order, its length is their sum, and
 * counts[d] (at least n * 8 bytes; its length becomes n * 8) holds n uint64_t: the bytes that
 * came from each source. dst[d] and counts[d] live on rank d afterwards (tasks reading them run
 * best there: make rank d their owner); src is not changed.
 *
 * Collective and in program order, like odx_submit: every rank makes the call with the same
 * arrays, and returns at once (nothing waits on the submitting thread). On rank r it is one task
 * that reads src[r] (it waits for its writer) and writes dst[r] and counts[r] (after their
 * earlier users): it sends part d of src[r] to rank d as soon as src[r] is written, each part
 * lands at its final place in dst[r]'s host copy, and it completes when its parts are sent and
 * dst[r] is full. Only valid bytes move; an empty part costs an 8-byte size message. Buffers
 * whose latest copy is on a device are staged through host memory (it reads and writes the host
 * copies). Its event (`*event`, on every rank) completes with it.
 *
 * opts: priority and tag are used (the tag names the task in traces and messages); the task
 * always waits for room under sched.max_inflight. Returns 0, ODX_EINVAL (a NULL array or buffer,
 * a src without n parts, counts too small, a buffer twice among dst and counts, src[r], dst[r]
 * and counts[r] not distinct, a 2D tile), ODX_EBUSY (a partitioned buffer), ODX_ECLOSED or
 * ODX_ENOMEM; nothing is submitted then. The task fails with ODX_ENOSPC on rank d when dst[d] is
 * too small for its parts (the message gives both sizes; no byte is written past its capacity),
 * and with ODX_ECANCELED naming the first failure on every rank when some src[s]'s writer failed;
 * the other ranks never wait for a failed rank's parts.
 */
ODX_API int odx_shuffle(odx_context *ctx, odx_buffer *const *src, odx_buffer *const *dst,
			odx_buffer *const *counts, const odx_task_opts *opts, odx_event **event);

/**
 * odx_wait_all on this rank, then a barrier with every rank of the job: when it returns 0, every
 * task of every rank has finished. ODX_EPEER when a rank failed (the message names it),
 * ODX_ETIMEDOUT, or the first local task error. `timeout_ms` bounds each of the two waits; -1
 * waits forever: for as long as the other ranks take to arrive (computing outside ODX, say),
 * however much longer than fabric.peer_timeout_ms that is. Only a rank that dies or stops
 * answering the fabric's heartbeats (sent by ODX's progress thread, whatever the application
 * does) for fabric.peer_timeout_ms ends it, with ODX_EPEER.
 */
ODX_API int odx_wait_all_ranks(odx_context *ctx, int timeout_ms);

/**
 * Describes the fabric for `odx info`: this rank and the job's size, the provider in use, the
 * libfabric providers present and which one `fabric.provider` picks. Lines end with '\n'.
 * Returns 0 or a negative ODX_E* code; the text is truncated to n bytes.
 */
ODX_API int odx_fabric_describe(odx_context *ctx, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ODX_ODX_H */
